"""A member's decisions in process, in milliseconds: step/member.py's Member driven with the
events its loop gets (the head's lines, Slurm's notice, the connection's end), over a socket
pair whose far end reads what it said as rank 0 would (protocol.Connection). No program runs
(the seat's command is None): what only processes prove is in test_supervision.py."""

from __future__ import annotations

import signal
import socket
import threading

import pytest

from tfslurm_entry.step import dial
from tfslurm_entry.step.member import Garbled, HeadGone, Member, Seat, Signalled, run_member
from tfslurm_entry.step.notice import Signals
from tfslurm_entry.step.outcome import ABORTED, TRANSIENT
from tfslurm_entry.step.protocol import (
    KIT,
    PROTOCOL,
    Abort,
    Challenge,
    Connection,
    Done,
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
    RemoteProtocolError,
    Start,
)
from tfslurm_entry.step.reach import Reach

STEP = "4242.0"
NONCE = "0d" * 16


class Seated:
    """A member checked in over a socket pair; `heard()`: what it said since, as rank 0 reads
    it; `lines`: what it logged."""

    def __init__(self, server: str | None = None) -> None:
        self.ours, self.far = socket.socketpair()
        self.head = Connection("head")
        self.channel = channel = dial.Channel(self.ours, "member")
        self.far.sendall(self.head.send(Challenge.now(NONCE)))
        assert isinstance(channel.next(1), Challenge)
        channel.send(Hello(STEP, 3, 2))
        self.seat = Seat(2, "c2", "c0:12003", STEP, 3, 5.0, 0.2, server=server)
        self.lines: list[str] = []
        self.posted: list[object] = []
        self.signals = Signals(lambda signum: self.posted.append(Signalled(signum)), False)
        self.member = Member(
            self.seat,
            self.lines.append,
            Reach(None, [], STEP),
            channel,
            self.signals,
            self.posted.append,
        )
        assert self.heard() == [Hello(STEP, 3, 2)]

    def hear(self, event: object) -> None:
        """The member handles event; the head's start-up lines come over the socket pair first,
        so that its replies answer lines its connection has seen (protocol.Dialect.answers)."""
        if isinstance(event, Probe | Release | Start):
            self.far.sendall(self.head.send(event))
            event = self.channel.next(1)
        self.member.handle(event)

    def heard(self) -> list[object]:
        self.far.settimeout(0.05)
        data = b""
        try:
            while chunk := self.far.recv(4096):
                data += chunk
        except TimeoutError:  # nothing more said, the connection still open
            pass
        return self.head.events(data) if data else []

    def close(self) -> None:
        self.ours.close()
        self.far.close()


@pytest.fixture
def seated():
    made: list[Seated] = []

    def make(**kwargs) -> Seated:
        made.append(Seated(**kwargs))
        return made[-1]

    yield make
    for one in made:
        one.close()


def test_the_start_up_is_answered_line_by_line(seated):
    s = seated()
    s.hear(Probe(1.0))
    assert s.heard() == [Reached(2, None)]
    s.hear(Release())
    assert s.heard() == [Released(2)]
    s.hear(Start())
    assert s.heard() == [] and s.member.status is None


def test_a_server_stops_when_the_chief_has_ended_well(seated):
    s = seated(server="worker 1 server")
    for event in (Probe(1.0), Release(), Start(), Exit(0)):
        s.hear(event)
    assert s.member.status == 0
    assert s.lines == ["rank 2 on c2: chief ended with exit 0; exiting with 0"]


@pytest.mark.parametrize(
    ("event", "status", "line"),
    [
        (
            Abort(1, "c1", 3),
            ABORTED,
            f"rank 2 on c2: stopping: rank 1 on c1 failed with exit 3; exiting with {ABORTED}",
        ),
        (
            Other("4243.0", 8),
            TRANSIENT,
            "rank 2 on c2: c0:12003 is the control port of another step (job.step 4243.0 of 8 "
            "tasks), not of this one (4242.0)",
        ),
        (Refusal(), ABORTED, "rank 2 on c2: rank 0 refused this task's check-in"),
        (
            HeadGone(),
            ABORTED,
            "rank 2 on c2: lost rank 0's control connection (rank 0 killed or its node lost)",
        ),
        (
            Garbled(RemoteProtocolError("a start line out of turn from the head", "start")),
            ABORTED,
            "rank 2 on c2: rank 0 at c0:12003 said what this task cannot read (a start line out "
            "of turn from the head: 'start'): not a rank 0 of this kit, or one of another version",
        ),
    ],
    ids=["abort", "other", "refused", "gone", "garbled"],
)
def test_each_way_the_head_ends_the_conversation_is_one_line_and_a_status(
    seated, event, status, line
):
    s = seated()
    s.hear(event)
    assert s.member.status == status
    assert len(s.lines) == 1 and s.lines[0].startswith(line)


def test_slurms_notice_is_told_to_rank_0_and_said_once(seated):
    s = seated()
    s.hear(Probe(1.0))
    s.hear(Signalled(int(signal.SIGTERM)))
    s.hear(Relay())  # rank 0 relays another task's notice too
    s.hear(Signalled(int(signal.SIGUSR1)))
    assert s.heard() == [Reached(2, None), Heard(2, 15), Heard(2, 10)]
    assert s.lines == [
        "rank 2 on c2: Slurm's notice (SIGTERM) reached this task before its program started; "
        "it will not start"
    ]


def test_a_notice_before_the_start_ends_the_task_without_a_program(seated):
    s = seated()
    s.hear(Relay())
    for event in (Probe(1.0), Release(), Start()):
        s.hear(event)
    assert s.heard()[-1] == Done(2, 143)  # stopped by Slurm before it ran
    assert s.member.status is None  # it stays until rank 0 closes the connection
    s.hear(HeadGone())
    assert s.member.status == 143
    assert s.lines[0].startswith("rank 2 on c2: rank 0 relayed Slurm's notice")


def test_after_its_programs_end_a_noticed_member_gives_up_on_rank_0_after_the_save_timeout(
    seated,
):
    s = seated()
    s.signals._handle(signal.SIGTERM, None)  # as Slurm's SIGTERM would: it posts the event
    s.hear(s.posted.pop())
    for event in (Probe(1.0), Release(), Start()):
        s.hear(event)
    assert s.heard() == [Heard(2, 15), Reached(2, None), Released(2), Done(2, 143)]
    threading.Event().wait(0.4)  # the seat's save timeout: 0.2 s
    assert [type(e).__name__ for e in s.posted] == ["Waited"]
    s.hear(s.posted[0])
    assert s.member.status == 143


def _rank_0_saying(first: bytes) -> tuple[socket.socket, threading.Thread]:
    """A listener that answers one connection with `first`, then holds it."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        conn.sendall(first)
        conn.recv(4096)
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


@pytest.mark.parametrize(
    ("first", "said"),
    [
        (
            b"challenge 0d0d 1 0.0.9\n",
            f"rank 0 at {{}} speaks protocol 1 (tfslurm-entry 0.0.9), not this task's protocol "
            f"{PROTOCOL} (tfslurm-entry {KIT}): every task of a step must run the same kit (the "
            "same image or installation); stopping, exiting with " + str(ABORTED),
        ),
        (
            b"SSH-2.0-OpenSSH_9.2\r\n",
            "rank 0 at {} said what this task cannot read (not a line of a step's conversation: "
            "'SSH-2.0-OpenSSH_9.2\\r'): not a rank 0 of this kit, or one of another version; "
            "stopping, exiting with " + str(ABORTED),
        ),
    ],
    ids=["another-version", "not-the-kit"],
)
def test_a_member_facing_a_rank_0_that_speaks_otherwise_says_so_in_one_line(first, said):
    """Not "lost rank 0's control connection": rank 0 is there, and says something else."""
    server, thread = _rank_0_saying(first)
    address = f"127.0.0.1:{server.getsockname()[1]}"
    lines: list[str] = []
    seat = Seat(1, "c1", address, STEP, 2, 5.0, 5.0)
    with server:
        status = run_member(seat, lines.append, Reach(None, [], STEP))  # signals: not main
    thread.join(5)
    assert status == ABORTED
    assert lines == [f"rank 1 on c1: {said.format(address)}"]
