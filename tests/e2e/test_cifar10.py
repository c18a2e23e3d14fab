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

# One worker runs the CIFAR-10 training modules one after another (tests/README.md: side by side).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("cifar10-training")]

EXAMPLES = "/data/examples/cifar10"
ACCURACY_THRESHOLD = 0.6
STEPS = 150
STRATEGIES = ("multi-worker", "parameter-server")
# A second run resuming from the first one's checkpoint: proven for multi-worker jobs by
# test_checkpoints.py (a run after a killed one) and for parameter-server jobs by
# test_failures.py (the requeued run after a killed ps).


@pytest.fixture(scope="module")
def cifar10_jobs(cluster, sample) -> dict[str, tuple[str, str, str]]:
    """Both shipped scripts, submitted together (Slurm runs them side by side on the shared
    nodes); per strategy (job id, output dir, output). Both ended clean: no error line, each
    step's end with its last program, nothing of either left in the nodes' /tmp."""
    before = tmp_entries(cluster)
    submitted = {}
    for strategy in STRATEGIES:
        output_dir = f"/data/runs/e2e-{strategy}-{uuid.uuid4().hex[:6]}"
        job = jobs.submit(
            cluster,
            f"{EXAMPLES}/{strategy}.sbatch --steps {STEPS} --log-every 25 --checkpoint-every 50",
            f"OUTPUT_DIR={output_dir}",
        )
        submitted[strategy] = job, output_dir
    ran = {}
    for strategy, (job, output_dir) in submitted.items():
        state = jobs.wait(cluster, job)
        log = cluster.ok(f"cat /data/cifar10-{strategy}-{job}.out")
        assert state == "COMPLETED", log
        check_clean_end(cluster, job, log)
        ran[strategy] = job, output_dir, log
    assert left_in_tmp(cluster, before) == [], ran
    return ran


def sacct_rows(cluster, job: str) -> list[list[str]]:
    out = cluster.ok(f"sacct -j {job} --noheader --parsable2 --format=JobID,State,ExitCode")
    return [line.split("|") for line in out.splitlines()]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cifar10_trains_and_writes_checkpoints_once(cluster, cifar10_jobs, strategy):
    job, output_dir, log = cifar10_jobs[strategy]

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
    # train.py's, and tfslurm-run's (OUTPUT_DIR is its run directory): rank 0's verdict, its state.
    written = [
        "checkpoints",
        "metrics.json",
        "summaries",
        "tfslurm-run.result",
        "tfslurm-run.state",
    ]
    assert cluster.ok(f"ls {output_dir}").split() == written
    assert cluster.ok(f"cat {output_dir}/tfslurm-run.result") == "completed\n"
    events = cluster.ok(f"ls {output_dir}/summaries").split()
    assert len(events) == 1 and events[0].startswith("events.out.tfevents"), events
    assert "ckpt-150.index" in cluster.ok(f"ls {output_dir}/checkpoints")
