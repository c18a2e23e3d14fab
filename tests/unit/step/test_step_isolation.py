"""Two steps on one node whose default port windows collide (job ids WINDOWS apart).

Both steps through the real `tfslurm-entry` on localhost with the variables srun would set
faked, no --port-base: the first step runs to its end untouched; every task of the second
finds its ports taken before its program starts and exits with the transient status, naming
the port; a task of the second that reaches the first's rank 0 is turned away.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from bench.localstep import LocalStep, port_free, worker_share
from tfslurm_entry.resolve import ports
from tfslurm_entry.step.outcome import TRANSIENT

pytestmark = pytest.mark.processes  # what only processes prove


def colliding_jobs() -> tuple[int, int]:
    """Two job ids whose step 0 gets the same default window, a window free here (and in
    this test worker's share of the ports)."""
    share = worker_share(ports.DEFAULT_RANGE)
    for _ in range(1000):
        job = random.randrange(1000, 10**6)
        base = ports.default_base(job, 0)
        if base in share and all(port_free(base + i) for i in range(3)):
            return job, job + ports.WINDOWS
    raise AssertionError("no free default window on this machine")


def start_step(job: int, program: str, tmp_path: Path) -> LocalStep:
    """A 2-task step of job `job` in its default port window (no --port-base)."""
    logs = tmp_path / str(job)
    argv = ["/bin/sh", "-c", program]
    return LocalStep(argv, 2, logs, port_base=None, SLURM_JOB_ID=str(job), TMPDIR=str(tmp_path))


def test_the_second_of_two_colliding_steps_stops_at_once_and_the_first_runs_on(tmp_path, request):
    first_job, second_job = colliding_jobs()
    assert ports.default_base(first_job, 0) == ports.default_base(second_job, 0)
    first = start_step(first_job, "sleep 6", tmp_path)
    request.addfinalizer(first.kill)
    time.sleep(2)  # the first step holds its ports
    start = time.monotonic()
    second = start_step(second_job, "echo SECOND-RAN >&2; sleep 6", tmp_path)
    request.addfinalizer(second.kill)
    assert second.wait(15) == [TRANSIENT, TRANSIENT]
    assert time.monotonic() - start < 10
    said = second.log(0) + second.log(1)
    assert "SECOND-RAN" not in said
    assert said.count("transient (exit 75); requeue or resubmit the job") == 2
    assert f"default window {(ports.default_base(first_job, 0) - 10000) // 64}" in said
    assert first.wait(15) == [0, 0]
    heard = first.log(0) + first.log(1)
    assert "all 2 programs ended with exit 0" in heard
    assert "stopping the step" not in heard
    # the second step's rank 1 reports its failure to "its" rank 0: the first's turns it away
    for line in heard.splitlines():
        assert str(second_job) not in line or "turned away rank 1 of another step" in line
