"""The words on the wire between rank 0 (the head) and the other tasks of a step (members): one
small type per message, its line and its parsing, and nothing else (no socket: control.py,
dial.py, the site check and the tests move the lines). Everything else in the package handles
these types.

One line at a time each way, ASCII words separated by spaces. A job's step (head.py, member.py):

    head -> member   "challenge NONCE"          on every connection, first: a fresh nonce
    member -> head   "hello JOB.STEP SIZE RANK PROOF [ADDR]"  its step, the step's task count;
                                                PROOF: HMAC of the nonce and these words with
                                                the step's secret (secret.py; "-": none);
                                                ADDR: its node's address on --network's
                                                interface or subnet (resolve/network.py)
    head -> member   "node HOST ADDR"           with --network an interface or a subnet: each
                                                node's address there, one line per node, first
    head -> member   "probe SECONDS [TIME]"     every task checked in: check your peers'
                                                TensorFlow ports for at most SECONDS (reach.py);
                                                TIME (the site check): rank 0's wall clock
    member -> head   "reach RANK ok"            it reached every one of them
    member -> head   "reach RANK PEER ADDR WHY" it could not reach that one (reach.REASONS)
    head -> member   "release"                  every task reached its peers: free your port
    member -> head   "released RANK"            it did: nothing of the check answers there now
    head -> member   "start"                    every task freed its port: start the program
    member -> head   "notice RANK SIGNAL"       Slurm's notice reached it (notice.py), at any
                                                point; SIGNAL: the signal's number
    head -> member   "notice"                   another task heard Slurm's notice first
    member -> head   "done RANK STATUS"         its program ended (multi-worker tasks); after a
                                                notice, rank 0 closes the connection without a
                                                line once every program has ended
    head -> member   "exit STATUS"              the chief's program ended well (ps/worker servers)
    head -> member   "abort RANK HOST STATUS"   that task failed (STATUS "-": it vanished or never
                                                connected): stop now, exit non-zero
    head -> member   "other JOB.STEP SIZE"      this is another step's rank 0: the member's step
                                                and this one were given the same port
    head -> member   "refused"                  the hello's proof is wrong: not this step's task

The site check (sitecheck/check.py) after its probe:

    member -> head   "report RANK JSON"         {"skew": its clock - TIME, "findings": [...]}
    head -> member   "bye"                      the table is printed: free your port and end

and, before that "bye", rank 0 checks in with the listener `tfslurm-run --site-check` started
where the check was started (sitecheck/outside.py): the listener is the head there, rank 0 the
member (challenge, then hello as rank 0 with its proof), then:

    member -> head   "ports RANK:ADDR ..."      every task's TensorFlow port, its guard holding it
    head -> member   "answered HOST N"          N of them greeted the listener on HOST as their
                                                task

And on a task's TensorFlow port while the start-up check holds it (reach.Guard), to every
peer that connects:

    task -> peer     "tfslurm-port JOB.STEP RANK"

The step's identity in the hello keeps steps that share a node from talking to each other: a
member that reached another step's rank 0 (two steps' ports collide: rare with the default
windows, impossible with ports Slurm reserved) is turned away with "other" and fails at once,
rather than checking in with, or stopping, a stranger. The proof keeps everyone else out: a
hello for this step whose proof is wrong is refused (the connection closed without a line),
and the rank stays free for the task it names.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from enum import Enum
from typing import ClassVar, NamedTuple

from .event import Event

MAX_LINE = 256  # longer lines from a member are not ours: the connection is dropped


class Why(str, Enum):
    """Why a peer's TensorFlow port could not be reached (reach.REASONS says it in words); on
    the wire, its value."""

    TIMEOUT = "timeout"
    REFUSED = "refused"
    UNREACHABLE = "unreachable"
    UNRESOLVED = "unresolved"
    STRANGER = "stranger"


class Unreached(NamedTuple):
    """A peer a task could not reach at its TensorFlow address."""

    peer: int
    address: str
    reason: Why


class Message(Event):
    """One line: its word, then each field in order as one word. A field whose default is None
    is left out when it is None; any other None is "-". Declared as
    `class Done(Message, word="done", sender="member")`: WORD is the line's first word, SENDER
    "member" or "head" (the same word may mean different messages from each)."""

    WORD: ClassVar[str]
    SENDER: ClassVar[str]

    def __init_subclass__(cls, word: str, sender: str, **kwargs: object) -> None:
        cls.WORD, cls.SENDER = word, sender
        super().__init_subclass__(**kwargs)

    def line(self) -> str:
        """The message as sent, without its newline."""
        words = [self.WORD]
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and field.default is None:
                continue
            words.append(
                "-" if value is None else repr(value) if isinstance(value, float) else str(value)
            )
        return " ".join(words)

    @classmethod
    def parse(cls, words: list[str]) -> Message | None:
        """From a line's words (its first one this type's WORD); None if they are not one."""
        kinds, required = _layout(cls)
        values = words[1:]
        if not required <= len(values) <= len(kinds):
            return None
        try:  # a trailing field with a default may be left out: zip stops at the words' end
            return cls(*(_read(kind, word) for kind, word in zip(kinds, values, strict=False)))
        except ValueError:
            return None


@functools.cache
def _layout(kind: type[Message]) -> tuple[list[object], int]:
    """A message type's field types in order, and how many of its fields a line must have."""
    fields, hints = dataclasses.fields(kind), typing.get_type_hints(kind)
    required = sum(f.default is dataclasses.MISSING for f in fields)
    return [hints[f.name] for f in fields], required


def _read(kind: object, word: str) -> object:
    """One word as the field's type: str, int (not negative), float, or either or None ("-")."""
    if kind in (int | None, float | None) and word == "-":
        return None
    if kind in (int, int | None):
        if not word.isdigit():
            raise ValueError(word)
        return int(word)
    if kind in (float, float | None):
        return float(word)
    return word


# member -> head


class Hello(Message, word="hello", sender="member"):
    """A member's first line: its step, the step's task count and its rank, the proof that it
    holds the step's secret ("-": the step has none), and its node's address on the chosen
    network when the step exchanges them."""

    step: str
    size: int
    rank: int
    proof: str = "-"
    address: str | None = None

    def same_step(self, step: str, size: int) -> bool:
        return (self.step, self.size) == (step, size)

    def words(self) -> str:
        """What the proof covers (with the connection's nonce): every field but the proof."""
        return f"{self.step} {self.size} {self.rank} {self.address or '-'}"


class Reached(Message, word="reach", sender="member"):
    """A member's start-up check (reach.py); unreached None: it reached every peer ("ok")."""

    rank: int
    unreached: Unreached | None

    def line(self) -> str:
        u = self.unreached
        said = "ok" if u is None else f"{u.peer} {u.address} {u.reason.value}"
        return f"reach {self.rank} {said}"

    @classmethod
    def parse(cls, words: list[str]) -> Reached | None:
        if len(words) < 3 or not words[1].isdigit():
            return None
        if words[2:] == ["ok"]:
            return cls(int(words[1]), None)
        if len(words) == 5 and words[2].isdigit() and words[4] in Why.__members__.values():
            return cls(int(words[1]), Unreached(int(words[2]), words[3], Why(words[4])))
        return None


class Released(Message, word="released", sender="member"):
    rank: int


class Heard(Message, word="notice", sender="member"):
    """Slurm's notice reached that member (signum: which signal)."""

    rank: int
    signum: int


class Done(Message, word="done", sender="member"):
    rank: int
    status: int


class Report(Message, word="report", sender="member"):
    """The site check's findings from one member, as one line of JSON (it has spaces)."""

    rank: int
    json: str


class Ports(Message, word="ports", sender="member"):
    """The site check's rank 0 to the listener outside the step: each task's TensorFlow port
    (rank, host:port), held by its guard until "bye"."""

    targets: tuple[tuple[int, str], ...]

    def line(self) -> str:
        return " ".join(["ports", *(f"{rank}:{address}" for rank, address in self.targets)])

    @classmethod
    def parse(cls, words: list[str]) -> Ports | None:
        targets = []
        for word in words[1:]:
            rank, _, address = word.partition(":")
            if not rank.isdigit() or ":" not in address:
                return None
            targets.append((int(rank), address))
        return cls(tuple(targets)) if targets else None


# head -> member


class Challenge(Message, word="challenge", sender="head"):
    """Rank 0's first line on every connection: the nonce the member's proof must cover."""

    nonce: str


class Node(Message, word="node", sender="head"):
    host: str
    address: str


class Probe(Message, word="probe", sender="head"):
    seconds: float
    clock: float | None = None
    """rank 0's wall clock (the site check's members measure their skew from it)"""


class Release(Message, word="release", sender="head"): ...


class Start(Message, word="start", sender="head"): ...


class Relay(Message, word="notice", sender="head"):
    """Slurm's notice, heard by another task first."""


class Exit(Message, word="exit", sender="head"):
    status: int


class Abort(Message, word="abort", sender="head"):
    """Rank `rank` on `host` failed (status None: it vanished or never connected)."""

    rank: int
    host: str
    status: int | None


class Other(Message, word="other", sender="head"):
    """Rank 0 of another step (the member's step collides with it on the port)."""

    step: str
    size: int


class Bye(Message, word="bye", sender="head"): ...


class Refusal(Message, word="refused", sender="head"):
    """Rank 0's one line to a hello for its step that did not prove the step's secret."""


class Answered(Message, word="answered", sender="head"):
    """The listener outside the step to the site check's rank 0: how many of the ports it was
    sent greeted it, from its host, as their task."""

    host: str
    count: int


# task -> peer, on a task's TensorFlow port during the start-up check


def port_greeting(step: str, rank: int) -> bytes:
    """What a task's held port says to every peer that connects (reach.Guard)."""
    return f"tfslurm-port {step} {rank}\n".encode()


def _by_word(sender: str) -> dict[str, type[Message]]:
    return {kind.WORD: kind for kind in Message.__subclasses__() if sender == kind.SENDER}


FROM_MEMBER, FROM_HEAD = _by_word("member"), _by_word("head")


def from_member(line: str) -> Message | None:
    """A member's line as its message; None for anything that is not one of ours."""
    words = line.strip().split(maxsplit=2) if line.startswith("report ") else line.split()
    kind = FROM_MEMBER.get(words[0]) if words else None
    return kind.parse(words) if kind else None


def from_head(line: str) -> Message | None:
    """The head's line as its message; None for anything that is not one of ours (and for the
    end of the connection, "")."""
    words = line.split()
    kind = FROM_HEAD.get(words[0]) if words else None
    return kind.parse(words) if kind else None


def encode(*messages: Message) -> bytes:
    """Messages as the bytes on the wire, one line each."""
    return "".join(f"{m.line()}\n" for m in messages).encode()


class Lines:
    """Bytes as they arrive on one connection, cut into lines (sans I/O: the caller reads the
    socket). too_long: the line being received ran past `limit`: not one of ours."""

    def __init__(self, limit: int = MAX_LINE) -> None:
        self.limit = limit
        self.buffer = b""

    def feed(self, data: bytes) -> list[str]:
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        return [line.decode("ascii", errors="replace") for line in lines]

    @property
    def too_long(self) -> bool:
        return len(self.buffer) > self.limit
