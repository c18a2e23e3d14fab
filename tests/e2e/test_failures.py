"""Failures a job survives on the dev cluster, each against an uninterrupted run of the same job.

- parameter-server: a worker's TensorFlow server SIGKILLed is restarted in place; a worker's
  node lost is left behind while the other worker carries on; a ps SIGKILLed stops the step,
  tfslurm-run requeues the job (the verdict is interrupted) and it resumes from its last
  checkpoint;
- multi-worker: a node lost fails the job (NODE_FAIL), Slurm requeues it, and it resumes on the
  remaining nodes.

Every case ends COMPLETED at the full step count with a learning signal (test_cifar10's
threshold), and nothing of it keeps running on any node; a job that resumed after a requeue did
so from its last checkpoint. (That a resumed job ends as an uninterrupted one would is proven
once, against one: test_checkpoints, test_lifecycle.) A killed node container is started again
at the end and must return to idle.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from .clean_end import NODES, left_in_tmp, node_processes, tmp_entries
from .test_cifar10 import ACCURACY_THRESHOLD
from .test_lifecycle import wait_for_log

pytestmark = pytest.mark.e2e

EXAMPLES = "/data/examples/cifar10"
# Long enough that the job is still training when a failure has been handled (a worker
# server is back in about 3 s, a lost worker noticed within 1 s; the 600 steps of a 2-worker
# parameter-server job take about 12 s here), no longer.
PS_STEPS, MW_STEPS, EVERY = 600, 300, 50
PS_TRAIN = f"--steps {PS_STEPS} --log-every 20 --checkpoint-every {EVERY}"
MW_TRAIN = f"--steps {MW_STEPS} --log-every 20 --checkpoint-every {EVERY}"
KILL_AFTER = "step 100/"  # mid-run, after the first checkpoints
# The coordinator runs a step again when the worker running it is lost, and that worker may
# have applied its update already: ParameterServerStrategy's steps are at-least-once.
RERUN_STEPS = 2
ONE_PER_NODE = "--ntasks-per-node=1"


def submit(cluster, batch: str, train: str, options: str = "") -> tuple[str, str]:
    """sbatch a CIFAR-10 template (with more sbatch `options`) into a fresh output directory;
    (job id, output dir)."""
    out = f"/data/runs/fail-{uuid.uuid4().hex[:6]}"
    job = cluster.ok(
        f"OUTPUT_DIR={out} sbatch --parsable {options} -o /data/fail-%j.out "
        f"{EXAMPLES}/{batch} {train}"
    ).strip()
    return job, out


# A run in one of these states is over, but the job may run again (requeued).
REQUEUED_AFTER = ("NODE_FAIL", "REQUEUED", "PENDING", "RUNNING", "COMPLETING")


def finish(cluster, job: str, timeout: float) -> tuple[str, list[str]]:
    """Wait until the job's last run has ended; its output and its state history (one per run:
    a requeued job's earlier runs show as REQUEUED or NODE_FAIL)."""
    last_run = f"sacct -D -X -n -P -j {job} -o State | tail -n 1"
    ended = cluster.until(f"{last_run} | grep -qvxE '({'|'.join(REQUEUED_AFTER)})?'", timeout, 1)
    history = cluster.ok(f"sacct -D -X -n -P -j {job} -o State").split()
    assert ended, f"{history}\n{cluster.run(f'cat /data/fail-{job}.out').out}"
    log = cluster.ok(f"cat /data/fail-{job}.out")
    assert history[-1] == "COMPLETED", f"{history}\n{log}"
    return log, history


def metrics(cluster, out: str) -> dict:
    return json.loads(cluster.ok(f"cat {out}/metrics.json"))


def check_result(result: dict, steps: int, start: int = 0, extra: int = 0) -> None:
    """The full step count from `start` (at most `extra` steps run twice), a learning signal."""
    assert result["start_step"] == start, result
    assert steps <= result["global_step"] <= steps + extra, result
    assert result["test_accuracy"] > ACCURACY_THRESHOLD, result


def kill_on(cluster, node: str, pattern: str) -> float:
    """SIGKILL the job user's one process on node whose command line matches; when."""
    pids = cluster.ok(f"pgrep -u runner -f '{pattern}'; true", service=node).split()
    assert len(pids) == 1, f"not one process matching {pattern!r} on {node}: {pids}"
    cluster.ok(f"kill -9 {pids[0]}", service=node)
    return time.monotonic()


def seconds_until(cluster, log_file: str, pattern: str, since: float, timeout: float) -> float:
    """Seconds from `since` until the log has a line matching pattern (looked at every 0.5 s)."""
    seen = cluster.until_logged(log_file, pattern, timeout - (time.monotonic() - since))
    assert seen, cluster.run(f"cat {log_file}").out
    return time.monotonic() - since


def nothing_left(cluster, before: set[str], nodes=NODES) -> None:
    """No process of the job user on the nodes, nothing new in their /tmp (a killed node is
    left out: its processes died with it)."""
    time.sleep(2)
    running = node_processes(cluster, nodes)
    assert set(running.values()) == {""}, running
    assert left_in_tmp(cluster, before, nodes) == []


@pytest.fixture
def node_killer(cluster):
    """docker kill a compute node's container; afterwards start it again and check that Slurm
    takes it back (ReturnToService=2). Yields kill(node) -> time of the kill."""
    killed: list[str] = []

    def kill(node: str) -> float:
        cluster.container(node).kill()
        killed.append(node)
        return time.monotonic()

    yield kill
    for node in killed:
        container = cluster.client.containers.get(f"{cluster.project}-{node}-1")
        container.start()
        deadline = time.monotonic() + 120
        while (state := cluster.run(f"sinfo -h -n {node} -o %T").out.strip()) != "idle":
            assert time.monotonic() < deadline, (
                f"{node} is {state} 120 s after its restart\n{cluster.node_report(node)}"
            )
            time.sleep(1)
        # The killed tasks' directories stayed in the container's /tmp: no epilog ran there.
        cluster.ok("rm -rf /tmp/tfslurm-*", service=node, user="root")


def test_a_killed_worker_server_is_restarted_in_place(cluster, sample):
    before = tmp_entries(cluster)
    job, out = submit(cluster, "parameter-server.sbatch", PS_TRAIN)
    log_file = f"/data/fail-{job}.out"
    wait_for_log(cluster, log_file, KILL_AFTER)
    killed = kill_on(cluster, "c2", r"tfslurm_entry[.]task[.]server 3 ")  # worker 1's server
    back = seconds_until(
        cluster, log_file, r"(?s)restarting it in place.*worker 1 serving on", killed, timeout=120
    )
    log, history = finish(cluster, job, timeout=300)
    print(f"worker server restarted and serving {back:.1f} s after the kill")
    assert history == ["COMPLETED"], history
    assert (
        "rank 3 on c2: worker 1 server ended with exit 137 (SIGKILL); restarting it in "
        "place (restart 1 of 3)" in log
    ), log
    assert log.count("rank 3 worker 1 serving on c2:") == 2, log
    assert "rank 3 on c2: chief ended with exit 0; exiting with 0" in log, log
    assert re.search(
        r"tfslurm-run: the step ended in \S+ s: srun status 0, rank 0: completed\n", log
    )
    check_result(metrics(cluster, out), PS_STEPS, extra=RERUN_STEPS)
    nothing_left(cluster, before)


def test_a_lost_worker_node_leaves_the_job_running_on_the_others(cluster, sample, node_killer):
    before = tmp_entries(cluster, ("c1", "c2"))
    # c1: chief and ps; c2: worker 0; c3: worker 1
    job, out = submit(cluster, "parameter-server.sbatch", PS_TRAIN, "--nodes=3 --ntasks=4")
    log_file = f"/data/fail-{job}.out"
    wait_for_log(cluster, log_file, KILL_AFTER)
    killed = node_killer("c3")
    noticed = seconds_until(cluster, log_file, r"worker 1 \(rank 3 on c3\) lost", killed, 60)
    log, history = finish(cluster, job, timeout=300)
    print(f"rank 0 noticed the lost node {noticed:.1f} s after the kill")
    # --no-kill: Slurm shrinks the job to the nodes it has left (a RESIZING record), no requeue
    assert [state for state in history if state != "RESIZING"] == ["COMPLETED"], history
    lost = "rank 0 on c1: worker 1 (rank 3 on c3) lost: is gone without an exit status (its "
    assert lost + "entrypoint was killed, or its node lost); continuing with 1 workers" in log, log
    assert "rank 0: completed; lost worker 1 (rank 3 on c3)" in log, log
    check_result(metrics(cluster, out), PS_STEPS, extra=RERUN_STEPS)
    nothing_left(cluster, before, ("c1", "c2"))


def test_a_killed_ps_fails_the_step_and_the_job_resumes_after_a_requeue(cluster, sample):
    before = tmp_entries(cluster)
    job, out = submit(cluster, "parameter-server.sbatch", PS_TRAIN)
    log_file = f"/data/fail-{job}.out"
    wait_for_log(cluster, log_file, KILL_AFTER)
    killed = kill_on(cluster, "c1", r"tfslurm_entry[.]task[.]server 1 ")  # the ps's server
    stopped = seconds_until(cluster, log_file, "^tfslurm-run: the step ended", killed, 60)
    resumed = seconds_until(cluster, log_file, "resumed from", killed, 300)
    log, history = finish(cluster, job, timeout=300)
    print(f"step stopped {stopped:.1f} s, requeued job resumed {resumed:.0f} s after the kill")
    assert stopped < 15, log
    assert history == ["REQUEUED", "COMPLETED"], history
    assert "rank 0 on c1: rank 1 on c1 failed with exit 137 (SIGKILL); stopping the step" in log
    assert "rank 1 on c1: ps 0 server ended with exit 137 (SIGKILL); told rank 0" in log, log
    interrupted = (
        "the step was interrupted (rank 1 on c1 failed with exit 137 (SIGKILL)): a requeue"
    )
    assert f"{interrupted} may help: requeuing job {job} (requeue 1 of 3" in log, log
    last = int(re.findall(r"wrote checkpoint \S+/ckpt-(\d+)", log.split("requeuing job")[0])[-1])
    assert f"resumed from {out}/checkpoints/ckpt-{last} at step {last}" in log, log
    check_result(metrics(cluster, out), PS_STEPS, start=last)
    nothing_left(cluster, before)


def test_a_lost_node_requeues_a_multi_worker_job_which_resumes(cluster, sample, node_killer):
    before = tmp_entries(cluster, ("c1", "c3"))
    # One task on each of c1 and c2: a node's loss is the point, not how many tasks it had.
    job, out = submit(cluster, "multi-worker.sbatch", MW_TRAIN, ONE_PER_NODE)
    log_file = f"/data/fail-{job}.out"
    wait_for_log(cluster, log_file, KILL_AFTER)
    killed = node_killer("c2")
    resumed = seconds_until(cluster, log_file, "resumed from", killed, 300)
    log, history = finish(cluster, job, timeout=300)
    print(f"the requeued job resumed {resumed:.0f} s after the node was lost")
    assert history == ["NODE_FAIL", "COMPLETED"], history
    assert "rank 1 on c2 is gone" in log, log
    assert re.search(r"tfslurm-run: job \d+ \(run 2; 0 of 3 requeues used\) on c\[1,3\]", log), log
    last = int(re.findall(r"wrote checkpoint \S+/ckpt-(\d+)", log.split("(run 2;")[0])[-1])
    assert f"resumed from {out}/checkpoints/ckpt-{last} at step {last}" in log, log
    check_result(metrics(cluster, out), MW_STEPS, start=last)
    nothing_left(cluster, before, ("c1", "c3"))
