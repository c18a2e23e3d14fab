"""Step supervision: the tasks of a multi-task step start, end and fail together.

Without it a finished parameter-server job sits in its allocation until the time limit (ps and
worker servers only ever `join()`), and when one task dies the others wait forever on
collectives or RPCs unless the user remembered `srun --kill-on-bad-exit=1`. So rank 0's
entrypoint (the head) runs its program as a child and listens on the plan's control address;
every other task's entrypoint (a member) connects there, one line at a time each way:

    member -> head   "hello RANK"               on connecting
    member -> head   "done RANK STATUS"         its program ended (multi-worker tasks)
    head -> member   "exit STATUS"              the chief's program ended well (ps/worker servers)
    head -> member   "abort RANK HOST STATUS"   that task failed: stop now, exit non-zero

A member that loses the head, or cannot reach it within the timeout, stops as if told to
abort; the head treats a member that drops before "done", or never connects within the
timeout, as failed, and once the step has failed it stays to tell members that connect late.
Every decision is one log line naming the rank, host and reason.

A lost worker is not a failure in a parameter-server step (when the step allows restarts): the
ClusterCoordinator runs its steps on the other workers, so rank 0 logs the loss and goes on as
long as the chief, every ps and at least one worker remain. A member whose worker server dies
restarts it in place first, and reports it to rank 0 only once its restarts are used up.

A slow end is not a failure: when every other task has ended well and rank 0's program is
still running (a chief evaluating, writing metrics), the head waits for it without limit, as
Slurm itself would. It creates the file named by ``others_ended`` at that moment, so that the
program can leave last (tfslurm_entry.tf.end_of_job: TensorFlow's coordination service lives in
rank 0's process, and a task still running when it goes logs errors).
"""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .control import ControlServer, Event, connect

# Signals Slurm delivers that the program, not this supervisor, must act on.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGCONT)  # fmt: skip
# An aborted program gets SIGTERM, then SIGKILL after this long. Short: the step has already
# failed, and TensorFlow's coordination service catches SIGTERM (its preemption notifier), so a
# multi-worker program does not die of it.
KILL_AFTER_S = 2.0
ABORTED = 1  # exit status of a task stopped because another one failed
GONE = "is gone without an exit status (its entrypoint was killed, or its node lost)"
# Rank 0's program in a multi-worker step gets this variable: the path of a file that appears
# once every other task's program has ended with exit 0 (tfslurm_entry.tf.end_of_job waits).
OTHERS_ENDED_VAR = "TFSLURM_OTHERS_ENDED"

Log = Callable[[str], None]


def timestamp(seconds: float) -> str:
    """Wall-clock time in ISO 8601 UTC, comparable across nodes and with sacct's times."""
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")


def exit_status(returncode: int) -> int:
    """A shell-style exit status: 128 + N for a program killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def describe(status: int) -> str:
    """'exit 137 (SIGKILL)': the status, and the signal it stands for if any."""
    if status > 128:
        try:
            return f"exit {status} ({signal.Signals(status - 128).name})"
        except ValueError:
            pass
    return f"exit {status}"


class Program:
    """The user's program as a child: signals forwarded, on_end(exit status) called when it ends
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


def _send(conn: socket.socket, line: str) -> None:
    with contextlib.suppress(OSError):  # rank 0 gone: the reading thread reports it
        conn.sendall(f"{line}\n".encode())


@dataclass(frozen=True)
class Failure:
    """Why the step is being stopped: which task, where, and its exit status if it had one."""

    rank: int
    host: str
    status: int | None  # None: the task vanished or never connected
    detail: str = ""

    @property
    def what(self) -> str:
        return f"failed with {describe(self.status)}" if self.status is not None else self.detail

    @property
    def retry_may_help(self) -> bool:
        """Killed by a signal or gone (node lost, OOM killer): not the program's own error."""
        return self.status is None or self.status > 128

    def __str__(self) -> str:
        return f"rank {self.rank} on {self.host} {self.what}"

    def message(self) -> str:
        return f"abort {self.rank} {self.host} {'-' if self.status is None else self.status}"

    @classmethod
    def parse(cls, words: Sequence[str]) -> Failure | None:
        """From the words of an abort line; None if it is not one."""
        if len(words) != 4 or words[0] != "abort" or not words[1].isdigit():
            return None
        status = int(words[3]) if words[3].isdigit() else None
        return cls(int(words[1]), words[2], status, "ended without an exit status")


def run_head(
    argv: Sequence[str],
    env: Mapping[str, str],
    port: int,
    host: str,
    members: Mapping[int, str],
    servers: bool,
    timeout: float,
    log: Log,
    others_ended: Path | None = None,
    expendable: Mapping[int, str] | None = None,
    result_file: Path | None = None,
) -> int:
    """Rank 0: run the program, hear from every member (rank -> host), end the step together.

    servers: the members are parameter-server ps/worker servers, which run until told; else
    they run programs of their own and report when those end. others_ended: a file created
    once every member's program has ended with exit 0. expendable: the members the step can
    lose (worker rank -> "worker I"), as long as one of them remains. result_file: where to
    write the step's verdict (verdict()) for the batch script. Returns this task's exit status.
    """
    with ControlServer(port, len(members)) as control:
        head = _Head(control, host, members, servers, timeout, log, others_ended, expendable)
        head.program = Program(argv, env, lambda status: control.post("program", 0, status),
                               head.me, log)  # fmt: skip
        while head.going:
            for event in control.poll(head.wait_at_most()) or [head.late()]:
                head.handle(*event)
    status = head.result()
    if result_file is not None:
        write_result(result_file, verdict(status, head.failure, head.lost), log)
    return status


def verdict(status: int, failure: Failure | None, lost: Sequence[str]) -> str:
    """The step's end in one line whose first word a batch script can act on:

    completed    rank 0's program ended with exit 0 (lost workers, if any, are listed)
    interrupted  a task was killed by a signal or vanished (node lost): a requeue may succeed
    failed       a program failed with its own exit status: a requeue would fail again
    """
    if status == 0 and failure is None:
        return "completed" + (f"; lost {', '.join(lost)}" if lost else "")
    if failure is None:
        failure = Failure(0, "?", status)
    return f"{'interrupted' if failure.retry_may_help else 'failed'}: {failure}"


def write_result(path: Path, line: str, log: Log) -> None:
    """Write the verdict whole or not at all (a reader never sees half a line)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(line + "\n")
        tmp.replace(path)
    except OSError as err:
        log(f"cannot write the step's result to {path}: {err.strerror}")


class _Head:
    """What rank 0 knows of the step, and what it does on each event (run_head's state)."""

    def __init__(
        self,
        control: ControlServer,
        host: str,
        members: Mapping[int, str],
        servers: bool,
        timeout: float,
        log: Log,
        others_ended: Path | None,
        expendable: Mapping[int, str] | None = None,
    ) -> None:
        self.control, self.host, self.members, self.servers = control, host, members, servers
        self.timeout, self.log, self.others_ended = timeout, log, others_ended
        self.me = f"rank 0 on {host}"
        self.program: Program | None = None
        self.deadline = control.listening + timeout
        self.waiting = set(members)  # not connected yet
        self.running: dict[int, socket.socket] = {}  # connected, not finished
        self.status: int | None = None  # this task's program's
        self.failure: Failure | None = None
        self.ends: list[float] = []  # wall-clock times at which programs ended well
        self.expendable = dict(expendable or {})  # rank -> "worker I": members it can lose
        self.lost: list[str] = []  # "worker I (rank R on HOST)", in the order they were lost

    @property
    def going(self) -> bool:
        # After a failure, keep answering until every member has checked in (or the timeout
        # has passed): one that connects late must hear the abort, not find no one listening
        # and run its program until its own timeout.
        if self.status is None or self.waiting:
            return True
        return self.failure is None and bool(self.running)

    def wait_at_most(self) -> float | None:
        return max(self.deadline - time.monotonic(), 0.01) if self.waiting else None

    def late(self) -> Event:
        """The event for the timeout passing: poll() comes back empty only when it had one,
        which it has only while members are missing."""
        return ("late", min(self.waiting), None)

    def handle(self, kind: str, rank: int, value) -> None:
        failed = None
        if kind == "program":
            failed = self._program_ended(value)
        elif kind == "hello" and rank in self.waiting:
            self._checked_in(rank, value)
        elif kind == "hello":
            self.control.close(value)  # a rank this step does not have, or a second connection
        elif kind == "done" and rank in self.running:
            self.control.close(self.running.pop(rank))
            if value != 0:
                failed = Failure(rank, self.members[rank], value)
            else:
                self._ended_well()
        elif kind == "lost" and rank in self.running:
            self.control.close(self.running.pop(rank))
            failed = Failure(rank, self.members[rank], None, GONE)
        elif kind == "late":
            self.waiting.discard(rank)
            failed = Failure(rank, self.members[rank], None,
                             f"did not connect to rank 0 within {self.timeout:.0f} s (never "
                             f"started, or cannot reach {self.host})")  # fmt: skip
        if failed and self.failure is None:
            if kind != "late" and self._can_lose(failed.rank):
                self._lose(failed)
            else:
                self._fail(failed)

    def _can_lose(self, rank: int) -> bool:
        """A worker of a parameter-server step, while the chief works and another remains."""
        if rank not in self.expendable or self.status is not None:
            return False
        return len(self.expendable) - len(self.lost) > 1

    def _lose(self, failure: Failure) -> None:
        name = f"{self.expendable[failure.rank]} (rank {failure.rank} on {failure.host})"
        self.lost.append(name)
        left = len(self.expendable) - len(self.lost)
        self.log(f"{self.me}: {name} lost: {failure.what}; continuing with {left} workers")

    def _program_ended(self, status: int) -> Failure | None:
        self.status = status
        if status != 0:
            return Failure(0, self.host, status)
        self.ends.append(time.time())
        if self.servers:
            lost = f" ({len(self.lost)} lost on the way)" if self.lost else ""
            self.log(
                f"{self.me}: chief program ended with exit 0 after {self.program.seconds:.1f} s "
                f"(at {timestamp(self.ends[-1])}); telling {len(self.running)} servers to stop"
                + lost
            )
            self._tell_all("exit 0")
        elif self.waiting or self.running:
            self.log(
                f"{self.me}: program ended with exit 0 after {self.program.seconds:.1f} s; "
                f"waiting for {len(self.waiting) + len(self.running)} other tasks"
            )
        return None

    def _checked_in(self, rank: int, conn: socket.socket) -> None:
        self.waiting.discard(rank)
        if not self.waiting:
            took = time.monotonic() - self.control.listening
            self.log(f"{self.me}: all {len(self.members) + 1} tasks checked in {took:.2f} s "
                     "after rank 0 listened")  # fmt: skip
        if self.failure:
            self.control.tell(conn, self.failure.message())
        elif self.status == 0 and self.servers:
            self.control.tell(conn, "exit 0")
        else:
            self.running[rank] = conn

    def _ended_well(self) -> None:
        self.ends.append(time.time())
        if not self.waiting and not self.running and self.status is None and self.others_ended:
            self.others_ended.touch()  # rank 0's program may now leave last

    def _fail(self, failure: Failure) -> None:
        self.failure = failure
        still = len(self.running) + (self.status is None)
        self.log(f"{self.me}: {failure}; stopping the step ({still} tasks still running)")
        self._tell_all(failure.message())
        self.program.stop()

    def _tell_all(self, line: str) -> None:
        for conn in self.running.values():
            self.control.tell(conn, line)
        self.running.clear()

    def result(self) -> int:
        failure, status, ends = self.failure, self.status, self.ends
        if failure is None and status == 0 and not self.servers:
            self.log(
                f"{self.me}: all {len(self.members) + 1} programs ended with exit 0, the "
                f"last at {timestamp(ends[-1])} ({ends[-1] - ends[0]:.1f} s after the first)"
            )
        return ABORTED if failure is not None and failure.rank != 0 else status


def run_member(
    rank: int,
    host: str,
    address: str,
    timeout: float,
    log: Log,
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    server: str | None = None,
    restarts: int = 0,
) -> int:
    """Any rank but 0: run the program (argv) and check in with the head; end as it says or
    as the program does. Returns this task's exit status.

    server: the program is this task's TensorFlow server ("worker 1 server"), which runs until
    the head says the chief has ended; one that dies is started again in place, at most
    `restarts` times, before the head hears of it.
    """
    me = f"rank {rank} on {host}"
    events: queue.Queue = queue.Queue()

    def start() -> Program:
        return Program(argv, env or {}, lambda status: events.put(("program", 0, status)),
                       me, log)  # fmt: skip

    # The program starts at once (its TensorFlow import overlaps rank 0's start-up) and is
    # stopped if rank 0 never answers: without rank 0 the step cannot finish anyway.
    program = None if argv is None else start()
    conn = connect(address, timeout)
    if conn is None:
        log(f"{me}: rank 0's control address {address} did not answer within {timeout:.0f} s; "
            f"stopping, exiting with {ABORTED}")  # fmt: skip
        if program is not None:
            program.stop()
        return ABORTED
    used = 0
    with conn:
        _send(conn, f"hello {rank}")
        threading.Thread(target=_read_head, args=(conn, events), daemon=True).start()
        while True:
            kind, _, value = events.get()
            if kind != "program" or server is None or used >= restarts:
                break
            if not _restartable(value, program):
                break
            used += 1
            log(f"{me}: {server} ended with {describe(value)}; restarting it in place "
                f"(restart {used} of {restarts})")  # fmt: skip
            program = start()
        if kind == "program":
            _send(conn, f"done {rank} {value}")
            if server is not None and value == 128 + signal.SIGTERM:
                log(f"{me}: got SIGTERM (Slurm is stopping the step); exiting with {value}")
            elif server is not None:
                after = f" after {used} restarts" if used else ""
                log(f"{me}: {server} ended with {describe(value)}{after}; told rank 0")
            elif value != 0:
                log(f"{me}: program failed with {describe(value)}; told rank 0")
            return value
        if kind == "exit":  # only servers hear it: they run until told
            if program is not None:
                program.stop()
            log(f"{me}: chief ended with exit 0; exiting with 0")
            return 0
        if kind == "abort":
            log(f"{me}: stopping: {value}; exiting with {ABORTED}")
        else:
            log(f"{me}: lost rank 0's control connection (rank 0 killed or its node lost); "
                f"stopping, exiting with {ABORTED}")  # fmt: skip
        if program is not None:
            program.stop()
        return ABORTED


def _restartable(status: int, program: Program | None) -> bool:
    """A server that died of something other than Slurm stopping the step (SIGTERM)."""
    stopping = program is not None and signal.SIGTERM in program.forwarded
    return not stopping and status != 128 + signal.SIGTERM


def _read_head(conn: socket.socket, events: queue.Queue) -> None:
    try:
        words = conn.makefile(encoding="ascii", errors="replace").readline().split()
    except OSError:  # reset: rank 0's process or node is gone
        words = []
    if words == ["exit", "0"]:
        events.put(("exit", 0, 0))
    elif failure := Failure.parse(words):
        events.put(("abort", 0, failure))
    else:
        events.put(("lost", 0, None))
