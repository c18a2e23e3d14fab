"""The control connections between rank 0 (the head) and the other tasks of a step (members):
the sockets that carry protocol.py's messages, one line at a time each way.

Rank 0 listens on the plan's control address; every member connects there once, hears a
challenge, says hello with its proof of the step's secret (secret.py), and hears lines until
rank 0 says its last one and closes (protocol.py has the table).

Built for steps of thousands of tasks, where every member connects to rank 0 at start-up:
- rank 0 reads every connection from one thread with `selectors` (epoll), not a thread per
  member, and listens with a backlog as deep as the step (the kernel caps it at
  net.core.somaxconn), so a burst of connections is queued instead of dropped;
- a member retries with jittered, growing pauses (dial.py, the member's end);
- rank 0 raises its soft limit on open files to what the step needs, where the hard limit
  allows.
"""

from __future__ import annotations

import contextlib
import queue
import resource
import selectors
import socket
import time
from dataclasses import dataclass, field

from ..errors import ConfigError
from .event import Event
from .protocol import (
    NEED_DATA,
    Challenge,
    Connection,
    Done,
    Ended,
    Hello,
    Message,
    Other,
    Refusal,
    RemoteProtocolError,
)
from .secret import Secret, new_nonce

SPARE_FILES = 64  # open files rank 0 needs besides one per member (program, logs, libraries)


class Arrived(Event):
    """A member said hello for this step: its connection is rank 0's to answer."""

    rank: int
    conn: socket.socket


class Lost(Event):
    """A member's connection closed before it said it was done (why: it was closed for a line
    out of the conversation)."""

    rank: int
    why: str | None = None


class Garbled(Event):
    """A connection that said something not of the step's conversation before its hello (a
    port scanner, another kit's version): closed without a word."""

    peer: str
    error: RemoteProtocolError


class Stranger(Event):
    """A member of another step reached this port; it was turned away with Other."""

    hello: Hello


class Refused(Event):
    """A hello for this step that did not prove the step's secret, from `peer` (host:port):
    not one of the step's tasks. It was told Refusal and closed; the rank it named stays free."""

    hello: Hello
    peer: str


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
    """One accepted connection: the nonce it was sent, its rank once it said hello (and
    proved it), and rank 0's side of its conversation."""

    nonce: str
    address: str
    rank: int | None = None
    connection: Connection = field(default_factory=lambda: Connection("head"))


def listen(port: int, members: int) -> socket.socket:
    """Rank 0's listening socket, bound before anything starts (task/hold.py holds it)."""
    return socket.create_server(("", port), backlog=max(members, 128))


class ControlServer:
    """Rank 0's listening side: every member's lines as events, from one selector.

    addresses: each member's node address from its hello, by rank (none sent: not there).

    poll() returns Arrived, Lost, Stranger, Refused and Garbled events and the members'
    Reached, Released, Heard and Done messages, plus any event other threads post() (the
    program's end, rank 0's own reach report, Slurm's notice). Only the thread that polls may
    send to or close connections.
    """

    def __init__(self, server: socket.socket, step: str, size: int, secret: Secret) -> None:
        self.server = server
        self.step, self.size, self.secret = step, size, secret
        self.server.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.server, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._posted: queue.SimpleQueue = queue.SimpleQueue()
        self.listening = time.monotonic()
        self.addresses: dict[int, str] = {}
        self._peers: dict[socket.socket, _Peer] = {}

    def post(self, event: object) -> None:
        """An event from another thread; wakes poll()."""
        self._posted.put(event)
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
                conn, where = self.server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE and the like: leave it queued, the member waits
                return
            conn.setblocking(False)
            peer = _Peer(new_nonce(), f"{where[0]}:{where[1]}")
            self._peers[conn] = peer
            self.say(conn, Challenge.now(peer.nonce))
            self.selector.register(conn, selectors.EVENT_READ, peer)

    def _read(self, conn: socket.socket, peer: _Peer) -> list[Event]:
        try:
            data = conn.recv(4096)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        events: list[Event] = []
        peer.connection.receive_data(data)
        while True:
            try:
                message = peer.connection.next_event()
            except RemoteProtocolError as err:
                self.close(conn)
                if peer.rank is None:
                    return [*events, Garbled(peer.address, err)]
                return [*events, Lost(peer.rank, f"said what rank 0 cannot read ({err})")]
            if message is NEED_DATA:
                return events
            if isinstance(message, Ended):  # the member is gone
                self.close(conn)
                return events if peer.rank is None else [*events, Lost(peer.rank)]
            if isinstance(message, Hello):
                if not message.same_step(self.step, self.size):
                    self.tell(conn, Other(self.step, self.size))
                    return [*events, Stranger(message)]
                if not self.secret.proves(peer.nonce, message.words(), message.proof):
                    self.tell(conn, Refusal())
                    return [*events, Refused(message, peer.address)]
                peer.rank = message.rank
                if message.address:
                    self.addresses[peer.rank] = message.address
                events.append(Arrived(peer.rank, conn))
                continue
            events.append(message)
            if isinstance(message, Done):
                self._forget(conn)  # nothing more to read; rank 0 closes it
                return events

    def say(self, conn: socket.socket, message: Message) -> None:
        """A line before the last one (probe, release, start); the connection stays open."""
        data = self._peers[conn].connection.send(message)
        with contextlib.suppress(OSError):  # a short line into an idle socket: never partial
            conn.send(data)

    def say_block(
        self, conn: socket.socket, messages: list[Message], timeout: float = 10.0
    ) -> None:
        """Many lines at once (one per node: more than a socket buffer takes without waiting),
        waiting until they are sent or the timeout passes; the connection stays open."""
        data = self._peers[conn].connection.send(*messages)
        with contextlib.suppress(OSError):
            conn.settimeout(timeout)
            try:
                conn.sendall(data)
            finally:
                conn.setblocking(False)

    def tell(self, conn: socket.socket, message: Message) -> None:
        """Rank 0's one and only line to a member (exit or abort), then the connection closes.
        A member that is gone is reported by its own event."""
        self.say(conn, message)
        self.close(conn)

    def close(self, conn: socket.socket) -> None:
        self._forget(conn)
        self._peers.pop(conn, None)
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
