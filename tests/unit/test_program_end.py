"""inprogram/program_end.py without TensorFlow: how a program's Python is reached, what counts
as a failing end, and the leader's wait for the other tasks' ends.

The barrier itself needs real TensorFlow processes: tests/integration (test_end_of_job_*) and
tests/e2e/test_user_programs.py.
"""

import os
import shutil
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from bench.repo import ROOT
from tfslurm_entry.inprogram import program_end
from tfslurm_entry.inprogram.program_end import (
    AUTOLOAD_DIR,
    END_BARRIER_VAR,
    install,
    program_env,
    wait_for_others,
)

# Prints, at the interpreter's exit, whether program_end takes the end for a failure. Its
# atexit handler is registered after program_end's, so it runs before it (last in, first out).
REPORT_AT_EXIT = (
    "import atexit, sys\n"
    "from tfslurm_entry.inprogram import program_end\n"
    "atexit.register(lambda: print('FAILING', program_end.failing(), flush=True))\n"
)


def run_program(
    code: str, environ: dict[str, str] | None = None, python: str = sys.executable, cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    """Run ``code`` as a program started by tfslurm-entry in a multi-worker step."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFSLURM_")}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's tfslurm_entry, whatever is installed
    env.update(environ or {})
    env.update(program_env(30, env))
    return subprocess.run(
        [python, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_importing_the_helpers_does_not_import_tensorflow():
    code = "import sys, tfslurm_entry.tf\nprint('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_the_program_env_puts_the_autoload_directory_first_and_keeps_the_users_path():
    env = program_env(90, {"PYTHONPATH": "/mine:/more"})
    assert env == {"PYTHONPATH": f"{AUTOLOAD_DIR}:/mine:/more", END_BARRIER_VAR: "90"}
    assert program_env(5, {})["PYTHONPATH"] == str(AUTOLOAD_DIR)
    assert (AUTOLOAD_DIR / "sitecustomize.py").is_file()


@pytest.mark.parametrize("value", [None, "", "0", "soon"])
def test_nothing_is_arranged_without_a_positive_timeout(value):
    environ = {} if value is None else {END_BARRIER_VAR: value}
    assert install(environ) is False


@pytest.mark.parametrize(
    ("ending", "fails"),
    [
        ("pass", False),
        ("sys.exit()", False),
        ("sys.exit(0)", False),
        ("sys.exit(3)", True),
        ("sys.exit('bad input')", True),
        ("exit(2)", True),
        ("quit(0)", False),
        ("raise ValueError('boom')", True),
        ("raise KeyboardInterrupt", True),
    ],
)
def test_a_failing_end_is_told_from_a_normal_one(ending, fails):
    """An uncaught exception or a non-zero sys.exit must never wait at the barrier."""
    result = run_program(REPORT_AT_EXIT + ending + "\n")
    assert f"FAILING {fails}" in result.stdout, result.stderr


def test_the_hook_leaves_sys_path_as_it_was_and_runs_the_sitecustomize_it_shadows(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.USERS_OWN = 1\n")
    code = (
        "import sys, builtins, atexit\n"
        "print('OWN', getattr(builtins, 'USERS_OWN', 0))\n"
        "print('AUTOLOAD_ON_PATH', any('autoload' in p for p in sys.path))\n"
        "print('HOOKED', sys.exit.__qualname__.startswith('_recording'))\n"
    )
    result = run_program(code, {"PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert result.returncode == 0, result.stderr
    assert "OWN 1" in result.stdout, result.stdout
    assert "AUTOLOAD_ON_PATH False" in result.stdout, result.stdout
    assert "HOOKED True" in result.stdout, result.stdout


def test_a_python_without_the_kit_loads_the_hook_from_its_file(tmp_path):
    """`tfslurm-entry /usr/bin/python3 train.py`: that Python cannot import tfslurm_entry."""
    system = shutil.which("python3", path="/usr/bin")
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = [system, "-c", "import tfslurm_entry"]
    if system is None or subprocess.run(probe, env=bare, cwd=tmp_path).returncode == 0:
        pytest.skip("needs a python3 in /usr/bin without tfslurm_entry")
    code = (
        "import sys\nprint('HOOKED', sys.exit.__qualname__.startswith('_recording'))\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith('_tfslurm_')))\n"
        "sys.exit(4)\n"
    )
    result = run_program(code, {"PYTHONPATH": ""}, python=system, cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    assert "HOOKED True" in result.stdout, result.stderr
    loaded = "['_tfslurm_after_import', '_tfslurm_keras_preemption', '_tfslurm_program_end']"
    assert f"LOADED {loaded}" in result.stdout and "Error" not in result.stderr, result


def test_a_program_that_never_imports_tensorflow_ends_at_once():
    start = time.monotonic()
    result = run_program("print('done')\n")
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr
    assert result.stderr == ""
    assert time.monotonic() - start < 10


def test_sys_exit_still_exits_with_its_status():
    assert run_program("import sys\nsys.exit(7)\n").returncode == 7
    assert "bad input" in run_program("import sys\nsys.exit('bad input')\n").stderr


def test_the_leader_returns_as_soon_as_the_entrypoint_says_the_others_ended(tmp_path):
    marker = tmp_path / "others-ended"
    threading.Timer(0.5, marker.touch).start()
    start = time.monotonic()
    assert wait_for_others(str(marker), linger=10) is True
    assert 0.4 <= time.monotonic() - start < 3


def test_the_leader_gives_up_after_linger_and_says_so(tmp_path, capsys):
    start = time.monotonic()
    assert wait_for_others(str(tmp_path / "never"), linger=0.3) is False
    assert 0.3 <= time.monotonic() - start < 2
    assert "other tasks still running 0.3 s after the end-of-job barrier" in capsys.readouterr().err


def test_outside_tfslurm_entry_there_is_nothing_to_wait_for():
    start = time.monotonic()
    assert wait_for_others(None, linger=30) is False
    assert time.monotonic() - start < 1


@pytest.mark.parametrize(
    ("status", "noticed", "ends"),
    [
        (42, True, "barrier"),  # TensorFlow's handler saved on the notice: together, leader last
        (42, False, "barrier"),  # a task that saved (only rank 0's program gets the notice file)
        (143, True, "leader waits"),  # stopped by Slurm without saving: no barrier
        (0, False, "barrier"),
        (3, False, None),  # a failing program does not wait
    ],
)
def test_how_a_program_ends_decides_whether_it_waits_at_the_barrier(
    monkeypatch, tmp_path, status, noticed, ends
):
    notice = tmp_path / "notice"
    if noticed:
        notice.touch()
    said = []
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))
    monkeypatch.setattr(program_end, "_exit_status", status)
    monkeypatch.setattr(program_end, "end_here", lambda *args: said.append("barrier"))
    monkeypatch.setattr(program_end, "_leader", lambda task: True)
    monkeypatch.setattr(program_end, "wait_for_others", lambda *a: said.append("leader waits"))
    program_end._at_exit(60, "/job:worker/replica:0/task:0", None, str(notice))
    assert said == ([ends] if ends else [])
