"""Measurements 2 and 3b: start-up of a 2-node x 2-task multi-worker job, then one task killed.

Each job trains with --log-every 1 so every task stamps its first step; once every task has,
rank 2's training process is `kill -9`ed and the time until the step has ended is taken. So
one job gives both figures. Variants: the SIF mounted with squashfuse (how the dev cluster's
nodes run it), the same with its bytecode bundle off, the SIF through the per-node
cache (tfslurm-run's copy of the image on every node, before the step: what a job that Slurm may
stop runs from), the
image unpacked into a sandbox directory on /data beforehand (what a site without FUSE can
pre-build; `apptainer build --sandbox`), and the SIF with `srun --kill-on-bad-exit=1` (Slurm
ends the step as well as the kit). Apptainer's own start is also timed alone
(`apptainer exec IMAGE true` on c1), including `--unsquash`, which unpacks the SIF on every run.
"""

from __future__ import annotations

import re

from bench import jobs
from bench.common import BenchError, Cluster, progress, summary

STAGE = "startup"
LAYOUT = "-N2 --ntasks-per-node=2"
TRAIN = "--steps 100000 --log-every 1 --checkpoint-every 100000"
VICTIM_RANK = 2
# Per task, between consecutive stamps: (phase, from event, to event).
PHASES = [
    ("step launch", "srun_start", "task_start"),
    ("apptainer start", "task_start", "python_start"),
    ("entrypoint", "python_start", "program_start"),
    ("TensorFlow import", "program_start", "tf_imported"),
    ("cluster connect", "tf_imported", "connected"),
    ("first step", "connected", "first_step"),
]
# name -> (image, srun --kill-on-bad-exit=1, environment of every task)
VARIANTS = {
    "SIF (squashfuse)": (jobs.SIF, False, {}),
    "SIF, bytecode bundle off": (jobs.SIF, False, {"TFSLURM_BYTECODE_BUNDLE": "0"}),
    # (named as in the recorded results: tfslurm-run's per-node copy, once tfslurm-node-cache)
    "SIF, per-node cache": (jobs.SIF, False, {"BENCH_COPY": "1"}),
    "sandbox directory": (jobs.SANDBOX, False, {}),
    "SIF, srun --kill-on-bad-exit=1": (jobs.SIF, True, {}),
}


def _stamps(job: jobs.Job) -> dict[int, dict[str, float]]:
    """Per rank: event -> time; srun_start is the step's, first_step the rank's first step."""
    ranks: dict[int, dict[str, float]] = {}
    srun_start = job.first("srun_start")
    for event in ("task_start", "python_start", "program_start", "tf_imported", "connected"):
        for rank, e in job.per_rank(event).items():
            ranks.setdefault(rank, {})[event] = e["t"]
    for e in job.all("step"):
        ranks.setdefault(e["rank"], {}).setdefault("first_step", e["t"])
    for stamps in ranks.values():
        if srun_start:
            stamps["srun_start"] = srun_start["t"]
    return ranks


def one_job(cluster: Cluster, image: str, kill_on_bad_exit: bool, env: dict[str, str]) -> dict:
    job = jobs.submit(cluster, LAYOUT, image, "multi-worker", TRAIN, kill_on_bad_exit, env)
    jobs.wait_for_ranks(cluster, job, "step", 4, timeout=900)  # every task trained a step
    victim = job.first("program_start", VICTIM_RANK)
    if victim is None:
        raise BenchError(f"job {job.id}: rank {VICTIM_RANK} never stamped its start")
    node = victim["host"]
    killed = float(
        cluster.ok(f"t=$EPOCHREALTIME; kill -9 {victim['pid']} && echo $t", service=node).strip()
    )
    jobs.wait(cluster, job, timeout=300)
    ranks = _stamps(job)
    batch = job.first("batch_start")
    step = job.first("srun_start")
    srun_end = job.first("srun_end")
    task_ends = [e["t"] for e in job.all("task_end")]
    return {
        "job": job.id,
        "state": job.state,
        "scheduling_s": batch["t"] - job.submitted if batch else None,
        # What the batch script does before its step: tfslurm-run's copy of the image, if any.
        "batch_to_step_s": step["t"] - batch["t"] if batch and step else copied(job.log),
        "to_every_first_step_s": max(r["first_step"] for r in ranks.values()) - job.submitted
        if all("first_step" in r for r in ranks.values()) and len(ranks) == 4
        else None,
        "phases_s": {
            name: [r[b] - r[a] for r in ranks.values() if a in r and b in r]
            for name, a, b in PHASES
        },
        "kill_to_step_end_s": srun_end["t"] - killed if srun_end else None,
        "kill_to_last_task_gone_s": max(task_ends) - killed if task_ends else None,
        "tasks_reporting_their_end": len(task_ends),
        "named_in_log": f"rank {VICTIM_RANK} on {node} failed" in job.log
        or f"task {VICTIM_RANK}:" in job.log,
    }


def copied(log: str) -> float | None:
    """How long tfslurm-run took to copy the image onto the job's nodes, as it says."""
    found = re.search(r"^tfslurm-run: copied onto \d+ nodes in ([\d.]+) s", log, re.M)
    return float(found.group(1)) if found else None


def apptainer_start(cluster: Cluster, repeat: int, sandbox: bool, unsquash_repeat: int) -> dict:
    """`apptainer exec IMAGE true` on c1, as the job user, for each way of holding the image."""
    cases = [
        ("SIF (squashfuse)", f"apptainer exec {jobs.SIF} true", repeat),
        ("sandbox directory", f"apptainer exec {jobs.SANDBOX} true", repeat if sandbox else 0),
        (
            "SIF unpacked per run (--unsquash)",
            f"apptainer exec --unsquash {jobs.SIF} true",
            unsquash_repeat,
        ),
    ]
    results = {}
    for name, command, n in cases:
        if n == 0:
            continue
        results[name] = summary([cluster.seconds(command) for _ in range(n)])
        progress(STAGE, f"  apptainer exec true, {name}: median {results[name]['median']:.2f} s")
    return results


def make_sandbox(cluster: Cluster) -> float:
    """Unpack the SIF into a sandbox directory on /data (a one-off cost); seconds it took."""
    return cluster.seconds(f"apptainer build --force --sandbox {jobs.SANDBOX} {jobs.SIF}")


def measure(
    cluster: Cluster, rounds: int, variants: list[str], micro_repeat: int, unsquash_repeat: int
) -> tuple[dict, dict]:
    """(startup section, killed-task part of the shutdown section)."""
    sandbox_s = sandbox_bytes = None
    if any(VARIANTS[v][0] == jobs.SANDBOX for v in variants):
        progress(STAGE, f"unpacking the SIF into {jobs.SANDBOX}")
        sandbox_s = make_sandbox(cluster)
        sandbox_bytes = int(cluster.ok(f"du -sb {jobs.SANDBOX} | cut -f1"))
        progress(STAGE, f"  took {sandbox_s:.1f} s, {sandbox_bytes / 1e6:.0f} MB")
    progress(STAGE, f"apptainer start alone on c1 ({micro_repeat} runs each)")
    micro = apptainer_start(cluster, micro_repeat, sandbox_s is not None, unsquash_repeat)
    try:
        runs = _jobs(cluster, rounds, variants)
    finally:
        if sandbox_s is not None:  # 1.2 GB on the shared file system
            cluster.run(f"rm -rf {jobs.SANDBOX}")
    startup, killed = {}, {}
    for variant, results in runs.items():
        phases = {
            name: summary([s for r in results for s in r["phases_s"][name]])
            for name, _, _ in PHASES
        }
        row = {
            "jobs": [r["job"] for r in results],
            "to_every_first_step_s": _summary_of(results, "to_every_first_step_s", bool),
            "scheduling_s": _summary_of(results, "scheduling_s", bool),
            "batch_to_step_s": _summary_of(results, "batch_to_step_s"),
            "phases_per_task_s": phases,
        }
        if not VARIANTS[variant][1]:
            startup[variant] = row
        killed[variant] = {
            "jobs": [r["job"] for r in results],
            "states": [r["state"] for r in results],
            "kill_to_step_end_s": _summary_of(results, "kill_to_step_end_s"),
            "kill_to_last_task_gone_s": _summary_of(results, "kill_to_last_task_gone_s"),
            "tasks_reporting_their_end": [r["tasks_reporting_their_end"] for r in results],
            "failure_named_in_log": all(r["named_in_log"] for r in results),
        }
    ratio = None
    if "sandbox directory" in startup and "SIF (squashfuse)" in startup:
        sif = runs["SIF (squashfuse)"]
        box = runs["sandbox directory"]
        ratio = summary(
            [
                b["to_every_first_step_s"] / s["to_every_first_step_s"]
                for s, b in zip(sif, box, strict=True)
                if s["to_every_first_step_s"] and b["to_every_first_step_s"]
            ]
        )
    return (
        {
            "layout": "2 nodes x 2 tasks, multi-worker, train.py --log-every 1",
            "variants": startup,
            "sandbox_over_sif_ratio": ratio,
            "apptainer_exec_true_s": micro,
            "sandbox_unpack_s": sandbox_s,
            "sandbox_bytes": sandbox_bytes,
            "rounds": rounds,
        },
        killed,
    )


def _jobs(cluster: Cluster, rounds: int, variants: list[str]) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for r in range(rounds):
        for variant in variants:  # interleaved, so load hits every variant alike
            image, kill_on_bad_exit, env = VARIANTS[variant]
            progress(STAGE, f"round {r + 1}/{rounds}: 2x2 multi-worker job, {variant}")
            result = one_job(cluster, image, kill_on_bad_exit, env)
            runs[variant].append(result)
            progress(
                STAGE,
                f"  job {result['job']}: every first step {_s(result['to_every_first_step_s'])} "
                f"after sbatch; killed rank {VICTIM_RANK} -> step ended "
                f"{_s(result['kill_to_step_end_s'])} later, {result['state']}",
            )
    return runs


def _summary_of(results: list[dict], key: str, keep=lambda value: value is not None) -> dict:
    """The summary of one figure over the jobs that have it."""
    return summary([r.get(key) for r in results if keep(r.get(key))])


def _s(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.1f} s"
