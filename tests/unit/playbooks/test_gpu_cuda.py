"""The playbooks' idea of the GPU image's CUDA version agrees with the image itself.

preflight checks each GPU node's driver against the minimum for `tfslurm_gpu_cuda_version`
(default in roles/preflight/defaults/main.yml); the GPU image gets its CUDA runtime from the
nvidia-cuda-runtime-cu12 wheel pinned in containers/requirements-gpu.lock. A new lock with
another CUDA must move the playbooks' default with it, or preflight checks the wrong minimum.
"""

from __future__ import annotations

import re

import yaml

from bench.repo import ROOT

PREFLIGHT_DEFAULTS = ROOT / "playbooks" / "roles" / "preflight" / "defaults" / "main.yml"
GPU_LOCK = ROOT / "containers" / "requirements-gpu.lock"


def playbook_cuda_version() -> str:
    """The default of tfslurm_gpu_cuda_version: `{{ tfslurm_gpu_cuda_version | default('X') }}`."""
    defaults = yaml.safe_load(PREFLIGHT_DEFAULTS.read_text())
    found = re.fullmatch(
        r"\{\{ tfslurm_gpu_cuda_version \| default\('([0-9.]+)'\) \}\}",
        defaults["preflight_gpu_cuda_version"],
    )
    assert found, defaults["preflight_gpu_cuda_version"]
    return found[1]


def locked_cuda_runtime() -> str:
    """The version of nvidia-cuda-runtime-cu12 in the GPU image's lock, e.g. 12.9.79."""
    found = re.findall(r"^nvidia-cuda-runtime-cu\d+==([0-9.]+)", GPU_LOCK.read_text(), re.MULTILINE)
    assert len(found) == 1, f"{GPU_LOCK} pins nvidia-cuda-runtime {len(found)} times: {found}"
    return found[0]


def major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def test_the_playbooks_cuda_version_is_the_gpu_images() -> None:
    runtime = locked_cuda_runtime()
    assert playbook_cuda_version() == major_minor(runtime), (
        f"{GPU_LOCK.name} pins the CUDA runtime {runtime}: set the default of "
        f"tfslurm_gpu_cuda_version in {PREFLIGHT_DEFAULTS.relative_to(ROOT)} to "
        f"'{major_minor(runtime)}'"
    )


def test_preflight_knows_the_minimum_driver_for_that_cuda() -> None:
    defaults = yaml.safe_load(PREFLIGHT_DEFAULTS.read_text())
    major = playbook_cuda_version().split(".")[0]
    minimum = defaults["preflight_gpu_min_drivers"].get(major, "")
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", minimum), (
        f"preflight_gpu_min_drivers has no minimum Linux driver for CUDA {major}: add it from "
        "NVIDIA's CUDA compatibility table"
    )
