"""The README and docs say what the code does: their generated parts (the options table, the
examples' output) are what the CLI prints now, and every make target and tfslurm-entry flag
they name exists."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from tests import docs

ROOT = docs.ROOT
README = ROOT / "README.md"
# Every hand-written page a reader follows (docs/benchmarks.md is written by make bench).
READ = sorted(
    page
    for page in {*docs.PAGES, *ROOT.glob("*/README.md"), *ROOT.glob("*/*/README.md")}
    if page != ROOT / "docs" / "benchmarks.md"
    and not any(part.startswith(".") for part in page.relative_to(ROOT).parts)  # caches, venvs
)


def _ids(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", docs.PAGES, ids=_ids)
def test_generated_parts_are_what_the_code_prints(page):
    text = page.read_text()
    new = docs.generated(text)
    diff = "".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True), n=1))
    assert new == text, f"{_ids(page)} drifted from the code (make docs rewrites it):\n{diff}"


def test_the_readme_carries_the_options_table_and_explain_and_error_examples():
    text = README.read_text()
    assert text.count("<!-- make docs: options -->") == 1
    commands = [m[3] for m in docs._RUN.finditer(text)]
    assert any("--explain" in c for c in commands), commands
    assert any("error:" in m[4] for m in docs._RUN.finditer(text))
    assert len(text.splitlines()) <= 200


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("| `TFSLURM_CHIEF_TIMEOUT` | 300 |", "| `TFSLURM_CHIEF_TIMEOUT` | 200 |"),
        ("n10:12005  0\n", "n10:53008  0\n"),
    ],
    ids=["a default in the table", "an address in --explain's example"],
)
def test_a_changed_table_cell_or_example_line_is_drift(old, new):
    text = README.read_text()
    assert text.count(old) == 1, f"the README no longer has {old!r}: pick another line"
    changed = text.replace(old, new)
    assert docs.generated(changed) == text != changed


def _code(text: str) -> list[str]:
    """The page's code: each line of a fenced block, each inline `span`."""
    fenced = re.findall(r"^```.*?^```", text, re.S | re.M)
    rest = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return [line for block in fenced for line in block.splitlines()] + re.findall(
        r"`([^`]+)`", rest
    )


def _targets() -> set[str]:
    makefiles = [ROOT / "Makefile", *ROOT.glob("*/*.mk")]
    rule = re.compile(r"^([a-zA-Z0-9_.-]+)\s*:(?!=)", re.M)
    return {name for path in makefiles for name in rule.findall(path.read_text())}


@pytest.mark.parametrize("page", READ, ids=_ids)
def test_every_make_target_named_exists(page):
    named = {
        t for code in _code(page.read_text()) for t in re.findall(r"\bmake ([a-z][\w-]*)", code)
    }
    assert named - _targets() == set(), f"{_ids(page)} names make targets that do not exist"


def _flags() -> set[str]:
    from tfslurm_entry.cli import build_parser

    return {flag for action in build_parser()._actions for flag in action.option_strings}


@pytest.mark.parametrize("page", READ, ids=_ids)
def test_every_flag_given_to_tfslurm_entry_exists(page):
    """Flags after `tfslurm-entry` or the SIF, before the program (whose own flags follow)."""
    unknown = set()
    for code in _code(page.read_text()):
        for word in docs.entry_args(code.split()) or []:
            if re.search(r"\.(py|sh)$|^/|^\$", word):  # the program: its own flags follow
                break
            unknown |= {word.split("=")[0]} if word.startswith("--") else set()
    assert unknown - _flags() == set(), f"{_ids(page)} gives tfslurm-entry flags it does not have"


def test_make_help_lists_every_target_that_says_what_it_does():
    """The README says `make help` lists the targets: every rule with a `## ` description,
    names with digits and dots too (test-e2e, cifar10-sample)."""
    import subprocess

    makefiles = [ROOT / "Makefile", *ROOT.glob("*/*.mk")]
    described = re.compile(r"^([^\s:#=]+)\s*:[^=\n]*## ", re.M)
    targets = {name for path in makefiles for name in described.findall(path.read_text())}
    shown = subprocess.run(
        ["make", "-s", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    listed = {line.split()[0] for line in shown.splitlines() if line.strip()}
    assert {"test-e2e", "cifar10-sample"} <= targets
    assert targets - listed == set()
