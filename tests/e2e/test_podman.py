"""The image under rootless Podman, on a real Slurm: this machine's own one-node Slurm
(slurm-dev-cluster/host/host-slurm.sh: Debian's slurmctld, slurmd and munge, Podman, a job user
with subordinate ids), not the dev cluster, whose nodes are Docker containers in which Podman
cannot map the user's ids (newuidmap's write is refused there). `make docker-archive`'s file is
loaded into the job user's Podman once; Podman runs the image's ENTRYPOINT (tfslurm-entry) and
passes Slurm's variables only when asked (`-e 'SLURM_*'`).

- make test: the README's recipe (1 node x 2 tasks) with the image by its Podman name in the
  SIF's place (`tfslurm-run podman://...`, written out of the image with --install-launcher) and
  the custom-loop example (PreemptionCheckpointHandler), `scontrol requeue` mid-run: saved,
  came back, resumed at the step in flight, completed; no error line, no container and no
  process left.
- make test-soak: TensorFlow's Keras multi-worker tutorial, unchanged, through the documented
  `srun podman run` line (docs/runtimes.md#podman) on 1 node x 2 tasks: both tasks their
  TF_CONFIG role, the end-of-job barrier passed, exit 0, nothing left; a task killed mid-run
  stops the step within seconds, rank 0 naming it, no container left.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.job_output import error_lines

from .conftest import ROOT
from .test_preemption import DECISION, check_runs_resume

# One worker sets the machine's Slurm and Podman up, and runs these cases.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("podman")]

JOB_USER = "tfslurm-job"
ARCHIVE = ROOT / "tf-slurm.docker.tar"
TUTORIAL = ROOT / "tests" / "user_programs" / "keras_multi_worker"
# The line docs/runtimes.md gives, the image by the name `podman load` gives it.
PODMAN = (
    "podman run --rm -e 'SLURM_*' --network host --userns=keep-id --user \"$(id -u):$(id -g)\" "
    '-v "$HOME:$HOME" -w "$PWD" localhost/tf-slurm:latest'
)
PASSED = "Barrier(tfslurm/end_of_job::0) has passed with status: OK"
RECIPE = ROOT / "examples" / "preemption" / "multi-worker.sbatch"
CUSTOM_LOOP = ROOT / "examples" / "preemption" / "custom_loop.py"
IMAGE = "podman://localhost/tf-slurm:latest"


def as_job_user(command: str, timeout: float = 300, stdin=None) -> subprocess.CompletedProcess:
    """`command` in the job user's login shell (its HOME, USER; Podman's per-user storage)."""
    return subprocess.run(
        ["runuser", "-l", JOB_USER, "-c", command],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def left_behind() -> tuple[str, str]:
    """The job user's Podman containers and processes (conmon, the entrypoint, the program: the
    line runs the container as the user) still there: neither should be. The user's Podman
    pause process is Podman's, kept between runs: known by its pid file, not by its name
    (catatonit where that is installed, else Podman itself, "podman")."""
    containers = as_job_user("podman ps -a -q", timeout=60).stdout.strip()
    pause = as_job_user(
        'cat "${XDG_RUNTIME_DIR:-/tmp/podman-run-$(id -u)}/libpod/tmp/pause.pid"', timeout=60
    ).stdout.strip()
    processes = subprocess.run(
        ["ps", "-u", JOB_USER, "-o", "pid=,args="], capture_output=True, text=True
    ).stdout
    return containers, "\n".join(
        line for line in processes.splitlines() if line.split()[0] != pause
    )


@pytest.fixture(scope="module")
def podman_slurm() -> Path:
    """This machine's Slurm up, the image loaded into the job user's Podman, the tutorial in
    the job user's home; the tutorial's directory there."""
    setup = subprocess.run(
        [str(ROOT / "slurm-dev-cluster" / "host" / "host-slurm.sh"), JOB_USER],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert ARCHIVE.is_file(), f"no {ARCHIVE.name}: run `make docker-archive` first"
    wanted = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", "tf-slurm:latest"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    loaded = as_job_user("podman image inspect --format '{{.Id}}' localhost/tf-slurm:latest")
    if loaded.returncode != 0 or not wanted.endswith(loaded.stdout.strip()):
        with ARCHIVE.open("rb") as archive:  # on standard input: the job user cannot read it
            load = as_job_user("podman load -q", timeout=600, stdin=archive)
        assert load.returncode == 0, load.stdout + load.stderr
    home = Path(as_job_user("echo $HOME").stdout.strip())
    directory = home / "keras_multi_worker"
    copy = as_job_user(
        f"rm -rf {directory} && cp -r {TUTORIAL} {directory} && cp {CUSTOM_LOOP} {home}/"
    )
    assert copy.returncode == 0, copy.stderr
    # tfslurm-run, as a user gets it: written out of the image into ~/bin.
    install = as_job_user(f"cd && {PODMAN} --install-launcher $HOME/bin", timeout=120)
    assert install.returncode == 0, install.stdout + install.stderr
    return directory


def test_a_requeued_job_under_podman_resumes_and_ends_clean(podman_slurm):
    home = podman_slurm.parent
    runs = home / "runs" / f"podman-requeue-{time.time_ns()}"
    script = RECIPE.read_text().replace("/shared/me/runs/my-model", str(runs))
    script = script.replace("--bind /shared /shared/tf-slurm.sif", IMAGE)
    script = script.replace(
        '/shared/me/train.py "$runs/ckpt"', f'{home}/custom_loop.py "$runs/ckpt" 1200'
    )
    assert "/shared" not in script, script
    as_job_user(f"mkdir -p {runs} && cat > {runs}.sbatch <<'EOF'\n{script}EOF")
    submit = as_job_user(
        f"cd {home} && PATH=$HOME/bin:$PATH sbatch --parsable -N1 --ntasks-per-node=2 "
        f"-o {runs}.out {runs}.sbatch"
    )
    job = submit.stdout.strip()
    assert job.isdigit(), submit.stdout + submit.stderr
    log = Path(f"{runs}.out")
    try:
        wait_until(lambda: re.search(r"^step [3-9]\d", text(log), re.M), 180, log)
        subprocess.run(["scontrol", "requeue", job], check=True)
        # Slurm holds a requeued job back until its old credentials expired (cred_expire).
        wait_until(lambda: job_state(job) == ("COMPLETED", "1"), 420, log)
    finally:
        subprocess.run(["scancel", job])
    output = text(log)
    check_runs_resume(output, 2, 1200)
    assert re.search(DECISION["requeue"], output), output
    ran = f"tfslurm-run: running from {IMAGE}: a Podman image is in each node's own storage"
    assert output.count(ran) == 2, output
    assert len(re.findall(r"^tfslurm: rank \d/2 host \S+ role worker", output, re.M)) == 4, output
    assert "tfslurm-run: the step completed (rank 0: completed)" in output, output
    assert error_lines(output) == [], output
    time.sleep(2)
    assert left_behind() == ("", ""), output


def text(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def job_state(job: str) -> tuple[str, str]:
    """(JobState, Restarts) from scontrol (this Slurm keeps no accounting)."""
    info = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True)
    fields = dict(f.split("=", 1) for f in info.stdout.split() if "=" in f)
    return fields.get("JobState", ""), fields.get("Restarts", "")


def wait_until(ready, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"not within {timeout} s:\n{text(log)[-6000:]}"
        time.sleep(1)


@pytest.mark.soak
def test_the_tutorial_runs_under_podman_on_a_real_slurm(podman_slurm):
    run = as_job_user(
        f"cd {podman_slurm} && TUTORIAL_STEPS=10 srun -N1 -n2 --kill-on-bad-exit=1 "
        f"{PODMAN.replace('--rm ', '--rm -e TUTORIAL_STEPS -e TF_CPP_MIN_LOG_LEVEL=0 ', 1)} "
        "main.py",
        timeout=600,
    )
    log = run.stdout + run.stderr
    assert run.returncode == 0, log
    roles = re.findall(r"^tfslurm: rank (\d)/2 host \S+ role worker index \1 ", log, re.M)
    assert sorted(roles) == ["0", "1"], log
    assert PASSED in log, log
    assert error_lines(log) == [], log
    time.sleep(2)  # podman run --rm removes its container as it exits
    assert left_behind() == ("", ""), log


@pytest.mark.soak
def test_a_killed_task_under_podman_stops_the_step_fast(podman_slurm):
    step = subprocess.Popen(
        [
            "runuser",
            "-l",
            JOB_USER,
            "-c",
            f"cd {podman_slurm} && TUTORIAL_STEPS=100000 srun -N1 -n2 --kill-on-bad-exit=0 "
            f"{PODMAN.replace('--rm ', '--rm -e TUTORIAL_STEPS ', 1)} main.py",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        log = kill_rank_1(step)
    finally:
        subprocess.run(["scancel", "-u", JOB_USER])
        step.kill()
    assert step.returncode != 0, log
    assert re.search(r"rank 0 on \S+: rank 1 on \S+ failed with exit 137 \(SIGKILL\)", log), log
    time.sleep(2)
    assert left_behind() == ("", ""), log


def kill_rank_1(step: subprocess.Popen) -> str:
    """SIGKILL rank 1's program once it trains; the step's output once it ended, within 15 s."""
    victim = ""
    for _ in range(120):
        found = subprocess.run(
            ["pgrep", "-u", JOB_USER, "-f", "python main.py"], capture_output=True, text=True
        ).stdout.split()
        for pid in found:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if b"SLURM_PROCID=1" in environ and b"TF_CONFIG" in b" ".join(environ):
                victim = pid
        if victim:
            break
        time.sleep(1)
    assert victim, "rank 1's program never started"
    time.sleep(5)
    subprocess.run(["kill", "-9", victim], check=True)
    killed = time.monotonic()
    log, _ = step.communicate(timeout=120)
    assert time.monotonic() - killed < 15, log
    return log
