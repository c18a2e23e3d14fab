"""Stage 5: compose the stages into one Plan; later, with_addresses() puts the nodes' addresses
from the check-in into it (--network an interface or a subnet). Pure: no TensorFlow import, no
I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from ..errors import ConfigError
from ..options import count, option
from . import gpus, hetjob, network, placement, ports, roles
from .ports import Ports
from .slurm_env import StepEnv


@dataclass(frozen=True)
class Options:
    """What the user chose for the resolution: each field is an option (options.py)."""

    strategy: str = option(
        roles.MULTI_WORKER,
        str,
        "every task a worker (MultiWorkerMirroredStrategy), or chief + ps + workers "
        "(ParameterServerStrategy)",
        choices=roles.STRATEGIES,
    )
    num_ps: int | None = option(
        None,
        count,
        "parameter servers in a parameter-server job",
        flag="--ps",
        metavar="N",
        default_text="1; in a heterogeneous step, the first component's tasks but the chief",
    )
    port_base: int | None = option(
        None,
        ports.parse_port,
        "first port on each node: a task listens on P + its local index on its node, rank 0's "
        "control port is the next after its node's tasks",
        metavar="P",
        default_text="the ports srun reserved for the step (SLURM_STEP_RESV_PORTS, slurm.conf "
        f"MpiParams=ports), else a window of {ports.WINDOW} in {ports.DEFAULT_RANGE.start}-"
        f"{ports.DEFAULT_RANGE.stop - 1} picked from the job and step ids",
    )
    gpus_per_task: int | None = option(
        None,
        count,
        "GPUs per GPU-using task; 0 hides them",
        metavar="N",
        default_text="the node's GPUs split evenly among its GPU-using tasks",
    )
    network: str | None = option(
        None,
        network.parse,
        "the network TensorFlow's and the kit's connections between tasks use: the nodes' "
        "names there made from Slurm's ('{host}-ib' gives c1-ib for node c1), its interface "
        "(ib0) or its subnet (10.1.0.0/16), each node's address there exchanged at start-up",
        metavar="NETWORK",
        default_text="Slurm's node names",
    )


class Task(NamedTuple):
    """One task of the step, as every task of the step computes it.

    A NamedTuple rather than a frozen dataclass: a step can have tens of thousands of tasks
    and tuples are several times cheaper to build.
    """

    rank: int
    host: str
    local_index: int
    task_type: str
    index: int
    address: str
    """host:port TensorFlow's connections use; the host is `host` on the chosen network"""
    gpus: str | None = None
    """CUDA_VISIBLE_DEVICES for this task; None leaves it untouched."""
    component: int | None = None
    """Its component (het group) in a heterogeneous step; None in any other step."""


@dataclass(frozen=True)
class Plan:
    """The resolved cluster and this task's place in it."""

    strategy: str
    tasks: tuple[Task, ...] = ()
    """Every task in rank order; empty outside Slurm and for one-task steps."""
    rank: int | None = None
    ports: Ports | None = None
    """Every node's ports, and where they came from (ports.py)."""
    control_address: str | None = None
    """Where rank 0's entrypoint supervises the step (step/head.py)."""
    procid: int | None = None
    """This task's SLURM_PROCID; in a heterogeneous step it may differ from rank (hetjob.py)."""
    step: str = "-"
    """JOB.STEP: the tasks of a step tell rank 0 which step they belong to (step/control.py)."""
    network: str | None = None
    """--network: the pattern that made the addresses' host names; None: Slurm's node names"""

    @property
    def me(self) -> Task | None:
        return self.tasks[self.rank] if self.tasks and self.rank is not None else None

    @property
    def role(self) -> str:
        """ "chief", "ps" or "worker"; "local" when there is no cluster to join."""
        return self.me.task_type if self.me else "local"

    @property
    def tf_config(self) -> dict | None:
        if self.me is None:
            return None
        cluster = roles.cluster_spec(
            [(t.task_type, t.index) for t in self.tasks], [t.address for t in self.tasks]
        )
        return {"cluster": cluster, "task": {"type": self.me.task_type, "index": self.me.index}}

    @property
    def cuda_visible_devices(self) -> str | None:
        return self.me.gpus if self.me else None


def resolve(env: StepEnv | None, options: Options, node_gpus: Sequence[str] = ()) -> Plan:
    """Slurm step + options (+ this node's GPUs) -> Plan. Raises ConfigError on bad input."""
    roles.check_strategy(options.strategy)
    if env is None or env.num_tasks == 1:
        procid = env.procid if env else None
        return Plan(strategy=options.strategy, rank=procid, procid=procid)

    if env.components:  # heterogeneous: the components' hosts in rank order, dealt in blocks
        order, counts = hetjob.rank_order(env.components)
        slots = placement.place_ranks(counts)
        rank = hetjob.own_rank(env.components, env.identity)
    else:
        order, counts = list(env.hosts), env.tasks_per_host
        slots = placement.place_ranks(counts, env.distribution, env.plane_size)
        rank = env.procid
    hosts = [order[slot] for slot in slots]
    local = placement.local_indices(order, slots)
    if not env.components:
        _self_check(env, hosts[rank], local[rank])

    assigned = roles.assign_roles(env.num_tasks, options.strategy, _num_ps(env, options))
    per_host = Counter(hosts)
    on_rank0_host = per_host[hosts[0]]
    count = ports.needed([max(local) + 1], on_rank0_host)
    chosen = ports.choose(count, options.port_base, env.resv_ports, env.job_id, env.step_id)
    names = network.names_on(hosts, options.network)
    addrs = roles.addresses(names, local, chosen.numbers)
    task_gpus = _gpus(env, options, hosts, rank, assigned, node_gpus)
    group = {host: part.group for part in env.components for host in part.hosts}

    tasks = tuple(
        Task(r, host, idx, task_type, index, addr, gpu, group.get(host))
        for r, (host, idx, (task_type, index), addr, gpu) in enumerate(
            zip(hosts, local, assigned, addrs, task_gpus, strict=True)
        )
    )
    control = f"{names[0]}:{chosen.numbers[on_rank0_host]}"
    step = f"{env.job_id if env.job_id is not None else '-'}.{env.step_id or 0}"
    return Plan(options.strategy, tasks, rank, chosen, control, env.procid, step, options.network)


def _num_ps(env: StepEnv, options: Options) -> int:
    """--ps if given; else a het step's first component holds the chief and the ps; else 1."""
    if options.num_ps is not None:
        return options.num_ps
    if env.components and options.strategy == roles.PARAMETER_SERVER:
        return hetjob.default_num_ps(env.components)
    return roles.DEFAULT_NUM_PS


def _self_check(env: StepEnv, host: str, local_index: int) -> None:
    """Catch a placement that disagrees with what Slurm itself says about this task."""
    how = f"distribution {env.distribution or 'block'!r}"
    if env.plane_size and env.distribution == "plane":
        how += f" with plane size {env.plane_size}"
    if env.node_name is not None and env.node_name != host:
        raise ConfigError(
            f"rank {env.procid} was placed on host {host} ({how}) but SLURMD_NODENAME="
            f"{env.node_name!r}",
            "SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE and SLURM_DISTRIBUTION must be "
            "the step's own, as srun sets them; do not set or copy them by hand",
        )
    if env.local_id is not None and env.local_id != local_index:
        raise ConfigError(
            f"rank {env.procid} got local index {local_index} on {host} ({how}) but "
            f"SLURM_LOCALID={env.local_id}",
            "SLURM_STEP_TASKS_PER_NODE and SLURM_DISTRIBUTION must be the step's own",
        )


def _gpus(
    env: StepEnv,
    options: Options,
    hosts: Sequence[str],
    own_rank: int,
    assigned: Sequence[tuple[str, int]],
    node_gpus: Sequence[str],
) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES per rank: exact for this host; other hosts are shown as if they
    had this node's GPUs (each task resolves its own host for real)."""
    if not node_gpus:  # none here; an inherited list names another node's GPUs: hide them
        return ["" if env.gpus_inherited else None] * len(hosts)
    me = hosts[own_rank]
    users: dict[str, list[int]] = {}
    for rank, (host, (task_type, _)) in enumerate(zip(hosts, assigned, strict=True)):
        if gpus.uses_gpus(task_type, options.strategy):
            users.setdefault(host, []).append(rank)
    result: list[str | None] = [""] * len(hosts)  # chief and ps: no GPUs
    slurm_binds = env.gpus_bound_by_slurm and options.gpus_per_task is None
    for host, ranks in users.items():
        if slurm_binds:
            for rank in ranks:
                result[rank] = None  # Slurm already gave this task its own GPUs
            continue
        try:
            split = gpus.split_gpus(node_gpus, len(ranks), options.gpus_per_task, host)
        except ConfigError:
            if host == me:
                raise
            split = [["?"]] * len(ranks)  # another node; its own task reports the real error
        for rank, ids in zip(ranks, split, strict=True):
            result[rank] = ",".join(ids)
    return result


def with_addresses(plan: Plan, nodes: Mapping[str, str]) -> Plan:
    """The plan with every task's address on its node's address from the check-in (Slurm node
    name -> address on the chosen network). Raises ConfigError for a node without one."""
    missing = sorted({t.host for t in plan.tasks} - set(nodes))
    if missing:
        raise ConfigError(
            f"rank 0 sent no address on --network {plan.network!r} for {', '.join(missing)}",
            "every task of a step must run the same tfslurm-entry with the same --network",
        )
    tasks = tuple(
        t._replace(address=f"{nodes[t.host]}:{t.address.rsplit(':', 1)[1]}") for t in plan.tasks
    )
    return replace(plan, tasks=tasks)
