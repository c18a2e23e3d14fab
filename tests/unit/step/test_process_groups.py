"""Nothing of a step keeps running after it: the program's process group and its strays.

Whole 4-task steps on localhost through the real `tfslurm-entry`, the variables srun would set
faked. Each task's program is a user's shell wrapper, as users write them: a helper started in
the background (same process group), one that leaves the group with setsid, then the work.
Every sleep carries a number unique to the test, so that /proc shows whether any survived.
"""

from __future__ import annotations

import locale
import os
import random
import signal
import time
from pathlib import Path

import pytest

from bench.localstep import LocalStep
from tfslurm_entry.step import program

TASKS = 4

WRAPPER = """#!/bin/sh
# run.sh: helpers in the background, then the training; rank $FAIL_RANK fails after 1 s
sleep 1{mark}.1 &
setsid sleep 1{mark}.2 &
if [ "$SLURM_PROCID" = "$FAIL_RANK" ]; then sleep 1; exit 3; fi
sleep {work}.{mark}
"""


def survivors(mark: str) -> list[str]:
    """Command lines of the processes still running that carry the test's number."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline}")
    return found


class WrapperStep(LocalStep):
    def __init__(self, tmp_path: Path, fail_rank: int | None, work_s: int) -> None:
        self.mark = str(random.randrange(10**6, 10**7))
        script = tmp_path / "run.sh"
        script.write_text(WRAPPER.format(mark=self.mark, work=work_s))
        script.chmod(0o755)
        super().__init__(
            [str(script)],
            TASKS,
            tmp_path,
            timeout=30,
            FAIL_RANK=str(fail_rank),
            TMPDIR=str(tmp_path),
        )

    def wait(self, timeout: float = 30) -> tuple[list[int], str]:
        codes = super().wait(timeout)
        return codes, "".join(self.log(rank) for rank in range(TASKS))

    def kill_leftovers(self) -> None:
        for line in survivors(self.mark):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)


@pytest.fixture
def step(tmp_path):
    made = []

    def make(fail_rank: int | None = None, work_s: int = 60) -> WrapperStep:
        made.append(WrapperStep(tmp_path, fail_rank, work_s))
        return made[-1]

    yield make
    for s in made:
        s.kill()
        s.kill_leftovers()


@pytest.mark.processes
def test_a_failing_rank_stops_every_wrapper_and_its_children(step):
    s = step(fail_rank=1)
    start = time.monotonic()
    codes, err = s.wait()
    assert codes[1] == 3 and all(c != 0 for c in codes), err
    assert time.monotonic() - start < 20
    time.sleep(0.5)
    assert survivors(s.mark) == [], err
    assert "left its process group" in err and "(sleep)" in err


@pytest.mark.processes
def test_a_time_limit_stops_every_wrapper_and_its_children(step):
    """Slurm's time limit (or scancel) sends SIGTERM to the step's tasks."""
    s = step()
    time.sleep(3)
    for p in s.procs:
        p.send_signal(signal.SIGTERM)
    codes, err = s.wait()
    assert codes and all(c != 0 for c in codes), err
    time.sleep(0.5)
    assert survivors(s.mark) == [], err
    assert "stopped by Slurm: 4 programs ended within" in err


@pytest.mark.processes
def test_a_normal_end_leaves_nothing_running(step):
    s = step(work_s=2)
    codes, err = s.wait()
    assert codes == [0] * TASKS, err
    time.sleep(0.5)
    assert survivors(s.mark) == [], err
    assert err.count("1 of them left its process group; stopping them") == TASKS, err


def test_the_process_table_is_procs_as_pathlib_reads_it():
    """processes() reads /proc/PID/stat without pathlib, as Path.read_text() would: the same
    table (its own process and its parent among it, this one alive)."""
    found = {p.pid: p for p in program.processes()}
    me = found[os.getpid()]
    assert me.parent == os.getppid() and not me.zombie
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    assert me.name == stat[stat.index("(") + 1 : stat.rindex(")")]
    assert me.group == os.getpgrp()


def test_a_file_reads_as_pathlib_reads_it(tmp_path):
    path = tmp_path / "stat"
    for data in (b"1 (a)b\r\nc) S 0 1\n", b"1 (\xc3\xa9) R 0 1", b"1 (x\ry) S 0 1\r", b""):
        path.write_bytes(data)
        got = program._read_text(str(path), locale.getpreferredencoding(False))
        assert got == path.read_text()
