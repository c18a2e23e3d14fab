"""This task's ports, held from before its program starts until the task ends: its TensorFlow
port (listened on by the start-up check's guard, claimed node-wide) and rank 0's control port.
A port taken right now is a clash of the moment (exit 75), not a mistake in the job."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import NamedTuple

from ..errors import TransientError
from ..resolve import Plan, Task, ports, roles
from ..resolve.roles import port_of
from ..step import reach


class Held(NamedTuple):
    control: socket.socket | None
    """rank 0's control socket, already listening (None for any other task)"""
    reach: reach.Reach
    """the task's side of the start-up check: its port, listening until the program starts"""


@contextlib.contextmanager
def hold_ports(plan: Plan) -> Iterator[Held]:
    """This task's ports, held from before its program starts until the task ends.

    The task's own port is for TensorFlow, which listens there once the program runs; until
    then the task listens there itself (reach.Guard: its peers check that they reach it), and
    for the whole task it is also claimed, node-wide, with an abstract Unix socket named after
    it: another task of the kit on the node (another step whose ports collide with this one's)
    then finds it taken before its program starts, not when its TensorFlow server fails to bind
    minutes later.
    """
    me = plan.me
    port = port_of(me.address)
    with contextlib.ExitStack() as held:
        held.enter_context(_claim(plan, me, port))
        try:
            guard = held.enter_context(reach.Guard(port, plan.step, me.rank, len(plan.tasks)))
        except OSError as err:
            raise _busy(plan, me, port, err.strerror) from None
        listener = None
        if me.rank == 0:
            from ..step import control  # rank 0's alone: no member imports it

            control_port = port_of(plan.control_address)
            try:
                listener = control.listen(control_port, len(plan.tasks) - 1)
            except OSError as err:
                raise _busy(plan, me, control_port, err.strerror) from None
            held.enter_context(listener)
        targets = [
            (t.rank, t.address) for t in roles.reach_targets(plan.tasks, plan.strategy, me.rank)
        ]
        yield Held(listener, reach.Reach(guard, targets, plan.step))


def _claim(plan: Plan, me: Task, port: int) -> socket.socket:
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(f"\0tfslurm-port-{port}")
    except OSError:
        claim.close()
        raise _busy(plan, me, port, "another tfslurm-entry task on this node claimed it") from None
    return claim


def _busy(plan: Plan, me: Task, port: int, why: str) -> TransientError:
    """A port taken right now is a clash of the moment, not a mistake in the job."""
    count = max(t.local_index for t in plan.tasks) + 2  # the busiest node's tasks + control
    choose = (
        "to choose ports yourself, set --port-base (TFSLURM_PORT_BASE) to a free range of "
        f"{count} ports"
    )
    if plan.ports.kind == ports.SLURM:
        choose = "ask the administrators what else uses the ports Slurm reserves (MpiParams)"
    return TransientError(
        f"port {port} on host {me.host} (rank {me.rank}, {me.host}:{port}, "
        f"{plan.ports.source}) is taken: {why}",
        "another job or step on this node has it, or had it a moment ago: this is transient "
        f"(exit {TransientError.exit_code}); requeue or resubmit the job; {choose}",
    )
