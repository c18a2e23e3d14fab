"""Turn a results JSON into docs/benchmarks.md and its PNG plots (matplotlib).

    python -m bench.report bench/results/2026-11-22.json [--docs-dir docs]

Every figure is shown as median with its spread (IQR, and min-max) and n; the machine it ran
on, with its load, heads the page.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from bench.common import ROOT

# The last run before the start-up work, and what that work changed in each phase.
BASELINE = ROOT / "bench" / "results" / "2026-11-22.json"
BASELINE_CHANGES = {
    "scheduling (sbatch → batch script)": "dev cluster: `SchedulerParameters=batch_sched_delay=0`"
    " (Slurm started batch jobs only on a 3-second tick: 0-3 s; now the controller's next "
    "one-second pass)",
    "TensorFlow import": "SIF squashed with lz4 instead of gzip; the image's bytecode bundle "
    "(section 2; the SIF with the bundle off is a column of the table above); the image's "
    "import-time GC policy (tfslurm_entry/import_gc.py: ~630 collections during the import "
    "become ~8)",
    "cluster connect": "waits for the slowest task's import, so follows it; the model is built "
    "with TensorFlow's objects frozen out of the collector (import-time GC policy: half the "
    "CPU)",
    "first step": "train.py: records sharded and batched before decoding (a worker decoded "
    "every record, then dropped 3 of 4); optimizer slots built before the first step (a "
    "`tf.function` that creates variables is traced twice); no autograph conversion",
}
# What changed for every phase at once: CPU the measured jobs no longer share.
BASELINE_EVERY_PHASE = (
    "Every phase also got CPU back: the dev cluster's healthchecks run every 30 s instead of "
    "every 2 s (six execs into containers every 2 s took about 10% of the 2 cores), and the "
    "benchmark waits for a job's milestones on the login node instead of polling it with two "
    "`docker exec` calls a second (about 0.2 CPU-s each)."
)

PLOTS = {
    "resolution": "bench-resolution.png",
    "imports": "bench-imports.png",
    "startup": "bench-startup.png",
    "shutdown": "bench-shutdown.png",
    "training": "bench-training.png",
    "scale": "bench-scale.png",
}


def fmt_s(stats: dict | None, unit: str = "s", scale: float = 1.0, digits: int = 1) -> str:
    """'1.23 s (IQR 1.1-1.4, range 1.0-1.9, n=5)'."""
    if not stats or not stats.get("n"):
        return "not measured"
    m, q1, q3 = (stats[k] * scale for k in ("median", "q1", "q3"))
    lo, hi = stats["min"] * scale, stats["max"] * scale
    d = digits
    if stats["n"] == 1:
        return f"{m:.{d}f} {unit} (n=1)"
    return (
        f"{m:.{d}f} {unit} (IQR {q1:.{d}f}-{q3:.{d}f}, range {lo:.{d}f}-{hi:.{d}f}, n={stats['n']})"
    )


def fmt_x(stats: dict | None, digits: int = 2) -> str:
    return fmt_s(stats, "x", digits=digits).replace(" x", "x")


def _ok(data: dict, name: str) -> bool:
    part = data.get(name)
    return isinstance(part, dict) and "error" not in part and "skipped" not in part and bool(part)


def _missing(data: dict, name: str) -> str:
    part = data.get(name) or {}
    if "error" in part:
        return f"Not measured: the section failed: `{part['error'][:300]}`\n"
    if "skipped" in part:
        return f"Not measured in this run ({part['skipped']}).\n"
    return "Not measured in this run.\n"


def _err(stats: dict, scale: float = 1.0) -> tuple[float, list[float]]:
    m = stats["median"] * scale
    return m, [m - stats["q1"] * scale, stats["q3"] * scale - m]


# -- plots ---------------------------------------------------------------------------------------


def _save(fig, path: Path) -> None:
    """Every plot the same way: tight, 110 dpi, and closed (pyplot keeps figures otherwise)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_resolution(data: dict, path: Path) -> None:
    rows = data["resolution"]["whole_process"]
    tools = list(rows[0]["seconds"])
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(tools)
    for i, tool in enumerate(tools):
        xs = [j + i * width for j in range(len(rows))]
        meds = [r["seconds"][tool]["median"] * 1000 for r in rows]
        errs = [
            [(r["seconds"][tool]["median"] - r["seconds"][tool]["q1"]) * 1000 for r in rows],
            [(r["seconds"][tool]["q3"] - r["seconds"][tool]["median"]) * 1000 for r in rows],
        ]
        ax.bar(xs, meds, width, yerr=errs, capsize=3, label=tool)
    ax.set_xticks([j + width * (len(tools) - 1) / 2 for j in range(len(rows))])
    ax.set_xticklabels([f"{r['nodes']} nodes x {r['tasks_per_node']}" for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("whole process, ms (log)")
    ax.set_title("Resolving one task's TF_CONFIG (median, IQR)")
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_imports(data: dict, path: Path) -> None:
    stats = data["imports"]["import_s"]
    names = list(stats)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.5 * len(names)))
    for y, name in enumerate(names):
        m, err = _err(stats[name])
        ax.barh(y, m, xerr=[[err[0]], [err[1]]], capsize=4, color=f"C{y}")
        ax.text(m + err[1], y, f"  {m:.2f} s", va="center", fontsize=8)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("seconds for `import tensorflow` in a fresh process (median, IQR)")
    ax.set_title("import tensorflow on a dev-cluster node")
    _save(fig, path)


def plot_startup(data: dict, path: Path) -> None:
    variants = data["startup"]["variants"]
    fig, ax = plt.subplots(figsize=(9, 1.8 + 0.7 * len(variants)))
    names = list(variants)
    phases = list(next(iter(variants.values()))["phases_per_task_s"])
    left = [v["scheduling_s"]["median"] or 0.0 for v in variants.values()]
    ax.barh(names, left, label="scheduling", color="#bbbbbb")
    unpack = [(v.get("batch_to_step_s") or {}).get("median") or 0.0 for v in variants.values()]
    if any(unpack):
        ax.barh(names, unpack, left=left, label="per-node cache unpack", color="#666666")
        left = [a + b for a, b in zip(left, unpack, strict=True)]
    for phase in phases:
        widths = [v["phases_per_task_s"][phase]["median"] or 0.0 for v in variants.values()]
        ax.barh(names, widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    totals = [v["to_every_first_step_s"] for v in variants.values()]
    for y, t in enumerate(totals):
        if t["n"]:
            ax.errorbar(
                t["median"],
                y,
                xerr=[[t["median"] - t["min"]], [t["max"] - t["median"]]],
                fmt="k|",
                capsize=4,
            )
    ax.set_xlabel(
        "seconds from sbatch: phase medians per task; | every task's first step, median and range",
        fontsize=8,
    )
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("Start-up of a 2 x 2 multi-worker job")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_shutdown(data: dict, path: Path) -> None:
    bars = []
    chief = data["shutdown"].get("chief_end") or {}
    if chief.get("step_end_s", {}).get("n"):
        bars.append(("PS: chief ends → last server gone", chief["last_server_gone_s"]))
        bars.append(("PS: chief ends → step ended", chief["step_end_s"]))
    for variant, row in (data["shutdown"].get("killed_task") or {}).items():
        if row["kill_to_step_end_s"]["n"]:
            bars.append((f"kill -9 a worker → step ended\n({variant})", row["kill_to_step_end_s"]))
    fig, ax = plt.subplots(figsize=(7, 1 + 0.6 * max(len(bars), 1)))
    for y, (_name, stats) in enumerate(bars):
        m, err = _err(stats)
        ax.barh(y, m, xerr=[[err[0]], [err[1]]], capsize=3, color="#4c72b0")
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels([b[0] for b in bars], fontsize=8)
    ax.set_xlabel("seconds (median, IQR)")
    ax.set_title("Shutdown")
    _save(fig, path)


def plot_training(data: dict, path: Path) -> None:
    configs = data["training"]["configs"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for strategy, marker in (("multi-worker", "o"), ("parameter-server", "s")):
        rows = [c for c in configs.values() if c["strategy"] == strategy and c["images_per_s"]["n"]]
        if not rows:
            continue
        xs = [c["workers"] for c in rows]
        meds = [c["images_per_s"]["median"] for c in rows]
        errs = [
            [c["images_per_s"]["median"] - c["images_per_s"]["min"] for c in rows],
            [c["images_per_s"]["max"] - c["images_per_s"]["median"] for c in rows],
        ]
        ax.errorbar(xs, meds, yerr=errs, marker=marker, capsize=4, label=strategy)
        ideal = [meds[0] * x / xs[0] for x in xs]
        ax.plot(xs, ideal, linestyle=":", color="grey")
    ax.set_xticks([1, 2, 3])
    ax.set_xlabel("workers (one thread each)")
    ax.set_ylabel("images/s (median, range)")
    ax.set_title("CIFAR-10 training throughput (dotted: linear scaling)")
    ax.legend(fontsize=8)
    _save(fig, path)


# -- markdown ------------------------------------------------------------------------------------


def plot_scale(data: dict, path: Path) -> None:
    sup = data["scale"]["supervision"]
    counts = sup["task_counts"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    curves = [("exit", "checkin_s", "check-in"), ("exit", "fanout_s", "exit 0 fan-out"),
              ("abort", "fanout_s", "abort fan-out")]  # fmt: skip
    for kind, style in (("protocol", "-"), ("threads", ":")):
        if kind not in sup:
            continue
        for i, (scenario, key, label) in enumerate(curves):
            stats = [sup[kind][scenario][str(n)][key] for n in counts]
            meds, errs = zip(*(_err(st) for st in stats), strict=True)
            ax.errorbar(counts, meds, yerr=list(zip(*errs, strict=True)), fmt=f"o{style}",
                        color=f"C{i}", capsize=3, label=f"{label} (members as {kind})")  # fmt: skip
    ax.axhline(2.0, color="grey", lw=0.8, ls="--")
    ax.axhline(1.0, color="grey", lw=0.8, ls="-.")
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts)
    ax.set_xticklabels([str(n) for n in counts])
    ax.set_xlabel("tasks in the step (rank 0 + members), localhost")
    ax.set_ylabel("seconds (median, IQR)")
    ax.set_title("Step supervision: check-in and fan-out (goals: 2 s, 1 s)")
    ax.legend(fontsize=7)
    _save(fig, path)


def _machine(data: dict) -> list[str]:
    m = data["machine"]
    c = m.get("cluster", {})
    others = [p for p in m.get("compose_projects_running", [])]
    return [
        "| | |",
        "| --- | --- |",
        f"| CPU | {m['cpu_model']}, {m['cpus']} cores |",
        f"| memory | {m['memory_gib']} GiB |",
        f"| OS, kernel | {m['os']}, Linux {m['kernel']} |",
        f"| Docker engine, Compose | {m['docker']}, {m['compose']} |",
        f"| on the cluster's nodes | {c.get('apptainer', '?')}, {c.get('slurm', '?')} "
        f"({c.get('node_cpus_on_paper', '?')} CPUs per node on paper, all sharing the host's) |",
        f"| Python, TensorFlow (venv) | {m['python']}, tensorflow-cpu {m['tensorflow']} |",
        f"| load average (1, 5, 15 min) | at start {m['load_average_at_start']}, at end "
        f"{m.get('load_average_at_end')} |",
        f"| compose projects running | {', '.join(others) or 'none'} |",
    ]


def _resolution(data: dict) -> list[str]:
    r = data["resolution"]
    lines = [
        "Each task resolves its own role, so this is paid once per task, in parallel. Whole "
        "process, with the same `SLURM_*` variables (the last rank of a block step): "
        "`tfslurm-entry --print-config`; a script that builds the same `TF_CONFIG` with "
        "TensorFlow's `SlurmClusterResolver` "
        "([bench/upstream_resolver.py](../bench/upstream_resolver.py), which must also be told "
        "one GPU per task: on a CPU-only node it cannot be told there are none); and a "
        "stdlib hand-written script ([bench/handwritten_tf_config.py](../bench/"
        "handwritten_tf_config.py), one bracket range and block placement only: the floor, a "
        "Python start and a JSON dump). The three run interleaved and each ratio is taken per "
        "round.",
        "",
        "| nodes x tasks | `tfslurm-entry` | `SlurmClusterResolver` | hand-written | "
        "resolver ÷ entry | hand-written ÷ entry | same hosts in rank order |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in r["whole_process"]:
        s, q = row["seconds"], row["ratio_to_entry"]
        lines.append(
            f"| {row['nodes']} x {row['tasks_per_node']} | "
            f"{fmt_s(s['tfslurm-entry'], 'ms', 1000, 0)} | "
            f"{fmt_s(s['SlurmClusterResolver'], 'ms', 1000, 0)} | "
            f"{fmt_s(s['hand-written'], 'ms', 1000, 0)} | {fmt_x(q['SlurmClusterResolver'], 1)} | "
            f"{fmt_x(q['hand-written'])} | {'yes' if row['same_hosts_in_rank_order'] else 'NO'} |"
        )
    p = r["in_process"]
    lines += [
        "",
        f"In process, {p['tasks']:,} tasks ({p['tasks'] // p['tasks_per_node']} nodes x "
        f"{p['tasks_per_node']}), TensorFlow already imported for the resolver: "
        f"`tfslurm_entry.resolve` {fmt_s(p['seconds']['tfslurm_entry.resolve'], 'ms', 1000)}; "
        f"`SlurmClusterResolver` {fmt_s(p['seconds']['SlurmClusterResolver'], 'ms', 1000)}; "
        f"ratio resolver ÷ entry {fmt_x(p['ratio_to_entry']['SlurmClusterResolver'])}.",
        "",
        "What the whole-process gap is: `SlurmClusterResolver` lives inside TensorFlow, so a task "
        "pays `import tensorflow` before it knows its role; the entrypoint never imports it. "
        "Once TensorFlow is imported, what is left is the in-process figure above (resolver ÷ "
        f"entry {p['ratio_to_entry']['SlurmClusterResolver']['median']:.2f}x). The entrypoint's "
        "cost over the bare-Python floor of the hand-written script is `python-hostlist`, "
        "placement, validation and its JSON.",
    ]
    return lines


def _startup(data: dict) -> list[str]:
    s = data["startup"]
    lines = [
        f"{s['layout']}, {s['rounds']} round(s), variants interleaved. Every task stamps each "
        "milestone with the host's clock (all containers share it): the batch script's start, "
        "the task's start under `srun`, the entrypoint's Python starting inside the container "
        "(a `sitecustomize` on `PYTHONPATH`), the entrypoint starting `train.py` (through "
        "[timed_train.py](../bench/cluster_jobs/timed_train.py), which only adds stamps), "
        "`import tensorflow` done, the strategy connected and the model built (train.py's first "
        "line), and the first training step. Phases are per task (n = tasks x jobs); the total "
        "is per job: `sbatch` to the last task's first step.",
        "",
    ]
    variants = s["variants"]
    names = list(variants)
    lines += ["| | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    lines.append(
        "| **sbatch → every task's first step** | "
        + " | ".join(fmt_s(v["to_every_first_step_s"]) for v in variants.values())
        + " |"
    )
    lines.append(
        "| scheduling (sbatch → batch script) | "
        + " | ".join(fmt_s(v["scheduling_s"], digits=2) for v in variants.values())
        + " |"
    )
    if any(v.get("batch_to_step_s") for v in variants.values()):
        lines.append(
            "| batch script → `srun` (the per-node cache's unpack) | "
            + " | ".join(fmt_s(v.get("batch_to_step_s"), digits=2) for v in variants.values())
            + " |"
        )
    for phase in next(iter(variants.values()))["phases_per_task_s"]:
        lines.append(
            f"| {phase} | "
            + " | ".join(fmt_s(v["phases_per_task_s"][phase], digits=2) for v in variants.values())
            + " |"
        )
    if s.get("sandbox_over_sif_ratio"):
        lines += [
            "",
            f"Sandbox ÷ SIF, whole start-up, per round: {fmt_x(s['sandbox_over_sif_ratio'])}.",
        ]
    sif, box = variants.get("SIF (squashfuse)"), variants.get("sandbox directory")
    if sif and box:
        a = sif["phases_per_task_s"]["TensorFlow import"]["median"]
        b = box["phases_per_task_s"]["TensorFlow import"]["median"]
        if a and b:
            lines += [
                "",
                f"TensorFlow import inside these jobs (4 tasks importing at once on the host's "
                f"2 cores), SIF ÷ sandbox of the medians: {a / b:.2f}x.",
            ]
    lines += _against_baseline(data)
    micro = s.get("apptainer_exec_true_s") or {}
    if micro:
        lines += [
            "",
            "Apptainer's start alone, `apptainer exec IMAGE true` on node c1 as the job user:",
            "",
        ]
        lines += [f"- {name}: {fmt_s(stats, digits=2)}" for name, stats in micro.items()]
    if s.get("sandbox_unpack_s") is not None:
        lines += [
            f"- unpacking the SIF into the sandbox once (`apptainer build --sandbox`): "
            f"{s['sandbox_unpack_s']:.1f} s"
        ]
    lines += [
        "",
        "Entrypoint time includes waiting for rank 0's control port (every task reports to "
        "it before starting its program) and the start of `train.py`'s own Python. Cluster "
        "connect includes building the model and the checkpoint manager; first step includes "
        "tracing the `tf.function`.",
    ]
    return lines


def _imports(data: dict) -> list[str]:
    s = data["imports"]
    lines = [
        f"A fresh process each time, `import tensorflow` timed inside Python, {s['rounds']} "
        "round(s) interleaved after one unrecorded warm-up each (source: "
        "[bench/imports.py](../bench/imports.py)). Containers run on node c1 as the job user; "
        "the host venv is the bench host's own `.venv` (the floor: no container, no FUSE). "
        "The gzip SIF is the same image squashed the way Apptainer does by default (what the "
        "kit shipped before), built in this run from the sandbox.",
        "",
        "| | `import tensorflow` | ÷ sandbox, per round | size |",
        "| --- | --- | --- | --- |",
    ]
    for name, stats in s["import_s"].items():
        ratio = s["over_sandbox"].get(name)
        size = s["bytes"].get(name)
        lines.append(
            f"| {name} | {fmt_s(stats, digits=2)} | {fmt_x(ratio) if ratio else '1 (base)'} | "
            f"{f'{size / 1e6:.0f} MB' if size else ''} |"
        )
    cache_s = s.get("node_cache_unpack_s")
    lines += [
        "",
        f"Unpacking the SIF into the sandbox took {s['sandbox_unpack_s']:.1f} s; squashing "
        f"it with gzip {s['gzip_build_s']:.1f} s"
        + (
            f"; the per-node cache's unpack on c1 (tfslurm-node-cache, into the node's tmpfs "
            f"/tmp, as its own Slurm step) {cache_s:.1f} s, once per node and job."
            if cache_s
            else "."
        ),
        "",
        "Why the SIF is slower than the sandbox: an unprivileged Apptainer mounts the SIF with "
        "squashfuse in each process, so each one starts with a cold page cache and pulls "
        "everything it reads through FUSE, about 1 s of CPU per process here. The bytecode "
        "bundle turned ~2,500 modules' lookups, opens and reads into one mapped file (the "
        "*bundle off* rows show what that bought) and lz4 cut the decompression (the gzip "
        "row). What is left is the shared objects: about 410 MB in ~4,400 FUSE reads of at "
        "most 128 KiB (the kernel's read-ahead for FUSE), 250 MB of it from "
        "`libtensorflow_cc.so.2`, whose static initialisers are spread over the whole "
        "library. Nothing in the image changes that: an uncompressed SIF, the big libraries "
        "stored uncompressed, other block sizes, reading the library ahead, squashfuse's "
        "options and Apptainer's `--sharens` were all within the noise or worse "
        "(containers/README.md). The per-node cache row is what a job gets with "
        "`TFSLURM_NODE_CACHE=1`: sandbox speed, after the unpack. Every row includes the "
        "image's import-time GC policy (tfslurm_entry/import_gc.py, ~0.3 s less per import): "
        "it speeds up the sandbox as much as the SIF, so the ratio grows while the SIF gets "
        "faster.",
    ]
    return lines


def _against_baseline(data: dict) -> list[str]:
    """The SIF's start-up now against the run before the start-up work (issue 13)."""
    path = BASELINE
    try:
        before = json.loads(path.read_text())["startup"]["variants"]["SIF (squashfuse)"]
        now = data["startup"]["variants"]["SIF (squashfuse)"]
    except (OSError, KeyError, TypeError, json.JSONDecodeError):
        return []
    rel = os.path.relpath(path, ROOT / "docs")
    lines = [
        "",
        f"Which change bought what: the SIF column against the run of {path.stem} "
        f"([{path.name}]({rel}), same machine and job; then a gzip SIF, and train.py "
        "decoding every record before sharding, with autograph and slots made in the first "
        "step).",
        "",
        "| SIF | before | now | what changed |",
        "| --- | --- | --- | --- |",
        f"| **sbatch → every task's first step** | {fmt_s(before['to_every_first_step_s'])} | "
        f"{fmt_s(now['to_every_first_step_s'])} | all of the below |",
    ]
    scheduling = "scheduling (sbatch → batch script)"
    lines.append(
        f"| {scheduling} | {fmt_s(before['scheduling_s'], digits=2)} | "
        f"{fmt_s(now['scheduling_s'], digits=2)} | {BASELINE_CHANGES[scheduling]} |"
    )
    for phase, stats in now["phases_per_task_s"].items():
        old = before["phases_per_task_s"].get(phase)
        lines.append(
            f"| {phase} | {fmt_s(old, digits=2)} | {fmt_s(stats, digits=2)} | "
            f"{BASELINE_CHANGES.get(phase, '')} |"
        )
    return [*lines, "", BASELINE_EVERY_PHASE]


def _shutdown(data: dict) -> list[str]:
    sd = data["shutdown"]
    lines = []
    chief = sd.get("chief_end") or {}
    if chief.get("step_end_s", {}).get("n"):
        lines += [
            "Parameter-server jobs (from the training runs): the chief's `train.py` exits, rank "
            "0's entrypoint tells the ps and worker servers to stop.",
            "",
            f"- chief's program ended → last server task gone (its `apptainer run` returned): "
            f"{fmt_s(chief['last_server_gone_s'])}",
            f"- chief's program ended → step ended (`srun` returned): {fmt_s(chief['step_end_s'])}",
            "",
        ]
    killed = sd.get("killed_task") or {}
    if killed:
        lines += [
            "One task killed: in each start-up job, once every task had trained a step, rank 2's "
            "training process was `kill -9`ed (on c2).",
            "",
            "| | kill → step ended | kill → last task's `apptainer run` returned | job state | "
            "failure named in the log |",
            "| --- | --- | --- | --- | --- |",
        ]
        for variant, row in killed.items():
            lines.append(
                f"| {variant} | {fmt_s(row['kill_to_step_end_s'])} | "
                f"{fmt_s(row['kill_to_last_task_gone_s'])} "
                f"(tasks reporting: {row['tasks_reporting_their_end']}) | "
                f"{', '.join(sorted(set(row['states'])))} | "
                f"{'yes' if row['failure_named_in_log'] else 'no'} |"
            )
        lines += [
            "",
            "With `--kill-on-bad-exit=1` Slurm kills the other tasks' whole process trees, so "
            "they cannot stamp their end; without it the kit's rank 0 stops them and each "
            "reports. Without either (a hand-written `TF_CONFIG` and no supervision) the others "
            "wait on a collective until the job's time limit: not timed here.",
        ]
    return lines or ["Not measured in this run."]


def _training(data: dict) -> list[str]:
    t = data["training"]
    lines = [
        f"`train.py` with `--threads {t['threads_per_task']}` (intra- and inter-op), "
        f"{t['batch_per_worker_step']} images per worker step, {t['steps']} steps, "
        f"{t['rounds']} round(s) interleaved; images/s between rank 0's first progress line "
        f"(step {t['log_every']}, after tracing) and its last. All tasks share the host's "
        f"{data['machine']['cpus']} cores, so scaling here measures the kit and TensorFlow's "
        "overheads on a saturated machine, not a real cluster's network. The one-worker "
        "multi-worker run is a one-task step (no TF_CONFIG, so no collectives): the baseline "
        "without any distribution overhead.",
        "",
        "| configuration | layout | global batch | images/s | job states |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, c in t["configs"].items():
        lines.append(
            f"| {name} | `{c['layout']}` | {c['global_batch']} | "
            f"{fmt_s(c['images_per_s'], 'img/s', digits=0)} | "
            f"{', '.join(sorted(set(c['states'])))} |"
        )
    eff = dict(t["scaling_efficiency"])
    across = eff.pop("parameter-server 1 worker / multi-worker 1 worker", None)
    if eff:
        lines += ["", "Scaling efficiency (throughput ÷ (workers x one worker's), per round):", ""]
        lines += [f"- {name}: {fmt_x(stats)}" for name, stats in eff.items()]
    if across:
        lines += [
            "",
            "One worker under parameter-server ÷ one under multi-worker (the chief "
            f"dispatches every step to the worker by RPC): {fmt_x(across)}.",
        ]
    return lines


# Measured on 2026-11-23 with the supervision code before the large-step work (a thread per
# member in rank 0, listen backlog 128, members retrying every 0.5 s with a 0.5 s connect
# timeout), members as threads, one round: the figures the new code is compared with.
SUPERVISION_BEFORE = {
    "1024": {"checkin_s": (3.63, 3.53), "fanout_s": (0.18, 0.30), "rank0_maxrss_mib": 46},
    "4096": {"checkin_s": (5.35, 6.23), "fanout_s": (0.76, 1.21), "rank0_maxrss_mib": 138},
}


def _scale(data: dict) -> list[str]:
    sc = data["scale"]
    sup = sc["supervision"]
    per = sup["per_process"]
    lines = [
        "Supervision simulated on localhost ([bench/supervision.py](../bench/supervision.py)): "
        "rank 0 is the real `tfslurm-entry` (fake Slurm variables for an N-task step), every "
        "member starts before rank 0 listens. *exit*: a parameter-server step whose chief "
        "exits 0 once all have checked in, every member must hear `exit 0`; *abort*: a "
        "multi-worker step where one member (a real entrypoint) fails with exit 3, every other "
        "must hear the abort. Members as *protocol*: the member side of the protocol "
        "(same lines, same jittered retries) from one event loop per "
        f"{per['protocol']} members, so that rank 0 is what is measured, as on a cluster where "
        "each member has its own node; as *threads*: the real member code "
        f"(`supervise.run_member`), {per['threads']} members per process, where on 2 cores "
        "the simulator's own threads set the pace. Check-in: rank 0 listening → last member "
        "checked "
        "in (rank 0's own log line); fan-out: rank 0's decision → the last member heard it.",
        "",
        "| tasks | members as | check-in | exit 0 fan-out | abort fan-out | rank 0 peak RSS | "
        "rank 0 CPU, whole step (exit) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in sup["task_counts"]:
        for kind in ("protocol", "threads"):
            if kind not in sup:
                continue
            ex, ab = sup[kind]["exit"][str(n)], sup[kind]["abort"][str(n)]
            lines.append(
                f"| {n} | {kind} | {fmt_s(ex['checkin_s'], digits=2)} | "
                f"{fmt_s(ex['fanout_s'], 'ms', 1000, 0)} | {fmt_s(ab['fanout_s'], 'ms', 1000, 0)} "
                f"| {fmt_s(ex['rank0_maxrss_mib'], 'MiB', 1, 0)} | "
                f"{fmt_s(ex['rank0_cpu_s'], digits=2)} |"
            )
    lines += [
        "",
        "Before this work (same machine, members as threads, one round): "
        + "; ".join(
            f"{n} tasks: check-in {b['checkin_s'][0]:.1f}/{b['checkin_s'][1]:.1f} s (exit/abort), "
            f"fan-out {b['fanout_s'][0]:.2f}/{b['fanout_s'][1]:.2f} s, rank 0 "
            f"{b['rank0_maxrss_mib']} MiB"
            for n, b in SUPERVISION_BEFORE.items()
        )
        + ". What changed: rank 0 reads every member from one `selectors` loop instead of a "
        "thread each (memory), listens with a backlog as deep as the step (the 128-deep "
        "default overflowed: members' SYNs were dropped and retried a second or more later), "
        "members retry with jittered, growing pauses instead of every 0.5 s in lockstep and "
        "wait out SYN retransmissions instead of abandoning each attempt after 0.5 s, and look "
        "rank 0's name up once.",
        "",
        "A real many-node cluster (`devcluster.py up --nodes N`, compose project "
        f"`{sc.get('project', '?')}`, every node idle; images built already):",
        "",
        "| compute nodes | every node idle | `up` done (SIF, examples installed) |",
        "| --- | --- | --- |",
    ]
    for b in sc["bringup"]:
        lines.append(f"| {b['nodes']} | {b['idle_s']:.1f} s | {b['up_s']:.1f} s |")
    st = sc["step"]
    lines += [
        "",
        f"A {st['tasks']}-task step ({st['nodes']} nodes x {st['tasks_per_node']}) through "
        "`apptainer run tf-slurm.sif` running "
        "[examples/scale/check_tf_config.py](../examples/scale/check_tf_config.py) (checks "
        f"its TF_CONFIG, exits 0), {st['rounds']} round(s):",
        "",
        "| from | every task ended | rank 0: all checked in | srun returned |",
        "| --- | --- | --- | --- |",
        f"| `srun` on the login node | {fmt_s(st['srun_every_task_ended_s'])} | "
        f"{fmt_s(st['srun_checkin_s'], digits=2)} | {fmt_s(st['srun_srun_s'])} |",
        f"| `sbatch` (submission) | {fmt_s(st['sbatch_every_task_ended_s'])} | "
        f"{fmt_s(st['sbatch_checkin_s'], digits=2)} | |",
        "",
        "Every task ended: rank 0's `all N programs ended ... the last at T` minus the moment "
        "srun or sbatch was called. On this 2-core host the 128 Apptainer starts (a squashfuse "
        "mount and a Python start each) queue for the CPU; on a cluster each node starts its "
        "own 8.",
    ]
    return lines


def _artefacts(data: dict) -> list[str]:
    a = data["artefacts"]
    lines = ["| artefact | size |", "| --- | --- |"]
    for name, size in a["bytes"].items():
        lines.append(f"| {name} | {f'{size / 1e6:.0f} MB' if size else 'not present'} |")
    lines += ["", "| `make dev-cluster` from | time |", "| --- | --- |"]
    for name, stats in a["bring_up_s"].items():
        lines.append(f"| {name} | {fmt_s(stats)} |")
    if a.get("cold_image_build_s"):
        lines += [
            "",
            "Cold image builds (`docker build --no-cache`, throwaway tags): "
            + ", ".join(f"{k} {v:.0f} s" for k, v in a["cold_image_build_s"].items())
            + ".",
        ]
    for error in a.get("errors", []):
        lines += ["", f"Not measured: {error[:300]}"]
    if a.get("tear_down_s"):
        lines += ["", f"`devcluster.py down` of that cluster: {fmt_s(a['tear_down_s'])}."]
    lines += [
        "",
        "Warm: a throwaway compose project (`<project>-bringup`) brought up from nothing but "
        "built images (volumes, munge key, database, every node idle, SIF and examples "
        "installed) and removed. Cold: the node and MariaDB images rebuilt from the cached base "
        "with `--no-cache` into throwaway tags, plus the warm median (the TensorFlow image and "
        "the SIF are not rebuilt; their cold times are in containers/README.md). "
        "Cluster running: `devcluster.py up` finding everything in place.",
    ]
    return lines


def markdown(data: dict, json_path: Path, docs: Path) -> str:
    rel = os.path.relpath(json_path, docs)
    shared = (
        data["machine"]["load_average_at_start"][0] > data["machine"]["cpus"]
        or len(data["machine"].get("compose_projects_running", [])) > 1
    )
    out = [
        "# Benchmarks",
        "",
        "<!-- Generated by `make bench` (bench/report.py) from the JSON named below; do not "
        "edit by hand. -->",
        "",
        f"The kit measured against its alternatives: `{data['mode']}` run of {data['date']}, "
        f"{data['took_s'] / 60:.1f} min, raw results in [{json_path.name}]({rel}). Every figure "
        "is a median with its spread (IQR and range) and n; comparisons are ratios taken side "
        "by side in the same run. Numbers from one machine: rerun `make bench` on yours.",
        "",
    ]
    for update in data.get("updates", []):
        out += [
            f"Re-run later into this file (`bench.run --update`): "
            f"{', '.join(update['sections'])}, started {update['started']}, "
            f"{update.get('took_s', 0) / 60:.1f} min, load average at start "
            f"{update.get('load_average_at_start')}.",
            "",
        ]
    if shared:
        out += [
            "**The machine was shared during this run** (load above its core count, or "
            "other clusters running): absolute times are inflated and noisy; the ratios "
            "are the figures to read.",
            "",
        ]
    if data["mode"] == "smoke":
        out += ["**Smoke mode**: tiny settings that check the machinery, not figures to quote.", ""]
    out += ["## Machine", "", *_machine(data), ""]
    sections = [
        ("1. Resolution cost", "resolution", _resolution),
        ("2. `import tensorflow`: SIF, sandbox, host venv", "imports", _imports),
        ("3. Start-up on the dev cluster", "startup", _startup),
        ("4. Shutdown", "shutdown", _shutdown),
        ("5. Training throughput and scaling", "training", _training),
        ("6. Artefacts and bring-up", "artefacts", _artefacts),
        ("7. Large steps: supervision to 4096 tasks, 128 tasks on 16 nodes", "scale", _scale),
    ]
    for title, key, render in sections:
        out += [f"## {title}", ""]
        ok = _ok(data, key)
        out += render(data) if ok else [_missing(data, key)]
        if ok and key in PLOTS and (docs / PLOTS[key]).exists():
            out += ["", f"![{title}]({PLOTS[key]})"]
        out.append("")
    notes = data.get("notes") or []
    if notes:
        out += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    return "\n".join(out)


def write(data: dict, json_path: Path, docs: Path) -> list[Path]:
    """Write the plots that have data and benchmarks.md into docs; the paths written."""
    docs.mkdir(parents=True, exist_ok=True)
    written = []
    plotters = {
        "resolution": plot_resolution,
        "imports": plot_imports,
        "startup": plot_startup,
        "shutdown": plot_shutdown,
        "training": plot_training,
        "scale": plot_scale,
    }
    for key, plot in plotters.items():
        path = docs / PLOTS[key]
        if _ok(data, key):
            plot(data, path)
            written.append(path)
    page = docs / "benchmarks.md"
    page.write_text(markdown(data, json_path.resolve(), docs.resolve()))
    written.append(page)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--docs-dir", type=Path, default=ROOT / "docs")
    args = parser.parse_args(argv)
    try:
        data = json.loads(args.results.read_text())
    except (OSError, json.JSONDecodeError) as err:
        print(f"bench.report: error: cannot read {args.results}: {err}", file=sys.stderr)
        return 2
    for path in write(data, args.results, args.docs_dir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
