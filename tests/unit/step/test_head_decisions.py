"""Rank 0's decisions in process, in milliseconds: step/head.py's Head on a real ControlServer
(localhost sockets), with members played by protocol Channels in this process, a stand-in for
rank 0's program, and rank 0's phase checked at each turn. Arrivals, losses, lateness, notices
and each way a program ends; what only processes prove (signals, process groups, real
entrypoints) is in test_supervision.py and test_notice.py."""

from __future__ import annotations

import re
import signal
import socket
import time
from collections.abc import Callable

import pytest

from tfslurm_entry.step import dial
from tfslurm_entry.step.control import ControlServer, listen
from tfslurm_entry.step.head import Head, Phase
from tfslurm_entry.step.inputs import Step
from tfslurm_entry.step.notice import Signals
from tfslurm_entry.step.outcome import ABORTED
from tfslurm_entry.step.program import ProgramEnded
from tfslurm_entry.step.protocol import (
    Abort,
    Done,
    Ended,
    Exit,
    Heard,
    Hello,
    Other,
    Probe,
    Reached,
    Refusal,
    Relay,
    Release,
    Released,
    Start,
)
from tfslurm_entry.step.reach import Reach
from tfslurm_entry.step.secret import NO_SECRET, Secret

NAME = "4242.0"


class StandIn:
    """Rank 0's program as the head sees it: how long it ran, and the signals it was sent."""

    seconds = 1.0

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.stopped = False

    def send(self, signum: int) -> None:
        self.sent.append(signum)

    def stop(self) -> None:
        self.stopped = True


class Rank0:
    """A Head for a step of 1 + len(members) tasks, and `turn()` to run its loop once."""

    def __init__(
        self,
        members: dict[int, str],
        servers: bool = False,
        timeout: float = 5.0,
        secret: Secret = NO_SECRET,
    ) -> None:
        listener = listen(0, len(members))
        self.port, self.secret = listener.getsockname()[1], secret
        self.step = Step(
            "c0", self.port, members, servers, timeout, name=NAME, save_timeout=1.0, secret=secret
        )
        self.control = ControlServer(listener, NAME, len(members) + 1, secret)
        self.lines: list[str] = []
        self.program = StandIn()
        self.signals = Signals(lambda signum: self.control.post(Heard(0, signum)), False)

        def start_program() -> StandIn:
            self.signals.target = self.program.send
            return self.program

        reach = Reach(None, [], NAME)
        self.head = Head(
            self.control, self.step, self.lines.append, reach, start_program, self.signals
        )
        self.members: dict[int, dial.Channel] = {}

    def turn(self, most: float = 0.05) -> None:
        """One pass of run_head's loop, its poll cut short to `most` seconds."""
        wait = self.head.wait_at_most()
        events = self.control.poll(most if wait is None else min(wait, most))
        if not events and wait is not None and wait <= most:  # the deadline passed
            events = [self.head.late()]
        for event in events:
            self.head.handle(event)

    def until(self, done: Callable[[], bool], limit: float = 5.0) -> None:
        deadline = time.monotonic() + limit
        while not done():
            assert time.monotonic() < deadline, f"not reached; rank 0 said {self.lines}"
            self.turn()

    def member(self, rank: int, hello: Hello | None = None, secret: Secret | None = None):
        """A member checked in as rank (with another hello or secret: not kept)."""
        conn = dial.connect(f"127.0.0.1:{self.port}", 5)
        channel = dial.Channel(conn, "member")
        self.turn()  # rank 0 accepts and sends its challenge
        said = hello or Hello(NAME, len(self.step.members) + 1, rank)
        assert dial.check_in(channel, said, secret or self.secret, 5)
        if hello is None and secret is None:
            self.members[rank] = channel
        return channel

    def started(self) -> None:
        """Every member checks in, reaches its peers and frees its port; the programs start.
        (Each member is its node's first task: rank 0 is on c0, the members elsewhere.)"""
        for rank in self.step.members:
            self.member(rank)
        self.until(lambda: self.head.startup.starting.reporting == set(self.step.members))
        for rank, channel in self.members.items():
            assert isinstance(channel.next(5), Probe)
            channel.send(Reached(rank, None))
        self.until(lambda: self.head.startup.starting.reached)
        for rank, channel in self.members.items():
            assert channel.next(5) == Release()
            channel.send(Released(rank))
        self.until(lambda: self.head.phase is Phase.RUNNING)
        for channel in self.members.values():
            assert channel.next(5) == Start()

    def close(self) -> None:
        for channel in self.members.values():
            channel.close()
        self.control.__exit__()


@pytest.fixture
def rank0():
    made: list[Rank0] = []

    def make(members: dict[int, str] | None = None, **kwargs) -> Rank0:
        made.append(Rank0(members or {1: "c1", 2: "c2"}, **kwargs))
        return made[-1]

    yield make
    for one in made:
        one.close()


def test_the_programs_start_only_once_every_task_reached_its_peers_and_freed_its_port(rank0):
    r = rank0()
    assert r.head.phase is Phase.STARTING
    r.started()
    assert r.head.program is r.program and r.head.going


def test_on_one_node_the_members_free_their_ports_at_once_and_the_programs_start_after(rank0):
    """No task of another node checks a one-node step's ports, and rank 0 checks only its own
    name: each member hears release first (no probe), and the programs start once every
    member has freed its port."""
    r = rank0({1: "c0", 2: "c0"})
    r.member(1)
    r.member(2)
    r.until(lambda: r.head.startup.starting.freeing == {1, 2})
    assert [r.members[rank].next(5) for rank in (1, 2)] == [Release(), Release()]
    r.members[1].send(Released(1))
    r.until(lambda: r.head.startup.starting.freeing == {2} and r.head.startup.starting.reached)
    assert r.head.phase is Phase.STARTING and r.head.program is None  # rank 2 holds its port
    r.members[2].send(Released(2))
    r.until(lambda: r.head.phase is Phase.RUNNING)
    assert [r.members[rank].next(5) for rank in (1, 2)] == [Start(), Start()]


def test_a_nodes_second_task_is_not_probed_and_frees_its_port_after_every_report(rank0):
    """Rank 1 checks for both tasks of c1; rank 2's port stays held until every report is in
    (rank 0's check reaches it)."""
    r = rank0({1: "c1", 2: "c1"})
    r.member(1)
    r.member(2)
    r.until(lambda: r.head.startup.starting.reporting == {1})
    assert r.head.startup.starting.held == {1, 2}
    assert isinstance(r.members[1].next(5), Probe)
    r.members[1].send(Reached(1, None))
    r.until(lambda: r.head.startup.starting.reached)
    assert [r.members[rank].next(5) for rank in (1, 2)] == [Release(), Release()]


def test_a_step_whose_programs_all_end_well_ends_with_each_in_its_own_time(rank0):
    r = rank0()
    r.started()
    r.head.handle(ProgramEnded(0))
    assert r.head.phase is Phase.ENDING and r.head.going
    assert r.lines[-1].endswith("waiting for 2 other tasks")
    r.members[1].send(Done(1, 0))
    r.members[2].send(Done(2, 0))
    r.until(lambda: not r.head.going)
    assert r.head.finish() == 0
    assert r.lines[-1].startswith("rank 0 on c0: all 3 programs ended with exit 0")


def test_one_members_failure_stops_the_others_and_rank_0s_program(rank0):
    r = rank0()
    r.started()
    r.members[1].send(Done(1, 3))
    r.until(lambda: r.head.tally.failure is not None)
    assert r.members[2].next(5) == Abort(1, "c1", 3)
    assert r.members[2].next(5) == Ended()  # the abort is rank 0's last line to it
    assert r.program.stopped and r.head.going  # until rank 0's own program has ended
    r.head.handle(ProgramEnded(143))
    assert not r.head.going
    assert r.head.finish() == ABORTED
    assert r.lines[-1].endswith(
        "rank 1 on c1 failed with exit 3; stopping the step (2 tasks still running)"
    )


def test_a_member_lost_while_the_programs_run_fails_the_step(rank0):
    r = rank0()
    r.started()
    r.members.pop(1).close()
    r.until(lambda: r.head.tally.failure is not None)
    assert r.members[2].next(5) == Abort(1, "c1", None)
    assert "rank 1 on c1" in r.lines[-1] and r.head.phase is Phase.ENDING


def test_a_member_that_never_checks_in_is_named_at_the_timeout_and_the_others_told(rank0):
    r = rank0(timeout=0.3)
    r.member(1)
    r.until(lambda: r.head.tally.failure is not None)
    assert r.members[1].next(5) == Abort(2, "c2", None)
    assert "rank 2 on c2 did not connect to rank 0 within 0 s" in r.lines[0]
    assert "stopping the step before any program started" in r.lines[0]
    assert not r.head.going and r.head.program is None


def test_a_member_that_checks_in_after_the_failure_hears_it_at_once(rank0):
    r = rank0({1: "c1", 2: "c2", 3: "c3"})
    r.member(1)
    r.member(2)
    r.members.pop(2).close()  # lost before the start: the step fails now
    r.until(lambda: r.head.tally.failure is not None)
    assert r.head.going  # rank 3 has not checked in: it must hear why
    late = r.member(3)
    r.turn()
    assert late.next(5) == Abort(2, "c2", None)
    assert not r.head.going


def test_slurms_notice_to_one_member_is_relayed_to_every_other_and_saved_through(rank0):
    r = rank0()
    r.started()
    r.members[1].send(Heard(1, int(signal.SIGTERM)))
    r.until(lambda: r.head.phase is Phase.NOTICED)
    assert r.members[2].next(5) == Relay()
    assert r.program.sent == [signal.SIGTERM]  # rank 0's program saves too
    assert r.lines[-1].startswith("rank 0 on c0: Slurm's SIGTERM at ")
    assert r.lines[-1].endswith("waiting up to 1 s for them to save and end")
    r.head.handle(ProgramEnded(0))
    r.members[1].send(Done(1, 0))
    r.members[2].send(Done(2, 0))
    r.until(lambda: not r.head.going)
    assert r.members[1].next(5) == Relay()  # every member hears it: one line, the same
    for rank in (1, 2):  # held until rank 0 lets them go, and gone before it leaves
        r.members.pop(rank).close()
    r.head.release_held()
    assert r.head.preempted.verdict().startswith("preempted")
    assert r.head.finish() == 0


def test_a_notice_before_the_start_stops_the_step_with_nothing_started(rank0):
    r = rank0()
    r.member(1)
    r.member(2)
    r.until(lambda: r.head.startup.starting.reporting == {0, 1, 2})
    r.members[1].send(Heard(1, int(signal.SIGTERM)))
    r.until(lambda: r.head.phase is Phase.NOTICED)
    assert isinstance(r.members[2].next(5), Probe)
    assert r.members[2].next(5) == Abort(0, "c0", 143)
    assert not r.head.going and r.head.program is None


def test_servers_are_told_to_exit_when_the_chief_ends_well(rank0):
    r = rank0(servers=True)
    r.started()
    r.head.handle(ProgramEnded(0))
    assert [r.members[rank].next(5) for rank in (1, 2)] == [Exit(0), Exit(0)]
    assert not r.head.going and r.head.finish() == 0


def test_a_connection_that_speaks_another_language_is_closed_with_one_line(rank0):
    r = rank0()
    stranger = socket.create_connection(("127.0.0.1", r.port))
    stranger.sendall(b"GET / HTTP/1.1\n")
    r.until(lambda: bool(r.lines))
    assert "closed a connection from 127.0.0.1:" in r.lines[0]
    assert "not a line of a step's conversation: 'GET / HTTP/1.1'" in r.lines[0]
    assert r.head.phase is Phase.STARTING and r.head.tally.failure is None
    stranger.close()


def test_a_member_speaking_out_of_turn_fails_the_step_naming_the_line(rank0):
    r = rank0()
    r.member(1).sock.sendall(b"released 1\n")  # before rank 0 said release
    r.until(lambda: r.head.tally.failure is not None)
    said = "rank 1 on c1 said what rank 0 cannot read (a released line before the head's release"
    assert said in r.lines[0]


def test_rank_0_moves_only_along_its_phases():
    head = Head.__new__(Head)
    head.phase = Phase.NOTICED
    with pytest.raises(RuntimeError, match="cannot go from noticed to running"):
        head.enter(Phase.RUNNING)


@pytest.mark.parametrize(("name", "size"), [("77.0", 3), ("4242.0", 5)])
def test_a_member_of_another_step_is_turned_away_and_the_step_goes_on(rank0, name, size):
    """Two steps given the same control port: the stranger neither checks in with nor stops
    this step (it stops itself: test_member_decisions), and its rank stays free."""
    r = rank0()
    stranger = r.member(1, hello=Hello(name, size, 1))
    r.until(lambda: bool(r.lines))
    assert stranger.next(5) == Other(NAME, 3)
    assert r.lines == [
        "rank 0 on c0: turned away rank 1 of another step (job.step "
        f"{name} of {size} tasks) that reached this step's control port: the two steps' ports "
        "collide"
    ]
    stranger.close()
    r.started()


@pytest.mark.parametrize(
    "intruder", [NO_SECRET, Secret(b"7f" * 32, "theirs")], ids=["no-secret", "another-secret"]
)
def test_a_check_in_without_the_steps_secret_is_refused_and_its_rank_stays_free(rank0, intruder):
    """Another user who knows the step, its size and a rank (squeue shows them) but not the
    step's secret checks in first as rank 1: refused with one line naming where it came from;
    the step's own rank 1 checks in after it, and the programs start."""
    r = rank0(secret=Secret(b"5e" * 32, "the step's"))
    impostor = r.member(1, secret=intruder)
    r.until(lambda: bool(r.lines))
    assert impostor.next(5) == Refusal()
    assert re.fullmatch(
        r"rank 0 on c0: refused a check-in as rank 1 from 127\.0\.0\.1:\d+: it did not prove "
        r"the step's secret \(not one of this step's tasks\); the rank stays free for its own "
        r"task",
        r.lines[0],
    ), r.lines
    impostor.close()
    r.started()
    assert len(r.lines) == 2  # and all checked in
