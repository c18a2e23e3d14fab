"""A job that Slurm stops loses nothing, through the README's batch script
(examples/preemption/*.sbatch: one `tfslurm-run` line) and programs that know nothing of the kit:
the examples' (examples/preemption/custom_loop.py: TensorFlow's PreemptionCheckpointHandler;
keras_fit.py: tf.keras's BackupAndRestore(save_before_preemption=True)) and a parameter-server
chief that saves on SIGTERM (tests/user_programs/preemption_ps), with /data for /shared.

Each job is stopped while it trains; it must save at the step in flight, come back by itself
(Slurm requeues what it preempts or `scontrol requeue` asks; tfslurm-run after the time
limit's warning), resume at or after that step and end COMPLETED at the full step count, with
no SIGBUS and no error line, nothing of it left running and no copy of the image left on any
node. `make test` holds one case per kind of stop and one per decision of the launcher (a
preemption with --max-requeues 0: preemptions never count; the warning during the copy; a job
out of requeues, resubmitted into its run directory, which did not exist before its first run;
a failing program; a cancelled job); `make test-soak` the other programs with each stop, five
preemptions in a row of one job and a job array.
"""

from __future__ import annotations

import itertools
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from tests.job_output import error_lines

from . import jobs
from .clean_end import NODES, copies_left, left_in_tmp, node_processes, tmp_entries
from .conftest import ROOT, SIF

pytestmark = pytest.mark.e2e

RECIPES = ROOT / "examples" / "preemption"
EXAMPLES = "/data/examples/preemption"  # devcluster.py install puts examples/ there
RUNS = "/data/runs/preemption"
# A task killed or failed (tfslurm-run's own line naming SIGBUS as the reason to copy is not).
BAD = ("Bus error", "(SIGBUS)", "failed with", "stopping the step")


@dataclass(frozen=True)
class Program:
    """A user's program: its path on the cluster ({programs}: the user programs' directory),
    its arguments after the checkpoint directory for a number of steps ({steps}, {epochs} of
    50 steps), its strategy."""

    name: str
    path: str
    args: str
    strategy: str = "multi-worker"
    long: int = 0
    """the steps a run stopped by the time limit's warning is started with: the warning comes
    at Slurm's next check of the limits, up to 30 s after the harness shortens the limit (and
    the harness waits 75 s for it), so at least 75 s of training on an idle dev cluster (the
    custom loop made up to 85 steps/s there, Model.fit 60, the parameter-server loop, ten steps
    per join, 150); 3000 custom-loop steps once ended as the warning came. Once the warning
    came, the harness cuts the count to a little past the step in flight (`finish_soon`)"""

    def steps(self, stop: str) -> int:
        return self.long if stop == "time limit" else 400

    def argv(self, steps: int) -> str:
        return self.args.format(steps=steps, epochs=steps // 50)


CTL = Program("custom-loop", f"{EXAMPLES}/custom_loop.py", "{steps}", long=8000)
KERAS = Program("keras", f"{EXAMPLES}/keras_fit.py", "{epochs} 50", long=4500)
PS = Program(
    "parameter-server", "{programs}/preemption_ps/main.py", "{steps}", "parameter-server", 8000
)
# TensorFlow's Keras tutorial, which has no handler: it trains on after SIGTERM until Slurm's
# SIGKILL (TensorFlow's coordination service catches SIGTERM and logs it).
NO_HANDLER = Program("tutorial", "{programs}/keras_multi_worker/main.py", "")


def recipe(
    cluster, program: Program, programs: str, name: str, steps: int, runs: str, image: str = SIF
) -> str:
    """The README's batch script for the program's strategy on the dev cluster: /data for
    /shared, the run directory `runs`, the program in the place of train.py, `image` for the
    SIF; its path there."""
    text = (RECIPES / f"{program.strategy}.sbatch").read_text()
    text = text.replace("/shared/me/runs/my-model", runs).replace("/shared/tf-slurm.sif", image)
    text = text.replace("--bind /shared", "--bind /data")
    # The program's arguments after the checkpoint directory are read from a file beside the
    # script at each run's start (`finish_soon` rewrites it).
    args = f"{RUNS}/{name}.args"
    run = f'{program.path.format(programs=programs)} "$runs/ckpt" $(cat {args})'
    text = text.replace('/shared/me/train.py "$runs/ckpt"', run)
    assert "/shared" not in text, text
    path = f"{RUNS}/{name}.sbatch"
    cluster.ok(
        f"mkdir -p {RUNS} && echo '{program.argv(steps)}' > {args} "
        f"&& cat > {path} <<'EOF'\n{text}EOF"
    )
    return path


def finish_soon(cluster, program: Program, log: str) -> int:
    """After the time limit's warning: the job's next run trains to a little past the step in
    flight (rather than the whole of Program.long, sized for a warning up to 75 s late) by
    rewriting its arguments before tfslurm-run requeues it; that step count. The margin covers
    what the first run trains between its last line and its save (Model.fit prints every 50
    steps)."""
    steps = (trained(cluster.ok(f"cat {log}")) + 300) // 50 * 50 + 50
    script = log.rsplit("-", 1)[0]  # RUNS/NAME-JOB.out -> RUNS/NAME
    cluster.ok(f"echo '{program.argv(steps)}' > {script}.args")
    return steps


def wait_until(cluster, log: str, seen: Callable[[str], object], timeout: float = 240) -> None:
    """Until seen(the job's output so far) is true."""
    deadline = time.monotonic() + timeout
    while not seen(text := cluster.run(f"cat {log}").out):
        assert time.monotonic() < deadline, f"not seen after {timeout:.0f} s:\n{text}"
        time.sleep(0.5)


def wait_for(cluster, log: str, pattern: str, timeout: float = 240) -> None:
    """Until the job's output has a line matching pattern (looked at on the login node)."""
    seen = cluster.until_logged(log, pattern, timeout)
    assert seen, f"not seen after {timeout:.0f} s:\n{cluster.run(f'cat {log}').out}"


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


def warning(cluster, job: str, log: str) -> None:
    """What the time limit's --signal=TERM@120 sends, to every step's processes, at once (the
    way docs/failures.md tells a user to try the recipe)."""
    cluster.ok(f"scancel --signal=TERM {job}")


STOPS = {"preemption": preempt, "time limit": time_limit, "requeue": requeue}
# One case runs the script with its own layout, 2 nodes x 2 tasks (one copy of the image per
# node, four workers agreeing on the step); the others on one task per node: the stop is their
# point, at half the CPU.
AS_WRITTEN = (CTL, "preemption")
# Slurm's state of the first run (sacct -D): preempted, or requeued (by the user, or by
# tfslurm-run after the time limit's warning).
FIRST_STATE = {"preemption": "PREEMPTED", "time limit": "REQUEUED", "requeue": "REQUEUED"}
# tfslurm-run's decision after the first run.
DECISION = {
    "preemption": r"tfslurm-run: preempted: Slurm requeues the job itself \(#SBATCH --requeue\); "
    r"preemptions never count against --max-requeues \(0 of 0 used\)",
    "time limit": r"tfslurm-run: stopped by Slurm's notice .*: requeuing job {job} \(requeue 1 of",
    "requeue": r"tfslurm-run: Slurm is ending this run of the job \(JobState=",
}
PREEMPTED = "tfslurm-run: preempted: Slurm requeues the job itself"
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
    cluster,
    program: Program,
    stop: str,
    programs: str,
    env: str = "",
    steps: int | None = None,
    runs: str | None = None,
    image: str = SIF,
    as_written: bool = False,
) -> tuple[str, str, str]:
    """The README's script for the program, one task per node (3 nodes for a
    parameter-server job: chief, ps, worker) unless as written (or AS_WRITTEN); (job id, its
    output file, its run directory)."""
    name = f"{program.name}-{stop.replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
    runs = runs or f"{RUNS}/{name}"
    steps = program.steps(stop) if steps is None else steps
    script = recipe(cluster, program, programs, name, steps, runs, image)
    nodes = 3 if program.strategy == "parameter-server" else 2
    layout = "" if as_written or (program, stop) == AS_WRITTEN else f"-N{nodes} --ntasks-per-node=1"
    partition = "preemptible" if stop == "preemption" else "debug"
    limit = "--time=10" if stop == "time limit" else ""
    log = f"{RUNS}/{name}-%j.out"
    job = jobs.submit(cluster, f"-p {partition} {layout} {limit} -o {log} {script}", env)
    return job, log.replace("%j", job), runs


def history(cluster, job: str) -> list[str]:
    """Slurm's state of each run of the job, first to last."""
    return cluster.ok(f"sacct -D -X -n -P -j {job} -o State").split()


def trained(text: str) -> int:
    """The last step a run's chief printed."""
    steps = re.findall(r"^(?:step|epoch \d+ ends at step) (\d+)", text, re.M)
    return max(map(int, steps), default=0)


def check_runs_resume(text: str, runs: int, steps: int) -> None:
    """The output of a job whose first runs-1 runs Slurm stopped: each run went on from at
    least the step the one before trained, the last to the end, each stopped run with one
    notice line from rank 0 and its stop line."""
    parts = text.split("starting at step ")[1:]
    assert len(parts) == runs, text
    for before, after in itertools.pairwise(parts):
        assert int(after.split()[0]) >= trained(before) > 0, text
        assert len(re.findall(r"Slurm's SIGTERM at .* every program gets", before)) == 1, text
        assert re.search(r"stopped by Slurm: .* ended within [\d.]+ s of the notice", before), text
    assert f"done at step {steps}" in parts[-1], text


def check_left_clean(cluster, text: str, before: set[str]) -> None:
    """No error line, nothing of the job's running, no copy of the image on any node, nothing
    new in the nodes' /tmp."""
    assert error_lines(text) == [], "\n".join(error_lines(text))
    for bad in BAD:
        assert bad not in text, text
    assert nothing_left(cluster), text
    assert copies_left(cluster) == [], text
    assert left_in_tmp(cluster, before) == [], text


@pytest.mark.parametrize(("program", "stop"), CASES)
def test_a_stopped_job_saves_comes_back_and_resumes(cluster, programs, program, stop):
    before = tmp_entries(cluster)
    # Preemptions never count against the cap: with none allowed, a preempted job comes back.
    env = "TFSLURM_MAX_REQUEUES=0" if stop == "preemption" else ""
    job, log, runs = submit(cluster, program, stop, programs, env)
    # The time limit's warning may come at once (Slurm's next check of the limits): the limit is
    # shortened once the first run printed a step, so that what it saved can be told.
    started = r"^(step|epoch 0 ends at step) " + (r"\d" if stop == "time limit" else r"[3-9]\d")
    wait_for(cluster, log, started)
    STOPS[stop](cluster, job, log)
    steps = finish_soon(cluster, program, log) if stop == "time limit" else program.steps(stop)
    state = jobs.wait(cluster, job, timeout=600)
    text = cluster.ok(f"cat {log}")
    assert state == "COMPLETED", text
    assert history(cluster, job) == [FIRST_STATE[stop], "COMPLETED"], text
    check_runs_resume(text, 2, steps)
    first, second = text.split("starting at step ")[1:3]
    if program is KERAS:  # saved at the batch in flight, not at the last epoch's end
        saved = int(second.split()[0])
        assert saved % 50 != 0 or saved > trained(first), text
    assert re.search(DECISION[stop].format(job=job), text), text
    assert cluster.ok(f"cat {runs}/tfslurm-run.result").startswith("completed"), text
    check_left_clean(cluster, text, before)


def test_the_warning_during_the_copy_still_brings_the_job_back(cluster, programs):
    """Slurm may send --signal's warning up to a minute early: here it comes while tfslurm-run
    copies the image onto the nodes. No program starts; the job is requeued (counted, as the
    time limit's warnings are) and its next run trains from the start to the end.

    The warning is sent once every node's keeper has begun (its copy's directory made, after
    its trap): Slurm signals only the tasks it has started, so a warning during the copy step's
    launch reaches some keepers or none (what tfslurm-run does then is proven in
    tests/unit/launcher/test_tfslurm_run.py, with the lines srun wrote on the dev cluster)."""
    before = tmp_entries(cluster)
    job, log, _ = submit(cluster, CTL, "copy", programs)
    wait_for(cluster, log, r"^tfslurm-run: copying ")
    copy = re.search(r"^tfslurm-run: copying .* into (\S+?)(:| \()", cluster.ok(f"cat {log}"), re.M)
    nodes = cluster.ok(f"scontrol show hostnames $(squeue -h -j {job} -o %N)").split()
    for node in nodes:
        begun = cluster.until(f"test -d {copy[1]}", 60, 0.05, service=node, user="root")
        assert begun, f"no keeper began on {node}:\n{cluster.ok(f'cat {log}')}"
    warning(cluster, job, log)
    assert jobs.wait(cluster, job, timeout=300) == "COMPLETED", cluster.ok(f"cat {log}")
    text = cluster.ok(f"cat {log}")
    assert history(cluster, job) == ["REQUEUED", "COMPLETED"], text
    first, second = text.split("tfslurm-run: job ")[1:3]
    assert "Slurm's notice came during the copy" in first and "starting at step" not in first
    assert f"before the program started: requeuing job {job} (requeue 1 of 3" in first, text
    assert "starting at step 0" in second and "done at step 400" in second, text
    check_left_clean(cluster, text, before)


def test_a_job_out_of_requeues_is_resubmitted_and_goes_on_where_it_stopped(cluster, programs):
    """The first run goes into a run directory that does not exist yet; the time limit's
    warning stops it once it saved, and with --max-requeues 0 tfslurm-run says why it does not
    requeue it (FAILED). Submitted again with the same run directory, the job resumes there."""
    before = tmp_entries(cluster)
    runs = f"{RUNS}/resubmitted-{uuid.uuid4().hex[:6]}/not/yet"
    job, log, _ = submit(cluster, CTL, "resubmit", programs, "TFSLURM_MAX_REQUEUES=0", runs=runs)
    wait_for(cluster, log, r"^step [3-9]\d ")
    warning(cluster, job, log)
    assert jobs.wait(cluster, job, timeout=300) == "FAILED", cluster.ok(f"cat {log}")
    first = cluster.ok(f"cat {log}")
    out_of_requeues = r"not requeued: 0 of 0 requeues used \(--max-requeues\); submit it again"
    assert re.search(out_of_requeues, first), first
    assert cluster.ok(f"cat {runs}/tfslurm-run.result").startswith("preempted"), first

    again, log2, _ = submit(cluster, CTL, "resubmit", programs, runs=runs)
    assert jobs.wait(cluster, again, timeout=300) == "COMPLETED", cluster.ok(f"cat {log2}")
    second = cluster.ok(f"cat {log2}")
    assert f"run directory {runs} (last used by job {job})" in second, second
    check_runs_resume(first + second, 2, 400)
    check_left_clean(cluster, first + second, before)


def test_a_failing_program_is_not_requeued_and_the_copy_goes_to_local_disk(cluster, programs):
    """The program fails on its own (a bad argument: ValueError, exit 1): the verdict is
    failed, tfslurm-run says it does not requeue, the job is FAILED after one run. Without the
    dev cluster's config (copy_dir = /tmp, its nodes' memory) the copy goes where the launcher
    puts it by default: /var/tmp on the nodes' disk before /tmp in memory."""
    before = tmp_entries(cluster)
    env = "TFSLURM_RUN_CONFIG=/nonexistent"
    job, log, runs = submit(cluster, replace(CTL, args="many"), "failing", programs, env)
    assert jobs.wait(cluster, job, timeout=300) == "FAILED", cluster.ok(f"cat {log}")
    text = cluster.ok(f"cat {log}")
    assert history(cluster, job) == ["FAILED"], text
    assert f"into /var/tmp/tfslurm-copy-{job}: " in text and "each, on overlayfs)" in text, text
    failed = r"not requeued: the program failed \(rank \d on c\d failed with exit 1\); a requeue"
    assert re.search(failed, text), text
    assert cluster.ok(f"cat {runs}/tfslurm-run.result").startswith("failed: "), text
    assert "ValueError" in text
    assert nothing_left(cluster) and copies_left(cluster) == [], text
    assert left_in_tmp(cluster, before) == [], text


def test_a_cancelled_jobs_copy_is_removed(cluster, programs):
    """scancel: Slurm's SIGTERM to every process of the job, SIGKILL KillWait later; no new step
    may start. Each node's keeper of the copy removes it once the tasks there have ended."""
    before = tmp_entries(cluster)
    job, log, _ = submit(cluster, CTL, "cancel", programs, steps=8000)
    wait_for(cluster, log, r"^step [3-9]\d ")
    cluster.ok(f"scancel {job}")
    assert jobs.wait(cluster, job, timeout=120).startswith("CANCELLED")
    deadline = time.monotonic() + 20
    while copies_left(cluster):
        assert time.monotonic() < deadline, f"{copies_left(cluster)}\n{cluster.ok(f'cat {log}')}"
        time.sleep(0.5)
    assert nothing_left(cluster), cluster.ok(f"cat {log}")
    assert left_in_tmp(cluster, before) == []


@pytest.mark.soak
def test_five_preemptions_in_a_row_of_one_job(cluster, programs):
    """Preempted five times for real, each time while it trains, the job comes back each time
    at the step in flight and completes: preemptions never use up --max-requeues (3)."""
    before = tmp_entries(cluster)
    job, log, _ = submit(cluster, CTL, "preemption", programs, steps=3000)
    for run in range(1, 6):

        def training(text: str, run: int = run) -> bool:  # run `run` has trained a step
            runs = text.split("starting at step ")[1:]
            return len(runs) == run and re.search(r"^step \d+ ", runs[-1], re.M) is not None

        wait_until(cluster, log, training, timeout=300)
        preempt(cluster, job, log)
        wait_until(cluster, log, lambda text, n=run: text.count(PREEMPTED) == n, timeout=120)
    assert jobs.wait(cluster, job, timeout=600) == "COMPLETED", cluster.ok(f"cat {log}")
    text = cluster.ok(f"cat {log}")
    assert history(cluster, job) == ["PREEMPTED"] * 5 + ["COMPLETED"], text
    check_runs_resume(text, 6, 3000)
    assert "(5 of 3" not in text and "not requeued" not in text, text
    check_left_clean(cluster, text, before)


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
    while FIRST_STATE[stop] not in history(cluster, job):
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
    for bad in BAD:
        assert bad not in text, text
    assert nothing_left(cluster), text
    assert copies_left(cluster) == [], text


@pytest.mark.soak
def test_in_a_job_array_the_stopped_array_task_alone_is_requeued(cluster, programs):
    """The README's script as a two-task array: the time limit's notice (what --signal=TERM@120
    sends the steps) to array task 1 alone: it saves, requeues itself (its SLURM_JOB_ID is the
    array task's own id), resumes and completes; array task 0 runs through untouched."""
    name = f"array-{uuid.uuid4().hex[:6]}"
    script = recipe(cluster, CTL, programs, name, 400, f"{RUNS}/{name}-$SLURM_ARRAY_TASK_ID")
    log = f"{RUNS}/{name}-%A_%a.out"
    # Each array task on a node of its own (2 tasks there): each copies the image, and two
    # copies and their tasks' files are more than one job's share of a node's /tmp (memory).
    options = f"--array=0-1 -N1 --ntasks-per-node=2 --exclusive -o {log} {script}"
    array = jobs.submit(cluster, options)
    logs = [log.replace("%A", array).replace("%a", str(i)) for i in (0, 1)]
    wait_for(cluster, logs[1], r"^step [3-9]\d ")
    cluster.ok(f"scancel --signal=TERM {array}_1")
    for task in ("0", "1"):
        assert jobs.wait(cluster, f"{array}_{task}") == "COMPLETED", cluster.ok(f"cat {logs[1]}")
    states = {task: history(cluster, f"{array}_{task}") for task in ("0", "1")}
    assert states == {"0": ["COMPLETED"], "1": ["REQUEUED", "COMPLETED"]}, states
    check_runs_resume(cluster.ok(f"cat {logs[1]}"), 2, 400)
    assert cluster.ok(f"cat {logs[0]}").count("starting at step ") == 1
    assert copies_left(cluster) == []


def nothing_left(cluster, timeout: float = 20) -> bool:
    """Nothing of the job user's runs on the compute nodes, once the job's teardown (and an
    urgent job's `sleep`) has had its seconds."""
    deadline = time.monotonic() + timeout
    while node_processes(cluster) != dict.fromkeys(NODES, ""):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True
