"""A step's start with real entrypoints: N `tfslurm-entry` processes on this machine, as srun
would start one node's tasks (fake Slurm variables, the program `sh -c 'exit 0'`), timed from
the first spawn to the last exit; this tree and a reference commit side by side, alternating,
in one run.

Unlike the supervision figures (bench/supervision.py plays members as threads), every task here
is a whole process: its Python start, its resolution, its start-up check (step/reach.py) and its
check-in. The reference is 57274ad, the last commit before the start-up check, which made a
256-task step twice as slow to start (issue 46); ba68f73 is the last before the check-in proved
the step's secret (a challenge from rank 0, a MAC from each member): every step here has one.

    python -m bench.stepstart --tasks 256 --rounds 2
"""

from __future__ import annotations

import argparse
import io
import json
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, BenchError, progress
from bench.localstep import LocalStep

REFERENCE = "57274ad"  # the last commit before the start-up check
BEFORE = "9836bd2"  # the start-up check, before the check per node (issue 46's figures)
UNPROVEN = "ba68f73"  # the last commit before the check-in's proof of the step's secret
# Each step has a secret, as tfslurm-run gives it (the commits before UNPROVEN ignore it).
SECRET = {"TFSLURM_STEP_SECRET": "3c" * 32}
PROGRAM = ["sh", "-c", "exit 0"]
TIMEOUT_S = 300
CHECKED_IN = re.compile(r"all (\d+) tasks checked in ([\d.]+) s after rank 0 listened")


def reference_tree(commit: str = REFERENCE) -> Path:
    """The package as it was at commit, unpacked once under build/bench/."""
    dest = ROOT / "build" / "bench" / f"tree-{commit}"
    if (dest / "tfslurm_entry" / "__init__.py").exists():
        return dest
    found = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "tfslurm_entry"],
        capture_output=True,
    )
    if found.returncode != 0:
        why = found.stderr.decode(errors="replace").strip()
        raise BenchError(f"cannot read commit {commit} from the repository's history: {why}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(found.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def one_step(tree: Path, tasks: int) -> dict:
    """Start every task of one step from tree's package; seconds to the last exit, rank 0's
    check-in time, and the CPU seconds of every task (and its program) together: with more
    tasks than cores the step is CPU-bound, and its wall time is about its CPU over the cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory(prefix="tfslurm-bench-step-") as scratch:
        env = {"PYTHONPATH": str(tree), "TMPDIR": scratch, **SECRET}
        with LocalStep(PROGRAM, tasks, Path(scratch), timeout=120, **env) as step:
            try:
                statuses = step.wait(TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise BenchError(
                    f"{tasks}-task step from {tree} did not end in {TIMEOUT_S} s"
                ) from None
            took = time.monotonic() - step.started
            bad = [rank for rank, status in enumerate(statuses) if status != 0]
            if bad:
                said = step.log(bad[0])[-600:]
                raise BenchError(f"rank {bad[0]} of {tree} exited {statuses[bad[0]]}: {said}")
            found = CHECKED_IN.search(step.log(0))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {
        "seconds": round(took, 2),
        "checkin_s": float(found.group(2)) if found else None,
        "cpu_s": round(cpu, 2),
    }


def measure(tasks: int, rounds: int, reference: str = REFERENCE, before: str = BEFORE) -> dict:
    """Alternate the reference, the commit before the check per node, the commit before the
    check-in's proof and this tree, rounds times each; the ratios are this tree's median over
    the reference's and over the unproven commit's."""
    trees = {c: reference_tree(c) for c in (reference, before, UNPROVEN)} | {"this tree": ROOT}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for round_ in range(rounds):
        for name, tree in trees.items():
            run = one_step(tree, tasks)
            said = f"{run['seconds']:.1f} s, the tasks' CPU {run['cpu_s']:.1f} s"
            progress("stepstart", f"round {round_ + 1}/{rounds}: {name}: {said}")
            runs[name].append(run)
    median = {name: statistics.median(r["seconds"] for r in rs) for name, rs in runs.items()}
    cpu = {name: statistics.median(r["cpu_s"] for r in rs) for name, rs in runs.items()}
    return {
        "tasks": tasks,
        "rounds": rounds,
        "reference": reference,
        "program": shlex.join(PROGRAM),
        "runs": runs,
        "median_s": median,
        "ratio": round(median["this tree"] / median[reference], 3),
        "median_cpu_s": cpu,
        "cpu_ratio": round(cpu["this tree"] / cpu[reference], 3),
        "unproven": UNPROVEN,
        "proof_ratio": round(median["this tree"] / median[UNPROVEN], 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        print(json.dumps(measure(args.tasks, args.rounds), indent=1))
    except BenchError as err:
        print(f"bench: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
