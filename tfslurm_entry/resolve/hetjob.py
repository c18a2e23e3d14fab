"""Stage 1b: the components of a heterogeneous step, and this task's rank in it.

A step started with ``srun --het-group=0,1`` spans components of a heterogeneous job (ps on CPU
nodes, workers on GPU nodes). What Slurm exports inside one (checked on Slurm 24.11):

- SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE are the components' lists merged and sorted
  (``c[1-2],g[1-2]`` when component 0 is ``g[1-2]``), not the order ranks were dealt in;
- SLURM_PROCID is global, component 0's tasks first; SLURM_NODEID is the node's position in
  that component order; SLURM_LOCALID the task's position on its node; SLURM_GTIDS the ranks on
  the node;
- SLURM_DISTRIBUTION is the last component's, in every task, and says "cyclic" when that
  component has one task per node even though the others were dealt in blocks: no task can tell
  how another component dealt its ranks;
- SLURM_HET_SIZE and each component's SLURM_JOB_NODELIST_HET_GROUP_<k> come from the
  allocation, so a plain srun that runs in component 0 only has them too.

So the entrypoint numbers a het step's tasks by component, node (in the component's order) and
SLURM_LOCALID, which every task knows for itself: Slurm's own order under its default block
distribution, and the same in every task under any other. Components never share a node (Slurm
does not start a het job whose parts could only overlap).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import hostlist

from ..errors import ConfigError

_ONE_STEP = "the variables must come from one srun step; do not set or copy them by hand"


class Component(NamedTuple):
    """The part of a step in one component of a heterogeneous job."""

    group: int
    """Slurm's number for the component (srun --het-group)."""
    hosts: tuple[str, ...]
    """The step's hosts in this component, in the component's own order."""
    tasks_per_host: tuple[int, ...]

    @property
    def num_tasks(self) -> int:
        return sum(self.tasks_per_host)


def split_step(
    hosts: Sequence[str], counts: Sequence[int], group_hosts: Sequence[Sequence[str]]
) -> tuple[Component, ...]:
    """The step's components in ascending order; () when the step lies in one component.

    ``hosts``/``counts`` are the step's merged lists; ``group_hosts[k]`` is component k's
    allocation (SLURM_JOB_NODELIST_HET_GROUP_<k>), of which a step may use a part.
    """
    per_host = dict(zip(hosts, counts, strict=True))
    owner: dict[str, int] = {}
    parts = []
    for group, members in enumerate(group_hosts):
        inside = [host for host in members if host in per_host]
        for host in inside:
            if host in owner:
                raise ConfigError(
                    f"host {host} is in components {owner[host]} and {group} of this "
                    "heterogeneous job (SLURM_JOB_NODELIST_HET_GROUP_*), so its tasks cannot "
                    "be told apart",
                    _ONE_STEP,
                )
            owner[host] = group
        if inside:
            parts.append(Component(group, tuple(inside), tuple(per_host[h] for h in inside)))
    if len(parts) < 2:
        return ()
    stray = [host for host in hosts if host not in owner]
    if stray:
        raise ConfigError(
            f"step host {stray[0]} is in none of the {len(group_hosts)} components of this "
            "heterogeneous job (SLURM_JOB_NODELIST_HET_GROUP_*)",
            _ONE_STEP,
        )
    return tuple(parts)


def rank_order(components: Sequence[Component]) -> tuple[list[str], list[int]]:
    """Hosts and their task counts in rank order: components ascending, each in its order."""
    hosts = [host for part in components for host in part.hosts]
    counts = [count for part in components for count in part.tasks_per_host]
    return hosts, counts


def default_num_ps(components: Sequence[Component]) -> int:
    """A parameter-server het step keeps its first component for the chief and the ps."""
    first = components[0]
    if first.num_tasks < 2:
        raise ConfigError(
            f"a heterogeneous parameter-server step puts the chief and the ps in its first "
            f"component (het group {first.group}), which has {first.num_tasks} task in this "
            "step",
            "give that component 2 or more tasks (e.g. --ntasks-per-node=2 on its #SBATCH "
            "line), or set --ps N (TFSLURM_NUM_PS) to take the ps from the first ranks",
        )
    return first.num_tasks - 1


def own_group(components: Sequence[Component], node_name: str | None) -> int | None:
    """The het group whose part of the step runs on this node; None outside a het step (or
    when the node is not in it, which own_rank reports)."""
    return next((part.group for part in components if node_name in part.hosts), None)


class Identity(NamedTuple):
    """What Slurm says about this task itself (all set by srun in every task)."""

    procid: int
    node_name: str | None
    local_id: int | None
    node_id: int | None
    gtids: tuple[int, ...] | None


def own_rank(components: Sequence[Component], me: Identity) -> int:
    """This task's rank in the het step's order, after checking everything Slurm told it."""
    where = f"in this heterogeneous step ({describe(components)})"
    if me.node_name is None or me.local_id is None:
        missing = "SLURMD_NODENAME" if me.node_name is None else "SLURM_LOCALID"
        raise ConfigError(f"{missing} is not set {where}", _ONE_STEP)
    rank = node_index = first_rank = 0
    for part in components:
        if me.node_name in part.hosts:
            at = part.hosts.index(me.node_name)
            node_index += at
            rank += sum(part.tasks_per_host[:at])
            count = part.tasks_per_host[at]
            break
        node_index += len(part.hosts)
        rank += part.num_tasks
        first_rank += part.num_tasks
    else:
        raise ConfigError(f"SLURMD_NODENAME={me.node_name!r} is not a host {where}", _ONE_STEP)
    if me.local_id >= count:
        raise _disagree(f"SLURM_LOCALID={me.local_id}", f"{count} tasks on {me.node_name}", where)
    if me.node_id is not None and me.node_id != node_index:
        raise _disagree(f"SLURM_NODEID={me.node_id}", f"node {node_index}", where)
    if not first_rank <= me.procid < first_rank + part.num_tasks:
        ranks = f"ranks {first_rank}-{first_rank + part.num_tasks - 1}"
        raise _disagree(f"SLURM_PROCID={me.procid}", f"{ranks} for group {part.group}", where)
    if me.gtids is not None and (len(me.gtids) != count or me.gtids[me.local_id] != me.procid):
        text = ",".join(map(str, me.gtids))
        task = f"SLURM_PROCID={me.procid} as task {me.local_id} of {count} on {me.node_name}"
        raise _disagree(f"SLURM_GTIDS={text}", task, where)
    return rank + me.local_id


def describe(components: Sequence[Component]) -> str:
    """'group 0 on c1 (3 tasks), group 1 on g[1-2] (2 tasks)', for messages."""
    return ", ".join(
        f"group {part.group} on {hostlist.collect_hostlist(list(part.hosts))} "
        f"({part.num_tasks} tasks)"
        for part in components
    )


def _disagree(said: str, expected: str, where: str) -> ConfigError:
    return ConfigError(f"{said} disagrees with {expected} {where}", _ONE_STEP)
