"""Stage 3c: the host names in every task's address: Slurm's node names, or the nodes' names
on another network (--network).

Slurm's node names resolve, on most clusters, to the management Ethernet; the fast network
(InfiniBand's IPoIB, a high-speed Ethernet) has names of its own, commonly made from the node's
(c1-ib, c1.ib.example.org). A pattern with {host} gives every task the same name for every node
without asking the others, so TensorFlow's and the kit's connections between tasks go there.
Whether the name resolves to this node is checked on each node before anything starts
(run/preflight.py); whether it reaches the others, by the start-up reach check (run/reach.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import ConfigError

PLACEHOLDER = "{host}"
# What a pattern may make: a host name (RFC 1123 labels joined by dots).
_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")
_FIX = "give the nodes' names on that network as a pattern with {host}, e.g. --network '{host}-ib'"


def check_pattern(pattern: str) -> None:
    """Raise ConfigError unless the pattern makes a host name from every node name."""
    if PLACEHOLDER not in pattern:
        raise ConfigError(f"--network {pattern!r} has no {PLACEHOLDER}", _FIX)
    sample = pattern.replace(PLACEHOLDER, "c1")
    if not _HOST_NAME.fullmatch(sample):
        raise ConfigError(
            f"--network {pattern!r} does not make host names (node c1 would be {sample!r})", _FIX
        )


def names_on(hosts: Sequence[str], pattern: str | None) -> list[str]:
    """Each host's name on the chosen network, in the same order; Slurm's names without one."""
    if not pattern:
        return list(hosts)
    check_pattern(pattern)
    return [pattern.replace(PLACEHOLDER, host) for host in hosts]
