"""The image under Slurm's other container runtimes, on the dev cluster's nodes, with the line a
user types (docs/runtimes.md).

- Charliecloud: `make ch-image`'s tar unpacked into a directory on /data (a directory image:
  from SquashFS ch-run's FUSE parent would unmount it on Slurm's SIGTERM), run by
  `srun ch-run --set-env -b /data --cd $PWD IMAGE -- tfslurm-entry main.py` (ch-run runs no
  entrypoint, applies the image's ENV only with --set-env and starts in / unless --cd):
  TensorFlow's Keras multi-worker tutorial, unchanged, on 2 nodes, COMPLETED, each task with its
  TF_CONFIG role, the end-of-job barrier passed, the step ending within seconds of its last
  program. The same line without the entrypoint (`-- python keras_fit.py`, a Model.fit
  program that does not read TF_CONFIG itself) stops every task before training with the one
  line that names Charliecloud's fix. And the README's preemption recipe with the directory
  image in the SIF's place (tfslurm-run runs it with ch-run, nothing to copy): preempted, it
  saves at the step in flight, comes back and resumes there, as under Apptainer.
"""

from __future__ import annotations

import re

import pytest

from . import jobs
from .clean_end import check_clean_end, node_processes, tmp_entries
from .conftest import ROOT, USER_PROGRAMS_DIR, devcluster
from .test_preemption import (
    CTL,
    check_left_clean,
    check_runs_resume,
    history,
    preempt,
    submit,
    wait_for,
)

# One worker's cluster gets the image (unpacked once), and runs these cases.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("charliecloud")]

TUTORIAL = f"{USER_PROGRAMS_DIR}/keras_multi_worker"
# ch-run starts the command in / unless told (--cd): the batch script's working directory.
CH_RUN = f"ch-run --set-env -b /data --cd $PWD {devcluster.CH_ON_CLUSTER} --"
# TensorFlow's info lines (the image's ENV sets 1; a later --set-env wins): the coordination
# service logs each barrier that passes.
SHOW_INFO = "--set-env=TF_CPP_MIN_LOG_LEVEL=0"
PASSED = "Barrier(tfslurm/end_of_job::0) has passed with status: OK"


@pytest.fixture(scope="module")
def ch_image(cluster) -> str:
    """The Charliecloud image on the cluster's /data (unpacked once per cluster)."""
    devcluster.install_ch_image(ROOT / "tf-slurm.ch.tar")
    return devcluster.CH_ON_CLUSTER


def ch_job(cluster, command: str, name: str) -> tuple[str, str, str]:
    """sbatch `srun ch-run ... -- COMMAND` in the tutorial's directory, 2 nodes, one task
    each, and wait; (job id, final state, output)."""
    line = CH_RUN.replace("--set-env ", f"--set-env {SHOW_INFO} ", 1)
    job, state = jobs.run(
        cluster,
        f"-N2 --ntasks-per-node=1 -t 10 -D {TUTORIAL} -o {USER_PROGRAMS_DIR}/{name}-%j.out "
        f"--wrap 'srun --kill-on-bad-exit=1 {line} {command}'",
        "TUTORIAL_STEPS=10",
    )
    return job, state, cluster.ok(f"cat {USER_PROGRAMS_DIR}/{name}-{job}.out")


def test_the_tutorial_runs_under_charliecloud(cluster, programs, ch_image):
    job, state, log = ch_job(cluster, "tfslurm-entry main.py", "ch-run")
    assert state == "COMPLETED", log
    roles = sorted(re.findall(r"^tfslurm: rank (\d)/2 host (c\d) role worker index \1 ", log, re.M))
    assert [rank for rank, _ in roles] == ["0", "1"], log
    assert len({host for _, host in roles}) == 2, log
    assert PASSED in log, log
    check_clean_end(cluster, job, log)


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


def test_a_preempted_job_under_charliecloud_saves_comes_back_and_resumes(
    cluster, programs, ch_image
):
    before = tmp_entries(cluster)
    job, log, _ = submit(
        cluster, CTL, "preemption", programs, "TFSLURM_MAX_REQUEUES=0", image=ch_image
    )
    wait_for(cluster, log, r"^step [3-9]\d")
    preempt(cluster, job, log)
    state = jobs.wait(cluster, job, timeout=600)
    text = cluster.ok(f"cat {log}")
    assert state == "COMPLETED", text
    assert history(cluster, job) == ["PREEMPTED", "COMPLETED"], text
    check_runs_resume(text, 2, CTL.steps("preemption"))
    ran = f"tfslurm-run: running from {ch_image}: the image is a directory: nothing for Slurm"
    assert text.count(ran) == 2, text
    check_left_clean(cluster, text, before)
