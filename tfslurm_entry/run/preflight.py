"""Before anything starts: every check that can fail, the role's environment, a private TMPDIR.

A task that cannot run says so in one line and exits 2 here, before it starts a program or
listens on a port, so that no task of the step is left half-started waiting for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError
from ..resolve import Plan, Task
from ..resolve.gpus import uses_gpus
from ..resolve.roles import port_of
from . import control, cuda
from .log import log

# Linux refuses (E2BIG) an execve whose single "NAME=value" string is this long or longer.
MAX_ENV_STRING = 128 * 1024


class Prepared(NamedTuple):
    argv: list[str]
    env: dict[str, str]
    """the program's environment"""
    gpu_line: str | None
    """what the task says about its GPUs, if anything (check_gpus)"""


def prepare(
    plan: Plan,
    program: str,
    args: Sequence[str],
    environ: Mapping[str, str],
    result_file: str | None,
    require_gpu: bool,
) -> Prepared:
    """Every check, in the order a user should meet them; the program's argv and environment."""
    argv = program_argv(program, args, environ)
    check_port_free(plan)
    env = child_env(plan, environ)
    check_open_files(plan)
    check_result_file(plan, result_file)
    return Prepared(argv, env, check_gpus(plan, env, require_gpu))


def check_gpus(plan: Plan, environ: Mapping[str, str], require: bool) -> str | None:
    """The line this task logs about its GPUs, if any (run/cuda.py). With require
    (--require-gpu), a task whose role computes and that would run on the CPU stops here."""
    me = plan.me
    wants = require and (me is None or uses_gpus(me.task_type, plan.strategy))
    line = cuda.check(me.gpus if me else None, environ, wants)
    if line and wants:
        who = f"rank {me.rank} on {me.host}: " if me else ""
        raise ConfigError(
            f"{who}{line}",
            "a GPU job must not train on the CPU (--require-gpu, TFSLURM_REQUIRE_GPU)",
        )
    return line


def child_env(plan: Plan, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the role runs with: TF_CONFIG and CUDA_VISIBLE_DEVICES from the plan."""
    env = dict(environ)
    in_slurm = plan.rank is not None
    if in_slurm and "TF_CONFIG" in env:
        log("warning: TF_CONFIG inherited from the submitting shell is replaced by the step's own")
        del env["TF_CONFIG"]
    tf_config = plan.tf_config
    if tf_config is not None:
        text = json.dumps(tf_config, separators=(",", ":"))
        if len("TF_CONFIG=") + len(text) >= MAX_ENV_STRING:
            raise ConfigError(
                f"TF_CONFIG for {len(plan.tasks)} tasks is {len(text)} bytes, over Linux's "
                f"{MAX_ENV_STRING}-byte limit for one environment variable",
                "run fewer, larger tasks (more GPUs or threads per task)",
            )
        env["TF_CONFIG"] = text
    if plan.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = plan.cuda_visible_devices
    library_path = cuda.library_path(env)
    if library_path is not None:
        env["LD_LIBRARY_PATH"] = library_path
    return env


def program_argv(
    program: str, args: Sequence[str], environ: Mapping[str, str] = os.environ
) -> list[str]:
    """argv for the user's program; a .py file runs with this Python."""
    if program.endswith(".py"):
        if not os.path.isfile(program):
            raise missing_program(program, os.getcwd(), environ)
        return [sys.executable, program, *args]
    path = shutil.which(program)
    if path is None:
        raise ConfigError(
            f"program {program!r} not found on PATH", "give its full path or a .py file"
        )
    return [path, *args]


def missing_program(program: str, cwd: str, environ: Mapping[str, str]) -> ConfigError:
    """A program file that is not there. Inside Apptainer the likeliest cause is a path that
    exists on the node but is not bound into the container: by default Apptainer binds only
    $HOME, /tmp and the working directory, not a cluster's /data or /project."""
    where = f"(working directory {cwd})"
    image = environ.get("APPTAINER_CONTAINER") or environ.get("SINGULARITY_CONTAINER")
    if not image:
        return ConfigError(
            f"program {program!r} not found {where}",
            "give a path that exists on every node, e.g. on the shared file system",
        )
    top = "/" + Path(os.path.normpath(os.path.join(cwd, program))).parts[1]
    return ConfigError(
        f"program {program!r} not found inside the container {image} {where}",
        f"if it exists on the node, its directory is not bound into the container (Apptainer "
        f"binds only $HOME, /tmp and the working directory by default): bind it with "
        f"`apptainer run -B {top} ...`, export APPTAINER_BIND={top}, or ask for a "
        f"`bind path = {top}` line in the site's apptainer.conf",
    )


def check_port_free(plan: Plan) -> None:
    """Fail before anything starts if another process already listens on this task's port
    (or, for rank 0, on the step's control port)."""
    me = plan.me
    if me is None:
        return
    _check_port(plan, me, port_of(me.address))
    if me.rank == 0 and plan.control_address:
        _check_port(plan, me, port_of(plan.control_address))


def check_open_files(plan: Plan) -> None:
    """Rank 0 holds a control connection to every other task: make room for them before
    anything starts (control.raise_open_files_limit says why and when it cannot)."""
    me = plan.me
    if me is not None and me.rank == 0 and len(plan.tasks) > 1:
        control.raise_open_files_limit(len(plan.tasks) - 1, me.host)


def check_result_file(plan: Plan, path: str | None) -> None:
    """Rank 0 writes the step's verdict when the step ends: find out now, not then, that it
    cannot (the batch script would read no verdict after a whole training run)."""
    me = plan.me
    if path is None or me is None or me.rank != 0:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(
            f"cannot write the step's result to {path} (--result-file, TFSLURM_RESULT_FILE) on "
            f"host {me.host}: {directory} is not a writable directory",
            "create it first, or give a path on the shared file system the job can write",
        )


def _check_port(plan: Plan, me: Task, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError as err:
            raise ConfigError(
                f"port {port} on host {me.host} (rank {me.rank}, {me.host}:{port}) is not free: "
                f"{err.strerror}",
                f"another job or step on this node uses it; set --port-base (TFSLURM_PORT_BASE)"
                f" to a free range of {max(t.local_index for t in plan.tasks) + 2} ports",
            ) from None


@contextlib.contextmanager
def task_tmpdir(me: Task, environ: Mapping[str, str]) -> Iterator[Path]:
    """A private temporary directory for this task's role, removed when the role ends.

    The program gets it as TMPDIR, so what TensorFlow and the program leave in the temporary
    directory (autograph's generated files, scratch checkpoints of non-chief workers) goes
    with it, even when the program is killed. Only an entrypoint killed with it leaves it
    behind: Slurm's job_container/tmpfs plugin (a private /tmp per job) covers that case.
    """
    base = environ.get("TMPDIR") or "/tmp"
    job, step = environ.get("SLURM_JOB_ID", "0"), environ.get("SLURM_STEP_ID", "0")
    try:
        path = Path(tempfile.mkdtemp(prefix=f"tfslurm-{job}.{step}-rank{me.rank}-", dir=base))
    except OSError as err:
        raise ConfigError(
            f"cannot create a temporary directory in {base} (TMPDIR) on host {me.host}: "
            f"{err.strerror}",
            "set TMPDIR to a writable directory on the node (inside the container too)",
        ) from None
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
