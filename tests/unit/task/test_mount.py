"""Rank 0's line about an image Slurm's signals can unmount (task/mount.py), with a stand-in for
Apptainer's squashfuse_ll: a process of that name started by an ancestor of the task (here the
test itself, as Apptainer's starter starts both the mount and the container's process)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import pytest

from tests.repo import ROOT

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
    assert "unpacked copy on each node" in said and "docs/failures.md" in said


def test_a_squashfuse_that_ignores_sigterm_and_no_squashfuse_say_nothing(squashfuse):
    assert note() == "None"
    squashfuse(ignoring=True)
    assert note() == "None"
