"""Every layer: a test that skips fails instead, unless it needs hardware this machine lacks.

A missing prerequisite (no Docker SDK, no TensorFlow, no cluster) must fail its layer with a
message, never turn it green with nothing proven. Tests that need a GPU (marker `gpu`) may
skip where there is none, each with its reason.
"""

from __future__ import annotations

import pytest

HARDWARE = ("gpu",)  # markers of tests that may skip: hardware this machine does not have


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
