"""What a successful job's output must not contain: lines a user reads as a failed run."""

from __future__ import annotations

import re

# TensorFlow's coordination-service errors ("E0000 ... unhealthy ... crashed", "Connection
# refused") and Python tracebacks.
ERROR_LINE = re.compile(r"E0000|crashed|unhealthy|Connection refused|Traceback")


def error_lines(text: str, ignore: str | None = None) -> list[str]:
    """The lines of ``text`` that match ERROR_LINE, except those containing ``ignore``."""
    return [
        line
        for line in text.splitlines()
        if ERROR_LINE.search(line) and (ignore is None or ignore not in line)
    ]
