"""The control connections between rank 0 (the head) and the other tasks of a step (members).

Rank 0 listens on the plan's control address; every member connects there once. One line at a
time each way; after "start", rank 0 says one last line to each member and closes:

    member -> head   "hello JOB.STEP SIZE RANK [ADDR]"  on connecting: its step, the step's task
                                                count; ADDR: its node's address on --network's
                                                interface or subnet (resolve/network.py)
    head -> member   "node HOST ADDR"           with --network an interface or a subnet: each
                                                node's address there, one line per node, first
    head -> member   "probe SECONDS"            every task checked in: check your peers'
                                                TensorFlow ports for at most SECONDS (reach.py)
    member -> head   "reach RANK ok"            it reached every one of them
    member -> head   "reach RANK PEER ADDR WHY" it could not reach that one (reach.REASONS)
    head -> member   "release"                  every task reached its peers: free your port
    member -> head   "released RANK"            it did: nothing of the check answers there now
    head -> member   "start"                    every task freed its port: start the program
    member -> head   "notice RANK SIGNAL"       Slurm's notice reached it (run/notice.py), at any
                                                point; SIGNAL: the signal's number
    head -> member   "notice"                   another task heard Slurm's notice first
    member -> head   "done RANK STATUS"         its program ended (multi-worker tasks); after a
                                                notice, rank 0 closes the connection without a
                                                line once every program has ended
    head -> member   "exit STATUS"              the chief's program ended well (ps/worker servers)
    head -> member   "abort RANK HOST STATUS"   that task failed: stop now, exit non-zero
    head -> member   "other JOB.STEP SIZE"      this is another step's rank 0: the member's step
                                                and this one were given the same port

The step's identity in the hello keeps steps that share a node from talking to each other: a
member that reached another step's rank 0 (two steps' ports collide: rare with the default
windows, impossible with ports Slurm reserved) is turned away with "other" and fails at once,
rather than checking in with, or stopping, a stranger.

Built for steps of thousands of tasks, where every member connects to rank 0 at start-up:
- rank 0 reads every connection from one thread with `selectors` (epoll), not a thread per
  member, and listens with a backlog as deep as the step (the kernel caps it at
  net.core.somaxconn), so a burst of connections is queued instead of dropped;
- a member retries with jittered, growing pauses, so members that started together do not
  knock in lockstep, and it waits for a connection through the kernel's SYN retransmissions
  (about 1 s, then 3 s) instead of giving up on it after half a second;
- rank 0 raises its soft limit on open files to what the step needs, where the hard limit
  allows.
"""

from __future__ import annotations

import contextlib
import queue
import random
import resource
import selectors
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import ConfigError
from .reach import Unreached

RETRY_MIN_S, RETRY_MAX_S = 0.05, 0.5  # pauses between a member's attempts to reach rank 0
CONNECT_TIMEOUT_S = 5.0  # one attempt: time for the kernel to retransmit a dropped SYN twice
MAX_LINE = 256  # longer lines are not ours: the connection is dropped
SPARE_FILES = 64  # open files rank 0 needs besides one per member (program, logs, libraries)

Event = tuple[str, int, object]  # (kind, rank, value): hello/done/lost from members, or own


def files_needed(members: int) -> int:
    return members + SPARE_FILES


def raise_open_files_limit(members: int, host: str) -> None:
    """Let rank 0 hold one connection per member: raise the soft RLIMIT_NOFILE as far as needed.

    Slurm starts tasks with the submitting shell's limits (PropagateResourceLimits), often a
    soft limit of 1024, while the hard limit is usually far higher. Past the hard limit only an
    administrator can help, so say so before anything starts.
    """
    need = files_needed(members)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ConfigError(
            f"rank 0 on {host} supervises {members} tasks and needs {need} open files, but its "
            f"hard limit is {hard} (ulimit -Hn)",
            "raise the nodes' hard nofile limit (limits.conf, or slurmd's LimitNOFILE), or "
            "run fewer, larger tasks",
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


@dataclass
class _Peer:
    """One accepted connection: its rank once it said hello, and what it sent so far."""

    rank: int | None = None
    buffer: bytes = b""


def listen(port: int, members: int) -> socket.socket:
    """Rank 0's listening socket, bound before anything starts (run/preflight.py holds it)."""
    return socket.create_server(("", port), backlog=max(members, 128))


def hello(step: str, size: int, rank: int, address: str | None = None) -> str:
    """A member's first line: which step it belongs to, its rank there, and its node's address
    on the chosen network when the step exchanges them."""
    return f"hello {step} {size} {rank}" + (f" {address}" if address else "")


class ControlServer:
    """Rank 0's listening side: every member's lines as events, from one selector.

    addresses: each member's node address from its hello, by rank (none sent: not there).

    poll() returns ("hello", rank, conn), ("reach", rank, Unreached or None), ("released",
    rank, None), ("notice", rank, signal number), ("done", rank, status), ("lost", rank, None)
    and ("other", rank, "JOB.STEP of
    SIZE tasks") events (a member of another step, already turned away), plus any that other
    threads post() (the program's end, rank 0's own reach report). Only the thread that polls
    may send to or close connections.
    """

    def __init__(self, server: socket.socket, step: str, size: int) -> None:
        self.server = server
        self.step, self.size = step, size
        self.server.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.server, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._posted: queue.SimpleQueue = queue.SimpleQueue()
        self.listening = time.monotonic()
        self.addresses: dict[int, str] = {}

    def post(self, kind: str, rank: int, value: object) -> None:
        """An event from another thread; wakes poll()."""
        self._posted.put((kind, rank, value))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def poll(self, timeout: float | None) -> list[Event]:
        """The next events, waiting at most timeout seconds (none: the timeout passed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        events: list[Event] = []
        while not events:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            for key, _ in self.selector.select(left):
                if key.fileobj is self.server:
                    self._accept()  # no event yet: a member counts once it said hello
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        self._wake_r.recv(4096)
                    while not self._posted.empty():
                        events.append(self._posted.get())
                else:
                    events += self._read(key.fileobj, key.data)
        return events

    def _accept(self) -> None:
        while True:  # everything queued: under a burst, one wake-up accepts hundreds
            try:
                conn, _ = self.server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE and the like: leave it queued, the member waits
                return
            conn.setblocking(False)
            self.selector.register(conn, selectors.EVENT_READ, _Peer())

    def _read(self, conn: socket.socket, peer: _Peer) -> list[Event]:
        try:
            data = conn.recv(4096)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:  # the member is gone
            self.close(conn)
            return [] if peer.rank is None else [("lost", peer.rank, None)]
        *lines, peer.buffer = (peer.buffer + data).split(b"\n")
        if len(peer.buffer) > MAX_LINE:
            self.close(conn)
            return []
        events: list[Event] = []
        for line in lines:
            words = line.decode("ascii", errors="replace").split()
            if peer.rank is None:
                if len(words) not in (4, 5) or words[0] != "hello" or not words[3].isdigit():
                    self.close(conn)  # not one of ours (a port scanner, an older kit)
                    return events
                if words[1:3] != [self.step, str(self.size)]:
                    self.tell(conn, f"other {self.step} {self.size}")
                    return [*events, ("other", int(words[3]), f"{words[1]} of {words[2]} tasks")]
                peer.rank = int(words[3])
                if len(words) == 5:
                    self.addresses[peer.rank] = words[4]
                events.append(("hello", peer.rank, conn))
            elif len(words) >= 3 and words[0] == "reach" and words[1] == str(peer.rank):
                events.append(("reach", peer.rank, Unreached.parse(words[2:])))
            elif words == ["released", str(peer.rank)]:
                events.append(("released", peer.rank, None))
            elif len(words) == 3 and words[:2] == ["notice", str(peer.rank)] and words[2].isdigit():
                events.append(("notice", peer.rank, int(words[2])))
            elif len(words) == 3 and words[0] == "done" and words[2].isdigit():
                events.append(("done", peer.rank, int(words[2])))
                self._forget(conn)  # nothing more to read; rank 0 closes it
                return events
        return events

    def say(self, conn: socket.socket, line: str) -> None:
        """A line before the last one (probe, release, start); the connection stays open."""
        with contextlib.suppress(OSError):  # a short line into an idle socket: never partial
            conn.send(f"{line}\n".encode())

    def say_block(self, conn: socket.socket, lines: list[str], timeout: float = 10.0) -> None:
        """Many lines at once (one per node: more than a socket buffer takes without waiting),
        waiting until they are sent or the timeout passes; the connection stays open."""
        with contextlib.suppress(OSError):
            conn.settimeout(timeout)
            try:
                conn.sendall("".join(f"{line}\n" for line in lines).encode())
            finally:
                conn.setblocking(False)

    def tell(self, conn: socket.socket, line: str) -> None:
        """Rank 0's one and only line to a member (exit or abort), then the connection closes.
        A member that is gone is reported by its own event."""
        self.say(conn, line)
        self.close(conn)

    def close(self, conn: socket.socket) -> None:
        self._forget(conn)
        conn.close()

    def _forget(self, conn: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)

    def __enter__(self) -> ControlServer:
        return self

    def __exit__(self, *_exc) -> None:
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()
        self.selector.close()
        self._wake_w.close()


def _pauses(rng: random.Random) -> Iterator[float]:
    """Full-jitter exponential backoff between RETRY_MIN_S and RETRY_MAX_S."""
    ceiling = RETRY_MIN_S
    while True:
        yield rng.uniform(RETRY_MIN_S / 2, ceiling)
        ceiling = min(ceiling * 2, RETRY_MAX_S)


def connect(address: str, timeout: float) -> socket.socket | None:
    """The connection to rank 0, retried until it answers; None after the timeout.

    The name is looked up once, not on every attempt: thousands of members retrying would
    otherwise put thousands of lookups a second on the site's name service.
    """
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    pauses = _pauses(random.Random())
    found: list[tuple] = []
    while True:
        attempt = min(CONNECT_TIMEOUT_S, max(deadline - time.monotonic(), 0.1))
        try:
            found = found or socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            return _connect_any(found, attempt)
        except OSError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(next(pauses), max(deadline - time.monotonic(), 0)))


def _connect_any(found: list[tuple], timeout: float) -> socket.socket:
    """A connection to the first of the looked-up addresses that answers."""
    error: OSError = OSError("no address")
    for family, kind, proto, _, sockaddr in found:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
        except OSError as err:
            sock.close()
            error = err
            continue
        sock.settimeout(None)
        return sock
    raise error


def send(conn: socket.socket, line: str) -> None:
    """A member's line to rank 0; a rank 0 that is gone is noticed by the member's reader."""
    with contextlib.suppress(OSError):
        conn.sendall(f"{line}\n".encode())


def tell_head(greeting: str, rank: int, address: str, status: int, timeout: float = 2.0) -> bool:
    """Report this task's end to rank 0 on a connection of its own: for a member stopped
    (SIGTERM) before or while it checked in, or one that could not start, which rank 0 would
    otherwise only learn of at its timeout. greeting: the member's hello(). Best effort; False
    if rank 0 did not answer within the timeout."""
    conn = connect(address, timeout)
    if conn is None:
        return False
    with conn:
        send(conn, f"{greeting}\ndone {rank} {status}")
    return True
