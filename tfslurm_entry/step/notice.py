"""Slurm's notice that it is stopping the job, and the signals a task's entrypoint passes on.

Slurm stops a job with a signal to every process of its steps (proctrack/cgroup and
proctrack/linuxproc find them all, the program's children included): SIGTERM when it preempts,
requeues or cancels the job or its time limit is reached (then SIGKILL after KillWait or
GraceTime), or the signal `sbatch --signal` names some time before the limit (often SIGUSR1).
TensorFlow's own handlers (PreemptionCheckpointHandler, and tf-keras's BackupAndRestore with
save_before_preemption=True) watch SIGTERM alone. So whatever notice reaches a task, its
program gets one SIGTERM:

- the program starts with SIGUSR1 and SIGUSR2 ignored: Python's default for both is to exit,
  and a warning Slurm sends to the whole step would end the program before it saved;
- a SIGTERM Slurm sent to the whole step has reached the program already: nothing more;
- any other notice (SIGUSR1/SIGUSR2, or SIGTERM from outside Slurm) becomes one SIGTERM;
- later notices are not passed on: Apptainer's starter hands the entrypoint a second copy of
  every signal it gets, and a save must not be interrupted by a second SIGTERM.

The other signals Slurm forwards (SIGINT from srun's Ctrl+C, SIGHUP, SIGCONT) go to the
program only where Slurm did not send them to it already (outside a Slurm step).

Whether Slurm signals the whole step is read once from this process's ancestry: a step's
tasks descend from slurmstepd. (Under Apptainer's --pid the ancestry ends at the container's
first process; the entrypoint then passes every signal on, and a program may see Slurm's
SIGTERM twice.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

NOTICES = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
PASSED = (signal.SIGINT, signal.SIGHUP, signal.SIGCONT)
IGNORED_BY_PROGRAMS = (signal.SIGUSR1, signal.SIGUSR2)
SLURM_STEP_DAEMON = "slurmstepd"


def slurm_signals_whole_step(pid: int | None = None) -> bool:
    """Whether this process runs under a Slurm step daemon, which signals every process of
    the step: one of its ancestors is slurmstepd."""
    proc = Path("/proc")
    pid = pid or os.getpid()
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            return False
        if stat[stat.index("(") + 1 : stat.rindex(")")] == SLURM_STEP_DAEMON:
            return True
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return False


def name(signum: int) -> str:
    return signal.Signals(signum).name


class Notice(NamedTuple):
    """The first notice this task or the step heard: which signal, and when (wall clock)."""

    signum: int
    at: float


class Signals:
    """A task's signal handlers, from the start of its supervision to its end (main thread).

    notice: the first notice of the step this task heard of: its own, or one the head relayed.
    on_notice(signum) is called for this task's own first notice (from the handler: it must
    only queue); deliver() then gives the program its SIGTERM where it needs one. The other
    signals are passed to the program where Slurm did not send them to it already."""

    def __init__(self, on_notice: Callable[[int], None], whole_step: bool) -> None:
        self.on_notice = on_notice
        self.whole_step = whole_step
        self.notice: Notice | None = None
        self.own = False
        """this task's entrypoint got a notice itself"""
        self.delivered = False
        self.target: Callable[[int], None] | None = None
        """sends a signal to the program's process group, once it runs"""

    def install(self) -> None:
        """Handle the signals from now on. Only the main thread may: a member run in a thread
        of its own (the supervision benchmark's) has none."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (*NOTICES, *PASSED):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, _frame) -> None:
        if signum in NOTICES:
            if not self.own:
                self.own = True
                self.notice = self.notice or Notice(signum, time.time())
                self.on_notice(signum)
            return
        if not self.whole_step and self.target is not None:
            self.target(signum)

    def relayed(self) -> None:
        """The head heard of a notice first (another task's)."""
        self.notice = self.notice or Notice(signal.SIGTERM, time.time())

    def deliver(self, signum: int | None) -> bool:
        """Give the program its one SIGTERM for a notice: this task's own (signum) or a relayed
        one (None); whether this sent it. Call once the program runs."""
        if self.delivered or self.target is None:
            return False
        if self.whole_step and (signum is None or signum == signal.SIGTERM):
            # Slurm's SIGTERM reached the program itself; a relayed notice is Slurm's too, and
            # this task's own copy of it (a warning signal, say) is still to come.
            self.delivered = signum is not None
            return False
        self.delivered = True
        self.target(signal.SIGTERM)
        return True


@contextlib.contextmanager
def ignored_by_the_child() -> Iterator[None]:
    """Around starting a program: SIGUSR1 and SIGUSR2 are ignored in it (an ignored signal
    stays ignored across exec), handled again here after. A notice in the fork's
    millisecond is ignored here too: the price of not running Python between fork and exec."""
    old = {signum: signal.signal(signum, signal.SIG_IGN) for signum in IGNORED_BY_PROGRAMS}
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
