"""A chief SIGKILLed in the middle of writing a checkpoint costs at most that checkpoint.

TensorFlow's CheckpointManager writes a checkpoint's shards under ckpt-N_temp/, merges them
into ckpt-N.index and its data, then replaces the `checkpoint` state file (write to
checkpoint.tmp<hex>, rename). kill_in_checkpoint.py, run on the chief's node, kills rank 0's
train.py at each of those moments; the step is interrupted, tfslurm-run requeues the job, and
its next run on the same output directory must resume at the checkpoint the state file names
(the last complete one) and end at the same step and accuracy as an uninterrupted run.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from .test_lifecycle import ACCURACY_TOLERANCE, wait_for_end, wait_for_log

# One worker runs the CIFAR-10 training modules one after another (tests/README.md: side by side).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("cifar10-training")]

EXAMPLES = "/data/examples/cifar10"
STEPS, EVERY, KILL_AT = 120, 20, 60
TRAIN = f"--steps {STEPS} --log-every {EVERY} --checkpoint-every {EVERY}"
# One task per node: a checkpoint is written by rank 0 however many workers there are, and
# every run starts half the TensorFlow processes of the shipped 2 x 2 layout.
LAYOUT = "--ntasks-per-node=1"
WATCHER = "/data/e2e-tools/kill_in_checkpoint.py"
WRITING = re.compile(r"^ckpt-(\d+)(?:\.index|_temp)$")
STATE = re.compile(r'^model_checkpoint_path: "(?:.*/)?ckpt-(\d+)"', re.M)  # the state file


def submit(cluster, output_dir: str, moment: str | None = None) -> str:
    """sbatch the multi-worker job; its id.

    With a moment, a watcher on c1, where rank 0 runs, kills its train.py then. It looks for
    rank 0's task of this job's training step only (not tfslurm-run's copy step, named
    tfslurm-copy): a finished job's step can still be listed while its epilog runs, and a
    watcher that picked it would wait for a program that never comes. While the task starts,
    `scontrol listpids` lists it with PID -1: only a real pid counts.
    """
    job = cluster.ok(
        f"OUTPUT_DIR={output_dir} sbatch --parsable {LAYOUT} {EXAMPLES}/multi-worker.sbatch {TRAIN}"
    ).strip()
    if moment:
        watch = (
            f"cd /data && until step=$(squeue -h -s -j {job} -o '%i %j' | "
            "awk '$2 != \"tfslurm-copy\" && $1 ~ /[.][0-9]+$/ {print $1; exit}') && "
            '[ -n "$step" ] && leader=$(scontrol listpids "$step" 2>/dev/null | '
            "awk '$1 > 0 && $5 == 0 {print $1}') && [ -n \"$leader\" ]; "
            "do sleep 0.1; done; "
            f"apptainer exec /data/tf-slurm.sif python {WATCHER} {output_dir}/checkpoints "
            f'{moment} {KILL_AT} "$leader" > {output_dir}/kill.json 2>&1'
        )
        cluster.container("c1").exec_run(["bash", "-c", watch], user="runner", detach=True)
    return job


def finish(cluster, job: str) -> tuple[str, str]:
    """Wait for the job's end; (its output, its final state)."""
    state, _ = wait_for_end(cluster, job, timeout=300)
    return cluster.ok(f"cat /data/cifar10-multi-worker-{job}.out"), state


def metrics(cluster, output_dir: str) -> dict:
    return json.loads(cluster.ok(f"cat {output_dir}/metrics.json"))


@pytest.fixture(scope="module")
def reference(cluster, sample) -> Callable[[], dict]:
    """The uninterrupted run, submitted at once and waited for when a test first needs its
    result: it runs beside the first killed run."""
    text = (Path(__file__).parent / "kill_in_checkpoint.py").read_text()
    cluster.ok(f"mkdir -p /data/e2e-tools && cat > {WATCHER} <<'EOF'\n{text}EOF")
    output_dir = f"/data/runs/ckpt-ref-{uuid.uuid4().hex[:6]}"
    job = submit(cluster, output_dir)

    @functools.cache
    def result() -> dict:
        log, state = finish(cluster, job)
        assert state == "COMPLETED", log
        return metrics(cluster, output_dir)

    return result


# One moment in make test (the shards written, nothing merged: the latest complete checkpoint
# is the one before); the two others, the same resume from a later moment, in make test-soak.
@pytest.mark.parametrize(
    "moment",
    [
        "temp",
        pytest.param("index", marks=pytest.mark.soak),
        pytest.param("state", marks=pytest.mark.soak),
    ],
)
def test_chief_killed_while_checkpointing_resumes_at_the_last_complete_one(
    cluster, reference, moment
):
    output_dir = f"/data/runs/ckpt-kill-{moment}-{uuid.uuid4().hex[:6]}"
    checkpoints = f"{output_dir}/checkpoints"
    cluster.ok(f"mkdir -p {checkpoints}")
    job = submit(cluster, output_dir, moment)
    output = f"/data/cifar10-multi-worker-{job}.out"
    try:  # the killed run, up to tfslurm-run's requeue
        wait_for_log(cluster, output, "requeuing job")
        log = cluster.ok(f"cat {output}")
    finally:  # a watcher that missed its moment must not outlive the test
        cluster.run("pkill -u runner -f kill_in_checkpoint", service="c1")
    kill = json.loads(cluster.ok(f"cat {output_dir}/kill.json"))
    assert kill["killed"] is not None, (kill, log)
    assert "failed with exit 137 (SIGKILL)" in log, log
    assert f"a requeue may help: requeuing job {job} (requeue 1 of 3" in log, log
    # The checkpoint being written when the kill came, and what the state file names after it:
    # the one before, or (if TensorFlow got that far between the watcher's look and the kill:
    # kill["state_step"] is what it saw before) that one.
    written = max(int(m[1]) for e in kill["entries"] if (m := WRITING.match(e)))
    named = int(STATE.search(cluster.ok(f"cat {checkpoints}/checkpoint")).group(1))
    assert written >= KILL_AT and named in (written - EVERY, written), (kill, named)
    files = set(cluster.ok(f"ls {checkpoints}").split())
    assert {f"ckpt-{named}.index", f"ckpt-{named}.data-00000-of-00001"} <= files, files

    # (Read while Slurm holds the requeued job back: its next run writes checkpoints again.)
    log2, state2 = finish(cluster, job)
    assert state2 == "COMPLETED", log2
    assert cluster.ok(f"sacct -D -X -n -P -j {job} -o State").split() == ["REQUEUED", "COMPLETED"]
    second = log2.split(f"tfslurm-run: job {job} (run 2;")[1]
    assert f"resumed from {checkpoints}/ckpt-{named} at step {named}" in second, log2
    resumed = metrics(cluster, output_dir)
    assert (resumed["start_step"], resumed["global_step"]) == (named, STEPS)
    uninterrupted = reference()
    assert abs(resumed["test_accuracy"] - uninterrupted["test_accuracy"]) <= ACCURACY_TOLERANCE, (
        resumed,
        uninterrupted,
    )
