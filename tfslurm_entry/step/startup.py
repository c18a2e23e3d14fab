"""Rank 0 from the first hello to the programs' start: every member checks in within the
timeout, every task reaches its peers' TensorFlow ports (reach.py) and then frees its own, and
only then do the programs start. With --network an interface or a subnet, every node's address
there goes to every member first.

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
        return self.starting.releasing and not self.starting.waiting

    def wait_at_most(self) -> float | None:
        if self.checkin.waiting:
            return self.checkin.wait_at_most()
        return self.starting.wait_at_most()

    def late(self) -> Overdue:
        """The event for this phase's deadline passing."""
        if self.checkin.waiting:
            return self.checkin.late()
        deadline = Deadline.RELEASE if self.starting.releasing else Deadline.REACH
        return Overdue(min(self.starting.waiting), deadline)

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
        """Every task checked in: each checks its peers' TensorFlow ports (reach.py), rank 0
        in a thread of its own, within what is left of the check-in timeout (at least
        MIN_PROBE_S, at most PROBE_S)."""
        left = self.checkin.listening + self.step.timeout - time.monotonic()
        window = min(max(left, MIN_PROBE_S), PROBE_S)
        if self.step.address is not None and (failure := self._exchange()):
            return failure
        deadline = time.monotonic() + window + REPORT_SLACK_S
        self.starting = Starting({0, *self.members.running}, deadline, window)
        self.members.say_all(Probe(window))
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
        frees its port (a guard still answering there would meet the first program that
        connects), and once every member has, the programs start (ready)."""
        if rank not in self.starting.waiting or self.starting.releasing:
            return None
        self.starting.waiting.discard(rank)
        if unreached is not None:
            why = describe(unreached, self.starting.window)
            return Failure(rank, self.host(rank), UNREACHED, why)
        if not self.starting.waiting and not failed:
            self.starting.releasing = True
            self.starting.waiting = set(self.members.running)
            self.members.say_all(Release())
            self.reach.release()
        return None

    def released(self, rank: int) -> None:
        """A member freed its port."""
        if self.starting.releasing:
            self.starting.waiting.discard(rank)

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
        self.starting.waiting.clear()
        what = "report reaching its peers'" if event.deadline is Deadline.REACH else "free its"
        window = self.starting.window + REPORT_SLACK_S
        why = f"did not {what} TensorFlow ports within {window:.0f} s"
        return Failure(rank, self.host(rank), None, why)

    def host(self, rank: int) -> str:
        return self.step.host if rank == 0 else self.step.members[rank]
