"""Supervision of large steps on localhost: the real rank-0 entrypoint and hundreds of members.

bench/supervision.py plays the step (rank 0 a real `tfslurm-entry` process, the members the
real member code as threads, the failing member a real entrypoint); these tests check what it
must guarantee at any size, not how fast (that is `make bench`).
"""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from bench import supervision
from bench.localstep import free_port_base
from tests.fake_slurm import step_env
from tfslurm_entry.step.outcome import ABORTED

TASKS = 512


@pytest.mark.parametrize("scenario", supervision.SCENARIOS)
@pytest.mark.parametrize("members_as", supervision.MEMBERS)
def test_every_member_of_a_large_step_checks_in_and_hears_the_end(
    tmp_path, monkeypatch, scenario, members_as
):
    """simulate() raises unless every member checked in, every member ended with the status
    the scenario calls for (0 after the chief's exit 0, 1 after the abort), and rank 0 named
    the failing rank."""
    # Every port of the step free, in this test worker's share of the range: the benchmark's
    # own pick checks two ports only, and another worker's test may hold one of the rest (a
    # failing member's port taken once made this test fail with its exit 75).
    monkeypatch.setattr(supervision, "port_base", lambda tasks: free_port_base(tasks + 1))
    result = supervision.simulate(TASKS, scenario, tmp_path, members_as)
    assert result["rank0_status"] == (0 if scenario == "exit" else ABORTED)
    assert result["tasks"] == TASKS


def _limit_open_files(soft: int, hard: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_rank_0_raises_its_soft_open_files_limit_for_its_members():
    code = (
        "import resource\n"
        "from tfslurm_entry.step.control import raise_open_files_limit\n"
        "raise_open_files_limit(4095, 'n1')\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4095 + 64:
        pytest.skip(f"this machine's hard open-files limit is {hard}")
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=_limit_open_files(1024, hard),
    )
    assert int(out.stdout) == 4095 + 64


def test_a_hard_limit_too_low_for_the_step_is_one_clear_error_before_anything_starts(tmp_path):
    marker = tmp_path / "started"
    env = step_env(
        0,
        "n[1-64]",
        "8(x64)",
        SLURMD_NODENAME="n1",
        SLURM_LOCALID="0",
        TFSLURM_PORT_BASE="23000",
        PYTHONPATH=str(supervision.ROOT),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tfslurm_entry", "/bin/touch", str(marker)],
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=_limit_open_files(256, 256),
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "rank 0 on n1 supervises 511 tasks and needs 575 open files" in proc.stderr
    assert "hard limit is 256" in proc.stderr
    assert not marker.exists()
