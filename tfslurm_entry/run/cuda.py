"""Whether the GPU image's TensorFlow can use the GPUs of the node it runs on.

TensorFlow's own notice that it found no GPU is a warning among many; the lines here say why
and what to do. Nothing is initialised: the driver library is only loaded.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping

# Set by the images (containers/Dockerfile): "gpu" in the one with TensorFlow's CUDA build.
IMAGE_VARIANT_VAR = "TFSLURM_IMAGE_VARIANT"
# The NVIDIA driver's user-space library: `apptainer run --nv` (or `docker run --gpus`) binds
# it in from the host; without it CUDA finds no GPU and TensorFlow quietly uses the CPU.
DRIVER_LIBRARY = "libcuda.so.1"


def driver_found() -> bool:
    """Whether the NVIDIA driver's library loads here (it is not initialised: no cuInit)."""
    try:
        ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return False
    return True


def cpu_fallback_note(image_variant: str | None, driver_found: bool) -> str | None:
    """The line a task of the GPU image logs when it will run on the CPU, else None."""
    if image_variant != "gpu" or driver_found:
        return None
    return (
        f"no NVIDIA driver in the container ({DRIVER_LIBRARY} cannot be loaded): TensorFlow "
        "runs on the CPU; on a GPU node run the image with `apptainer run --nv` "
        "(Docker: `docker run --gpus all`)"
    )


def gpu_note(environ: Mapping[str, str]) -> str | None:
    """cpu_fallback_note for this task (the driver is looked for in the GPU image only)."""
    variant = environ.get(IMAGE_VARIANT_VAR)
    return cpu_fallback_note(variant, variant == "gpu" and driver_found())
