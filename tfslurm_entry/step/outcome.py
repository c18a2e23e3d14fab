"""How tasks and the step end: exit statuses, the failure that stops a step, and its verdict."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError, TransientError
from ..inprogram.program_end import SAVED_EXIT
from ..log import Log
from .protocol import Abort

ABORTED = 1  # exit status of a task stopped because another one failed
TRANSIENT = TransientError.exit_code  # a task that could not start for a passing reason
GONE = "gone without an exit status"  # a task, or a program, that vanished
LOST = f"is {GONE} (its entrypoint was killed, or its node lost)"
# What a program exits with once it saved on Slurm's notice: 0, or TensorFlow's 42.
SAVED_STATUSES = (0, SAVED_EXIT)
# The step's verdict: the first word of its one line (verdict(), preempted.Preempted.verdict).
COMPLETED, PREEMPTED, INTERRUPTED, FAILED = "completed", "preempted", "interrupted", "failed"
VERDICTS = (COMPLETED, PREEMPTED, INTERRUPTED, FAILED)
UNREACHED = ConfigError.exit_code  # a task that cannot reach a peer: the site's network


def exit_status(returncode: int) -> int:
    """A shell-style exit status: 128 + N for a program killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def describe(status: int) -> str:
    """'exit 137 (SIGKILL)': the status, and the signal it stands for if any."""
    if status == TRANSIENT:
        return f"exit {status} (EX_TEMPFAIL: transient, a requeue may succeed)"
    if status > 128:
        try:
            return f"exit {status} ({signal.Signals(status - 128).name})"
        except ValueError:
            pass
    return f"exit {status}"


class Failure(NamedTuple):
    """Why the step is being stopped: which task, where, and its exit status if it had one."""

    rank: int
    host: str
    status: int | None  # None: the task vanished or never connected
    detail: str = ""
    """what happened, where the exit status does not say it"""

    @property
    def what(self) -> str:
        return self.detail or f"failed with {describe(self.status)}"

    @property
    def retry_may_help(self) -> bool:
        """Killed by a signal, gone (node lost, OOM killer) or unable to start for a passing
        reason (TRANSIENT): not the program's own error."""
        return self.status is None or self.status > 128 or self.status == TRANSIENT

    def __str__(self) -> str:
        return f"rank {self.rank} on {self.host} {self.what}"

    def message(self) -> Abort:
        """The head's abort line to members."""
        return Abort(self.rank, self.host, self.status)

    @classmethod
    def of(cls, abort: Abort) -> Failure:
        """The failure a member hears of."""
        detail = "" if abort.status is not None else "ended without an exit status"
        return cls(abort.rank, abort.host, abort.status, detail)


def verdict(status: int, failure: Failure | None, lost: Sequence[str]) -> str:
    """The step's end in one line whose first word a batch script can act on:

    completed    rank 0's program ended with exit 0 (lost workers, if any, are listed)
    interrupted  a task was killed by a signal, vanished (node lost) or could not start for a
                 passing reason (a port taken): a requeue may succeed
    failed       a program failed with its own exit status: a requeue would fail again

    (The fourth, preempted, is the step Slurm's notice stopped: preempted.Preempted.verdict.)
    """
    if status == 0 and failure is None:
        return COMPLETED + (f"; lost {', '.join(lost)}" if lost else "")
    if failure is None:
        failure = Failure(0, "?", status)
    return f"{INTERRUPTED if failure.retry_may_help else FAILED}: {failure}"


def write_result(path: Path, line: str, log: Log) -> None:
    """Write the verdict whole or not at all (a reader never sees half a line)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(line + "\n")
        tmp.replace(path)
    except OSError as err:
        log(f"cannot write the step's result to {path}: {err.strerror}")
