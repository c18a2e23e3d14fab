"""The core of the kit on each Slurm release the dev cluster runs (make test-slurm-versions).

Run against the cluster of TFSLURM_SLURM (22.05, 24.11, 26.05: Debian bookworm's, trixie's and
sid's packages), one release at a time; tests/e2e/slurm_matrix.py turns the runs into
docs/resolution.md's table. The cases: the CIFAR-10 jobs (multi-worker, parameter-server,
heterogeneous), a het step made by `srun a : b` outside an allocation, cyclic and `-m pack`
placement, GPUs bound by --gpus-per-task=2 and --gpu-bind=single:1 (placeholder GPUs), a failing
task, a preempted job that requeues and resumes, and Slurm's own OCI containers (srun
--container with `make oci-bundle`'s bundle: the README's recipe requeued and resumed; on 22.05,
whose tasks start there without their own variables, one line from the kit instead). Every
task prints Slurm's view of itself next to the kit's, so each check compares the kit with Slurm
on that very release. On 22.05 the
nodes run tfslurm-entry from a venv (Debian has no Apptainer for bookworm); elsewhere the SIF."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from . import jobs
from .conftest import LAUNCH, ROOT, SLURM, USER_PROGRAMS_DIR, devcluster
from .test_lifecycle import wait_for_end, wait_for_log
from .test_runtimes import requeue_the_recipe

pytestmark = pytest.mark.slurm_versions

EXAMPLES = "/data/examples/cifar10"
TASK = f"""#!/bin/bash
echo "SLURM procid=$SLURM_PROCID node=$SLURMD_NODENAME cvd=${{CUDA_VISIBLE_DEVICES-unset}}"
exec {LAUNCH} "$@"
"""
SLURM_LINE = re.compile(r"^SLURM procid=(\d+) node=(\S+) cvd=(\S*)$", re.M)


@pytest.fixture(scope="module")
def task(cluster) -> str:
    """A task wrapper on /data: Slurm's view of the task, then the kit with its arguments."""
    path = "/data/matrix/task.sh"
    cluster.ok(f"mkdir -p /data/matrix && cat > {path} <<'EOF'\n{TASK}EOF\nchmod +x {path}")
    assert SLURM.version in cluster.ok("sinfo --version")
    return path


def step(cluster, srun: str) -> list[tuple[dict, dict]]:
    """Run an srun line ({task} is the wrapper) from the login node; per SLURM_PROCID, Slurm's
    view of the task and the kit's --print-config."""
    out = cluster.ok(srun)
    slurm = {int(m[0]): {"node": m[1], "cvd": m[2]} for m in SLURM_LINE.findall(out)}
    configs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(configs) == len(slurm) > 1, out
    by_procid = {c["procid"]: c for c in configs}
    return [(slurm[p], by_procid[p]) for p in sorted(slurm)]


def gpus_seen(slurm: dict, config: dict) -> str:
    return (
        slurm["cvd"] if config["CUDA_VISIBLE_DEVICES"] is None else config["CUDA_VISIBLE_DEVICES"]
    )


@pytest.mark.parametrize("method", ["cyclic", "pack"])
def test_placement(cluster, task, method):
    views = step(cluster, f"srun -p debug -N2 -n5 -m {method} {task} --print-config")
    for slurm, config in views:
        assert config["host"] == slurm["node"], (slurm, config)
    if method == "cyclic":  # ranks alternate between the nodes while both have room
        assert views[0][0]["node"] != views[1][0]["node"]


@pytest.mark.parametrize("binding", ["--gpus-per-task=2", "--gres=gpu:4 --gpu-bind=single:1"])
def test_gpus_bound_by_slurm_are_kept(cluster, task, binding):
    views = step(cluster, f"srun -p gpu -N1 -n2 {binding} {task} --print-config")
    seen = [gpus_seen(slurm, config) for slurm, config in views]
    assert seen == [slurm["cvd"] for slurm, _ in views], views
    assert len(set(seen)) == 2 and "unset" not in seen


def test_het_step_made_by_srun_outside_an_allocation(cluster, task):
    entry = f"{task} --strategy parameter-server --print-config"
    views = step(
        cluster, f"srun -p debug -N1 -n2 {entry} : -p gpu -N2 -n2 --gpus-per-task=1 {entry}"
    )
    assert len({json.dumps(c["TF_CONFIG"]["cluster"]) for _, c in views}) == 1
    roles = [(config["role"], slurm["node"]) for slurm, config in views]
    assert roles == [("chief", "c1"), ("ps", "c1"), ("worker", "g1"), ("worker", "g2")], roles
    for slurm, config in views:
        assert config["host"] == slurm["node"]
        seen = gpus_seen(slurm, config)  # chief and ps on c1: no GPU there, none given
        assert seen == slurm["cvd"] if config["role"] == "worker" else seen in ("", "unset")


def run_job(cluster, batch: str, train: str) -> tuple[str, str, dict]:
    """sbatch a CIFAR-10 template and wait; (job id, its output, its metrics)."""
    out = f"/data/runs/matrix-{uuid.uuid4().hex[:6]}"
    job, _ = jobs.run(
        cluster, f"-o /data/matrix/%j.out {EXAMPLES}/{batch} {train}", f"OUTPUT_DIR={out}"
    )
    log = cluster.ok(f"cat /data/matrix/{job}.out")
    assert cluster.ok(f"sacct -X -n -P -j {job} -o State").split()[-1] == "COMPLETED", log
    return job, log, json.loads(cluster.ok(f"cat {out}/metrics.json"))


@pytest.mark.parametrize("batch", ["multi-worker", "parameter-server", "heterogeneous"])
def test_cifar10_job(cluster, sample, task, batch):
    _, log, metrics = run_job(cluster, f"{batch}.sbatch", "--steps 60 --log-every 20")
    assert metrics["global_step"] == 60, log
    assert metrics["test_accuracy"] > 0.2, metrics  # learning: 10 classes are 0.1 by chance


def test_a_failing_task_fails_the_step_fast(cluster, task):
    """Rank 2 exits 3 after 2 s, the others would sleep 5 minutes: the kit ends the step
    (--kill-on-bad-exit=0: not Slurm) and names the rank."""
    fail = (
        "import os, sys, time; "
        "time.sleep(2) if os.environ['SLURM_PROCID'] == '2' else time.sleep(300); sys.exit(3)"
    )
    started = time.monotonic()
    result = cluster.run(f'srun --kill-on-bad-exit=0 -p debug -N2 -n4 {task} python -c "{fail}"')
    took = time.monotonic() - started
    assert result.code != 0, result
    assert re.search(r"rank 2 on c\d failed with exit 3", result.out + result.err), result
    assert took < 60, f"the step took {took:.0f} s to end after rank 2 failed"


def test_a_preempted_job_requeues_and_resumes(cluster, sample, task):
    """Through tfslurm-run, which copies the SIF onto each node first (where the nodes have
    Apptainer): Slurm's SIGTERM reaches every process of the step, the squashfuse that mounts a
    SIF too, and the tasks would die of SIGBUS before they save."""
    out = f"/data/runs/matrix-preempt-{uuid.uuid4().hex[:6]}"
    steps = 200
    job = cluster.ok(
        f"OUTPUT_DIR={out} sbatch --parsable -o /data/matrix/preempt-%j.out "
        f"{EXAMPLES}/multi-worker.sbatch --steps {steps} --log-every 10 "
        "--checkpoint-every 1000"
    ).strip()
    log_file = f"/data/matrix/preempt-{job}.out"
    wait_for_log(cluster, log_file, "step 40/")
    cluster.ok(f"scancel --signal=TERM {job}")  # what the time limit's --signal=TERM@120 sends
    state, _ = wait_for_end(cluster, job, timeout=480)
    log = cluster.ok(f"cat {log_file}")
    assert state == "COMPLETED", log
    assert "Bus error" not in log and "(SIGBUS)" not in log, log
    stopped = int(re.search(r"preempted at step (\d+): checkpoint written", log).group(1))
    assert f"resumed from {out}/checkpoints/ckpt-{stopped} at step {stopped}" in log, log
    metrics = json.loads(cluster.ok(f"cat {out}/metrics.json"))
    assert (metrics["start_step"], metrics["global_step"]) == (stopped, steps)


def test_slurms_oci_container(cluster, programs):
    """`srun --container=BUNDLE`: on 24.11 and 26.05 the README's recipe with the bundle, 2 x 2,
    requeued mid-run, resumes and ends clean. Slurm 22.05 starts each task there without its
    own variables (SLURM_PROCID...) and a node's second task not at all: the kit says so in one
    line (tfslurm-run before anything starts; the entrypoint in each task of the bare line),
    rather than letting each task train alone."""
    devcluster.install_oci_bundle(ROOT / "tf-slurm.oci.tar")
    bundle = devcluster.OCI_ON_CLUSTER
    if SLURM.version != "22.05":
        requeue_the_recipe(cluster, programs, bundle)
        return
    # Not the venv this release's nodes run the kit from (TFSLURM_ENTRY): the bundle.
    refused = cluster.run(f"env -u TFSLURM_ENTRY tfslurm-run {bundle} train.py")
    assert refused.code == 2, refused
    assert refused.err.startswith(
        "tfslurm-run: error: slurm-wlm 22.05.8's srun --container starts each task without its "
        "own variables"
    ), refused
    bare = cluster.run(
        f"cd {USER_PROGRAMS_DIR}/keras_multi_worker && "
        f"srun -N2 --ntasks-per-node=1 --container={bundle} tfslurm-entry main.py"
    )
    assert bare.code != 0, bare
    said = re.findall(
        r"^tfslurm-entry: error: this task of a 2-task Slurm step has no SLURM_PROCID",
        bare.err,
        re.M,
    )
    assert len(said) == 2, bare
    assert "Epoch" not in bare.out + bare.err, bare  # nothing trained
