"""bench/ without a cluster: the statistics every figure is reported with, and the report."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")

from bench import report
from bench.common import ratio_summary, summary


def test_summary_is_median_quartiles_range_and_n():
    s = summary([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["median"], s["q1"], s["q3"], s["min"], s["max"], s["n"]) == (3, 2, 4, 1, 5, 5)
    assert summary([])["n"] == 0 and summary([7.0])["q1"] == 7.0


def test_ratios_are_taken_pair_by_pair():
    assert ratio_summary([10.0, 40.0], [1.0, 2.0])["samples"] == [10.0, 20.0]
    with pytest.raises(ValueError):
        ratio_summary([1.0], [1.0, 2.0])


def machine() -> dict:
    return {
        "cpu_model": "Test CPU",
        "cpus": 2,
        "memory_gib": 24.0,
        "kernel": "6.1",
        "os": "Debian",
        "python": "3.11",
        "docker": "20.10",
        "compose": "2.26",
        "tensorflow": "2.21.0",
        "load_average_at_start": [0.5, 0.5, 0.5],
        "load_average_at_end": [0.5, 0.5, 0.5],
        "compose_projects_running": ["tfslurm-dev"],
        "cluster": {"apptainer": "apptainer version 1.4.5", "slurm": "slurm-wlm 24.11.5"},
    }


def test_a_failed_section_is_reported_as_not_measured_and_gets_no_plot(tmp_path):
    entry, theirs, hand = summary([0.1, 0.2]), summary([5.0, 6.0]), summary([0.05, 0.06])
    data = {
        "mode": "full",
        "date": "2026-11-22",
        "took_s": 60.0,
        "machine": machine(),
        "resolution": {
            "whole_process": [
                {
                    "nodes": 2,
                    "tasks_per_node": 8,
                    "tasks": 16,
                    "seconds": {
                        "tfslurm-entry": entry,
                        "SlurmClusterResolver": theirs,
                        "hand-written": hand,
                    },
                    "ratio_to_entry": {
                        "SlurmClusterResolver": ratio_summary([5.0, 6.0], [0.1, 0.2]),
                        "hand-written": ratio_summary([0.05, 0.06], [0.1, 0.2]),
                    },
                    "same_hosts_in_rank_order": True,
                }
            ],
            "in_process": {
                "tasks": 32768,
                "tasks_per_node": 8,
                "seconds": {"tfslurm_entry.resolve": entry, "SlurmClusterResolver": theirs},
                "ratio_to_entry": {"SlurmClusterResolver": summary([50.0])},
            },
        },
        "startup": {"error": "no running login container in compose project x"},
        "training": {"skipped": "--skip"},
        "shutdown": {},
        "artefacts": {"skipped": "--skip"},
    }
    results = tmp_path / "2026-11-22.json"
    results.write_text(json.dumps(data))
    assert report.main([str(results), "--docs-dir", str(tmp_path)]) == 0
    page = (tmp_path / "benchmarks.md").read_text()
    assert "Not measured: the section failed: `no running login container" in page
    assert "Test CPU, 2 cores" in page and "(2026-11-22.json)" in page
    assert "n=2" in page and "![1. Resolution cost](bench-resolution.png)" in page
    assert (tmp_path / "bench-resolution.png").exists()
    assert not (tmp_path / "bench-startup.png").exists()


def test_unreadable_results_are_one_clear_error(tmp_path, capsys):
    assert report.main([str(tmp_path / "missing.json")]) == 2
    assert "bench.report: error: cannot read" in capsys.readouterr().err


def test_startup_shows_the_node_caches_unpack_and_what_each_change_bought(tmp_path):
    phases = [
        "step launch",
        "apptainer start",
        "entrypoint",
        "TensorFlow import",
        "cluster connect",
        "first step",
    ]

    def variant(total: float, unpack: float) -> dict:
        return {
            "jobs": ["1"],
            "to_every_first_step_s": summary([total]),
            "scheduling_s": summary([0.4]),
            "batch_to_step_s": summary([unpack]),
            "phases_per_task_s": {p: summary([1.0]) for p in phases},
        }

    data = {
        "mode": "full",
        "date": "2026-11-23",
        "took_s": 60.0,
        "machine": machine(),
        "resolution": {"skipped": "--skip"},
        "imports": {"skipped": "--skip"},
        "startup": {
            "layout": "2 nodes x 2 tasks, multi-worker, train.py --log-every 1",
            "variants": {
                "SIF (squashfuse)": variant(11.0, 0.01),
                "SIF, per-node cache": variant(13.5, 2.75),
            },
            "sandbox_over_sif_ratio": None,
            "apptainer_exec_true_s": {},
            "sandbox_unpack_s": None,
            "sandbox_bytes": None,
            "rounds": 1,
        },
        "training": {"skipped": "--skip"},
        "shutdown": {},
        "artefacts": {"skipped": "--skip"},
    }
    results = tmp_path / "2026-11-23.json"
    results.write_text(json.dumps(data))
    assert report.main([str(results), "--docs-dir", str(tmp_path)]) == 0
    page = (tmp_path / "benchmarks.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| batch script → `srun`"))
    assert "0.01 s" in row and "2.75 s" in row
    # Against the run before the start-up work (bench/results/2026-11-22.json): scheduling too.
    assert "| scheduling (sbatch → batch script) | 0.19 s (IQR 0.16-1.40, range 0.13-2.61" in page
    assert "batch_sched_delay=0" in page
    assert (tmp_path / "bench-startup.png").stat().st_size > 0
