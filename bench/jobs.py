"""Benchmark jobs on the dev cluster: install bench/cluster_jobs/ into /data/bench, submit
bench.sbatch, wait for the job, and read back the `BENCH {json}` lines its tasks printed.

Every container of the cluster shares the host's clock, so a time stamped in the batch script,
in a task on c2, or in `docker exec` on the login node are directly comparable.
"""

from __future__ import annotations

import json
import math
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
    extra_env: dict[str, str] | None = None,
) -> Job:
    """sbatch bench.sbatch with `layout` (e.g. `-N2 --ntasks-per-node=2`), not waiting.
    extra_env reaches every task (sbatch exports the submitting shell's environment)."""
    env = (
        f"BENCH_IMAGE={shlex.quote(image)} BENCH_STRATEGY={strategy} "
        f"BENCH_KILL_ON_BAD_EXIT={int(kill_on_bad_exit)}"
    )
    env += "".join(f" {k}={shlex.quote(v)}" for k, v in (extra_env or {}).items())
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


# One wait on the login node, in a single docker exec: polling from the host would cost a
# `docker exec` per poll, about 0.1 CPU-s each, taken from the very jobs being timed on the
# 2-core host. On the node a poll is a grep of the job's output (every 0.25 s) and a squeue
# (every 2 s). Prints `met`, `ended` (the job left the queue) or `timeout`.
_WAIT = """
end=$((SECONDS + {timeout}))
i=0
while [ $SECONDS -lt $end ]; do
    if {condition}; then echo met; exit 0; fi
    if [ $((i % 8)) = 0 ]; then
        queued=$(squeue -h -j {job} -o %T 2>&1)
        case $? in
            0) [ -z "$queued" ] && break ;;
            *) case $queued in *"Invalid job id"*) break ;; esac ;;
        esac
    fi
    i=$((i + 1))
    sleep 0.25
done
if [ $SECONDS -ge $end ]; then echo timeout; elif {condition}; then echo met; else echo ended; fi
"""


def wait_until(cluster: Cluster, job: Job, condition: str, timeout: float) -> str:
    """`met` once the shell `condition` holds on the login node, `ended` if the job left the
    queue first, `timeout` (see _WAIT)."""
    script = _WAIT.format(timeout=math.ceil(timeout), condition=condition, job=job.id)
    return cluster.ok(script, timeout=timeout + 60).strip().splitlines()[-1]


def wait(cluster: Cluster, job: Job, timeout: float) -> Job:
    """Wait until the job has ended (scancel it after `timeout` s); read its stamps."""
    if wait_until(cluster, job, "false", timeout) == "timeout":
        cluster.run(f"scancel {job.id}")
        raise BenchError(
            f"job {job.id} still running after {timeout:.0f} s; cancelled "
            f"(its output: /data/bench/out/{job.id}.out)"
        )
    for _ in range(60):  # slurmdbd records the end a moment after slurmctld
        job.state = state(cluster, job)
        if job.state.split(" ")[0] in ENDED:
            break
        time.sleep(0.5)
    read_events(cluster, job)
    cluster.run(f"rm -rf /data/bench/runs/{job.id}")
    return job


def wait_for_ranks(cluster: Cluster, job: Job, event: str, ranks: int, timeout: float) -> None:
    """Wait until `ranks` different ranks have stamped `event`; fail if the job ends first or
    time runs out (the job is then cancelled). The stamps are read into `job`."""
    found = (
        f'grep -h \'^BENCH {{"event": "{event}"\' /data/bench/out/{job.id}.out 2>/dev/null'
        " | grep -o '\"rank\": [0-9]*' | sort -u | wc -l"
    )
    outcome = wait_until(cluster, job, f'[ "$({found})" -ge {ranks} ]', timeout)
    read_events(cluster, job)
    if outcome != "met":
        job.state = state(cluster, job)
        cluster.run(f"scancel {job.id}")
        raise BenchError(
            f"job {job.id} ({job.state}, {outcome}) never had {ranks} ranks stamp {event!r}; "
            f"its output: /data/bench/out/{job.id}.out\n{job.log[-2000:]}"
        )


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
