"""Lifecycle on the dev cluster (first part): a parameter-server job's servers stop with it."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

pytestmark = pytest.mark.e2e

SIF = "/data/tf-slurm.sif"
EXAMPLES = "/data/examples/cifar10"


def node_processes(cluster) -> dict[str, str]:
    """What the job user still runs on each compute node."""
    return {
        node: cluster.run("ps -u runner -o pid=,args=", service=node, user="root").out.strip()
        for node in ("c1", "c2", "c3")
    }


def elapsed_seconds(text: str) -> int:
    parts = [int(p) for p in re.split("[-:]", text)]
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + part
    return seconds


def test_parameter_server_job_ends_with_its_chief(cluster, sample):
    out = f"/data/runs/lifecycle-{uuid.uuid4().hex[:6]}"
    job = cluster.ok(
        f"OUTPUT_DIR={out} sbatch --wait --parsable -o /data/lifecycle-%j.out "
        f"{EXAMPLES}/parameter-server.sbatch --steps 40 --log-every 20"
    ).strip()
    log = cluster.ok(f"cat /data/lifecycle-{job}.out")
    rows = cluster.ok(f"sacct -j {job} -n -P -o JobID,State,ExitCode,Elapsed").splitlines()
    states = {r.split("|")[0]: r.split("|")[1:] for r in rows}
    assert all(state == "COMPLETED" and code == "0:0" for state, code, _ in states.values()), rows
    # The step lasts as long as the chief's program, plus start-up and a few seconds.
    chief = float(re.search(r"chief program ended with exit 0 after ([\d.]+) s", log).group(1))
    step = elapsed_seconds(states[f"{job}.0"][2])
    assert step <= chief + 30, f"step took {step} s, chief {chief} s\n{log}"
    assert len(re.findall(r"chief ended with exit 0; exiting with 0", log)) == 3, log
    assert node_processes(cluster) == {"c1": "", "c2": "", "c3": ""}


def test_servers_give_up_when_the_chief_never_comes(cluster):
    """Rank 0 dies before its entrypoint starts: ps and workers exit non-zero after the timeout."""
    script = (
        'if [ "$SLURM_PROCID" = 0 ]; then echo "rank 0 crashing"; exit 3; fi; '
        f"exec apptainer run {SIF} --strategy parameter-server --chief-timeout 15 true"
    )
    start = time.monotonic()
    result = cluster.run(f"srun -N2 --ntasks-per-node=2 bash -c '{script}'")
    took = time.monotonic() - start
    assert result.code != 0
    assert result.err.count("did not answer within 15 s") == 3, result.err
    assert took < 60, f"servers took {took:.0f} s to give up"
    assert node_processes(cluster) == {"c1": "", "c2": "", "c3": ""}


def test_preemption_checkpoints_requeues_and_resumes(cluster, sample):
    """USR1 to the batch script mid-training: checkpoint, REQUEUED, resumed at that step."""
    out = f"/data/runs/preempt-{uuid.uuid4().hex[:6]}"
    steps = 300
    job = cluster.ok(
        f"OUTPUT_DIR={out} sbatch --parsable -o /data/preempt-%j.out "
        f"{EXAMPLES}/multi-worker.sbatch --steps {steps} --log-every 10 --checkpoint-every 1000"
    ).strip()
    log_file = f"/data/preempt-{job}.out"
    wait_for_log(cluster, log_file, "step 50/")
    cluster.ok(f"scancel --batch --signal=USR1 {job}")
    state, _ = wait_for_end(cluster, job, timeout=420)  # Slurm holds a requeued job back a while
    log = cluster.ok(f"cat {log_file}")
    assert state == "COMPLETED", log
    history = cluster.ok(f"sacct -D -X -n -P -j {job} -o State").split()
    assert history[0] == "REQUEUED" and history[-1] == "COMPLETED", history

    stopped = int(re.search(r"preempted at step (\d+): checkpoint written", log).group(1))
    assert 50 <= stopped < steps, log
    assert f"wrote checkpoint {out}/checkpoints/ckpt-{stopped}" in log, log
    assert f"resumed from {out}/checkpoints/ckpt-{stopped} at step {stopped}" in log, log
    assert "SLURM_RESTART_COUNT=1" in log and "(restart 1)" in log, log
    metrics = json.loads(cluster.ok(f"cat {out}/metrics.json"))
    assert (metrics["start_step"], metrics["global_step"]) == (stopped, steps)
    assert metrics["test_accuracy"] > 0.6, metrics


def wait_for_log(cluster, log_file: str, text: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while text not in cluster.run(f"cat {log_file}").out:
        assert time.monotonic() < deadline, cluster.run(f"cat {log_file}").out
        time.sleep(1)


def wait_for_end(cluster, job: str, timeout: float) -> tuple[str, float]:
    """The job's final state and when it was first seen (a requeued job has not ended)."""
    deadline = time.monotonic() + timeout
    while True:
        states = cluster.ok(f"sacct -X -n -P -j {job} -o State").split()
        state = states[-1] if states else ""
        if state and state not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED"):
            return state, time.monotonic()
        assert time.monotonic() < deadline, f"job {job} still {state}"
        time.sleep(0.5)


# Kill one task's process mid-training: with --kill-on-bad-exit=1 (shipped sbatch scripts) Slurm
# ends the whole step, names the task, and the job is FAILED; nothing keeps running.
KILLERS = {
    # multi-worker: rank 2's training process on c2 (the entrypoint exec'ed it)
    "multi-worker": ("c2", 2, "pgrep -u runner -f 'python.*train.py'"),
    # parameter-server: the ps (rank 1, on c1), an entrypoint running a TensorFlow server
    "parameter-server": ("c1", 1, "pgrep -u runner -f 'tfslurm-entry'"),
}


@pytest.mark.parametrize("strategy", sorted(KILLERS))
def test_a_killed_task_fails_the_whole_job_fast(cluster, sample, strategy):
    node, rank, finder = KILLERS[strategy]
    out = f"/data/runs/kill-{uuid.uuid4().hex[:6]}"
    job = cluster.ok(
        f"OUTPUT_DIR={out} sbatch --parsable -o /data/kill-%j.out "
        f"{EXAMPLES}/{strategy}.sbatch --steps 5000 --log-every 10"
    ).strip()
    try:
        check_killed_task_fails_job(cluster, job, node, rank, finder)
    finally:
        cluster.run(f"scancel {job}")  # a failed check must not leave a 5000-step job behind


def check_killed_task_fails_job(cluster, job: str, node: str, rank: int, finder: str) -> None:
    log_file = f"/data/kill-{job}.out"
    wait_for_log(cluster, log_file, "step 30/")
    victim = (
        f"for p in $({finder}); do "
        f"tr '\\0' '\\n' < /proc/$p/environ | grep -qx SLURM_PROCID={rank} && echo $p; done; true"
    )
    # As the job user: root in the node container may not read Apptainer's processes' environ.
    pids = cluster.ok(victim, service=node).split()
    assert pids, f"no process of rank {rank} on {node}"
    cluster.ok(f"kill -9 {pids[0]}", service=node)
    killed = time.monotonic()
    state, ended = wait_for_end(cluster, job, timeout=60)
    assert state == "FAILED"
    assert ended - killed < 15, f"job ended {ended - killed:.0f} s after the kill"
    assert re.search(rf"srun: error: {node}: task {rank}: Killed", cluster.ok(f"cat {log_file}"))
    time.sleep(2)
    assert node_processes(cluster) == {"c1": "", "c2": "", "c3": ""}
