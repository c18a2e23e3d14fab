"""Stage 3: assign each rank its TensorFlow role and its host:port address."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError

MULTI_WORKER = "multi-worker"
PARAMETER_SERVER = "parameter-server"
STRATEGIES = (MULTI_WORKER, PARAMETER_SERVER)
DEFAULT_NUM_PS = 1


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ConfigError(
            f"unknown strategy {strategy!r}",
            f"use --strategy (TFSLURM_STRATEGY) {' or '.join(STRATEGIES)}",
        )


def assign_roles(
    num_tasks: int, strategy: str, num_ps: int = DEFAULT_NUM_PS
) -> list[tuple[str, int]]:
    """(task type, task index) for each rank, in rank order."""
    check_strategy(strategy)
    if strategy == MULTI_WORKER:
        return [("worker", rank) for rank in range(num_tasks)]
    if num_ps < 1:
        raise ConfigError(
            f"parameter-server needs at least one ps, got --ps {num_ps}", "use --ps 1 or more"
        )
    if num_tasks < num_ps + 2:
        raise ConfigError(
            f"parameter-server with {num_ps} ps needs at least {num_ps + 2} tasks "
            f"(chief, {num_ps} ps, 1 worker) but the step has {num_tasks}",
            f"start the step with srun -n {num_ps + 2} or more, or lower --ps",
        )
    roles = [("chief", 0)]
    roles += [("ps", i) for i in range(num_ps)]
    roles += [("worker", i) for i in range(num_tasks - 1 - num_ps)]
    return roles


def addresses(hosts: Sequence[str], local_index: Sequence[int], ports: Sequence[int]) -> list[str]:
    """host:port for each rank: a node's task with local index i listens on ports[i]."""
    return [f"{host}:{ports[i]}" for host, i in zip(hosts, local_index, strict=True)]


def port_of(address: str) -> int:
    """The port of a "host:port" address this module made."""
    return int(address.rsplit(":", 1)[1])


def host_of(address: str) -> str:
    """The host of a "host:port" address this module made."""
    return address.rsplit(":", 1)[0]


def cluster_spec(roles: Sequence[tuple[str, int]], addrs: Sequence[str]) -> dict[str, list[str]]:
    """TF_CONFIG's "cluster": each task type's addresses, ordered by task index (= rank order)."""
    spec: dict[str, list[str]] = {}
    for (task_type, _), addr in zip(roles, addrs, strict=True):
        spec.setdefault(task_type, []).append(addr)
    return spec


# A multi-worker task checks at most this many peers at start-up (step/reach.py): every pair
# in steps of up to MAX_PEERS + 1 tasks; in larger ones, the tasks that follow it in rank order,
# so that every task's port is still checked from MAX_PEERS others.
MAX_PEERS = 64


def peers(tasks: Sequence, strategy: str, rank: int) -> list:
    """The tasks whose TensorFlow port the task of this rank connects to once training runs.

    Parameter-server: the chief drives every ps and worker, and a worker reads and updates
    the variables on every ps; a ps connects to no one. Multi-worker: any two workers may
    exchange tensors in a collective (and every one registers with worker 0's coordination
    service, whose host the control connection has already reached).
    """
    me = tasks[rank]
    if strategy == PARAMETER_SERVER:
        if me.task_type == "chief":
            return [t for t in tasks if t.rank != rank]
        if me.task_type == "worker":
            return [t for t in tasks if t.task_type == "ps"]
        return []
    count = min(len(tasks) - 1, MAX_PEERS)
    return [tasks[(rank + k) % len(tasks)] for k in range(1, count + 1)]


def reach_targets(tasks: Sequence, strategy: str, rank: int) -> list:
    """The ports the task of this rank checks before any program starts (step/reach.py): its
    node's share of the step's connections, checked once per node.

    Tasks on one node share its network: what one of them reaches, all of them reach, and a
    peer on the same node is reached over loopback. So only the node's first task checks, for
    all of them: every peer on another node that a task of this node connects to, and its own
    port by its own name (the name must lead back to this node, which no other node checks
    when the step has one node).
    """
    me = tasks[rank]
    if me.local_index != 0:
        return []
    found = {me.rank: me}
    for task in tasks:
        if task.host == me.host:
            found.update(
                (p.rank, p) for p in peers(tasks, strategy, task.rank) if p.host != me.host
            )
    return sorted(found.values(), key=lambda t: t.rank)
