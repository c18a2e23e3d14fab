"""The user's program (or a task's server) as a child of the entrypoint, or in its place."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from .log import Log
from .outcome import exit_status

# Signals Slurm delivers that the program, not this supervisor, must act on.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGCONT)  # fmt: skip
# A stopped program gets SIGTERM, then SIGKILL after this long. Short: the step has already
# failed, and TensorFlow's coordination service catches SIGTERM (its preemption notifier), so a
# multi-worker program does not die of it.
KILL_AFTER_S = 2.0


class Program:
    """The program as a child: signals forwarded, on_end(exit status) called when it ends
    (from a thread of its own)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str],
                 on_end: Callable[[int], None], who: str, log: Log) -> None:  # fmt: skip
        self.child = subprocess.Popen(list(argv), env=dict(env))
        self.started = time.monotonic()
        self.forwarded: set[int] = set()
        self.who, self.log = who, log
        for sig in FORWARDED:
            signal.signal(sig, self._forward)
        threading.Thread(target=lambda: on_end(exit_status(self.child.wait())), daemon=True).start()

    def _forward(self, signum: int, _frame) -> None:
        if signum not in self.forwarded:  # say so once: a time limit shows up as SIGTERM here
            self.forwarded.add(signum)
            self.log(f"{self.who}: passing {signal.Signals(signum).name} on to the program")
        self.child.send_signal(signum)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not ended after KILL_AFTER_S."""
        if self.child.poll() is not None:
            return
        self.child.terminate()
        try:
            self.child.wait(KILL_AFTER_S)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()


def exec_program(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Replace this process with the program, so Slurm's signals reach it directly."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], list(argv), dict(env))
