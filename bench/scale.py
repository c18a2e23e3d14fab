"""`make bench`, large steps: supervision simulated up to 4096 tasks on localhost
(bench/supervision.py), and real steps on a many-node dev cluster with its bring-up time.

The many-node cluster is its own compose project (PROJECT), brought up fresh for each node
count and removed at the end, so the cluster the other sections use is untouched. Its tasks
run examples/scale/check_tf_config.py, a trivial program: 128 TensorFlow processes do not fit
in a 2-core machine, and what is measured here is Slurm, Apptainer and the entrypoint.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from bench import supervision
from bench.common import ROOT, BenchError, Cluster, progress, summary

PROJECT = "tfslurm-bench-scale"
DEVCLUSTER = [sys.executable, str(ROOT / "slurm-dev-cluster" / "devcluster.py")]
SIF = "/data/tf-slurm.sif"
CHECK = "/data/examples/scale/check_tf_config.py"
IDLE = re.compile(r"(\d+) nodes up and idle ([\d.]+) s after")
LAST_END = re.compile(r"rank 0 on \S+: all (\d+) programs ended with exit 0, the last at (\S+)")


def devcluster(*args: str) -> str:
    """devcluster.py on the bench's own project; its output (progress lines)."""
    env = {**os.environ, "TFSLURM_DEV_PROJECT": PROJECT}
    proc = subprocess.run([*DEVCLUSTER, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchError(
            f"devcluster.py {' '.join(args)} on {PROJECT} failed:\n"
            f"{(proc.stdout + proc.stderr)[-2000:]}"
        )
    return proc.stdout


def bring_up(nodes: int) -> dict:
    """A fresh cluster of `nodes` compute nodes: seconds until every node was idle (images
    built already), and until `up` returned (the SIF and examples installed too)."""
    devcluster("down")
    out = devcluster("up", "--nodes", str(nodes))
    found = IDLE.search(out)
    total = re.findall(r"\[tf-slurm\s+([\d.]+)s\] dev-cluster: done", out)
    if not found or not total:
        raise BenchError(f"devcluster.py up printed no bring-up time:\n{out[-2000:]}")
    return {"nodes": nodes, "idle_s": float(found.group(2)), "up_s": float(total[-1])}


def _step_figures(log: str, started: float, tasks: int) -> dict:
    """From rank 0's lines: check-in, and every task ended (last program end - start)."""
    checked, ended = supervision.CHECKED_IN.search(log), LAST_END.search(log)
    if not checked or not ended or int(ended.group(1)) != tasks:
        raise BenchError(f"a {tasks}-task step did not end well:\n{log[-3000:]}")
    last = datetime.fromisoformat(ended.group(2)).timestamp()
    return {"checkin_s": float(checked.group(2)), "every_task_ended_s": last - started}


def run_srun(cluster: Cluster, nodes: int, per_node: int) -> dict:
    """srun from the login node: until every task ended, and until srun returned."""
    out = cluster.ok(
        f"mkdir -p /data/scale && cd /data && a=$EPOCHREALTIME; srun -N{nodes} "
        f"--ntasks-per-node={per_node} apptainer run {SIF} {CHECK} > scale/srun.out 2>&1; "
        "rc=$?; b=$EPOCHREALTIME; echo $a $b $rc; cat scale/srun.out",
        timeout=300,
    )
    first, log = out.split("\n", 1)
    a, b, rc = first.split()
    if rc != "0":
        raise BenchError(f"srun of {nodes * per_node} tasks exited {rc}:\n{log[-3000:]}")
    figures = _step_figures(log, float(a), nodes * per_node)
    return {**figures, "srun_s": float(b) - float(a)}


def run_sbatch(cluster: Cluster, nodes: int, per_node: int) -> dict:
    """sbatch of a script whose step is the same srun: submission until every task ended."""
    wrap = f"srun apptainer run {SIF} {CHECK}"
    out = cluster.ok(
        f"mkdir -p /data/scale && cd /data && a=$EPOCHREALTIME; id=$(sbatch --parsable "
        f"-N{nodes} --ntasks-per-node={per_node} -o /data/scale/sbatch-%j.out --wrap '{wrap}'); "
        "while squeue -h -j $id 2>/dev/null | grep -q .; do sleep 0.25; done; "
        "echo $a $id; cat /data/scale/sbatch-$id.out",
        timeout=300,
    )
    first, log = out.split("\n", 1)
    a, job = first.split()
    state = cluster.ok(f"sacct -n -X -P -j {job} -o State").strip()
    if state != "COMPLETED":
        raise BenchError(f"job {job} ({nodes * per_node} tasks) ended {state}:\n{log[-3000:]}")
    return _step_figures(log, float(a), nodes * per_node)


def measure(node_counts: list[int], per_node: int, rounds: int, sim: dict) -> dict:
    """Supervision simulated (sim: task_counts, rounds), then bring-up for each node count and
    `rounds` steps of per_node tasks on every node of the largest."""
    result: dict = {"project": PROJECT}
    with tempfile.TemporaryDirectory(prefix="tfslurm-supervision-") as workdir:
        result["supervision"] = supervision.measure(
            sim["task_counts"], sim["rounds"], Path(workdir)
        )
    cluster = Cluster(PROJECT)
    try:
        bringups = []
        for nodes in node_counts:
            bringups.append(bring_up(nodes))
            progress(
                "scale",
                f"{nodes} nodes idle {bringups[-1]['idle_s']:.1f} s after `up`, "
                f"`up` done after {bringups[-1]['up_s']:.1f} s",
            )
        nodes = node_counts[-1]
        runs: dict[str, list[dict]] = {"srun": [], "sbatch": []}
        for r in range(rounds):
            runs["srun"].append(run_srun(cluster, nodes, per_node))
            runs["sbatch"].append(run_sbatch(cluster, nodes, per_node))
            progress(
                "scale",
                f"round {r + 1}/{rounds}, {nodes * per_node} tasks on {nodes} "
                f"nodes: srun {runs['srun'][-1]['srun_s']:.1f} s, sbatch -> every task "
                f"ended {runs['sbatch'][-1]['every_task_ended_s']:.1f} s",
            )
    finally:
        devcluster("down")
    result["bringup"] = bringups
    result["step"] = {
        "nodes": nodes,
        "tasks_per_node": per_node,
        "tasks": nodes * per_node,
        "rounds": rounds,
        **{
            f"{how}_{key}": summary([run[key] for run in done])
            for how, done in runs.items()
            for key in done[0]
        },
    }
    return result
