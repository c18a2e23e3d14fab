"""Rebuilding the image after a change to this repo's package writes small layers only.

The final stage's copy of TensorFlow's venv (1.2 GB here, about 6 GB in the GPU image) depends on
the lock alone. When it depended on this repo's wheel, every rebuild after a code change wrote
another copy, and a CI host that kept its Docker data between runs ran out of disk.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import ROOT
from .test_buildtool import buildtool

pytestmark = pytest.mark.container

HOUSE = ROOT / "containers" / "wheelhouse"
TAG = "tf-slurm:rebuild-test"
SMALL = 300e6  # bytes: this repo's package, the smoke test's leftovers, the bytecode bundle


def _context_with_a_changed_package(dest: Path) -> None:
    """The wheelhouse (hard links where possible) with this repo's wheel changed in its bytes
    only (a zip comment), as a code change changes it."""
    shutil.copytree(HOUSE, dest, copy_function=_link_or_copy)
    (wheel,) = (dest / "local").glob("tfslurm_entry-*.whl")
    data = wheel.read_bytes()
    wheel.unlink()  # a hard link: write a new file, never into the wheelhouse's
    wheel.write_bytes(data)
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.comment = b"rebuild-test"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _layers(client, tag: str) -> list[tuple[str, int]]:
    """(created-by, size) of each layer, oldest first."""
    return [(h["CreatedBy"], h["Size"]) for h in reversed(client.api.history(tag))]


def test_a_change_to_the_package_rebuilds_only_small_layers(client, image, tmp_path):
    # `make image` fills the wheelhouse only when it builds: on a host that kept the image from
    # an earlier run, a fresh checkout has none yet (hash-checked, from the pip cache or PyPI).
    buildtool.wheelhouse(buildtool.PYPI)
    context = tmp_path / "context"
    _context_with_a_changed_package(context)
    base = buildtool.pick_base(buildtool.DEFAULT_BASE, "bookworm")
    try:
        buildtool.build_image(context, TAG, base)  # the wheels served as `make image` serves them
        old, new = _layers(client, image.tags[0]), _layers(client, TAG)
        pairs = zip(old, new, strict=False)
        same = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(old), len(new)))
        venv = max(range(len(new)), key=lambda i: new[i][1])  # the copy of /opt/venv
        assert new[venv][1] > 500e6 and venv < same, (
            f"the venv layer ({new[venv][1] / 1e6:.0f} MB) was written again"
        )
        rebuilt = sum(size for _, size in new[same:])
        assert 0 < rebuilt < SMALL, [(cmd[-60:], size) for cmd, size in new[same:]]
    finally:
        subprocess.run(["docker", "image", "rm", "--force", TAG], capture_output=True)


def test_an_unchanged_tree_builds_nothing(image, sif):
    """What `make image` and `make sif` do once built: compare the inputs and stop."""
    for command in (["image"], ["sif", "--output", str(sif)]):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "containers" / "buildtool.py"), *command],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert " up to date: " in proc.stdout, proc.stdout
        assert "docker build" not in proc.stdout and "docker save" not in proc.stdout, proc.stdout


def test_the_image_inputs_are_compared_by_content_not_file_times(tmp_path, monkeypatch):
    """A fresh `git clone` (new file times, same content) finds its image up to date; a change to
    a byte of the package does not."""
    for name in (
        "pyproject.toml",
        "README.md",
        "containers/Dockerfile",
        "containers/requirements.lock",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "tfslurm_entry", tmp_path / "tfslurm_entry")
    tree_key = buildtool.inputs_key(buildtool.CPU, "sha256:base")
    monkeypatch.setattr(buildtool, "ROOT", tmp_path)
    monkeypatch.setattr(buildtool, "HERE", tmp_path / "containers")
    variant = buildtool.Variant(
        "cpu",
        Path(),
        tmp_path / "containers" / "requirements.lock",
        Path(),
        "tf-slurm:latest",
        "tf-slurm.sif",
    )
    key = buildtool.inputs_key(variant, "sha256:base")
    assert key == tree_key  # the copy is the tree

    for path in tmp_path.rglob("*"):
        os.utime(path, (0, 0))  # as a clone gives every file a new time
    assert buildtool.inputs_key(variant, "sha256:base") == key
    assert buildtool.inputs_key(variant, "sha256:another-base") != key

    module = tmp_path / "tfslurm_entry" / "cli.py"
    module.write_text(module.read_text() + "\n")
    assert buildtool.inputs_key(variant, "sha256:base") != key
