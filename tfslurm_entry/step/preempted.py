"""Rank 0's view of a step that Slurm is stopping (preemption, the time limit, a requeue):
which programs have ended since the notice and how, until when rank 0 waits for the rest to
save and end, and the line and verdict that say so.

After Slurm's notice a program that exits, whatever its status (TensorFlow's
PreemptionCheckpointHandler exits 42 once it has saved; a program without a handler dies of
the SIGTERM), is not a failure of the step: rank 0 stops nobody, holds the members that have
ended until every program has (so that none leaves while another still saves), then ends the
step with one line and the verdict `preempted`. A task whose program stopped as asked (exit 0,
or TensorFlow's 42) exits 0, so that neither srun --kill-on-bad-exit nor the step's state calls
an orderly save a failure; any other status is the task's own.
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..log import timestamp
from .notice import Notice, name
from .outcome import GONE, PREEMPTED, SAVED_STATUSES, describe


def sooner(save_timeout: float, windows: Mapping[str, float], left: float | None) -> str | None:
    """Rank 0's line at the notice when Slurm may kill the programs before --save-timeout has
    run out: windows are what Slurm leaves after each kind of notice, as tfslurm-run found them
    (its GraceTime, KillWait), left the seconds to the job's time limit (SLURM_JOB_END_TIME)."""
    known = dict(windows)
    if left is not None:
        known["at the time limit"] = left
    short = sorted((s, what) for what, s in known.items() if s < save_timeout)
    if not short:
        return None
    said = ", ".join(
        f"{what} in {s:.0f} s" if what.startswith("at ") else f"{s:.0f} s {what}"
        for s, what in short
    )
    return (
        f"--save-timeout {save_timeout:.0f} s is longer than Slurm may wait: it kills what has "
        f"not ended {said}; a save must end within its stop's window "
        "(docs/failures.md#how-long-a-save-may-take)"
    )


def task_status(program_status: int) -> int:
    """A task's exit status when its program ended after Slurm's notice."""
    return 0 if program_status in SAVED_STATUSES else program_status


@dataclass
class Preempted:
    """The step after Slurm's notice, as rank 0 keeps it."""

    notice: Notice
    deadline: float
    """time.monotonic() until which rank 0 waits for every program to end"""
    ended: dict[int, int | None] = field(default_factory=dict)
    """rank -> its program's status since the notice (None: gone without one)"""
    last: float | None = None
    """when the last program ended (wall clock)"""
    held: dict[int, socket.socket] = field(default_factory=dict)
    """the members whose programs ended: their connections, closed when the step ends"""
    unended: list[int] = field(default_factory=list)
    """the ranks still running when the deadline passed"""

    def end(self, rank: int, status: int | None) -> None:
        self.ended.setdefault(rank, status)
        self.last = time.time()

    def wait_at_most(self) -> float:
        return max(self.deadline - time.monotonic(), 0.01)

    def started_line(self, me: str, save_timeout: float, started: bool) -> str:
        """Rank 0's line when the notice reaches it."""
        what = f"Slurm's {name(self.notice.signum)} at {timestamp(self.notice.at)}"
        if not started:
            return (
                f"{me}: {what} (preemption, the time limit or a requeue) before any program "
                "started; stopping the step"
            )
        return (
            f"{me}: {what} (preemption, the time limit or a requeue): every program gets "
            f"SIGTERM once; waiting up to {save_timeout:.0f} s for them to save and end"
        )

    def summary(self) -> str:
        """How the programs ended: 'exit 42 (4), exit 143 (SIGTERM) (1)'."""
        counts = Counter(GONE if s is None else describe(s) for s in self.ended.values())
        if len(self.ended) == 1:
            return next(iter(counts))
        return ", ".join(f"{what} ({n})" for what, n in counts.most_common())

    def ended_line(self, me: str, servers: bool) -> str:
        """Rank 0's last line."""
        after = "" if self.last is None else f" within {self.last - self.notice.at:.1f} s"
        programs = "the chief's program" if servers else f"{len(self.ended)} programs"
        late = ""
        if self.unended:
            ranks = ", ".join(map(str, self.unended))
            late = f"; ranks {ranks} had not ended when rank 0 stopped waiting"
        if not self.ended:
            return f"{me}: stopped by Slurm before any program started"
        return (
            f"{me}: stopped by Slurm: {programs} ended{after} of the notice, with "
            f"{self.summary()}{late}"
        )

    def verdict(self) -> str:
        """The step's verdict line (outcome.verdict's `preempted`)."""
        what = f"Slurm's {name(self.notice.signum)} at {timestamp(self.notice.at)}"
        if not self.ended:
            return f"{PREEMPTED}: {what}, before any program started"
        late = f"; ranks {', '.join(map(str, self.unended))} did not end" if self.unended else ""
        return f"{PREEMPTED}: {what}; programs ended with {self.summary()}{late}"
