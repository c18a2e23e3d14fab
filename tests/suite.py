"""`make test`: every layer in turn, then how long each took and the slowest tests.

    python3 tests/suite.py LAYER...     # each LAYER a make target: lint, test-unit, ...

Each layer runs as `make LAYER` (its builds included: the venv, the images, the SIF and the
cluster are built by the first layer that needs them), with a line when it starts and one when
it ends, its wall time beside it. The run stops at the first layer that fails. At the end, and
after a failure too, one table: each layer's wall time, and its tests, failures and skips from
the JUnit report the layer wrote to build/test-reports/LAYER.xml; then the ten slowest tests.
Standard library only: it runs before the venv exists.
"""

from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "build" / "test-reports"
SLOWEST = 10


@dataclass
class Layer:
    name: str
    seconds: float = 0.0
    status: int | None = None
    tests: int = 0
    failures: int = 0
    skipped: int = 0
    slow: list[tuple[float, str]] = field(default_factory=list)


def clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def read_report(layer: Layer, path: Path) -> None:
    """The layer's counts and test times from its JUnit XML, if it wrote one."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return
    for suite in root.iter("testsuite"):
        layer.tests += int(suite.get("tests", 0))
        layer.failures += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        layer.skipped += int(suite.get("skipped", 0))
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        layer.slow.append((float(case.get("time", 0)), name))


def run(layer: Layer, start: float) -> None:
    print(f"== [{clock(time.monotonic() - start)}] {layer.name}", flush=True)
    report = REPORTS / f"{layer.name}.xml"
    report.unlink(missing_ok=True)
    began = time.monotonic()
    layer.status = subprocess.call(["make", "--no-print-directory", layer.name], cwd=ROOT)
    layer.seconds = time.monotonic() - began
    read_report(layer, report)
    verdict = "ok" if layer.status == 0 else f"FAILED (exit {layer.status})"
    print(f"== [{clock(time.monotonic() - start)}] {layer.name}: {verdict} in "
          f"{clock(layer.seconds)}", flush=True)  # fmt: skip


def table(layers: list[Layer], total: float) -> str:
    rows = [("layer", "wall time", "tests", "failed", "skipped", "")]
    for layer in layers:
        state = "not run" if layer.status is None else "ok" if layer.status == 0 else "FAILED"
        counts = (str(layer.tests), str(layer.failures), str(layer.skipped)) if layer.tests else (
            "-", "-", "-")  # fmt: skip
        rows.append((layer.name, clock(layer.seconds), *counts, state))
    rows.append(("total", clock(total), "", "", "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]  # fmt: skip
    slow = sorted((t for layer in layers for t in layer.slow), reverse=True)[:SLOWEST]
    if slow:
        lines.append(f"the {len(slow)} slowest tests:")
        lines += [f"  {clock(seconds):>12}  {name}" for seconds, name in slow]
    lines.append(f"JUnit reports: {REPORTS.relative_to(ROOT)}/")
    return "\n".join(lines)


def main(names: list[str]) -> int:
    REPORTS.mkdir(parents=True, exist_ok=True)
    layers = [Layer(name) for name in names]
    start = time.monotonic()
    for layer in layers:
        run(layer, start)
        if layer.status != 0:
            break
    print(table(layers, time.monotonic() - start), flush=True)
    failed = [layer.name for layer in layers if layer.status not in (0, None)]
    tests = sum(layer.tests for layer in layers)
    bad = sum(layer.failures for layer in layers)
    skipped = sum(layer.skipped for layer in layers)
    # The plain closing line, with every layer's tests: CI reads it.
    print(
        f"suite: {tests - bad - skipped} passed, {bad + len(failed) * (not bad)} failed, "
        f"{skipped} skipped",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
