"""Rank 0 from the first hello to the programs' start: every member checks in within the
timeout, each node's first task reaches its node's peers' TensorFlow ports (reach.py), every
task frees its own, and only then do the programs start. With --network an interface or a
subnet, every node's address there goes to every member first.

A port is freed as soon as no check can still reach it: on a step of several nodes once every
report is in; on one node at once, since no task of another node checks it and rank 0 checks
only its own name (resolve/roles.reach_targets). So a one-node step's members hear "release"
with rank 0's probe, not a round trip later: 256 tasks on one node start a second sooner.

The head (head.py) hands this phase its events and acts on what comes back: a Failure, or
`ready` (start the program). Nothing here stops the step itself.
"""

from __future__ import annotations

import socket
import threading
import time

from ..log import Log
from .books import REPORT_SLACK_S, CheckIn, Deadline, Members, Overdue, Starting
from .control import ControlServer
from .inputs import Step
from .outcome import UNREACHED, Failure
from .protocol import Message, Node, Probe, Reached, Release, Start, Unreached
from .reach import MIN_PROBE_S, PROBE_S, Reach, describe


class Startup:
    """The check-in, the start-up check and the ports freed, as rank 0 counts them."""

    def __init__(
        self, control: ControlServer, step: Step, log: Log, reach: Reach, members: Members
    ) -> None:
        self.control, self.step, self.log, self.reach = control, step, log, reach
        self.members = members
        self.me = f"rank 0 on {step.host}"
        self.checkin = CheckIn(set(step.members), control.listening, step.timeout)
        self.starting = Starting()

    @property
    def ready(self) -> bool:
        """Every task reached its peers and every member freed its port: start."""
        return self.starting.ready

    def wait_at_most(self) -> float | None:
        if self.checkin.waiting:
            return self.checkin.wait_at_most()
        return self.starting.wait_at_most()

    def late(self) -> Overdue:
        """The event for this phase's deadline passing."""
        if self.checkin.waiting:
            return self.checkin.late()
        return self.starting.late()

    def hello(self, rank: int, conn: socket.socket, failure: Failure | None) -> Failure | None:
        """A member checked in (failure: the step's, which it hears at once); the last one
        starts the check."""
        if not self.checkin.arrived(rank):
            self.members.refuse(conn)  # a rank this step does not have, or a second hello
            return None
        if failure:
            self.members.tell(conn, failure.message())
            return None
        self.members.add(rank, conn)
        if self.checkin.waiting:
            return None
        took = time.monotonic() - self.checkin.listening
        self.log(
            f"{self.me}: all {len(self.step.members) + 1} tasks checked in {took:.2f} s after "
            "rank 0 listened"
        )
        return self.probe()

    def probe(self) -> Failure | None:
        """Every task checked in: each node's first task checks its node's peers' TensorFlow
        ports (reach.py), rank 0 in a thread of its own, within what is left of the check-in
        timeout (at least MIN_PROBE_S, at most PROBE_S); on one node, every member frees its
        port meanwhile."""
        left = self.checkin.listening + self.step.timeout - time.monotonic()
        window = min(max(left, MIN_PROBE_S), PROBE_S)
        if self.step.address is not None and (failure := self._exchange()):
            return failure
        deadline = time.monotonic() + window + REPORT_SLACK_S
        running = set(self.members.running)
        probers = first_tasks(self.step) & running
        self.starting = Starting({0, *probers}, deadline=deadline, window=window)
        self.members.say(sorted(probers), Probe(window))
        if probers:  # another node's tasks check these ports: held until every report is in
            self.starting.held = running
        else:
            self.starting.freeing = running
            self.members.say_all(Release())
        threading.Thread(
            target=lambda: self.control.post(Reached(0, self.reach.check(window))), daemon=True
        ).start()
        return None

    def _exchange(self) -> Failure | None:
        """Every node's address on the chosen network, from the members' hellos, to every
        member (Node lines) and to rank 0's own plan; the failure if a member sent none."""
        addresses = self.control.addresses
        silent = [rank for rank in self.members.running if rank not in addresses]
        if silent:
            why = (
                "checked in without its address on --network (every task must run the same "
                "tfslurm-entry with the same options)"
            )
            return Failure(silent[0], self.step.members[silent[0]], None, why)
        nodes = {self.step.host: self.step.address}
        nodes.update((self.step.members[rank], addresses[rank]) for rank in self.members.running)
        lines: list[Message] = [Node(host, address) for host, address in nodes.items()]
        for conn in self.members.running.values():
            self.control.say_block(conn, lines)
        if self.step.learn is not None:
            self.step.learn(nodes)
        return None

    def reached(self, rank: int, unreached: Unreached | None, failed: bool) -> Failure | None:
        """A task's reach report. After the last good one no task probes any more: every task
        still holding its port frees it (a guard still answering there would meet the first
        program that connects), and once every member has, the programs start (ready)."""
        starting = self.starting
        if rank not in starting.reporting:
            return None
        starting.reporting.discard(rank)
        if unreached is not None:
            why = describe(unreached, starting.window)
            return Failure(rank, self.host(rank), UNREACHED, why)
        if not starting.reporting and not failed:
            starting.reached = True
            self.members.say(sorted(starting.held), Release())
            starting.freeing |= starting.held & set(self.members.running)
            starting.held.clear()
            self.reach.release()
        return None

    def released(self, rank: int) -> None:
        """A member freed its port."""
        self.starting.freeing.discard(rank)

    def start(self) -> None:
        """Tell every member to start its program."""
        self.members.say_all(Start())

    def overdue(self, event: Overdue) -> Failure:
        """The failure a passed deadline is."""
        rank = event.rank
        if event.deadline is Deadline.CHECK_IN:
            self.checkin.give_up(rank)
            why = (
                f"did not connect to rank 0 within {self.step.timeout:.0f} s (never started, "
                f"or cannot reach {self.step.host})"
            )
            return Failure(rank, self.step.members[rank], None, why)
        self.starting.give_up()
        what = "report reaching its peers'" if event.deadline is Deadline.REACH else "free its"
        window = self.starting.window + REPORT_SLACK_S
        why = f"did not {what} TensorFlow ports within {window:.0f} s"
        return Failure(rank, self.host(rank), None, why)

    def host(self, rank: int) -> str:
        return self.step.host if rank == 0 else self.step.members[rank]


def first_tasks(step: Step) -> set[int]:
    """The members that check their node's peers: each other node's first task, its lowest rank
    (local index 0: resolve/placement.local_indices), as resolve/roles.reach_targets picks
    them. None on a step of one node: rank 0 checks there, its own name."""
    first: dict[str, int] = {}
    for rank, host in step.members.items():
        if host != step.host and rank < first.get(host, rank + 1):
            first[host] = rank
    return set(first.values())
