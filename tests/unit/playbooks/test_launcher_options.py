"""tfslurm-run reads tfslurm-entry's options before PROGRAM to learn the strategy, so it must
know which of them take a value: its list must be every option that does (options.py)."""

from __future__ import annotations

import re

from tests.repo import ROOT
from tfslurm_entry.cli import OPTIONS

LAUNCHER = ROOT / "playbooks" / "roles" / "tfslurm_launcher" / "templates" / "tfslurm-run.j2"


def test_tfslurm_run_knows_every_option_that_takes_a_value():
    (case,) = re.findall(r"^\s*(--[a-z-]+(?: \| --[a-z-]+)*)\) value_of=\$arg ;;$",
                         LAUNCHER.read_text(), re.M)  # fmt: skip
    listed = set(case.split(" | "))
    taking = {opt.flag for opt in OPTIONS if not opt.spec.switch}
    assert listed == taking, f"add {taking - listed} to, remove {listed - taking} from {LAUNCHER}"
