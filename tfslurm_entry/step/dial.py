"""A member's end of the control connection (control.py has rank 0's): reaching rank 0, and a
blocking `Channel` that moves protocol.py's lines (a member's, and the site check's both ways).

Built for steps of thousands of tasks that start together: a member retries with jittered,
growing pauses, so members do not knock in lockstep, and waits for a connection through the
kernel's SYN retransmissions (about 1 s, then 3 s) instead of giving up on it after half a
second; it looks rank 0's name up once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import socket
import time
from collections.abc import Iterator

from .protocol import (
    NEED_DATA,
    STEP,
    Challenge,
    Connection,
    Dialect,
    Done,
    Ended,
    Hello,
    Message,
    ProtocolError,
    Side,
)
from .secret import Secret

RETRY_MIN_S, RETRY_MAX_S = 0.05, 0.5  # pauses between a member's attempts to reach rank 0
CONNECT_TIMEOUT_S = 5.0  # one attempt: time for the kernel to retransmit a dropped SYN twice


def pauses(rng: random.Random) -> Iterator[float]:
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
    waits = pauses(random.Random())
    found: list[tuple] = []
    while True:
        attempt = min(CONNECT_TIMEOUT_S, max(deadline - time.monotonic(), 0.1))
        try:
            found = found or socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            return _connect_any(found, attempt)
        except OSError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(next(waits), max(deadline - time.monotonic(), 0)))


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


class Channel:
    """A blocking connection and this side's part of its conversation (protocol.Connection).
    One thread may read while another sends: each side's order is kept apart."""

    def __init__(self, sock: socket.socket, side: Side, dialect: Dialect = STEP) -> None:
        self.sock = sock
        self.connection = Connection(side, dialect)

    def send(self, *messages: Message) -> None:
        """Lines to the other side, in the conversation's order (LocalProtocolError if not); a
        peer that is gone is noticed by the reader."""
        data = self.connection.send(*messages)
        with contextlib.suppress(OSError):
            self.sock.sendall(data)

    def next(self, timeout: float | None) -> Message | Ended:
        """The other side's next message; Ended once it closed, reset, or said nothing whole
        within timeout seconds. RemoteProtocolError: it said something else."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (event := self.connection.next_event()) is NEED_DATA:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return Ended()
            try:
                self.sock.settimeout(left)
                data = self.sock.recv(65536)
            except OSError:  # reset, or the timeout passed
                return Ended()
            self.connection.receive_data(data)
        return event

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def signed(hello: Hello, nonce: str, secret: Secret) -> Hello:
    """The hello with its proof for this connection's nonce."""
    return dataclasses.replace(hello, proof=secret.proof(nonce, hello.words()))


def check_in(
    channel: Channel, hello: Hello, secret: Secret, timeout: float, *after: Message
) -> bool:
    """Answer rank 0's challenge with the hello and its proof (and any lines after it); False
    if no challenge came within the timeout (the connection closed). RemoteProtocolError
    (OtherVersion among them): the other side is not a rank 0 of this kit's version."""
    challenge = channel.next(max(timeout, 0.1))
    if not isinstance(challenge, Challenge):
        return False
    channel.send(signed(hello, challenge.nonce, secret), *after)
    return True


def tell_head(
    hello: Hello, address: str, status: int, secret: Secret, timeout: float = 2.0
) -> bool:
    """Report this task's end to rank 0 on a connection of its own: for a member stopped
    (SIGTERM) before or while it checked in, or one that could not start, which rank 0 would
    otherwise only learn of at its timeout. Best effort; False if rank 0 did not answer within
    the timeout."""
    deadline = time.monotonic() + timeout
    conn = connect(address, timeout)
    if conn is None:
        return False
    with Channel(conn, "member") as channel, contextlib.suppress(ProtocolError):
        left = deadline - time.monotonic()
        return check_in(channel, hello, secret, left, Done(hello.rank, status))
    return False
