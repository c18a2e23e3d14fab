"""The opt-in per-node image cache (tfslurm-node-cache) on the dev cluster's real Slurm.

A job that asks for it runs every task from the SIF unpacked on its own node; the cache is gone
from every node when the job ends, however it ends (the batch script's trap, else the Epilog);
caches of ended jobs are swept by the next unpack on that node; bad input is one clear line.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from . import jobs
from .clean_end import NODES

pytestmark = pytest.mark.e2e

TOOL = "/data/bin/tfslurm-node-cache"
SIF = "/data/tf-slurm.sif"
EXAMPLES = "/data/examples/cifar10"


def submit(cluster, script: str, wait: bool = True, env: str = "") -> tuple[str, str]:
    """sbatch SCRIPT (a batch script's body) on 2 nodes x 2 tasks; (job id, output path)."""
    tag = uuid.uuid4().hex[:8]
    path, out = f"/data/nc-{tag}.sh", f"/data/nc-{tag}.out"
    cluster.ok(f"cat > {path} <<'EOF'\n#!/bin/bash\nset -euo pipefail\n{script}EOF")
    job = jobs.submit(cluster, f"-N2 --ntasks-per-node=2 -o {out} {path}", env)
    if wait:
        jobs.wait(cluster, job)
    return job, out


def state(cluster, job: str) -> str:
    return cluster.ok(f"sacct -X -n -P -j {job} -o State").strip()


def caches(cluster) -> list[str]:
    """Every node's tfslurm-cache-* entries in /tmp, as NODE:PATH."""
    return [
        f"{node}:{path}"
        for node in NODES
        for path in cluster.ok(
            "ls -d /tmp/tfslurm-cache-* 2>/dev/null || true", service=node
        ).split()
    ]


def test_every_task_runs_from_its_nodes_cache_and_the_cache_goes_at_job_end(cluster):
    # A cache a job that has ended left behind (as a node crash would): the next unpack there
    # removes it.
    for node in ("c1", "c2"):
        cluster.ok("mkdir -p /tmp/tfslurm-cache-999999/x", service=node)
    job, out = submit(
        cluster,
        f'dir=$({TOOL} unpack {SIF})\ntrap "{TOOL} remove" EXIT\necho "CACHE $dir"\n'
        'srun apptainer exec "$dir" sh -c '
        "'echo \"RAN $SLURM_PROCID $(hostname) $APPTAINER_CONTAINER\"'\n"
        'srun apptainer run "$dir" --print-config\n',
    )
    log = cluster.ok(f"cat {out}")
    assert state(cluster, job) == "COMPLETED", log
    cache = f"/tmp/tfslurm-cache-{job}"
    assert f"CACHE {cache}" in log and "unpacked on 2 node(s) in" in log, log
    ran = sorted(line.split()[1:] for line in log.splitlines() if line.startswith("RAN "))
    assert [r[0] for r in ran] == ["0", "1", "2", "3"], log
    assert {(r[1], r[2]) for r in ran} == {("c1", cache), ("c2", cache)}, log
    configs = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert sorted(c["rank"] for c in configs) == [0, 1, 2, 3], log
    assert all(c["num_tasks"] == 4 for c in configs), log
    assert caches(cluster) == [], "the cache (or the stale one) is still on a node"


def test_a_cancelled_jobs_cache_is_removed_by_the_epilog(cluster):
    job, out = submit(
        cluster,
        f'dir=$({TOOL} unpack {SIF})\ntrap "{TOOL} remove" EXIT\n'
        'srun apptainer exec "$dir" sleep 300\n',
        wait=False,
    )
    cache = f"/tmp/tfslurm-cache-{job}"
    deadline = time.monotonic() + 120
    while sorted(caches(cluster)) != [f"c1:{cache}", f"c2:{cache}"]:
        assert time.monotonic() < deadline, f"never unpacked: {cluster.ok(f'cat {out}')}"
        time.sleep(1)
    cluster.ok(f"scancel {job}")
    deadline = time.monotonic() + 60
    while caches(cluster):
        assert time.monotonic() < deadline, f"left after scancel: {caches(cluster)}"
        time.sleep(1)
    assert state(cluster, job).startswith("CANCELLED")


def test_cifar10_demo_with_the_node_cache_completes(cluster, sample):
    """`TFSLURM_NODE_CACHE=1 make demo`: the shipped batch script unpacks, trains, cleans up."""
    output_dir = f"/data/runs/e2e-node-cache-{uuid.uuid4().hex[:6]}"
    job, _ = jobs.run(
        cluster,
        f"{EXAMPLES}/multi-worker.sbatch --steps 20 --log-every 10 --checkpoint-every 20",
        f"TFSLURM_NODE_CACHE=1 OUTPUT_DIR={output_dir}",
    )
    log = cluster.ok(f"cat /data/cifar10-multi-worker-{job}.out")
    assert state(cluster, job) == "COMPLETED", log
    assert f"runs apptainer run /tmp/tfslurm-cache-{job}" in log, log
    metrics = json.loads(cluster.ok(f"cat {output_dir}/metrics.json"))
    assert metrics["global_step"] == 20 and metrics["workers"] == 4, metrics
    assert caches(cluster) == []


def test_outside_a_job_it_says_so(cluster):
    result = cluster.run(f"{TOOL} unpack {SIF}")
    assert result.code == 2
    assert result.err.strip() == (
        "tfslurm-node-cache: error: not inside a Slurm job (no SLURM_JOB_ID); "
        "call it from a batch script"
    )


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (f"{TOOL} unpack /data/no-such.sif", r"/data/no-such\.sif is not a readable file on c1"),
        (
            f"TFSLURM_NODE_CACHE_DIR=/proc/tfslurm {TOOL} unpack {SIF}",
            r"cannot create /proc/tfslurm on c[12]",
        ),
        (f"{TOOL} unpakc {SIF}", r"unknown command 'unpakc'"),
    ],
    ids=["missing-sif", "unusable-dir", "typo"],
)
def test_bad_input_fails_the_job_with_one_clear_line(cluster, script, expected):
    job, out = submit(cluster, f"{script}\necho SHOULD-NOT-RUN\n")
    log = cluster.ok(f"cat {out}")
    assert state(cluster, job) == "FAILED", log
    errors = [line for line in log.splitlines() if "error:" in line]
    assert any(re.search(expected, line) for line in errors), log
    assert "SHOULD-NOT-RUN" not in log and "Traceback" not in log, log
    assert caches(cluster) == []
