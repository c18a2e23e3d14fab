"""Rank 0's line about an image Slurm's signals can unmount (task/mount.py), with a stand-in for
Apptainer's squashfuse_ll: a process of that name started by an ancestor of the task (here the
test itself, as Apptainer's starter starts both the mount and the container's process)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import pytest

from bench.repo import ROOT

NOTE = "from tfslurm_entry.task import mount; print(mount.note())"


@pytest.fixture
def squashfuse(tmp_path):
    """Start a 'squashfuse_ll' (sleep under that name), SIGTERM ignored or not."""
    binary = tmp_path / "squashfuse_ll"
    shutil.copy(shutil.which("sleep"), binary)
    started = []

    def start(ignoring: bool) -> subprocess.Popen:
        def setup() -> None:
            if ignoring:  # what the admins' wrapper does before it execs the real one
                signal.signal(signal.SIGTERM, signal.SIG_IGN)

        started.append(subprocess.Popen([str(binary), "60"], preexec_fn=setup))
        return started[-1]

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def note() -> str:
    done = subprocess.run([sys.executable, "-c", NOTE], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_squashfuse_that_sigterm_ends_is_named_with_the_fix(squashfuse):
    proc = squashfuse(ignoring=False)
    said = note()
    assert said.startswith(f"the image is mounted by squashfuse_ll (pid {proc.pid}), which ")
    assert "through tfslurm-run, which copies the image onto each node" in said
    assert "docs/failures.md" in said


def test_check_mount_answers_tfslurm_runs_question(squashfuse):
    """--check-mount: exit 1 and why for a squashfuse SIGTERM ends, 0 and why not otherwise."""
    check = [sys.executable, "-m", "tfslurm_entry", "--check-mount"]
    safe = subprocess.run(check, cwd=ROOT, capture_output=True, text=True)
    assert (safe.returncode, safe.stdout.strip()) == (0, SAFE), safe
    squashfuse(ignoring=False)
    exposed = subprocess.run(check, cwd=ROOT, capture_output=True, text=True)
    assert exposed.returncode == 1, exposed
    assert exposed.stdout.startswith("Apptainer mounts the image with squashfuse_ll, which ")


SAFE = (
    "the image's mount outlives Slurm's signals (a kernel mount, a directory, or a squashfuse "
    "that ignores SIGTERM)"
)


def test_a_squashfuse_that_ignores_sigterm_and_no_squashfuse_say_nothing(squashfuse):
    assert note() == "None"
    squashfuse(ignoring=True)
    assert note() == "None"
