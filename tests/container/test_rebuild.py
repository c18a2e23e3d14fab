"""Rebuilding the image after a change to this repo's package writes small layers only.

The final stage's copy of TensorFlow's venv (1.2 GB here, about 6 GB in the GPU image) depends on
the lock alone. When it depended on this repo's wheel, every rebuild after a code change wrote
another copy, and a CI host that kept its Docker data between runs ran out of disk.
"""

from __future__ import annotations

import os
import shutil
import subprocess
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
    context = tmp_path / "context"
    _context_with_a_changed_package(context)
    base = buildtool.pick_base(buildtool.DEFAULT_BASE, "bookworm")
    build = subprocess.run(
        ["docker", "build", "--build-arg", f"BASE_IMAGE={base}", "--tag", TAG,
         "--file", str(ROOT / "containers" / "Dockerfile"), str(context)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    try:
        assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
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
