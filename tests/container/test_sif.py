"""The Apptainer SIF, run as a non-root user inside the unprivileged builder container."""

from __future__ import annotations

import pytest

from .conftest import LOADERS_CODE, slurm_env

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


def _squashfs_superblock(run_apptainer) -> str:
    """`unsquashfs -s` of the SIF's root file system partition (found with `apptainer sif list`)."""
    script = (
        "offset=$(apptainer sif list /sif/tf-slurm.sif | awk -F'|' '/Squashfs/ "
        '{split($4, range, "-"); print range[1] + 0}\') && '
        'unsquashfs -s -o "$offset" /sif/tf-slurm.sif'
    )
    result = run_apptainer(["bash", "-c", script])
    assert result.status == 0, result.stdout + result.stderr
    return result.stdout


def test_sif_is_lz4_with_128k_blocks(run_apptainer):
    """The build options that make `import tensorflow` fast through squashfuse (README)."""
    superblock = _squashfs_superblock(run_apptainer)
    assert "Compression lz4" in superblock, superblock
    assert "High Compression option specified (-Xhc)" in superblock, superblock
    assert "Block size 131072" in superblock, superblock


def test_every_module_in_the_sif_has_bytecode(run_apptainer):
    """User tf cannot write __pycache__ in a read-only SIF: a missing .pyc is compiled on
    every import by every task."""
    code = (
        "import importlib.util, pathlib, sys\n"
        "site = pathlib.Path(sys.prefix, 'lib', 'python3.11', 'site-packages')\n"
        "sources = [p for p in site.rglob('*.py') if p.name != 'setup.py']\n"
        "missing = [str(p) for p in sources\n"
        "           if not pathlib.Path(importlib.util.cache_from_source(str(p))).is_file()]\n"
        "print(len(sources), len(missing), *missing[:5])\n"
    )
    result = run_apptainer(["apptainer", "exec", SIF, "python", "-c", code])
    assert result.status == 0, result.stdout + result.stderr
    total, missing, *examples = result.stdout.split()
    assert int(total) > 5000, result.stdout
    assert int(missing) == 0, f"{missing} of {total} modules have no .pyc, e.g. {examples}"


def test_the_sif_imports_tensorflow_from_its_bytecode_bundle(run_apptainer):
    """From a SIF every file is a trip through squashfuse: the modules training imports come
    from the one bundle file (tfslurm_entry/fastimport/bytecode_bundle.py), the rest from their
    files."""
    status = ["apptainer", "exec", SIF, "python", "-m", "tfslurm_entry.fastimport.build"]
    result = run_apptainer([*status, "status"])
    assert result.status == 0, result.stdout + result.stderr
    assert "in use (/opt/venv/tfslurm-bytecode.bundle)" in result.stdout
    env = {"TF_CPP_MIN_LOG_LEVEL": "3"}
    result = run_apptainer(["apptainer", "exec", SIF, "python", "-c", LOADERS_CODE], env)
    assert result.status == 0, result.stdout + result.stderr
    loaders = result.json()
    assert loaders.get("BundleLoader", 0) > 2000, loaders
    # Only the few modules that site imports before the .pth file installs the hook.
    assert loaders.get("SourceFileLoader", 0) < 50, loaders
    env["TFSLURM_BYTECODE_BUNDLE"] = "0"
    off = run_apptainer(["apptainer", "exec", SIF, "python", "-c", LOADERS_CODE], env)
    assert off.status == 0, off.stdout + off.stderr
    assert "BundleLoader" not in off.json(), off.stdout


def test_the_sif_collects_less_while_tensorflow_imports(run_apptainer):
    """tfslurm_entry/fastimport/import_gc.py, installed by the image's start-up hook: a raised
    threshold from interpreter start until `import tensorflow` has run, then what it built is
    frozen."""
    code = (
        "import gc, json; start = gc.get_threshold(); import tensorflow; "
        "print(json.dumps([start, gc.get_threshold(), gc.get_freeze_count()]))"
    )
    env = {"TF_CPP_MIN_LOG_LEVEL": "3"}
    result = run_apptainer(["apptainer", "exec", SIF, "python", "-c", code], env)
    assert result.status == 0, result.stdout + result.stderr
    start, after, frozen = result.json()
    assert start == [50000, 10, 10] and after == [700, 10, 10], result.stdout
    assert frozen > 100_000, result.stdout  # TensorFlow's modules, functions and classes
    env["TFSLURM_IMPORT_GC"] = "0"
    off = run_apptainer(["apptainer", "exec", SIF, "python", "-c", code], env)
    assert off.status == 0, off.stdout + off.stderr
    assert off.json() == [[700, 10, 10], [700, 10, 10], 0], off.stdout
