"""The image under Slurm's other container runtimes, on the dev cluster's nodes, with the line a
user types (docs/runtimes.md).

Charliecloud: `make ch-image`'s tar unpacked into a directory on /data (a directory image: from
SquashFS ch-run's FUSE parent would unmount it on Slurm's SIGTERM); ch-run runs no entrypoint,
applies the image's ENV only with --set-env and starts in / unless --cd.

- make test: the README's recipe with the directory in the SIF's place, as written (2 nodes x 2
  tasks; tfslurm-run runs each task with ch-run, nothing to copy) and the custom-loop example
  (TensorFlow's PreemptionCheckpointHandler): `scontrol requeue` mid-run; it saves at the step
  in flight, comes back, resumes there and ends COMPLETED, clean, nothing left.
Slurm's OCI containers: `make oci-bundle`'s bundle unpacked into /data/tf-slurm.oci, the nodes'
oci.conf Slurm's rootless crun example. Slurm replaces the bundle's process.args with the task's
command and merges the step's environment into the bundle's (the image's ENV wins); the task
starts in the bundle's `/` (the entrypoint moves to srun's $PWD).

- make test: the README's recipe as written (2 nodes x 2 tasks; tfslurm-run runs each task with
  srun --container) with the custom-loop example (PreemptionCheckpointHandler): `scontrol
  requeue` mid-run; it saves at the step in flight, comes back, resumes there and ends
  COMPLETED, clean, no crun container left.
- make test-soak: TensorFlow's Keras multi-worker tutorial, unchanged, through
  `srun --container=BUNDLE tfslurm-entry main.py` on 2 nodes x 2 tasks: COMPLETED, each task's
  role, the move to srun's directory said once, the step ending within seconds of its last
  program, no crun container left; a task killed mid-run fails the job within seconds, naming
  it, nothing left.

Charliecloud, make test-soak: TensorFlow's Keras multi-worker tutorial, unchanged, through
  `srun ch-run --set-env -b /data --cd $PWD IMAGE -- tfslurm-entry main.py` on 2 nodes x 2
  tasks (COMPLETED, each task's TF_CONFIG role, the end-of-job barrier passed, the step ending
  within seconds of its last program); a task killed mid-run (FAILED within 15 s naming it,
  nothing left); the same line with `python` for `tfslurm-entry` and a Model.fit program that
  does not read TF_CONFIG itself (every task stopped before training by the one line that
  names ch-run's fix).
"""

from __future__ import annotations

import re
import uuid

import pytest

from . import jobs
from .clean_end import NODES, check_clean_end, node_processes, tmp_entries
from .conftest import ROOT, USER_PROGRAMS_DIR, devcluster
from .test_lifecycle import EXAMPLES, NAMED, TRAIN, VICTIMS, check_killed_task_fails_job
from .test_preemption import (
    CTL,
    DECISION,
    check_left_clean,
    check_runs_resume,
    history,
    requeue,
    submit,
    wait_for,
)

# One worker's cluster gets the images (unpacked once), and runs these cases.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("charliecloud")]

TUTORIAL = f"{USER_PROGRAMS_DIR}/keras_multi_worker"
CH_RUN = f"ch-run --set-env -b /data --cd $PWD {devcluster.CH_ON_CLUSTER} --"
# TensorFlow's info lines (the image's ENV sets 1; a later --set-env wins): the coordination
# service logs each barrier that passes.
SHOW_INFO = "--set-env=TF_CPP_MIN_LOG_LEVEL=0"
PASSED = "Barrier(tfslurm/end_of_job::0) has passed with status: OK"
TWO_BY_TWO = "-N2 --ntasks-per-node=2"


@pytest.fixture(scope="module")
def oci_bundle(cluster) -> str:
    """The OCI bundle on the cluster's /data (unpacked once per cluster)."""
    devcluster.install_oci_bundle(ROOT / "tf-slurm.oci.tar")
    return devcluster.OCI_ON_CLUSTER


def crun_containers(cluster) -> dict[str, str]:
    """The crun containers the job user has on each compute node (Slurm's RunTimeDelete
    should leave none)."""
    return {
        node: cluster.run(
            "crun --root=/run/user/1000 list -q 2>/dev/null || true", service=node, user="runner"
        ).out.strip()
        for node in NODES
    }


def test_a_requeued_job_under_slurms_oci_container_resumes_and_ends_clean(
    cluster, programs, oci_bundle
):
    text = requeue_the_recipe(cluster, programs, oci_bundle)
    # Each run's rank 0 says where its tasks run: the batch script's directory, not the bundle's /.
    assert text.count("Slurm's --container started this task in /") == 2, text
    assert set(crun_containers(cluster).values()) == {""}, text


def requeue_the_recipe(cluster, programs, image: str) -> str:
    """The README's recipe as written (2 x 2) with `image` in the SIF's place and the custom-loop
    example, `scontrol requeue` mid-run: REQUEUED then COMPLETED, resumed at the step in
    flight, every task's role, tfslurm-run running from the directory uncopied, nothing left;
    the job's log."""
    before = tmp_entries(cluster)
    job, log, _ = submit(cluster, CTL, "requeue", programs, image=image, as_written=True)
    wait_for(cluster, log, r"^step [3-9]\d")
    requeue(cluster, job, log)
    state = jobs.wait(cluster, job, timeout=600)
    text = cluster.ok(f"cat {log}")
    assert state == "COMPLETED", text
    assert history(cluster, job) == ["REQUEUED", "COMPLETED"], text
    check_runs_resume(text, 2, CTL.steps("requeue"))
    assert re.search(DECISION["requeue"], text), text
    assert len(re.findall(r"^tfslurm: rank \d/4 host c[12] role worker", text, re.M)) == 8, text
    ran = f"tfslurm-run: running from {image}: the image is a directory: nothing for Slurm"
    assert text.count(ran) == 2, text
    check_left_clean(cluster, text, before)
    return text


@pytest.mark.soak
def test_the_tutorial_runs_under_slurms_oci_container(cluster, programs, oci_bundle):
    job, state = jobs.run(
        cluster,
        f"{TWO_BY_TWO} -t 10 -D {TUTORIAL} -o {USER_PROGRAMS_DIR}/oci-%j.out "
        f"--wrap 'srun --kill-on-bad-exit=1 --container={oci_bundle} tfslurm-entry main.py'",
        "TUTORIAL_STEPS=10",
    )
    log = cluster.ok(f"cat {USER_PROGRAMS_DIR}/oci-{job}.out")
    assert state == "COMPLETED", log
    roles = re.findall(r"^tfslurm: rank (\d)/4 host (c\d) role worker index \1 ", log, re.M)
    assert sorted(roles) == [("0", "c1"), ("1", "c1"), ("2", "c2"), ("3", "c2")], log
    moved = f"started this task in / (the bundle's process.cwd): running in {TUTORIAL}, srun's"
    assert log.count(moved) == 1, log
    check_clean_end(cluster, job, log)
    assert set(crun_containers(cluster).values()) == {""}, log
    assert set(node_processes(cluster).values()) == {""}, log


@pytest.mark.soak
def test_a_killed_task_under_slurms_oci_container_fails_the_job_fast(cluster, sample, oci_bundle):
    log = kill_a_task(cluster, f"--container={oci_bundle} tfslurm-entry", "oci")
    assert set(crun_containers(cluster).values()) == {""}, log


def kill_a_task(cluster, line: str, name: str) -> str:
    """The CIFAR-10 example on 2 x 2 through `srun ... LINE`, a task killed mid-run: the job
    FAILED within seconds, rank 0 naming it, nothing left (test_lifecycle's check); its log."""
    node, rank, finder = VICTIMS["multi-worker"]
    out = f"/data/runs/{name}-kill-{uuid.uuid4().hex[:6]}"
    batch = (
        f"{TWO_BY_TWO} --wrap 'srun --kill-on-bad-exit=0 {line} --strategy multi-worker "
        f"{EXAMPLES}/train.py --data-dir /data/cifar10 --output-dir {out} {TRAIN}'"
    )
    job = cluster.ok(f"sbatch --parsable -o /data/kill-%j.out {batch}").strip()
    try:
        log = check_killed_task_fails_job(cluster, job, node, rank, finder)
    finally:
        cluster.run(f"scancel {job}")
    assert re.search(NAMED["multi-worker", False], log), log
    return log


@pytest.fixture(scope="module")
def ch_image(cluster) -> str:
    """The Charliecloud image on the cluster's /data (unpacked once per cluster)."""
    devcluster.install_ch_image(ROOT / "tf-slurm.ch.tar")
    return devcluster.CH_ON_CLUSTER


def ch_job(cluster, command: str, name: str) -> tuple[str, str, str]:
    """sbatch `srun ch-run ... -- COMMAND` in the tutorial's directory, 2 nodes x 2 tasks, and
    wait; (job id, final state, output)."""
    line = CH_RUN.replace("--set-env ", f"--set-env {SHOW_INFO} ", 1)
    job, state = jobs.run(
        cluster,
        f"{TWO_BY_TWO} -t 10 -D {TUTORIAL} -o {USER_PROGRAMS_DIR}/{name}-%j.out "
        f"--wrap 'srun --kill-on-bad-exit=1 {line} {command}'",
        "TUTORIAL_STEPS=10",
    )
    return job, state, cluster.ok(f"cat {USER_PROGRAMS_DIR}/{name}-{job}.out")


def test_a_requeued_job_under_charliecloud_resumes_and_ends_clean(cluster, programs, ch_image):
    requeue_the_recipe(cluster, programs, ch_image)


@pytest.mark.soak
def test_the_tutorial_runs_under_charliecloud(cluster, programs, ch_image):
    job, state, log = ch_job(cluster, "tfslurm-entry main.py", "ch-run")
    assert state == "COMPLETED", log
    roles = re.findall(r"^tfslurm: rank (\d)/4 host (c\d) role worker index \1 ", log, re.M)
    assert sorted(roles) == [("0", "c1"), ("1", "c1"), ("2", "c2"), ("3", "c2")], log
    assert PASSED in log, log
    check_clean_end(cluster, job, log)


@pytest.mark.soak
def test_a_killed_task_under_charliecloud_fails_the_job_fast(cluster, sample, ch_image):
    kill_a_task(cluster, f"{CH_RUN} tfslurm-entry", "ch")


@pytest.mark.soak
def test_a_program_started_without_the_entrypoint_under_charliecloud_stops(
    cluster, programs, ch_image
):
    # The Model.fit example, which does not read TF_CONFIG itself (the tutorial would fail
    # with a KeyError: not the silent trap).
    program = "python /data/examples/preemption/keras_fit.py /tmp/unstarted 1 5"
    _, state, log = ch_job(cluster, program, "ch-run-unstarted")
    assert state == "FAILED", f"{state}\n{log}"
    said = {line for line in log.splitlines() if line.startswith("tfslurm: error: ")}
    assert len(said) == 1, log
    assert "Under Charliecloud: ch-run never runs the image's entrypoint" in said.pop(), log
    assert "Epoch" not in log, log
    assert set(node_processes(cluster).values()) == {""}, log
