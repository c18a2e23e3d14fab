"""Programs our users wrote, not we: TensorFlow's distributed tutorials, unchanged, through
`srun apptainer run tf-slurm.sif main.py` (tests/user_programs/ holds our copies).

- MultiWorkerMirroredStrategy with Keras `Model.fit`, and with a custom training loop: 2 nodes,
  one worker each: the run COMPLETED, no error line, the step ends within seconds of its last
  program, and TensorFlow's own info line shows the kit's barrier passing. `make test-soak`
  runs each 5 times in a row (a race at the end shows as error lines, if at all, only in some
  runs).
- ParameterServerStrategy (`Model.fit`, then a ClusterCoordinator loop) with a chief, 2 ps and
  2 workers: the same checks, and 5 runs in the soak.
- The failure path: worker 1 of the Keras program raises after its first epoch; the job
  FAILED within seconds of that, naming rank 1, without waiting at the end-of-job barrier.
"""

from __future__ import annotations

import re

import pytest

from . import jobs
from .clean_end import check_clean_end, node_processes
from .conftest import LAUNCH
from .conftest import USER_PROGRAMS_DIR as DIR

pytestmark = pytest.mark.e2e

RUNS = 5  # in a row, in make test-soak; make test runs each tutorial once
# Each run's job: the tutorials' own command line, in the program's directory.
JOBS = {
    "keras_multi_worker": "-N2 --ntasks-per-node=1",
    "ctl_multi_worker": "-N2 --ntasks-per-node=1",
    "parameter_server": "-N3 -n5",
}
LAUNCH_OPTIONS = {"parameter_server": " --strategy parameter-server --ps 2"}
FAILED_WITHIN_S = 10
MULTI_WORKER = ("keras_multi_worker", "ctl_multi_worker")
# TensorFlow's info lines, the image's default (1) overridden inside Apptainer too: the
# coordination service logs each barrier that passes.
SHOW_INFO = "TF_CPP_MIN_LOG_LEVEL=0 APPTAINERENV_TF_CPP_MIN_LOG_LEVEL=0"
PASSED = "Barrier(tfslurm/end_of_job::0) has passed with status: OK"
# Steps per epoch in the multi-worker tutorials (theirs: 70; 5 full runs each took 51-93 s per
# run here): the test suite's time. Their end, where the race is, is the same.
STEPS = 10


def run_job(cluster, name: str, env: str = "") -> tuple[str, str, str]:
    """sbatch one run of a tutorial and wait for it; (job id, final state, output)."""
    options, launch = JOBS[name], LAUNCH + LAUNCH_OPTIONS.get(name, "")
    job, state = jobs.run(
        cluster,
        f"{options} -t 10 -D {DIR}/{name} -o {DIR}/{name}-%j.out "
        f"--wrap 'srun --kill-on-bad-exit=1 {launch} main.py'",
        f"TUTORIAL_STEPS={STEPS} {env}",
    )
    return job, state, cluster.ok(f"cat {DIR}/{name}-{job}.out")


@pytest.mark.parametrize("runs", [1, pytest.param(RUNS, marks=pytest.mark.soak, id="soak")])
@pytest.mark.parametrize("name", list(JOBS))
def test_a_tutorial_ends_clean_every_run(cluster, programs, name, runs):
    for run in range(1, runs + 1):
        job, state, log = run_job(cluster, name, SHOW_INFO if name in MULTI_WORKER else "")
        assert state == "COMPLETED", f"run {run}: {state}\n{log}"
        check_clean_end(cluster, job, log)
        # The tutorial trained to its end: Keras' last epoch, the loop's last epoch, the
        # coordinator's final loss.
        done = {
            "keras_multi_worker": "Epoch 3/3",
            "ctl_multi_worker": "Epoch: 2,",
            "parameter_server": "Final loss is",
        }[name]
        assert done in log, f"run {run}\n{log}"
        assert "tfslurm: end of job:" not in log, f"run {run}: the barrier gave up\n{log}"
        if name in MULTI_WORKER:  # the kit's barrier ran, in the program's own Python
            assert PASSED in log, f"run {run}: no end-of-job barrier\n{log}"


def test_a_failing_worker_ends_the_step_within_seconds(cluster, programs):
    job, state, log = run_job(cluster, "keras_multi_worker", "FAIL_ON_TASK=1")
    assert state == "FAILED", f"{state}\n{log}"
    assert "RuntimeError: injected failure on worker 1" in log, log
    assert re.search(r"rank 1 on c\d failed with exit 1; stopping the step", log), log
    assert "tfslurm: end of job:" not in log, log
    # From worker 1's failure to the job's end: seconds, not the heartbeat timeout or the
    # barrier's.
    failed_at = float(re.search(r"injected failure on worker 1 at ([\d.]+)", log).group(1))
    end = float(cluster.ok(f"SLURM_TIME_FORMAT=%s sacct -X -n -P -j {job} -o End").strip())
    assert end - failed_at <= FAILED_WITHIN_S, f"ended {end - failed_at:.1f} s after\n{log}"


def test_a_program_started_without_the_entrypoint_stops_with_one_line(cluster, programs):
    """`srun apptainer exec` starts a program in the image without the runscript (the kit's
    entrypoint), as ch-run, Slurm's --container and pyxis do: the Model.fit example (which does
    not read TF_CONFIG itself) would train alone on each task. It stops before training with
    one line naming Apptainer's fix (each task says the same); FAILED, nothing left running."""
    if not LAUNCH.startswith("apptainer run "):
        pytest.skip("the tfslurm-entry cluster (22.05's) has no image to exec in")
    program = "/data/examples/preemption/keras_fit.py /tmp/unstarted 1 5"
    exec_ = LAUNCH.replace("apptainer run ", "apptainer exec ", 1)
    job, state = jobs.run(
        cluster,
        f"-N2 --ntasks-per-node=1 -t 5 -o {DIR}/unstarted-%j.out "
        f"--wrap 'srun --kill-on-bad-exit=1 {exec_} python {program}'",
    )
    log = cluster.ok(f"cat {DIR}/unstarted-{job}.out")
    assert state == "FAILED", f"{state}\n{log}"
    # Each task that got as far says the same line; srun may end the other first.
    said = {line for line in log.splitlines() if line.startswith("tfslurm: error: ")}
    assert len(said) == 1, log
    (line,) = said
    assert "in a Slurm step of 2 tasks without TF_CONFIG" in line, log
    assert "Under Apptainer: apptainer exec does not run the image's runscript" in line, log
    assert "epoch" not in log, log
    left = node_processes(cluster)
    assert set(left.values()) == {""}, left
