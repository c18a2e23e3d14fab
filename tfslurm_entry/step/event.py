"""The base of everything the step's supervision hands around (head.py, member.py): the
messages of protocol.py, and the things that happen besides them (a connection lost, a
program's end, a deadline passed). Each is a small dataclass that `match` dispatches by type.
"""

from __future__ import annotations

from dataclasses import dataclass

try:
    from typing import dataclass_transform
except ImportError:  # Python 3.10: only type checkers read it

    def dataclass_transform(**_: object):  # type: ignore[no-redef]
        return lambda cls: cls


@dataclass_transform(eq_default=False)
class Event:
    """A subclass is a dataclass of its fields, without a decorator. This base compares and
    shows them by type and fields rather than dataclass's own methods: every task defines some
    thirty of these at start-up, hundreds of tasks at once on a node, and a frozen dataclass
    costs four times as much to define."""

    __hash__ = None  # type: ignore[assignment]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        dataclass(repr=False, eq=False)(cls)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"{type(self).__name__}({fields})"
