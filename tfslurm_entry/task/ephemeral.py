"""The node's ephemeral port range against the task ports: an outgoing connection that takes a
task's port before the task listens would make it busy (sysctl net.ipv4.ip_local_port_range)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError
from ..log import log
from ..resolve import Plan, ports, roles

# Where the node says which local ports outgoing connections get (and which they never get).
SYSCTL_DIR = Path("/proc/sys/net/ipv4")


def check_ephemeral_range(plan: Plan, sysctl_dir: Path = SYSCTL_DIR) -> None:
    """The kernel gives outgoing connections local ports from its ephemeral range; one that
    lands on a task's port before the task listens makes that port busy. The default ports
    come from a range below Linux's default ephemeral range: refuse on a node whose ephemeral
    range reaches into it. Ports the user or Slurm chose get a warning, once per node."""
    me = plan.me
    node = node_port_ranges(sysctl_dir)
    if me is None or node is None:
        return
    ephemeral, kernel_reserved = node
    span = f"{ephemeral.start}-{ephemeral.stop - 1}"
    if plan.ports.kind == ports.DEFAULT:
        error = default_range_clash(me.host, ephemeral, kernel_reserved)
        if error:
            raise error
        return
    if me.local_index == 0:  # one line per node
        here = sum(1 for t in plan.tasks if t.host == me.host)
        if roles.host_of(plan.control_address) == roles.host_of(me.address):
            here += 1
        clash = ports.ephemeral_clash(plan.ports.numbers[:here], ephemeral, kernel_reserved)
        if clash:
            log(
                f"warning: ports {ports.format_ranges(clash)} on {me.host} ({plan.ports.source}) "
                f"lie in its ephemeral range {span} (net.ipv4.ip_local_port_range): an outgoing "
                "connection can take one before its task listens"
            )


def default_range_clash(
    host: str, ephemeral: range, kernel_reserved: Sequence[range]
) -> ConfigError | None:
    """The error for a node whose ephemeral range reaches into the default ports' range."""
    clash = ports.ephemeral_clash(ports.DEFAULT_RANGE, ephemeral, kernel_reserved)
    if not clash:
        return None
    span = f"{ephemeral.start}-{ephemeral.stop - 1}"
    low, high = ports.DEFAULT_RANGE.start, ports.DEFAULT_RANGE.stop - 1
    return ConfigError(
        f"host {host}'s ephemeral ports {span} (net.ipv4.ip_local_port_range) reach into "
        f"{low}-{high}, where the default task ports come from: an outgoing connection "
        f"could take a task's port ({ports.format_ranges(clash)} not reserved)",
        f'on the nodes, run `sysctl -w net.ipv4.ip_local_port_range="32768 60999"` (Linux\'s '
        f"default) or `sysctl -w net.ipv4.ip_local_reserved_ports={low}-{high}`; or have "
        "Slurm reserve ports (MpiParams=ports=LO-HI in slurm.conf), or set --port-base "
        f"(TFSLURM_PORT_BASE) outside {span}",
    )


def node_port_ranges(sysctl_dir: Path = SYSCTL_DIR) -> tuple[range, list[range]] | None:
    """This node's ephemeral port range and the ports excluded from it; None if unreadable."""
    try:
        low, high = (int(n) for n in (sysctl_dir / "ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return None
    try:
        reserved = (sysctl_dir / "ip_local_reserved_ports").read_text().strip()
        excluded = ports.parse_ranges(reserved) if reserved else []
    except (OSError, ValueError):
        excluded = []
    return range(low, high + 1), excluded
