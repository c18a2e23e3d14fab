"""Stage 1: read the Slurm job-step environment into a typed, validated record.

Only the step variables (``SLURM_STEP_*``) are trusted: inside ``srun`` they describe the step,
while the job-level ones describe the whole allocation, which may be larger.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import hostlist

from .errors import ConfigError, bad_var

# Host names end up in "host:port" strings, so anything outside RFC 1123 characters is refused.
_HOSTNAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
_REPEAT = re.compile(r"\(x(\d+)\)")
_SRUN_HINT = (
    "run tfslurm-entry inside a job step started by srun, "
    "e.g. `srun apptainer run tf-slurm.sif train.py`"
)


@dataclass(frozen=True)
class StepEnv:
    """The facts about one task of a Slurm job step that resolution needs."""

    procid: int
    num_tasks: int
    hosts: tuple[str, ...]
    """Step nodelist in Slurm's own order; a host listed twice stays twice."""
    tasks_per_host: tuple[int, ...]
    distribution: str
    """Node-level part of SLURM_DISTRIBUTION ("" when unset)."""
    plane_size: int | None = None
    local_id: int | None = None
    node_name: str | None = None
    job_id: int | None = None
    step_id: int | None = None
    gpus_bound_by_slurm: bool = False
    """Slurm already gave each task its own GPUs (gpus_bound_per_task)."""
    cuda_visible_devices: str | None = None


_GPU_BIND = re.compile(r"gres/gpu:([^+]*)")


def gpus_bound_per_task(environ: Mapping[str, str]) -> bool:
    """Whether Slurm bound GPUs to each task itself, so that a task's CUDA_VISIBLE_DEVICES is
    its own share and not the node's to split.

    Slurm 21.08 and later export the binding as SLURM_TRES_BIND (srun --gpu-bind=single:1 is
    `gres/gpu:single:1`; --gpus-per-task=N implies `gres/gpu:per_task:N`; --gpu-bind=none is
    `gres/gpu:none`); SLURM_GPUS_PER_TASK is not set in a task by srun --gpus-per-task there
    (checked on Slurm 24.11). Older Slurm only sets SLURM_GPUS_PER_TASK.
    """
    bind = environ.get("SLURM_TRES_BIND")
    if bind is None:
        return bool(environ.get("SLURM_GPUS_PER_TASK"))
    found = _GPU_BIND.search(bind)
    spec = [part for part in (found.group(1).split(",") if found else []) if part != "verbose"]
    return bool(spec) and spec[0] != "none"


def read_step_env(environ: Mapping[str, str]) -> StepEnv | None:
    """Parse the step environment; None outside Slurm (no SLURM_PROCID)."""
    if "SLURM_PROCID" not in environ:
        return None
    procid = _int(environ, "SLURM_PROCID", required=True)
    num_tasks = _int(environ, "SLURM_STEP_NUM_TASKS", required=True)
    hosts = _hosts(environ)
    counts = _tasks_per_node(environ)
    _check_counts(environ, procid, num_tasks, hosts, counts)
    return StepEnv(
        procid=procid,
        num_tasks=num_tasks,
        hosts=hosts,
        tasks_per_host=counts,
        distribution=node_distribution(environ.get("SLURM_DISTRIBUTION", "")),
        plane_size=_int(environ, "SLURM_DIST_PLANESIZE", minimum=1),
        local_id=_int(environ, "SLURM_LOCALID"),
        node_name=environ.get("SLURMD_NODENAME") or None,
        job_id=_int(environ, "SLURM_JOB_ID"),
        step_id=_int(environ, "SLURM_STEP_ID"),
        gpus_bound_by_slurm=gpus_bound_per_task(environ),
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
    )


def node_distribution(value: str) -> str:
    """The node-level method of SLURM_DISTRIBUTION: text before the first ':' or ','."""
    return re.split(r"[:,]", value, maxsplit=1)[0].strip()


def _int(
    environ: Mapping[str, str], name: str, *, required: bool = False, minimum: int = 0
) -> int | None:
    value = environ.get(name)
    if value is None or value == "":
        if required:
            raise ConfigError(f"{name} is not set", _SRUN_HINT)
        return None
    if not value.isascii() or not value.isdigit() or int(value) < minimum:
        raise bad_var(
            name, value, f"is not an integer >= {minimum}", "unset it or let Slurm set it"
        )
    return int(value)


def _hosts(environ: Mapping[str, str]) -> tuple[str, ...]:
    name = "SLURM_STEP_NODELIST"
    value = environ.get(name)
    if not value:
        raise ConfigError(f"{name} is not set", _SRUN_HINT)
    hint = "it must be a Slurm hostlist such as n[01-04],gpu7; check how it was set"
    try:
        hosts = hostlist.expand_hostlist(value, allow_duplicates=True)
    except hostlist.BadHostlist as err:
        raise bad_var(name, value, f"is not a valid hostlist ({err})", hint) from None
    if not hosts:
        raise bad_var(name, value, "expands to no hosts", hint)
    bad = next((h for h in hosts if not _HOSTNAME.match(h)), None)
    if bad is not None:
        raise bad_var(name, value, f"contains an invalid host name {bad!r}", hint)
    return tuple(hosts)


def _tasks_per_node(environ: Mapping[str, str]) -> tuple[int, ...]:
    name = "SLURM_STEP_TASKS_PER_NODE"
    value = environ.get(name)
    if not value:
        raise ConfigError(f"{name} is not set", _SRUN_HINT)
    hint = "it must look like Slurm's 2(x3),1; check how it was set"
    # Bound the repeats before expanding, so "1(x999999999)" fails fast instead of eating memory.
    if sum(int(n) for n in _REPEAT.findall(value)) > hostlist.MAX_SIZE:
        raise bad_var(name, value, f"repeats more than {hostlist.MAX_SIZE} nodes", hint)
    try:
        counts = hostlist.parse_slurm_tasks_per_node(value)
    except hostlist.BadHostlist as err:
        raise bad_var(name, value, f"is not a tasks-per-node list ({err})", hint) from None
    if not counts or min(counts) < 1:
        raise bad_var(name, value, "gives a node no tasks", hint)
    return tuple(counts)


def _check_counts(
    environ: Mapping[str, str],
    procid: int,
    num_tasks: int,
    hosts: tuple[str, ...],
    counts: tuple[int, ...],
) -> None:
    nodelist = environ["SLURM_STEP_NODELIST"]
    per_node = environ["SLURM_STEP_TASKS_PER_NODE"]
    if len(hosts) != len(counts):
        raise ConfigError(
            f"SLURM_STEP_NODELIST={nodelist!r} names {len(hosts)} hosts but "
            f"SLURM_STEP_TASKS_PER_NODE={per_node!r} has {len(counts)} entries",
            "both must come from the same job step; do not set them by hand",
        )
    if sum(counts) != num_tasks:
        raise ConfigError(
            f"SLURM_STEP_TASKS_PER_NODE={per_node!r} adds up to {sum(counts)} tasks but "
            f"SLURM_STEP_NUM_TASKS={num_tasks}",
            "both must come from the same job step; do not set them by hand",
        )
    if procid >= num_tasks:
        raise bad_var(
            "SLURM_PROCID",
            str(procid),
            f"is out of range for a step of {num_tasks} tasks",
            "ranks run from 0 to SLURM_STEP_NUM_TASKS-1",
        )
