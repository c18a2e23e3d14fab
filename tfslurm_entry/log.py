"""The entrypoint's own lines: one per decision, on stderr, where the program's output goes too."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime, timezone

Log = Callable[[str], None]


def log(message: str) -> None:
    """One line on stderr, prefixed so it stands out among the program's own output."""
    print(f"tfslurm: {message}", file=sys.stderr, flush=True)


def timestamp(seconds: float) -> str:
    """Wall-clock time in ISO 8601 UTC, comparable across nodes and with sacct's times."""
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")
