"""Measurement 1: what resolving the cluster costs a task, the kit against its alternatives.

Whole process, the same SLURM_* variables for each: `tfslurm-entry --print-config`, a script
using TensorFlow's SlurmClusterResolver (bench/upstream_resolver.py) and a stdlib hand-written
script (bench/handwritten_tf_config.py), interleaved so that load on a shared machine hits all
three alike; ratios are per repetition. Then resolution inside a running process, at 32,768
tasks, for tfslurm_entry.resolve and for SlurmClusterResolver after TensorFlow is imported.

    python -m bench.resolution [--nodes 4096] [--tasks-per-node 8] [--repeat 15]

alone (`make bench-resolve`) times tfslurm-entry only, at one size: whole process and in process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import BenchError, progress, ratio_summary, summary
from tfslurm_entry.resolve import Options, resolve
from tfslurm_entry.resolve.gpus import detect_node_gpus
from tfslurm_entry.resolve.slurm_env import read_step_env

STAGE = "resolution"
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
TOOLS = {
    "tfslurm-entry": [str(BIN / "tfslurm-entry"), "--print-config"],
    "SlurmClusterResolver": [sys.executable, str(HERE / "upstream_resolver.py")],
    "hand-written": [sys.executable, str(HERE / "handwritten_tf_config.py")],
}


def fake_step(nodes: int, per_node: int, procid: int) -> dict[str, str]:
    """The variables srun sets for one task of a nodes x per_node block step."""
    width = len(str(nodes))
    return {
        "SLURM_PROCID": str(procid),
        "SLURM_STEP_NUM_TASKS": str(nodes * per_node),
        "SLURM_STEP_NODELIST": f"n[{1:0{width}d}-{nodes:0{width}d}]",
        "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{nodes})",
        "SLURM_JOB_ID": "123456",
        "SLURM_STEP_ID": "0",
    }


def _run(tool: str, env: dict[str, str]) -> tuple[float, list[str]]:
    """Seconds one whole process took, and the worker hosts of the TF_CONFIG it printed."""
    start = time.perf_counter()
    proc = subprocess.run(TOOLS[tool], env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise BenchError(f"{tool} failed ({proc.returncode}): {proc.stderr.strip()[-1000:]}")
    config = json.loads(proc.stdout)["TF_CONFIG"]
    return took, [a.rsplit(":", 1)[0] for a in config["cluster"]["worker"]]


def whole_process(nodes: int, per_node: int, repeat: int) -> dict:
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        **fake_step(nodes, per_node, nodes * per_node - 1),
    }
    env.pop("TF_CONFIG", None)
    samples: dict[str, list[float]] = {tool: [] for tool in TOOLS}
    agree = True
    tools = list(TOOLS)
    for i in range(repeat):
        hosts = {}
        for tool in tools[i % 3 :] + tools[: i % 3]:  # rotate who goes first
            took, hosts[tool] = _run(tool, env)
            samples[tool].append(took)
        agree = agree and len({tuple(h) for h in hosts.values()}) == 1
    entry = samples["tfslurm-entry"]
    return {
        "nodes": nodes,
        "tasks_per_node": per_node,
        "tasks": nodes * per_node,
        "seconds": {tool: summary(s) for tool, s in samples.items()},
        "ratio_to_entry": {
            tool: ratio_summary(s, entry) for tool, s in samples.items() if tool != "tfslurm-entry"
        },
        "same_hosts_in_rank_order": agree,
    }


def time_resolve(env: dict[str, str], repeat: int) -> list[float]:
    """Seconds tfslurm_entry takes to resolve one task's plan in a running process."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        plan = resolve(read_step_env(env), Options(), detect_node_gpus(""))
        plan.tf_config  # noqa: B018 - building the cluster dict is part of the cost
        samples.append(time.perf_counter() - start)
    return samples


def in_process(tasks: int, per_node: int, repeat: int) -> dict:
    nodes = tasks // per_node
    env = fake_step(nodes, per_node, 0)
    ours = time_resolve(env, repeat)
    proc = subprocess.run(
        [*TOOLS["SlurmClusterResolver"], "--in-process", str(repeat)],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise BenchError(f"SlurmClusterResolver in-process failed: {proc.stderr.strip()[-1000:]}")
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "tasks": tasks,
        "tasks_per_node": per_node,
        "seconds": {
            "tfslurm_entry.resolve": summary(ours),
            "SlurmClusterResolver": summary(theirs),
        },
        "ratio_to_entry": {"SlurmClusterResolver": ratio_summary(theirs, ours)},
    }


def measure(node_counts: list[int], per_node: int, repeat: int, in_process_tasks: int) -> dict:
    results = []
    for nodes in node_counts:
        progress(
            STAGE,
            f"whole process, {nodes} nodes x {per_node} tasks, {repeat} rounds of "
            f"{', '.join(TOOLS)}",
        )
        row = whole_process(nodes, per_node, repeat)
        med = {t: row["seconds"][t]["median"] for t in TOOLS}
        progress(STAGE, "  medians: " + ", ".join(f"{t} {s * 1000:.0f} ms" for t, s in med.items()))
        results.append(row)
    progress(STAGE, f"in-process resolution of {in_process_tasks} tasks, {repeat} rounds")
    inproc = in_process(in_process_tasks, per_node, max(repeat, 5))
    progress(
        STAGE,
        "  medians: "
        + ", ".join(f"{t} {s['median'] * 1000:.1f} ms" for t, s in inproc["seconds"].items()),
    )
    return {"whole_process": results, "in_process": inproc, "repeat": repeat}


def main(argv: list[str] | None = None) -> int:
    from bench.report import fmt_s  # matplotlib: only for this printout

    parser = argparse.ArgumentParser(description="tfslurm-entry's resolution cost at one size")
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--tasks-per-node", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    n, k = args.nodes, args.tasks_per_node
    env = {**os.environ, **fake_step(n, k, n * k - 1)}
    whole = [_run("tfslurm-entry", env)[0] for _ in range(args.repeat)]
    progress(STAGE, f"whole process, {n} nodes x {k} tasks: {fmt_s(summary(whole), 'ms', 1000)}")
    inside = time_resolve(fake_step(n, k, 0), args.repeat)
    progress(STAGE, f"in-process resolve(), {n * k} tasks: {fmt_s(summary(inside), 'ms', 1000)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
