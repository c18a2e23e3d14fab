"""Rule 6, GPU side: where the node's GPUs come from and how they are split."""

import os
import stat

import pytest

from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve.gpus import (
    detect_node_gpus,
    parse_gpu_list,
    split_gpus,
    uses_gpus,
)


def test_split_keeps_slurms_ids():
    assert split_gpus(["4", "5", "6", "7"], 2, None, "n1") == [["4", "5"], ["6", "7"]]


def test_split_with_explicit_count_leaves_the_rest_unused():
    assert split_gpus(["0", "1", "2", "3", "4"], 2, 2, "n1") == [["0", "1"], ["2", "3"]]


def test_split_default_is_node_gpus_floor_divided_by_tasks():
    assert split_gpus(["0", "1", "2"], 2, None, "n1") == [["0"], ["1"]]


def test_zero_per_task_hides_gpus():
    assert split_gpus(["0", "1"], 2, 0, "n1") == [[], []]


def test_uuids_and_mig_ids_are_kept_verbatim():
    ids = parse_gpu_list("GPU-aa11, MIG-bb22")
    assert split_gpus(ids, 2, None, "n1") == [["GPU-aa11"], ["MIG-bb22"]]


@pytest.mark.parametrize(("gpus", "tasks", "per_task"), [(["0"], 2, None), (["0", "1", "2"], 2, 2)])
def test_too_few_gpus_is_an_error_naming_host_and_ids(gpus, tasks, per_task):
    with pytest.raises(ConfigError, match=r"host n7 has \d GPUs \(0"):
        split_gpus(gpus, tasks, per_task, "n7")


def test_only_workers_use_gpus_in_parameter_server():
    assert uses_gpus("worker", "multi-worker")
    assert uses_gpus("worker", "parameter-server")
    assert not uses_gpus("chief", "parameter-server")
    assert not uses_gpus("ps", "parameter-server")


def test_empty_cuda_visible_devices_means_no_gpus():
    assert detect_node_gpus("") == []
    assert detect_node_gpus(" , ") == []


def test_cuda_visible_devices_wins_over_nvidia_smi():
    assert detect_node_gpus("2,3") == ["2", "3"]


def _fake_nvidia_smi(tmp_path, script: str) -> None:
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_nvidia_smi_listing_when_cuda_visible_devices_unset(tmp_path, monkeypatch):
    _fake_nvidia_smi(
        tmp_path,
        "echo 'GPU 0: NVIDIA H100 (UUID: GPU-1)'\necho 'GPU 1: NVIDIA H100 (UUID: GPU-2)'\n",
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert detect_node_gpus(None) == ["0", "1"]


def test_failing_nvidia_smi_means_no_gpus(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert detect_node_gpus(None) == []


def test_missing_nvidia_smi_means_no_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_node_gpus(None) == []


def test_empty_cuda_visible_devices_wins_over_nvidia_smi(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, "echo 'GPU 0: NVIDIA H100 (UUID: GPU-1)'\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert detect_node_gpus("") == []
    assert detect_node_gpus(None) == ["0"]
