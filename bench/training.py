"""Measurements 4 and 3a: training throughput and scaling; a parameter-server job's end.

examples/cifar10/train.py (through bench/cluster_jobs/timed_train.py, which only adds time
stamps) with one intra- and inter-op thread per task and 64 images per worker step, so that
figures compare on a small machine: multi-worker with 1, 2 and 3 workers (global batch 64 x
workers) and parameter-server with 1 ps and 1 or 2 workers (the chief coordinates; each step is
one batch of 64 on one worker). Throughput is taken from rank 0's progress stamps after the
first progress line (tracing and warm-up excluded). The configurations run interleaved, round
after round, and scaling efficiency is computed within each round.

Every parameter-server job also times its end: the chief's program exits, then the servers
must stop (rank 0's entrypoint tells them) and the step end.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench import jobs
from bench.common import Cluster, progress, ratio_summary, summary

STAGE = "training"
BATCH_PER_WORKER = 64


@dataclass(frozen=True)
class Config:
    name: str
    strategy: str
    workers: int
    layout: str

    @property
    def global_batch(self) -> int:
        return BATCH_PER_WORKER * (self.workers if self.strategy == "multi-worker" else 1)


CONFIGS = [
    Config("multi-worker, 1 worker", "multi-worker", 1, "-N1 -n1"),
    Config("multi-worker, 2 workers", "multi-worker", 2, "-N2 -n2"),
    Config("multi-worker, 3 workers", "multi-worker", 3, "-N3 -n3"),
    Config("parameter-server, 1 ps + 1 worker", "parameter-server", 1, "-N3 -n3"),
    Config("parameter-server, 1 ps + 2 workers", "parameter-server", 2, "-N3 -n4"),
]
SMOKE_CONFIGS = [CONFIGS[0], CONFIGS[3]]


def throughput(job: jobs.Job, batch: int) -> float | None:
    """Images/s between rank 0's first and last progress stamps."""
    steps = [e for e in job.all("step") if e["rank"] == 0]
    if len(steps) < 2:
        return None
    first, last = steps[0], steps[-1]
    return (last["step"] - first["step"]) * batch / (last["t"] - first["t"])


def chief_end(job: jobs.Job) -> dict | None:
    """Seconds from the chief's program exiting to each server task gone and the step ended."""
    end = job.first("program_end", 0)
    servers = [e["t"] for e in job.all("task_end") if e["rank"] != 0]
    srun_end = job.first("srun_end")
    if not end or not servers or not srun_end:
        return None
    return {
        "last_server_gone_s": max(servers) - end["t"],
        "step_end_s": srun_end["t"] - end["t"],
        "servers": len(servers),
    }


def measure(
    cluster: Cluster, rounds: int, configs: list[Config], steps: int, log_every: int
) -> tuple[dict, dict]:
    """(training section, chief-end part of the shutdown section)."""
    train = f"--steps {steps} --log-every {log_every} --checkpoint-every 1000000 --threads 1"
    rates: dict[str, list[float | None]] = {c.name: [] for c in configs}
    ends: list[dict] = []
    states: dict[str, list[str]] = {c.name: [] for c in configs}
    for r in range(rounds):
        for config in configs:
            progress(STAGE, f"round {r + 1}/{rounds}: {config.name} ({steps} steps)")
            job = jobs.run(
                cluster,
                config.layout,
                jobs.SIF,
                config.strategy,
                f"{train} --batch-size {config.global_batch}",
                timeout=900,
            )
            rate = throughput(job, config.global_batch)
            rates[config.name].append(rate)
            states[config.name].append(job.state)
            shown = f"{rate:.0f} images/s" if rate else "no throughput (too few progress lines)"
            progress(STAGE, f"  job {job.id} {job.state}: {shown}")
            if config.strategy == "parameter-server":
                end = chief_end(job)
                if end:
                    ends.append({"job": job.id, "config": config.name, **end})
                    progress(
                        STAGE,
                        f"  chief ended -> last server gone "
                        f"{end['last_server_gone_s']:.1f} s, step ended "
                        f"{end['step_end_s']:.1f} s",
                    )
    section = {
        "steps": steps,
        "log_every": log_every,
        "batch_per_worker_step": BATCH_PER_WORKER,
        "threads_per_task": 1,
        "rounds": rounds,
        "configs": {
            c.name: {
                "strategy": c.strategy,
                "workers": c.workers,
                "layout": c.layout,
                "global_batch": c.global_batch,
                "states": states[c.name],
                "images_per_s": summary([x for x in rates[c.name] if x]),
            }
            for c in configs
        },
        "scaling_efficiency": _efficiency(configs, rates),
    }
    shutdown = {
        "jobs": [e["job"] for e in ends],
        "last_server_gone_s": summary([e["last_server_gone_s"] for e in ends]),
        "step_end_s": summary([e["step_end_s"] for e in ends]),
    }
    return section, shutdown


def _efficiency(configs: list[Config], rates: dict[str, list[float | None]]) -> dict:
    """Throughput with W workers / (W x throughput with one), per round, for each strategy."""
    out = {}
    for strategy in ("multi-worker", "parameter-server"):
        ours = [c for c in configs if c.strategy == strategy]
        base = next((c for c in ours if c.workers == 1), None)
        if base is None:
            continue
        for c in ours:
            if c is base:
                continue
            pairs = [
                (x, b) for x, b in zip(rates[c.name], rates[base.name], strict=True) if x and b
            ]
            out[c.name] = ratio_summary([x / c.workers for x, _ in pairs], [b for _, b in pairs])
    mw = next((c for c in configs if c.strategy == "multi-worker" and c.workers == 1), None)
    ps = next((c for c in configs if c.strategy == "parameter-server" and c.workers == 1), None)
    if mw and ps:
        pairs = [(p, m) for p, m in zip(rates[ps.name], rates[mw.name], strict=True) if p and m]
        out["parameter-server 1 worker / multi-worker 1 worker"] = ratio_summary(
            [p for p, _ in pairs], [m for _, m in pairs]
        )
    return out
