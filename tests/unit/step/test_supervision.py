"""Step supervision with real processes (no TensorFlow): what only processes prove. Rank 0's
and a member's decisions are tested in process (test_head_decisions.py,
test_member_decisions.py); here, that they hold for real entrypoints: exit statuses and the
result file, a program or entrypoint SIGKILLed, TMPDIRs removed, a server restarted in place.

Whole multi-worker steps are played through the real `tfslurm-entry` command (bench's
LocalStep: one process per rank with the variables srun would set on the single node
localhost); the programs are small Python scripts told by the test how to behave (run long,
exit N, or SIGKILL themselves). Parameter-server servers need TensorFlow, so their side is
exercised through run_head and run_member themselves in subprocesses.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from bench.localstep import LocalStep, free_port_base
from bench.repo import ROOT
from tfslurm_entry.step import dial
from tfslurm_entry.step.outcome import ABORTED
from tfslurm_entry.step.protocol import Hello
from tfslurm_entry.step.secret import ENV, NO_SECRET

pytestmark = pytest.mark.processes  # what only processes prove

# argv[1] says what each rank does: "0=run,1=exit:0:0.5,2=kill:1" (run: a minute; exit:C:S:
# exit C after S seconds; kill:S: SIGKILL itself after S seconds; last:S: wait for the others
# to end as end_of_job does, then S seconds more, exit 0); USR1 makes it exit 42. Every program
# names its TMPDIR on stderr and leaves a file there.
PROGRAM = textwrap.dedent("""
    import os, pathlib, signal, sys, time
    signal.signal(signal.SIGUSR1, lambda *_: sys.exit(42))
    plan = dict(item.split("=", 1) for item in sys.argv[1].split(",") if item)
    what = plan.get(os.environ["SLURM_PROCID"], "run").split(":")
    print(f"started, TMPDIR={os.environ['TMPDIR']}", file=sys.stderr, flush=True)
    pathlib.Path(os.environ["TMPDIR"], "scratch").write_text("left behind?")
    if what[0] == "last":
        from tfslurm_entry.tf import wait_for_others
        if not wait_for_others(os.environ.get("TFSLURM_OTHERS_ENDED"), linger=20):
            sys.exit(7)
        time.sleep(float(what[1]))
    elif what[0] == "run":
        time.sleep(60)
    elif what[0] == "exit":
        time.sleep(float(what[2]))
        sys.exit(int(what[1]))
    elif what[0] == "kill":
        time.sleep(float(what[1]))
        os.kill(os.getpid(), signal.SIGKILL)
""")


class Step(LocalStep):
    """A multi-worker step of n ranks on localhost running PROGRAM, told the plan; the node's
    TMPDIR (tasks make theirs inside) and the step's result file under tmp_path."""

    def __init__(
        self, tmp_path: Path, n: int, plan: str, timeout: int = 20, late: Sequence[int] = ()
    ) -> None:
        tmp_path.mkdir()
        program = tmp_path / "program.py"
        program.write_text(PROGRAM)
        self.node_tmp = tmp_path / "node-tmp"
        self.node_tmp.mkdir()
        self.result_file = tmp_path / "step-result"  # rank 0 writes the step's verdict there
        super().__init__(
            [str(program), plan],
            n,
            tmp_path,
            timeout=timeout,
            late=late,
            TMPDIR=str(self.node_tmp),
            TFSLURM_RESULT_FILE=str(self.result_file),
        )

    def tmpdir(self, rank: int) -> Path:
        """The private TMPDIR rank's program was given (it names it on stderr)."""
        return Path(re.search(r"TMPDIR=(\S+)", self.log(rank)).group(1))


@pytest.fixture
def step(tmp_path):
    steps: list[Step] = []

    def start(n: int, plan: str, timeout: int = 20, late: Sequence[int] = ()) -> Step:
        steps.append(Step(tmp_path / str(len(steps)), n, plan, timeout, late))
        return steps[-1]

    yield start
    for s in steps:
        s.kill()


def test_a_multi_worker_step_ends_when_every_task_has_ended(step):
    s = step(3, "0=exit:0:0.2,1=exit:0:1,2=exit:0:2")
    assert s.wait() == [0, 0, 0]
    assert "rank 0 on localhost: program ended with exit 0" in s.log(0)
    assert "waiting for 2 other tasks" in s.log(0)
    said = re.search(
        r"all 3 programs ended with exit 0, the last at (\S+) \(([\d.]+) s after", s.log(0)
    )
    assert said and 1.5 <= float(said.group(2)) < 5, s.log(0)
    assert abs(datetime.fromisoformat(said.group(1)).timestamp() - time.time()) < 10
    assert s.result_file.read_text() == "completed\n"


def test_a_slow_end_of_rank_0_is_waited_for_and_it_can_leave_last(step):
    """Rank 0's program (a chief still evaluating) outlives the others: no abort, no kill; it
    is told when every other program has ended, and every task's TMPDIR is removed."""
    s = step(3, "0=last:3,1=exit:0:0.2,2=exit:0:0.5")
    start = time.monotonic()
    assert s.wait() == [0, 0, 0], s.log(0)  # rank 0 exits 7 if never told
    assert time.monotonic() - start >= 3
    assert "stopping" not in s.log(0) + s.log(1) + s.log(2)
    assert re.search(r"all 3 programs ended with exit 0, .* \(3\.\d s after the first\)", s.log(0))
    for rank in range(3):
        assert s.tmpdir(rank).name.startswith(f"tfslurm-4242.0-rank{rank}-")
        assert not s.tmpdir(rank).exists()
    assert not list(s.node_tmp.iterdir())


def test_a_task_killed_without_kill_on_bad_exit_stops_every_task_fast(step):
    s = step(4, "2=kill:1")
    start = time.monotonic()
    assert s.wait() == [ABORTED, ABORTED, 137, ABORTED]
    assert time.monotonic() - start < 10  # the others would have run a minute
    failure = "rank 2 on localhost failed with exit 137 (SIGKILL)"
    assert f"{failure}; stopping the step (3 tasks still running)" in s.log(0)
    assert "rank 2 on localhost: program failed with exit 137 (SIGKILL); told rank 0" in s.log(2)
    for rank in (1, 3):
        assert f"rank {rank} on localhost: stopping: {failure}; exiting with 1" in s.log(rank)
    assert s.result_file.read_text() == f"interrupted: {failure}\n"
    # The killed program's TMPDIR too: its entrypoint removes it.
    assert all(s.tmpdir(rank).parent == s.node_tmp for rank in range(4))
    assert not list(s.node_tmp.iterdir())


def test_rank_0_failing_stops_the_others_with_its_status_named(step):
    s = step(3, "0=exit:3:1")
    assert s.wait() == [3, ABORTED, ABORTED]
    assert "stopping: rank 0 on localhost failed with exit 3;" in s.log(1)
    assert s.result_file.read_text() == "failed: rank 0 on localhost failed with exit 3\n"


def test_a_killed_entrypoint_is_noticed_by_its_missing_status(step):
    s = step(3, "")
    time.sleep(2)
    os.killpg(s.procs[1].pid, signal.SIGKILL)  # the entrypoint and its program, as a node loss
    assert s.wait()[::2] == [ABORTED, ABORTED]
    assert "rank 1 on localhost is gone without an exit status" in s.log(0)
    assert "stopping: rank 1 on localhost ended without an exit status" in s.log(2)


def test_without_rank_0_the_others_give_up_after_the_timeout(step):
    s = step(2, "", timeout=2)
    os.killpg(s.procs[0].pid, signal.SIGKILL)
    assert s.wait()[1] == ABORTED
    assert "control address localhost:" in s.log(1)
    assert "did not answer within 2 s" in s.log(1)


# The parameter-server side: servers (no program) stop when the chief's program ends.
# HEAD PORT CHIEF_CODE MEMBERS [EXPENDABLE_JSON RESULT_FILE CHECK_IN_TIMEOUT]
HEAD = textwrap.dedent("""
    import json, os, pathlib, sys
    from tfslurm_entry.step.control import listen
    from tfslurm_entry.step.head import run_head
    from tfslurm_entry.step.inputs import Step
    from tfslurm_entry.step.reach import Reach
    from tfslurm_entry.step.program import Command
    command = Command([sys.executable, "-c", sys.argv[2]], {})
    members = {r: "localhost" for r in range(1, int(sys.argv[3]) + 1)}
    expendable = {int(r): n for r, n in json.loads(sys.argv[4]).items()} if sys.argv[4:] else {}
    result = pathlib.Path(sys.argv[5]) if sys.argv[5:] else None
    timeout = float(sys.argv[6]) if sys.argv[6:] else 20
    from tfslurm_entry.step.secret import load_secret
    secret = load_secret(os.environ, "-", pathlib.Path("/nonexistent"))  # TFSLURM_STEP_SECRET
    step = Step("localhost", int(sys.argv[1]), members, servers=True, timeout=timeout,
                expendable=expendable, result_file=result, secret=secret)
    listener = listen(step.port, len(members))  # as task/hold.py holds it
    log = lambda m: print(m, file=sys.stderr, flush=True)
    sys.exit(run_head(command, step, log, listener, Reach(None, [], step.name)))
""")
# SERVER PORT RANK [SERVER_CODE RESTARTS]: without SERVER_CODE, a member with no process;
# STEP_SIZE in its environment: the tasks of the HEAD's step (members + 1), said in its hello;
# STEP_NAME: its JOB.STEP, "-" (the HEAD's) unless set
SERVER = textwrap.dedent("""
    import os, sys
    from tfslurm_entry.step.member import Seat, run_member
    from tfslurm_entry.step.reach import Reach
    from tfslurm_entry.step.program import Command
    command = Command([sys.executable, "-c", sys.argv[3]], {}) if sys.argv[3:] else None
    restarts = int(sys.argv[4]) if sys.argv[4:] else 0
    step = os.environ.get("STEP_NAME", "-")
    from pathlib import Path
    from tfslurm_entry.step.secret import load_secret
    secret = load_secret(os.environ, step, Path("/nonexistent"))  # TFSLURM_STEP_SECRET
    seat = Seat(rank=int(sys.argv[2]), host="localhost", address=f"localhost:{sys.argv[1]}",
                step=step, size=int(os.environ["STEP_SIZE"]), timeout=20, save_timeout=20,
                server=f"worker {sys.argv[2]} server", restarts=restarts, command=command,
                secret=secret)
    log = lambda m: print(m, file=sys.stderr, flush=True)
    sys.exit(run_member(seat, log, Reach(None, [], step)))
""")


def run_python(
    code: str, *args: str, size: int = 3, name: str = "-", secret: str = "", **kwargs
) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STEP_SIZE": str(size), "STEP_NAME": name}
    env[ENV] = secret
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stderr=subprocess.PIPE, text=True, env=env, **kwargs
    )


def test_a_server_stopped_before_it_checked_in_fails_the_step_at_once():
    """SIGTERM can reach a server between its start and its hello: its own report of the end
    must stop the step now, not at the chief timeout (20 s here)."""
    port = str(free_port_base(1))
    head = run_python(HEAD, port, "import time; time.sleep(60)", "2")
    member = run_python(SERVER, port, "1")
    start = time.monotonic()
    hello = Hello("-", 3, 2)  # the HEAD's step: no job id, 3 tasks
    while not dial.tell_head(hello, f"localhost:{port}", 128 + signal.SIGTERM, NO_SECRET, 0.1):
        assert time.monotonic() - start < 10, "the head never listened"
        time.sleep(0.1)
    assert head.wait(10) == ABORTED
    assert member.wait(10) == ABORTED
    assert time.monotonic() - start < 10
    assert "rank 2 on localhost failed with exit 143 (SIGTERM); stopping the step" in (
        head.stderr.read()
    )
    assert dial.tell_head(hello, f"localhost:{port}", 0, NO_SECRET, timeout=0.5) is False


# A stand-in for a TensorFlow server: "die" SIGKILLs itself after 0.5 s every time it starts;
# "die-once" does so on its first start only (argv: a marker file), then serves.
FAKE_SERVER = textwrap.dedent("""
    import os, pathlib, signal, sys, time
    marker = pathlib.Path(sys.argv[2]) if sys.argv[2:] else None
    if sys.argv[1] == "die" or (marker and not marker.exists()):
        if marker:
            marker.touch()
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
""")
CHIEF_4S = "import time; time.sleep(4)"
WORKERS = '{"2": "worker 0", "3": "worker 1"}'  # ranks 2 and 3; rank 1 plays the ps


def server_code(mode: str, marker: Path | None = None) -> str:
    args = [mode] + ([str(marker)] if marker else [])
    return f"import sys; sys.argv = ['server', *{args!r}]\n" + FAKE_SERVER


def ps_step(port: str, result: Path, worker3: str, restarts: str = "2", expendable=WORKERS):
    """Rank 0 (chief, 4 s), rank 1 (ps) and 2 (worker 0) serving; rank 3 runs worker3."""
    head = run_python(HEAD, port, CHIEF_4S, "3", expendable, str(result))
    serve = server_code("serve")
    members = [run_python(SERVER, port, str(rank), serve, restarts, size=4) for rank in (1, 2)]
    members.append(run_python(SERVER, port, "3", worker3, restarts, size=4))
    return head, members


def test_a_worker_server_that_dies_is_restarted_in_place(tmp_path):
    port, result = str(free_port_base(1)), tmp_path / "result"
    head, members = ps_step(port, result, server_code("die-once", tmp_path / "died"))
    assert head.wait(20) == 0
    assert [m.wait(20) for m in members] == [0, 0, 0]
    said = members[2].stderr.read()
    assert (
        "rank 3 on localhost: worker 3 server ended with exit 137 (SIGKILL); restarting it in "
        "place (restart 1 of 2)" in said
    ), said
    assert "rank 3 on localhost: chief ended with exit 0; exiting with 0" in said, said
    assert "lost" not in head.stderr.read()  # rank 0 never heard of it
    assert result.read_text() == "completed\n"


def test_a_worker_lost_for_good_is_left_behind_while_another_remains(tmp_path):
    port, result = str(free_port_base(1)), tmp_path / "result"
    head, members = ps_step(port, result, server_code("die"))
    assert head.wait(20) == 0  # the chief's program ran to its end
    assert [m.wait(20) for m in members] == [0, 0, 137]
    said = members[2].stderr.read()
    assert said.count("restarting it in place") == 2, said
    assert "worker 3 server ended with exit 137 (SIGKILL) after 2 restarts; told rank 0" in said
    log = head.stderr.read()
    assert (
        "rank 0 on localhost: worker 1 (rank 3 on localhost) lost: failed with exit 137 "
        "(SIGKILL); continuing with 1 workers" in log
    ), log
    assert "telling 2 servers to stop (1 lost on the way)" in log, log
    assert result.read_text() == "completed; lost worker 1 (rank 3 on localhost)\n"


@pytest.mark.parametrize(
    ("restarts", "expendable"),
    [("0", "{}"), ("0", '{"3": "worker 1"}')],  # --worker-restarts 0; the only worker left
    ids=["no-restarts", "last-worker"],
)
def test_a_lost_worker_fails_the_step_without_restarts_or_another_worker(
    tmp_path, restarts, expendable
):
    port, result = str(free_port_base(1)), tmp_path / "result"
    start = time.monotonic()
    head, members = ps_step(port, result, server_code("die"), restarts, expendable)
    assert head.wait(20) == ABORTED
    assert [m.wait(20) for m in members] == [ABORTED] * 2 + [137]
    assert time.monotonic() - start < 4  # before the chief's program would have ended
    assert "rank 3 on localhost failed with exit 137 (SIGKILL); stopping the step" in (
        head.stderr.read()
    )
    assert result.read_text() == "interrupted: rank 3 on localhost failed with exit 137 (SIGKILL)\n"


def test_a_worker_that_never_checks_in_fails_the_step_though_workers_may_be_lost(tmp_path):
    """A worker may be lost once it ran; one that never checked in means the step did not start
    as asked (a node that cannot reach rank 0, a task that never started): the step fails at
    the check-in timeout, naming it, rather than the chief running on without it."""
    port, result = str(free_port_base(1)), tmp_path / "result"
    head = run_python(HEAD, port, CHIEF_4S, "3", WORKERS, str(result), "2")
    serve = server_code("serve")
    members = [run_python(SERVER, port, str(rank), serve, "2", size=4) for rank in (1, 2)]
    assert head.wait(20) == ABORTED
    assert [m.wait(20) for m in members] == [ABORTED, ABORTED]
    log = head.stderr.read()
    assert "rank 3 on localhost did not connect to rank 0 within 2 s" in log, log
    assert "lost" not in log, log
    assert result.read_text().startswith("interrupted: rank 3 on localhost did not connect"), log


def test_the_head_turns_slurms_warning_signal_into_sigterm_for_its_program(tmp_path):
    port = str(free_port_base(1))
    ready = tmp_path / "ready"
    program = "import pathlib, signal, sys, time\n"
    program += "signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))\n"
    program += f"pathlib.Path({str(ready)!r}).touch()\ntime.sleep(30)"
    head = run_python(HEAD, port, program, "0")
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    head.send_signal(signal.SIGUSR1)  # sbatch --signal=USR1@120: the program must get SIGTERM
    assert head.wait(10) == 0  # it exits 42 as TensorFlow's handlers do once they saved
    assert "Slurm's SIGUSR1 at " in head.stderr.read()


def test_a_step_without_a_secret_says_so_once_and_how_to_get_one():
    port = str(free_port_base(1))
    head = run_python(HEAD, port, "import time; time.sleep(1)", "1", size=2)
    member = run_python(SERVER, port, "1", size=2)
    assert head.wait(20) == 0 and member.wait(20) == 0
    said = head.stderr.read()
    assert said.count("this step has no secret") == 1, said
    assert "any user who reaches its control port" in said and "tfslurm-run" in said, said
