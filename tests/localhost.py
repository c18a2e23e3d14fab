"""Free ports on localhost for steps that play a whole Slurm step on one machine."""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

import pytest


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def worker_share(values: range) -> range:
    """This pytest-xdist worker's slice of values (all of them without xdist).

    Tests on different workers run at the same time: each picks its ports (and fake job ids)
    in its own slice, so that two of them never choose the same free ports at once, before
    either has bound them.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker.removeprefix("gw") or 0) % count
    size = len(values) // count
    return values[index * size : (index + 1) * size]


def free_port_base(count: int) -> int:
    """A base port P with P .. P+count-1 all free right now.

    Chosen below the kernel's ephemeral range, so the outgoing gRPC connections of the very
    processes under test cannot take one of these ports before its server binds it.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    low = max(low, 12000 + count)
    share = worker_share(range(10000, low - count))
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(share.start, share.stop)
        if all(port_free(base + i) for i in range(count)):
            return base
    # Fallback: let the kernel pick one free port and hope its neighbours are free too.
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            base = sock.getsockname()[1]
        if base + count <= 65535 and all(port_free(base + i) for i in range(count)):
            return base
    pytest.fail(f"found no {count} consecutive free ports on localhost")


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
