"""The integration tests' prerequisites, and their children: started per test, killed at
its end, passed or not."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_tensorflow_localhost import Processes  # this directory is on sys.path (no package)


def pytest_configure(config: pytest.Config) -> None:
    """A missing prerequisite fails the layer with one line, it never skips it. A hook, not
    an import-time check: pytest prints a hook's UsageError as one line, also with xdist."""
    if any(importlib.util.find_spec(name) is None for name in ("tensorflow", "tf_keras")):
        raise pytest.UsageError(
            "the integration tests need TensorFlow and tf-keras: run `make venv`"
        )


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()
