"""Slurm's notice (preemption, the time limit's warning, a requeue) on real processes.

Whole multi-worker steps through the real `tfslurm-entry`, one process per rank on localhost
with the variables srun sets faked; each under a stand-in for slurmstepd where Slurm would
signal the whole step (tests/fake_slurm.py: every process below it gets the signal, as
proctrack does). The programs count the SIGTERMs they get, "save" for a while and exit 42, as
TensorFlow's PreemptionCheckpointHandler does. The parameter-server side is played through
run_head and run_member (test_supervision.py's HEAD and SERVER).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from bench.localstep import LocalStep, free_port_base
from tests.fake_slurm import signal_step, under_step_daemon
from tests.unit.step.test_supervision import HEAD, SERVER, run_python

pytestmark = pytest.mark.processes  # what only processes prove

# Counts SIGTERMs; once it has one: "saves" for SAVE_S (rank's own, else 0.5 s), writes
# "COUNT USR1-DISPOSITION" to OUT/rankN, exits 42. IGNORE_TERM=1: never ends by itself.
PROGRAM = """
import os, pathlib, signal, sys, time
rank = os.environ["SLURM_PROCID"]
out = pathlib.Path(sys.argv[1])
got = []
if os.environ.get("IGNORE_TERM") != rank:
    signal.signal(signal.SIGTERM, lambda *_: got.append(1))
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
(out / f"ready{rank}").touch()
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(float(dict(p.split("=") for p in sys.argv[2].split(",") if p).get(rank, 0.5)))
time.sleep(0.5)  # a second SIGTERM would come in this time
usr1 = "ignored" if signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN else "default"
(out / f"rank{rank}").write_text(f"{len(got)} {usr1}")
sys.exit(42)
"""


class Step(LocalStep):
    """A 3-task multi-worker step on localhost, each task under a fake slurmstepd (or not),
    started once every program handles SIGTERM."""

    def __init__(self, tmp_path: Path, save: str = "", daemon: bool = True, **env: str) -> None:
        self.out = tmp_path
        program = tmp_path / "program.py"
        program.write_text(PROGRAM)
        self.result = tmp_path / "result"
        super().__init__(
            [str(program), str(tmp_path), save],
            3,
            tmp_path,
            wrap=under_step_daemon if daemon else None,
            TFSLURM_RESULT_FILE=str(self.result),
            TMPDIR=str(tmp_path),
            **env,
        )
        deadline = time.monotonic() + 20
        while not all((tmp_path / f"ready{r}").exists() for r in range(3)):
            assert time.monotonic() < deadline, self.log(0)
            time.sleep(0.05)

    @property
    def daemons(self) -> list[int]:
        return [p.pid for p in self.procs]

    def entrypoints(self) -> list[int]:
        return [p.pid for p in self.procs]

    def counted(self, rank: int) -> str:
        return (self.out / f"rank{rank}").read_text()


@pytest.fixture
def make_step(tmp_path):
    made: list[Step] = []

    def make(**kwargs) -> Step:
        made.append(Step(tmp_path, **kwargs))
        return made[-1]

    yield make
    for step in made:
        step.kill()


def entrypoint_of(daemon: int) -> int:
    from tfslurm_entry.step.program import descendants

    (entry,) = [p.pid for p in descendants(daemon) if p.parent == daemon]
    return entry


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_slurms_notice_to_the_whole_step_reaches_each_program_once_and_stops_nobody(
    make_step, signum
):
    """Slurm signals every process of the step (SIGTERM: preemption, requeue; SIGUSR1: a
    --signal warning); Apptainer's starter hands each entrypoint a second copy. Every program
    gets exactly one SIGTERM and survives the USR1; rank 2 saves for 3 s while the others have
    ended, and nobody is killed: each program exits 42 (TensorFlow's status for a saved
    preemption), each task 0, and the step's verdict is preempted."""
    step = make_step(save="2=3")
    signal_step(step.daemons, signum)
    for daemon in step.daemons:
        os.kill(entrypoint_of(daemon), signum)  # the starter's copy
    assert step.wait() == [0, 0, 0], step.log(0)  # saved as asked: not a failure
    assert [step.counted(r) for r in range(3)] == ["1 ignored"] * 3
    said = step.log(0)
    name = signal.Signals(signum).name
    assert f"rank 0 on localhost: Slurm's {name} at " in said
    assert "every program gets SIGTERM once; waiting up to 300 s" in said
    assert "stopped by Slurm: 3 programs ended within " in said
    assert "of the notice, with exit 42 (3)" in said
    assert step.result.read_text().startswith(f"preempted: Slurm's {name} at ")
    assert "programs ended with exit 42 (3)" in step.result.read_text()
    assert "failed" not in said and "stopping the step" not in said


def test_outside_slurm_a_notice_to_one_task_reaches_every_program(make_step):
    """No step daemon (a run by hand, or Slurm's proctrack/pgid): SIGTERM to rank 1's
    entrypoint alone. It tells rank 0, which relays it: every program gets one SIGTERM."""
    step = make_step(daemon=False)
    os.kill(step.entrypoints()[1], signal.SIGTERM)
    assert step.wait() == [0, 0, 0], step.log(0)
    assert [step.counted(r) for r in range(3)] == ["1 ignored"] * 3
    assert step.result.read_text().startswith("preempted: Slurm's SIGTERM at ")


def test_a_program_that_does_not_end_after_the_notice_is_stopped_after_the_save_timeout(
    make_step,
):
    step = make_step(IGNORE_TERM="1", TFSLURM_SAVE_TIMEOUT="2")
    start = time.monotonic()
    signal_step(step.daemons, signal.SIGTERM)
    codes = step.wait()
    assert time.monotonic() - start < 10
    assert codes[0] == 0 and codes[2] == 0 and codes[1] != 0, step.log(0)
    assert "ranks 1 had not ended when rank 0 stopped waiting" in step.log(0)
    assert step.result.read_text().rstrip().endswith("; ranks 1 did not end")


def test_a_notice_before_the_programs_start_stops_the_step(tmp_path):
    """Rank 0 alone, its member never starting: Slurm's SIGTERM stops the step at once."""
    port = str(free_port_base(1))
    result = tmp_path / "result"
    head = run_python(HEAD, port, "import time; time.sleep(30)", "1", "{}", str(result))
    deadline = time.monotonic() + 20
    while True:  # listening: run_head installs its handlers right after
        try:
            socket.create_connection(("localhost", int(port)), timeout=1).close()
            time.sleep(0.3)  # from listen() to run_head's handlers: a few lines of Python
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    head.send_signal(signal.SIGTERM)
    assert head.wait(10) == 128 + signal.SIGTERM
    assert "before any program started; stopping the step" in head.stderr.read()
    assert result.read_text().rstrip().endswith("before any program started")


CHIEF_SAVES = """
import os, signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append(1))
open(PIDS + ".chief", "w").close()  # its handler is in place
while not got:
    time.sleep(0.05)
time.sleep(2)  # the save: it reads the variables from the ps
alive = [os.path.exists(f"/proc/{pid}") for pid in open(PIDS).read().split()]
print("servers alive while the chief saved:", alive, file=sys.stderr, flush=True)
sys.exit(0 if all(alive) and len(alive) == 2 else 5)
"""
SERVING = "import os, time\nopen(PIDS, 'a').write(f'{os.getpid()} ')\ntime.sleep(60)\n"


def test_parameter_servers_outlive_the_notice_until_the_chief_has_saved(tmp_path):
    """Slurm's SIGTERM to every task of a parameter-server step: the chief's program gets it
    and saves for 2 s, the ps/worker servers keep serving meanwhile (not stopped, not
    restarted); then the servers stop and the step is preempted."""
    port = str(free_port_base(1))
    result = tmp_path / "result"
    pids = tmp_path / "servers"  # each server writes its pid there
    where = f"PIDS = {str(pids)!r}\n"
    head = run_python(HEAD, port, where + CHIEF_SAVES, "2", "{}", str(result))
    members = [run_python(SERVER, port, str(r), where + SERVING, "3") for r in (1, 2)]
    deadline = time.monotonic() + 20
    chief_ready = Path(f"{pids}.chief")
    while len(pids.read_text().split() if pids.exists() else []) < 2 or not chief_ready.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for proc in (head, *members):
        proc.send_signal(signal.SIGTERM)
    assert head.wait(20) == 0, head.stderr.read()
    assert [m.wait(10) for m in members] == [0, 0]
    said = head.stderr.read()
    assert "servers alive while the chief saved: [True, True]" in said
    assert "stopped by Slurm: the chief's program ended within" in said
    assert result.read_text().startswith("preempted: Slurm's SIGTERM at ")
    assert not any("restarting" in m.stderr.read() for m in members)
