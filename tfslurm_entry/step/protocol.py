"""The words on the wire between rank 0 (the head) and the other tasks of a step (members): one
small type per message, its line and its parsing, and nothing else (no socket: control.py, the
site check and the tests move the lines). Everything else in the package handles these types.

One line at a time each way, ASCII words separated by spaces. A job's step (head.py, member.py):

    member -> head   "hello JOB.STEP SIZE RANK [ADDR]"  on connecting: its step, the step's task
                                                count; ADDR: its node's address on --network's
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

The site check (sitecheck.py) after its probe:

    member -> head   "report RANK JSON"         {"skew": its clock - TIME, "findings": [...]}
    head -> member   "bye"                      the table is printed: free your port and end

And on a task's TensorFlow port while the start-up check holds it (reach.Guard), to every
peer that connects:

    task -> peer     "tfslurm-port JOB.STEP RANK"

The step's identity in the hello keeps steps that share a node from talking to each other: a
member that reached another step's rank 0 (two steps' ports collide: rare with the default
windows, impossible with ports Slurm reserved) is turned away with "other" and fails at once,
rather than checking in with, or stopping, a stranger.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, NamedTuple

MAX_LINE = 256  # longer lines from a member are not ours: the connection is dropped


@dataclass(frozen=True)
class Message:
    """One line on a control connection. WORD: its first word; SENDER: "member" or "head"."""

    WORD: ClassVar[str]
    SENDER: ClassVar[str]

    def line(self) -> str:
        """The message as sent, without its newline."""
        return self.WORD


# member -> head


@dataclass(frozen=True)
class Hello(Message):
    """A member's first line: its step, the step's task count and its rank, and its node's
    address on the chosen network when the step exchanges them."""

    WORD, SENDER = "hello", "member"
    step: str
    size: int
    rank: int
    address: str | None = None

    def line(self) -> str:
        return f"hello {self.step} {self.size} {self.rank}" + (
            f" {self.address}" if self.address else ""
        )

    def same_step(self, step: str, size: int) -> bool:
        return (self.step, self.size) == (step, size)


class Why(StrEnum):
    """Why a peer's TensorFlow port could not be reached (reach.REASONS says it in words)."""

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


@dataclass(frozen=True)
class Reached(Message):
    """A member's start-up check (reach.py); unreached None: it reached every peer."""

    WORD, SENDER = "reach", "member"
    rank: int
    unreached: Unreached | None

    def line(self) -> str:
        u = self.unreached
        return f"reach {self.rank} " + ("ok" if u is None else f"{u.peer} {u.address} {u.reason}")


@dataclass(frozen=True)
class Released(Message):
    WORD, SENDER = "released", "member"
    rank: int

    def line(self) -> str:
        return f"released {self.rank}"


@dataclass(frozen=True)
class Heard(Message):
    """Slurm's notice reached that member (signum: which signal)."""

    WORD, SENDER = "notice", "member"
    rank: int
    signum: int

    def line(self) -> str:
        return f"notice {self.rank} {self.signum}"


@dataclass(frozen=True)
class Done(Message):
    WORD, SENDER = "done", "member"
    rank: int
    status: int

    def line(self) -> str:
        return f"done {self.rank} {self.status}"


@dataclass(frozen=True)
class Report(Message):
    """The site check's findings from one member, as JSON (sitecheck.py reads it)."""

    WORD, SENDER = "report", "member"
    rank: int
    json: str

    def line(self) -> str:
        return f"report {self.rank} {self.json}"


# head -> member


@dataclass(frozen=True)
class Node(Message):
    WORD, SENDER = "node", "head"
    host: str
    address: str

    def line(self) -> str:
        return f"node {self.host} {self.address}"


@dataclass(frozen=True)
class Probe(Message):
    WORD, SENDER = "probe", "head"
    seconds: float
    clock: float | None = None
    """rank 0's wall clock (the site check's members measure their skew from it)"""

    def line(self) -> str:
        if self.clock is None:
            return f"probe {self.seconds:.1f}"
        return f"probe {self.seconds:.0f} {self.clock:.6f}"


@dataclass(frozen=True)
class Release(Message):
    WORD, SENDER = "release", "head"


@dataclass(frozen=True)
class Start(Message):
    WORD, SENDER = "start", "head"


@dataclass(frozen=True)
class Relay(Message):
    """Slurm's notice, heard by another task first."""

    WORD, SENDER = "notice", "head"


@dataclass(frozen=True)
class Exit(Message):
    WORD, SENDER = "exit", "head"
    status: int = 0

    def line(self) -> str:
        return f"exit {self.status}"


@dataclass(frozen=True)
class Abort(Message):
    """Rank `rank` on `host` failed (status None: it vanished or never connected)."""

    WORD, SENDER = "abort", "head"
    rank: int
    host: str
    status: int | None

    def line(self) -> str:
        return f"abort {self.rank} {self.host} {'-' if self.status is None else self.status}"


@dataclass(frozen=True)
class Other(Message):
    """Rank 0 of another step (the member's step collides with it on the port)."""

    WORD, SENDER = "other", "head"
    step: str
    size: int

    def line(self) -> str:
        return f"other {self.step} {self.size}"


@dataclass(frozen=True)
class Bye(Message):
    WORD, SENDER = "bye", "head"


# task -> peer, on a task's TensorFlow port during the start-up check


def port_greeting(step: str, rank: int) -> bytes:
    """What a task's held port says to every peer that connects (reach.Guard)."""
    return f"tfslurm-port {step} {rank}\n".encode()


# parsing


def _int(word: str) -> int | None:
    return int(word) if word.isdigit() else None


def _float(word: str) -> float | None:
    try:
        return float(word)
    except ValueError:
        return None


def _hello(w: Sequence[str]) -> Hello | None:
    if len(w) not in (4, 5) or (size := _int(w[2])) is None or (rank := _int(w[3])) is None:
        return None
    return Hello(w[1], size, rank, w[4] if len(w) == 5 else None)


def _reached(w: Sequence[str]) -> Reached | None:
    if (rank := _int(w[1]) if len(w) > 1 else None) is None:
        return None
    if w[2:] == ["ok"]:
        return Reached(rank, None)
    if len(w) == 5 and (peer := _int(w[2])) is not None and w[4] in Why.__members__.values():
        return Reached(rank, Unreached(peer, w[3], Why(w[4])))
    return None


def _ranked(kind: Callable[[int, int], Message]) -> Callable[[Sequence[str]], Message | None]:
    def parse(w: Sequence[str]) -> Message | None:
        if len(w) != 3 or (rank := _int(w[1])) is None or (value := _int(w[2])) is None:
            return None
        return kind(rank, value)

    return parse


def _released(w: Sequence[str]) -> Released | None:
    return Released(rank) if len(w) == 2 and (rank := _int(w[1])) is not None else None


def _report(w: Sequence[str]) -> Report | None:
    return Report(rank, w[2]) if len(w) == 3 and (rank := _int(w[1])) is not None else None


def _node(w: Sequence[str]) -> Node | None:
    return Node(w[1], w[2]) if len(w) == 3 else None


def _probe(w: Sequence[str]) -> Probe | None:
    if len(w) not in (2, 3) or (seconds := _float(w[1])) is None:
        return None
    clock = _float(w[2]) if len(w) == 3 else None
    return None if len(w) == 3 and clock is None else Probe(seconds, clock)


def _bare(kind: type[Message]) -> Callable[[Sequence[str]], Message | None]:
    return lambda w: kind() if len(w) == 1 else None


def _exit(w: Sequence[str]) -> Exit | None:
    return Exit(status) if len(w) == 2 and (status := _int(w[1])) is not None else None


def _abort(w: Sequence[str]) -> Abort | None:
    if len(w) != 4 or (rank := _int(w[1])) is None:
        return None
    return Abort(rank, w[2], _int(w[3]))


def _other(w: Sequence[str]) -> Other | None:
    return Other(w[1], size) if len(w) == 3 and (size := _int(w[2])) is not None else None


FROM_MEMBER: dict[str, Callable[[Sequence[str]], Message | None]] = {
    "hello": _hello,
    "reach": _reached,
    "released": _released,
    "notice": _ranked(Heard),
    "done": _ranked(Done),
    "report": _report,
}
FROM_HEAD: dict[str, Callable[[Sequence[str]], Message | None]] = {
    "node": _node,
    "probe": _probe,
    "release": _bare(Release),
    "start": _bare(Start),
    "notice": _bare(Relay),
    "exit": _exit,
    "abort": _abort,
    "other": _other,
    "bye": _bare(Bye),
}


def _parse(table: dict, line: str, most: int) -> Message | None:
    words = line.split(" ", most) if most else line.split()
    parse = table.get(words[0]) if words else None
    return parse(words) if parse else None


def from_member(line: str) -> Message | None:
    """A member's line as its message; None for anything that is not one of ours."""
    if line.startswith("report "):  # its JSON has spaces of its own
        return _parse(FROM_MEMBER, line.strip(), 2)
    return _parse(FROM_MEMBER, line, 0)


def from_head(line: str) -> Message | None:
    """The head's line as its message; None for anything that is not one of ours (and for the
    end of the connection, "")."""
    return _parse(FROM_HEAD, line, 0)


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
