"""Lifecycle of a parameter-server job's tasks: servers stop when the chief's program ends.

TensorFlow's ps and worker servers only ever `join()`, so without this a finished job sits in
its allocation until the time limit. The chief's entrypoint runs the program as a child (so it
outlives it) and listens on the plan's control address; every server's entrypoint connects
there and waits. When the program ends, the chief sends "exit N" to every server: N == 0 makes
them exit 0, anything else non-zero. A connection that drops without a word (the chief's node
died), or a chief that never answers within the timeout, also ends the servers non-zero.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

# Signals Slurm delivers that the program, not this supervisor, must act on.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGCONT)  # fmt: skip
GRACE_S = 10.0  # how long a finished chief waits for servers that have not connected yet
RETRY_S = 0.5


def exit_status(returncode: int) -> int:
    """A shell-style exit status: 128 + N for a program killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Announcer:
    """The chief's side: accept server connections, tell each how the chief's program ended."""

    def __init__(self, port: int, expected: int) -> None:
        self.expected = expected
        self.sock = socket.create_server(("", port), reuse_port=False)
        self.sock.settimeout(RETRY_S)
        self.lock = threading.Lock()
        self.waiting: list[socket.socket] = []
        self.told = 0
        self.status: int | None = None
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            with self.lock:
                if self.status is None:
                    self.waiting.append(conn)
                else:
                    self._tell(conn)

    def _tell(self, conn: socket.socket) -> None:
        try:
            conn.sendall(f"exit {self.status}\n".encode())
        except OSError:
            pass
        finally:
            conn.close()
            self.told += 1

    def finish(self, status: int) -> None:
        """Tell every server, waiting up to GRACE_S for the ones not connected yet."""
        with self.lock:
            self.status = status
            for conn in self.waiting:
                self._tell(conn)
            self.waiting.clear()
        deadline = time.monotonic() + GRACE_S
        while self.told < self.expected and time.monotonic() < deadline:
            time.sleep(0.1)
        self.sock.close()


def run_chief(argv: Sequence[str], env: Mapping[str, str], port: int, expected: int,
              log) -> int:  # fmt: skip
    """Run the chief's program as a child, forwarding signals; announce its end; its status."""
    announcer = Announcer(port, expected)
    start = time.monotonic()
    child = subprocess.Popen(list(argv), env=dict(env))
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    status = exit_status(child.wait())
    log(
        f"chief program ended with exit {status} after {time.monotonic() - start:.1f} s; "
        f"telling {expected} servers to stop"
    )
    announcer.finish(status)
    return status


def wait_for_chief(address: str, timeout: float) -> tuple[int, str]:
    """Block until the chief announces its end. (exit status for this server, reason)."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=RETRY_S)
            break
        except OSError:
            if time.monotonic() > deadline:
                return 1, f"chief control address {address} did not answer within {timeout:.0f} s"
            time.sleep(RETRY_S)
    conn.settimeout(None)
    with conn:
        reply = conn.makefile().readline().split()
    if len(reply) == 2 and reply[0] == "exit" and reply[1].isdigit():
        status = int(reply[1])
        return (0 if status == 0 else 1), f"chief ended with exit {status}"
    return 1, "chief's control connection closed without an exit status (chief died?)"
