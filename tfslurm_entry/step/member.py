"""Any task but rank 0: check in with the head, reach its peers, run the program or server,
end as the head says.

A member connects to the head and says hello; once every task has, a node's first task checks
the TensorFlow ports of its node's peers (reach.py) and reports; when no check can reach its
own port any more it frees it ("release"), and only when every task has done so ("start") does
it start its program or server: a step whose tasks cannot reach each other stops before
anything runs, and no program meets a port still answering for the check. It ends when its
program ends (and tells the head), when the head says "exit 0" (a server, once the chief is
done) or "abort" (another task failed), or when the head is gone or never answers: without rank
0 the step cannot finish anyway. A worker's server that dies is restarted in place first, and
the head hears of it only once the restarts are used up.

Slurm's notice (notice.py) may come at any point: the member tells the head, gives its program
its SIGTERM, and once its program has ended (saved) it stays until the head closes the
connection, so that no task leaves while another still saves (with srun --kill-on-bad-exit,
the first task to exit non-zero would have Slurm kill the rest). A server is left running: the
chief's program saves from the ps, and the chief's end stops it.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from ..log import Log
from .dial import Channel, check_in, connect
from .event import Event
from .notice import Signals, name, slurm_signals_whole_step
from .outcome import ABORTED, TRANSIENT, Failure, describe
from .program import Command, Program, ProgramEnded
from .protocol import (
    Abort,
    Done,
    Ended,
    Exit,
    Heard,
    Hello,
    Node,
    Other,
    OtherVersion,
    Probe,
    Reached,
    Refusal,
    Relay,
    Release,
    Released,
    RemoteProtocolError,
    Start,
)
from .reach import MIN_PROBE_S, Reach
from .secret import HOW_TO_GET_ONE, NO_SECRET, Secret


class Seat(NamedTuple):
    """A member's place in the step: who it is, where rank 0 listens, and what it runs."""

    rank: int
    host: str
    address: str
    """rank 0's control address"""
    step: str
    """JOB.STEP, which the head checks (control.py)"""
    size: int
    """the step's task count"""
    timeout: float
    """how long to wait for rank 0 to answer"""
    save_timeout: float
    """after Slurm's notice, how long to wait for the head once the program has ended"""
    command: Command | None = None
    """what it runs once every task has checked in; None: nothing (a bench's member)"""
    server: str | None = None
    """the program is this task's TensorFlow server ("worker 1 server"), which runs until the
    head says the chief has ended"""
    restarts: int = 0
    """how often a server that dies is started again in place before the head hears of it"""
    own_address: str | None = None
    """this node's address on --network's interface or subnet, sent with the hello"""
    learn: Callable[[Mapping[str, str]], None] | None = None
    """given every node's address from the head, before the reach check (they go into the
    program's TF_CONFIG, its environment, and the reach targets)"""
    secret: Secret = NO_SECRET
    """what the hello proves to the head (secret.py)"""

    @property
    def me(self) -> str:
        return f"rank {self.rank} on {self.host}"


class Signalled(Event):
    """Slurm's notice reached this task: signum."""

    signum: int


class HeadGone(Event):
    """Rank 0's connection closed before its last line."""


class Garbled(Event):
    """Rank 0 said something that is not its next line in the step's conversation."""

    error: RemoteProtocolError


class Waited(Event):
    """After the notice, the wait for the head to close the connection passed."""


# What a member's loop handles: the head's lines, its program's end, Slurm's notice.
MemberEvent = (
    Probe
    | Release
    | Start
    | Relay
    | Exit
    | Abort
    | Other
    | Refusal
    | HeadGone
    | Garbled
    | Signalled
    | Waited
    | ProgramEnded
)


def run_member(seat: Seat, log: Log, reach: Reach) -> int:
    """Check in with the head, then run the seat's command; this task's exit status. reach:
    this task's side of the start-up check (its port's guard, its peers)."""
    events: queue.SimpleQueue = queue.SimpleQueue()  # put() is safe in a signal handler
    signals = Signals(lambda signum: events.put(Signalled(signum)), slurm_signals_whole_step())
    signals.install()
    deadline = time.monotonic() + seat.timeout
    conn = connect(seat.address, seat.timeout)
    hello = Hello(seat.step, seat.size, seat.rank, address=seat.own_address)
    channel = None if conn is None else Channel(conn, "member")
    why = f"rank 0's control address {seat.address} did not answer within {seat.timeout:.0f} s"
    try:
        checked = channel is not None and check_in(
            channel, hello, seat.secret, deadline - time.monotonic()
        )
    except RemoteProtocolError as err:
        checked, why = False, unreadable(seat.address, err)
    if not checked:
        if channel is not None:
            channel.close()
        reach.release()
        log(f"{seat.me}: {why}; stopping, exiting with {ABORTED}")
        return ABORTED
    with channel:
        member = Member(seat, log, reach, channel, signals, events.put)
        reader = threading.Thread(target=_read_head, args=(channel, events, member.nodes))
        reader.daemon = True
        reader.start()
        while member.status is None:
            member.handle(events.get())
    return member.status


def unreadable(address: str, err: RemoteProtocolError) -> str:
    """What a member says of a rank 0 it cannot understand: another version of the kit, or
    not the kit at all."""
    if isinstance(err, OtherVersion):
        return (
            f"rank 0 at {address} {err.why}: every task of a step must run the same kit (the "
            "same image or installation)"
        )
    return (
        f"rank 0 at {address} said what this task cannot read ({err}): not a rank 0 of this "
        "kit, or one of another version"
    )


class Member:
    """What a member does on each event (run_member's loop): the head's lines, its program's
    end, Slurm's notice. status: this task's exit status, once it is decided."""

    def __init__(
        self,
        seat: Seat,
        log: Log,
        reach: Reach,
        channel: Channel,
        signals: Signals,
        post: Callable[[MemberEvent], None],
    ) -> None:
        self.seat, self.log, self.reach, self.channel = seat, log, reach, channel
        self.signals, self.post = signals, post
        self.nodes: dict[str, str] = {}
        """every node's address on --network, from the head's lines (_read_head fills it)"""
        self.program: Program | None = None
        self.status: int | None = None
        self.used = 0  # server restarts
        self.ended: int | None = None  # the program's status, once it ended after a notice
        self.told_notice = False  # the notice's line is said once
        self.learned = False  # the nodes' addresses are in the plan

    def handle(self, event: MemberEvent) -> None:
        seat = self.seat
        match event:
            case Signalled(signum):
                self.channel.send(Heard(seat.rank, signum))
                self._noticed(signum)
            case Relay():  # the head heard it first
                self._noticed(None)
            case Probe(seconds):
                self._learn()
                self.channel.send(Reached(seat.rank, self.reach.check(max(seconds, MIN_PROBE_S))))
            case Release():
                self.reach.release()
                self.channel.send(Released(seat.rank))
            case Start():
                self.reach.release()
                self._learn()
                if self.signals.notice is not None:  # Slurm is stopping the step: nothing to save
                    self._program_ended(128 + self.signals.notice.signum)
                elif seat.command is not None:
                    self.program = self._start(seat.command)
            case ProgramEnded(status):
                self._program_ended(status)
            case _:
                self.reach.release()
                self._final(event)

    def _learn(self) -> None:
        """Every node's address from the head's lines, into this task's plan, once: before
        its check (a node's first task) or its start (the others, which hear no probe)."""
        if self.seat.learn is not None and not self.learned:
            self.learned = True
            self.seat.learn(self.nodes)

    def _start(self, command: Command) -> Program:
        stop = signal.SIGKILL if self.seat.server else signal.SIGTERM  # servers ignore TERM
        program = Program(
            command,
            lambda status: self.post(ProgramEnded(status)),
            self.seat.me,
            self.log,
            stop_signal=stop,
        )
        self.signals.target = program.send
        return program

    def _noticed(self, signum: int | None) -> None:
        """Slurm's notice, to this task (signum) or relayed by the head (None): the program
        gets its SIGTERM; a server keeps serving until the chief has ended. The first one is
        said in one line."""
        if not self.told_notice:
            self.told_notice = True
            self.log(f"{self.seat.me}: {self._notice_line(signum)}")
        if signum is None:
            self.signals.relayed()
        if self.program is not None and self.seat.server is None:
            self.signals.deliver(signum)

    def _notice_line(self, signum: int | None) -> str:
        heard = (
            f"Slurm's notice ({name(signum)}) reached this task"
            if signum is not None
            else "rank 0 relayed Slurm's notice (another task heard it first)"
        )
        if self.program is None:
            return f"{heard} before its program started; it will not start"
        if self.seat.server is not None:
            return f"{heard}; its {self.seat.server} serves on until the chief has saved"
        return f"{heard}; its program gets SIGTERM to save, and this task waits for the step"

    def _program_ended(self, status: int) -> None:
        seat = self.seat
        noticed = self.signals.notice is not None
        if self.ended is not None:
            return
        if seat.server and not noticed and self.used < seat.restarts:
            self.used += 1
            self.log(
                f"{seat.me}: {seat.server} ended with {describe(status)}; restarting it in "
                f"place (restart {self.used} of {seat.restarts})"
            )
            self.program = self._start(seat.command)
            return
        self.channel.send(Done(seat.rank, status))
        if noticed:  # stay until the head has seen every program end (or gives up)
            self.ended = status
            self._wait_for_head()
            return
        if seat.server is not None:
            after = f" after {self.used} restarts" if self.used else ""
            self.log(f"{seat.me}: {seat.server} ended with {describe(status)}{after}; told rank 0")
        elif status != 0:
            self.log(f"{seat.me}: program failed with {describe(status)}; told rank 0")
        self.status = status

    def _wait_for_head(self) -> None:
        """After a notice, the program has ended: the head closes the connection once every
        program has (its last line, or none); at most save_timeout from now."""
        wait = threading.Timer(self.seat.save_timeout, self.post, (Waited(),))
        wait.daemon = True
        wait.start()

    def _final(self, event: Exit | Abort | Other | Refusal | HeadGone | Garbled | Waited) -> None:
        """The head's last line, or its end: this task's status."""
        seat, program = self.seat, self.program
        if self.ended is not None:  # after a notice: the head is done with the step
            from .preempted import task_status  # rank 0's module: only this case needs it

            self.status = task_status(self.ended)
            return
        if isinstance(event, Exit):  # only servers hear it: they run until told
            if program is not None:
                program.stop()
            self.log(f"{seat.me}: chief ended with exit 0; exiting with 0")
            self.status = 0
            return
        if isinstance(event, Other):
            self.log(
                f"{seat.me}: {seat.address} is the control port of another step (job.step "
                f"{event.step} of {event.size} tasks), not of this one ({seat.step}): the two "
                f"steps' ports collide; stopping, exiting with {TRANSIENT} (a requeue or a new "
                "submission gets other ports)"
            )
            self.status = TRANSIENT
        elif isinstance(event, Refusal):
            self.log(
                f"{seat.me}: rank 0 refused this task's check-in: its proof of the step's secret "
                f"({seat.secret.source}) is not rank 0's; every task of a step needs the same "
                f"one: {HOW_TO_GET_ONE}; stopping, exiting with {ABORTED}"
            )
            self.status = ABORTED
        elif self.signals.notice is not None:
            self.status = 128 + self.signals.notice.signum  # stopped by Slurm before it ran
        elif isinstance(event, Abort):
            self.log(f"{seat.me}: stopping: {Failure.of(event)}; exiting with {ABORTED}")
            self.status = ABORTED
        elif isinstance(event, Garbled):
            said = unreadable(seat.address, event.error)
            self.log(f"{seat.me}: {said}; stopping, exiting with {ABORTED}")
            self.status = ABORTED
        else:
            self.log(
                f"{seat.me}: lost rank 0's control connection (rank 0 killed or its node "
                f"lost); stopping, exiting with {ABORTED}"
            )
            self.status = ABORTED
        if program is not None:
            program.stop()


def _read_head(channel: Channel, events: queue.SimpleQueue, nodes: dict[str, str]) -> None:
    """The head's lines, as events: probe (after the nodes' addresses, into `nodes`), release,
    start and notice, then the last one: exit, abort, other, refused, or HeadGone (the
    connection closed) or Garbled (a line that is not the head's next)."""
    while True:
        try:
            message = channel.next(None)
        except RemoteProtocolError as err:
            events.put(Garbled(err))
            return
        match message:
            case Node(host, address):
                nodes[host] = address
            case Probe() | Release() | Start() | Relay():
                events.put(message)
            case Exit() | Abort() | Other() | Refusal():
                events.put(message)
                return
            case Ended():
                events.put(HeadGone())
                return
