"""Measurement 5: how big the artefacts are, and how long the dev cluster takes to come up.

Bring-up is timed for three starting points, each what `make dev-cluster` meets:
- running: the cluster is already up (`devcluster.py up` checks and returns; `make dev-cluster`
  adds the image and SIF currency checks, timed separately with --make);
- warm: images built, no cluster: a throwaway compose project PROJECT-bringup is brought up
  (containers, volumes, munge key, database, every node idle, SIF and examples installed) and
  removed again, so no one else's cluster is touched;
- cold: as warm, plus the cluster's own images (slurm-node, MariaDB) built from scratch with
  `docker build --no-cache` from the cached Debian/Apptainer base, into throwaway tags that are
  removed afterwards. The TensorFlow image and SIF are not rebuilt (containers/README.md has
  their cold build times); nor are the tags other clusters use.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.common import ROOT, BenchError, Cluster, progress, summary
from bench.jobs import SANDBOX
from bench.repo import tool

STAGE = "artefacts"
DEVCLUSTER = [sys.executable, str(ROOT / "slurm-dev-cluster" / "devcluster.py")]
IMAGES = [
    "tf-slurm:latest",
    "tfslurm/slurm-node:24.11",
    "tfslurm/mariadb:trixie",
    "tfslurm/apptainer-builder:latest",
]


def image_size(tag: str) -> int | None:
    proc = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", tag], capture_output=True, text=True
    )
    return int(proc.stdout.strip()) if proc.returncode == 0 else None


def sizes(cluster: Cluster) -> dict:
    sif = ROOT / "tf-slurm.sif"
    out = {f"image {tag}": image_size(tag) for tag in IMAGES}
    out["tf-slurm.sif"] = sif.stat().st_size if sif.is_file() else None
    box = cluster.run(f"du -sb {SANDBOX} 2>/dev/null | cut -f1")  # left by an earlier run
    if box.stdout.strip():
        out["sandbox directory (unpacked SIF)"] = int(box.stdout)
    return out


def _timed(cmd: list[str], project: str, what: str) -> float:
    start = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env={**os.environ, "TFSLURM_DEV_PROJECT": project},
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise BenchError(
            f"{what} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return took


def up(project: str) -> float:
    return _timed(
        [*DEVCLUSTER, "up", "--sif", str(ROOT / "tf-slurm.sif")],
        project,
        f"devcluster.py up ({project})",
    )


def down(project: str) -> float:
    return _timed([*DEVCLUSTER, "down"], project, f"devcluster.py down ({project})")


def cold_images() -> dict:
    """Build the node and MariaDB images with --no-cache into throwaway tags; seconds each."""
    buildtool = tool("containers/buildtool.py")  # the same base choice devcluster.py makes

    builds = {  # name: (build context in slurm-dev-cluster/, base image)
        "slurm-node": ("node", buildtool.BUILDER_IMAGE),
        "mariadb": ("mariadb", buildtool.pick_base(buildtool.BUILDER_BASE, "trixie")),
    }
    took = {}
    for name, (context, base) in builds.items():
        tag = f"tfslurm-bench-cold/{name}:latest"
        progress(STAGE, f"  docker build --no-cache {name} (base {base}) -> {tag}")
        start = time.monotonic()
        proc = subprocess.run(
            [
                "docker",
                "build",
                "--no-cache",
                "--build-arg",
                f"BASE_IMAGE={base}",
                "-t",
                tag,
                str(ROOT / "slurm-dev-cluster" / context),
            ],
            capture_output=True,
            text=True,
        )
        took[name] = time.monotonic() - start
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
        if proc.returncode != 0:
            raise BenchError(f"cold build of {name} failed:\n{proc.stderr[-2000:]}")
        progress(STAGE, f"    {took[name]:.0f} s")
    return took


def measure(cluster: Cluster, running: int, warm: int, cold: bool, make: bool) -> dict:
    progress(STAGE, "sizes of the image, the SIF and the cluster's images")
    result: dict = {"bytes": sizes(cluster), "bring_up_s": {}}
    bring = result["bring_up_s"]
    if running:
        progress(STAGE, f"devcluster.py up on the running cluster, {running} times")
        bring["cluster running (devcluster.py up)"] = summary(
            [up(cluster.project) for _ in range(running)]
        )
    if make:
        progress(STAGE, "make dev-cluster on the running cluster (image and SIF checks included)")
        bring["cluster running (make dev-cluster)"] = summary(
            [_timed(["make", "dev-cluster"], cluster.project, "make dev-cluster")]
        )
    scratch = f"{cluster.project}-bringup"
    if warm:
        ups, downs = [], []
        for i in range(warm):
            progress(STAGE, f"warm bring-up {i + 1}/{warm}: new cluster {scratch}, images built")
            try:
                ups.append(up(scratch))
            finally:
                downs.append(down(scratch))
            progress(STAGE, f"  up {ups[-1]:.1f} s, down {downs[-1]:.1f} s")
        bring["no cluster, images built (warm)"] = summary(ups)
        result["tear_down_s"] = summary(downs)
    if cold:
        progress(STAGE, "cold: the cluster's images built from scratch (throwaway tags)")
        try:
            images = cold_images()
        except BenchError as err:  # the figures above stand; the run is marked failed
            progress(STAGE, f"  FAILED: {err}")
            result["errors"] = [f"cold image build: {err}"]
            return result
        result["cold_image_build_s"] = images
        warm_median = bring.get("no cluster, images built (warm)", {}).get("median")
        if warm_median is not None:
            bring["cold: images rebuilt + warm bring-up"] = summary(
                [sum(images.values()) + warm_median]
            )
    return result
