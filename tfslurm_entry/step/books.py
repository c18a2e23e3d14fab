"""Rank 0's books: who has checked in, reached its peers and freed its port, and until when;
the members' connections and the head's lines to them; the workers a step may lose; how the
step is ending. The head (head.py) acts; these only keep count.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from .control import ControlServer
from .event import Event
from .outcome import ABORTED, Failure
from .protocol import Message

# How much longer than the check's window rank 0 waits for a task's reach report: the last
# attempt's answer (reach.ANSWER_S) and the report's way back.
REPORT_SLACK_S = 7.0


class Deadline(Enum):
    """Which of the start-up's deadlines passed."""

    CHECK_IN = "check-in"  # the member never said hello
    REACH = "reach"  # the task's reach report never came
    RELEASE = "release"  # the member had not freed its port


class Overdue(Event):
    """A start-up deadline passed and this task had not done its part."""

    rank: int
    deadline: Deadline


class Unended(Event):
    """After Slurm's notice, the wait for every program to save and end passed."""


@dataclass
class CheckIn:
    """The members that have not connected yet, and until when rank 0 waits for them."""

    waiting: set[int]
    listening: float
    """when rank 0 started listening (time.monotonic)"""
    timeout: float

    def arrived(self, rank: int) -> bool:
        """Count rank in; False if it was not awaited (not this step's, or a second hello)."""
        if rank not in self.waiting:
            return False
        self.waiting.discard(rank)
        return True

    def wait_at_most(self) -> float | None:
        """How long the next poll may wait: until the deadline while members are missing."""
        if not self.waiting:
            return None
        return max(self.listening + self.timeout - time.monotonic(), 0.01)

    def late(self) -> Overdue:
        """The event for the timeout passing: poll() comes back empty only when it had one,
        which it has only while members are missing."""
        return Overdue(min(self.waiting), Deadline.CHECK_IN)

    def give_up(self, rank: int) -> None:
        self.waiting.discard(rank)


@dataclass
class Starting:
    """After check-in, before the programs start: the reach reports still awaited (rank 0's own
    and each other node's first task's), the members whose ports stay held until every report
    is in (another node's task checks them), the members told to free their ports that have not
    yet, and until when."""

    reporting: set[int] = field(default_factory=set)
    held: set[int] = field(default_factory=set)
    freeing: set[int] = field(default_factory=set)
    deadline: float = 0.0
    window: float = 0.0
    """how long each task may try its peers"""
    reached: bool = False
    """every task that checks reached its peers, rank 0 freed its own port, and the held ones
    were told to free theirs"""

    @property
    def ready(self) -> bool:
        """Every port checked and free: the programs may start."""
        return self.reached and not self.freeing

    def wait_at_most(self) -> float | None:
        if not (self.reporting or self.freeing):
            return None
        return max(self.deadline - time.monotonic(), 0.01)

    def late(self) -> Overdue:
        """The event for the deadline passing: a missing report first, else a port not freed."""
        if self.reporting:
            return Overdue(min(self.reporting), Deadline.REACH)
        return Overdue(min(self.freeing), Deadline.RELEASE)

    def give_up(self) -> None:
        self.reporting.clear()
        self.freeing.clear()


class Members:
    """The connections of the members still running, and the head's one line to each."""

    def __init__(self, control: ControlServer) -> None:
        self.control = control
        self.running: dict[int, socket.socket] = {}

    def __len__(self) -> int:
        return len(self.running)

    def __contains__(self, rank: int) -> bool:
        return rank in self.running

    def add(self, rank: int, conn: socket.socket) -> None:
        self.running[rank] = conn

    def drop(self, rank: int) -> None:
        """The member ended (or vanished): close its connection."""
        self.control.close(self.running.pop(rank))

    def tell(self, conn: socket.socket, message: Message) -> None:
        """The one line to a member that is not (or no longer) running: close after it."""
        self.control.tell(conn, message)

    def refuse(self, conn: socket.socket) -> None:
        self.control.close(conn)

    def say_all(self, message: Message) -> None:
        """A line before the last one, to every member."""
        self.say(self.running, message)

    def say(self, ranks: Iterable[int], message: Message) -> None:
        """A line before the last one, to those of ranks still running."""
        for rank in ranks:
            if (conn := self.running.get(rank)) is not None:
                self.control.say(conn, message)

    def tell_all(self, message: Message) -> None:
        for conn in self.running.values():
            self.control.tell(conn, message)
        self.running.clear()


@dataclass
class Losses:
    """The workers a parameter-server step may lose, and those it has lost."""

    expendable: dict[int, str]
    lost: list[str] = field(default_factory=list)
    """"worker I (rank R on HOST)", in the order they were lost"""

    def can_lose(self, rank: int, chief_running: bool) -> bool:
        """A worker, while the chief works and another worker remains."""
        if rank not in self.expendable or not chief_running:
            return False
        return len(self.expendable) - len(self.lost) > 1

    def lose(self, failure: Failure) -> str:
        """Write the worker off; the line that says so."""
        name = f"{self.expendable[failure.rank]} (rank {failure.rank} on {failure.host})"
        self.lost.append(name)
        left = len(self.expendable) - len(self.lost)
        return f"{name} lost: {failure.what}; continuing with {left} workers"


@dataclass
class Tally:
    """How the step is ending: rank 0's program's status, the first failure, and when
    programs ended well (wall-clock, for the spread rank 0 reports)."""

    status: int | None = None
    failure: Failure | None = None
    ends: list[float] = field(default_factory=list)

    def ended_well(self) -> None:
        self.ends.append(time.time())

    def exit_status(self) -> int:
        """Rank 0's own status, or ABORTED when another task's failure stopped it (or the
        failure's status when the step stopped before rank 0's program started)."""
        if self.failure is not None and self.failure.rank != 0:
            return ABORTED
        if self.status is None:
            failed = self.failure.status if self.failure else None
            return ABORTED if failed is None else failed
        return self.status


def leave_after(conns: list[socket.socket], timeout: float) -> None:
    """Tell each member it may go (the end of the connection), then wait until each has gone
    (its end of the connection closes as its process exits), at most timeout seconds."""
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.setblocking(True)
            conn.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + timeout
    waiting = list(conns)
    while waiting and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select(waiting, [], [], left)
        for conn in readable:
            try:
                gone = not conn.recv(4096)
            except OSError:
                gone = True
            if gone:
                waiting.remove(conn)
    for conn in conns:
        conn.close()
