"""`make bench`'s machinery end to end on the dev cluster, on tiny settings (bench --smoke).

Benchmarks are not tests: nothing here judges a timing. It checks that every section ran real
jobs and produced its figures (a median and n for each), that the stamps each figure is made
of came in the order they must, and that the report and its plots were written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.e2e.conftest import PROJECT, ROOT

# In make test-soak, not make test: it checks `make bench`'s machinery (a tool of the project,
# not what users run), at 1.5 minutes of the suite's time.
pytestmark = [pytest.mark.e2e, pytest.mark.soak]

PLOTS = (
    "bench-resolution.png",
    "bench-startup.png",
    "bench-shutdown.png",
    "bench-training.png",
    "bench-scale.png",
)


@pytest.fixture(scope="module")
def smoke(cluster, sample, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.run",
            "--smoke",
            "--results-dir",
            str(out),
            "--docs-dir",
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, "TFSLURM_DEV_PROJECT": PROJECT},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    [results] = out.glob("*-smoke.json")
    return out, json.loads(results.read_text()), proc.stdout


def test_every_section_is_measured(smoke):
    _, data, log = smoke
    assert data["mode"] == "smoke" and data["failed_sections"] == []
    for section in (
        "resolution",
        "imports",
        "startup",
        "shutdown",
        "training",
        "artefacts",
        "scale",
    ):
        assert data[section] and "error" not in data[section], section
    # progress: a line per stage with the elapsed time
    for section in ("resolution", "imports", "startup", "training", "artefacts", "scale"):
        assert f"] {section}: done in " in log


def test_machine_is_recorded(smoke):
    machine = smoke[1]["machine"]
    assert machine["cpus"] >= 1 and machine["memory_gib"] > 0 and machine["cpu_model"]
    assert machine["kernel"] and machine["docker"]
    assert machine["cluster"]["apptainer"].startswith("apptainer version")
    assert machine["cluster"]["slurm"].startswith("slurm")


def test_resolution_compares_like_with_like(smoke):
    resolution = smoke[1]["resolution"]
    for row in resolution["whole_process"]:
        assert row["same_hosts_in_rank_order"], row
        for tool in ("tfslurm-entry", "SlurmClusterResolver", "hand-written"):
            assert row["seconds"][tool]["n"] == 2 and row["seconds"][tool]["median"] > 0
        assert row["ratio_to_entry"]["SlurmClusterResolver"]["n"] == 2
    assert resolution["in_process"]["seconds"]["SlurmClusterResolver"]["n"] >= 1


def test_imports_are_timed_in_every_container_kind_but_gzip(smoke):
    timed = smoke[1]["imports"]["import_s"]
    assert all(stats["n"] == 1 and stats["median"] > 0 for stats in timed.values()), timed
    assert len(timed) == 6 and not any("gzip" in name for name in timed), timed  # smoke: no gzip


def test_startup_stamps_every_phase_of_every_task_in_order(smoke):
    row = smoke[1]["startup"]["variants"]["SIF (squashfuse)"]
    assert row["to_every_first_step_s"]["n"] == 1
    assert row["scheduling_s"]["median"] >= 0
    for phase, stats in row["phases_per_task_s"].items():
        assert stats["n"] == 4, phase  # 2 nodes x 2 tasks, one job
        assert stats["min"] >= 0, phase  # each stamp after the one before it


def test_shutdown_figures_come_from_real_ends(smoke):
    shutdown = smoke[1]["shutdown"]
    killed = shutdown["killed_task"]["SIF (squashfuse)"]
    assert killed["states"] == ["FAILED"] and killed["failure_named_in_log"]
    assert killed["kill_to_step_end_s"]["n"] == 1
    assert shutdown["chief_end"]["step_end_s"]["n"] == 1
    assert shutdown["chief_end"]["last_server_gone_s"]["median"] >= 0


def test_training_throughput_from_completed_jobs(smoke):
    configs = smoke[1]["training"]["configs"]
    assert len(configs) == 2
    for name, config in configs.items():
        assert config["states"] == ["COMPLETED"], name
        assert config["images_per_s"]["n"] == 1 and config["images_per_s"]["median"] > 0, name
    assert (
        "parameter-server 1 worker / multi-worker 1 worker"
        in smoke[1]["training"]["scaling_efficiency"]
    )


def test_artefact_sizes_and_bring_up(smoke):
    artefacts = smoke[1]["artefacts"]
    assert artefacts["bytes"]["tf-slurm.sif"] > 0 and artefacts["bytes"]["image tf-slurm:latest"]
    assert artefacts["bring_up_s"]["cluster running (devcluster.py up)"]["n"] == 1


def test_large_steps_are_simulated_and_run_on_their_own_cluster(smoke):
    scale = smoke[1]["scale"]
    for kind in ("protocol", "threads"):
        for scenario in ("exit", "abort"):
            for tasks in ("16", "256"):
                figures = scale["supervision"][kind][scenario][tasks]
                assert figures["checkin_s"]["n"] == 1 and figures["fanout_s"]["median"] >= 0
                assert figures["rank0_maxrss_mib"]["median"] > 0
    assert [b["nodes"] for b in scale["bringup"]] == [3]
    assert 0 < scale["bringup"][0]["idle_s"] <= scale["bringup"][0]["up_s"]
    step = scale["step"]
    assert step["tasks"] == 6 and step["srun_every_task_ended_s"]["n"] == 1
    assert step["sbatch_every_task_ended_s"]["median"] > 0


def test_report_and_plots_are_written(smoke):
    out, data, _ = smoke
    page = (out / "benchmarks.md").read_text()
    for plot in PLOTS:
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot
        assert f"]({plot})" in page, plot
    assert "Not measured" not in page.split("## 3. Shutdown")[0], page
    assert data["machine"]["cpu_model"] in page


def test_no_benchmark_job_is_left(cluster, smoke):
    assert cluster.ok("squeue --noheader --name bench").strip() == ""
    scale_project = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=com.docker.compose.project=tfslurm-bench-scale"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert scale_project.strip() == "", "the bench's many-node cluster was left running"
