"""The control protocol without a socket: every message's line, its parsing, and the table in
the module's docstring, which must list exactly the messages the types define."""

from __future__ import annotations

import re

import pytest

from tfslurm_entry.step import protocol
from tfslurm_entry.step.protocol import (
    Abort,
    Answered,
    Bye,
    Challenge,
    Done,
    Exit,
    Heard,
    Hello,
    Lines,
    Message,
    Node,
    Other,
    Ports,
    Probe,
    Reached,
    Refusal,
    Relay,
    Release,
    Released,
    Report,
    Start,
    Unreached,
    Why,
    from_head,
    from_member,
)

EXAMPLES: list[Message] = [
    Hello("4242.0", 8, 3),
    Hello("4242.0", 8, 3, "5f" * 32, "10.1.0.7"),
    Challenge("0d" * 16),
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


def _parse(message: Message) -> Message | None:
    return (from_member if message.SENDER == "member" else from_head)(message.line())


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
        "exit",
    ],
)
def test_a_line_that_is_not_ours_is_none(line):
    assert from_member(line) is None
    assert from_head(line) is None


def test_the_same_word_means_what_its_sender_says():
    """ "notice" from a member names its rank and signal; from the head it relays."""
    assert from_member("notice 2 15") == Heard(2, 15)
    assert from_head("notice") == Relay()
    assert from_member("notice") is None


def test_lines_arrive_in_pieces_and_too_long_is_not_ours():
    lines = Lines(limit=16)
    assert lines.feed(b"hello 1.0") == []
    assert lines.feed(b" 2 1\ndone 1") == ["hello 1.0 2 1"]
    assert lines.feed(b" 0\n") == ["done 1 0"]
    assert not lines.too_long
    lines.feed(b"x" * 17)
    assert lines.too_long


def test_a_reports_json_keeps_its_spaces():
    said = Report(2, '{"a": [1, 2]}')
    assert from_member(said.line() + "\n") == said


@pytest.mark.parametrize(
    ("message", "line"),
    [
        (Hello("4242.0", 8, 3), "hello 4242.0 8 3 -"),
        (Hello("4242.0", 8, 3, "ab12", "10.1.0.7"), "hello 4242.0 8 3 ab12 10.1.0.7"),
        (Challenge("0d0e"), "challenge 0d0e"),
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
    assert (from_member(line) if line.startswith("ports") else from_head(line)) is None
