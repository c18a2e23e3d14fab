"""Distributed CIFAR-10 through `srun apptainer run tf-slurm.sif train.py`, both strategies.

Each job runs on two nodes x two tasks of the dev cluster, from the shipped sbatch scripts, on
the generated sample (make cifar10-sample). Thresholds: chance is 10%; the sample is learnable
to well over 80%, so 60% after the short run here is a real learning signal, not luck.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

from . import jobs
from .clean_end import check_clean_end, left_in_tmp, tmp_entries

pytestmark = pytest.mark.e2e

EXAMPLES = "/data/examples/cifar10"
ACCURACY_THRESHOLD = 0.6
STEPS, RESUMED_STEPS = 150, 200


def run_job(cluster, strategy: str, output_dir: str, steps: int) -> tuple[str, str]:
    """sbatch the shipped script, wait for it; (job id, its output). Checks that it ended
    clean: no error line, the step's end with its last program, nothing left in /tmp."""
    before = tmp_entries(cluster)
    job, state = jobs.run(
        cluster,
        f"{EXAMPLES}/{strategy}.sbatch --steps {steps} --log-every 25 --checkpoint-every 50",
        f"OUTPUT_DIR={output_dir}",
    )
    log = cluster.ok(f"cat /data/cifar10-{strategy}-{job}.out")
    assert state == "COMPLETED", log
    check_clean_end(cluster, job, log)
    assert left_in_tmp(cluster, before) == [], log
    return job, log


def sacct_rows(cluster, job: str) -> list[list[str]]:
    out = cluster.ok(f"sacct -j {job} --noheader --parsable2 --format=JobID,State,ExitCode")
    return [line.split("|") for line in out.splitlines()]


@pytest.mark.parametrize("strategy", ["multi-worker", "parameter-server"])
def test_cifar10_trains_checkpoints_and_resumes(cluster, sample, strategy):
    output_dir = f"/data/runs/e2e-{strategy}-{uuid.uuid4().hex[:6]}"
    job, log = run_job(cluster, strategy, output_dir, STEPS)

    rows = sacct_rows(cluster, job)
    assert {r[0] for r in rows} >= {job, f"{job}.batch", f"{job}.0"}, rows
    assert all(r[1] == "COMPLETED" and r[2] == "0:0" for r in rows), f"{rows}\n{log}"

    metrics = json.loads(cluster.ok(f"cat {output_dir}/metrics.json"))
    assert metrics["global_step"] == STEPS and metrics["start_step"] == 0
    assert metrics["test_accuracy"] > ACCURACY_THRESHOLD, metrics
    assert metrics["workers"] == (4 if strategy == "multi-worker" else 2)

    # Every worker read different batches.
    firsts = re.findall(r"input pipeline (\d+) first batch after step 0: fingerprint (-?\d+)", log)
    pipelines, fingerprints = {p for p, _ in firsts}, {f for _, f in firsts}
    expected = 4 if strategy == "multi-worker" else 2
    assert len(pipelines) == expected and len(fingerprints) == expected, log

    # Exactly one task wrote checkpoints and summaries.
    writers = set(re.findall(r"\[rank (\d+) \w+ \d+\] wrote checkpoint", log))
    assert writers == {"0"}, log
    written = ["checkpoints", "metrics.json", "step-result", "summaries"]
    assert cluster.ok(f"ls {output_dir}").split() == written
    assert cluster.ok(f"cat {output_dir}/step-result") == "completed\n"  # rank 0's verdict
    events = cluster.ok(f"ls {output_dir}/summaries").split()
    assert len(events) == 1 and events[0].startswith("events.out.tfevents"), events
    assert "ckpt-150.index" in cluster.ok(f"ls {output_dir}/checkpoints")

    # A second run on the same output directory continues from the saved step.
    job2, log2 = run_job(cluster, strategy, output_dir, RESUMED_STEPS)
    assert f"resumed from {output_dir}/checkpoints/ckpt-{STEPS} at step {STEPS}" in log2, log2
    assert all(r[1] == "COMPLETED" for r in sacct_rows(cluster, job2))
    metrics2 = json.loads(cluster.ok(f"cat {output_dir}/metrics.json"))
    assert (metrics2["start_step"], metrics2["global_step"]) == (STEPS, RESUMED_STEPS)
    assert f"step {STEPS + 25}/{RESUMED_STEPS}" in log2 and f"step 25/{RESUMED_STEPS}" not in log2
