"""Stage 5: export the plan and start the role. The only stage with side effects."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from . import control, gpus, supervise
from .errors import ConfigError
from .resolve import Plan, Task
from .roles import port_of

# Linux refuses (E2BIG) an execve whose single "NAME=value" string is this long or longer.
MAX_ENV_STRING = 128 * 1024


def log(message: str) -> None:
    """One line on stderr, prefixed so it stands out among the program's own output."""
    print(f"tfslurm: {message}", file=sys.stderr, flush=True)


def task_line(plan: Plan) -> str:
    """The line each task logs before it starts: who it is, where, and what it may use."""
    me = plan.me
    if me is None:
        return "no TF_CONFIG (not a multi-task Slurm step); running the program as is"
    gpus = "untouched" if me.gpus is None else (me.gpus or "none")
    group = "" if me.component is None else f" het group {me.component}"
    return (
        f"rank {me.rank}/{len(plan.tasks)} host {me.host}{group} role {me.task_type} "
        f"index {me.index} addr {me.address} gpus {gpus}"
    )


def driver_found() -> bool:
    """Whether the NVIDIA driver's library loads here (it is not initialised: no cuInit)."""
    try:
        ctypes.CDLL(gpus.DRIVER_LIBRARY)
    except OSError:
        return False
    return True


def log_cpu_fallback(environ: Mapping[str, str]) -> None:
    """In the GPU image without a driver, say that TensorFlow will run on the CPU, and why."""
    variant = environ.get(gpus.IMAGE_VARIANT_VAR)
    note = gpus.cpu_fallback_note(variant, variant == "gpu" and driver_found())
    if note:
        log(note)


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
    return env


def program_argv(program: str, args: Sequence[str]) -> list[str]:
    """argv for the user's program; a .py file runs with this Python."""
    if program.endswith(".py"):
        if not os.path.isfile(program):
            raise ConfigError(
                f"program {program!r} not found (working directory {os.getcwd()})",
                "give a path that exists on every node, e.g. on the shared file system",
            )
        return [sys.executable, program, *args]
    path = shutil.which(program)
    if path is None:
        raise ConfigError(
            f"program {program!r} not found on PATH", "give its full path or a .py file"
        )
    return [path, *args]


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


def exec_program(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Replace this process with the program, so Slurm's signals reach it directly."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], list(argv), dict(env))


# A ps/worker server with a single inter-op thread deadlocks: a worker running a scheduled
# function blocks that thread waiting on the ps, and the chief waits forever in
# ClusterCoordinator.join(). TensorFlow sizes the pool from the CPU affinity, so a step with
# --cpus-per-task=1 hits this; servers always get at least this many.
MIN_SERVER_INTEROP_THREADS = 2


def server_env(env: Mapping[str, str], cpus: int) -> dict[str, str]:
    """The server's environment: at least MIN_SERVER_INTEROP_THREADS inter-op threads."""
    env = dict(env)
    asked = env.get("TF_NUM_INTEROP_THREADS", "")
    threads = int(asked) if asked.isdigit() and int(asked) > 0 else cpus
    if threads < MIN_SERVER_INTEROP_THREADS:
        env["TF_NUM_INTEROP_THREADS"] = str(MIN_SERVER_INTEROP_THREADS)
    return env


def server_argv(me: Task) -> list[str]:
    """The command of this task's TensorFlow server (tfslurm_entry.server, a child process)."""
    return [sys.executable, "-m", "tfslurm_entry.server", str(me.rank), str(os.getpid())]


def run_server(
    me: Task, env: Mapping[str, str], control_address: str, chief_timeout: float, restarts: int
) -> int:
    """Serve this ps/worker task until the chief's program ends (parameter-server strategy).

    The server runs as a child, so a worker server that dies is restarted in place, at most
    `restarts` times; a ps holds variables no restart brings back, so it is never restarted.
    Returns the task's exit status.
    """
    if importlib.util.find_spec("tensorflow") is None:
        raise ConfigError(
            f"the {me.task_type} role runs a TensorFlow server but TensorFlow is not installed",
            "install tfslurm-entry[tf] or run inside tf-slurm.sif",
        )
    asked = env.get("TF_NUM_INTEROP_THREADS")
    env = server_env(env, len(os.sched_getaffinity(0)))
    if env.get("TF_NUM_INTEROP_THREADS") != asked:
        log(
            f"rank {me.rank} {me.task_type} server uses {MIN_SERVER_INTEROP_THREADS} "
            "inter-op threads (fewer deadlock the parameter-server coordinator)"
        )
    return supervise.run_member(
        me.rank,
        me.host,
        control_address,
        chief_timeout,
        log,
        server_argv(me),
        env,
        server=f"{me.task_type} {me.index} server",
        restarts=restarts if me.task_type == "worker" else 0,
    )
