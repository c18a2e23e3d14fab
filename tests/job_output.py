"""What a successful job's output must not contain: lines a user reads as a failed run."""

from __future__ import annotations

import re

# Any error-level line of TensorFlow's C++ logging ("E0000 00:00:..." before absl's logging is
# set up, "E1125 15:01:04.063..." after), its coordination-service errors ("unhealthy ...
# crashed", "Connection refused") and Python tracebacks.
ERROR_LINE = re.compile(r"\bE\d{4} \d\d:\d\d:|E0000|crashed|unhealthy|Connection refused|Traceback")


def error_lines(text: str, ignore: str | None = None) -> list[str]:
    """The lines of ``text`` that match ERROR_LINE, except those containing ``ignore``."""
    return [
        line
        for line in text.splitlines()
        if ERROR_LINE.search(line) and (ignore is None or ignore not in line)
    ]
