"""How tasks and the step end: statuses as shells show them, and the verdict for batch scripts."""

import re

import pytest

from tfslurm_entry.step import outcome, preempted


@pytest.mark.parametrize(
    ("status", "failure", "lost", "line"),
    [
        (0, None, [], "completed"),
        (0, None, ["worker 1 (rank 3 on c2)"], "completed; lost worker 1 (rank 3 on c2)"),
        (1, outcome.Failure(1, "c1", None, "is gone"), [], "interrupted: rank 1 on c1 is gone"),
        (
            1,
            outcome.Failure(2, "c2", 137),
            [],
            "interrupted: rank 2 on c2 failed with exit 137 (SIGKILL)",
        ),
        (3, outcome.Failure(0, "c1", 3), [], "failed: rank 0 on c1 failed with exit 3"),
        (1, outcome.Failure(2, "c2", 2), [], "failed: rank 2 on c2 failed with exit 2"),
    ],
)
def test_the_verdict_says_whether_a_requeue_may_help(status, failure, lost, line):
    assert outcome.verdict(status, failure, lost) == line


def test_exit_status_and_its_description():
    assert outcome.exit_status(-9) == 137
    assert outcome.exit_status(3) == 3
    assert outcome.describe(137) == "exit 137 (SIGKILL)"
    assert outcome.describe(3) == "exit 3"


def test_rank_0_says_when_slurm_kills_before_the_save_timeout():
    """--save-timeout against what tfslurm-run found (GraceTime, KillWait) and the time limit:
    one line naming each window shorter than it, shortest first; none when all are longer."""
    windows = {"after a preemption's notice (GraceTime)": 20.0, "after scancel (KillWait)": 30.0}
    line = preempted.sooner(300, windows, left=118.4)
    assert line == (
        "--save-timeout 300 s is longer than Slurm may wait: it kills what has not ended 20 s "
        "after a preemption's notice (GraceTime), 30 s after scancel (KillWait), at the time "
        "limit in 118 s; a save must end within its stop's window "
        "(docs/failures.md#how-long-a-save-may-take)"
    )
    assert preempted.sooner(15, windows, left=None) is None
    assert preempted.sooner(25, windows, left=None).count(" s after ") == 1


def test_the_result_files_help_names_every_verdict_outcome_owns():
    """A batch script acts on the verdict's first word: --result-file's help names all four,
    and the lines outcome and preempted make start with outcome's words."""
    from tfslurm_entry.options import options_of
    from tfslurm_entry.task.run import Settings

    (result_file,) = [o for o in options_of(Settings) if o.name == "result_file"]
    words = re.findall(r"\b(" + "|".join(outcome.VERDICTS) + r")\b", result_file.spec.help)
    assert sorted(set(words)) == sorted(outcome.VERDICTS)
    assert outcome.verdict(0, None, []).split()[0] == outcome.COMPLETED
    assert outcome.verdict(3, outcome.Failure(0, "c1", 3), []).startswith(outcome.FAILED + ":")
    assert preempted.PREEMPTED is outcome.PREEMPTED and preempted.GONE is outcome.GONE
