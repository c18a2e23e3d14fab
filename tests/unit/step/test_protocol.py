"""The control protocol without a socket: every message's line, its parsing, the table in the
module's docstring (which must list exactly the messages the types define), and the
conversation: each side's Connection, its order, and one test per protocol error."""

from __future__ import annotations

import re

import pytest

from tfslurm_entry.step import protocol
from tfslurm_entry.step.protocol import (
    KIT,
    LOOK,
    NEED_DATA,
    PROTOCOL,
    SITE_CHECK,
    STEP,
    Abort,
    Answered,
    Bye,
    Challenge,
    Connection,
    Done,
    Ended,
    Exit,
    Heard,
    Hello,
    LocalProtocolError,
    Message,
    Node,
    Other,
    OtherVersion,
    Ports,
    Probe,
    Reached,
    Refusal,
    Relay,
    Release,
    Released,
    RemoteProtocolError,
    Report,
    Start,
    Unreached,
    Why,
    read,
)

EXAMPLES: list[Message] = [
    Hello("4242.0", 8, 3),
    Hello("4242.0", 8, 3, "5f" * 32, "10.1.0.7"),
    Challenge("0d" * 16),
    Challenge.now("0d" * 16),
    Refusal(),
    Reached(3, None),
    Reached(3, Unreached(5, "c2:12005", Why.REFUSED)),
    Released(3),
    Heard(3, 10),
    Done(3, 42),
    Report(3, '{"skew": 0.001, "findings": [["reach", "ok", "reached all 7"]]}'),
    Node("c2", "10.1.0.8"),
    Probe(12.5),
    Probe(15, 1764171234.123456),
    Release(),
    Start(),
    Relay(),
    Exit(0),
    Abort(5, "c2", 137),
    Abort(5, "c2", None),
    Other("4243.1", 4),
    Bye(),
    Ports(((0, "c1:12000"), (1, "c2:12001"), (12, "10.1.0.9:12012"))),
    Answered("login", 3),
]


def _kinds() -> set[type[Message]]:
    return set(Message.__subclasses__())


def _dialect(message: Message) -> protocol.Dialect:
    """The conversation a message is said in."""
    for dialect in (STEP, SITE_CHECK, LOOK):
        table = getattr(dialect, message.SENDER)
        if any(type(message) in row for row in table.values()):
            return dialect
    raise AssertionError(f"{message!r} is in no conversation")


def _parse(message: Message) -> Message:
    return read(message.line(), message.SENDER, _dialect(message))


def not_ours(line: str, sender: str, dialect: protocol.Dialect = STEP) -> bool:
    with pytest.raises(RemoteProtocolError) as raised:
        read(line, sender, dialect)
    return raised.value.line == line


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: m.line()[:24])
def test_every_message_reads_back_as_itself(message):
    assert _parse(message) == message


def test_every_kind_of_message_has_an_example():
    assert {type(m) for m in EXAMPLES} == _kinds()


def test_the_docstring_table_lists_exactly_the_messages_the_types_define():
    """One row per message, its sender and first word; the row's template has as many words
    as the message's line (an optional word in brackets)."""
    rows = re.findall(r'^\s+(member|head) -> (head|member)\s+"([^"]+)"', protocol.__doc__, re.M)
    table = {(sender, template.split()[0]) for sender, _, template in rows}
    assert table == {(kind.SENDER, kind.WORD) for kind in _kinds()}
    for sender, _, template in rows:
        words = template.split()
        optional = sum(word.startswith("[") for word in words)
        for message in EXAMPLES:
            if (sender, words[0]) == (message.SENDER, message.WORD):
                said = len(message.line().split(" ", len(words) - 1))
                if isinstance(message, Reached) and len(words) != said:
                    continue  # two rows: "reach RANK ok" and the unreached peer's
                assert len(words) - optional <= said <= len(words), (template, message.line())


@pytest.mark.parametrize(
    "line",
    [
        "",
        "GET / HTTP/1.1",
        "hello 4242.0 eight 3",
        "hello 4242.0 8",
        "reach 3 5 c2:1 bogus",
        "reach x ok",
        "done 3",
        "done 3 -1",
        "notice three 15",
        "released",
        "probe",
        "probe nan",
        "exit",
        "report 3 {}",  # the site check's, not a step's
    ],
)
def test_a_line_that_is_not_ours_is_an_error_carrying_it(line):
    assert not_ours(line, "member")
    assert not_ours(line, "head")


def test_the_same_word_means_what_its_sender_says():
    """ "notice" from a member names its rank and signal; from the head it relays."""
    assert read("notice 2 15", "member") == Heard(2, 15)
    assert read("notice", "head") == Relay()
    assert not_ours("notice", "member")


def test_a_reports_json_keeps_its_spaces():
    said = Report(2, '{"a": [1, 2]}')
    assert read(said.line(), "member", SITE_CHECK) == said


@pytest.mark.parametrize(
    ("message", "line"),
    [
        (Hello("4242.0", 8, 3), "hello 4242.0 8 3 -"),
        (Hello("4242.0", 8, 3, "ab12", "10.1.0.7"), "hello 4242.0 8 3 ab12 10.1.0.7"),
        (Challenge("0d0e"), "challenge 0d0e"),
        (Challenge.now("0d0e"), f"challenge 0d0e {PROTOCOL} {KIT}"),
        (Reached(3, Unreached(5, "c2:12005", Why.REFUSED)), "reach 3 5 c2:12005 refused"),
        (Probe(15.0, 1764171234.5), "probe 15.0 1764171234.5"),
        (Abort(5, "c2", None), "abort 5 c2 -"),
        (Relay(), "notice"),
    ],
)
def test_a_message_is_the_tables_words_in_the_tables_order(message, line):
    """The types are the table's fields in its order: a field moved in a class moves a word on
    the wire, which the round trip above would not notice."""
    assert message.line() == line


def test_messages_compare_by_type_and_fields():
    assert Done(3, 0) == Done(3, 0)
    assert Done(3, 0) != Done(3, 1)
    assert Release() != Start()
    assert repr(Abort(5, "c2", None)) == "Abort(rank=5, host='c2', status=None)"


@pytest.mark.parametrize(
    "line", ["ports", "ports c1:12000", "ports 0:c1", "ports x:c1:12000", "answered login"]
)
def test_a_ports_or_answered_line_that_is_not_whole_is_not_one(line):
    assert not_ours(line, "member" if line.startswith("ports") else "head", LOOK)


# ---- messages that cannot be made ------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Hello("4242 0", 8, 3),  # a space: two words
        lambda: Hello("", 8, 3),
        lambda: Hello("4242.0", 8, -1),
        lambda: Hello("4242.0", 8, 3, address="n\u00f6de"),  # not ASCII
        lambda: Done(3, -9),
        lambda: Done(3, True),
        lambda: Probe(float("nan")),
        lambda: Node("c1", "10.0.0.1\n"),
        lambda: Report(3, '{"a":\n1}'),
        lambda: Report(3, ""),
        lambda: Reached(3, Unreached(5, "c2 x:1", Why.REFUSED)),
        lambda: Ports(((0, "c1"),)),
    ],
    ids=range(12),
)
def test_a_message_that_cannot_be_one_line_of_words_cannot_be_made(make):
    with pytest.raises(LocalProtocolError, match="line cannot say"):
        make()


# ---- the conversation ------------------------------------------------------------------------

NONCE = "0d" * 16


def talk(head: Connection, member: Connection, *lines: Message) -> list[Message]:
    """Each message sent by its side and received by the other, a byte at a time."""
    heard: list[Message] = []
    for message in lines:
        sender, receiver = (head, member) if message.SENDER == "head" else (member, head)
        for byte in sender.send(message):
            receiver.receive_data(bytes([byte]))
            event = receiver.next_event()
            if event is not NEED_DATA:
                heard.append(event)
    return heard


def test_a_whole_step_said_in_order_is_heard_in_order_in_pieces():
    head, member = Connection("head"), Connection("member")
    said = [
        Challenge.now(NONCE),
        Hello("4242.0", 3, 2, "ab" * 32, "10.0.0.2"),
        Heard(2, 10),
        Node("c1", "10.0.0.1"),
        Probe(15.0),
        Reached(2, None),
        Release(),
        Released(2),
        Start(),
        Relay(),
        Done(2, 0),
        Heard(2, 15),
    ]
    assert talk(head, member, *said) == said
    assert (head.theirs, member.ours, head.rank) == ("done", "done", 2)
    assert talk(head, member, Exit(0)) == [Exit(0)]  # crossed the member's done on the wire
    assert member.events(b"") == [Ended()]


def test_a_task_that_checks_nothing_frees_its_port_without_a_probe():
    """A member of a one-node step, or a node's second task: release, released, start."""
    head, member = Connection("head"), Connection("member")
    said = [Challenge.now(NONCE), Hello("4242.0", 3, 2), Release(), Released(2), Start()]
    assert talk(head, member, *said) == said
    assert (head.ours, head.theirs) == ("started", "released")


def test_a_member_that_gave_up_says_hello_and_done_on_a_connection_of_its_own():
    head, member = Connection("head"), Connection("member")
    assert talk(head, member, Challenge.now(NONCE), Hello("4242.0", 3, 2), Done(2, 143))


def test_the_site_checks_and_the_listeners_conversations():
    head, member = Connection("head", SITE_CHECK), Connection("member", SITE_CHECK)
    said = [
        Challenge.now(NONCE),
        Hello("4242.0", 2, 1),
        Node("c1", "10.0.0.1"),
        Probe(15.0, 1764171234.5),
        Report(1, '{"skew": 0.1, "findings": []}'),
        Bye(),
    ]
    assert talk(head, member, *said) == said
    head, member = Connection("head", LOOK), Connection("member", LOOK)
    said = [
        Challenge.now(NONCE),
        Hello("4242.0", 2, 0),
        Ports(((1, "c2:12001"),)),
        Answered("l", 1),
    ]
    assert talk(head, member, *said) == said


def _checked_in_head() -> Connection:
    head = Connection("head")
    head.send(Challenge.now(NONCE))
    head.events(b"hello 4242.0 3 2 -\n")
    return head


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"GET / HTTP/1.1\r\n", "not a line of a step's conversation"),
        (b"hello 4242.0 3 2 -\n", "a hello line out of turn from the member"),  # a second hello
        (b"released 2\n", "a released line before the head's release"),
        (b"reach 2 ok\n", "a reach line before the head's probe"),
        (b"done 1 0\n", "a line for rank 1 on rank 2's connection"),
        (b"reach 2 \xff ok\n", "not ASCII"),
        (b"report 2 {}\n", "not a line of a step's conversation"),  # the site check's word
    ],
)
def test_a_member_line_out_of_the_conversation_is_an_error_carrying_it(data, why):
    head = _checked_in_head()
    with pytest.raises(RemoteProtocolError) as raised:
        head.events(data)
    assert raised.value.why.startswith(why)
    assert raised.value.line == data[:-1].decode("ascii", errors="replace")


CHALLENGE_AB = f"challenge ab {PROTOCOL} {KIT}".encode()


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ([b"probe 15.0"], "a probe line out of turn from the head (challenge due)"),
        ([CHALLENGE_AB, b"start"], "a start line out of turn"),
        ([CHALLENGE_AB, b"release", b"probe 3.0"], "a probe line out of turn"),
        ([CHALLENGE_AB, f"challenge cd {PROTOCOL} {KIT}".encode()], "a challenge line out of turn"),
    ],
)
def test_a_head_line_out_of_turn_is_an_error(lines, why):
    member = Connection("member")
    with pytest.raises(RemoteProtocolError, match=re.escape(why)):
        for line in lines:
            member.events(line + b"\n")
            if member.theirs == "greeted" and member.ours == "start":
                member.send(Hello("4242.0", 3, 2))


def test_this_side_may_not_say_a_line_out_of_turn():
    head = Connection("head")
    with pytest.raises(LocalProtocolError, match="a probe line out of turn from the head"):
        head.send(Probe(15.0))
    head.send(Challenge.now(NONCE))
    with pytest.raises(LocalProtocolError, match="a node line before the member's hello"):
        head.send(Node("c1", "10.0.0.1"))
    with pytest.raises(LocalProtocolError, match="before the head's challenge"):
        Connection("member").send(Hello("4242.0", 3, 2))
    member = Connection("member")
    member.events(f"challenge {NONCE} {PROTOCOL} {KIT}\n".encode())
    member.send(Hello("4242.0", 3, 2))
    with pytest.raises(LocalProtocolError, match="a released line before the head's release"):
        member.send(Released(2))


def test_an_over_long_line_is_an_error_before_it_ends():
    head = Connection("head", limit=32)
    head.send(Challenge.now(NONCE))
    assert head.events(b"hello 4242.0 3 2 -") == []
    with pytest.raises(RemoteProtocolError, match="a line longer than 32 bytes") as raised:
        head.events(b"x" * 32)
    assert raised.value.line.startswith("hello 4242.0 3 2 -xxx")


def test_a_line_of_exactly_the_limit_is_heard():
    line = b"hello 4242.0 3 2 " + b"a" * 15
    head = Connection("head", limit=len(line))
    head.send(Challenge.now(NONCE))
    assert head.events(line + b"\n") == [Hello("4242.0", 3, 2, "a" * 15)]


@pytest.mark.parametrize(
    ("challenge", "theirs"),
    [
        (f"challenge {NONCE} 1 0.0.9", "protocol 1 (tfslurm-entry 0.0.9)"),
        (f"challenge {NONCE} 2 0.1.0", "protocol 2 (tfslurm-entry 0.1.0)"),  # HMAC's proofs
        (
            f"challenge {NONCE} {PROTOCOL + 1} 9.9.9",
            f"protocol {PROTOCOL + 1} (tfslurm-entry 9.9.9)",
        ),
        (f"challenge {NONCE}", "protocol 1"),  # the kit before versions said none
    ],
)
def test_a_rank_0_of_another_version_is_said_with_both_versions(challenge, theirs):
    with pytest.raises(OtherVersion) as raised:
        Connection("member").events(challenge.encode() + b"\n")
    assert raised.value.line == challenge
    assert f"speaks {theirs}, not this task's protocol {PROTOCOL} (tfslurm-entry {KIT})" in str(
        raised.value
    )


def test_the_end_of_the_connection_comes_after_the_lines_before_it():
    member = Connection("member")
    assert member.events(f"challenge {NONCE} {PROTOCOL} {KIT}\nabo".encode()) == [
        Challenge.now(NONCE)
    ]
    member.send(Hello("4242.0", 3, 2))
    assert member.events(b"rt 1 c1 -\n") == [Abort(1, "c1", None)]
    assert member.events(b"") == [Ended()]


# ---- the conversation's one owner -----------------------------------------------------------

FRAMING = re.compile(r'makefile\(|readline\(|b"\\n"|split\("\\n"')


def test_no_module_that_speaks_the_protocol_frames_lines_or_orders_messages_itself():
    """Every module of the package and bench/ that uses protocol.py moves bytes only: lines are
    cut and messages ordered by protocol.Connection alone."""
    from bench.repo import ROOT

    speakers = [
        path
        for path in [*ROOT.glob("tfslurm_entry/**/*.py"), *ROOT.glob("bench/**/*.py")]
        if path.name != "protocol.py" and re.search(r"\bprotocol import\b", path.read_text())
    ]
    assert len(speakers) >= 8  # control, dial, member, head, reach, the site check's two, bench
    for path in speakers:
        text = path.read_text()
        assert not FRAMING.findall(text), f"{path.relative_to(ROOT)} frames lines itself"
        assert "from_member" not in text and "from_head" not in text
