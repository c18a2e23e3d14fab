"""Loopback stand-ins for the tests: a dead proxy. (Free ports for a local step:
bench/localstep.py, which the benchmarks share.)"""

from __future__ import annotations

import socket
import threading


class DeadProxy:
    """An HTTP proxy that is down or filtered, on loopback: it accepts connections and never
    answers. Counts the connections it got (each one a client that went through it)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_server((host, 0))
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.held.append(conn)

    @property
    def connections(self) -> int:
        return len(self.held)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()

    def __enter__(self) -> DeadProxy:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
