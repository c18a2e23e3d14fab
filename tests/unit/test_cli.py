"""The command line: outputs, option precedence, bad input, and run mode as a real process."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.localstep import free_port_base
from bench.repo import ROOT as REPO
from tests.fake_slurm import step_env
from tfslurm_entry.cli import main
from tfslurm_entry.inprogram.program_end import AUTOLOAD_DIR
from tfslurm_entry.task.argv import missing_program

ENTRY = [sys.executable, "-m", "tfslurm_entry"]


def run_main(capsys, argv, env):
    code = main(argv, env)
    out, err = capsys.readouterr()
    return code, out, err


def print_config(capsys, env, *argv):
    code, out, err = run_main(capsys, ["--print-config", *argv], env)
    assert code == 0, err
    return json.loads(out)


def test_print_config_keys(capsys):
    cfg = print_config(capsys, step_env(2, CUDA_VISIBLE_DEVICES="0,1"), "--port-base", "7000")
    assert cfg["TF_CONFIG"] == {
        "cluster": {"worker": ["n1:7000", "n1:7001", "n2:7000", "n2:7001"]},
        "task": {"type": "worker", "index": 2},
    }
    assert (cfg["CUDA_VISIBLE_DEVICES"], cfg["role"], cfg["rank"], cfg["host"]) == (
        "0",
        "worker",
        2,
        "n2",
    )


def test_print_config_outside_slurm(capsys):
    cfg = print_config(capsys, {"PATH": "/bin"})
    assert (cfg["TF_CONFIG"], cfg["CUDA_VISIBLE_DEVICES"], cfg["role"]) == (None, None, "local")


def test_flags_win_over_environment_variables(capsys):
    env = step_env(
        1, TFSLURM_STRATEGY="parameter-server", TFSLURM_PORT_BASE="9000", TFSLURM_NUM_PS="2"
    )
    cfg = print_config(capsys, env)
    assert cfg["role"] == "ps" and cfg["TF_CONFIG"]["cluster"]["ps"] == ["n1:9001", "n2:9000"]
    cfg = print_config(capsys, env, "--strategy", "multi-worker", "--port-base", "9100")
    assert cfg["role"] == "worker" and cfg["TF_CONFIG"]["task"]["index"] == 1
    assert cfg["TF_CONFIG"]["cluster"]["worker"][0] == "n1:9100"


def test_gpus_per_task_from_environment(capsys):
    env = step_env(0, "n1", "2", CUDA_VISIBLE_DEVICES="0,1,2,3", TFSLURM_GPUS_PER_TASK="1")
    assert print_config(capsys, env)["CUDA_VISIBLE_DEVICES"] == "0"


def test_explain_table(capsys):
    env = step_env(1, CUDA_VISIBLE_DEVICES="4,5,6,7")
    code, out, _ = run_main(
        capsys, ["--explain", "--strategy", "parameter-server", "--port-base", "5000"], env
    )
    lines = out.splitlines()
    assert code == 0
    assert (
        "strategy parameter-server: 4 tasks on 2 hosts, ports 5000-5002 (--port-base 5000)"
        in lines[0]
    )
    assert "rank 0 supervises on n1:5002" in lines[0]
    assert lines[1].split() == ["rank", "host", "local", "role", "index", "address", "gpus"]
    assert lines[2].split() == ["0", "n1", "0", "chief", "0", "n1:5000", "none"]
    assert lines[3].split() == ["*", "1", "n1", "1", "ps", "0", "n1:5001", "none"]
    assert lines[5].split() == ["3", "n2", "1", "worker", "1", "n2:5001", "6,7"]


BAD_INPUT = [
    ({"SLURM_STEP_NUM_TASKS": None}, [], "SLURM_STEP_NUM_TASKS is not set"),
    ({"SLURM_STEP_NODELIST": "n[1-"}, [], "SLURM_STEP_NODELIST='n[1-'"),
    ({"SLURM_STEP_TASKS_PER_NODE": "3,2"}, [], "adds up to 5 tasks but SLURM_STEP_NUM_TASKS=4"),
    ({"SLURM_PROCID": "abc"}, [], "SLURM_PROCID='abc'"),
    ({"SLURM_PROCID": "9"}, [], "SLURM_PROCID='9' is out of range"),
    ({"SLURM_DISTRIBUTION": "arbitrary"}, [], "'arbitrary' is not supported"),
    ({}, ["--strategy", "parameter-server", "--ps", "3"], "needs at least 5 tasks"),
    ({}, ["--port-base", "65535"], "above 65535"),
    ({}, ["--port-base", "70000"], "argument --port-base: '70000' is not a port"),
    ({}, ["--strategy", "mpi"], "argument --strategy: invalid choice: 'mpi'"),
    ({"TFSLURM_STRATEGY": "mpi"}, [], "TFSLURM_STRATEGY='mpi' is invalid: 'mpi' is not one of"),
    ({"TFSLURM_PORT_BASE": "x"}, [], "TFSLURM_PORT_BASE='x' is invalid"),
    ({"TFSLURM_GPUS_PER_TASK": "2", "CUDA_VISIBLE_DEVICES": "0"}, [], "host n1 has 1 GPUs"),
    ({}, ["--worker-restarts", "-1"], "argument --worker-restarts: '-1' is not a whole number"),
    ({"TFSLURM_WORKER_RESTARTS": "many"}, [], "TFSLURM_WORKER_RESTARTS='many' is invalid"),
    ({}, ["--end-barrier", "1h"], "argument --end-barrier: '1h' is not a whole number"),
    ({"TFSLURM_END_BARRIER": "soon"}, [], "TFSLURM_END_BARRIER='soon' is invalid"),
    (
        {},
        ["--network", "10.1.2.3"],
        "argument --network: '10.1.2.3' is one address, not a network: give the nodes' names",
    ),
    ({}, ["--network", "{host}_ib"], "'{host}_ib' does not make host names (node c1 would be"),
    (
        {"TFSLURM_NETWORK": "10.1.0.0/33"},
        [],
        "TFSLURM_NETWORK='10.1.0.0/33' is invalid: '10.1.0.0/33' is not a subnet",
    ),
]


@pytest.mark.parametrize(("overrides", "argv", "expected"), BAD_INPUT)
def test_bad_input_is_one_line_and_exit_2(capsys, overrides, argv, expected):
    env = {k: v for k, v in {**step_env(), **overrides}.items() if v is not None}
    code, out, err = run_main(capsys, ["--print-config", *argv], env)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("tfslurm-entry: error: ")
    assert expected in err


# Run mode, as real processes: the program runs with its rank's config, never on bad input.

SHOW_ENV = textwrap.dedent("""
    import json, os, pathlib, sys
    out = sys.argv[1].replace("RANK", os.environ.get("SLURM_PROCID", ""))
    pathlib.Path(out).write_text(json.dumps({
        "pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[2:],
        "TF_CONFIG": os.environ.get("TF_CONFIG"),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "TF_ENABLED_DEVICE_TYPES": os.environ.get("TF_ENABLED_DEVICE_TYPES"),
        "TMPDIR": os.environ.get("TMPDIR"),
        "TFSLURM_OTHERS_ENDED": os.environ.get("TFSLURM_OTHERS_ENDED"),
        "TFSLURM_END_BARRIER": os.environ.get("TFSLURM_END_BARRIER"),
        "PYTHONPATH": os.environ.get("PYTHONPATH"),
        "no_grpc_proxy": os.environ.get("no_grpc_proxy"),
        "exit_hooked": sys.exit.__qualname__.startswith("_recording")}))
    if os.environ.get("TMPDIR"):
        pathlib.Path(os.environ["TMPDIR"], "left-behind").write_text("x")
""")


@pytest.fixture
def show_env(tmp_path):
    program = tmp_path / "show_env.py"
    program.write_text(SHOW_ENV)
    return program, tmp_path / "seen.json"


def start(argv, env):
    env = {**env, "PYTHONPATH": str(REPO), "PATH": os.environ["PATH"]}
    return subprocess.Popen(
        [*ENTRY, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def launch(argv, env):
    proc = start(argv, env)
    out, err = proc.communicate(timeout=60)
    return proc, out, err


def test_run_mode_runs_each_ranks_program_with_its_tf_config(show_env, free_port, tmp_path):
    """A whole 2-task step on localhost: each entrypoint supervises its program as a child."""
    program, seen = show_env
    base = tmp_path / "node-tmp"
    base.mkdir()
    procs = []
    for rank in (0, 1):
        env = step_env(
            rank,
            "localhost",
            "2",
            CUDA_VISIBLE_DEVICES="2,3",
            TF_CONFIG='{"old": 1}',
            TMPDIR=str(base),
        )
        argv = ["--port-base", str(free_port), str(program), f"{seen}.RANK", "--lr", "3"]
        procs.append(start(argv, env))
    for rank, proc in enumerate(procs):
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        got = json.loads(Path(f"{seen}.{rank}").read_text())
        assert got["ppid"] == proc.pid
        assert got["argv"] == ["--lr", "3"]
        assert json.loads(got["TF_CONFIG"])["task"] == {"type": "worker", "index": rank}
        assert got["CUDA_VISIBLE_DEVICES"] == str(2 + rank)
        assert "warning: TF_CONFIG inherited from the submitting shell is replaced" in err
        addr = f"localhost:{free_port + rank}"
        assert f"tfslurm: rank {rank}/2 host localhost role worker index {rank} addr {addr}" in err
        # A private TMPDIR per task, under the node's, removed with what the program left in it.
        assert Path(got["TMPDIR"]).parent == base
        assert Path(got["TMPDIR"]).name.startswith(f"tfslurm-4242.0-rank{rank}-")
        others_ended = got["TFSLURM_OTHERS_ENDED"]
        assert others_ended == (f"{got['TMPDIR']}/others-ended" if rank == 0 else None)
        # The end-of-job barrier is arranged in the program's Python (program_end.py).
        assert got["TFSLURM_END_BARRIER"] == "3600" and got["exit_hooked"] is True
        assert got["PYTHONPATH"] == f"{AUTOLOAD_DIR}:{REPO}"
    assert list(base.iterdir()) == []


def test_with_network_the_tasks_connect_through_the_nodes_names_on_it(show_env, free_port):
    """--network '{host}.1' on node "127.0.0": Slurm's node name is no address here, its name
    on the network is (127.0.0.1). The check-in and the reach check connect there, and
    TF_CONFIG names it."""
    program, seen = show_env
    argv = ["--port-base", str(free_port), "--network", "{host}.1", str(program), f"{seen}.RANK"]
    env = {"SLURMD_NODENAME": "127.0.0"}
    procs = [start(argv, step_env(rank, "127.0.0", "2", **env)) for rank in (0, 1)]
    for rank, proc in enumerate(procs):
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        cluster = json.loads(json.loads(Path(f"{seen}.{rank}").read_text())["TF_CONFIG"])
        assert cluster["cluster"] == {"worker": [f"127.0.0.1:{free_port + r}" for r in (0, 1)]}
        assert f"host 127.0.0 role worker index {rank} addr 127.0.0.1:{free_port + rank}" in err


@pytest.mark.parametrize("network", ["lo", "127.0.0.0/8"])
def test_with_an_interface_or_a_subnet_the_tasks_exchange_their_addresses(
    show_env, free_port, network
):
    """Each task sends its node's address on the interface (or in the subnet) with its
    check-in; rank 0 hands them out; TF_CONFIG and the proxy exemption use them (the check-in
    itself goes to Slurm's name, localhost)."""
    program, seen = show_env
    argv = ["--port-base", str(free_port), "--network", network, str(program), f"{seen}.RANK"]
    env = {"https_proxy": "http://127.0.0.1:9"}
    procs = [start(argv, step_env(rank, "localhost", "2", **env)) for rank in (0, 1)]
    errs = [proc.communicate(timeout=60)[1] for proc in procs]
    for rank, proc in enumerate(procs):
        assert proc.returncode == 0, errs[rank]
        got = json.loads(Path(f"{seen}.{rank}").read_text())
        cluster = json.loads(got["TF_CONFIG"])
        assert cluster["cluster"] == {"worker": [f"127.0.0.1:{free_port + r}" for r in (0, 1)]}
        assert got["no_grpc_proxy"] == "127.0.0.1"
    assert f"tfslurm: addresses on --network {network}: localhost 127.0.0.1\n" in errs[0]


def test_end_barrier_0_leaves_the_programs_exit_alone(show_env, free_port):
    program, seen = show_env
    argv = ["--port-base", str(free_port), "--end-barrier", "0", str(program), f"{seen}.RANK"]
    procs = [start(argv, step_env(rank, "localhost", "2")) for rank in (0, 1)]
    for rank, proc in enumerate(procs):
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        got = json.loads(Path(f"{seen}.{rank}").read_text())
        assert got["TFSLURM_END_BARRIER"] is None and got["exit_hooked"] is False


def test_a_variables_old_name_still_works_and_rank_0_says_the_new_one(show_env, free_port):
    program, seen = show_env
    argv = ["--port-base", str(free_port), str(program), f"{seen}.RANK"]
    env = {"TFSLURM_END_BARRIER_S": "0"}  # its name until the options were defined once
    procs = [start(argv, step_env(rank, "localhost", "2", **env)) for rank in (0, 1)]
    errs = [proc.communicate(timeout=60)[1] for proc in procs]
    for rank, proc in enumerate(procs):
        assert proc.returncode == 0, errs[rank]
        assert json.loads(Path(f"{seen}.{rank}").read_text())["exit_hooked"] is False  # 0: off
    said = "tfslurm: TFSLURM_END_BARRIER_S is now TFSLURM_END_BARRIER; it still works for now"
    assert errs[0].count(said) == 1 and "TFSLURM_END_BARRIER_S" not in errs[1]


def test_outside_slurm_the_program_just_runs(show_env):
    program, seen = show_env
    proc, _, err = launch([str(program), str(seen)], {"TF_CONFIG": '{"mine": 1}'})
    assert proc.returncode == 0, err
    got = json.loads(seen.read_text())
    assert got["pid"] == proc.pid  # exec'ed: nothing to supervise
    assert got["TF_CONFIG"] == '{"mine": 1}' and got["CUDA_VISIBLE_DEVICES"] is None
    assert got["TMPDIR"] is None  # nobody would be left to remove a private one


def test_one_task_step_drops_an_inherited_tf_config(show_env):
    program, seen = show_env
    proc, _, err = launch([str(program), str(seen)], step_env(0, "n1", "1", TF_CONFIG="{}"))
    assert proc.returncode == 0, err
    assert json.loads(seen.read_text())["TF_CONFIG"] is None


@pytest.mark.parametrize(
    ("overrides", "argv_prefix", "expected"),
    [
        ({"SLURM_STEP_NODELIST": "n[1-2"}, [], "not a valid hostlist"),
        ({}, ["--strategy", "parameter-server"], "needs at least 3 tasks"),
        (
            {"TMPDIR": "/nonexistent/tmp"},
            [],
            "cannot create a temporary directory in "
            "/nonexistent/tmp (TMPDIR) on host n1: No such file or directory; set TMPDIR to",
        ),
        (
            # TEST-NET-1 (RFC 5737): numeric, so no name lookup leaves this machine
            {"SLURM_STEP_NODELIST": "192.0.2", "SLURMD_NODENAME": "192.0.2"},
            ["--network", "{host}.1"],
            "192.0.2.1, the name of 192.0.2 on the network --network '{host}.1' picks, resolves "
            "to 192.0.2.1: not an address of 192.0.2; check --network '{host}.1' against",
        ),
        (
            # a DNS label over 63 characters: refused locally, no lookup leaves this machine
            {"SLURM_STEP_NODELIST": "n" * 70, "SLURMD_NODENAME": "n" * 70},
            ["--network", "{host}.ib"],
            f"{'n' * 70}.ib, the name of {'n' * 70} on the network --network '{{host}}.ib' "
            f"picks, does not resolve on {'n' * 70} (",
        ),
        (
            {},
            ["--network", "ib9"],
            "host n1 has no network interface 'ib9' (--network); its interfaces with an IPv4 "
            "address: lo 127.0.0.1",
        ),
        (
            # TEST-NET-2 (RFC 5737): no machine has an address there
            {},
            ["--network", "198.51.100.0/24"],
            "no address of host n1 is in 198.51.100.0/24 (--network); its interfaces with an "
            "IPv4 address: lo 127.0.0.1",
        ),
        (
            {"TFSLURM_RESULT_FILE": "/nonexistent/runs/step-result"},
            [],
            "cannot write the step's result to /nonexistent/runs/step-result (--result-file, "
            "TFSLURM_RESULT_FILE) on host n1: /nonexistent/runs is not a writable directory",
        ),
    ],
)
def test_bad_input_never_starts_the_program(show_env, busy_port, overrides, argv_prefix, expected):
    program, seen = show_env
    argv = [a.replace("PORT", str(busy_port)) for a in argv_prefix]
    env = {**step_env(0, "n1", "2"), **overrides}
    proc, _, err = launch([*argv, str(program), str(seen)], env)
    assert proc.returncode == 2
    assert expected in err and "Traceback" not in err
    assert not seen.exists()


def test_a_busy_port_is_transient_names_port_host_and_fix(busy_port, show_env):
    program, seen = show_env
    proc, _, err = launch(
        ["--port-base", str(busy_port), str(program), str(seen)], step_env(0, "n1", "2")
    )
    assert proc.returncode == 75 and not seen.exists()
    assert (
        f"port {busy_port} on host n1 (rank 0, n1:{busy_port}, --port-base {busy_port}) is "
        "taken" in err
    )
    assert "transient (exit 75); requeue or resubmit the job" in err
    assert "--port-base (TFSLURM_PORT_BASE) to a free range of 3 ports" in err
    assert "Traceback" not in err


def test_a_port_claimed_by_another_kit_task_on_the_node_is_taken(free_port, show_env):
    """Another step's task holds the port's claim before its TensorFlow listens on it."""
    program, seen = show_env
    with socket.socket(socket.AF_UNIX) as claim:
        claim.bind(f"\0tfslurm-port-{free_port + 1}")
        # --chief-timeout 2: no rank 0 here to hear why; the task tries to tell it that long.
        proc, _, err = launch(
            ["--port-base", str(free_port), "--chief-timeout", "2", str(program), str(seen)],
            step_env(1, "localhost", "2"),
        )
    assert proc.returncode == 75 and not seen.exists()
    assert f"localhost:{free_port + 1}" in err
    assert "is taken: another tfslurm-entry task on this node claimed it" in err


def test_rank_0_that_cannot_start_for_a_busy_port_leaves_an_interrupted_verdict(
    busy_port, show_env, tmp_path
):
    program, seen = show_env
    result = tmp_path / "step-result"
    env = step_env(0, "n1", "2", TFSLURM_RESULT_FILE=str(result))
    proc, _, _ = launch(["--port-base", str(busy_port), str(program), str(seen)], env)
    assert proc.returncode == 75
    assert result.read_text().startswith(
        f"interrupted: rank 0 on n1 could not start: port {busy_port}"
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["no-such-program-x"], "program 'no-such-program-x' not found on PATH"),
        (["missing.py"], "program 'missing.py' not found"),
        ([], "no PROGRAM given"),
    ],
)
def test_program_problems(argv, expected, free_port):
    proc, _, err = launch(["--port-base", str(free_port), *argv], step_env(0, "n1", "2"))
    assert proc.returncode == 2 and expected in err


def test_a_program_inside_apptainer_that_is_not_there_names_the_bind_fix(free_port, tmp_path):
    """Apptainer binds $HOME, /tmp and the working directory only: a script on /data/project
    run from /data/project/run1 exists on the node but not in the container."""
    (tmp_path / "run1").mkdir()
    env = {**step_env(0, "n1", "2"), "APPTAINER_CONTAINER": "/data/tf-slurm.sif"}
    argv = ["--port-base", str(free_port), "/data/project/x.py"]
    proc = subprocess.run(
        [*ENTRY, *argv],
        cwd=tmp_path / "run1",
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(REPO), "PATH": os.environ["PATH"]},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        f"program '/data/project/x.py' not found inside the container /data/tf-slurm.sif "
        f"(working directory {tmp_path / 'run1'})"
    ) in proc.stderr
    assert "`apptainer run -B /data ...`, export APPTAINER_BIND=/data" in proc.stderr
    assert "bind path = /data" in proc.stderr


@pytest.mark.parametrize(
    ("program", "cwd", "top"),
    [
        ("../x.py", "/scratch/u/run1", "/scratch"),
        ("x.py", "/work/p", "/work"),
        ("/gpfs/a/b/c.py", "/home/u", "/gpfs"),
    ],
)
def test_the_bind_hint_names_the_top_directory_of_the_path(program, cwd, top):
    err = missing_program(program, cwd, {"SINGULARITY_CONTAINER": "/opt/tf.sif"})
    assert f"-B {top} ...`" in err.hint and "/opt/tf.sif" in err.what


def test_outside_a_container_a_missing_program_gets_no_bind_hint():
    err = missing_program("/data/x.py", "/data/run1", {})
    assert "apptainer" not in str(err).lower()
    assert "exists on every node" in err.hint


def test_the_entrypoints_output_reaches_a_pipe_though_it_skips_the_teardown():
    """The entrypoint ends with os._exit (no interpreter teardown: __main__.py): what it
    printed is still in stdout's buffer then (8 KiB into a pipe), and is flushed first; the
    status is the CLI's."""
    proc, out, err = launch(["--print-config"], step_env(5, "n[1-32]", "2(x32)"))
    assert proc.returncode == 0, err
    config = json.loads(out)
    assert config["rank"] == 5 and len(config["TF_CONFIG"]["cluster"]["worker"]) == 64


def test_tf_config_too_big_for_one_environment_variable(free_port):
    env = step_env(0, "n[00001-16384]", "2(x16384)")
    proc, _, err = launch(["--port-base", str(free_port), "true"], env)
    assert proc.returncode == 2
    assert "over Linux's 131072-byte limit for one environment variable" in err


def test_resolution_does_not_import_tensorflow():
    code = (
        "import sys, io, contextlib; from tfslurm_entry.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--explain', '--strategy', 'parameter-server'], ENV)\n"
        "print('tensorflow' in sys.modules)"
    )
    env = step_env(1, "n[1-4]", "2(x4)")
    result = subprocess.run(
        [sys.executable, "-c", code.replace("ENV", repr(env))],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.stdout.strip() == "False"


def test_help_lists_every_option_and_its_variable():
    result = subprocess.run(
        [*ENTRY, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    for flag, var in [
        ("--strategy", "TFSLURM_STRATEGY"),
        ("--ps", "TFSLURM_NUM_PS"),
        ("--port-base", "TFSLURM_PORT_BASE"),
        ("--gpus-per-task", "TFSLURM_GPUS_PER_TASK"),
        ("--chief-timeout", "TFSLURM_CHIEF_TIMEOUT"),
        ("--worker-restarts", "TFSLURM_WORKER_RESTARTS"),
        ("--result-file", "TFSLURM_RESULT_FILE"),
        ("--end-barrier", "TFSLURM_END_BARRIER"),
        ("--network", "TFSLURM_NETWORK"),
        ("--require-gpu", "TFSLURM_REQUIRE_GPU"),
    ]:
        assert flag in result.stdout and var in result.stdout


@pytest.fixture
def busy_port():
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def free_port():
    """The first of three consecutive free ports: two tasks and rank 0's control port."""
    return free_port_base(3)


@pytest.mark.parametrize(
    ("argv", "env", "devices"),
    [
        (["--gpus-per-task", "0"], {}, ["CPU", "CPU"]),  # GPUs hidden: no GPU device at all
        ([], {}, [None, None]),  # each task has a GPU: TensorFlow's own list
        (["--gpus-per-task", "0"], {"TF_ENABLED_DEVICE_TYPES": "CPU,GPU"}, ["CPU,GPU"] * 2),
    ],
)
def test_a_task_given_no_gpu_gets_no_gpu_device_from_tensorflow(
    show_env, free_port, argv, env, devices
):
    """TensorFlow's CUDA build asks the driver for GPUs even when CUDA_VISIBLE_DEVICES is
    empty (an E-level cuInit line): a task the kit gives no GPU gets TF_ENABLED_DEVICE_TYPES=CPU,
    a task given GPUs nothing, and a value the user set is kept."""
    program, seen = show_env
    argv = ["--port-base", str(free_port), *argv, str(program), f"{seen}.RANK"]
    gpus = {"CUDA_VISIBLE_DEVICES": "0,1", **env}
    procs = [start(argv, step_env(rank, "localhost", "2", **gpus)) for rank in (0, 1)]
    for rank, proc in enumerate(procs):
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        got = json.loads(Path(f"{seen}.{rank}").read_text())
        assert got["TF_ENABLED_DEVICE_TYPES"] == devices[rank], got
