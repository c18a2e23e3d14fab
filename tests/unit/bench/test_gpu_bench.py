"""bench/gpu.py without a GPU: reading train.py's output, the statistics, the table, and the
process harness that stamps each line as it is read.

The train.py lines are real: examples/cifar10/train.py run on a CPU (tensorflow-cpu 2.21,
--batch-size 256 --log-every 1; --log-every 5; --steps 1 --log-every 1 as the start-up runs
use it). The times beside them are made up, as the parent would have read them.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from bench import gpu

# --steps 12 --batch-size 256 --log-every 1 --threads 2
EVERY_STEP = """\
[rank 0 worker 0] multi-worker: 1 workers, 10000 training images in 5 files, 1000 test images
[rank 0 worker 0] input pipeline 0 first batch after step 0: fingerprint 142734544323
[rank 0 worker 0] step 1/12 loss 2.298 accuracy 0.086 477 images/s ETA 6s
[rank 0 worker 0] step 2/12 loss 2.263 accuracy 0.074 2094 images/s ETA 1s
[rank 0 worker 0] step 3/12 loss 2.239 accuracy 0.207 10724 images/s ETA 0s
[rank 0 worker 0] step 4/12 loss 2.200 accuracy 0.238 8765 images/s ETA 0s
[rank 0 worker 0] step 5/12 loss 2.168 accuracy 0.242 8961 images/s ETA 0s
[rank 0 worker 0] step 6/12 loss 2.143 accuracy 0.211 9026 images/s ETA 0s
[rank 0 worker 0] step 7/12 loss 2.113 accuracy 0.250 10065 images/s ETA 0s
[rank 0 worker 0] step 8/12 loss 2.065 accuracy 0.340 7618 images/s ETA 0s
[rank 0 worker 0] step 9/12 loss 2.018 accuracy 0.441 8155 images/s ETA 0s
[rank 0 worker 0] step 10/12 loss 1.964 accuracy 0.539 9344 images/s ETA 0s
[rank 0 worker 0] step 11/12 loss 1.918 accuracy 0.629 7625 images/s ETA 0s
[rank 0 worker 0] step 12/12 loss 1.870 accuracy 0.586 10362 images/s ETA 0s
[rank 0 worker 0] wrote checkpoint /tmp/g47/out1/checkpoints/ckpt-12
[rank 0 worker 0] test accuracy 0.652 on 1000 images; metrics in /tmp/g47/out1/metrics.json, \
checkpoints in /tmp/g47/out1/checkpoints, summaries in /tmp/g47/out1/summaries
"""
# --steps 20 --batch-size 128 --log-every 5 --threads 4
EVERY_FIFTH = """\
[rank 0 worker 0] multi-worker: 1 workers, 10000 training images in 5 files, 1000 test images
[rank 0 worker 0] input pipeline 0 first batch after step 0: fingerprint 34762164423
[rank 0 worker 0] step 5/20 loss 2.218 accuracy 0.161 974 images/s ETA 2s
[rank 0 worker 0] step 10/20 loss 2.065 accuracy 0.283 4916 images/s ETA 0s
[rank 0 worker 0] step 15/20 loss 1.778 accuracy 0.534 8618 images/s ETA 0s
[rank 0 worker 0] step 20/20 loss 1.516 accuracy 0.617 8688 images/s ETA 0s
[rank 0 worker 0] wrote checkpoint /tmp/g47/out3/checkpoints/ckpt-20
"""
# --steps 1 --batch-size 1024 --log-every 1: a start-up run
ONE_STEP = """\
[rank 0 worker 0] multi-worker: 1 workers, 10000 training images in 5 files, 1000 test images
[rank 0 worker 0] input pipeline 0 first batch after step 0: fingerprint 2402276670920
[rank 0 worker 0] step 1/1 loss 2.315 accuracy 0.079 824 images/s ETA 0s
[rank 0 worker 0] wrote checkpoint /tmp/g47/out4/checkpoints/ckpt-1
"""
# TensorFlow's stderr on a GPU node (docs/gpu-runs/2026-11-26-h200.md and TF 2.21's format).
GPU_STDERR = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795673300.753256    3282 cpu_feature_guard.cc:227] This TensorFlow binary is \
optimized to use available CPU instructions in performance-critical operations.
I0000 00:00:1795673303.901522    3282 gpu_device.cc:2020] Created device \
/job:localhost/replica:0/task:0/device:GPU:0 with 79087 MB memory:  -> device: 0, name: \
NVIDIA H100 80GB HBM3, pci bus id: 0000:00:07.0, compute capability: 9.0
E0000 00:00:1795673303.813611    3282 cuda_platform.cc:52] failed call to cuInit: INTERNAL: \
CUDA error: Failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected
"""


def stamped(text: str, start: float = 5.0, every: float = 0.1) -> list[tuple[float, str]]:
    """The lines as the parent reads them: one every `every` seconds from `start`."""
    return [(start + i * every, line) for i, line in enumerate(text.splitlines())]


def test_only_progress_lines_are_read_with_their_step_and_rate():
    lines = gpu.progress_lines(stamped(EVERY_STEP))
    assert [x.step for x in lines] == list(range(1, 13))
    assert {x.steps for x in lines} == {12}
    assert lines[0].images_per_s == 477 and lines[-1].images_per_s == 10362
    assert lines[0].t == pytest.approx(5.2)  # the third line read: two lines before it
    other = "[rank 0 worker 0] input pipeline 0 first batch after step 0: fingerprint 1"
    assert gpu.progress_lines([(1.0, other), (2.0, "step 1/2 loss 1 accuracy 1 5 images/s")]) == []


def test_a_parameter_server_chief_s_lines_are_read_too():
    line = "[rank 0 chief 0] step 15/60 loss 2.101 accuracy 0.270 3120 images/s ETA 4s"
    (found,) = gpu.progress_lines([(9.5, line)])
    assert (found.step, found.steps, found.images_per_s) == (15, 60, 3120)


def test_steady_images_per_s_is_the_median_after_the_first_line():
    lines = gpu.progress_lines(stamped(EVERY_STEP))
    assert gpu.steady_images_per_s(lines) == 8961  # the first line's 477 (tracing) left out
    with_first = sorted(x.images_per_s for x in lines)
    assert (with_first[5] + with_first[6]) / 2 != 8961
    # --log-every 5: the median of steps 10, 15 and 20's lines (974, steps 1-5's, left out)
    assert gpu.steady_images_per_s(gpu.progress_lines(stamped(EVERY_FIFTH))) == 8618
    assert gpu.steady_images_per_s(gpu.progress_lines(stamped(ONE_STEP))) is None


def test_first_step_is_step_1_s_line_and_only_that():
    assert gpu.first_step_s(gpu.progress_lines(stamped(ONE_STEP, start=6.0))) == pytest.approx(6.2)
    assert gpu.first_step_s(gpu.progress_lines(stamped(EVERY_STEP, start=4.0))) == pytest.approx(
        4.2
    )
    # --log-every 5: step 5's line is not the first step's
    assert gpu.first_step_s(gpu.progress_lines(stamped(EVERY_FIFTH))) is None


def test_a_run_is_complete_once_its_last_step_printed():
    assert gpu.completed(gpu.progress_lines(stamped(EVERY_FIFTH)))
    assert gpu.completed(gpu.progress_lines(stamped(ONE_STEP)))
    cut = "\n".join(EVERY_FIFTH.splitlines()[:5])  # killed after step 15 of 20
    assert not gpu.completed(gpu.progress_lines(stamped(cut)))
    assert not gpu.completed([])


def test_stderr_says_whether_the_gpu_was_made_a_device_and_lists_e_lines():
    facts = gpu.stderr_facts(GPU_STDERR)
    assert facts["gpu_device_created"]
    assert len(facts["e_lines"]) == 1 and "cuda_platform.cc:52" in facts["e_lines"][0]
    cpu = gpu.stderr_facts(GPU_STDERR.replace("device:GPU:0", "device:CPU:0"))
    assert not cpu["gpu_device_created"]
    assert gpu.stderr_facts("Traceback (most recent call last):\n  x\n")["e_lines"] == [
        "Traceback (most recent call last):"
    ]


@pytest.mark.parametrize("rate", [250_000.0, 40_000.0, 9_000.0])
def test_planned_runs_train_about_the_seconds_asked_with_twenty_lines(rate):
    steps, log_every = gpu.plan_steps(rate, 1024, 20.0)
    assert steps == log_every * gpu.PROGRESS_LINES
    assert steps * 1024 / rate == pytest.approx(20.0, rel=0.1)


def test_a_slow_rate_still_gets_one_step_per_line():
    assert gpu.plan_steps(100.0, 1024, 20.0) == (20, 1)
    assert gpu.log_every_for(20) == 1 and gpu.log_every_for(500) == 25 and gpu.log_every_for(7) == 1


def test_nvidia_smi_s_csv_is_a_list_of_gpus():
    out = "NVIDIA H100 80GB HBM3, 570.133.20\nNVIDIA H100 80GB HBM3, 570.133.20\n"
    assert gpu.gpus(out) == [{"name": "NVIDIA H100 80GB HBM3", "driver": "570.133.20"}] * 2
    assert gpu.gpus("NVIDIA H200, 580.159.4") == [{"name": "NVIDIA H200", "driver": "580.159.4"}]
    assert gpu.gpus("") == []


def run(side: str, kind: str, rnd: int, **figures) -> dict:
    return {"side": side, "kind": kind, "round": rnd, **figures}


def test_kit_over_plain_is_taken_round_by_round():
    runs = [
        run("kit", "startup", 1, first_step_s=7.0),
        run("plain", "startup", 1, first_step_s=6.5),
        run("kit", "throughput", 1, images_per_s=99.0, wall_s=30.0),
        run("plain", "throughput", 1, images_per_s=100.0, wall_s=30.0),
        run("kit", "startup", 2, first_step_s=9.0),
        run("plain", "startup", 2, first_step_s=8.0),
        run("kit", "throughput", 2, images_per_s=200.0, wall_s=31.0),
        run("plain", "throughput", 2, images_per_s=200.0, wall_s=31.0),
        # round 3 cut short: the kit's run alone pairs with nothing
        run("kit", "throughput", 3, images_per_s=50.0, wall_s=33.0),
    ]
    s = gpu.summarise(runs)
    assert s["images_per_s_kit_over_plain"]["samples"] == [0.99, 1.0]
    assert s["first_step_kit_minus_plain_s"]["samples"] == [0.5, 1.0]
    assert s["kit"]["images_per_s"]["n"] == 3 and s["plain"]["images_per_s"]["n"] == 2
    assert s["kit"]["first_step_s"]["median"] == 8.0
    assert s["goal_met"]  # median ratio 0.995


def test_the_goal_is_not_met_below_0_98():
    runs = [
        run("kit", "throughput", 1, images_per_s=97.0),
        run("plain", "throughput", 1, images_per_s=100.0),
    ]
    assert not gpu.summarise(runs)["goal_met"]
    assert not gpu.summarise([])["goal_met"]


def results(dry: bool = False) -> dict:
    runs = [
        run("kit", "startup", 1, first_step_s=7.25, wall_s=9.0),
        run("plain", "startup", 1, first_step_s=6.75, wall_s=8.5),
        run("kit", "throughput", 1, images_per_s=151_000.0, wall_s=31.0),
        run("plain", "throughput", 1, images_per_s=150_000.0, wall_s=30.5),
    ]
    return {
        "summary": gpu.summarise(runs),
        "config": {"batch_size": 1024, "steps": 2940, "log_every": 147, "threads": 4},
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver": "570.133.20"}],
        "dry_run_on_cpu": dry,
        "commit": "abc1234",
        "date": "2026-11-27T10:00:00+00:00",
        "tensorflow": "tensorflow 2.21.0",
        "cpus": 16,
        "rounds_done": 1,
    }


def test_the_table_names_the_gpu_commit_and_the_figures():
    table = gpu.markdown(results())
    assert "NVIDIA H100 80GB HBM3 (driver 570.133.20); commit abc1234; 2026-11-27" in table
    assert "| images/s | 151000 (n=1) | 150000 (n=1) | kit ÷ plain: 1.007x (n=1) |" in table
    assert (
        "| process start → first training step | 7.25 s (n=1) | 6.75 s (n=1) "
        "| kit minus plain: 0.50 s (n=1) |" in table
    )
    assert "`tfslurm-entry --require-gpu`" in table
    assert table.endswith("at least 0.98: met")
    dry = gpu.markdown(results(dry=True))
    assert "DRY RUN on the CPU" in dry and "--require-gpu" not in dry
    assert dry.endswith("not judged (dry run)")


def test_the_baseline_gets_every_wheel_directory_after_its_own_path():
    env = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/site/nvidia/cublas/lib", "X": "1"}
    out = gpu.with_libraries(env, "/site/nvidia/cublas/lib:/site/nvidia/cudnn/lib")
    assert out["LD_LIBRARY_PATH"] == (
        "/usr/local/nvidia/lib64:/site/nvidia/cublas/lib:/site/nvidia/cudnn/lib"
    )
    assert out["X"] == "1" and env["LD_LIBRARY_PATH"].count(":") == 1  # a copy, not changed
    assert "LD_LIBRARY_PATH" not in gpu.with_libraries({}, "")


def test_both_sides_run_the_same_program_with_the_same_arguments(tmp_path):
    setup = gpu.Setup("/py", tmp_path, 1024, 4, True, 60.0, {})
    kit = gpu.command(setup, "kit", tmp_path / "o", 300, 15)
    plain = gpu.command(setup, "plain", tmp_path / "o", 300, 15)
    assert kit[:4] == ["/py", "-m", "tfslurm_entry", "--require-gpu"]
    assert kit[4:] == plain[1:] and plain[0] == "/py"
    assert plain[1] == str(gpu.TRAIN)
    assert "--log-every" in plain and plain[plain.index("--log-every") + 1] == "15"
    dry = gpu.Setup("/py", tmp_path, 1024, 4, False, 60.0, {})
    assert "--require-gpu" not in gpu.command(dry, "kit", tmp_path / "o", 300, 15)


def test_a_one_task_step_is_what_srun_n1_sets():
    env = gpu.one_task_step("gpu7")
    assert env["SLURM_STEP_NUM_TASKS"] == "1" and env["SLURM_PROCID"] == "0"
    assert env["SLURM_STEP_NODELIST"] == env["SLURMD_NODENAME"] == "gpu7"


def test_each_line_is_stamped_when_the_program_prints_it_not_when_it_ends():
    program = textwrap.dedent(
        """
        import sys, time
        print("first", flush=True)
        time.sleep(1.0)
        print("second", flush=True)
        time.sleep(1.0)
        print("to stderr", file=sys.stderr)
        """
    )
    ran = gpu.launch([sys.executable, "-c", program], {}, timeout=30)
    assert ran.returncode == 0 and not ran.timed_out
    (t1, first), (t2, second) = ran.lines
    assert (first, second) == ("first", "second")
    # 1 s apart when printed; a busy machine may read a line late, never by half of that
    assert t2 - t1 >= 0.5
    assert ran.wall_s - t2 >= 0.5  # the lines were not read at the end
    assert ran.stderr == "to stderr\n"


def test_a_run_past_its_timeout_is_stopped_with_what_it_printed():
    program = "import time; print('started', flush=True); time.sleep(60)"
    ran = gpu.launch([sys.executable, "-c", program], {}, timeout=1)
    assert ran.timed_out and ran.returncode != 0
    assert [text for _, text in ran.lines] == ["started"]
    assert ran.wall_s < 10


def test_without_nvidia_smi_it_stops_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    out = tmp_path / "r.json"
    assert gpu.main(["--python", sys.executable, "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "bench.gpu: error: no nvidia-smi here: run on a GPU node (--allow-cpu for a dry run on "
        "the CPU)"
    ]
    assert captured.out == "" and not out.exists()
