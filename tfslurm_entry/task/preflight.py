"""Before anything starts: every check that can fail, the role's environment, the task's ports,
a private TMPDIR.

A task that cannot run says so in one line and exits here (2 for bad input, 75 for a port taken
right now), before it starts a program, so that no task of the step is left half-started.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ..errors import ConfigError
from ..resolve import Plan
from ..resolve.gpus import uses_gpus
from . import cuda, mount, workdir
from .addresses import check_network_name
from .argv import program_argv
from .environment import child_env, distributed_env
from .ephemeral import check_ephemeral_range
from .files import check_open_files, check_result_file


class Prepared(NamedTuple):
    argv: list[str]
    env: dict[str, str]
    """the program's environment"""
    notes: tuple[str, ...]
    """what the task says before it starts: rank 0 on the proxy and Keras, any task on its
    GPUs (check_gpus)"""


def prepare(
    plan: Plan,
    program: str,
    args: Sequence[str],
    environ: Mapping[str, str],
    result_file: str | None,
    require_gpu: bool,
) -> Prepared:
    """Every check, in the order a user should meet them; the program's argv and environment."""
    moved = workdir.enter_step_directory(environ)
    argv = program_argv(program, args, environ)
    check_network_name(plan)
    check_ephemeral_range(plan)
    env = child_env(plan, environ)
    extra, notes = distributed_env(plan, environ, argv)
    env.update(extra)
    check_open_files(plan)
    check_result_file(plan, result_file)
    gpu_line = check_gpus(plan, env, require_gpu)
    notes = (*notes, gpu_line) if gpu_line else tuple(notes)
    if plan.rank == 0 and (exposed := mount.note()):
        notes = (*notes, exposed)
    if plan.rank == 0 and moved:
        notes = (moved, *notes)
    return Prepared(argv, env, notes)


def check_gpus(plan: Plan, environ: Mapping[str, str], require: bool) -> str | None:
    """The line this task logs about its GPUs, if any (task/cuda.py). With require
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
