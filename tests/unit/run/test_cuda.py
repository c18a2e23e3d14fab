"""The GPU image on a node where TensorFlow cannot use the GPUs: one line that says why."""

import pytest

from tfslurm_entry.run import cuda
from tfslurm_entry.run.cuda import cpu_fallback_note
from tfslurm_entry.run.log import log


def _log_note(environ: dict) -> None:
    note = cuda.gpu_note(environ)
    if note:
        log(note)


def test_gpu_image_without_a_driver_says_it_runs_on_the_cpu_and_what_to_do():
    note = cpu_fallback_note("gpu", driver_found=False)
    assert "libcuda.so.1" in note and "runs on the CPU" in note and "--nv" in note


@pytest.mark.parametrize(("variant", "driver"), [("gpu", True), ("cpu", False), (None, False)])
def test_no_fallback_note_with_a_driver_or_in_the_cpu_image(variant, driver):
    assert cpu_fallback_note(variant, driver_found=driver) is None


def test_the_note_is_logged_only_by_the_gpu_image_without_a_driver(capsys, monkeypatch):
    monkeypatch.setattr(cuda, "driver_found", lambda: False)
    _log_note({"TFSLURM_IMAGE_VARIANT": "cpu"})
    _log_note({})
    assert capsys.readouterr().err == ""
    _log_note({"TFSLURM_IMAGE_VARIANT": "gpu"})
    assert capsys.readouterr().err.startswith("tfslurm: no NVIDIA driver in the container")
    monkeypatch.setattr(cuda, "driver_found", lambda: True)
    _log_note({"TFSLURM_IMAGE_VARIANT": "gpu"})
    assert capsys.readouterr().err == ""


def test_driver_found_is_false_where_libcuda_cannot_be_loaded(monkeypatch):
    monkeypatch.setattr(cuda, "DRIVER_LIBRARY", "libcuda-that-does-not-exist.so.1")
    assert cuda.driver_found() is False
