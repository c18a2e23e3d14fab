"""The words on the wire between rank 0 (the head) and the other tasks of a step (members), and
the conversation they make: one small type per message, its line and its parsing, and one
`Connection` per side that takes bytes and gives messages, takes messages and gives bytes, and
knows which may come next (no socket: control.py, dial.py and the site check move the bytes;
h11's Connection is the model). Everything else in the package handles these types.

One line at a time each way, ASCII words separated by spaces, at most MAX_LINE bytes. Anything
else, a message out of its turn, or one naming another rank than its hello, is a
RemoteProtocolError carrying the line; a message that cannot be put in words, or sent now, a
LocalProtocolError. A job's step (head.py, member.py), in this order:

    head -> member   "challenge NONCE [PROTOCOL] [KIT]"  on every connection, first: a fresh
                                                nonce, the conversation's version (PROTOCOL)
                                                and the kit's; a member of another version
                                                stops with one line naming both (none: the
                                                kit before versions, protocol 1)
    member -> head   "hello JOB.STEP SIZE RANK PROOF [ADDR]"  its step, the step's task count;
                                                PROOF: a MAC of the nonce and these words with
                                                the step's secret (secret.py; "-": none);
                                                ADDR: its node's address on --network's
                                                interface or subnet (resolve/network.py)
    head -> member   "node HOST ADDR"           with --network an interface or a subnet: each
                                                node's address there, one line per node, first
    head -> member   "probe SECONDS [TIME]"     every task checked in: check your node's peers'
                                                TensorFlow ports for at most SECONDS (reach.py;
                                                each other node's first task only); TIME (the
                                                site check): rank 0's wall clock
    member -> head   "reach RANK ok"            it reached every one of them
    member -> head   "reach RANK PEER ADDR WHY" it could not reach that one (reach.REASONS)
    head -> member   "release"                  free your port: every task reached its peers,
                                                or (a step on one node) no task checks it
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

Each side's lines in their order (STEP below): the head's challenge; then its node lines, probe
(to a node's first task), release and start, once each and in that order, notices after the
start, and one last line (exit, abort; other or refused right after the hello) or none. A
member's hello (after the challenge), reach (if probed), released, done; notices any time after
its hello. A reach answers the probe, a released the release (the site check: its report the
probe; the listener's answered the ports), wherever the other side's table is. Lines cross on
the wire: each side's order is checked on its own. The site check's (SITE_CHECK) and the
listener's (LOOK) conversations have their own tables.

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
import math
import typing
from collections.abc import Mapping
from enum import Enum
from typing import ClassVar, Literal, NamedTuple

from .. import __version__
from .event import Event

# The conversation's version: 3, the proof a keyed BLAKE2b; 2, an HMAC-SHA256; a challenge
# without one is the kit's before versions (1).
PROTOCOL = 3
KIT = __version__
MAX_LINE = 1 << 20  # one line's bytes at most: a site check's ports of thousands of tasks fit
Side = Literal["head", "member"]


class ProtocolError(Exception):
    """The conversation went wrong: why, and the line that did it (None: no line)."""

    def __init__(self, why: str, line: str | None = None) -> None:
        super().__init__(why, line)
        self.why, self.line = why, line

    def __str__(self) -> str:
        if self.line is None:
            return self.why
        shown = self.line if len(self.line) <= 120 else f"{self.line[:117]}..."
        return f"{self.why}: {shown!r}"


class RemoteProtocolError(ProtocolError):
    """What the other side sent is not this conversation's next line."""


class LocalProtocolError(ProtocolError):
    """A message this side cannot put in words, or may not send now: a fault of this kit."""


class OtherVersion(RemoteProtocolError):
    """The head speaks another version of the conversation (its challenge says which)."""

    def __init__(self, line: str, protocol: int, kit: str | None) -> None:
        theirs = f"protocol {protocol}" + (f" (tfslurm-entry {kit})" if kit else "")
        ours = f"protocol {PROTOCOL} (tfslurm-entry {KIT})"
        super().__init__(f"speaks {theirs}, not this task's {ours}", line)
        self.protocol, self.kit = protocol, kit


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
    "member" or "head" (the same word may mean different messages from each). A message whose
    fields cannot be the words of one line (a space in a word, a negative count) cannot be
    made: LocalProtocolError. Each has a docstring: dataclass would otherwise make one from
    the class's signature (inspect), at every task's start."""

    WORD: ClassVar[str]
    SENDER: ClassVar[Side]

    def __init_subclass__(cls, word: str, sender: Side, **kwargs: object) -> None:
        cls.WORD, cls.SENDER = word, sender
        super().__init_subclass__(**kwargs)

    def __post_init__(self) -> None:
        layout = _layout(type(self))
        for name, kind in zip(layout.names, layout.kinds, strict=True):
            value = getattr(self, name)
            if not _fits(kind, value):
                raise LocalProtocolError(f"a {self.WORD} line cannot say {value!r} as its {name}")

    def line(self) -> str:
        """The message as sent, without its newline."""
        words = [self.WORD]
        layout = _layout(type(self))
        for name, omitted in zip(layout.names, layout.omitted, strict=True):
            value = getattr(self, name)
            if value is None and omitted:
                continue
            if value is None:
                words.append("-")
            elif isinstance(value, float):
                words.append(repr(value))
            else:  # an int's subclass (a signal's number) as its number
                words.append(str(int(value)) if isinstance(value, int) else str(value))
        return " ".join(words)

    @classmethod
    def parse(cls, words: list[str]) -> Message | None:
        """From a line's words (its first one this type's WORD); None if they are not one."""
        layout, values = _layout(cls), words[1:]
        if not layout.required <= len(values) <= len(layout.kinds):
            return None
        try:  # a trailing field with a default may be left out: zip stops at the words' end
            read = zip(layout.kinds, values, strict=False)
            return cls(*(_read(kind, word) for kind, word in read))
        except (ValueError, LocalProtocolError):
            return None


class Layout(NamedTuple):
    """A message type's fields in order: names, types, how many a line must have, and which
    are left out of it when None (their default is None)."""

    names: tuple[str, ...]
    kinds: tuple[object, ...]
    required: int
    omitted: tuple[bool, ...]


@functools.cache
def _layout(kind: type[Message]) -> Layout:
    """Read once per type: every message made, parsed or sent reads it (rank 0 of a large step
    handles thousands)."""
    fields, hints = dataclasses.fields(kind), typing.get_type_hints(kind)
    return Layout(
        tuple(f.name for f in fields),
        tuple(hints[f.name] for f in fields),
        sum(f.default is dataclasses.MISSING for f in fields),
        tuple(f.default is None for f in fields),
    )


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


_INT, _FLOAT, _STR = (int, int | None), (float, float | None), (str, str | None)
_MAY_BE_NONE = (int | None, float | None, str | None, Unreached | None)


def _fits(kind: object, value: object) -> bool:
    """Whether value can be one word of a line as a field of that type (other types: their
    class's own line checks them)."""
    if value is None:
        return kind in _MAY_BE_NONE
    if kind in _INT:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if kind in _FLOAT:
        return type(value) in (int, float) and math.isfinite(value)
    if kind in _STR:
        return isinstance(value, str) and value.isascii() and value.split() == [value]
    return True


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

    def __post_init__(self) -> None:
        super().__post_init__()
        u = self.unreached
        if u is not None and not (_fits(int, u.peer) and _fits(str, u.address)):
            raise LocalProtocolError(f"a reach line cannot say {u!r}")

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
    """A member freed its TensorFlow port: its guard no longer answers there."""

    rank: int


class Heard(Message, word="notice", sender="member"):
    """Slurm's notice reached that member (signum: which signal)."""

    rank: int
    signum: int


class Done(Message, word="done", sender="member"):
    """A member's program (or server) ended with `status`."""

    rank: int
    status: int


class Report(Message, word="report", sender="member"):
    """The site check's findings from one member, as one line of JSON (it has spaces)."""

    rank: int
    json: str

    def __post_init__(self) -> None:
        one_line = self.json.strip() == self.json and not {"\n", "\r"} & set(self.json)
        if not (_fits(int, self.rank) and self.json and self.json.isascii() and one_line):
            raise LocalProtocolError(f"a report line cannot say {self.json!r} as one ASCII line")


class Ports(Message, word="ports", sender="member"):
    """The site check's rank 0 to the listener outside the step: each task's TensorFlow port
    (rank, host:port), held by its guard until "bye"."""

    targets: tuple[tuple[int, str], ...]

    def __post_init__(self) -> None:
        for rank, address in self.targets:
            if not (_fits(int, rank) and _fits(str, address) and ":" in address):
                raise LocalProtocolError(f"a ports line cannot say {rank!r}:{address!r}")

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
    """Rank 0's first line on every connection: the nonce the member's proof must cover, and
    the versions it speaks (`Challenge.now(nonce)`: this kit's)."""

    nonce: str
    protocol: int | None = None
    kit: str | None = None

    @classmethod
    def now(cls, nonce: str) -> Challenge:
        return cls(nonce, PROTOCOL, KIT)


class Node(Message, word="node", sender="head"):
    """A node's address on --network's interface or subnet, before the probe."""

    host: str
    address: str


class Probe(Message, word="probe", sender="head"):
    """Every task checked in: check the peers' TensorFlow ports for at most `seconds`."""

    seconds: float
    clock: float | None = None
    """rank 0's wall clock (the site check's members measure their skew from it)"""


class Release(Message, word="release", sender="head"):
    """Every task reached its peers: free your TensorFlow port."""


class Start(Message, word="start", sender="head"):
    """Every task freed its port: start the program."""


class Relay(Message, word="notice", sender="head"):
    """Slurm's notice, heard by another task first."""


class Exit(Message, word="exit", sender="head"):
    """The chief's program ended well: a ps or worker server stops, exiting with `status`."""

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


class Bye(Message, word="bye", sender="head"):
    """The site check's table is printed: free your port and end."""


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


def first_line(data: bytes) -> bytes | None:
    """The first whole line of what a port said (reach.py reads a port's greeting), without its
    newline; None while it is not whole."""
    line, newline, _ = data.partition(b"\n")
    return line if newline else None


def encode(*messages: Message) -> bytes:
    """Messages as the bytes on the wire, one line each."""
    return "".join(f"{m.line()}\n" for m in messages).encode()


# The conversations: each side's lines in order, as state -> {message type: next state}. A
# state with no row (or an empty one) is that side's end: nothing more may come from it.

START, CLOSED = "start", "closed"
Table = Mapping[str, Mapping[type[Message], str]]


class Dialect:
    """One conversation: its name (in errors), each side's table, each side's words, and the
    answers: a line that only follows another of the other side's (a reach follows the
    head's probe, wherever the two tables are when it comes)."""

    def __init__(
        self, name: str, head: Table, member: Table, answers: Mapping[type, type] | None = None
    ) -> None:
        self.name, self.head, self.member = name, head, member
        self.answers = dict(answers or {})
        self.words = {
            side: {kind.WORD: kind for row in table.values() for kind in row}
            for side, table in (("head", head), ("member", member))
        }


STEP = Dialect(
    "a step's",
    head={
        START: {Challenge: "greeted"},
        "greeted": {
            Node: "greeted",
            Probe: "probed",
            Release: "released",  # a task no other node checks, and that checks nothing
            Other: CLOSED,
            Refusal: CLOSED,
            Abort: CLOSED,
        },
        "probed": {Release: "released", Abort: CLOSED},
        "released": {Start: "started", Abort: CLOSED},
        "started": {Relay: "started", Exit: CLOSED, Abort: CLOSED},
    },
    member={
        START: {Hello: "in"},
        # released without a reach: a task that checks nothing; done: its end told apart
        "in": {Heard: "in", Reached: "reached", Released: "released", Done: "done"},
        "reached": {Heard: "reached", Released: "released"},
        "released": {Heard: "released", Done: "done"},
        "done": {Heard: "done"},  # a second signal after its program ended
    },
    answers={Reached: Probe, Released: Release},
)
SITE_CHECK = Dialect(
    "the site check's",
    head={
        START: {Challenge: "greeted"},
        "greeted": {Node: "greeted", Probe: "probed", Refusal: CLOSED},
        "probed": {Bye: CLOSED},
    },
    member={START: {Hello: "in"}, "in": {Report: "reported"}},
    answers={Report: Probe},
)
LOOK = Dialect(  # the site check's rank 0 (member) and tfslurm-run's listener (head)
    "the site check listener's",
    head={START: {Challenge: "greeted"}, "greeted": {Refusal: CLOSED, Answered: CLOSED}},
    member={START: {Hello: "in"}, "in": {Ports: "sent"}},
    answers={Answered: Ports},
)


def read(line: str, sender: Side, dialect: Dialect = STEP) -> Message:
    """A line from `sender` as its message in the dialect; RemoteProtocolError if it is none."""
    words = line.split(maxsplit=2) if line.startswith("report ") else line.split()
    kind = dialect.words[sender].get(words[0]) if words else None
    if kind is None:
        raise RemoteProtocolError(f"not a line of {dialect.name} conversation", line)
    message = kind.parse(words)
    if message is None:
        raise RemoteProtocolError(f"not a whole {kind.WORD} line", line)
    return message


class Ended(Event):
    """The other side closed the connection (a part of a line before that is dropped)."""


class NeedData(Event):
    """No whole line yet: feed the connection what the socket says next."""


NEED_DATA = NeedData()


class Connection:
    """One side's view of one connection (sans I/O, after h11's): `receive_data` the bytes that
    arrived (b"": the other side closed), `next_event` for each line as its message (or
    NEED_DATA, or Ended); `send` gives the bytes of this side's messages. Each side's lines
    must follow the dialect's table; the head says nothing but its challenge until the
    member's hello, the member nothing until the challenge; an answer comes after its question
    (Dialect.answers); every member line after the hello names the hello's rank. `theirs`,
    `ours`: where each side is in its table."""

    def __init__(self, side: Side, dialect: Dialect = STEP, limit: int = MAX_LINE) -> None:
        self.side, self.dialect, self.limit = side, dialect, limit
        self.peer: Side = "member" if side == "head" else "head"
        self.ours = self.theirs = START
        self.rank: int | None = None
        """the member's rank, from its hello"""
        self.said: dict[Side, set[type]] = {"head": set(), "member": set()}
        """the kinds of line each side has said (the answers' questions)"""
        self._buffer = bytearray()
        self._ended = False

    def receive_data(self, data: bytes) -> None:
        if data:
            self._buffer += data
        else:
            self._ended = True

    def next_event(self) -> Message | Ended | NeedData:
        end = self._buffer.find(b"\n", 0, self.limit + 1)
        if end < 0:
            if len(self._buffer) > self.limit:
                text = bytes(self._buffer[:120]).decode("ascii", errors="replace")
                raise RemoteProtocolError(f"a line longer than {self.limit} bytes", text)
            return Ended() if self._ended else NEED_DATA
        raw = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        try:
            line = raw.decode("ascii")
        except UnicodeDecodeError:
            raise RemoteProtocolError("not ASCII", raw.decode("ascii", errors="replace")) from None
        message = read(line, self.peer, self.dialect)
        self._advance(self.peer, message, line)
        return message

    def events(self, data: bytes) -> list[Message | Ended]:
        """Every whole message in data (and in what came before it), and Ended once the other
        side closed."""
        self.receive_data(data)
        found: list[Message | Ended] = []
        while not found or not isinstance(found[-1], Ended):
            event = self.next_event()
            if event is NEED_DATA:
                break
            found.append(event)
        return found

    def send(self, *messages: Message) -> bytes:
        """The bytes of messages, once each is this side's next in the table."""
        for message in messages:
            self._advance(self.side, message, None)
        return encode(*messages)

    def _advance(self, sender: Side, message: Message, line: str | None) -> None:
        error = LocalProtocolError if sender == self.side else RemoteProtocolError

        def fail(why: str) -> typing.NoReturn:
            raise error(why, line if line is not None else message.line())

        states = {self.side: self.ours, self.peer: self.theirs}
        row = getattr(self.dialect, sender).get(states[sender], {})
        kind = type(message)
        if kind not in row:
            due = " or ".join(dict.fromkeys(k.WORD for k in row)) or "nothing more"
            fail(f"a {kind.WORD} line out of turn from the {sender} ({due} due)")
        if sender == "head" and kind is not Challenge and states["member"] == START:
            fail(f"a {kind.WORD} line before the member's hello")
        if sender == "member" and states["head"] == START:
            fail(f"a {kind.WORD} line before the head's challenge")
        other = self.peer if sender == self.side else self.side
        asked = self.dialect.answers.get(kind)
        if asked is not None and asked not in self.said[other]:
            fail(f"a {kind.WORD} line before the {other}'s {asked.WORD}")
        rank = getattr(message, "rank", None)
        if sender == "member" and kind is not Hello and rank is not None and rank != self.rank:
            fail(f"a line for rank {rank} on rank {self.rank}'s connection")
        if kind is Challenge and self.side == "member":
            protocol = message.protocol or 1
            if protocol != PROTOCOL:
                raise OtherVersion(line or message.line(), protocol, message.kit)
        if kind is Hello:
            self.rank = message.rank
        self.said[sender].add(kind)
        if sender == self.side:
            self.ours = row[kind]
        else:
            self.theirs = row[kind]
