"""The GPU variant (tf-slurm:gpu, tf-slurm-gpu.sif): TensorFlow's CUDA build, on a host without
NVIDIA hardware or driver (the build and CI hosts): it must say so and run on the CPU, and the
entrypoint must work in it exactly as in the CPU image.

`make test-container-gpu` builds both first (`make image-gpu sif-gpu`); a missing one fails
naming the target. `make test` runs the image's tests (those not marked gpu_sif): building the
GPU SIF would take it past its time. On a GPU node, `make test-gpu` (tests/gpu) covers the
hardware side.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import ROOT, require_image, require_sif, run_in_apptainer, run_in_image, slurm_env
from .test_image import train_two_workers

pytestmark = pytest.mark.container_gpu

GPU_IMAGE = os.environ.get("TFSLURM_GPU_IMAGE", "tf-slurm:gpu")
GPU_SIF = Path(os.environ.get("TFSLURM_GPU_SIF", ROOT / "tf-slurm-gpu.sif")).resolve()
IN_BUILDER = "/sif/tf-slurm-gpu.sif"
FALLBACK = (
    "tfslurm: no NVIDIA driver in the container (libcuda.so.1 cannot be loaded): "
    "TensorFlow runs on the CPU"
)
# The libraries TensorFlow's GPU loader must find (TryDlopenCUDALibraries, and NCCL for
# collectives): each must load in the image and the SIF, whatever LD_LIBRARY_PATH says.
MUST_LOAD = ("cudart", "cublas", "cublasLt", "cufft", "cusolver", "cusparse", "cudnn", "nccl")
# Apptainer's --nv puts the host driver's directory first; a user may add their own.
THEIR_LIBRARY_PATH = "/.singularity.d/libs:/home/tf/lib:/usr/local/cuda-11.8/lib64"
# What the program below prints: how TensorFlow was built and where it computes.
BUILD_INFO = """
import json, tensorflow as tf
info = tf.sysconfig.get_build_info()
x = tf.linalg.matmul(tf.ones((64, 64)), tf.ones((64, 64)))
print(json.dumps({"cuda": tf.test.is_built_with_cuda(), "cuda_version": info.get("cuda_version"),
                  "cudnn_version": info.get("cudnn_version"), "keras": tf.keras.__name__,
                  "gpus": len(tf.config.list_physical_devices("GPU")), "device": x.device,
                  "sum": float(tf.reduce_sum(x))}))
"""


@pytest.fixture(scope="module")
def gpu_image(client):
    return require_image(client, GPU_IMAGE, "image-gpu")


@pytest.fixture(scope="module")
def gpu_sif(gpu_image, builder) -> Path:
    return require_sif(GPU_SIF, "sif-gpu")


@pytest.fixture(scope="module")
def run_gpu_apptainer(gpu_sif):
    """run_gpu_apptainer(argv, env) -> Result, the SIF at IN_BUILDER whatever its file's name."""

    def run(argv, env=None):
        return run_in_apptainer(gpu_sif, argv, env, name=Path(IN_BUILDER).name)

    return run


def test_labels_and_environment_name_the_variant(gpu_image):
    config = gpu_image.attrs["Config"]
    assert config["Labels"]["io.github.tf-slurm.variant"] == "gpu"
    assert "TFSLURM_IMAGE_VARIANT=gpu" in config["Env"]
    assert config["Entrypoint"] == ["tfslurm-entry"] and config["User"] == "tf"


def assert_every_library_loads(result) -> None:
    assert result.status == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for name in MUST_LOAD:
        assert any(
            line.startswith(f"lib{name}.so.") and line.endswith(": loads") for line in lines
        ), (
            name,
            result.stdout,
        )
    assert "0 problems" in lines[-1], result.stdout


@pytest.mark.parametrize("library_path", [None, THEIR_LIBRARY_PATH])
def test_every_cuda_library_tensorflow_loads_resolves_in_the_image(gpu_image, library_path):
    """dlopen by bare soname, as TensorFlow's loader does: the framework library's RUNPATH
    misses nvidia/cusolver/lib, so without the image's loader cache libcusolver.so.11 is not
    found and TensorFlow skips the GPU."""
    env = {"LD_LIBRARY_PATH": library_path} if library_path else None
    assert_every_library_loads(run_in_image(GPU_IMAGE, ["--check-gpu"], env))


def test_a_task_given_gpus_it_cannot_use_says_why_and_require_gpu_stops_it(gpu_image):
    program = ["python", "-c", "print('program ran')"]
    env = {"CUDA_VISIBLE_DEVICES": "0"}
    warned = run_in_image(GPU_IMAGE, program, env)
    assert warned.status == 0 and "program ran" in warned.stdout, warned.stderr[-3000:]
    line = "tfslurm: this task was given GPUs 0 but the NVIDIA driver (libcuda.so.1) cannot be"
    assert line in warned.stderr and "TensorFlow would run on the CPU" in warned.stderr
    stopped = run_in_image(GPU_IMAGE, ["--require-gpu", *program], env)
    assert stopped.status == 2 and "program ran" not in stopped.stdout
    assert stopped.stderr.startswith("tfslurm-entry: error: this task was given GPUs 0"), (
        stopped.stderr
    )


def test_tensorflow_is_the_cuda_build_and_runs_on_the_cpu_without_a_gpu(gpu_image):
    """Run through the entrypoint (one task, no Slurm): the CUDA build, no GPU here, the
    entrypoint's one line saying why and what to do, and the work done on the CPU."""
    result = run_in_image(GPU_IMAGE, ["python", "-c", BUILD_INFO])
    assert result.status == 0, result.stderr[-3000:]
    out = result.json()
    assert out["cuda"] is True and out["cuda_version"].startswith("12."), out
    assert out["cudnn_version"].startswith("9"), out
    assert out["keras"].startswith("tf_keras"), out
    assert out["gpus"] == 0 and out["device"].endswith("CPU:0"), out
    assert out["sum"] == 64.0 * 64 * 64
    assert [line for line in result.stderr.splitlines() if line.startswith(FALLBACK)], (
        result.stderr[-3000:]
    )


def test_the_cpu_image_has_no_cuda_and_says_nothing_about_drivers(image):
    result = run_in_image(image.id, ["python", "-c", BUILD_INFO])
    assert result.status == 0, result.stderr[-3000:]
    assert result.json()["cuda"] is False
    assert "NVIDIA driver" not in result.stderr


def test_print_config_splits_the_nodes_gpus(gpu_image):
    for rank in range(4):
        env = slurm_env(rank, TFSLURM_PORT_BASE=23456, CUDA_VISIBLE_DEVICES="4,5,6,7")
        result = run_in_image(GPU_IMAGE, ["--print-config"], env)
        assert result.status == 0, result.stderr
        out = result.json()
        assert out["TF_CONFIG"]["task"] == {"type": "worker", "index": rank}
        assert out["CUDA_VISIBLE_DEVICES"] == ["4,5", "6,7"][rank % 2]


def test_two_containers_train_multi_worker(gpu_image):
    """The same 2-task MultiWorkerMirroredStrategy step as the CPU image's, on the CPU."""
    for run in train_two_workers(gpu_image.id):
        assert FALLBACK in run.stderr, run.stderr[-3000:]


@pytest.mark.gpu_sif
@pytest.mark.parametrize("library_path", [None, THEIR_LIBRARY_PATH])
def test_every_cuda_library_tensorflow_loads_resolves_in_the_sif(run_gpu_apptainer, library_path):
    env = {"LD_LIBRARY_PATH": library_path} if library_path else None
    argv = ["apptainer", "run", "--nv", IN_BUILDER, "--check-gpu"]
    assert_every_library_loads(run_gpu_apptainer(argv, env))


@pytest.mark.gpu_sif
def test_sif_test_section_passes(run_gpu_apptainer):
    result = run_gpu_apptainer(["apptainer", "test", IN_BUILDER])
    assert result.status == 0, result.stdout + result.stderr
    assert "tf-slurm %test: ok" in result.stdout


@pytest.mark.gpu_sif
def test_sif_labels_name_the_variant(run_gpu_apptainer):
    result = run_gpu_apptainer(["apptainer", "inspect", "--labels", IN_BUILDER])
    assert result.status == 0, result.stderr
    assert "io.github.tf-slurm.variant: gpu" in result.stdout, result.stdout


@pytest.mark.gpu_sif
def test_run_nv_without_a_driver_still_runs_and_the_entrypoint_says_why(run_gpu_apptainer):
    """`apptainer run --nv` where the host has no NVIDIA driver. Apptainer 1.4.5 binds what it
    finds (nothing) and says nothing at its default level (no "could not find any nv files"
    warning, which older Singularity printed), so the entrypoint's line is the one telling the
    user: the task runs on the CPU, with its Slurm resolution as without --nv."""
    env = slurm_env(1, TFSLURM_PORT_BASE=23456, CUDA_VISIBLE_DEVICES="0,1")
    result = run_gpu_apptainer(["apptainer", "run", "--nv", IN_BUILDER, "--print-config"], env)
    assert result.status == 0, result.stdout + result.stderr
    out = result.json()
    assert out["TF_CONFIG"]["task"] == {"type": "worker", "index": 1}
    assert out["CUDA_VISIBLE_DEVICES"] == "1"
    code = "import tensorflow as tf; print(tf.test.is_built_with_cuda())"
    single = run_gpu_apptainer(["apptainer", "run", "--nv", IN_BUILDER, "python", "-c", code])
    assert single.status == 0, single.stderr[-3000:]
    assert single.stdout.split()[-1] == "True"
    assert FALLBACK in single.stderr, single.stderr[-3000:]
