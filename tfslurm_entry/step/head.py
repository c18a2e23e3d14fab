"""Rank 0 (the head): run the program and supervise the step, so that its tasks end together.

Without it a finished parameter-server job sits in its allocation until the time limit (ps and
worker servers only ever `join()`), and when one task dies the others wait forever on
collectives or RPCs unless the user remembered `srun --kill-on-bad-exit=1`. So rank 0's
entrypoint runs its program as a child and hears from every member over the control
connections (control.py). Every decision is one log line naming the rank, host and reason.

The head's work, one part each:

- CheckIn: every member must connect within the timeout; one that does not has failed.
- Members: the connection of each member still running, and the head's one line to each
  ("exit 0" when the chief is done, or the abort); once the step has failed the head stays to
  tell members that connect late, instead of leaving them to run until their own timeout.
- Losses: a lost worker is not a failure in a parameter-server step that allows restarts:
  the ClusterCoordinator runs its steps on the other workers, so the head logs the loss and
  goes on while the chief, every ps and at least one worker remain.
- Tally: rank 0's program's status, the first failure, and when programs ended well; from it
  the task's exit status and the step's verdict (outcome.py).

A slow end is not a failure: when every other task has ended well and rank 0's program is
still running (a chief evaluating, writing metrics), the head waits for it without limit, as
Slurm itself would. It creates the file named by `others_ended` at that moment, so that the
program can leave last (tfslurm_entry/program_end.py: TensorFlow's coordination service lives
in rank 0's process, and a task still running when it goes logs errors).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..log import Log, timestamp
from ..task.program import Command, Program, ProgramEnded
from .control import Arrived, ControlServer, Lost, Stranger
from .notice import Notice, Signals, slurm_signals_whole_step
from .outcome import ABORTED, GONE, UNREACHED, Failure, verdict, write_result
from .preempted import Preempted, task_status
from .protocol import (
    Done,
    Exit,
    Heard,
    Message,
    Node,
    Probe,
    Reached,
    Relay,
    Release,
    Released,
    Start,
    Unreached,
)
from .reach import MIN_PROBE_S, PROBE_S, Reach, describe

# How much longer than the check's window rank 0 waits for a task's reach report: the last
# attempt's answer (reach.ANSWER_S) and the report's way back.
REPORT_SLACK_S = 7.0
# After Slurm's notice, how long rank 0 waits for the members it releases to exit first.
LEAVE_LAST_S = 5.0


@dataclass(frozen=True)
class Late:
    """The check-in timeout passed and this member never said hello."""

    rank: int


@dataclass(frozen=True)
class Unchecked:
    """The reach reports' deadline passed without this task's."""

    rank: int


@dataclass(frozen=True)
class Unreleased:
    """The deadline passed and this member had not freed its port."""

    rank: int


@dataclass(frozen=True)
class Unended:
    """After Slurm's notice, the wait for every program to save and end passed."""


@dataclass(frozen=True)
class Step:
    """The step as rank 0 supervises it."""

    host: str
    port: int
    """rank 0's control port"""
    members: Mapping[int, str]
    """every other task: rank -> host"""
    servers: bool
    """the members are parameter-server ps/worker servers, which run until told; else they run
    programs of their own and report when those end"""
    timeout: float
    """how long members have to check in"""
    others_ended: Path | None = None
    """a file created once every member's program has ended with exit 0 (after Slurm's
    notice: however it ended)"""
    notice_file: Path | None = None
    """a file created when Slurm's notice reaches the step: rank 0's program then leaves last
    whatever its status (program_end.py)"""
    expendable: Mapping[int, str] = field(default_factory=dict)
    """the members the step can lose (worker rank -> "worker I"), as long as one remains"""
    result_file: Path | None = None
    """where to write the step's verdict for the batch script"""
    name: str = "-"
    """JOB.STEP: members of other steps that reach this port are turned away"""
    address: str | None = None
    """rank 0's node address on --network's interface or subnet: every node's is exchanged"""
    learn: Callable[[Mapping[str, str]], None] | None = None
    """given every node's address (Slurm's name -> address), before the reach check: rank 0's
    TF_CONFIG and reach targets on them"""
    save_timeout: float = 300.0
    """after Slurm's notice, how long rank 0 waits for every program to save and end"""


def run_head(command: Command, step: Step, log: Log, listener: socket.socket, reach: Reach) -> int:
    """Hear every member check in and reach its peers, run the program, end the step
    together; this task's status. listener: the control port, already listening (preflight
    holds it from the start). reach: rank 0's own side of the start-up check (reach.py)."""
    with ControlServer(listener, step.name, len(step.members) + 1) as control:
        signals = Signals(lambda signum: control.post(Heard(0, signum)), slurm_signals_whole_step())
        signals.install()

        def start_program() -> Program:
            ended = lambda status: control.post(ProgramEnded(status))  # noqa: E731
            program = Program(command, ended, head.me, log)
            signals.target = program.send
            return program

        head = Head(control, step, log, reach, start_program, signals)
        while head.going:
            for event in control.poll(head.wait_at_most()) or [head.late()]:
                head.handle(event)
        head.release_held()
    status = head.finish()
    if step.result_file is not None:
        if head.preempted is not None:
            line = head.preempted.verdict()
        else:
            line = verdict(status, head.tally.failure, head.losses.lost)
        write_result(step.result_file, line, log)
    return status


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

    def late(self) -> Late:
        """The event for the timeout passing: poll() comes back empty only when it had one,
        which it has only while members are missing."""
        return Late(min(self.waiting))

    def give_up(self, rank: int) -> None:
        self.waiting.discard(rank)


@dataclass
class Starting:
    """After check-in, before the programs start: the reach reports still awaited (rank 0's
    own included), then the members whose ports are not free yet, and until when."""

    waiting: set[int] = field(default_factory=set)
    deadline: float = 0.0
    window: float = 0.0
    """how long each task may try its peers"""
    releasing: bool = False
    """every task reached its peers; waiting for the members to free their ports"""

    def wait_at_most(self) -> float | None:
        if not self.waiting:
            return None
        return max(self.deadline - time.monotonic(), 0.01)


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
        for conn in self.running.values():
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


class Head:
    """What rank 0 does on each event (run_head's loop): hello, reach, done and lost from
    members, its own reach report and program's end, and a member late past the timeout."""

    def __init__(
        self,
        control: ControlServer,
        step: Step,
        log: Log,
        reach: Reach,
        start_program: Callable[[], Program],
        signals: Signals,
    ) -> None:
        self.step, self.log = step, log
        self.signals = signals
        self.preempted: Preempted | None = None
        self.me = f"rank 0 on {step.host}"
        self.control, self.reach, self.start_program = control, reach, start_program
        self.program: Program | None = None
        self.checkin = CheckIn(set(step.members), control.listening, step.timeout)
        self.starting = Starting()
        self.members = Members(control)
        self.losses = Losses(dict(step.expendable))
        self.tally = Tally()
        if not self.checkin.waiting:
            self._probe()

    @property
    def going(self) -> bool:
        if self.preempted is not None:  # Slurm stops every task: none is waited for to start
            if self.program is None:
                return self.tally.failure is None
            return self.tally.status is None or len(self.members) > 0
        # After a failure, keep answering until every member has checked in (or the timeout
        # has passed): one that connects late must hear the abort, not find no one listening
        # and run until its own timeout.
        if self.checkin.waiting:
            return True
        if self.program is None:  # starting, or stopped before anything started
            return self.tally.failure is None
        if self.tally.status is None:
            return True
        return self.tally.failure is None and len(self.members) > 0

    def wait_at_most(self) -> float | None:
        """How long the next poll may wait: until check-in's or the reach reports' deadline,
        or after Slurm's notice, the end of the wait for every program."""
        if self.preempted is not None:
            return self.preempted.wait_at_most()
        if self.checkin.waiting:
            return self.checkin.wait_at_most()
        return self.starting.wait_at_most()

    def late(self) -> Late | Unchecked | Unreleased | Unended:
        """The event for a deadline passing (poll() came back empty)."""
        if self.preempted is not None:
            return Unended()
        if self.checkin.waiting:
            return self.checkin.late()
        rank = min(self.starting.waiting)
        return Unreleased(rank) if self.starting.releasing else Unchecked(rank)

    def handle(self, event: object) -> None:
        if isinstance(event, Heard):
            self._noticed(event.rank, event.signum)
        elif self.preempted is not None and isinstance(event, ProgramEnded | Done | Lost | Unended):
            self._ended_after_notice(event)
        elif (failed := self._failure(event)) and self.tally.failure is None:
            chief_running = self.program is not None and self.tally.status is None
            if not isinstance(event, Late) and self.losses.can_lose(failed.rank, chief_running):
                self.log(f"{self.me}: {self.losses.lose(failed)}")
            else:
                self._fail(failed)

    def _failure(self, event: object) -> Failure | None:
        """Act on an event before Slurm's notice; the failure it is, if it is one."""
        match event:
            case ProgramEnded(status):
                return self._program_ended(status)
            case Arrived(rank, conn):
                self._hello(rank, conn)
            case Reached(rank, unreached):
                return self._reached(rank, unreached)
            case Released(rank):
                self._released(rank)
            case Unchecked(rank) | Unreleased(rank):
                self.starting.waiting.clear()
                what = "report reaching its peers'" if isinstance(event, Unchecked) else "free its"
                window = self.starting.window + REPORT_SLACK_S
                why = f"did not {what} TensorFlow ports within {window:.0f} s"
                return Failure(rank, self._host(rank), None, why)
            case Done(rank, status) if rank in self.members:
                self.members.drop(rank)
                if status != 0:
                    return Failure(rank, self.step.members[rank], status)
                self._ended_well()
            case Lost(rank) if rank in self.members:
                self.members.drop(rank)
                return Failure(rank, self.step.members[rank], None, GONE)
            case Stranger(hello):
                self.log(
                    f"{self.me}: turned away rank {hello.rank} of another step (job.step "
                    f"{hello.step} of {hello.size} tasks) that reached this step's control "
                    "port: the two steps' ports collide"
                )
            case Late(rank):
                self.checkin.give_up(rank)
                why = (
                    f"did not connect to rank 0 within {self.step.timeout:.0f} s (never "
                    f"started, or cannot reach {self.step.host})"
                )
                return Failure(rank, self.step.members[rank], None, why)
        return None

    def _hello(self, rank: int, conn: socket.socket) -> None:
        if not self.checkin.arrived(rank):
            self.members.refuse(conn)  # a rank this step does not have, or a second hello
            return
        if self.tally.failure:
            self.members.tell(conn, self.tally.failure.message())
            return
        self.members.add(rank, conn)
        if not self.checkin.waiting:
            took = time.monotonic() - self.checkin.listening
            self.log(
                f"{self.me}: all {len(self.step.members) + 1} tasks checked in {took:.2f} s "
                "after rank 0 listened"
            )
            self._probe()

    def _probe(self) -> None:
        """Every task checked in: each checks its peers' TensorFlow ports (reach.py), rank 0
        in a thread of its own, within what is left of the check-in timeout (at least
        MIN_PROBE_S, at most PROBE_S)."""
        left = self.checkin.listening + self.step.timeout - time.monotonic()
        window = min(max(left, MIN_PROBE_S), PROBE_S)
        if self.step.address is not None and not self._exchange():
            return
        self.starting = Starting(
            {0, *self.members.running}, time.monotonic() + window + REPORT_SLACK_S, window
        )
        self.members.say_all(Probe(window))
        threading.Thread(
            target=lambda: self.control.post(Reached(0, self.reach.check(window))), daemon=True
        ).start()

    def _exchange(self) -> bool:
        """Every node's address on the chosen network, from the members' hellos, to every
        member ("node HOST ADDR" lines) and to rank 0's own plan; False if a member sent none
        (then the step is stopped)."""
        addresses = self.control.addresses
        silent = [rank for rank in self.members.running if rank not in addresses]
        if silent:
            self._fail(
                Failure(
                    silent[0],
                    self.step.members[silent[0]],
                    None,
                    "checked in without its address on --network (every task must "
                    "run the same tfslurm-entry with the same options)",
                )
            )
            return False
        nodes = {self.step.host: self.step.address}
        nodes.update((self.step.members[rank], addresses[rank]) for rank in self.members.running)
        lines: list[Message] = [Node(host, address) for host, address in nodes.items()]
        for conn in self.members.running.values():
            self.control.say_block(conn, lines)
        if self.step.learn is not None:
            self.step.learn(nodes)
        return True

    def _reached(self, rank: int, unreached: Unreached | None) -> Failure | None:
        """A task's reach report. After the last good one no task probes any more: every task
        frees its port (a guard still answering there would meet the first program that
        connects), and once every member has, the programs start."""
        if rank not in self.starting.waiting or self.starting.releasing:
            return None
        self.starting.waiting.discard(rank)
        if unreached is not None:
            why = describe(unreached, self.starting.window)
            return Failure(rank, self._host(rank), UNREACHED, why)
        if not self.starting.waiting and self.tally.failure is None:
            self.starting.releasing = True
            self.starting.waiting = set(self.members.running)
            self.members.say_all(Release())
            self.reach.release()
            self._released(None)
        return None

    def _released(self, rank: int | None) -> None:
        """A member freed its port; the last one starts the programs."""
        if not self.starting.releasing:
            return
        self.starting.waiting.discard(rank)
        if not self.starting.waiting and self.tally.failure is None and self.program is None:
            self.members.say_all(Start())
            self.program = self.start_program()

    def _host(self, rank: int) -> str:
        return self.step.host if rank == 0 else self.step.members[rank]

    def _program_ended(self, status: int) -> Failure | None:
        self.tally.status = status
        if status != 0:
            return Failure(0, self.step.host, status)
        self.tally.ended_well()
        if self.step.servers:
            lost = f" ({len(self.losses.lost)} lost on the way)" if self.losses.lost else ""
            self.log(
                f"{self.me}: chief program ended with exit 0 after {self.program.seconds:.1f} s "
                f"(at {timestamp(self.tally.ends[-1])}); telling {len(self.members)} servers to "
                "stop" + lost
            )
            self.members.tell_all(Exit(0))
        elif self.checkin.waiting or len(self.members):
            others = len(self.checkin.waiting) + len(self.members)
            self.log(
                f"{self.me}: program ended with exit 0 after {self.program.seconds:.1f} s; "
                f"waiting for {others} other tasks"
            )
        return None

    def _ended_well(self) -> None:
        self.tally.ended_well()
        everyone = not self.checkin.waiting and len(self.members) == 0
        if everyone and self.tally.status is None and self.step.others_ended:
            self.step.others_ended.touch()  # rank 0's program may now leave last

    def _fail(self, failure: Failure) -> None:
        self.tally.failure = failure
        still = len(self.members) + (self.program is not None and self.tally.status is None)
        if self.program is None:
            self.log(f"{self.me}: {failure}; stopping the step before any program started")
        else:
            self.log(f"{self.me}: {failure}; stopping the step ({still} tasks still running)")
        self.members.tell_all(failure.message())
        self.reach.release()
        if self.program is not None:
            self.program.stop()

    def _noticed(self, rank: int, signum: int) -> None:
        """Slurm's notice, to rank 0 (rank 0) or to a member (which reported it): every
        program gets its SIGTERM once (members their own, or the relay), nobody is stopped;
        before any program started, the step stops. After a failure the step is being stopped
        already (Slurm's SIGTERM may be srun --kill-on-bad-exit's own): it stays a failure."""
        if self.tally.failure is not None and self.preempted is None:
            return
        if rank != 0:
            self.signals.relayed()
        if self.preempted is None:
            notice = Notice(signum, time.time()) if rank != 0 else self.signals.notice
            self.preempted = Preempted(notice, time.monotonic() + self.step.save_timeout)
            if self.step.notice_file is not None:
                self.step.notice_file.touch()
            started = self.program is not None
            self.log(self.preempted.started_line(self.me, self.step.save_timeout, started))
            self.reach.release()
            if not started:
                self.tally.failure = Failure(0, self.step.host, 128 + signum, "stopped by Slurm")
                self.members.tell_all(self.tally.failure.message())
                return
            self.members.say_all(Relay())
        self.signals.deliver(signum if rank == 0 else None)

    def _ended_after_notice(self, event: object) -> None:
        """A program that ended after the notice (saved, or stopped by it), or the wait for
        the rest passing: they are stopped now."""
        preempted = self.preempted
        match event:
            case ProgramEnded(status):
                self.tally.status = status
                preempted.end(0, status)
                if self.step.servers:  # the chief has saved: the servers may go
                    self.members.tell_all(Exit(0))
            case Done(rank, status) if rank in self.members:
                preempted.held[rank] = self.members.running.pop(rank)
                self._ended_late(rank, status)
            case Lost(rank) if rank in self.members:
                self.members.drop(rank)
                self._ended_late(rank, None)
            case Unended():
                running = self.tally.status is None and self.program is not None
                preempted.unended = [0] * running + sorted(self.members.running)
                self.members.tell_all(Failure(0, self.step.host, None).message())
                if running:
                    self.program.stop()

    def _ended_late(self, rank: int, status: int | None) -> None:
        """A member's program ended after the notice (status None: the member vanished)."""
        self.preempted.end(rank, status)
        if not self.members.running and self.step.others_ended:
            self.step.others_ended.touch()  # rank 0's program may now leave last

    def release_held(self) -> None:
        """The step has ended: the members held after their programs ended may exit, and
        rank 0 leaves after them (srun --kill-on-bad-exit would otherwise stop a member that
        is still on its way out, and say so)."""
        if self.preempted is not None:
            leave_after(list(self.preempted.held.values()), LEAVE_LAST_S)

    def finish(self) -> int:
        """This task's exit status; for a multi-worker step that ended well, rank 0's last
        line first: the spread of the programs' ends. After Slurm's notice: how the programs
        ended, and rank 0's program's status."""
        if self.preempted is not None:
            self.log(self.preempted.ended_line(self.me, self.step.servers))
            if self.tally.status is not None:
                return task_status(self.tally.status)
            return 128 + self.preempted.notice.signum
        ends = self.tally.ends
        if self.tally.failure is None and self.tally.status == 0 and not self.step.servers:
            self.log(
                f"{self.me}: all {len(self.step.members) + 1} programs ended with exit 0, the "
                f"last at {timestamp(ends[-1])} ({ends[-1] - ends[0]:.1f} s after the first)"
            )
        return self.tally.exit_status()


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
