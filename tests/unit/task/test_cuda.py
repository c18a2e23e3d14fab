"""Whether TensorFlow's CUDA build can use a task's GPUs: the sonames its loader asks for, from
its own headers, and the one line (or the error, with --require-gpu) when it cannot."""

import shutil
from pathlib import Path

import pytest

from tests.fake_slurm import step_env
from tfslurm_entry.cli import main
from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve import Options, resolve
from tfslurm_entry.resolve.slurm_env import read_step_env
from tfslurm_entry.task import cuda, preflight
from tfslurm_entry.task.cuda import cpu_fallback_note, diagnose

# The two headers of TensorFlow 2.21's CUDA build (wheel tensorflow-2.21.0, trimmed).
CUDA_CONFIG = """#define TF_CUDA_VERSION "12.5.1"
#define TF_CUDART_VERSION "12"
#define TF_CUPTI_VERSION "12"
#define TF_CUBLAS_VERSION "12"
#define TF_CUSOLVER_VERSION "11"
#define TF_CURAND_VERSION "10"
#define TF_CUFFT_VERSION "11"
#define TF_CUSPARSE_VERSION "12"
#define TF_CUDNN_VERSION "9"
"""
NCCL_CONFIG = '#define TF_NCCL_VERSION "2"'
GPU_IMAGE = {"TFSLURM_IMAGE_VARIANT": "gpu"}


@pytest.fixture
def tensorflow_dir(tmp_path):
    for header, text in zip(cuda.CONFIG_HEADERS, (CUDA_CONFIG, NCCL_CONFIG), strict=True):
        (tmp_path / header).parent.mkdir(parents=True)
        (tmp_path / header).write_text(text)
    return tmp_path


def test_the_sonames_are_tensorflows_own_from_the_headers_it_was_built_with(tensorflow_dir):
    versions = cuda.build_versions([tensorflow_dir])
    assert versions["TF_CUSOLVER_VERSION"] == "11" and versions["TF_NCCL_VERSION"] == "2"
    assert cuda.sonames(versions) == [
        "libcudart.so.12",
        "libcublas.so.12",
        "libcublasLt.so.12",
        "libcufft.so.11",
        "libcusolver.so.11",
        "libcusparse.so.12",
        "libcudnn.so.9",
        "libcupti.so.12",
        "libnccl.so.2",
    ]


def test_no_headers_no_sonames(tmp_path):
    assert cuda.build_versions([tmp_path]) == {}
    assert cuda.sonames({}) == []


def test_a_library_that_is_not_there_does_not_load_and_says_why():
    error = cuda.load_error("libcusolver-that-is-not-here.so.11")
    assert "libcusolver-that-is-not-here.so.11" in error
    assert cuda.load_error("libc.so.6") is None


def test_a_library_is_loaded_from_ld_library_path_first_as_the_program_would(tmp_path):
    libm = next(
        p
        for d in ("/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64")
        if (p := Path(d, "libm.so.6")).exists()
    )
    shutil.copy(libm, tmp_path / "libtfslurm-test.so.1")
    assert cuda.load_error("libtfslurm-test.so.1") is not None
    assert cuda.load_error("libtfslurm-test.so.1", ["/nonexistent", str(tmp_path)]) is None


def test_a_venv_program_gets_the_wheels_lib_directories_the_loader_cache_lacks(monkeypatch):
    """Outside the image (tensorflow[and-cuda] in a venv) nothing registered the wheels' lib
    directories: the program's LD_LIBRARY_PATH gets them, after the user's own."""
    wheels = [Path("/venv/nvidia/cublas/lib"), Path("/venv/nvidia/cusolver/lib")]
    monkeypatch.setattr(cuda, "wheel_lib_dirs", lambda: wheels)
    monkeypatch.setattr(cuda, "loader_cache_dirs", lambda: {wheels[0]})
    assert cuda.library_path({"LD_LIBRARY_PATH": "/mine"}) == "/mine:/venv/nvidia/cusolver/lib"
    assert cuda.library_path({"LD_LIBRARY_PATH": "/venv/nvidia/cusolver/lib"}) is None
    assert cuda.library_path(GPU_IMAGE) is None  # the image's loader cache has them all
    monkeypatch.setattr(cuda, "wheel_lib_dirs", lambda: [])
    assert cuda.library_path({}) is None  # no CUDA wheels: nothing to add


def test_gpu_image_without_a_driver_says_it_runs_on_the_cpu_and_what_to_do():
    note = cpu_fallback_note("gpu", driver_found=False)
    assert "libcuda.so.1" in note and "runs on the CPU" in note and "--nv" in note


@pytest.mark.parametrize(("variant", "driver"), [("gpu", True), ("cpu", False), (None, False)])
def test_no_fallback_note_with_a_driver_or_in_the_cpu_image(variant, driver):
    assert cpu_fallback_note(variant, driver_found=driver) is None


@pytest.mark.parametrize(
    ("variant", "gpus", "driver", "failures", "says"),
    [
        ("cpu", "0", True, {}, "not its CUDA build (tensorflow-cpu, or none): run the GPU image"),
        ("gpu", "", True, {}, "given no GPUs (CUDA_VISIBLE_DEVICES is empty or unset)"),
        ("gpu", "0,1", False, {}, "given GPUs 0,1 but the NVIDIA driver (libcuda.so.1)"),
        (
            "gpu",
            "2",
            True,
            {"libcusolver.so.11": "libcusolver.so.11: cannot open shared object"},
            "cannot load libcusolver.so.11 (libcusolver.so.11: cannot open shared object)",
        ),
    ],
)
def test_each_reason_tensorflow_would_not_use_the_gpu_is_named(
    variant, gpus, driver, failures, says
):
    assert says in diagnose(variant, gpus, driver, failures)


def test_nothing_to_say_when_tensorflow_can_use_the_gpus():
    assert diagnose("gpu", "0", True, {}) is None


@pytest.fixture
def no_driver(monkeypatch):
    monkeypatch.setattr(cuda, "driver_found", lambda: False)


@pytest.fixture
def driver_but_no_cusolver(monkeypatch, tensorflow_dir):
    monkeypatch.setattr(cuda, "driver_found", lambda: True)
    monkeypatch.setattr(cuda, "_package_dirs", lambda name: [tensorflow_dir])
    missing = "libcusolver.so.11: cannot open shared object file: No such file or directory"
    monkeypatch.setattr(
        cuda, "load_error", lambda name, *_: missing if "cusolver" in name else None
    )


def test_the_cpu_image_says_nothing_unless_a_gpu_is_required():
    assert cuda.check("0", {"TFSLURM_IMAGE_VARIANT": "cpu"}, required=False) is None
    assert "not its CUDA build" in cuda.check("0", {"TFSLURM_IMAGE_VARIANT": "cpu"}, True)


def test_the_gpu_image_given_gpus_names_the_library_that_does_not_load(driver_but_no_cusolver):
    line = cuda.check("0,1", GPU_IMAGE, required=False)
    assert line.startswith("this task was given GPUs 0,1 but TensorFlow cannot load libcusolver")
    assert line.endswith("TensorFlow would run on the CPU")
    # Slurm bound the task's GPUs itself: the plan leaves them untouched, the environment has them
    assert "given GPUs 3" in cuda.check(None, {**GPU_IMAGE, "CUDA_VISIBLE_DEVICES": "3"}, False)


def test_the_gpu_image_without_gpus_or_driver_keeps_its_cpu_note(no_driver):
    assert cuda.check("", GPU_IMAGE, required=False).startswith("no NVIDIA driver")
    assert "given GPUs 0 but the NVIDIA driver" in cuda.check("0", GPU_IMAGE, required=False)


def test_outside_the_image_the_installed_tensorflow_says_which_build_it_is(monkeypatch, no_driver):
    monkeypatch.setattr(cuda, "installed_variant", lambda: "gpu")  # tensorflow[and-cuda]
    assert cuda.check("", {}, required=False).startswith("no NVIDIA driver here (libcuda.so.1")
    monkeypatch.setattr(cuda, "installed_variant", lambda: "cpu")  # tensorflow-cpu
    assert cuda.check("", {}, required=False) is None


@pytest.mark.parametrize(
    ("dist_info", "variant"),
    [
        ("tensorflow_cpu-2.21.0.dist-info", "cpu"),
        ("tensorflow-2.21.0.dist-info", "gpu"),
        (None, None),
    ],
)
def test_the_installed_distribution_says_which_build_tensorflow_is(
    tmp_path, monkeypatch, dist_info, variant
):
    (tmp_path / "tensorflow").mkdir()
    if dist_info:
        (tmp_path / dist_info).mkdir()
    monkeypatch.setattr(cuda, "_package_dirs", lambda name: [tmp_path / name])
    assert cuda.installed_variant() == variant


def test_report_lists_every_library_and_fails_on_one_that_does_not_load(driver_but_no_cusolver):
    lines = []
    assert cuda.report(lines.append) == 1
    assert "libcudart.so.12: loads" in lines
    assert any(line.startswith("libcusolver.so.11: DOES NOT LOAD") for line in lines)


def plan(rank: int, strategy: str = "parameter-server", gpus: str = "0"):
    env = step_env(rank, "n1", "3", CUDA_VISIBLE_DEVICES=gpus)
    return resolve(read_step_env(env), Options(strategy=strategy, port_base=5000), [gpus])


def test_require_gpu_stops_a_worker_that_would_run_on_the_cpu(no_driver):
    with pytest.raises(ConfigError, match=r"^rank 2 on n1: this task was given GPUs 0"):
        preflight.check_gpus(plan(2), GPU_IMAGE, require=True)


def test_require_gpu_leaves_the_chief_and_the_ps_alone(no_driver):
    """Their GPUs are hidden on purpose in a parameter-server job: nothing to require, only the
    GPU image's note that there is no driver here."""
    for rank in (0, 1):
        line = preflight.check_gpus(plan(rank), GPU_IMAGE, require=True)
        assert line.startswith("no NVIDIA driver in the container")


def test_require_gpu_from_the_command_line_fails_before_anything_starts(capsys, no_driver):
    env = {**step_env(0, "n1", "1", CUDA_VISIBLE_DEVICES="0"), **GPU_IMAGE}
    assert main(["--require-gpu", "true"], env) == 2
    err = capsys.readouterr().err
    assert err.startswith("tfslurm-entry: error: this task was given GPUs 0 but the NVIDIA driver")
    assert "(--require-gpu, TFSLURM_REQUIRE_GPU)" in err and err.count("\n") == 1


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_a_bad_require_gpu_variable_is_one_clear_error(capsys, value):
    assert main(["--print-config"], {"TFSLURM_REQUIRE_GPU": value}) == 2
    assert f"TFSLURM_REQUIRE_GPU='{value}' is invalid" in capsys.readouterr().err
