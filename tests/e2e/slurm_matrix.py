"""docs/resolution.md's Slurm compatibility table from `make test-slurm-versions`' runs.

    python tests/e2e/slurm_matrix.py build/slurm-versions/*.xml [--page docs/resolution.md]

Each file is one release's pytest JUnit report (build/slurm-versions/<version>.xml); the table
(case x release: pass/FAIL and seconds) replaces what stands between the page's
`<!-- slurm-versions:begin -->` and `<!-- slurm-versions:end -->` lines. Exit status 1 when a
case failed or a release has no report.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import xml.etree.ElementTree as ET
from datetime import date
from pathlib import Path

BEGIN, END = "<!-- slurm-versions:begin -->", "<!-- slurm-versions:end -->"
RELEASES = ("22.05", "24.11", "26.05")
NOTES = {
    "22.05": "tfslurm-entry from a venv on the nodes (Debian has no Apptainer for bookworm); "
    "`slurms_oci_container` passes when the kit refuses the bundle in one line (22.05 starts "
    "--container tasks without their own variables)"
}


def results(report: Path) -> dict[str, tuple[str, float]]:
    """Each test case of one run: (outcome, seconds)."""
    out = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "FAIL"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "pass"
        out[case.get("name")] = (outcome, float(case.get("time", 0)))
    return out


def table(runs: dict[str, dict[str, tuple[str, float]]]) -> str:
    cases = list(dict.fromkeys(name for run in runs.values() for name in run))
    lines = [
        "| case | " + " | ".join(f"Slurm {v}" for v in RELEASES) + " |",
        "|---|" + "---|" * len(RELEASES),
    ]
    for case in cases:
        cells = []
        for version in RELEASES:
            outcome, seconds = runs.get(version, {}).get(case, ("not run", 0.0))
            cells.append(outcome if outcome == "not run" else f"{outcome} ({seconds:.0f} s)")
        lines.append(f"| `{case.removeprefix('test_')}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def block(runs: dict[str, dict[str, tuple[str, float]]]) -> str:
    notes = "; ".join(f"{v}: {text}" for v, text in NOTES.items())
    return "\n".join(
        [
            BEGIN,
            f"`make test-slurm-versions`, {date.today()}, on a {platform.machine()} host with "
            f"{os.cpu_count()} cores ({notes}):",
            "",
            table(runs),
            END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--page", type=Path, default=Path("docs/resolution.md"))
    args = parser.parse_args(argv)
    runs = {r.stem: results(r) for r in args.reports if r.is_file()}
    text = args.page.read_text()
    if BEGIN not in text or END not in text:
        print(f"{args.page} has no {BEGIN} ... {END} block", file=sys.stderr)
        return 2
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    args.page.write_text(pattern.sub(lambda _: block(runs), text))
    print(table(runs))
    failed = [v for v in RELEASES if v not in runs or any(o == "FAIL" for o, _ in runs[v].values())]
    if failed:
        print(f"failed or not run on Slurm {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
