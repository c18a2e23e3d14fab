"""Whether TensorFlow's CUDA build can use the GPUs a task was given, asked without TensorFlow.

TensorFlow's own notice that it cannot use a GPU is a warning among many, after which it runs on
the CPU. Its GPU loader (xla/tsl/platform/default/dso_loader.cc) dlopens the NVIDIA driver
(libcuda.so.1) and then CUDA's libraries by bare soname, `lib<name>.so.<version>`, the versions
those of the CUDA it was built with (the cuda_config.h and nccl_config.h it ships). This module
asks the same questions of the same loader: which sonames, and does each one load. Nothing is
initialised (no cuInit), so it is safe on any node and in image builds without a GPU.
`tfslurm-entry --check-gpu` prints the answers (report()); the GPU image's build runs it.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

# Set by the images (containers/Dockerfile): "gpu" in the one with TensorFlow's CUDA build.
IMAGE_VARIANT_VAR = "TFSLURM_IMAGE_VARIANT"
# The NVIDIA driver's user-space library: `apptainer run --nv` (or `docker run --gpus`) binds
# it in from the host; without it CUDA finds no GPU and TensorFlow quietly uses the CPU.
DRIVER_LIBRARY = "libcuda.so.1"
# TensorFlow's GPU loader: each library it dlopens -> the macro that holds its version
# (GetCudaRuntimeDsoHandle, GetCublasDsoHandle, ...; TryDlopenCUDALibraries needs all but
# cupti, which the profiler loads, and nccl, which multi-GPU collectives load).
LOADED = {
    "cudart": "TF_CUDART_VERSION",
    "cublas": "TF_CUBLAS_VERSION",
    "cublasLt": "TF_CUBLAS_VERSION",
    "cufft": "TF_CUFFT_VERSION",
    "cusolver": "TF_CUSOLVER_VERSION",
    "cusparse": "TF_CUSPARSE_VERSION",
    "cudnn": "TF_CUDNN_VERSION",
    "cupti": "TF_CUPTI_VERSION",
    "nccl": "TF_NCCL_VERSION",
}
# Where an installed TensorFlow keeps the headers its loader was compiled with.
CONFIG_HEADERS = (
    "include/external/local_config_cuda/cuda/cuda/cuda_config.h",
    "include/external/local_config_nccl/nccl_config.h",
)
_DEFINE = re.compile(r'^#define (TF_\w+_VERSION) "([^"]*)"', re.MULTILINE)


def installed_variant() -> str | None:
    """Outside the images: "cpu" for tensorflow-cpu, "gpu" for tensorflow (its CUDA build),
    None without TensorFlow: the distribution whose metadata sits beside the package (a glob,
    not importlib.metadata, whose imports would cost every task 13 ms and 2 MiB)."""
    for directory in _package_dirs("tensorflow"):
        if any(directory.parent.glob("tensorflow_cpu-*.dist-info")):
            return "cpu"
        if any(directory.parent.glob("tensorflow-*.dist-info")):
            return "gpu"
    return None


def _package_dirs(name: str) -> list[Path]:
    """Where an installed package (or namespace package) lives, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def build_versions(tensorflow_dirs: Sequence[Path] | None = None) -> dict[str, str]:
    """The CUDA versions TensorFlow was built with (TF_*_VERSION), from its own headers; {}
    for a build without CUDA (tensorflow-cpu) or an image that dropped the headers."""
    found: dict[str, str] = {}
    for directory in _package_dirs("tensorflow") if tensorflow_dirs is None else tensorflow_dirs:
        for header in CONFIG_HEADERS:
            try:
                found.update(_DEFINE.findall((directory / header).read_text()))
            except OSError:
                continue
    return found


def sonames(versions: Mapping[str, str]) -> list[str]:
    """The sonames TensorFlow's loader asks for, as it formats them: lib<name>.so.<version>."""
    return [
        f"lib{name}.so.{versions[macro]}" for name, macro in LOADED.items() if macro in versions
    ]


def wheel_lib_dirs() -> list[Path]:
    """Every lib directory NVIDIA's CUDA wheels installed (site-packages/nvidia/*/lib)."""
    return sorted(lib for d in _package_dirs("nvidia") for lib in d.glob("*/lib") if lib.is_dir())


def load_error(soname: str, library_path: Sequence[str] = ()) -> str | None:
    """dlopen the library as TensorFlow's loader would in a process started with LD_LIBRARY_PATH
    `library_path` (RTLD_NOW): from the first of those directories that has it, else by bare
    soname (the loader's cache). Why it does not load, or None."""
    found = next((Path(d, soname) for d in library_path if d and Path(d, soname).is_file()), None)
    try:
        ctypes.CDLL(str(found or soname), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as err:
        return str(err)
    return None


def load_failures(names: Sequence[str], library_path: Sequence[str]) -> dict[str, str]:
    """soname -> why it does not load (load_error), for each of names that does not."""
    loads = ((name, load_error(name, library_path)) for name in names)
    return {name: error for name, error in loads if error}


def program_library_path(environ: Mapping[str, str]) -> list[str]:
    """LD_LIBRARY_PATH's directories as a program the entrypoint starts would have them
    (library_path() added for a venv with NVIDIA's wheels)."""
    return (library_path(environ) or environ.get("LD_LIBRARY_PATH", "")).split(os.pathsep)


def library_path(environ: Mapping[str, str]) -> str | None:
    """The LD_LIBRARY_PATH a program needs for TensorFlow to find the CUDA wheels' libraries
    outside the kit's image (a venv with tensorflow[and-cuda]): the wheels' lib directories
    the loader's cache does not hold, after the user's own. None when nothing is missing.

    The GPU image registers them in the cache when it is built (containers/Dockerfile)."""
    if environ.get(IMAGE_VARIANT_VAR):
        return None
    dirs = wheel_lib_dirs()
    missing = [str(d) for d in dirs if d not in loader_cache_dirs()] if dirs else []
    own = [d for d in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    missing = [d for d in missing if d not in own]
    return os.pathsep.join(own + missing) if missing else None


# TensorFlow's own list of the device types it may register in a process (read when it loads:
# tensorflow/core/common_runtime/device_factory.cc). A task the kit gives no GPU gets "CPU":
# without it TensorFlow's CUDA build still initialises the CUDA driver, with
# CUDA_VISIBLE_DEVICES="" too (cuInit fails: an E-level `failed call to cuInit:
# CUDA_ERROR_NO_DEVICE` line in every such task of a successful job).
ENABLED_DEVICE_TYPES_VAR = "TF_ENABLED_DEVICE_TYPES"


def no_gpu_env(task_gpus: str | None, environ: Mapping[str, str]) -> dict[str, str]:
    """For a task given no GPU ("": the chief and ps of a parameter-server job on a GPU node,
    --gpus-per-task 0): TensorFlow registers no GPU device at all, so it never asks the driver
    for one. A value the user set is theirs and is kept."""
    if task_gpus != "" or ENABLED_DEVICE_TYPES_VAR in environ:
        return {}
    return {ENABLED_DEVICE_TYPES_VAR: "CPU"}


def driver_found() -> bool:
    """Whether the NVIDIA driver's library loads here (it is not initialised: no cuInit)."""
    return load_error(DRIVER_LIBRARY) is None


# What to do without a driver: bind the host's in (the image), or have one (a venv).
BIND_DRIVER = "run the image with `apptainer run --nv` (Docker: `docker run --gpus all`)"
NEED_DRIVER = "run on a node with the NVIDIA driver installed"


def cpu_fallback_note(
    image_variant: str | None, driver_found: bool, in_image: bool = True
) -> str | None:
    """The line a task of TensorFlow's CUDA build logs when it will run on the CPU, else None."""
    if image_variant != "gpu" or driver_found:
        return None
    where = "in the container" if in_image else "here"
    todo = f"on a GPU node {BIND_DRIVER}" if in_image else f"for GPUs, {NEED_DRIVER}"
    return (
        f"no NVIDIA driver {where} ({DRIVER_LIBRARY} cannot be loaded): TensorFlow runs on the "
        f"CPU; {todo}"
    )


def diagnose(
    variant: str | None, gpus: str, driver: bool, failures: Mapping[str, str], in_image: bool = True
) -> str | None:
    """Why this task's TensorFlow will not compute on a GPU, in one line; None if it will.

    gpus: the GPUs the task was given; failures: soname -> dlopen's error for each CUDA
    library that does not load.
    """
    if variant != "gpu":
        return (
            "TensorFlow here is not its CUDA build (tensorflow-cpu, or none): run the GPU image "
            "(tf-slurm-gpu.sif, tf-slurm:gpu) for GPU jobs"
        )
    if not gpus:
        return (
            "this task was given no GPUs (CUDA_VISIBLE_DEVICES is empty or unset): request them "
            "(srun --gpus-per-task=N, or --gres=gpu:N)"
        )
    if not driver:
        where, todo = ("in the container", BIND_DRIVER) if in_image else ("here", NEED_DRIVER)
        return (
            f"this task was given GPUs {gpus} but the NVIDIA driver ({DRIVER_LIBRARY}) cannot be "
            f"loaded {where}: {todo}"
        )
    if failures:
        first = next(iter(failures.values()))
        return (
            f"this task was given GPUs {gpus} but TensorFlow cannot load {', '.join(failures)} "
            f"({first}): use the kit's GPU image as built, or put the lib directories of "
            "NVIDIA's CUDA wheels (site-packages/nvidia/*/lib) on the library path"
        )
    return None


def check(task_gpus: str | None, environ: Mapping[str, str], required: bool) -> str | None:
    """This task's GPU line, or None when there is nothing to say. environ: the program's.

    required: the task must compute on a GPU (--require-gpu, for a task whose role uses GPUs);
    then any reason it would not is returned. Otherwise only the GPU image speaks: given GPUs
    that TensorFlow cannot use, or run without a driver at all.
    """
    image = environ.get(IMAGE_VARIANT_VAR)
    variant = image or installed_variant()
    if variant != "gpu" and not required:
        return None
    gpus = task_gpus if task_gpus is not None else environ.get("CUDA_VISIBLE_DEVICES", "")
    driver = variant == "gpu" and driver_found()
    if not gpus and not required:
        return cpu_fallback_note(variant, driver, in_image=bool(image))
    failures = {}
    if variant == "gpu" and gpus and driver:
        path = environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
        failures = load_failures(sonames(build_versions()), path)
    problem = diagnose(variant, gpus, driver, failures, in_image=bool(image))
    return problem and f"{problem}; TensorFlow would run on the CPU"


def loader_cache_dirs() -> set[Path]:
    """The directories the dynamic loader's cache (ldconfig -p) holds libraries from."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    except OSError:
        return set()
    return {
        Path(line.rsplit(" => ", 1)[1]).parent for line in listing.splitlines() if " => " in line
    }


def report(print_line=print) -> int:
    """Every library TensorFlow's GPU loader asks for and every lib directory of NVIDIA's CUDA
    wheels: whether each loads, or is known to the loader. 0 if all are, 1 if not."""
    names = sonames(build_versions())
    if not names:
        print_line("tensorflow here is not a CUDA build (no cuda_config.h in its package)")
        return 1
    path = program_library_path(os.environ)
    bad = 0
    for name in names:
        error = load_error(name, path)
        bad += error is not None
        print_line(f"{name}: {'loads' if error is None else f'DOES NOT LOAD: {error}'}")
    reachable = loader_cache_dirs() | {Path(d) for d in path if d}
    for lib in wheel_lib_dirs():
        if any(lib.glob("lib*.so*")) and lib not in reachable:
            bad += 1
            print_line(f"{lib}: neither in the loader's cache (ldconfig -p) nor LD_LIBRARY_PATH")
    driver = "loads" if driver_found() else "not here (bound in at run time: --nv, --gpus)"
    print_line(f"{bad} problems; the driver {DRIVER_LIBRARY}: {driver}")
    return 1 if bad else 0
