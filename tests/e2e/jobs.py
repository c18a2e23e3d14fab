"""Batch jobs on the dev cluster, seen to end when they end.

`sbatch --wait` asks the controller at growing intervals (2, 8, then 32 s apart): a job that
ends 11 s after its submission returns after about 42 s. These look every half second, from
the login node in one exec (conftest.Cluster.until).
"""

from __future__ import annotations

import time

POLL_S = 0.5
QUEUED = ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")


def submit(cluster, args: str, env: str = "") -> str:
    """`sbatch --parsable ARGS` (with ENV, e.g. "OUTPUT_DIR=/data/x", before it); the job id."""
    done = cluster.run(f"{env} sbatch --parsable {args}")
    job = done.out.strip().split(";")[0]
    # Seen once under load: exit 0 and no job id; say what sbatch said rather than fail later.
    assert done.code == 0 and job.isdigit(), (
        f"sbatch {args}: exit {done.code}: {done.out!r} {done.err!r}"
    )
    return job


def wait(cluster, job: str, timeout: float = 600) -> str:
    """Once the job has left the queue (a requeued job's later runs included): its final state
    as sacct says it (COMPLETED, FAILED, CANCELLED, ...)."""
    deadline = time.monotonic() + timeout
    left = cluster.until(f'[ -z "$(squeue -h -j {job} -o %T)" ]', timeout, POLL_S)
    assert left, f"job {job} still queued after {timeout:.0f} s"
    while True:  # the accounting record follows the controller by a moment
        rows = cluster.ok(f"sacct -X -n -P -j {job} -o State").strip().splitlines()
        state = rows[-1].split()[0] if rows else ""  # the last run's: "CANCELLED by 1000"
        if state and state not in QUEUED:
            return state
        assert time.monotonic() < deadline, f"job {job}: sacct says {rows}"
        time.sleep(POLL_S)


def run(cluster, args: str, env: str = "", timeout: float = 600) -> tuple[str, str]:
    """Submit, wait for the end; (job id, final state)."""
    job = submit(cluster, args, env)
    return job, wait(cluster, job, timeout)


def elapsed(cluster, job: str) -> int:
    """How long the job has run, in seconds (squeue's [D-]HH:MM:SS or MM:SS)."""
    text = cluster.ok(f"squeue -h -j {job} -o %M").strip()
    days, _, clock = text.rpartition("-")
    seconds = 0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds + 86400 * int(days or 0)
