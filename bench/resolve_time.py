"""Resolution cost: whole `tfslurm-entry --print-config` processes, and in-process resolve().

A benchmark, not a test: it prints medians and spreads and judges nothing.
Usage: python -m bench.resolve_time [--nodes 4096] [--tasks-per-node 8] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from bench.resolution import fake_step, time_resolve


def summary(samples: list[float]) -> str:
    quartiles = statistics.quantiles(samples, n=4) if len(samples) > 1 else samples * 3
    return (
        f"median {statistics.median(samples) * 1000:8.1f} ms  "
        f"(IQR {quartiles[0] * 1000:.1f}-{quartiles[2] * 1000:.1f} ms, n={len(samples)})"
    )


def whole_process(nodes: int, per_node: int, repeat: int) -> list[float]:
    entry = shutil.which("tfslurm-entry", path=os.path.dirname(sys.executable)) or "tfslurm-entry"
    env = {**os.environ, **fake_step(nodes, per_node, nodes * per_node - 1)}
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([entry, "--print-config"], env=env, check=True, stdout=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return samples


def in_process(nodes: int, per_node: int, repeat: int) -> list[float]:
    return time_resolve(fake_step(nodes, per_node, 0), repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--tasks-per-node", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    n, k = args.nodes, args.tasks_per_node
    print(f"machine: {os.cpu_count()} cpus, Python {sys.version.split()[0]}", flush=True)
    t0 = time.perf_counter()
    print(
        f"whole process, {n} nodes x {k} tasks: {summary(whole_process(n, k, args.repeat))}",
        flush=True,
    )
    print(f"in-process resolve(), {n * k} tasks:  {summary(in_process(n, k, args.repeat))}")
    print(f"(took {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
