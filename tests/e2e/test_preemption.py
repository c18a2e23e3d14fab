"""A job that Slurm stops loses nothing: real preemption, the time limit's warning and
`scontrol requeue`, on users' own programs that know nothing of the kit
(tests/user_programs/preemption_*: TensorFlow's PreemptionCheckpointHandler in a custom loop,
Keras's BackupAndRestore(save_before_preemption=True), a parameter-server chief that saves on
SIGTERM), run from the SIF as the README runs it: its batch scripts
(examples/preemption/*.sbatch, the README's recipe), with /data for /shared.

Each job is stopped while it trains; it must save at the step in flight, come back by itself
(Slurm requeues a preempted or requeued job; the script requeues after the time limit's
warning), resume at or after that step and end COMPLETED at the full step count, with no
SIGBUS and no error line, and nothing of it left running. `make test` holds one case per kind
of stop; `make test-soak` the other programs with each stop.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass

import pytest

from tests.job_output import error_lines

from . import jobs
from .clean_end import NODES, left_in_tmp, node_processes, tmp_entries
from .conftest import ROOT, SIF

pytestmark = pytest.mark.e2e

RECIPES = ROOT / "examples" / "preemption"
RUNS = "/data/runs/preemption"


@dataclass(frozen=True)
class Program:
    """A user's program: its path under the programs' directory, its arguments after the
    run directory for a number of steps ({steps}, {epochs} of 50 steps), its strategy."""

    path: str
    args: str
    strategy: str = "multi-worker"
    long: int = 0
    """the steps of a run stopped by the time limit's warning, which comes at Slurm's next
    check of the limits, up to 30 s after the harness shortens the limit (and the harness
    waits 75 s for it): at least 75 s of training on an idle dev cluster (the custom loop made
    up to 85 steps/s there, Model.fit 60, the parameter-server loop, ten steps per join, 150);
    3000 custom-loop steps once ended as the warning came"""

    def steps(self, stop: str) -> int:
        return self.long if stop == "time limit" else 400

    def argv(self, steps: int) -> str:
        return self.args.format(steps=steps, epochs=steps // 50)


CTL = Program("preemption_ctl/main.py", "{steps}", long=8000)
KERAS = Program("preemption_keras/main.py", "{epochs} 50", long=4500)
PS = Program("preemption_ps/main.py", "{steps}", "parameter-server", long=8000)
# TensorFlow's Keras tutorial, which has no handler: it trains on after SIGTERM until Slurm's
# SIGKILL (TensorFlow's coordination service catches SIGTERM and logs it).
NO_HANDLER = Program("keras_multi_worker/main.py", "")


def recipe(cluster, program: Program, programs: str, name: str, steps: int) -> str:
    """The README's batch script for the program's strategy on the dev cluster: /data for
    /shared, the program in the place of train.py; its path there."""
    text = (RECIPES / f"{program.strategy}.sbatch").read_text()
    text = text.replace("/shared/me/runs/", f"{RUNS}/").replace("/shared/tf-slurm.sif", SIF)
    text = text.replace("-B /shared", "-B /data")
    run = f'{programs}/{program.path} "$runs" {program.argv(steps)}'
    text = text.replace('/shared/me/train.py "$runs"', run)
    assert "/shared" not in text, text
    path = f"{RUNS}/{name}.sbatch"
    cluster.ok(f"mkdir -p {RUNS} && cat > {path} <<'EOF'\n{text}EOF")
    return path


def wait_for(cluster, log: str, pattern: str, timeout: float = 240) -> re.Match:
    deadline = time.monotonic() + timeout
    while True:
        text = cluster.run(f"cat {log}").out
        found = re.search(pattern, text, re.M)
        if found:
            return found
        assert time.monotonic() < deadline, f"no {pattern!r} after {timeout:.0f} s:\n{text}"
        time.sleep(0.5)


def first_node(cluster, job: str) -> str:
    nodes = cluster.ok(f"squeue -h -j {job} -o %N").strip()
    return cluster.ok(f"scontrol show hostnames '{nodes}'").split()[0]


def preempt(cluster, job: str, log: str) -> None:
    """A job of the urgent partition that needs every CPU of one of the job's nodes."""
    node = first_node(cluster, job)
    cluster.ok(f"sbatch -p urgent -w {node} --exclusive -o /dev/null --wrap 'sleep 1'")


def time_limit(cluster, job: str, log: str) -> None:
    """The time limit, made near now: the warning (--signal=TERM@120) is due at once and comes
    at Slurm's next check of the limits (every 30 s); once it has, the limit is raised again (by
    the admin, root), so that the requeued run finishes before its own warning."""
    elapsed = jobs.elapsed(cluster, job)
    limit = (elapsed + 120) // 60  # whole minutes: 60 to 120 s left, the warning due at once
    cluster.ok(f"scontrol update JobId={job} TimeLimit={limit}")
    wait_for(cluster, log, r"Slurm's SIGTERM at ", timeout=75)
    cluster.ok(f"scontrol update JobId={job} TimeLimit=30", service="slurmctld", user="root")


def requeue(cluster, job: str, log: str) -> None:
    cluster.ok(f"scontrol requeue {job}")


STOPS = {"preemption": preempt, "time limit": time_limit, "requeue": requeue}
# One case runs the script with its own layout, 2 nodes x 2 tasks (one copy of the image per
# node, four workers agreeing on the step); the others on one task per node: the stop is their
# point, at half the CPU.
AS_WRITTEN = (CTL, "preemption")
# Slurm's state of the first run (sacct -D): preempted, or requeued (by the user, or by the
# batch script after the time limit's warning).
FIRST_STATE = {"preemption": "PREEMPTED", "time limit": "REQUEUED", "requeue": "REQUEUED"}
SOAK = pytest.mark.soak
CASES = [
    pytest.param(CTL, "preemption", id="custom-loop-preemption"),
    pytest.param(KERAS, "time limit", id="keras-time-limit"),
    pytest.param(PS, "requeue", id="parameter-server-requeue"),
    pytest.param(CTL, "time limit", id="custom-loop-time-limit", marks=SOAK),
    pytest.param(CTL, "requeue", id="custom-loop-requeue", marks=SOAK),
    pytest.param(KERAS, "preemption", id="keras-preemption", marks=SOAK),
    pytest.param(KERAS, "requeue", id="keras-requeue", marks=SOAK),
    pytest.param(PS, "preemption", id="parameter-server-preemption", marks=SOAK),
    pytest.param(PS, "time limit", id="parameter-server-time-limit", marks=SOAK),
]


def submit(
    cluster, program: Program, stop: str, programs: str, env: str = ""
) -> tuple[str, str, str]:
    """The README's script for the program, one task per node (3 nodes for a
    parameter-server job: chief, ps, worker); (job id, its output file, its run directory)."""
    name = f"{program.path.split('/')[0]}-{stop.replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    script = recipe(cluster, program, programs, name, program.steps(stop))
    nodes = 3 if program.strategy == "parameter-server" else 2
    layout = f"-N{nodes} --ntasks-per-node=1"
    if (program, stop) == AS_WRITTEN:
        layout = ""
    partition = "preemptible" if stop == "preemption" else "debug"
    limit = "--time=10" if stop == "time limit" else ""
    log = f"{RUNS}/{name}-%j.out"
    options = f"-p {partition} {layout} {limit} -o {log} {script}"
    job = jobs.submit(cluster, options, env)
    return job, log.replace("%j", job), f"{RUNS}/{job}"


@pytest.mark.parametrize(("program", "stop"), CASES)
def test_a_stopped_job_saves_comes_back_and_resumes(cluster, programs, program, stop):
    before = tmp_entries(cluster)
    job, log, runs = submit(cluster, program, stop, programs)
    training = (
        r"^starting at step 0" if stop == "time limit" else r"^(step|epoch 0 ends at step) [3-9]\d"
    )
    wait_for(cluster, log, training)
    STOPS[stop](cluster, job, log)
    state = jobs.wait(cluster, job, timeout=600)
    text = cluster.ok(f"cat {log}")
    assert state == "COMPLETED", text
    history = cluster.ok(f"sacct -D -X -n -P -j {job} -o State").split()
    assert history == [FIRST_STATE[stop], "COMPLETED"], (history, text)

    first, second = text.split("starting at step ")[1:3]
    saved = int(second.split()[0])
    trained = [int(n) for n in re.findall(r"^(?:step|epoch \d+ ends at step) (\d+)", first, re.M)]
    assert saved >= max(trained) > 0, f"resumed at {saved}, after step {max(trained)}\n{text}"
    if program is KERAS:  # saved at the batch in flight, not at the last epoch's end
        assert saved % 50 != 0 or saved > max(trained), text
    assert f"done at step {program.steps(stop)}" in second, text

    # One notice line and one end line from rank 0, the verdict, and nothing wrong.
    assert len(re.findall(r"Slurm's SIGTERM at .* every program gets", first)) == 1, text
    assert re.search(r"stopped by Slurm: .* ended within [\d.]+ s of the notice", first), text
    assert error_lines(text) == [], "\n".join(error_lines(text))
    for bad in ("Bus error", "SIGBUS", "failed with", "stopping the step"):
        assert bad not in text, text
    assert cluster.ok(f"cat {runs}.result").startswith("completed"), text
    assert nothing_left(cluster), text
    assert left_in_tmp(cluster, before) == [], text


@pytest.mark.parametrize(
    "stop",
    ["requeue", pytest.param("preemption", marks=SOAK), pytest.param("time limit", marks=SOAK)],
)
def test_a_program_without_a_handler_is_stopped_with_one_line(cluster, programs, stop):
    """TensorFlow's Keras tutorial, which has no handler, stopped the same way: rank 0's one
    line names the stop, nothing dies of SIGBUS, nothing of the step is left running. (It
    trains on after SIGTERM, TensorFlow's coordination service having caught it, until Slurm's
    SIGKILL; after the time limit's warning, until rank 0 stops it: --save-timeout 20.)"""
    # A time limit's warning comes up to 30 s late: the tutorial trains long enough to meet it.
    env = "TFSLURM_SAVE_TIMEOUT=20" + (" TUTORIAL_STEPS=1500" if stop == "time limit" else "")
    job, log, _ = submit(cluster, NO_HANDLER, stop, programs, env)
    wait_for(cluster, log, r"Epoch 1/")
    STOPS[stop](cluster, job, log)
    deadline = time.monotonic() + 150
    while FIRST_STATE[stop] not in cluster.ok(f"sacct -D -X -n -P -j {job} -o State").split():
        assert time.monotonic() < deadline, cluster.ok(f"cat {log}")
        time.sleep(0.5)
    cluster.ok(f"scancel {job}")  # the requeued job, pending or starting again
    deadline = time.monotonic() + 60
    while cluster.run(f"squeue -h -j {job}").out.strip():
        assert time.monotonic() < deadline
        time.sleep(0.5)
    text = cluster.ok(f"cat {log}")
    assert len(re.findall(r"rank 0 on \S+: Slurm's SIGTERM at ", text)) == 1, text
    # (A task still running when Slurm's SIGKILL ends its peer may print TensorFlow's
    # traceback of the broken collective: what Slurm's stop does to a program that ignores it.)
    for bad in ("Bus error", "SIGBUS", "failed with", "stopping the step"):
        assert bad not in text, text
    assert nothing_left(cluster), text


@pytest.mark.soak
def test_in_a_job_array_the_stopped_array_task_alone_is_requeued(cluster, programs):
    """The README's script as a two-task array: the time limit's notice (what --signal=TERM@120
    sends the steps) to array task 1 alone: it saves, requeues itself (its SLURM_JOB_ID is the
    array task's own id), resumes and completes; array task 0 runs through untouched."""
    name = f"array-{uuid.uuid4().hex[:6]}"
    script = recipe(cluster, CTL, programs, name, 400)
    log = f"{RUNS}/{name}-%A_%a.out"
    # Each array task on a node of its own (2 tasks there): each unpacks its own copy of the
    # image, and two copies would not fit one node's /tmp (3 GB of memory).
    options = f"--array=0-1 -N1 --ntasks-per-node=2 --exclusive -o {log} {script}"
    array = jobs.submit(cluster, options)
    logs = [log.replace("%A", array).replace("%a", str(i)) for i in (0, 1)]
    wait_for(cluster, logs[1], r"^step [3-9]\d ")
    cluster.ok(f"scancel --signal=TERM {array}_1")
    for task in ("0", "1"):
        assert jobs.wait(cluster, f"{array}_{task}") == "COMPLETED", cluster.ok(f"cat {logs[1]}")
    history = {
        task: cluster.ok(f"sacct -D -X -n -P -j {array}_{task} -o State").split()
        for task in ("0", "1")
    }
    assert history == {"0": ["COMPLETED"], "1": ["REQUEUED", "COMPLETED"]}, history
    first, second = cluster.ok(f"cat {logs[1]}").split("starting at step ")[1:3]
    trained = max(int(n) for n in re.findall(r"^step (\d+) ", first, re.M))
    assert int(second.split()[0]) >= trained and "done at step 400" in second
    assert cluster.ok(f"cat {logs[0]}").count("starting at step ") == 1


def nothing_left(cluster, timeout: float = 20) -> bool:
    """Nothing of the job user's runs on the compute nodes, once the job's teardown (and an
    urgent job's `sleep`) has had its seconds."""
    deadline = time.monotonic() + timeout
    while node_processes(cluster) != dict.fromkeys(NODES, ""):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True
