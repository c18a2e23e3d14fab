"""Stage 1: read the Slurm job-step environment into a typed, validated record.

Only the step variables (``SLURM_STEP_*``) are trusted: inside ``srun`` they describe the step,
while the job-level ones describe the whole allocation, which may be larger. The one exception is
a heterogeneous job's per-component nodelists, which tell apart the components a step spans
(hetjob.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import hostlist

from ..errors import ConfigError, bad_var
from .gpus import parse_gpu_list
from .hetjob import Component, Identity, own_group, split_step
from .ports import RESERVED_VAR, parse_ranges

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
    gpus_inherited: bool = False
    """CUDA_VISIBLE_DEVICES came with srun's environment, not from this node (gpus_inherited)."""
    components: tuple[Component, ...] = ()
    """A heterogeneous step's components (hetjob.py); () for any other step."""
    node_id: int | None = None
    gtids: tuple[int, ...] | None = None
    resv_ports: tuple[int, ...] | None = None
    """The ports srun reserved for the step on its nodes (SLURM_STEP_RESV_PORTS), in order."""

    @property
    def identity(self) -> Identity:
        return Identity(self.procid, self.node_name, self.local_id, self.node_id, self.gtids)


_GPU_BIND = re.compile(r"gres/gpu:([^+]*)")


def gpus_bound_per_task(environ: Mapping[str, str], group: int | None = None) -> bool:
    """Whether Slurm bound GPUs to each task itself, so that a task's CUDA_VISIBLE_DEVICES is
    its own share and not the node's to split.

    Slurm 23.11 and later export the binding as SLURM_TRES_BIND (srun --gpu-bind=single:1 is
    `gres/gpu:single:1`; --gpus-per-task=N implies `gres/gpu:per_task:N`; --gpu-bind=none is
    `gres/gpu:none`), in a heterogeneous step as SLURM_TRES_BIND_HET_GROUP_<k> (or its older
    spelling _PACK_GROUP_<k>) for the task's own component `group`. srun --gpus-per-task
    does not set SLURM_GPUS_PER_TASK in the tasks (22.05, 24.11, 26.05); a batch script
    submitted with it passes it on. Slurm 22.05 exports neither, but on every version
    slurmstepd narrows a task's CUDA_VISIBLE_DEVICES only when the step binds: it then lists
    fewer GPUs than SLURM_GPUS_ON_NODE, which counts the step's GPUs on the node.
    """
    names = ["SLURM_TRES_BIND"]
    if group is not None:
        names += [f"SLURM_TRES_BIND_HET_GROUP_{group}", f"SLURM_TRES_BIND_PACK_GROUP_{group}"]
    bind = next((environ[name] for name in names if name in environ), None)
    if bind is not None:
        found = _GPU_BIND.search(bind)
        spec = [part for part in (found.group(1).split(",") if found else []) if part != "verbose"]
        return bool(spec) and spec[0] != "none"
    if environ.get("SLURM_GPUS_PER_TASK"):
        return True
    return _fewer_than_on_node(environ)


def _fewer_than_on_node(environ: Mapping[str, str]) -> bool:
    on_node = environ.get("SLURM_GPUS_ON_NODE", "")
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not on_node.isdigit():
        return False
    return len(parse_gpu_list(visible)) < int(on_node)


def gpus_inherited(environ: Mapping[str, str], het_step: bool) -> bool:
    """Whether this task's CUDA_VISIBLE_DEVICES is another node's.

    srun passes its own environment on, and Slurm replaces CUDA_VISIBLE_DEVICES only on nodes
    where it gives the step GPUs. In a heterogeneous step whose batch script runs on a GPU node,
    the tasks on the CPU component's nodes get that node's CUDA_VISIBLE_DEVICES (checked on Slurm
    24.11); SLURM_STEP_GPUS and SLURM_GPUS_ON_NODE are set only where the GPUs are.
    """
    return (
        het_step
        and environ.get("CUDA_VISIBLE_DEVICES") is not None
        and "SLURM_STEP_GPUS" not in environ
        and "SLURM_GPUS_ON_NODE" not in environ
    )


# Outside Slurm on purpose, in a runtime that hides Slurm's variables: one process, no TF_CONFIG.
LOCAL_VAR = "TFSLURM_LOCAL"


def read_step_env(environ: Mapping[str, str]) -> StepEnv | None:
    """Parse the step environment; None outside Slurm (no SLURM_PROCID)."""
    if "SLURM_PROCID" not in environ:
        _check_not_hidden(environ)
        _check_task_variables(environ)
        return None
    procid = _int(environ, "SLURM_PROCID", required=True)
    num_tasks = _int(environ, "SLURM_STEP_NUM_TASKS", required=True)
    hosts = _hosts(environ)
    counts = _tasks_per_node(environ)
    _check_counts(environ, procid, num_tasks, hosts, counts)
    components = _components(environ, hosts, counts)
    node_name = environ.get("SLURMD_NODENAME") or None
    return StepEnv(
        procid=procid,
        num_tasks=num_tasks,
        hosts=hosts,
        tasks_per_host=counts,
        distribution=node_distribution(environ.get("SLURM_DISTRIBUTION", "")),
        plane_size=_int(environ, "SLURM_DIST_PLANESIZE", minimum=1),
        local_id=_int(environ, "SLURM_LOCALID"),
        node_name=node_name,
        job_id=_int(environ, "SLURM_JOB_ID"),
        step_id=_int(environ, "SLURM_STEP_ID"),
        gpus_bound_by_slurm=gpus_bound_per_task(environ, own_group(components, node_name)),
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
        gpus_inherited=gpus_inherited(environ, bool(components)),
        components=components,
        node_id=_int(environ, "SLURM_NODEID"),
        gtids=_gtids(environ),
        resv_ports=_resv_ports(environ),
    )


def _check_not_hidden(environ: Mapping[str, str]) -> None:
    """Podman passes none of the host's variables unless asked (-e): in a Slurm task each task
    would start alone, with no TF_CONFIG, and train alone. A Podman container without one
    SLURM_* variable cannot tell a laptop's run from such a task, so it is refused unless the
    user says it is not Slurm's (TFSLURM_LOCAL=1)."""
    if environ.get("container") != "podman" or environ.get(LOCAL_VAR) == "1":
        return
    if any(name.startswith("SLURM_") for name in environ):
        return
    raise ConfigError(
        "no SLURM_* variable in this Podman container: Podman passes none of the host's unless "
        "asked, and each task of a Slurm step would train alone",
        "in a Slurm step: srun podman run -e 'SLURM_*' --network host IMAGE PROGRAM ARGS; "
        f"outside Slurm, one process: podman run -e {LOCAL_VAR}=1 IMAGE PROGRAM ARGS",
    )


def _check_task_variables(environ: Mapping[str, str]) -> None:
    """srun passes the step's variables (SLURM_STEP_ID, SLURM_STEP_NUM_TASKS) and slurmstepd
    adds each task's own (SLURM_PROCID, SLURM_LOCALID, SLURMD_NODENAME). A runtime that keeps
    the first and drops the second (Slurm 22.05's --container, seen on its dev cluster) leaves
    every task of a step looking like the only one: each would train alone. A batch script or
    an salloc shell has no SLURM_STEP_ID; a one-task step has nothing to lose."""
    tasks = environ.get("SLURM_STEP_NUM_TASKS", "")
    if "SLURM_STEP_ID" not in environ or not tasks.isdigit() or int(tasks) < 2:
        return
    where = (
        f"Slurm's --container ({environ['SLURM_CONTAINER']}) started it without them, as "
        "Slurm 22.05's does"
        if environ.get("SLURM_CONTAINER")
        else "the runtime that started it passed srun's variables but not slurmstepd's"
    )
    raise ConfigError(
        f"this task of a {tasks}-task Slurm step has no SLURM_PROCID (nor the other variables "
        f"Slurm sets for each task): {where}, and each task would train alone",
        "srun --container runs steps on Slurm 24.11 and later; on Slurm 22.05 run the image "
        "with Apptainer (srun apptainer run IMAGE PROGRAM) or Charliecloud (srun ch-run ... "
        "IMAGE -- tfslurm-entry PROGRAM), see docs/runtimes.md",
    )


def _resv_ports(environ: Mapping[str, str]) -> tuple[int, ...] | None:
    """Set by srun when slurm.conf has MpiParams=ports=LO-HI: '12005-12009', or a list of
    ranges when the reservation wraps around the end of that range."""
    value = environ.get(RESERVED_VAR)
    if not value:
        return None
    try:
        return tuple(port for part in parse_ranges(value) for port in part)
    except ValueError as err:
        raise bad_var(
            RESERVED_VAR, value, f"is not a list of ports ({err})", "unset it or let srun set it"
        ) from None


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
    return _expand(name, value)


def _expand(name: str, value: str) -> tuple[str, ...]:
    """A Slurm hostlist variable as host names, each checked."""
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


def _components(
    environ: Mapping[str, str], hosts: tuple[str, ...], counts: tuple[int, ...]
) -> tuple[Component, ...]:
    """A heterogeneous step's components (hetjob.split_step); () for any other step."""
    size = _int(environ, "SLURM_HET_SIZE") or 0
    if size < 2:
        return ()
    groups = []
    for group in range(size):
        # `srun a : b` outside an allocation sets only the older _PACK_GROUP_ spelling
        # (22.05 to 26.05); an allocation made by sbatch or salloc sets both.
        names = [f"SLURM_JOB_NODELIST_HET_GROUP_{group}", f"SLURM_JOB_NODELIST_PACK_GROUP_{group}"]
        name = next((n for n in names if environ.get(n)), None)
        if name is None:
            raise ConfigError(
                f"SLURM_HET_SIZE={size} but {names[0]} is not set (nor {names[1]})",
                "both come from a heterogeneous job's allocation; do not set them by hand",
            )
        groups.append(_expand(name, environ[name]))
    return split_step(hosts, counts, groups)


def _gtids(environ: Mapping[str, str]) -> tuple[int, ...] | None:
    value = environ.get("SLURM_GTIDS")
    if not value:
        return None
    items = value.split(",")
    if not all(item.isascii() and item.isdigit() for item in items):
        raise bad_var(
            "SLURM_GTIDS", value, "is not a list of ranks such as 0,1,2", "let Slurm set it"
        )
    return tuple(int(item) for item in items)


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
