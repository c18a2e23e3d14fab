"""Before any program starts: can each task reach the TensorFlow ports it will connect to?

TensorFlow does not say when its tasks cannot reach each other. MultiWorkerMirroredStrategy's
coordination service retries registration for an hour by default, and its barrier waits an
hour; a ParameterServerStrategy chief waits for its servers without a deadline; a proxy gRPC
goes through (resolve/proxy.py), a firewall that drops a port range, or a node name that
resolves to another network all look like that: a step that hangs and prints nothing useful.

So every task listens on its own TensorFlow port from before it checks in with rank 0 (the
Guard: it answers each connection with the task's identity), and once every task has checked
in, each node's first task connects to the ports of the peers its node's tasks will talk to
(resolve.roles.reach_targets: tasks on one node share its network) and reports to rank 0. Only
when every report is good does every task close its guard, and only when every task has (a
program that started earlier would meet a guard still answering in its peer's place) do the
programs and servers start. A report that is not good stops the step at once, with one line
naming the pair; nothing has started by then.

A connection refused is final: every peer was listening before it checked in. One that times
out is tried again until the check's window ends: under a burst of thousands of tasks, a SYN
can be dropped.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import threading
import time
from collections.abc import Sequence

from .protocol import Unreached, Why, first_line, port_greeting

PROBE_S = 15.0  # the longest a task keeps trying an unanswering peer
MIN_PROBE_S = 3.0  # the shortest window, even when the check-in deadline is nearer
CONNECT_S = 3.0  # one attempt: the kernel's SYN retransmissions at about 1 s and 3 s
ANSWER_S = 5.0  # for a connected peer's identity line
THREADS = 64  # probes in flight at once per task
RETRY_S = 0.2

# Why a peer's port could not be reached: one word on the control line, a phrase in the log.
REASONS = {
    Why.TIMEOUT: "no answer (a firewall dropping the port, or an address on a network this node "
    "does not reach)",
    Why.REFUSED: "connection refused (a firewall rejecting the port, or the name pointing to "
    "another node)",
    Why.UNREACHABLE: "no route to the host (its address is on a network this node does not reach)",
    Why.UNRESOLVED: "its host name does not resolve on this node (--network picks the nodes' "
    "names on a network where they do, e.g. '{host}-ib')",
    Why.STRANGER: "something else answered there, not that task (the name resolves to another "
    "node or address)",
}


def reason(why: Why, seconds: float) -> str:
    """REASONS' phrase for why (a timeout's with the seconds it was tried)."""
    what = REASONS[why]
    if why == Why.TIMEOUT:
        return what.replace("no answer", f"no answer within {seconds:.0f} s", 1)
    return what


def describe(unreached: Unreached, seconds: float) -> str:
    """The unreached peer in the words of a log line."""
    what = reason(unreached.reason, seconds)
    return f"cannot reach rank {unreached.peer}'s TensorFlow port {unreached.address}: {what}"


class Guard:
    """The task's TensorFlow port, held listening until the program starts: it shows that
    nothing else has the port, and answers every probe with the task's identity."""

    def __init__(self, port: int, step: str, rank: int, backlog: int = 128) -> None:
        self.hello = port_greeting(step, rank)
        self.sock = _listen(port, backlog)
        self.sock.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ, None)
        self._wake, self._waker = socket.socketpair()  # close() wakes the thread through it
        self.selector.register(self._wake, selectors.EVENT_READ, "wake")
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """Accept, say who this is, close once the prober has (it keeps the TIME_WAIT). Asleep
        while no prober is connected: a node's tasks wait here together, for seconds."""
        while not self._closed.is_set():
            for key, _ in self.selector.select(self._until_expiry()):
                if key.data is None:
                    self._accept()
                elif key.data != "wake":
                    self._drain(key.fileobj)
            self._expire()

    def _until_expiry(self) -> float | None:
        """Seconds until the first connected prober's time is up; None with none connected."""
        ends = [k.data for k in self.selector.get_map().values() if isinstance(k.data, float)]
        return max(min(ends) - time.monotonic(), 0.0) if ends else None

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # nothing queued, or EMFILE: the prober retries
                return
            conn.setblocking(False)
            try:
                conn.send(self.hello)
            except OSError:
                conn.close()
                continue
            self.selector.register(conn, selectors.EVENT_READ, time.monotonic() + ANSWER_S)

    def _drain(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(256)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.selector.unregister(conn)
            conn.close()

    def _expire(self) -> None:
        now = time.monotonic()
        for key in list(self.selector.get_map().values()):
            if isinstance(key.data, float) and key.data < now:
                self.selector.unregister(key.fileobj)
                key.fileobj.close()

    def close(self) -> None:
        """Free the port for TensorFlow."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._waker.send(b"x")
        self._thread.join()
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()
        self.selector.close()
        self._waker.close()

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def _listen(port: int, backlog: int) -> socket.socket:
    """On every address, as TensorFlow's gRPC server does (IPv6 and IPv4 where both exist)."""
    if socket.has_dualstack_ipv6():
        with contextlib.suppress(OSError):
            return socket.create_server(
                ("", port), family=socket.AF_INET6, backlog=backlog, dualstack_ipv6=True
            )
    return socket.create_server(("", port), backlog=backlog)


def check(targets: Sequence[tuple[int, str]], step: str, window: float) -> Unreached | None:
    """Connect to each (rank, "host:port") target, at most `window` seconds; the unreached
    peer of lowest rank, or None when every one answered as itself."""
    return next(iter(check_all(targets, step, window)), None)


def check_all(targets: Sequence[tuple[int, str]], step: str, window: float) -> list[Unreached]:
    """Every target of check() that did not answer as itself, in the targets' order."""
    if not targets:
        return []
    # Here, not at the top: only a node's first task probes, and the import (with logging)
    # costs every other task of a large step 3-4 ms of its start.
    from concurrent.futures import ThreadPoolExecutor

    deadline = time.monotonic() + window
    with ThreadPoolExecutor(min(THREADS, len(targets))) as pool:
        found = pool.map(lambda t: _probe(t[0], t[1], step, deadline), targets)
        return [u for u in found if u is not None]


def _probe(rank: int, address: str, step: str, deadline: float) -> Unreached | None:
    host, port = address.rsplit(":", 1)
    try:
        found = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return Unreached(rank, address, Why.UNRESOLVED)
    while True:
        reasons = []
        for info in found:
            reason = _attempt(info, port_greeting(step, rank), deadline)
            if reason is None:
                return None
            reasons.append(reason)
        final = [r for r in reasons if r != Why.TIMEOUT]
        if final or time.monotonic() + RETRY_S >= deadline:
            return Unreached(rank, address, final[0] if final else Why.TIMEOUT)
        time.sleep(RETRY_S)


def _attempt(info: tuple, expected: bytes, deadline: float) -> Why | None:
    """One connection to one of the peer's addresses; None if the peer answered as itself."""
    family, kind, proto, _, sockaddr = info
    with socket.socket(family, kind, proto) as sock:
        sock.settimeout(max(min(CONNECT_S, deadline - time.monotonic()), 0.1))
        try:
            sock.connect(sockaddr)
        except ConnectionRefusedError:
            return Why.REFUSED
        except TimeoutError:
            return Why.TIMEOUT
        except OSError as err:
            if err.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
                return Why.UNREACHABLE
            return Why.TIMEOUT
        sock.settimeout(ANSWER_S)
        answer = b""
        with contextlib.suppress(OSError):
            while first_line(answer) is None and len(answer) < len(expected):
                chunk = sock.recv(256)
                if not chunk:
                    break
                answer += chunk
    return None if answer == expected else Why.STRANGER


class Reach:
    """One task's side of the check: its guard, and the peers whose ports it connects to."""

    def __init__(self, guard: Guard | None, targets: Sequence[tuple[int, str]], step: str):
        self.guard, self.targets, self.step = guard, list(targets), step

    def check(self, window: float) -> Unreached | None:
        return check(self.targets, self.step, window)

    def release(self) -> None:
        """Free the task's port for TensorFlow, before its program or server starts."""
        if self.guard is not None:
            self.guard.close()
