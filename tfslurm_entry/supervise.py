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

# Signals Slurm delivers that the program, not this supervisor, must act on.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGCONT)  # fmt: skip
RETRY_S = 0.5  # between attempts to reach the head
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
    """The user's program as a child: signals forwarded, its end reported as an event."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], events: queue.Queue,
                 who: str, log: Log) -> None:  # fmt: skip
        self.child = subprocess.Popen(list(argv), env=dict(env))
        self.started = time.monotonic()
        self.forwarded: set[int] = set()
        self.who, self.log = who, log
        for sig in FORWARDED:
            signal.signal(sig, self._forward)
        threading.Thread(target=self._wait, args=(events,), daemon=True).start()

    def _forward(self, signum: int, _frame) -> None:
        if signum not in self.forwarded:  # say so once: a time limit shows up as SIGTERM here
            self.forwarded.add(signum)
            self.log(f"{self.who}: passing {signal.Signals(signum).name} on to the program")
        self.child.send_signal(signum)

    def _wait(self, events: queue.Queue) -> None:
        events.put(("program", None, exit_status(self.child.wait())))

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
    with contextlib.suppress(OSError):  # a member that is gone is reported by its own event
        conn.sendall(f"{line}\n".encode())


def _read_member(conn: socket.socket, events: queue.Queue) -> None:
    """Turn one member's lines into events: hello, done, and lost when it drops."""
    lines = conn.makefile(encoding="ascii", errors="replace")
    hello = lines.readline().split()
    if len(hello) != 2 or hello[0] != "hello" or not hello[1].isdigit():
        conn.close()  # not one of ours (a port scanner, a stale step)
        return
    rank = int(hello[1])
    events.put(("hello", rank, conn))
    for line in lines:
        words = line.split()
        if len(words) == 3 and words[0] == "done" and words[2].isdigit():
            events.put(("done", rank, int(words[2])))
            return
    events.put(("lost", rank, None))


def _accept(server: socket.socket, events: queue.Queue) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return  # closed: the head is finishing
        threading.Thread(target=_read_member, args=(conn, events), daemon=True).start()


@dataclass(frozen=True)
class Failure:
    """Why the step is being stopped: which task, where, and its exit status if it had one."""

    rank: int
    host: str
    status: int | None  # None: the task vanished or never connected
    detail: str = ""

    def __str__(self) -> str:
        what = f"failed with {describe(self.status)}" if self.status is not None else self.detail
        return f"rank {self.rank} on {self.host} {what}"

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
) -> int:
    """Rank 0: run the program, hear from every member (rank -> host), end the step together.

    servers: the members are parameter-server ps/worker servers, which run until told; else
    they run programs of their own and report when those end. others_ended: a file created
    once every member's program has ended with exit 0. Returns this task's exit status.
    """
    me = f"rank 0 on {host}"
    events: queue.Queue = queue.Queue()
    server = socket.create_server(("", port))
    threading.Thread(target=_accept, args=(server, events), daemon=True).start()
    program = Program(argv, env, events, me, log)
    deadline = time.monotonic() + timeout
    waiting = set(members)  # not connected yet
    running: dict[int, socket.socket] = {}  # connected, not finished
    status: int | None = None  # this task's program's
    failure: Failure | None = None
    ends: list[float] = []  # wall-clock times at which programs ended well
    with server:
        # After a failure, keep answering until every member has checked in (or the timeout
        # has passed): one that connects late must hear the abort, not find no one listening
        # and run its program until its own timeout.
        while status is None or waiting or (failure is None and running):
            left = max(deadline - time.monotonic(), 0.01) if waiting else None
            try:
                kind, rank, value = events.get(timeout=left)
            except queue.Empty:
                kind, rank, value = "late", min(waiting), None
            failed = None
            if kind == "program":
                status = value
                if status != 0:
                    failed = Failure(0, host, status)
                elif servers:
                    ends.append(time.time())
                    log(
                        f"{me}: chief program ended with exit 0 after {program.seconds:.1f} s "
                        f"(at {timestamp(ends[-1])}); telling {len(members)} servers to stop"
                    )
                    for conn in running.values():
                        _send(conn, "exit 0")
                    running.clear()
                else:
                    ends.append(time.time())
                    if waiting or running:
                        log(f"{me}: program ended with exit 0 after {program.seconds:.1f} s; "
                            f"waiting for {len(waiting) + len(running)} other tasks")  # fmt: skip
            elif kind == "hello" and rank in waiting:
                waiting.discard(rank)
                if failure:
                    _send(value, failure.message())
                elif status == 0 and servers:
                    _send(value, "exit 0")
                else:
                    running[rank] = value
            elif kind == "hello":
                value.close()  # a rank this step does not have, or one already checked in
            elif kind == "done" and rank in running:
                running.pop(rank).close()
                if value != 0:
                    failed = Failure(rank, members[rank], value)
                else:
                    ends.append(time.time())
                    if not waiting and not running and status is None and others_ended:
                        others_ended.touch()  # rank 0's program may now leave last
            elif kind == "lost" and rank in running:
                running.pop(rank).close()
                failed = Failure(rank, members[rank], None, GONE)
            elif kind == "late":
                waiting.discard(rank)
                failed = Failure(rank, members[rank], None,
                                 f"did not connect to rank 0 within {timeout:.0f} s (never "
                                 f"started, or cannot reach {host})")  # fmt: skip
            if failed and failure is None:
                failure = failed
                still = len(running) + (status is None)
                log(f"{me}: {failure}; stopping the step ({still} tasks still running)")
                for conn in running.values():
                    _send(conn, failure.message())
                    conn.close()
                running.clear()
                program.stop()
    if failure is None and status == 0 and not servers:
        log(f"{me}: all {len(members) + 1} programs ended with exit 0, the last at "
            f"{timestamp(ends[-1])} ({ends[-1] - ends[0]:.1f} s after the first)")  # fmt: skip
    return ABORTED if failure is not None and failure.rank != 0 else status


def connect(address: str, timeout: float) -> socket.socket | None:
    """The connection to the head, retried until it answers; None after the timeout."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=RETRY_S)
            conn.settimeout(None)
            return conn
        except OSError:
            if time.monotonic() > deadline:
                return None
            time.sleep(RETRY_S)


def tell_head(rank: int, address: str, status: int, timeout: float = 2.0) -> bool:
    """Report this task's end to the head on a connection of its own: for a member stopped
    (SIGTERM) before or while it checked in, which the head would otherwise only learn of at
    its timeout. Best effort; False if the head did not answer within the timeout."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as conn:
            conn.sendall(f"hello {rank}\ndone {rank} {status}\n".encode())
    except OSError:
        return False
    return True


def run_member(
    rank: int,
    host: str,
    address: str,
    timeout: float,
    log: Log,
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Any rank but 0: run the program (argv) or, for a server, nothing more; check in with
    the head and end as it says or as the program does. Returns this task's exit status."""
    me = f"rank {rank} on {host}"
    events: queue.Queue = queue.Queue()
    # The program starts at once (its TensorFlow import overlaps rank 0's start-up) and is
    # stopped if rank 0 never answers: without rank 0 the step cannot finish anyway.
    program = Program(argv, env or {}, events, me, log) if argv is not None else None
    conn = connect(address, timeout)
    if conn is None:
        log(f"{me}: rank 0's control address {address} did not answer within {timeout:.0f} s; "
            f"stopping, exiting with {ABORTED}")  # fmt: skip
        if program is not None:
            program.stop()
        return ABORTED
    with conn:
        _send(conn, f"hello {rank}")
        threading.Thread(target=_read_head, args=(conn, events), daemon=True).start()
        kind, _, value = events.get()
        if kind == "program":
            _send(conn, f"done {rank} {value}")
            if value != 0:
                log(f"{me}: program failed with {describe(value)}; told rank 0")
            return value
        if kind == "exit":
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


def _read_head(conn: socket.socket, events: queue.Queue) -> None:
    words = conn.makefile(encoding="ascii", errors="replace").readline().split()
    if words == ["exit", "0"]:
        events.put(("exit", 0, 0))
    elif failure := Failure.parse(words):
        events.put(("abort", 0, failure))
    else:
        events.put(("lost", 0, None))
