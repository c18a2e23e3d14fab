"""Turn a results JSON into docs/benchmarks.md and its PNG plots (matplotlib).

    python -m bench.report bench/results/2026-11-22.json [--docs-dir docs]

Every figure is shown as median with its spread (IQR, and min-max) and n; the machine it ran
on, with its load, heads the page. The prose is bench/report_text.md; the tables are built here
from the results, a header and rows of cells each.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from bench import gpu
from bench.common import ROOT

_PIECES = re.split(
    r"^<!-- text: (.+) -->$", (ROOT / "bench/report_text.md").read_text(), flags=re.M
)
TEXT = {name: body.strip() for name, body in zip(_PIECES[1::2], _PIECES[2::2], strict=True)}
# The last run before the start-up work, and what that work changed in each phase.
BASELINE = ROOT / "bench" / "results" / "2026-11-22.json"
SCHEDULING = "scheduling (sbatch → batch script)"
# Measured on 2026-11-23 with the supervision code before the large-step work (a thread per
# member in rank 0, listen backlog 128, members retrying every 0.5 s with a 0.5 s connect
# timeout), members as threads, one round: the figures the new code is compared with.
SUPERVISION_BEFORE = {
    "1024": {"checkin_s": (3.63, 3.53), "fanout_s": (0.18, 0.30), "rank0_maxrss_mib": 46},
    "4096": {"checkin_s": (5.35, 6.23), "fanout_s": (0.76, 1.21), "rank0_maxrss_mib": 138},
}


def fmt_s(stats: dict | None, unit: str = "s", scale: float = 1.0, digits: int = 1) -> str:
    """'1.23 s (IQR 1.1-1.4, range 1.0-1.9, n=5)'."""
    if not stats or not stats.get("n"):
        return "not measured"
    m, q1, q3, lo, hi = (stats[k] * scale for k in ("median", "q1", "q3", "min", "max"))
    d = digits
    if stats["n"] == 1:
        return f"{m:.{d}f} {unit} (n=1)"
    return (
        f"{m:.{d}f} {unit} (IQR {q1:.{d}f}-{q3:.{d}f}, range {lo:.{d}f}-{hi:.{d}f}, n={stats['n']})"
    )


def fmt_x(stats: dict | None, digits: int = 2) -> str:
    return fmt_s(stats, "x", digits=digits).replace(" x", "x")


def fmt_ms(stats: dict | None, digits: int = 0) -> str:
    return fmt_s(stats, "ms", 1000, digits)


def mb(size: float | None) -> str:
    return f"{size / 1e6:.0f} MB" if size else ""


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table from a header and rows of cells."""

    def line(cells: Iterable[object]) -> str:
        return "|" + "|".join(f" {c} " if c != "" else " " for c in cells) + "|"

    return [line(header), "|" + " --- |" * len(header), *map(line, rows)]


def columns(spec: Mapping[str, Callable[[Any], object]], items: Iterable[Any]) -> list[str]:
    """A Markdown table with a column per (header, cell of an item) in spec, a row per item."""
    return table(list(spec), [[cell(item) for cell in spec.values()] for item in items])


def text(_key: str, **fields) -> str:
    """A paragraph of bench/report_text.md with its fields filled in."""
    return TEXT[_key].format(**fields)


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


def _save(fig, path: Path, **options) -> None:
    """Every plot the same way: tight, 110 dpi, and closed (pyplot keeps figures otherwise)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110, **options)
    plt.close(fig)


def _bars(bars: Sequence[tuple[str, dict]], xlabel: str, title: str, path: Path, labels: bool):
    """Horizontal bars of medians with IQR whiskers, one per (name, stats)."""
    fig, ax = plt.subplots(figsize=(8 if labels else 7, 1.2 + 0.55 * max(len(bars), 1)))
    for y, (_, stats) in enumerate(bars):
        m, err = _err(stats)
        ax.barh(y, m, xerr=[[err[0]], [err[1]]], capsize=4, color=f"C{y}" if labels else "C0")
        if labels:
            ax.text(m + err[1], y, f"  {m:.2f} s", va="center", fontsize=8)
    ax.set_yticks(range(len(bars)), [name for name, _ in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel=xlabel, title=title)
    _save(fig, path)


def plot_resolution(data: dict, path: Path) -> None:
    rows = data["resolution"]["whole_process"]
    tools = list(rows[0]["seconds"])
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(tools)
    for i, tool in enumerate(tools):
        meds, errs = zip(*(_err(r["seconds"][tool], 1000) for r in rows), strict=True)
        xs = [j + i * width for j in range(len(rows))]
        ax.bar(xs, meds, width, yerr=list(zip(*errs, strict=True)), capsize=3, label=tool)
    ax.set_xticks([j + width * (len(tools) - 1) / 2 for j in range(len(rows))])
    ax.set_xticklabels([f"{r['nodes']} nodes x {r['tasks_per_node']}" for r in rows])
    ax.set(
        yscale="log",
        ylabel="whole process, ms (log)",
        title="Resolving one task's TF_CONFIG (median, IQR)",
    )
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_imports(data: dict, path: Path) -> None:
    xlabel = "seconds for `import tensorflow` in a fresh process (median, IQR)"
    bars = list(data["imports"]["import_s"].items())
    _bars(bars, xlabel, "import tensorflow on a dev-cluster node", path, labels=True)


def plot_startup(data: dict, path: Path) -> None:
    variants = data["startup"]["variants"]
    fig, ax = plt.subplots(figsize=(9, 1.8 + 0.7 * len(variants)))
    names, rows = list(variants), list(variants.values())
    parts = [("scheduling", [v["scheduling_s"] for v in rows], "#bbbbbb")]
    if any(v.get("batch_to_step_s") for v in rows):
        parts.append(("per-node cache unpack", [v.get("batch_to_step_s") for v in rows], "#666"))
    parts += [
        (p, [v["phases_per_task_s"][p] for v in rows], None) for p in rows[0]["phases_per_task_s"]
    ]
    left = [0.0] * len(rows)
    for label, stats, color in parts:
        widths = [(s or {}).get("median") or 0.0 for s in stats]
        if label != "per-node cache unpack" or any(widths):
            ax.barh(names, widths, left=left, label=label, color=color)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, t in enumerate(v["to_every_first_step_s"] for v in rows):
        if t["n"]:
            xerr = [[t["median"] - t["min"]], [t["max"] - t["median"]]]
            ax.errorbar(t["median"], y, xerr=xerr, fmt="k|", capsize=4)
    ax.set_xlabel(
        "seconds from sbatch: phase medians per task; | every task's first step, median and range",
        fontsize=8,
    )
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set(title="Start-up of a 2 x 2 multi-worker job")
    _save(fig, path, bbox_inches="tight")


def plot_shutdown(data: dict, path: Path) -> None:
    bars = []
    chief = data["shutdown"].get("chief_end") or {}
    if chief.get("step_end_s", {}).get("n"):
        bars.append(("PS: chief ends → last server gone", chief["last_server_gone_s"]))
        bars.append(("PS: chief ends → step ended", chief["step_end_s"]))
    for variant, row in (data["shutdown"].get("killed_task") or {}).items():
        if row["kill_to_step_end_s"]["n"]:
            bars.append((f"kill -9 a worker → step ended\n({variant})", row["kill_to_step_end_s"]))
    _bars(bars, "seconds (median, IQR)", "Shutdown", path, labels=False)


def plot_training(data: dict, path: Path) -> None:
    configs = data["training"]["configs"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for strategy, marker in (("multi-worker", "o"), ("parameter-server", "s")):
        rows = [c for c in configs.values() if c["strategy"] == strategy and c["images_per_s"]["n"]]
        if not rows:
            continue
        xs = [c["workers"] for c in rows]
        stats = [c["images_per_s"] for c in rows]
        meds = [s["median"] for s in stats]
        errs = [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]]
        ax.errorbar(xs, meds, yerr=errs, marker=marker, capsize=4, label=strategy)
        ax.plot(xs, [meds[0] * x / xs[0] for x in xs], linestyle=":", color="grey")
    ax.set(
        xticks=[1, 2, 3],
        xlabel="workers (one thread each)",
        ylabel="images/s (median, range)",
        title="CIFAR-10 training throughput (dotted: linear scaling)",
    )
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_scale(data: dict, path: Path) -> None:
    sup = data["scale"]["supervision"]
    counts = sup["task_counts"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    curves = [
        ("exit", "checkin_s", "check-in"),
        ("exit", "fanout_s", "exit 0 fan-out"),
        ("abort", "fanout_s", "abort fan-out"),
    ]
    for kind, style in (("protocol", "-"), ("threads", ":")):
        for i, (scenario, key, label) in enumerate(curves if kind in sup else []):
            stats = [sup[kind][scenario][str(n)][key] for n in counts]
            meds, errs = zip(*(_err(st) for st in stats), strict=True)
            ax.errorbar(
                counts,
                meds,
                yerr=list(zip(*errs, strict=True)),
                fmt=f"o{style}",
                color=f"C{i}",
                capsize=3,
                label=f"{label} (members as {kind})",
            )
    ax.axhline(2.0, color="grey", lw=0.8, ls="--")
    ax.axhline(1.0, color="grey", lw=0.8, ls="-.")
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.set(
        xlabel="tasks in the step (rank 0 + members), localhost",
        ylabel="seconds (median, IQR)",
        title="Step supervision: check-in and fan-out (goals: 2 s, 1 s)",
    )
    ax.legend(fontsize=7)
    _save(fig, path)


# -- markdown ------------------------------------------------------------------------------------


def _machine(data: dict) -> list[str]:
    m = data["machine"]
    c = m.get("cluster", {})
    return table(
        ["", ""],
        [
            ("CPU", f"{m['cpu_model']}, {m['cpus']} cores"),
            ("memory", f"{m['memory_gib']} GiB"),
            ("OS, kernel", f"{m['os']}, Linux {m['kernel']}"),
            ("Docker engine, Compose", f"{m['docker']}, {m['compose']}"),
            (
                "on the cluster's nodes",
                f"{c.get('apptainer', '?')}, {c.get('slurm', '?')} "
                f"({c.get('node_cpus_on_paper', '?')} CPUs per node on paper, all sharing the "
                "host's)",
            ),
            ("Python, TensorFlow (venv)", f"{m['python']}, tensorflow-cpu {m['tensorflow']}"),
            (
                "load average (1, 5, 15 min)",
                f"at start {m['load_average_at_start']}, at end {m.get('load_average_at_end')}",
            ),
            (
                "compose projects running",
                ", ".join(m.get("compose_projects_running", [])) or "none",
            ),
        ],
    )


RESOLUTION = {
    "nodes x tasks": lambda r: f"{r['nodes']} x {r['tasks_per_node']}",
    "`tfslurm-entry`": lambda r: fmt_ms(r["seconds"]["tfslurm-entry"]),
    "`SlurmClusterResolver`": lambda r: fmt_ms(r["seconds"]["SlurmClusterResolver"]),
    "hand-written": lambda r: fmt_ms(r["seconds"]["hand-written"]),
    "resolver ÷ entry": lambda r: fmt_x(r["ratio_to_entry"]["SlurmClusterResolver"], 1),
    "hand-written ÷ entry": lambda r: fmt_x(r["ratio_to_entry"]["hand-written"]),
    "same hosts in rank order": lambda r: "yes" if r["same_hosts_in_rank_order"] else "NO",
}


def _resolution(data: dict) -> list[str]:
    p = data["resolution"]["in_process"]
    ratio = p["ratio_to_entry"]["SlurmClusterResolver"]
    in_process = text(
        "resolution.in_process",
        tasks=p["tasks"],
        nodes=p["tasks"] // p["tasks_per_node"],
        per_node=p["tasks_per_node"],
        ours=fmt_ms(p["seconds"]["tfslurm_entry.resolve"], 1),
        theirs=fmt_ms(p["seconds"]["SlurmClusterResolver"], 1),
        ratio=fmt_x(ratio),
    )
    rows = columns(RESOLUTION, data["resolution"]["whole_process"])
    return [
        text("resolution"),
        "",
        *rows,
        "",
        in_process,
        "",
        text("resolution.gap", ratio=ratio["median"]),
    ]


def _startup(data: dict) -> list[str]:
    s = data["startup"]
    variants = s["variants"]
    rows = [
        ("**sbatch → every task's first step**", lambda v: fmt_s(v["to_every_first_step_s"])),
        (SCHEDULING, lambda v: fmt_s(v["scheduling_s"], digits=2)),
    ]
    if any(v.get("batch_to_step_s") for v in variants.values()):
        unpack = "batch script → `srun` (tfslurm-run's copy of the image)"
        rows.append((unpack, lambda v: fmt_s(v.get("batch_to_step_s"), digits=2)))
    for phase in next(iter(variants.values()))["phases_per_task_s"]:
        rows.append((phase, lambda v, p=phase: fmt_s(v["phases_per_task_s"][p], digits=2)))
    cells = [[label, *map(cell, variants.values())] for label, cell in rows]
    lines = [
        text("startup", layout=s["layout"], rounds=s["rounds"]),
        "",
        *table(["", *variants], cells),
    ]
    if s.get("sandbox_over_sif_ratio"):
        lines += ["", text("startup.ratio", ratio=fmt_x(s["sandbox_over_sif_ratio"]))]
    sif, box = variants.get("SIF (squashfuse)"), variants.get("sandbox directory")
    if sif and box:
        a, b = (v["phases_per_task_s"]["TensorFlow import"]["median"] for v in (sif, box))
        if a and b:
            lines += ["", text("startup.import", ratio=a / b)]
    lines += _against_baseline(data)
    micro = s.get("apptainer_exec_true_s") or {}
    if micro:
        lines += ["", text("startup.apptainer"), ""]
        lines += [f"- {name}: {fmt_s(stats, digits=2)}" for name, stats in micro.items()]
    if s.get("sandbox_unpack_s") is not None:
        lines.append(
            "- unpacking the SIF into the sandbox once (`apptainer build --sandbox`): "
            f"{s['sandbox_unpack_s']:.1f} s"
        )
    return [*lines, "", text("startup.notes")]


def _imports(data: dict) -> list[str]:
    s = data["imports"]
    spec = {
        "": lambda name: name,
        "`import tensorflow`": lambda name: fmt_s(s["import_s"][name], digits=2),
        "÷ sandbox, per round": lambda name: (
            fmt_x(s["over_sandbox"][name]) if s["over_sandbox"].get(name) else "1 (base)"
        ),
        "size": lambda name: mb(s["bytes"].get(name)),
    }
    cache = s.get("node_cache_unpack_s")
    gzip = s.get("gzip_build_s")  # not built in the smoke mode
    unpack = text(
        "imports.unpack",
        unpack=s["sandbox_unpack_s"],
        gzip=text("imports.gzip", seconds=gzip) if gzip else "",
        cache=text("imports.cache", seconds=cache) if cache else ".",
    )
    rows = columns(spec, s["import_s"])
    return [text("imports", rounds=s["rounds"]), "", *rows, "", unpack, "", text("imports.why")]


def _against_baseline(data: dict) -> list[str]:
    """The SIF's start-up now against the run before the start-up work (issue 13)."""
    try:
        before = json.loads(BASELINE.read_text())["startup"]["variants"]["SIF (squashfuse)"]
        now = data["startup"]["variants"]["SIF (squashfuse)"]
    except (OSError, KeyError, TypeError, json.JSONDecodeError):
        return []
    rows = [
        (
            "**sbatch → every task's first step**",
            fmt_s(before["to_every_first_step_s"]),
            fmt_s(now["to_every_first_step_s"]),
            "all of the below",
        ),
        (
            SCHEDULING,
            fmt_s(before["scheduling_s"], digits=2),
            fmt_s(now["scheduling_s"], digits=2),
            TEXT.get(f"baseline.{SCHEDULING}", ""),
        ),
    ] + [
        (
            phase,
            fmt_s(before["phases_per_task_s"].get(phase), digits=2),
            fmt_s(stats, digits=2),
            TEXT.get(f"baseline.{phase}", ""),
        )
        for phase, stats in now["phases_per_task_s"].items()
    ]
    rel = os.path.relpath(BASELINE, ROOT / "docs")
    intro = text("startup.baseline", stem=BASELINE.stem, name=BASELINE.name, rel=rel)
    rows = table(["SIF", "before", "now", "what changed"], rows)
    return ["", intro, "", *rows, "", text("startup.every_phase")]


KILLED = {
    "": lambda item: item[0],
    "kill → step ended": lambda item: fmt_s(item[1]["kill_to_step_end_s"]),
    "kill → last task's `apptainer run` returned": lambda item: (
        f"{fmt_s(item[1]['kill_to_last_task_gone_s'])} (tasks reporting: "
        f"{item[1]['tasks_reporting_their_end']})"
    ),
    "job state": lambda item: ", ".join(sorted(set(item[1]["states"]))),
    "failure named in the log": lambda item: "yes" if item[1]["failure_named_in_log"] else "no",
}


def _shutdown(data: dict) -> list[str]:
    sd = data["shutdown"]
    lines = []
    chief = sd.get("chief_end") or {}
    if chief.get("step_end_s", {}).get("n"):
        gone, ended = fmt_s(chief["last_server_gone_s"]), fmt_s(chief["step_end_s"])
        lines += [text("shutdown.chief", gone=gone, ended=ended), ""]
    killed = sd.get("killed_task") or {}
    if killed:
        rows = columns(KILLED, killed.items())
        lines += [text("shutdown.killed"), "", *rows, "", text("shutdown.others")]
    return lines or ["Not measured in this run."]


TRAINING = {
    "configuration": lambda item: item[0],
    "layout": lambda item: f"`{item[1]['layout']}`",
    "global batch": lambda item: item[1]["global_batch"],
    "images/s": lambda item: fmt_s(item[1]["images_per_s"], "img/s", digits=0),
    "job states": lambda item: ", ".join(sorted(set(item[1]["states"]))),
}


def _training(data: dict) -> list[str]:
    t = data["training"]
    intro = text(
        "training",
        threads=t["threads_per_task"],
        batch=t["batch_per_worker_step"],
        steps=t["steps"],
        rounds=t["rounds"],
        log_every=t["log_every"],
        cpus=data["machine"]["cpus"],
    )
    lines = [intro, "", *columns(TRAINING, t["configs"].items())]
    eff = dict(t["scaling_efficiency"])
    across = eff.pop("parameter-server 1 worker / multi-worker 1 worker", None)
    if eff:
        lines += ["", "Scaling efficiency (throughput ÷ (workers x one worker's), per round):", ""]
        lines += [f"- {name}: {fmt_x(stats)}" for name, stats in eff.items()]
    if across:
        lines += ["", text("training.across", ratio=fmt_x(across))]
    return lines


# One row per (task count, members as): the exit and the abort scenario's figures.
SUPERVISION = {
    "tasks": lambda r: r[0],
    "members as": lambda r: r[1],
    "check-in": lambda r: fmt_s(r[2]["checkin_s"], digits=2),
    "exit 0 fan-out": lambda r: fmt_ms(r[2]["fanout_s"]),
    "abort fan-out": lambda r: fmt_ms(r[3]["fanout_s"]),
    "rank 0 peak RSS": lambda r: fmt_s(r[2]["rank0_maxrss_mib"], "MiB", 1, 0),
    "rank 0 CPU, whole step (exit)": lambda r: fmt_s(r[2]["rank0_cpu_s"], digits=2),
}


def _scale(data: dict) -> list[str]:
    sc, st = data["scale"], data["scale"]["step"]
    sup = sc["supervision"]
    figures = [
        (n, kind, sup[kind]["exit"][str(n)], sup[kind]["abort"][str(n)])
        for n in sup["task_counts"]
        for kind in ("protocol", "threads")
        if kind in sup
    ]
    before = "; ".join(
        f"{n} tasks: check-in {b['checkin_s'][0]:.1f}/{b['checkin_s'][1]:.1f} s (exit/abort), "
        f"fan-out {b['fanout_s'][0]:.2f}/{b['fanout_s'][1]:.2f} s, rank 0 "
        f"{b['rank0_maxrss_mib']} MiB"
        for n, b in SUPERVISION_BEFORE.items()
    )
    bringup = [(b["nodes"], f"{b['idle_s']:.1f} s", f"{b['up_s']:.1f} s") for b in sc["bringup"]]
    steps = [
        (
            "`srun` on the login node",
            fmt_s(st["srun_every_task_ended_s"]),
            fmt_s(st["srun_checkin_s"], digits=2),
            fmt_s(st["srun_srun_s"]),
        ),
        (
            "`sbatch` (submission)",
            fmt_s(st["sbatch_every_task_ended_s"]),
            fmt_s(st["sbatch_checkin_s"], digits=2),
            "",
        ),
    ]
    per = sup["per_process"]
    return [
        text("scale", protocol=per["protocol"], threads=per["threads"]),
        "",
        *columns(SUPERVISION, figures),
        "",
        text("scale.before", figures=before),
        "",
        text("scale.cluster", project=sc.get("project", "?")),
        "",
        *table(
            ["compute nodes", "every node idle", "`up` done (SIF, examples installed)"], bringup
        ),
        "",
        text(
            "scale.step",
            tasks=st["tasks"],
            nodes=st["nodes"],
            per_node=st["tasks_per_node"],
            rounds=st["rounds"],
        ),
        "",
        *table(["from", "every task ended", "rank 0: all checked in", "srun returned"], steps),
        "",
        text("scale.ended"),
    ]


def _artefacts(data: dict) -> list[str]:
    a = data["artefacts"]
    sizes = [(name, mb(size) or "not present") for name, size in a["bytes"].items()]
    bring_up = [(name, fmt_s(stats)) for name, stats in a["bring_up_s"].items()]
    lines = [
        *table(["artefact", "size"], sizes),
        "",
        *table(["`make dev-cluster` from", "time"], bring_up),
    ]
    if a.get("cold_image_build_s"):
        builds = ", ".join(f"{k} {v:.0f} s" for k, v in a["cold_image_build_s"].items())
        lines += ["", f"Cold image builds (`docker build --no-cache`, throwaway tags): {builds}."]
    for error in a.get("errors", []):
        lines += ["", f"Not measured: {error[:300]}"]
    if a.get("tear_down_s"):
        lines += ["", f"`devcluster.py down` of that cluster: {fmt_s(a['tear_down_s'])}."]
    return [*lines, "", text("artefacts")]


def _stepstart(data: dict) -> list[str]:
    st = data["stepstart"]
    ref = st["reference"]
    rows = [
        (
            name,
            ", ".join(f"{r['seconds']:.1f} s" for r in runs),
            f"{st['median_s'][name]:.1f} s",
            ", ".join(f"{r['checkin_s']:.1f} s" for r in runs if r["checkin_s"] is not None),
            ", ".join(f"{r['cpu_s']:.1f} s" for r in runs if "cpu_s" in r),
        )
        for name, runs in st["runs"].items()
    ]
    header = [
        "package",
        "each run: first spawn to last exit",
        "median",
        "rank 0: all checked in",
        "the tasks' CPU",
    ]
    return [
        text(
            "stepstart",
            tasks=st["tasks"],
            program=st["program"],
            reference=ref,
            rounds=st["rounds"],
        ),
        "",
        *table(header, rows),
        "",
        text("stepstart.ratio", ratio=st["ratio"], reference=ref, spread=_spread(st["runs"])),
        *(
            ["", text("stepstart.cpu", ratio=st["cpu_ratio"], reference=ref)]
            if "cpu_ratio" in st
            else []
        ),
        *(
            ["", text("stepstart.proof", ratio=st["proof_ratio"], unproven=st["unproven"])]
            if "proof_ratio" in st
            else []
        ),
    ]


def _spread(runs: dict) -> float:
    """The widest gap between one package's fastest and slowest run, in percent."""
    return max(
        100 * (max(r["seconds"] for r in rs) / min(r["seconds"] for r in rs) - 1)
        for rs in runs.values()
    )


# title, results key, section, plot file (or None)
SECTIONS = [
    ("1. Resolution cost", "resolution", _resolution, plot_resolution),
    ("2. `import tensorflow`: SIF, sandbox, host venv", "imports", _imports, plot_imports),
    ("3. Start-up on the dev cluster", "startup", _startup, plot_startup),
    ("4. Shutdown", "shutdown", _shutdown, plot_shutdown),
    ("5. Training throughput and scaling", "training", _training, plot_training),
    ("6. Artefacts and bring-up", "artefacts", _artefacts, None),
    (
        "7. Large steps: supervision to 4096 tasks, 128 tasks on 16 nodes",
        "scale",
        _scale,
        plot_scale,
    ),
    ("8. A step's start: real entrypoints, against 57274ad", "stepstart", _stepstart, None),
]


def plot_name(key: str) -> str:
    return f"bench-{key}.png"


def markdown(data: dict, json_path: Path, docs: Path) -> str:
    rel = os.path.relpath(json_path, docs)
    m = data["machine"]
    shared = (
        m["load_average_at_start"][0] > m["cpus"] or len(m.get("compose_projects_running", [])) > 1
    )
    out = [
        "# Benchmarks",
        "",
        "<!-- Generated by `make bench` (bench/report.py) from the JSON named below; do not "
        "edit by hand. -->",
        "",
        text(
            "intro",
            mode=data["mode"],
            date=data["date"],
            minutes=data["took_s"] / 60,
            name=json_path.name,
            rel=rel,
        ),
        "",
    ]
    for update in data.get("updates", []):
        out += [
            text(
                "update",
                sections=", ".join(update["sections"]),
                started=update["started"],
                minutes=update.get("took_s", 0) / 60,
                load=update.get("load_average_at_start"),
            ),
            "",
        ]
    out += [text("shared"), ""] if shared else []
    out += [text("smoke"), ""] if data["mode"] == "smoke" else []
    out += ["## Machine", "", *_machine(data), ""]
    for title, key, render, plot in SECTIONS:
        out += [f"## {title}", ""]
        ok = _ok(data, key)
        out += render(data) if ok else [_missing(data, key)]
        if ok and plot and (docs / plot_name(key)).exists():
            out += ["", f"![{title}]({plot_name(key)})"]
        out.append("")
    out += gpu_section(json_path.parent)
    notes = data.get("notes") or []
    if notes:
        out += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    return "\n".join(out)


def gpu_section(results: Path) -> list[str]:
    """The newest GPU run beside the results (bench/gpu.py, `make bench-gpu` on a GPU node),
    which the build machine cannot measure; nothing when there is none."""
    runs = sorted(results.glob("gpu-*.json"))
    if not runs:
        return []
    data = json.loads(runs[-1].read_text())
    title = "## 9. On a GPU: the kit versus plain `python`"
    return [title, "", text("gpu", name=runs[-1].name), "", gpu.markdown(data), ""]


def write(data: dict, json_path: Path, docs: Path) -> list[Path]:
    """Write the plots that have data and benchmarks.md into docs; the paths written."""
    docs.mkdir(parents=True, exist_ok=True)
    written = []
    for _, key, _, plot in SECTIONS:
        if plot and _ok(data, key):
            plot(data, docs / plot_name(key))
            written.append(docs / plot_name(key))
    page = docs / "benchmarks.md"
    page.write_text(markdown(data, json_path.resolve(), docs.resolve()))
    return [*written, page]


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
