"""`make test`: every layer in turn, then how long each took and the slowest tests.

    python3 tests/suite.py LAYER...     # each LAYER a make target: lint, test-unit, ...

Each layer runs as `make LAYER` (its builds included: the venv, the images, the SIF and the
cluster are built by the first layer that needs them), with a line when it starts and one when
it ends, its wall time beside it. The run stops at the first layer that fails. At the end, and
after a failure too, one table: each layer's wall time, and its tests, failures and skips from
the JUnit report the layer wrote to build/test-reports/LAYER.xml, and the most disk it had in
use beyond what was used when the suite started; then the ten slowest tests and the suite's
peak disk use. Disk is sampled every 2 s on the file systems the suite writes to (the checkout,
Docker's data root under /var/lib, the temporary directory), so it counts everything on them:
images, SIFs, the venv, the cluster's volumes, and whatever else the machine writes meanwhile.
Standard library only: it runs before the venv exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "build" / "test-reports"
SLOWEST = 10
DISK_PATHS = (ROOT, Path("/var/lib"), Path(tempfile.gettempdir()))  # Docker's data root: /var/lib
DISK_EVERY_S = 2.0


class Disk:
    """Bytes in use on the file systems the suite writes to, sampled in the background: the
    peak since the start, and since a layer began."""

    def __init__(self, paths=DISK_PATHS) -> None:
        devices: dict[int, Path] = {}
        for path in paths:
            if path.exists():
                devices.setdefault(os.stat(path).st_dev, path)
        self.paths = list(devices.values())
        self.start = self.peak = self.layer_peak = self.used()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def used(self) -> int:
        return sum(shutil.disk_usage(path).used for path in self.paths)

    def _sample(self) -> None:
        while not self._stop.wait(DISK_EVERY_S):
            self.note()

    def note(self) -> None:
        used = self.used()
        self.peak, self.layer_peak = max(self.peak, used), max(self.layer_peak, used)

    def next_layer(self) -> None:
        self.note()
        self.layer_peak = self.used()

    def stop(self) -> None:
        self._stop.set()
        self.note()


def gigabytes(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def change(n: int) -> str:
    """Disk use beyond the start, with its sign: +2.7 GB, -0.3 GB (never +-0.0 GB)."""
    return f"{round(n / 1e9, 1) + 0.0:+.1f} GB"


@dataclass
class Layer:
    name: str
    seconds: float = 0.0
    status: int | None = None
    tests: int = 0
    failures: int = 0
    skipped: int = 0
    slow: list[tuple[float, str]] = field(default_factory=list)
    disk_peak: int | None = None  # bytes in use at its peak, beyond the suite's start


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


def run(layer: Layer, start: float, disk: Disk) -> None:
    print(f"== [{clock(time.monotonic() - start)}] {layer.name}", flush=True)
    report = REPORTS / f"{layer.name}.xml"
    report.unlink(missing_ok=True)
    began = time.monotonic()
    disk.next_layer()
    layer.status = subprocess.call(["make", "--no-print-directory", layer.name], cwd=ROOT)
    layer.seconds = time.monotonic() - began
    disk.note()
    layer.disk_peak = disk.layer_peak - disk.start
    read_report(layer, report)
    verdict = "ok" if layer.status == 0 else f"FAILED (exit {layer.status})"
    print(
        f"== [{clock(time.monotonic() - start)}] {layer.name}: {verdict} in {clock(layer.seconds)}",
        flush=True,
    )


def table(layers: list[Layer], total: float, disk: Disk) -> str:
    rows = [("layer", "wall time", "tests", "failed", "skipped", "disk peak", "")]
    for layer in layers:
        state = "not run" if layer.status is None else "ok" if layer.status == 0 else "FAILED"
        counts = (
            (str(layer.tests), str(layer.failures), str(layer.skipped))
            if layer.tests
            else ("-", "-", "-")
        )
        peak = "-" if layer.disk_peak is None else change(layer.disk_peak)
        rows.append((layer.name, clock(layer.seconds), *counts, peak, state))
    rows.append(("total", clock(total), "", "", "", change(disk.peak - disk.start), ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    slow = sorted((t for layer in layers for t in layer.slow), reverse=True)[:SLOWEST]
    if slow:
        lines.append(f"the {len(slow)} slowest tests:")
        lines += [f"  {clock(seconds):>12}  {name}" for seconds, name in slow]
    where = ", ".join(str(path) for path in disk.paths)
    lines.append(
        f"disk: peak {gigabytes(disk.peak - disk.start)} in use beyond the suite's start "
        f"({gigabytes(disk.start)} used at the start, {gigabytes(disk.peak)} at the "
        f"peak, on the file systems of {where})"
    )
    lines.append(f"JUnit reports: {REPORTS.relative_to(ROOT)}/")
    return "\n".join(lines)


def main(names: list[str]) -> int:
    REPORTS.mkdir(parents=True, exist_ok=True)
    layers = [Layer(name) for name in names]
    start = time.monotonic()
    disk = Disk()
    for layer in layers:
        run(layer, start, disk)
        if layer.status != 0:
            break
    disk.stop()
    print(table(layers, time.monotonic() - start, disk), flush=True)
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
