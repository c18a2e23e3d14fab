"""Real TensorFlow processes on localhost, configured by tfslurm-entry from fake Slurm envs.

Each test plays one Slurm job step on a single node: one process per rank, each with the
environment srun would give it (SLURM_PROCID, SLURM_STEP_* ...), and a port range found free
at test time. The training programs live in ``programs/`` and print one ``RESULT {json}`` line.

Every child runs in its own session and is killed when the test ends, passed or not; each test
fails (never hangs) after TEST_TIMEOUT seconds, showing the tails of the children's output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from bench.localstep import free_port_base
from tests.fake_slurm import signal_step, under_step_daemon
from tests.job_output import error_lines
from tfslurm_entry.step.program import descendants

PROGRAMS = Path(__file__).parent / "programs"
MULTI_WORKER_PROGRAM = PROGRAMS / "multi_worker_fit.py"
PS_CHIEF_PROGRAM = PROGRAMS / "ps_chief.py"
END_OF_JOB_PROGRAM = PROGRAMS / "end_of_job.py"

TEST_TIMEOUT = 180.0  # seconds per test, for all of its processes together
STEPS = 3  # steps per epoch in the multi-worker program (two epochs)
PS_STEPS = 6  # steps the parameter-server chief schedules
JOB_ID = "4242"

# What every child gets: CPU only, one thread each, tf-keras, little TensorFlow chatter.
# One inter-op thread is deliberate: a ps/worker server with one deadlocks the parameter-server
# chief in coordinator.join(), so this proves the entrypoint raises it for the servers it starts.
CHILD_ENV = {
    "CUDA_VISIBLE_DEVICES": "",
    "OMP_NUM_THREADS": "1",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "TF_USE_LEGACY_KERAS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "1",
    "PYTHONUNBUFFERED": "1",
}


def entry_command() -> list[str]:
    """The installed console script next to this Python, else the module."""
    script = Path(sys.executable).with_name("tfslurm-entry")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "tfslurm_entry"]


def base_env() -> dict[str, str]:
    """This process's environment without anything Slurm, tfslurm or TF_CONFIG left in it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM", "TFSLURM_")) and k != "TF_CONFIG"
    }
    env.update(CHILD_ENV)
    return env


def slurm_env(rank: int, num_tasks: int) -> dict[str, str]:
    """What srun gives rank ``rank`` of a ``num_tasks``-task step on the single node localhost."""
    env = base_env()
    env.update(
        SLURM_PROCID=str(rank),
        SLURM_STEP_NUM_TASKS=str(num_tasks),
        SLURM_STEP_NODELIST="localhost",
        SLURM_STEP_TASKS_PER_NODE=str(num_tasks),
        SLURM_JOB_ID=JOB_ID,
        SLURM_STEP_ID="0",
        SLURM_LOCALID=str(rank),
        SLURMD_NODENAME="localhost",
    )
    return env


def print_config(env: dict[str, str], *options: str) -> dict:
    """``tfslurm-entry --print-config`` for one rank's environment, parsed."""
    done = subprocess.run(
        [*entry_command(), *options, "--print-config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"--print-config failed ({done.returncode}): {done.stderr}"
    return json.loads(done.stdout)


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        return f"<unreadable: {err}>"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    stdout_path: Path
    stderr_path: Path
    files: tuple[IO[bytes], ...]

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def result(self) -> dict:
        """The program's ``RESULT {json}`` line."""
        for line in reversed(self.stdout().splitlines()):
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT ") :])
        raise AssertionError(f"{self.name} printed no RESULT line")


class Processes:
    """The children of one test, a shared deadline, and the evidence for failure messages."""

    def __init__(self, workdir: Path, timeout: float = TEST_TIMEOUT) -> None:
        self.workdir = workdir
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.children: list[Child] = []

    def start(self, name: str, argv: Sequence[str], env: dict[str, str]) -> Child:
        out_path = self.workdir / f"{name}.stdout"
        err_path = self.workdir / f"{name}.stderr"
        out, err = out_path.open("wb"), err_path.open("wb")
        proc = subprocess.Popen(
            [str(a) for a in argv],
            env=env,
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,  # its own process group, killed as a whole at the end
        )
        child = Child(name, proc, out_path, err_path, (out, err))
        self.children.append(child)
        return child

    def report(self, lines: int = 25) -> str:
        parts = []
        for c in self.children:
            code = c.proc.poll()
            state = "still running" if code is None else f"exit status {code}"
            parts.append(
                f"--- {c.name} (pid {c.proc.pid}, {state}): {' '.join(map(str, c.proc.args))}\n"
                f"stdout tail:\n{_tail(c.stdout_path, 5)}\n"
                f"stderr tail:\n{_tail(c.stderr_path, lines)}"
            )
        return "\n".join(parts)

    def fail(self, why: str) -> None:
        pytest.fail(f"{why}\n{self.report()}", pytrace=False)

    def wait(self, children: Sequence[Child], watch: Sequence[Child] = ()) -> None:
        """Wait until all ``children`` exit with status 0.

        Fails at once if one of them exits non-zero, if one of ``watch`` (servers that must keep
        running) exits at all, or when the test's deadline passes.
        """
        while True:
            codes = [c.proc.poll() for c in children]
            bad = [c for c, code in zip(children, codes, strict=True) if code not in (None, 0)]
            if bad:
                self.fail(f"{', '.join(c.name for c in bad)} failed")
            if all(code == 0 for code in codes):
                return
            gone = [c for c in watch if c.proc.poll() is not None]
            if gone:
                self.fail(f"{', '.join(c.name for c in gone)} stopped while it should serve")
            if time.monotonic() > self.deadline:
                running = [c.name for c, code in zip(children, codes, strict=True) if code is None]
                self.fail(f"{', '.join(running)} still running after {self.timeout:.0f} s")
            time.sleep(0.2)

    def stop(self, child: Child, grace: float = 10.0) -> int:
        """SIGTERM the child's process group, SIGKILL it after ``grace`` seconds; its status."""
        if child.proc.poll() is None:
            _signal_group(child.proc, signal.SIGTERM)
            try:
                child.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(child.proc, signal.SIGKILL)
                child.proc.wait(timeout=grace)
        return child.proc.returncode

    def stop_all(self) -> None:
        for c in self.children:
            try:
                self.stop(c)
            finally:
                for f in c.files:
                    f.close()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # pid == process group id: start_new_session=True


def expected_multi_worker_tf_config(num_tasks: int, port_base: int, rank: int) -> dict:
    workers = [f"localhost:{port_base + r}" for r in range(num_tasks)]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}


def check_multi_worker_results(processes: Processes, results: Sequence[dict]) -> None:
    """Every worker trained the same model in lockstep and knew its own place."""
    message = f"results: {json.dumps(results, indent=1)}\n{processes.report()}"
    num = len(results)
    for rank, res in enumerate(results):
        assert res["task_type"] == "worker", message
        assert res["task_id"] == rank, message
        assert res["replicas"] == num, message
        assert res["model_module"].startswith("tf_keras"), message
        assert res["iterations"] == 2 * STEPS, message
    first = results[0]
    for res in results[1:]:
        assert res["cluster"] == first["cluster"], message
        # Different seeds per worker and different data shards: only the strategy's broadcast
        # and all-reduce make these agree.
        assert res["weight_sum"] == pytest.approx(first["weight_sum"], rel=1e-5, abs=1e-5), message
        assert res["weight_abs_sum"] == pytest.approx(
            first["weight_abs_sum"], rel=1e-5, abs=1e-5
        ), message
        assert res["loss"] == pytest.approx(first["loss"], rel=1e-4, abs=1e-5), message


@pytest.mark.integration
def test_multi_worker_with_tf_config_from_print_config(processes: Processes) -> None:
    """`--print-config` per rank, then plain Python workers with that TF_CONFIG train together."""
    num_tasks = 2
    port_base = free_port_base(num_tasks + 1)  # + rank 0's control port
    configs = [
        print_config(slurm_env(rank, num_tasks), "--port-base", str(port_base))
        for rank in range(num_tasks)
    ]
    for rank, config in enumerate(configs):
        assert config["role"] == "worker", config
        assert config["strategy"] == "multi-worker", config
        assert config["rank"] == rank, config
        assert config["num_tasks"] == num_tasks, config
        assert config["TF_CONFIG"] == expected_multi_worker_tf_config(num_tasks, port_base, rank)

    workers = []
    for rank, config in enumerate(configs):
        env = base_env()
        env["TF_CONFIG"] = json.dumps(config["TF_CONFIG"])
        argv = [sys.executable, MULTI_WORKER_PROGRAM, str(STEPS)]
        workers.append(processes.start(f"rank{rank}", argv, env))
    processes.wait(workers)

    results = [w.result() for w in workers]
    for config, res in zip(configs, results, strict=True):
        assert res["tf_config"] == config["TF_CONFIG"], processes.report()
    check_multi_worker_results(processes, results)


@pytest.mark.integration
def test_multi_worker_run_mode(processes: Processes) -> None:
    """`tfslurm-entry PROGRAM` on every rank exports TF_CONFIG itself and execs the program."""
    num_tasks = 2
    port_base = free_port_base(num_tasks + 1)  # + rank 0's control port
    options = ["--strategy", "multi-worker", "--port-base", str(port_base)]
    workers = [
        processes.start(
            f"rank{rank}",
            [*entry_command(), *options, MULTI_WORKER_PROGRAM, str(STEPS)],
            slurm_env(rank, num_tasks),
        )
        for rank in range(num_tasks)
    ]
    processes.wait(workers)

    results = [w.result() for w in workers]
    for rank, (worker, res) in enumerate(zip(workers, results, strict=True)):
        line = (
            f"tfslurm: rank {rank}/{num_tasks} host localhost role worker index {rank} "
            f"addr localhost:{port_base + rank} "
        )
        assert line in worker.stderr(), processes.report()
        # What the program saw is exactly what --print-config says for the same environment.
        config = print_config(slurm_env(rank, num_tasks), *options)
        assert res["tf_config"] == config["TF_CONFIG"], processes.report()
        assert res["tf_config"] == expected_multi_worker_tf_config(num_tasks, port_base, rank)
    check_multi_worker_results(processes, results)


@pytest.mark.integration
def test_parameter_server_run_mode(processes: Processes) -> None:
    """Rank 0 runs the coordinator program; the ps and worker ranks serve until stopped."""
    num_tasks = 4
    port_base = free_port_base(num_tasks + 1)  # + rank 0's control port
    expected_roles = [("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
    cluster = {
        "chief": [f"localhost:{port_base}"],
        "ps": [f"localhost:{port_base + 1}"],
        "worker": [f"localhost:{port_base + 2}", f"localhost:{port_base + 3}"],
    }
    for rank, (task_type, index) in enumerate(expected_roles):
        env = slurm_env(rank, num_tasks)
        env["TFSLURM_PORT_BASE"] = str(port_base)  # the variable instead of the flag
        config = print_config(env, "--strategy", "parameter-server", "--ps", "1")
        assert config["role"] == task_type, config
        assert config["TF_CONFIG"] == {
            "cluster": cluster,
            "task": {"type": task_type, "index": index},
        }, config

    children = []
    for rank, (task_type, index) in enumerate(expected_roles):
        env = slurm_env(rank, num_tasks)
        env["TFSLURM_PORT_BASE"] = str(port_base)
        argv = [
            *entry_command(),
            "--strategy",
            "parameter-server",
            "--ps",
            "1",
            PS_CHIEF_PROGRAM,
            str(PS_STEPS),
        ]
        children.append(processes.start(f"rank{rank}-{task_type}{index}", argv, env))
    chief, servers = children[0], children[1:]

    processes.wait([chief])
    chief_done = time.monotonic()

    # The chief's entrypoint tells the ps and workers that it ended: they stop by themselves.
    processes.wait(servers)
    assert time.monotonic() - chief_done < 15, processes.report()
    for server in servers:
        assert "chief ended with exit 0; exiting with 0" in server.stderr(), processes.report()
    for rank, (child, (task_type, index)) in enumerate(zip(children, expected_roles, strict=True)):
        line = (
            f"tfslurm: rank {rank}/{num_tasks} host localhost role {task_type} index {index} "
            f"addr localhost:{port_base + rank} "
        )
        assert line in child.stderr(), processes.report()
    for rank, (server, (task_type, index)) in enumerate(
        zip(servers, expected_roles[1:], strict=True), start=1
    ):
        serving = (
            f"tfslurm: rank {rank} {task_type} {index} serving on localhost:{port_base + rank}"
        )
        assert serving in server.stderr(), processes.report()

    res = chief.result()
    message = f"result: {json.dumps(res, indent=1)}\n{processes.report()}"
    assert res["task_type"] == "chief", message
    assert res["task_id"] == 0, message
    assert res["cluster"] == cluster, message
    assert res["num_workers"] == 2, message
    assert res["model_module"].startswith("tf_keras"), message
    assert res["scheduled"] == PS_STEPS, message
    assert res["steps"] == PS_STEPS, message
    assert res["losses_finite"], message
    devices = res["variable_devices"]
    assert len(devices) >= 3, message  # kernel, bias, step counter
    for name, device in devices.items():
        assert "/job:ps/" in device, f"{name} lives on {device!r}, not on a ps\n{message}"


# On a machine with CUDA libraries but no GPU driver (this project's build hosts), every
# TensorFlow process logs one "E0000 ... failed call to cuInit" line at start-up: not about the
# job's end.
HOST_NOISE = "failed call to cuInit"
CHIEF_EXTRA = 15  # seconds the chief works on alone: longer than TensorFlow's heartbeat timeout


def children_error_lines(children: Sequence[Child]) -> list[str]:
    return [f"{c.name}: {line}" for c in children for line in error_lines(c.stderr(), HOST_NOISE)]


def end_of_job_step(processes: Processes, options: list[str], args: list[str]) -> list[Child]:
    """A 2-task step on localhost running programs/end_of_job.py ARGS, entrypoint OPTIONS."""
    port_base = free_port_base(3)
    command = [*entry_command(), "--port-base", str(port_base), *options, END_OF_JOB_PROGRAM]
    return [
        processes.start(f"rank{rank}", [*command, *args], slurm_env(rank, 2)) for rank in range(2)
    ]


# "off": the control, without any barrier: TensorFlow reports the idle worker as crashed. It
# shows the failure the barrier prevents (TensorFlow's behaviour, not the kit's), so it runs in
# make test-soak with the other controls; make test proves the two ways of ending clean.
CONTROL = pytest.param("off", marks=pytest.mark.soak, id="off-control")


@pytest.mark.integration
@pytest.mark.parametrize("ending", ["end_of_job", "automatic", CONTROL])
def test_end_of_job_ends_a_multi_worker_job_clean(processes: Processes, ending: str) -> None:
    """The chief works on after the others; with end_of_job, or the barrier tfslurm-entry
    arranges at the program's normal exit, nobody leaves early and no error line appears.
    With the automatic barrier off (--end-barrier 0) and no end_of_job, TensorFlow reports the
    idle worker as crashed (the control case: it shows the check would catch the problem)."""
    options = ["--end-barrier", "0"] if ending == "off" else []
    argv = [str(CHIEF_EXTRA)] + ([] if ending == "end_of_job" else ["--without"])
    workers = end_of_job_step(processes, options, argv)
    processes.wait(workers)
    chief, worker = (w.result() for w in workers)
    assert chief["summed"] == worker["summed"] == 6, processes.report()
    errors = children_error_lines(workers)
    if ending == "off":
        assert any("unhealthy" in line for line in errors), processes.report()
        return
    assert errors == [], "\n".join(errors)
    summary = re.search(
        r"all 2 programs ended with exit 0, .* \(([\d.]+) s after the first\)", workers[0].stderr()
    )
    assert summary and float(summary.group(1)) < 5, processes.report()
    if ending == "end_of_job":
        # The worker waited in end_of_job for the chief's extra work; the chief, which hosts
        # the coordination service, returned only once the worker's program had ended.
        assert worker["waited"] >= CHIEF_EXTRA - 2, worker
        assert chief["others_ended"] is True and worker["others_ended"] is None, (chief, worker)
    else:
        # The worker's program returned at once and its Python waited at exit: both ended
        # within seconds of each other, CHIEF_EXTRA s after the worker's program returned.
        assert worker["waited"] < 1 and chief["others_ended"] is False, (chief, worker)


@pytest.mark.integration
@pytest.mark.parametrize("barrier", ["automatic", CONTROL])
def test_a_leader_that_ends_first_waits_for_a_late_worker(processes: Processes, barrier: str):
    """Worker 1 works on after the chief (worker 0, which hosts the coordination service):
    with the automatic barrier the chief's Python waits at exit and leaves last, and no error
    line appears. Off, worker 1 logs TensorFlow's "Failed to send RPC to coordination service
    ... Connection refused" (the control case)."""
    options = ["--end-barrier", "0"] if barrier == "off" else []
    workers = end_of_job_step(processes, options, [str(CHIEF_EXTRA), "--without", "--late", "1"])
    processes.wait(workers)
    errors = children_error_lines(workers)
    if barrier == "off":
        assert any("Failed to send RPC to coordination service" in e for e in errors), errors
        return
    assert errors == [], "\n".join(errors)
    summary = re.search(
        r"all 2 programs ended with exit 0, .* \(([\d.]+) s after the first\)", workers[0].stderr()
    )
    assert summary and float(summary.group(1)) < 5, processes.report()


@pytest.mark.integration
@pytest.mark.parametrize("how", ["raise", "exit"])
def test_a_failing_program_does_not_wait_at_the_end(processes: Processes, how: str) -> None:
    """Worker 1 fails at the end (an exception, or sys.exit(3)) while the chief works on for a
    minute: it does not wait at the automatic barrier, and the step stops within seconds,
    naming rank 1."""
    chief_extra, status = 60, 3 if how == "exit" else 1
    start = time.monotonic()
    workers = end_of_job_step(processes, [], [str(chief_extra), "--without", "--fail", how])
    assert workers[1].proc.wait(timeout=TEST_TIMEOUT) == status, processes.report()
    assert workers[0].proc.wait(timeout=30) != 0, processes.report()
    took = time.monotonic() - start
    named = f"rank 1 on localhost failed with exit {status}"
    assert named in workers[0].stderr(), processes.report()
    assert took < chief_extra - 10, (took, processes.report())
    assert "end of job" not in workers[1].stderr(), processes.report()


@pytest.mark.integration
def test_the_automatic_barrier_gives_up_after_its_timeout(processes: Processes) -> None:
    """--end-barrier 3 while the chief works on for 8 s: the worker waits about 3 s, says in
    one line that it gave up, and ends with its program's status."""
    workers = end_of_job_step(processes, ["--end-barrier", "3"], ["8", "--without"])
    processes.wait(workers)
    assert [w.proc.returncode for w in workers] == [0, 0], processes.report()
    gave_up = re.search(
        r"tfslurm: end of job: gave up waiting for the other tasks after (\d+) s",
        workers[1].stderr(),
    )
    assert gave_up and 2 <= int(gave_up.group(1)) <= 6, processes.report()
    assert "Traceback" not in workers[1].stderr(), processes.report()


@pytest.mark.integration
def test_end_of_job_returns_at_once_without_a_cluster() -> None:
    """One process (no TF_CONFIG): a local MultiWorkerMirroredStrategy or the default strategy
    has no one to wait for. (Parameter-server: ps_chief.py ends with it too.)"""
    code = (
        "import time, tensorflow as tf\n"
        "from tfslurm_entry.tf import end_of_job\n"
        "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
        "start = time.monotonic()\n"
        "end_of_job(strategy)\n"
        "end_of_job(tf.distribute.get_strategy())\n"
        "print('RESULT', time.monotonic() - start)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=base_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.split("RESULT")[1]) < 1, done.stdout


# The chief's program: on SIGTERM it "saves" for 3 s (the servers must still be up), then exits.
SAVING_CHIEF = (
    "import signal, sys, time\n"
    "got = []\n"
    "signal.signal(signal.SIGTERM, lambda *_: got.append(1))\n"
    "while not got: time.sleep(0.05)\n"
    "time.sleep(3)\n"
)


@pytest.mark.integration
def test_slurms_sigterm_leaves_the_servers_up_until_the_chief_has_saved(
    processes: Processes, tmp_path: Path
) -> None:
    """Slurm's SIGTERM to every process of a parameter-server step (each task under a stand-in
    for slurmstepd): real TensorFlow servers ignore it and keep serving while the chief's
    program saves; once it has ended they are stopped, every task exits 0 and removes its
    TMPDIR, and the verdict is preempted."""
    num_tasks = 3  # chief, ps, worker
    port_base = free_port_base(num_tasks + 1)
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    result = tmp_path / "result"
    children = []
    for rank in range(num_tasks):
        env = {**slurm_env(rank, num_tasks), "TMPDIR": str(node_tmp)}
        argv = [*entry_command(), "--strategy", "parameter-server", "--port-base", str(port_base)]
        argv += ["--result-file", str(result), sys.executable, "-c", SAVING_CHIEF]
        children.append(processes.start(f"rank{rank}", under_step_daemon(argv), env))
    deadline = time.monotonic() + 60
    while not all("serving on" in c.stderr() for c in children[1:]):
        assert time.monotonic() < deadline, processes.report()
        time.sleep(0.2)
    below = [p.pid for c in children for p in descendants(c.proc.pid)]
    server = b"tfslurm_entry.task.server"  # task/server.py, as the member starts it
    servers = [pid for pid in below if server in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(servers) == 2, processes.report()

    signal_step([c.proc.pid for c in children], signal.SIGTERM)
    time.sleep(1.5)  # the chief saves for 3 s: its servers are still there
    assert all(Path(f"/proc/{pid}").exists() for pid in servers), processes.report()
    assert [c.proc.wait(timeout=30) for c in children] == [0, 0, 0], processes.report()
    assert not any(Path(f"/proc/{pid}").exists() for pid in servers)
    assert list(node_tmp.iterdir()) == [], processes.report()
    assert result.read_text().startswith("preempted: Slurm's SIGTERM at "), processes.report()
    assert "stopped by Slurm: the chief's program ended within" in children[0].stderr()


# The examples' custom loop: TensorFlow's PreemptionCheckpointHandler, as a user writes it.
PREEMPTION_CTL = Path(__file__).resolve().parents[2] / "examples/preemption/custom_loop.py"


@pytest.mark.integration
def test_a_notice_mid_training_saves_on_every_worker_and_ends_clean(
    processes: Processes, tmp_path: Path
) -> None:
    """TensorFlow's PreemptionCheckpointHandler in a user's custom loop (2 workers on localhost):
    SIGTERM to each entrypoint mid-training; every worker saves at the agreed step and exits 42,
    each task 0, the verdict is preempted, and no error line: rank 0's program, the coordination
    service's leader, leaves after the other (else its heartbeats fail at E level)."""
    checkpoints, result = tmp_path / "ckpt", tmp_path / "result"
    port_base = free_port_base(3)
    children = []
    for rank in range(2):
        env = slurm_env(rank, 2)
        argv = [*entry_command(), "--port-base", str(port_base), "--result-file", str(result)]
        argv += [sys.executable, str(PREEMPTION_CTL), str(checkpoints), "100000"]
        children.append(processes.start(f"rank{rank}", argv, env))
    deadline = time.monotonic() + 120
    while not re.search(r"^step [1-9]\d ", children[0].stdout(), re.M):
        assert time.monotonic() < deadline, processes.report()
        time.sleep(0.2)
    for child in children:
        child.proc.send_signal(signal.SIGTERM)
    assert [c.proc.wait(timeout=60) for c in children] == [0, 0], processes.report()
    assert result.read_text().startswith("preempted: ") and "exit 42 (2)" in result.read_text()
    assert (checkpoints / "checkpoint").exists(), processes.report()
    for child in children:
        assert error_lines(child.stderr()) == [], child.stderr()[-3000:]
