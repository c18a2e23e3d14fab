"""tfslurm-run reads tfslurm-entry's options before PROGRAM to learn the strategy, the result
file and whether a mode was asked, so it must know which of them take a value and which are
modes: its lists must be every option that does (options.py) and every mode (cli.py)."""

from __future__ import annotations

import re

from tfslurm_entry.cli import OPTIONS, build_parser
from tfslurm_entry.launcher import LAUNCHER


def listed(name: str) -> set[str]:
    (line,) = re.findall(rf'^readonly {name}=" (.*) "$', LAUNCHER.read_text(), re.M)
    return set(line.split())


def test_tfslurm_run_knows_every_option_that_takes_a_value():
    taking = {opt.flag for opt in OPTIONS if not opt.spec.switch}
    have = listed("ENTRY_VALUE_OPTIONS")
    assert have == taking, f"add {taking - have} to, remove {have - taking} from {LAUNCHER}"


def test_tfslurm_run_knows_every_mode():
    (group,) = build_parser()._mutually_exclusive_groups
    modes = {flag for action in group._group_actions for flag in action.option_strings}
    modes -= {"--install-launcher", "--check-mount"}  # the launcher's own questions, not a step
    modes -= {"--make-step-key"}  # a user's once-only set-up, not a step
    modes -= {"--site-check-observer"}  # what tfslurm-run --site-check starts beside its step
    have = listed("ENTRY_MODES") - {"--help", "-h", "--version"}
    assert have == modes, f"add {modes - have} to, remove {have - modes} from {LAUNCHER}"
