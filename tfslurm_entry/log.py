"""The entrypoint's own lines: one per decision, on stderr, where the program's output goes too."""

from __future__ import annotations

import sys
from collections.abc import Callable

Log = Callable[[str], None]


def log(message: str) -> None:
    """One line on stderr, prefixed so it stands out among the program's own output."""
    print(f"tfslurm: {message}", file=sys.stderr, flush=True)


def timestamp(seconds: float) -> str:
    """Wall-clock time in ISO 8601 UTC, comparable across nodes and with sacct's times. (datetime
    is imported here: only rank 0 and a notice's lines show a time, and every task imports log.)"""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")
