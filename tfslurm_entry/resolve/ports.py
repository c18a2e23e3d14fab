"""Stage 3b: the ports each node's tasks listen on, rank 0's control port among them.

Every task computes the same ports without asking the others, so the rule uses only what every
task of the step sees alike, in this order:

1. --port-base P (TFSLURM_PORT_BASE): P, P+1, ... on every node. The user's choice wins.
2. Ports Slurm reserved for the step: with `MpiParams=ports=LO-HI` in slurm.conf, srun reserves
   ports on the step's nodes that no other step gets while it runs, and gives every task the
   list as SLURM_STEP_RESV_PORTS (tasks on the busiest node + 1, unless srun --resv-ports=N).
3. A window of WINDOW ports picked from the job and step ids inside DEFAULT_RANGE, which lies
   below Linux's default ephemeral range (net.ipv4.ip_local_port_range, 32768-60999): the local
   port of an outgoing connection (TensorFlow's own gRPC channels, a data loader, another job)
   is taken from that range, so it cannot sit on a task's port. Windows are numbered
   job_id * STEPS_PER_JOB + step_id modulo the number of windows, so the steps of one job, and
   jobs whose ids are close, get different windows; far-apart ids can meet, which the control
   handshake (step/control.py) and the node-wide port claims (task/hold.py) then catch.

A node's task with local index i listens on the i-th port; rank 0's control port is the one
after its own node's task ports.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from ..errors import ConfigError

MAX_PORT = 65535
DEFAULT_RANGE = range(10000, 32768)
WINDOW = 64
STEPS_PER_JOB = 16
WINDOWS = len(DEFAULT_RANGE) // WINDOW


def parse_port(text: str) -> int:
    """--port-base's value (options.py): one port number."""
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_PORT:
        raise ValueError(f"{text!r} is not a port between 1 and {MAX_PORT}")
    return int(text)


RESERVED_VAR = "SLURM_STEP_RESV_PORTS"

SLURM, OPTION, DEFAULT = "slurm", "option", "default"


class Ports(NamedTuple):
    """The ports of every node of the step: local index i listens on numbers[i]."""

    numbers: tuple[int, ...]
    kind: str
    """SLURM (reserved by srun), OPTION (--port-base) or DEFAULT (the job's window)"""
    source: str
    """where they came from, for --explain and the error messages"""


def parse_ranges(text: str) -> list[range]:
    """'12005-12009,12011' (Slurm's and the kernel's port-list syntax) -> ranges, in order.
    Raises ValueError on anything else."""
    ranges = []
    for part in text.replace(" ", "").split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or not (high or low).isdigit():
            raise ValueError(f"{part!r} is not a port or a LOW-HIGH range")
        first, last = int(low), int(high or low)
        if not 0 < first <= last <= MAX_PORT:
            raise ValueError(f"{part!r} is not a range of ports between 1 and {MAX_PORT}")
        ranges.append(range(first, last + 1))
    return ranges


def default_base(job_id: int, step_id: int) -> int:
    """The first port of this step's window: the same on every node, different for the other
    steps of the job and for jobs with nearby ids."""
    window = (job_id * STEPS_PER_JOB + step_id) % WINDOWS
    return DEFAULT_RANGE.start + window * WINDOW


def needed(tasks_per_host: Iterable[int], rank0_host_tasks: int) -> int:
    """Ports one node needs: its tasks' own, and on rank 0's node one more for control."""
    return max(max(tasks_per_host, default=0), rank0_host_tasks + 1)


def choose(
    count: int,
    port_base: int | None,
    reserved: Sequence[int] | None,
    job_id: int | None,
    step_id: int | None,
) -> Ports:
    """The step's ports by the rule in this module's docstring; count = needed(...)."""
    if port_base is not None:
        top = port_base + count - 1
        if top > MAX_PORT:
            raise ConfigError(
                f"port base {port_base} plus the {count} ports a node needs (its tasks, and "
                f"rank 0's control port) reaches port {top}, above {MAX_PORT}",
                f"set --port-base (TFSLURM_PORT_BASE) to {MAX_PORT - count + 1} or lower",
            )
        return Ports(tuple(range(port_base, top + 1)), OPTION, f"--port-base {port_base}")
    if reserved is not None:
        text = format_ranges(reserved)
        if len(reserved) < count:
            raise ConfigError(
                f"Slurm reserved {len(reserved)} ports for this step ({RESERVED_VAR}={text}) "
                f"but it needs {count}: the tasks of its busiest node and rank 0's control port",
                f"drop srun's --resv-ports=N (srun then reserves tasks per node + 1), or ask "
                f"for --resv-ports={count}",
            )
        return Ports(tuple(reserved[:count]), SLURM, f"reserved by Slurm: {RESERVED_VAR}={text}")
    if job_id is None:
        raise ConfigError(
            "SLURM_JOB_ID is not set, so there is no default port window",
            "set --port-base (TFSLURM_PORT_BASE)",
        )
    if count > WINDOW:
        raise ConfigError(
            f"a node of this step needs {count} ports (its tasks, and rank 0's control port) "
            f"but the default port window holds {WINDOW}",
            "have Slurm reserve ports (MpiParams=ports=LO-HI in slurm.conf), or set "
            "--port-base (TFSLURM_PORT_BASE) to a free range",
        )
    base = default_base(job_id, step_id or 0)
    window = (base - DEFAULT_RANGE.start) // WINDOW
    source = f"default window {window} of {WINDOWS}: {base}-{base + WINDOW - 1}"
    return Ports(tuple(range(base, base + count)), DEFAULT, source)


def format_ranges(ports: Sequence[int]) -> str:
    """(12005, 12006, 12007, 12011) -> '12005-12007,12011'."""
    parts: list[str] = []
    start = prev = None
    for port in [*ports, None]:
        if prev is not None and port == prev + 1:
            prev = port
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = port
    return ",".join(parts)


def ephemeral_clash(
    ports: Iterable[int], ephemeral: range, kernel_reserved: Sequence[range] = ()
) -> list[int]:
    """The ports the kernel may hand to outgoing connections: inside the ephemeral range and
    not in net.ipv4.ip_local_reserved_ports."""
    return [p for p in ports if p in ephemeral and not any(p in r for r in kernel_reserved)]
