"""A member's end of the control connection (control.py has rank 0's): reaching rank 0, and
sending it protocol.py's lines.

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
from typing import BinaryIO

from .protocol import MAX_LINE, Challenge, Done, Hello, Message, encode, from_head
from .secret import Secret

SITE_CHECK_LINE = 1 << 20  # a site check's report, or its ports line for thousands of tasks

RETRY_MIN_S, RETRY_MAX_S = 0.05, 0.5  # pauses between a member's attempts to reach rank 0
CONNECT_TIMEOUT_S = 5.0  # one attempt: time for the kernel to retransmit a dropped SYN twice


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


def read_line(reader: BinaryIO, limit: int = SITE_CHECK_LINE) -> str:
    """The next line from a connection's reader (socket.makefile: lines that came in one
    packet are read one by one), or "" when it ends, times out or runs on past `limit`: the
    site check's blocking conversations (sitecheck/check.py, sitecheck/outside.py)."""
    try:
        line = reader.readline(limit)
    except OSError:
        return ""
    return line.decode("utf-8", errors="replace").strip() if line.endswith(b"\n") else ""


def send(conn: socket.socket, *messages: Message) -> None:
    """Lines on a blocking connection: a member's to rank 0, or the site check's rank 0 to a
    member (sitecheck/check.py has no selector); a peer that is gone is noticed by its reader."""
    with contextlib.suppress(OSError):
        conn.sendall(encode(*messages))


def challenge(conn: socket.socket, timeout: float) -> str | None:
    """Rank 0's first line on a new connection: its nonce; None if the connection closed or
    said something else within the timeout (not a rank 0 of ours). Read a byte at a time, so
    that nothing after the line is taken from the member's reader."""
    conn.settimeout(max(timeout, 0.1))
    line = b""
    try:
        while not line.endswith(b"\n") and len(line) <= MAX_LINE:
            byte = conn.recv(1)
            if not byte:
                return None
            line += byte
    except OSError:
        return None
    finally:
        conn.settimeout(None)
    message = from_head(line.decode("ascii", errors="replace"))
    return message.nonce if isinstance(message, Challenge) else None


def signed(hello: Hello, nonce: str, secret: Secret) -> Hello:
    """The hello with its proof for this connection's nonce."""
    return dataclasses.replace(hello, proof=secret.proof(nonce, hello.words()))


def check_in(
    conn: socket.socket, hello: Hello, secret: Secret, timeout: float, *after: Message
) -> bool:
    """Answer rank 0's challenge with the hello and its proof (and any lines after it); False
    if no challenge came (the connection is not rank 0's, or it closed)."""
    nonce = challenge(conn, timeout)
    if nonce is None:
        return False
    send(conn, signed(hello, nonce, secret), *after)
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
    with conn:
        left = deadline - time.monotonic()
        return check_in(conn, hello, secret, left, Done(hello.rank, status))
