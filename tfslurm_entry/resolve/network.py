"""Stage 3c: the host in every task's address: Slurm's node names, or the nodes' names or
addresses on another network (--network).

Slurm's node names resolve, on most clusters, to the management Ethernet; the fast network
(InfiniBand's IPoIB, a high-speed Ethernet) has names or addresses of its own. --network says
which, in one of three forms:

- a pattern with {host}, the nodes' names on that network made from Slurm's (c1-ib,
  c1.ib.example.org): every task computes every node's name without asking the others;
- an interface name (ib0), or a subnet (10.1.0.0/16): each node's own address there, which only
  that node knows. Each task looks up its own (task/addresses.py, before anything starts) and
  sends it with its check-in; rank 0 hands every node's address to every task before the reach
  check (step/startup.py), and plan.with_addresses() puts them into the plan.

Whether a pattern's name resolves to this node is checked on each node before anything starts
(task/addresses.py); whether the addresses reach the others, by the reach check (step/reach.py).
Rank 0's control address keeps Slurm's name for the two address forms: it is needed before
any address is known.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from ..errors import ConfigError

PLACEHOLDER = "{host}"
# What a pattern may make: a host name (RFC 1123 labels joined by dots).
_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")
_FIX = (
    "give the nodes' names on that network as a pattern with {host} ('{host}-ib'), its "
    "interface name (ib0) or its subnet (10.1.0.0/16)"
)
PATTERN, INTERFACE, SUBNET = "pattern", "interface", "subnet"
# A Linux interface name: at most 15 bytes (IFNAMSIZ - 1), no '/', no white space.
_INTERFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")


def parse(text: str) -> str:
    """--network's value (options.py), checked for its form; ValueError says what is wrong."""
    try:
        kind(text)
    except ConfigError as err:
        raise ValueError(f"{err.what.removeprefix('--network ')}: {err.hint}") from None
    return text


def kind(network: str) -> str:
    """PATTERN, INTERFACE or SUBNET; raise ConfigError for anything else."""
    if PLACEHOLDER in network:
        check_pattern(network)
        return PATTERN
    if "/" in network:
        try:
            subnet = ipaddress.ip_network(network, strict=False)
        except ValueError:
            raise ConfigError(f"--network {network!r} is not a subnet", _FIX) from None
        if subnet.version != 4:
            raise ConfigError(f"--network {network!r}: IPv6 subnets are not supported yet", _FIX)
        return SUBNET
    try:
        ipaddress.ip_address(network)
    except ValueError:
        pass
    else:
        raise ConfigError(f"--network {network!r} is one address, not a network", _FIX)
    if not _INTERFACE.fullmatch(network):
        raise ConfigError(
            f"--network {network!r} is not a pattern with {PLACEHOLDER}, an interface name or "
            "a subnet",
            _FIX,
        )
    return INTERFACE


def exchanged(network: str | None) -> bool:
    """Whether each node's address must come from that node (an interface or a subnet)."""
    return network is not None and kind(network) != PATTERN


def check_pattern(pattern: str) -> None:
    """Raise ConfigError unless the pattern makes a host name from every node name."""
    if PLACEHOLDER not in pattern:
        raise ConfigError(f"--network {pattern!r} has no {PLACEHOLDER}", _FIX)
    sample = pattern.replace(PLACEHOLDER, "c1")
    if not _HOST_NAME.fullmatch(sample):
        raise ConfigError(
            f"--network {pattern!r} does not make host names (node c1 would be {sample!r})", _FIX
        )


def names_on(hosts: Sequence[str], network: str | None) -> list[str]:
    """Each host's name on the chosen network, in the same order; Slurm's names without one,
    and until the addresses are known for an interface or a subnet (plan.with_addresses)."""
    if not network or exchanged(network):
        return list(hosts)
    return [network.replace(PLACEHOLDER, host) for host in hosts]
