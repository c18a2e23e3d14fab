"""Stage 4: choose the GPUs each task may see (CUDA_VISIBLE_DEVICES per task).

Slurm's GPU ids are kept as they are ("4,5,6,7" split in two is "4,5" and "6,7"): they are the
ids CUDA sees inside the step, and renumbering them would point tasks at the wrong devices.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence

from ..errors import ConfigError

_NVIDIA_SMI_GPU = re.compile(r"^GPU (\d+):", re.MULTILINE)


def uses_gpus(task_type: str, strategy: str) -> bool:
    """Workers compute, so they get GPUs; a parameter-server job's chief and ps do not."""
    return strategy == "multi-worker" or task_type == "worker"


def parse_gpu_list(value: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES as a list of ids (numbers, UUIDs or MIG names); "" means none."""
    return [item.strip() for item in value.split(",") if item.strip()]


def detect_node_gpus(cuda_visible_devices: str | None, timeout: float = 10.0) -> list[str]:
    """The GPUs this node gives the step: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L`.

    A missing or failing nvidia-smi means no GPUs, not an error: CPU-only nodes are normal.
    """
    if cuda_visible_devices is not None:
        return parse_gpu_list(cuda_visible_devices)
    try:
        listing = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=timeout, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return _NVIDIA_SMI_GPU.findall(listing)


def split_gpus(
    node_gpus: Sequence[str], num_tasks: int, per_task: int | None, host: str
) -> list[list[str]]:
    """Contiguous slices of the node's GPUs, one per GPU-using task on it, in rank order."""
    if num_tasks == 0:
        return []
    if per_task is None:
        per_task = len(node_gpus) // num_tasks
        if per_task == 0:
            raise _too_few(node_gpus, num_tasks, 1, host)
    if per_task * num_tasks > len(node_gpus):
        raise _too_few(node_gpus, num_tasks, per_task, host)
    return [list(node_gpus[i * per_task : (i + 1) * per_task]) for i in range(num_tasks)]


def _too_few(node_gpus: Sequence[str], num_tasks: int, per_task: int, host: str) -> ConfigError:
    have = ",".join(node_gpus) or "none"
    return ConfigError(
        f"host {host} has {len(node_gpus)} GPUs ({have}) for {num_tasks} GPU-using tasks "
        f"needing {per_task} each",
        "request more GPUs (--gres=gpu:N), start fewer tasks per node, lower --gpus-per-task "
        "(TFSLURM_GPUS_PER_TASK), or set it to 0 to run on CPU",
    )
