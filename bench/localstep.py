"""A step of real entrypoints on this machine, as srun would start one node's tasks: the
variables srun sets for a step on the single node "localhost" (fake, as unit tests may), free
ports for its window, one `python -m tfslurm_entry` process per rank with its stderr in a file.
The benchmarks time such steps (stepstart.py, supervision.py); the tests start theirs with it
too, and take their ports from here (bench/ never imports tests/).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from bench.repo import ROOT

JOB = "4242"  # every local step is step 0 of this job unless told otherwise


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
    raise RuntimeError(f"found no {count} consecutive free ports on localhost")


def step_env(tasks: int, rank: int, port_base: int | None, timeout: float) -> dict[str, str]:
    """What srun would set for one task of an N-task step on the single node localhost, the
    step's ports from port_base (None: the kit's default window) and rank 0's check-in timeout."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "SLURM_STEP_NUM_TASKS": str(tasks),
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_STEP_TASKS_PER_NODE": str(tasks),
        "SLURMD_NODENAME": "localhost",
        "SLURM_JOB_ID": JOB,
        "SLURM_STEP_ID": "0",
        "CUDA_VISIBLE_DEVICES": "",
        "TFSLURM_CHIEF_TIMEOUT": f"{timeout:g}",
    }
    if port_base is not None:
        env["TFSLURM_PORT_BASE"] = str(port_base)
    return env


class LocalStep:
    """`tasks` entrypoints running argv (after `python -m tfslurm_entry`), rank by rank, each
    with step_env and `env` (a value None: unset), its stderr in logs/rank{R}.err; ranks in
    `late` wait for start(rank); port_base None: the kit's default window. wrap: the whole
    command line of each task (a fake slurmstepd around it, say). keep_stdout: each task's
    stdout in logs/rank{R}.out (out(rank)), else discarded. Each task leads its own process
    group, so that kill() takes what it left running too, and runs in logs: `python -m` puts
    its working directory first on sys.path, so that started from the repository every task
    would run the repository's package whatever PYTHONPATH says (a reference tree's, say)."""

    def __init__(
        self,
        argv: Sequence[str],
        tasks: int,
        logs: Path,
        *,
        timeout: float = 20,
        late: Iterable[int] = (),
        wrap: Callable[[list[str]], list[str]] | None = None,
        port_base: int | None = -1,
        keep_stdout: bool = False,
        **env: str | None,
    ) -> None:
        self.argv, self.tasks, self.logs = list(argv), tasks, logs
        self.timeout, self.wrap, self.keep_stdout, self.env = timeout, wrap, keep_stdout, env
        self.port_base = free_port_base(tasks + 1) if port_base == -1 else port_base
        logs.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        held = set(late)
        self.procs: list[subprocess.Popen | None] = [None] * tasks
        for rank in range(tasks):
            if rank not in held:
                self.start(rank)

    def start(self, rank: int) -> subprocess.Popen:
        env = step_env(self.tasks, rank, self.port_base, self.timeout)
        for name, value in self.env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        argv = [sys.executable, "-m", "tfslurm_entry", *self.argv]
        out = self.logs / f"rank{rank}.out"
        with (
            self.log_file(rank).open("w") as err,
            out.open("w") if self.keep_stdout else open(os.devnull, "w") as stdout,
        ):
            self.procs[rank] = subprocess.Popen(
                self.wrap(argv) if self.wrap else argv,
                env=env,
                stdout=stdout,
                stderr=err,
                cwd=self.logs,
                start_new_session=True,
            )
        return self.procs[rank]

    def out(self, rank: int) -> str:
        return (self.logs / f"rank{rank}.out").read_text()

    def log_file(self, rank: int) -> Path:
        return self.logs / f"rank{rank}.err"

    def log(self, rank: int) -> str:
        return self.log_file(rank).read_text()

    def wait(self, timeout: float = 30) -> list[int]:
        """Every task's exit status, waiting at most timeout seconds in all
        (subprocess.TimeoutExpired past it)."""
        deadline = time.monotonic() + timeout
        return [p.wait(max(deadline - time.monotonic(), 0.1)) for p in self.procs if p]

    def kill(self) -> None:
        """Every task still running, and what it started."""
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def __enter__(self) -> LocalStep:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.kill()
