"""The Apptainer SIF, run as a non-root user inside the unprivileged builder container."""

from __future__ import annotations

import pytest

from .conftest import slurm_env

pytestmark = pytest.mark.container

SIF = "/sif/tf-slurm.sif"


def test_sif_test_section_passes(run_apptainer):
    result = run_apptainer(["apptainer", "test", SIF])
    assert result.status == 0, result.stdout + result.stderr
    assert "tf-slurm %test: ok" in result.stdout


def test_runscript_sees_slurm_env(run_apptainer):
    """SLURM_* and CUDA_VISIBLE_DEVICES pass from the caller through `apptainer run`."""
    env = slurm_env(2, TFSLURM_PORT_BASE=23456, CUDA_VISIBLE_DEVICES="4,5,6,7")
    result = run_apptainer(["apptainer", "run", SIF, "--print-config"], env)
    assert result.status == 0, result.stdout + result.stderr
    out = result.json()
    assert out["rank"] == 2
    assert out["host"] == "c2"
    assert out["TF_CONFIG"]["task"] == {"type": "worker", "index": 2}
    assert [w.rsplit(":", 1)[0] for w in out["TF_CONFIG"]["cluster"]["worker"]] == [
        "c1",
        "c1",
        "c2",
        "c2",
    ]
    assert out["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_runscript_broken_env_exits_2(run_apptainer):
    env = slurm_env(0) | {"SLURM_STEP_NUM_TASKS": "3"}
    result = run_apptainer(["apptainer", "run", SIF, "--print-config"], env)
    assert result.status == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("tfslurm-entry:")]
    assert len(errors) == 1 and "SLURM_STEP_NUM_TASKS" in errors[0], result.stderr


def test_runs_as_non_root_with_tf_keras(run_apptainer):
    code = "import os, tensorflow as tf; print(os.getuid(), tf.keras.__name__)"
    result = run_apptainer(
        ["apptainer", "exec", SIF, "python", "-c", code], {"TF_CPP_MIN_LOG_LEVEL": "3"}
    )
    assert result.status == 0, result.stdout + result.stderr
    uid, keras_module = result.stdout.split()[-2:]
    assert uid == "1000"
    assert keras_module.startswith("tf_keras")
