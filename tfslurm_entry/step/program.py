"""The user's program (or a task's server) as a child of the entrypoint, or in its place.

The program runs in a process group of its own, and every signal the entrypoint passes on, and
the stop, reach the whole group: a wrapper script's python, a multiprocessing data loader, a
program's background helpers. When the program ends, whatever it left running is stopped too
(what Slurm's proctrack/cgroup does at a step's end, and proctrack/linuxproc, proctrack/pgid
and runs outside Slurm do not): on a node shared with other jobs, a leftover holds CPUs and GPU
memory that the next job was given. The entrypoint is a child subreaper (prctl), so descendants
that left the group (setsid, daemons) come back to it as orphans: they are stopped as well, and
named in a log line.
"""

from __future__ import annotations

import contextlib
import ctypes
import locale
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ..log import Log
from .event import Event
from .notice import ignored_by_the_child
from .outcome import exit_status

# A stopped program gets SIGTERM, then SIGKILL after this long. Short: the step has already
# failed, and TensorFlow's coordination service catches SIGTERM (its preemption notifier), so a
# multi-worker program does not die of it.
KILL_AFTER_S = 2.0
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
# Popen's own setpgid in the child (Python 3.11+), else the classic preexec_fn.
NEW_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}


class Command(NamedTuple):
    """What a task runs: the user's program, or a TensorFlow server (server.py)."""

    argv: Sequence[str]
    env: Mapping[str, str]
    """its whole environment (TF_CONFIG, TMPDIR, ...)"""


class ProgramEnded(Event):
    """The event of this task's program (or server) ending, with its exit status."""

    status: int


class Program:
    """The program as a child in its own process group, on_end(exit status) called when it
    ends (from a thread of its own), after whatever it left running has been stopped.

    It starts with SIGUSR1 and SIGUSR2 ignored (notice.py: Slurm's warning must not end it);
    signals reach it through send(), from the task's handlers (notice.Signals). stop_signal:
    what stop() sends first (a server, which ignores Slurm's signals, gets SIGKILL at once).
    Start it from the main thread: it swaps signal handlers around the fork."""

    def __init__(
        self,
        command: Command,
        on_end: Callable[[int], None],
        who: str,
        log: Log,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        become_subreaper()
        with ignored_by_the_child():
            argv, env = list(command.argv), dict(command.env)
            self.child = subprocess.Popen(argv, env=env, **NEW_GROUP)
        self.group = self.child.pid
        self.started = time.monotonic()
        self.who, self.log = who, log
        self.stop_signal = stop_signal
        self._sweeping = threading.Lock()
        self.terminal = _hand_terminal(self.group)
        threading.Thread(target=self._wait, args=(on_end,), daemon=True).start()

    def _wait(self, on_end: Callable[[int], None]) -> None:
        status = exit_status(self.child.wait())
        if self.terminal:
            _hand_terminal(os.getpgrp())
        self.sweep()
        on_end(status)

    def send(self, signum: int) -> None:
        """signum to the program's whole process group."""
        try:
            os.killpg(self.group, signum)
        except ProcessLookupError:  # the group is empty (or not made yet): the child alone
            if self.child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.child.send_signal(signum)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def stop(self) -> None:
        """stop_signal (SIGTERM) to the whole group, then SIGKILL if the program has not ended
        after KILL_AFTER_S; then whatever it left (sweep)."""
        if self.child.poll() is None:
            self.send(self.stop_signal)
            try:
                self.child.wait(KILL_AFTER_S)
            except subprocess.TimeoutExpired:
                self.send(signal.SIGKILL)
                self.child.wait()
        self.sweep()

    def sweep(self) -> None:
        """Stop what the program left running: the rest of its process group, and the
        descendants that left the group (orphans that came back to this subreaper)."""
        with self._sweeping:
            left = [p for p in descendants(os.getpid()) if p.pid != self.child.pid]
            if not left:
                return
            strays = [p.pid for p in left if p.group != self.group]
            names = ", ".join(f"{p.pid} ({p.name})" for p in left)
            away = f"; {len(strays)} of them left its process group" if strays else ""
            self.log(
                f"{self.who}: the program left {len(left)} processes running: {names}"
                f"{away}; stopping them"
            )
            _terminate(self.group, strays)


class Proc(NamedTuple):
    """A process as /proc shows it."""

    pid: int
    parent: int
    group: int
    name: str
    zombie: bool


def processes() -> list[Proc]:
    """Every process this one can see, from /proc/PID/stat.

    Every task's program end reads every process's (sweep), hundreds on a node of a large step
    that end together: each is read with a plain open and read, not pathlib's, a third of the
    time per process."""
    encoding = locale.getpreferredencoding(False)  # Path.read_text's, as _read_text decodes
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = _read_text(f"/proc/{entry}/stat", encoding)
        except OSError:  # ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        state, parent, group = stat[stat.rindex(")") + 2 :].split()[:3]
        found.append(Proc(int(entry), int(parent), int(group), name, state == "Z"))
    return found


def _read_text(path: str, encoding: str) -> str:
    """The file's text as Path(path).read_text() gives it: decoded strictly, newlines
    translated."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    text = b"".join(chunks).decode(encoding)
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def descendants(pid: int) -> list[Proc]:
    """The living processes below pid: its children, theirs, and so on."""
    children: dict[int, list[Proc]] = {}
    for proc in processes():
        children.setdefault(proc.parent, []).append(proc)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child.pid)
            if not child.zombie:
                found.append(child)
    return found


def become_subreaper() -> None:
    """Orphaned descendants of the program are re-parented to this process, not to init, so
    that sweep() finds them. Linux only; elsewhere nothing happens."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True  # PermissionError too: a member that changed its user is still there


def _terminate(group: int, strays: Sequence[int]) -> None:
    """SIGTERM to the group and the strays, SIGKILL to what is left after KILL_AFTER_S;
    orphans that come back to this process are reaped."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + KILL_AFTER_S
        while time.monotonic() < deadline:
            _reap_orphans(group, strays)
            if not _group_alive(group) and not any(_alive(pid) for pid in strays):
                return
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _reap_orphans(group: int, strays: Sequence[int]) -> None:
    """Collect the exit status of the program's orphans re-parented to this process (the
    subreaper), which would otherwise stay zombies and keep their process group alive."""
    for proc in processes():
        ours = proc.group == group or proc.pid in strays
        if ours and proc.parent == os.getpid() and proc.zombie:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(proc.pid, os.WNOHANG)


def _hand_terminal(group: int) -> bool:
    """With an interactive terminal (srun --pty), make group its foreground process group, so
    that a program in a group of its own can still read from it; whether it did."""
    try:
        if not os.isatty(0) or os.tcgetpgrp(0) not in (os.getpgrp(), group):
            return False
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may not
        try:
            os.tcsetpgrp(0, group)
        finally:
            signal.signal(signal.SIGTTOU, old)
    except OSError:
        return False
    return True


def exec_program(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Replace this process with the program, so Slurm's signals reach it directly."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], list(argv), dict(env))
