"""Benchmark jobs on the dev cluster: install bench/cluster_jobs/ into /data/bench, submit
bench.sbatch, wait for the job, and read back the `BENCH {json}` lines its tasks printed.

Every container of the cluster shares the host's clock, so a time stamped in the batch script,
in a task on c2, or in `docker exec` on the login node are directly comparable.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import BenchError, Cluster

HERE = Path(__file__).resolve().parent
SIF = "/data/tf-slurm.sif"
SANDBOX = "/data/bench/tf-slurm.sandbox"
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL")


@dataclass
class Job:
    """A finished benchmark job: its id, when it was submitted, its state and its stamps."""

    id: str
    submitted: float
    state: str = ""
    log: str = ""
    events: list[dict] = field(default_factory=list)

    def first(self, event: str, rank: int | None = None) -> dict | None:
        return next(
            (
                e
                for e in self.events
                if e["event"] == event and (rank is None or e.get("rank") == rank)
            ),
            None,
        )

    def all(self, event: str) -> list[dict]:
        return [e for e in self.events if e["event"] == event]

    def per_rank(self, event: str) -> dict[int, dict]:
        """The first `event` of each rank."""
        found: dict[int, dict] = {}
        for e in self.all(event):
            found.setdefault(e["rank"], e)
        return found


def install(cluster: Cluster) -> None:
    """Put the job scripts on the shared file system; check the sample and SIF are there."""
    cluster.ok("mkdir -p /data/bench/out /data/bench/runs")
    for path in sorted((HERE / "cluster_jobs").iterdir()):
        if path.name != "__pycache__":
            cluster.copy_in(path, f"/data/bench/{path.name}")
    missing = cluster.run(f"test -f {SIF} && test -d /data/cifar10/cifar-10-batches-bin")
    if missing.returncode != 0:
        raise BenchError(
            f"{SIF} or the CIFAR-10 sample is missing on cluster {cluster.project}; "
            "run `make cifar10-sample` (with the same TFSLURM_DEV_PROJECT)"
        )


def submit(
    cluster: Cluster,
    layout: str,
    image: str,
    strategy: str,
    train_args: str,
    kill_on_bad_exit: bool = False,
) -> Job:
    """sbatch bench.sbatch with `layout` (e.g. `-N2 --ntasks-per-node=2`), not waiting."""
    env = (
        f"BENCH_IMAGE={shlex.quote(image)} BENCH_STRATEGY={strategy} "
        f"BENCH_KILL_ON_BAD_EXIT={int(kill_on_bad_exit)}"
    )
    out = cluster.ok(
        f"t=$EPOCHREALTIME; {env} sbatch --parsable --chdir=/data {layout} "
        f"/data/bench/bench.sbatch {train_args} && echo $t"
    ).split()
    return Job(id=out[0].split(";")[0], submitted=float(out[1]))


def state(cluster: Cluster, job: Job) -> str:
    rows = cluster.ok(f"sacct -X -n -P -j {job.id} -o State").split()
    return rows[-1] if rows else ""


def read_events(cluster: Cluster, job: Job) -> None:
    job.log = cluster.ok(f"cat /data/bench/out/{job.id}.out 2>/dev/null || true")
    job.events = []
    for line in job.log.splitlines():
        if line.startswith("BENCH {"):
            try:
                job.events.append(json.loads(line[6:]))
            except json.JSONDecodeError:
                continue  # two tasks' lines interleaved: rare, and only that stamp is lost


def wait(cluster: Cluster, job: Job, timeout: float) -> Job:
    """Wait until the job has ended (scancel it after `timeout` s); read its stamps."""
    deadline = time.monotonic() + timeout
    while True:
        job.state = state(cluster, job)
        if job.state.split(" ")[0] in ENDED:
            break
        if time.monotonic() > deadline:
            cluster.run(f"scancel {job.id}")
            raise BenchError(
                f"job {job.id} still {job.state} after {timeout:.0f} s; cancelled "
                f"(its output: /data/bench/out/{job.id}.out)"
            )
        time.sleep(1)
    read_events(cluster, job)
    cluster.run(f"rm -rf /data/bench/runs/{job.id}")
    return job


def wait_for(cluster: Cluster, job: Job, done, timeout: float) -> None:
    """Poll the job's stamps until done(job) is true; fail if the job ends or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        read_events(cluster, job)
        if done(job):
            return
        job.state = state(cluster, job)
        if job.state.split(" ")[0] in ENDED or time.monotonic() > deadline:
            cluster.run(f"scancel {job.id}")
            raise BenchError(
                f"job {job.id} ({job.state}) never got there; its output: "
                f"/data/bench/out/{job.id}.out\n{job.log[-2000:]}"
            )
        time.sleep(1)


def run(
    cluster: Cluster,
    layout: str,
    image: str,
    strategy: str,
    train_args: str,
    timeout: float = 600,
    kill_on_bad_exit: bool = False,
) -> Job:
    job = submit(cluster, layout, image, strategy, train_args, kill_on_bad_exit)
    return wait(cluster, job, timeout)
