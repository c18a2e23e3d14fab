"""Every layer: a test that skips fails instead, unless it needs hardware this machine lacks.

A missing prerequisite (no Docker SDK, no TensorFlow, no cluster) must fail its layer with a
message, never turn it green with nothing proven. Tests that need a GPU (marker `gpu`) may
skip where there is none, each with its reason.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HARDWARE = ("gpu",)  # markers of tests that may skip: hardware this machine does not have
VENV = Path(__file__).resolve().parents[1] / ".venv"
# What every layer imports, and only the project's virtual environment (make venv) has.
NEEDED = ("hostlist", "psutil", "docker")


def pytest_configure(config: pytest.Config) -> None:
    """A pytest from another Python (the system's, a user's own venv) would fail to collect
    dozens of modules, each with its own traceback: say once which Python to use instead."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        pytest.exit(
            f"this pytest runs {sys.executable}, which lacks {', '.join(missing)}: run the "
            f"tests with the project's environment, {VENV}/bin/pytest (make venv creates it), "
            "or through make (make test, make test-e2e)",
            returncode=4,
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    if any(item.get_closest_marker(name) for name in HARDWARE):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"skipped: {reason}. Only a test that needs hardware this machine lacks (a GPU) may "
        "skip: a missing prerequisite fails its layer"
    )
