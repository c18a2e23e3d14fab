"""The integration tests' children: started per test, killed at its end, passed or not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_tensorflow_localhost import Processes  # this directory is on sys.path (no package)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()
