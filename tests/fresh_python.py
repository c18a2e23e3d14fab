"""A fresh Python interpreter for tests of what happens at interpreter start (the image's
start-up hook): same Python, the repository importable, extra environment variables."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.repo import ROOT


def run_python(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=60,
    )
