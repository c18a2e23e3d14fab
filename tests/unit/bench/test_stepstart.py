"""bench/stepstart.py on a small step: real entrypoints end, rank 0's check-in is read, and a
reference that is not in the history is one clear error."""

from __future__ import annotations

import pytest

from bench import stepstart
from bench.common import ROOT, BenchError


def test_a_small_step_of_real_entrypoints_ends_and_is_timed():
    run = stepstart.one_step(ROOT, 4)
    assert run["seconds"] > 0
    assert run["checkin_s"] is not None and 0 <= run["checkin_s"] < run["seconds"]
    assert run["cpu_s"] > 0.1  # four Python starts at the least


def test_a_reference_that_is_not_in_the_history_says_so():
    with pytest.raises(BenchError, match="cannot read commit 0000000"):
        stepstart.reference_tree("0000000")
