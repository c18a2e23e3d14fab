"""`make bench`: every measurement, then bench/results/<date>.json and docs/benchmarks.md.

    python -m bench.run                 # full: 16 min on 2 cores (2026-11-24), more when busy
    python -m bench.run --smoke         # tiny settings, every section, a few minutes
    python -m bench.run --skip artefacts --rounds 2
    python -m bench.run --update bench/results/2026-11-22.json --skip resolution --skip startup \
        --skip training                 # re-run one section into an existing results file

Needs the dev cluster running with the SIF and the CIFAR-10 sample (`make cifar10-sample`; the
make targets do it) in compose project TFSLURM_DEV_PROJECT (default tfslurm-dev). A section that
fails is recorded with its error, the others still run, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import sys
import time
from pathlib import Path

from bench import (
    artefacts,
    imports,
    jobs,
    report,
    resolution,
    scale,
    startup,
    stepstart,
    training,
)
from bench.common import ROOT, BenchError, Cluster, host_machine, load_average, progress, write_json

SECTIONS = ("resolution", "imports", "startup", "training", "artefacts", "scale", "stepstart")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny settings, for CI")
    parser.add_argument("--skip", action="append", default=[], choices=SECTIONS)
    parser.add_argument("--rounds", type=int, help="repetitions of each cluster job (3; smoke 1)")
    parser.add_argument("--results-dir", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--docs-dir", type=Path, default=ROOT / "docs")
    parser.add_argument(
        "--update",
        type=Path,
        metavar="RESULTS_JSON",
        help="re-run the sections not skipped and replace them in this results file",
    )
    parser.add_argument("--no-cold", action="store_true", help="skip the cold image builds")
    parser.add_argument(
        "--no-make",
        action="store_true",
        help="skip timing `make dev-cluster` (it may rebuild the image and SIF)",
    )
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def settings(args: argparse.Namespace) -> dict:
    """What each section runs: the full settings, or tiny ones for the smoke mode."""
    smoke, rounds = args.smoke, args.rounds or (1 if args.smoke else 3)

    def pick(full, tiny):
        return tiny if smoke else full

    variants = pick(list(startup.VARIANTS), ["SIF (squashfuse)"])
    configs = [c.name for c in pick(training.CONFIGS, training.SMOKE_CONFIGS)]
    sim = {"task_counts": pick([16, 256, 1024, 4096], [16, 256]), "rounds": pick(rounds, 1)}
    return {
        "resolution": {
            "node_counts": pick([2, 512, 4096], [2]),
            "per_node": 8,
            "repeat": pick(5, 2),
            "in_process_tasks": pick(32768, 1024),
        },
        "imports": {"rounds": pick(5, 1), "warmup": pick(True, False), "gzip": pick(True, False)},
        "startup": {
            "rounds": rounds,
            "variants": variants,
            "micro_repeat": pick(5, 2),
            "unsquash_repeat": pick(1, 0),
        },
        "training": {
            "rounds": rounds,
            "configs": configs,
            "steps": pick(200, 20),
            "log_every": pick(20, 5),
        },
        "artefacts": {
            "running": pick(2, 1),
            "warm": pick(2, 0),
            "cold": pick(not args.no_cold, False),
            "make": pick(not args.no_make, False),
        },
        "scale": {
            "node_counts": pick([3, 8, 16], [3]),
            "per_node": pick(8, 2),
            "rounds": pick(rounds, 1),
            "sim": sim,
        },
        "stepstart": {"tasks": pick(256, 16), "rounds": pick(3, 1)},
    }


def cluster_machine(cluster: Cluster) -> dict:
    try:
        return cluster.versions()
    except BenchError as err:
        return {"error": str(err)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mode = "smoke" if args.smoke else "full"
    plan = settings(args)
    started = time.time()
    today = datetime.date.today().isoformat()
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    out = args.results_dir / (f"{today}-smoke.json" if args.smoke else f"{today}.json")
    cluster = Cluster()
    if args.update:
        try:
            data = json.loads(args.update.read_text())
        except (OSError, json.JSONDecodeError) as err:
            print(f"bench: error: --update {args.update}: cannot read it: {err}", file=sys.stderr)
            return 2
        out = args.update
        rerun = [name for name in SECTIONS if name not in args.skip]
        data.setdefault("updates", []).append(
            {"sections": rerun, "started": now, "load_average_at_start": load_average()}
        )
    else:
        data = {
            "schema": 1,
            "mode": mode,
            "date": today,
            "started": now,
            "machine": host_machine(),
            "settings": plan,
            "shutdown": {},
        }
        data["machine"]["tensorflow"] = importlib.metadata.version("tensorflow-cpu")
        data["machine"]["cluster"] = cluster_machine(cluster)
    progress("bench", f"{mode} run on compose project {cluster.project}; results -> {out}")
    failed = []

    def section(name: str, work) -> None:
        if name in args.skip:
            if not args.update:
                data[name] = {"skipped": "--skip"}
            return
        data["settings"][name] = plan[name]
        progress(name, "starting")
        t0 = time.monotonic()
        try:
            work()
        except (BenchError, OSError) as err:
            progress(name, f"FAILED: {err}")
            data[name] = {"error": str(err)}
            failed.append(name)
        progress(name, f"done in {time.monotonic() - t0:.0f} s")
        data.setdefault("section_seconds", {})[name] = round(time.monotonic() - t0, 1)

    def do_resolution() -> None:
        s = plan["resolution"]
        data["resolution"] = resolution.measure(
            s["node_counts"], s["per_node"], s["repeat"], s["in_process_tasks"]
        )

    def do_imports() -> None:
        jobs.install(cluster)
        s = plan["imports"]
        data["imports"] = imports.measure(cluster, s["rounds"], s["warmup"], s["gzip"])

    def do_startup() -> None:
        s = plan["startup"]
        jobs.install(cluster)
        data["startup"], data["shutdown"]["killed_task"] = startup.measure(
            cluster, s["rounds"], s["variants"], s["micro_repeat"], s["unsquash_repeat"]
        )

    def do_training() -> None:
        s = plan["training"]
        jobs.install(cluster)
        configs = [c for c in training.CONFIGS if c.name in s["configs"]]
        data["training"], data["shutdown"]["chief_end"] = training.measure(
            cluster, s["rounds"], configs, s["steps"], s["log_every"]
        )

    def do_artefacts() -> None:
        s = plan["artefacts"]
        data["artefacts"] = artefacts.measure(
            cluster, s["running"], s["warm"], s["cold"], s["make"]
        )
        unpacked = (data.get("startup") or {}).get("sandbox_bytes")
        if unpacked:  # measured by the startup section, which made (and removed) it
            data["artefacts"]["bytes"]["sandbox directory (unpacked SIF)"] = unpacked
        if data["artefacts"].get("errors"):
            failed.append("artefacts")

    def do_scale() -> None:
        s = plan["scale"]
        data["scale"] = scale.measure(s["node_counts"], s["per_node"], s["rounds"], s["sim"])

    def do_stepstart() -> None:
        s = plan["stepstart"]
        data["stepstart"] = stepstart.measure(s["tasks"], s["rounds"])

    section("resolution", do_resolution)
    section("imports", do_imports)
    section("startup", do_startup)
    section("training", do_training)
    section("artefacts", do_artefacts)
    section("scale", do_scale)
    section("stepstart", do_stepstart)
    if "startup" in args.skip and "training" in args.skip and not args.update:
        data["shutdown"] = {"skipped": "comes from the startup and training jobs, both skipped"}
    if args.update:
        data["updates"][-1]["took_s"] = round(time.time() - started, 1)
        data["updates"][-1]["load_average_at_end"] = load_average()
        failed = sorted(set(failed) | (set(data.get("failed_sections", [])) - set(rerun)))
    else:
        data["took_s"] = round(time.time() - started, 1)
        data["machine"]["load_average_at_end"] = load_average()
    data["failed_sections"] = failed
    write_json(out, data)
    progress("bench", f"wrote {out}")
    written = report.write(data, out, args.docs_dir)
    progress("bench", f"wrote {', '.join(str(p) for p in written)}")
    progress(
        "bench",
        f"took {(time.time() - started) / 60:.1f} min"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""),
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
