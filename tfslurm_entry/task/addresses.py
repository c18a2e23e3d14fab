"""This node on the network --network picks: its name there must be one of its own
addresses (a name), or its address on that interface or in that subnet is found here and sent
with the check-in (resolve/network.py). A node without one stops before anything starts."""

from __future__ import annotations

import ipaddress
import socket

from ..errors import ConfigError
from ..resolve import Plan, network, roles


def check_network_name(plan: Plan) -> None:
    """With --network: this node's name on that network is one of this node's addresses.
    Otherwise every peer's connection to this task would fail or reach another machine, and
    the step would stop at the reach check, naming the peers but not the cause."""
    me = plan.me
    if me is None or plan.network is None or network.exchanged(plan.network):
        return  # an interface or a subnet: network_address() checks it
    name = roles.host_of(me.address)
    fix = (
        f"check --network {plan.network!r} against the nodes' names on that network "
        f"(`getent hosts {name}` on {me.host}), or unset it to use Slurm's node names"
    )
    problem = name_problem(name, me.host)
    if problem:
        raise ConfigError(
            f"{name}, the name of {me.host} on the network --network {plan.network!r} picks, "
            f"{problem}",
            fix,
        )


def network_address(plan: Plan) -> str | None:
    """This node's address on the interface or in the subnet --network names, which the task
    sends with its check-in (resolve/network.py); None for Slurm's names or a pattern. A node
    without one stops here, before anything starts."""
    me = plan.me
    if me is None or not network.exchanged(plan.network):
        return None
    import psutil  # here: only these steps pay for its import at start-up

    found = {
        name: [a.address for a in addresses if a.family == socket.AF_INET]
        for name, addresses in psutil.net_if_addrs().items()
    }
    fix = (
        f"check --network against the nodes' interfaces (`ip -br addr` on {me.host}), or unset "
        "it to use Slurm's node names"
    )
    with_ip = [f"{name} {addresses[0]}" for name, addresses in found.items() if addresses]
    if network.kind(plan.network) == network.INTERFACE:
        if plan.network not in found:
            raise ConfigError(
                f"host {me.host} has no network interface {plan.network!r} (--network); its "
                f"interfaces with an IPv4 address: {', '.join(with_ip)}",
                fix,
            )
        if not found[plan.network]:
            raise ConfigError(
                f"interface {plan.network} of host {me.host} has no IPv4 address (--network)", fix
            )
        return found[plan.network][0]
    subnet = ipaddress.ip_network(plan.network, strict=False)
    mine = [a for addresses in found.values() for a in addresses]
    inside = [a for a in mine if ipaddress.ip_address(a) in subnet]
    if not inside:
        raise ConfigError(
            f"no address of host {me.host} is in {plan.network} (--network); its interfaces "
            f"with an IPv4 address: {', '.join(with_ip)}",
            fix,
        )
    return inside[0]


def name_problem(name: str, host: str) -> str | None:
    """Why peers that connect to `name` would not reach this node (host), or None: the name
    does not resolve here, or to none of this node's own addresses."""
    try:
        found = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:  # UnicodeError: a label over 63 characters
        why = err.strerror if isinstance(err, socket.gaierror) else "not a valid DNS name"
        return f"does not resolve on {host} ({why})"
    addresses = {(family, info[0]) for family, _, _, _, info in found}
    if not any(_is_local(family, address) for family, address in addresses):
        shown = ", ".join(sorted(address for _, address in addresses))
        return f"resolves to {shown}: not an address of {host}"
    return None


def _is_local(family: int, address: str) -> bool:
    """Whether the address is this machine's: only then can a socket bind to it."""
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((address, 0))
    except OSError:
        return False
    return True
