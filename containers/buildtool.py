#!/usr/bin/env python3
"""Offline-capable build steps for the tf-slurm image and SIF.

Called by containers/containers.mk; stdlib only, so any Python >= 3.10 runs it.

    python3 containers/buildtool.py archive-uri        # the host's Debian archive address
    python3 containers/buildtool.py base-image --suite bookworm
    python3 containers/buildtool.py lock               # containers/requirements.in -> .lock
    python3 containers/buildtool.py wheelhouse         # fill containers/wheelhouse/ from the lock
    python3 containers/buildtool.py image              # docker build (offline base if no registry)
    python3 containers/buildtool.py sif                # docker save + apptainer build
    python3 containers/buildtool.py ch-image           # docker export + ch/environment: ch-run's
    python3 containers/buildtool.py oci-bundle         # config.json + rootfs/: srun --container's
    python3 containers/buildtool.py docker-archive     # docker save: podman load's, enroot's

lock, wheelhouse, image and sif take --variant cpu (the default: tensorflow-cpu, tf-slurm:latest,
tf-slurm.sif) or gpu (tensorflow[and-cuda] with NVIDIA's CUDA wheels, tf-slurm:gpu,
tf-slurm-gpu.sif): the same Dockerfile and .def, each variant with its own lock and wheelhouse.

Every stage prints one progress line with the elapsed time, e.g.
``[tf-slurm 12.3s] image: docker build (base tfslurm/debian-base:bookworm)``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import http.server
import inspect
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUILD = HERE / "build"


@dataclass(frozen=True)
class Variant:
    """One build of the image: what it installs and what it is called."""

    name: str
    lock_in: Path  # what the image installs (`make lock` resolves it)
    lock: Path  # the complete hashed set
    wheelhouse: Path  # the docker build context: the lock's wheels, this repo's wheel
    tag: str
    sif: str


VARIANTS = {
    "cpu": Variant(
        "cpu",
        HERE / "requirements.in",
        HERE / "requirements.lock",
        HERE / "wheelhouse",
        "tf-slurm:latest",
        "tf-slurm.sif",
    ),
    "gpu": Variant(
        "gpu",
        HERE / "requirements-gpu.in",
        HERE / "requirements-gpu.lock",
        HERE / "wheelhouse-gpu",
        "tf-slurm:gpu",
        "tf-slurm-gpu.sif",
    ),
}
CPU = VARIANTS["cpu"]
# Pins that every other variant keeps as in the CPU lock (constraints of `make lock`), so
# that both images carry the same numpy, protobuf, tf-keras...: only TensorFlow's build and
# the CUDA libraries differ. The CPU lock's TensorFlow distribution is not a constraint.
CPU_ONLY = {"tensorflow-cpu"}

# The image's interpreter: Debian bookworm's python3 (and python:3.11-slim) is CPython 3.11.
PY_VERSION = "3.11"
PY_ABI = "cp311"
# manylinux tags a glibc 2.36 (bookworm) x86-64 system accepts, newest first.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)] + [
    "manylinux2014_x86_64",
    "linux_x86_64",
]

DEFAULT_BASE = "python:3.11-slim-bookworm"
PYPI = "https://pypi.org/simple"
OFFLINE_BASE = "tfslurm/debian-base:{suite}"
IMAGE_LABEL = "org.opencontainers.image.title=tf-slurm"  # set in the Dockerfile
# The image's inputs (see inputs_key), recorded on it by `docker build --label`: an image whose
# label matches is up to date, and neither the wheelhouse nor the build runs again.
INPUTS_LABEL = "io.github.tf-slurm.inputs"
# Where the build reads the wheelhouse's pypi/ over HTTP (the Dockerfile's WHEELS_URL default):
# a fixed port, because the URL is part of the build step's cache key.
WHEELS_PORT = 37911
BUILDER_IMAGE = "tfslurm/apptainer-builder:latest"
BUILDER_BASE = "debian:trixie-slim"
# How the SIF's squashfs is compressed (apptainer build --mksquashfs-args). Apptainer mounts a
# SIF with squashfuse in user space, per process, so every task decompresses what it reads:
# `import tensorflow` reads ~410 MB, 250 MB of it libtensorflow_cc.so.2. lz4 decompresses
# several times faster than gzip (Apptainer's default); -Xhc packs it tighter at no cost to
# reading; 128 KiB blocks match FUSE's 128 KiB reads. Measured in containers/README.md.
SIF_MKSQUASHFS_ARGS = "-comp lz4 -Xhc -b 128K"

# What Apptainer needs from Docker to run without --privileged (see containers/README.md).
APPTAINER_DOCKER_OPTS = [
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--security-opt",
    "systempaths=unconfined",
]

_T0 = time.monotonic()


class BuildError(Exception):
    """A build step failed; the message says which and why."""


def progress(stage: str, message: str) -> None:
    print(f"[tf-slurm {time.monotonic() - _T0:6.1f}s] {stage}: {message}", flush=True)


def _echo(cmd: list[str]) -> None:
    # The 22 --platform flags (see PLATFORMS) shown as one.
    text = re.sub(r"(--platform \S+ )+--platform \S+", "--platform <PLATFORMS>", shlex.join(cmd))
    print("+ " + text, flush=True)


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a command, echoing it; raise BuildError on failure."""
    _echo(cmd)
    proc = subprocess.run(cmd, **kwargs)
    if proc.returncode != 0:
        raise BuildError(f"command failed with exit status {proc.returncode}: {shlex.join(cmd)}")
    return proc


# A new Dockerfile step in `docker build` output: legacy builder, or BuildKit's plain output.
_BUILD_STEP = re.compile(r"^(Step \d+/\d+ : |#\d+ \[[^]]+\] )")


def run_build(cmd: list[str], stage: str) -> None:
    """Run `docker build`, turning each Dockerfile step into a progress line with elapsed time."""
    _echo(cmd)
    env = dict(os.environ, BUILDKIT_PROGRESS="plain")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    out_of_space = False
    for line in proc.stdout:
        line = line.rstrip()
        out_of_space = out_of_space or "no space left on device" in line
        if _BUILD_STEP.match(line):
            progress(stage, line if len(line) <= 110 else line[:107] + "...")
        else:
            print(line, flush=True)
    if proc.wait() != 0:
        if out_of_space:
            raise BuildError(_no_space_message())
        raise BuildError(f"docker build failed with exit status {proc.returncode}")


def _no_space_message() -> str:
    """Where Docker ran out of disk and what frees it: the build's own output only says a
    write failed, deep in a layer."""
    proc = subprocess.run(
        ["docker", "info", "--format", "{{.DockerRootDir}}"], capture_output=True, text=True
    )
    root = proc.stdout.strip() or "/var/lib/docker"
    try:
        free = f"{shutil.disk_usage(root).free / 1e9:.1f} GB free"
    except OSError:
        free = "free space unknown"
    return (
        f"docker build ran out of disk space in Docker's data root {root} ({free}); the GPU "
        "image needs about 7 GB there (its venv layer). Free space and run it again: `docker "
        "image prune`, `docker builder prune`, or `docker system prune` (removes every unused "
        "image and container)"
    )


def quiet(cmd: list[str], timeout: float | None = None) -> bool:
    """True when the command succeeds; its output is discarded."""
    try:
        return (
            subprocess.run(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout
            ).returncode
            == 0
        )
    except subprocess.TimeoutExpired:
        return False


# --------------------------------------------------------------------------- archive address


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    stanzas, current, key = [], {}, None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
        elif line[0] in " \t" and key:
            current[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def _is_main_suite(suite: str) -> bool:
    # bookworm / trixie / stable, not bookworm-security or bookworm-updates.
    return "-" not in suite and "/" not in suite


def archive_uri(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian archive address the host's own apt uses for its main suite.

    TFSLURM_DEBIAN_ARCHIVE overrides it (e.g. on a host whose apt points at Ubuntu).
    """
    if os.environ.get("TFSLURM_DEBIAN_ARCHIVE"):
        return os.environ["TFSLURM_DEBIAN_ARCHIVE"].rstrip("/")
    sources = sorted((apt_dir / "sources.list.d").glob("*.sources"))
    for path in sources:
        for stanza in _deb822_stanzas(path.read_text()):
            if stanza.get("enabled", "yes").lower() == "no":
                continue
            if "deb" not in stanza.get("types", "").split():
                continue
            suites = stanza.get("suites", "").split()
            uris = stanza.get("uris", "").split()
            if uris and any(_is_main_suite(s) for s in suites):
                return uris[0].rstrip("/")
    lists = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            line = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0])
            fields = line.split()
            if len(fields) >= 3 and fields[0] == "deb" and _is_main_suite(fields[2]):
                return fields[1].rstrip("/")
    raise BuildError(f"no Debian archive found in {apt_dir}/sources.list(.d): cannot debootstrap")


# --------------------------------------------------------------------------- base image


def ensure_apt_packages(*packages: str, command: str) -> None:
    """apt-get install the packages unless `command` is already on PATH."""
    if not shutil.which(command):
        apt_install(*packages)


def apt_install(*packages: str) -> None:
    if os.geteuid() != 0:
        raise BuildError(f"{' '.join(packages)} missing: install them (needs root)")
    progress("prerequisites", f"apt-get install {' '.join(packages)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env=env)


def prerequisites() -> None:
    """The host packages the builds install when they first need them (debootstrap for the
    base images, python3-venv for the venv), in one apt-get run: make demo then runs those
    builds side by side, and two apt-gets at once would fight over dpkg's lock."""
    missing = [pkg for pkg, present in PREREQUISITES.items() if not present()]
    if missing:
        apt_install(*missing)
    else:
        progress("prerequisites", "debootstrap and python3-venv present")


PREREQUISITES = {
    "debootstrap": lambda: shutil.which("debootstrap") is not None,
    "python3-venv": lambda: quiet(["python3", "-c", "import ensurepip, venv"]),
}


def base_image(suite: str, tag: str | None = None, force: bool = False) -> str:
    """Build a minimal Debian image for `suite` with debootstrap + docker import."""
    tag = tag or OFFLINE_BASE.format(suite=suite)
    if not force and quiet(["docker", "image", "inspect", tag]):
        progress("base-image", f"{tag} already present (FORCE=1 to rebuild)")
        return tag
    ensure_apt_packages("debootstrap", command="debootstrap")
    uri = archive_uri()
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"rootfs-{suite}-", dir=BUILD) as rootfs:
        progress("base-image", f"debootstrap --variant=minbase {suite} from {uri}")
        run(["debootstrap", "--variant=minbase", suite, rootfs, uri], stdout=subprocess.DEVNULL)
        # Nothing from the build host's package cache belongs in the image.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in Path(rootfs, sub).glob("*"):
                if entry.is_file():
                    entry.unlink()
        # The image's / as a system's: mkdtemp made it 0700, which Docker hides but Podman
        # applies (its user could not reach /bin/sh).
        os.chmod(rootfs, 0o755)
        progress("base-image", f"docker import -> {tag}")
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        run(
            [
                "docker",
                "import",
                "--change",
                'CMD ["/bin/bash"]',
                "--change",
                "ENV LANG=C.UTF-8",
                "--message",
                f"debootstrap --variant=minbase {suite} {uri}",
                "-",
                tag,
            ],
            stdin=tar.stdout,
            stdout=subprocess.DEVNULL,
        )
        tar.stdout.close()
        if tar.wait() != 0:
            raise BuildError("tar of the debootstrapped tree failed")
    progress("base-image", f"{tag} ready ({image_size(tag)})")
    return tag


def pick_base(requested: str, suite: str) -> str:
    """The requested base if it is present or can be pulled, else the debootstrapped one."""
    if quiet(["docker", "image", "inspect", requested]):
        progress("base", f"using local {requested}")
        return requested
    progress("base", f"trying docker pull {requested}")
    if quiet(["docker", "pull", requested], timeout=120):
        return requested
    progress("base", f"{requested} cannot be pulled: using a debootstrapped {suite} base")
    return base_image(suite)


def image_size(tag: str) -> str:
    out = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", tag],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{int(out) / 1e6:.0f} MB" if out.isdigit() else "size unknown"


# --------------------------------------------------------------------------- lock + wheelhouse


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", *args]


def _pypi_env() -> dict[str, str]:
    """Talk to PyPI only: no host-local indexes, find-links or constraints from pip config."""
    keep = {"PIP_CERT", "PIP_CLIENT_CERT", "PIP_PROXY", "PIP_RETRIES", "PIP_DEFAULT_TIMEOUT"}
    keep |= {"PIP_CACHE_DIR", "PIP_NO_CACHE_DIR"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in keep}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _target_args() -> list[str]:
    args = ["--python-version", PY_VERSION, "--implementation", "cp", "--abi", PY_ABI]
    args += ["--abi", "abi3", "--abi", "none"]
    for plat in PLATFORMS:
        args += ["--platform", plat]
    return args


def _parse_in(path: Path) -> tuple[list[str], list[str]]:
    """Requirements to resolve with dependencies, and those to pin without (`# no-deps`)."""
    with_deps, no_deps = [], []
    for raw in path.read_text().splitlines():
        req, _, comment = raw.partition("#")
        req = req.strip()
        if req:
            (no_deps if "no-deps" in comment else with_deps).append(req)
    return with_deps, no_deps


def _resolve(
    reqs: list[str], deps: bool, index_url: str, workdir: Path, constraints: Path | None = None
) -> list[dict]:
    report = workdir / f"report-{'deps' if deps else 'nodeps'}.json"
    cmd = _pip(
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        str(report),
        "--target",
        str(workdir / "target"),
        "--index-url",
        index_url,
        *_target_args(),
    )
    cmd += ["--only-binary=:all:"] if deps else ["--no-deps"]
    cmd += ["--constraint", str(constraints)] if constraints else []
    run(cmd + reqs, env=_pypi_env())
    return json.loads(report.read_text())["install"]


def lock(index_url: str, variant: Variant = CPU) -> None:
    """Resolve the variant's requirements for the image's platform; write its hashed lock."""
    with_deps, no_deps = _parse_in(variant.lock_in)
    with tempfile.TemporaryDirectory() as tmp:
        constraints = None
        if variant is not CPU:
            constraints = Path(tmp, "cpu-pins.txt")
            pins = [f"{n}=={v}\n" for n, v, _ in _lock_entries(CPU.lock) if n not in CPU_ONLY]
            constraints.write_text("".join(pins))
            progress("lock", f"keeping the {len(pins)} pins of {CPU.lock.name} (constraints)")
        progress("lock", f"resolving {len(with_deps)} requirements (with dependencies)")
        items = _resolve(with_deps, True, index_url, Path(tmp), constraints)
        progress("lock", f"pinning {len(no_deps)} requirements without dependencies")
        items += _resolve(no_deps, False, index_url, Path(tmp))
    lines = _lock_lines(items)
    make = "make lock" + ("" if variant is CPU else f" VARIANT={variant.name}")
    header = (
        f"# Generated by `{make}` (containers/buildtool.py lock) from {variant.lock_in.name}.\n"
        f"# Target: CPython {PY_VERSION} manylinux x86-64 (the image's Python), from {index_url}.\n"
        "# Installed with --no-deps --require-hashes: this file is the complete set.\n"
    )
    variant.lock.write_text(header + "".join(lines[k] for k in sorted(lines)))
    progress("lock", f"wrote {variant.lock.relative_to(ROOT)} ({len(lines)} packages)")


def _lock_lines(items: list[dict]) -> dict[str, str]:
    """A lock file's entry (name==version, its sha256, its file) per resolved package."""
    lines = {}
    for item in items:
        meta = item["metadata"]
        info = item["download_info"]
        hashes = info.get("archive_info", {}).get("hashes") or {}
        sha = hashes.get("sha256") or info["archive_info"]["hash"].partition("=")[2]
        filename = info["url"].rsplit("/", 1)[-1].split("#")[0]
        name = re.sub(r"[-_.]+", "-", meta["name"]).lower()
        lines[name] = f"{name}=={meta['version']} \\\n    --hash=sha256:{sha}\n    # {filename}\n"
    return lines


VENV_IN = HERE / "requirements-venv.in"
VENV_LOCK = HERE / "requirements-venv.lock"


def lock_venv(index_url: str) -> None:
    """Resolve what `make venv` adds to the image's set (test, rollout and benchmark tools),
    keeping every pin of the CPU lock; write the packages the CPU lock does not have."""
    with_deps, no_deps = _parse_in(VENV_IN)
    pinned = {n: v for n, v, _ in _lock_entries(CPU.lock)}
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp, "cpu-pins.txt")
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in pinned.items()))
        progress("lock", f"resolving {VENV_IN.name} with the {len(pinned)} pins of {CPU.lock.name}")
        items = _resolve(with_deps, True, index_url, Path(tmp), constraints)
        items += _resolve(no_deps, False, index_url, Path(tmp)) if no_deps else []
    lines = {k: v for k, v in _lock_lines(items).items() if k not in pinned}
    header = (
        f"# Generated by `make lock-venv` (containers/buildtool.py) from {VENV_IN.name}.\n"
        f"# Target: CPython {PY_VERSION} manylinux x86-64, from {index_url}. `make venv` installs\n"
        f"# {CPU.lock.name} and this file with --no-deps --require-hashes: together, the complete\n"
        "# set.\n"
    )
    VENV_LOCK.write_text(header + "".join(lines[k] for k in sorted(lines)))
    progress("lock", f"wrote {VENV_LOCK.relative_to(ROOT)} ({len(lines)} packages)")


def _lock_entries(lock_file: Path = CPU.lock) -> list[tuple[str, str, str]]:
    """(name, version, sha256) for every entry of a lock file."""
    text = lock_file.read_text()
    found = re.findall(r"^([A-Za-z0-9._-]+)==(\S+)\s*\\\s*--hash=sha256:([0-9a-f]{64})", text, re.M)
    if not found:
        raise BuildError(f"{lock_file} has no pinned entries; run `make lock`")
    return found


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheelhouse(index_url: str, variant: Variant = CPU) -> None:
    """Download the locked artifacts (hash-checked), build local wheels, write install.lock.

    Layout (wheelhouse/ for the CPU variant, wheelhouse-gpu/ for the GPU one): pypi/ (exactly
    what the lock names), local/ (wheels built here: this repo's package and any sdist-only
    dependency), install.lock (the lock minus pip and sdists, which the Dockerfile installs
    with --require-hashes), pip.whl. It is the whole docker build context.
    """
    house = variant.wheelhouse
    pypi, local = house / "pypi", house / "local"
    pypi.mkdir(parents=True, exist_ok=True)
    entries = _lock_entries(variant.lock)
    wanted = {sha for _, _, sha in entries}
    for stale in pypi.iterdir():
        if _sha256(stale) not in wanted:
            progress("wheelhouse", f"removing {stale.name} (not in the lock)")
            stale.unlink()
    have = {_sha256(p) for p in pypi.iterdir()}
    if wanted - have:
        progress("wheelhouse", f"pip download {len(wanted - have)} of {len(wanted)} locked files")
        run(
            _pip(
                "download",
                "--no-deps",
                "--require-hashes",
                "--quiet",
                "--index-url",
                index_url,
                *_target_args(),
                "-r",
                str(variant.lock),
                "-d",
                str(pypi),
            ),
            env=_pypi_env(),
        )
    else:
        progress("wheelhouse", f"all {len(wanted)} locked files present")

    sdists = sorted(p for p in pypi.iterdir() if p.name.endswith((".tar.gz", ".zip")))
    # "<name>-<version>-" of the wheel each sdist builds into, e.g. "python_hostlist-2.3.0-".
    prefixes = {p: re.sub(r"\.(tar\.gz|zip)$", "", p.name) + "-" for p in sdists}
    local.mkdir(exist_ok=True)
    for wheel in local.glob("*.whl"):  # this repo's (rebuilt below) and any stale one
        if not wheel.name.startswith(tuple(prefixes.values())):
            wheel.unlink()
    # The sdists were hash-checked by the download above; building them happens here on the
    # host so that the image needs no compiler and no build backend. Done once per sdist.
    todo = [p for p, prefix in prefixes.items() if not list(local.glob(prefix + "*.whl"))]
    progress("wheelhouse", f"building wheels: this repo + {len(todo)} sdist(s)")
    # The repo is built from a copy, so that setuptools leaves no build/ or *.egg-info in the
    # working tree, with SOURCE_DATE_EPOCH set so that unchanged sources give a byte-identical
    # wheel and docker's layer cache (and the SIF) stay valid.
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="src-", dir=BUILD) as src:
        epoch = _copy_project(Path(src))
        env = dict(_pypi_env(), SOURCE_DATE_EPOCH=str(epoch))
        build = _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(local))
        run(build + [str(p) for p in todo] + [src], env=env)

    sdist_names = {_dist_name(p.name) for p in sdists}
    keep = [
        f"{name}=={version} --hash=sha256:{sha}\n"
        for name, version, sha in entries
        if name != "pip" and name not in sdist_names
    ]
    (house / "install.lock").write_text("".join(keep))
    pips = [p.name for p in pypi.glob("pip-*.whl")]
    if len(pips) != 1:
        raise BuildError(f"the lock must pin exactly one pip wheel, found {pips}")
    (house / "pip.whl").unlink(missing_ok=True)
    (house / "pip.whl").hardlink_to(pypi / pips[0])
    # The build reads pypi/ over HTTP (serve_wheels), so it is not sent as build context.
    (house / ".dockerignore").write_text("pypi/\n")
    size = sum(p.stat().st_size for p in house.rglob("*") if p.is_file()) / 1e6
    built = len(list(local.iterdir()))
    progress("wheelhouse", f"ready: {len(keep)} locked + {built} local wheels, {size:.0f} MB")


def _copy_project(dest: Path) -> int:
    """Copy what this repo's wheel is built from; return the newest mtime among it."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "tfslurm_entry", dest / "tfslurm_entry", ignore=ignore)
    return max(int(p.stat().st_mtime) for p in dest.rglob("*") if p.is_file())


def _dist_name(filename: str) -> str:
    stem = re.sub(r"\.(tar\.gz|zip|whl)$", "", filename)
    name = re.match(r"(.+?)-\d", stem).group(1)
    return re.sub(r"[-_.]+", "-", name).lower()


# --------------------------------------------------------------------------- image + sif


def _project_files() -> list[Path]:
    """What this repo's wheel is built from (see _copy_project), in a stable order."""
    files = [ROOT / name for name in ("pyproject.toml", "README.md", "LICENSE")]
    files += (ROOT / "tfslurm_entry").rglob("*")
    return sorted(
        p for p in files if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


def inputs_key(variant: Variant, base_id: str) -> str:
    """A digest of everything the image is built from: the Dockerfile, the variant's lock,
    this repo's package sources and the base image. By content, not file times, so a fresh
    `git clone` of the same commit finds its image up to date."""
    digest = hashlib.sha256(f"{variant.name}\0{base_id}\0".encode())
    for path in [HERE / "Dockerfile", variant.lock, *_project_files()]:
        digest.update(f"{path.relative_to(ROOT)}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def image_label(tag: str, label: str) -> str | None:
    """A label of an image; None when the image does not exist."""
    proc = subprocess.run(
        ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', tag],
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


@contextlib.contextmanager
def serve_wheels(directory: Path) -> Iterator[str]:
    """Serve a wheelhouse's pypi/ on this host's loopback for the duration of a build; yields
    the URL a build with --network host reads it at."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", WHEELS_PORT), handler)
    except OSError:  # taken (another build): any port, at the cost of the layer cache
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        progress(
            "image",
            f"port {WHEELS_PORT} is taken: wheels served on another port, so the "
            "venv layer is rebuilt",
        )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:
        """Silent: pip's 3 GB of requests are not build output."""


def build_image(
    context: Path, tag: str, base: str, variant: Variant = CPU, labels: dict[str, str] | None = None
) -> None:
    """docker build the Dockerfile on a wheelhouse context, its pypi/ served over loopback."""
    with serve_wheels(variant.wheelhouse / "pypi") as url:
        cmd = ["docker", "build", "--network", "host", "--build-arg", f"WHEELS_URL={url}"]
        cmd += ["--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"VARIANT={variant.name}"]
        for key, value in (labels or {}).items():
            cmd += ["--label", f"{key}={value}"]
        cmd += ["--tag", tag, "--file", str(HERE / "Dockerfile"), str(context)]
        run_build(cmd, "image")


def image(
    tag: str,
    base: str,
    suite: str,
    variant: Variant = CPU,
    index_url: str = PYPI,
    force: bool = False,
) -> None:
    """The variant's image, built only when its inputs (inputs_key) changed."""
    chosen = pick_base(base, suite)
    key = inputs_key(variant, image_id(chosen) or "")
    if not force and image_label(tag, INPUTS_LABEL) == key:
        progress(
            "image",
            f"{tag} up to date: Dockerfile, {variant.lock.name}, the package and "
            f"the base unchanged (inputs {key[:12]}; FORCE=1 rebuilds)",
        )
        return
    wheelhouse(index_url, variant)
    progress("image", f"docker build -> {tag} ({variant.name}, base {chosen}, inputs {key[:12]})")
    # The context is the variant's wheelhouse less its wheels (read over HTTP): nothing else
    # of the repository can reach a layer.
    build_image(variant.wheelhouse, tag, chosen, variant, {INPUTS_LABEL: key})
    # Earlier builds of the image, now untagged, would pile up 1-6 GB each.
    quiet(["docker", "image", "prune", "--force", "--filter", f"label={IMAGE_LABEL}"])
    progress("image", f"{tag} ready ({image_size(tag)})")


def builder_image(tag: str, base: str, suite: str = "trixie") -> None:
    """The Debian trixie + Apptainer (from unstable) image that builds and runs SIFs; another
    suite's for the dev cluster's nodes of another Slurm release (sid)."""
    chosen = pick_base(base, suite)
    progress("builder", f"docker build -> {tag} (base {chosen})")
    run_build(
        [
            "docker",
            "build",
            "--build-arg",
            f"BASE_IMAGE={chosen}",
            "--build-arg",
            f"DEBIAN_ARCHIVE={archive_uri()}",
            "--tag",
            tag,
            "--file",
            str(HERE / "apptainer" / "Dockerfile"),
            str(HERE / "apptainer"),
        ],
        "builder",
    )
    progress("builder", f"{tag} ready ({image_size(tag)})")


def image_id(tag: str) -> str | None:
    """The image's content-addressed id, None if it does not exist."""
    proc = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True, text=True
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def _sif_record(output: Path) -> Path:
    """What the SIF was built from (gitignored build dir): its inputs' key and the SIF's own
    size and time, so a SIF replaced by hand is not taken for the one built."""
    return BUILD / f"{output.name}.inputs"


def _sif_stamp(output: Path) -> str:
    stat = output.stat()
    return f"{stat.st_size} {stat.st_mtime_ns}"


def sif_up_to_date(output: Path, record: Path, key: str) -> bool:
    """The SIF exists, is the file the record was written for, and was built from `key`."""
    if not (output.is_file() and record.is_file()):
        return False
    return record.read_text().split("\n")[:2] == [key, _sif_stamp(output)]


def sif(
    tag: str,
    output: Path,
    builder: str,
    builder_base: str,
    force: bool = False,
    mksquashfs_args: str = SIF_MKSQUASHFS_ARGS,
    variant: Variant = CPU,
) -> None:
    built_from = image_id(tag)
    if built_from is None:
        raise BuildError(f"image {tag} does not exist: run `make image` first")
    # Rebuilt when the image (by its id), the .def or the squashfs options change.
    digest = hashlib.sha256(f"{built_from}\0{mksquashfs_args}\0{variant.name}\0".encode())
    digest.update((HERE / "tf-slurm.def").read_bytes())
    key = digest.hexdigest()
    record = _sif_record(output)
    if not force and sif_up_to_date(output, record, key):
        progress(
            "sif",
            f"{output.name} up to date: {tag}, the .def and the squashfs options "
            f"unchanged (inputs {key[:12]}; FORCE=1 rebuilds)",
        )
        return
    BUILD.mkdir(parents=True, exist_ok=True)
    archive = BUILD / f"{output.stem}.tar"
    progress("sif", f"docker save {tag} -> {archive.relative_to(ROOT)}")
    run(["docker", "save", "--output", str(archive), tag])
    # Built beside the target and renamed into place: a cluster copying the SIF never reads a
    # half-written one, and a failed build leaves the previous SIF as it was.
    partial = output.with_suffix(".partial.sif")
    build = ["apptainer", "build", "--force", "--mksquashfs-args", mksquashfs_args]
    # tf-slurm.def's {{ ARCHIVE }}, {{ VARIANT }} and {{ UNPACKED_MB }} (Apptainer build
    # arguments): the image's size unpacked is what tfslurm-run needs free for its copy.
    size = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", tag],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    build += ["--build-arg", f"ARCHIVE={archive.name}", "--build-arg", f"VARIANT={variant.name}"]
    build += ["--build-arg", f"UNPACKED_MB={int(size) // 1_000_000}"]
    if shutil.which("apptainer"):
        progress("sif", f"apptainer build {output.name} (host apptainer; {mksquashfs_args})")
        run([*build, str(partial), "containers/tf-slurm.def"], cwd=ROOT)
    else:
        if not quiet(["docker", "image", "inspect", builder]):
            builder_image(builder, builder_base)
        progress("sif", f"apptainer build {output.name} inside {builder} ({mksquashfs_args})")
        run(
            [
                "docker",
                "run",
                "--rm",
                *APPTAINER_DOCKER_OPTS,
                "--volume",
                f"{ROOT}:/src",
                "--workdir",
                "/src",
                "--env",
                "APPTAINER_TMPDIR=/src/containers/build",
                builder,
                *build,
                str(partial.relative_to(ROOT)),
                "containers/tf-slurm.def",
            ]
        )
    os.replace(partial, output)
    BUILD.mkdir(parents=True, exist_ok=True)
    record.write_text(f"{key}\n{_sif_stamp(output)}\n")
    archive.unlink()
    progress("sif", f"{output.name} ready ({output.stat().st_size / 1e6:.0f} MB)")


# Where ch-run may bind a site's shared file systems: its binds need a directory in the image
# (read-only, it makes none), and the image has none of these.
CH_MOUNT_POINTS = ("shared", "data", "scratch")


def _export_for_ch(
    container: str,
    output: Path,
    environment: str,
    root: str = "",
    extra: dict[str, bytes] | None = None,
) -> None:
    """docker export's tar of the container under `root` ("" or "rootfs/"), less its device
    nodes (Docker's /dev/null and kin, which a user cannot make when unpacking it; ch-run and the
    OCI bundle bind the node's /dev), plus ch/environment, the mount points and `extra` files
    (an OCI bundle's config.json)."""
    _echo(["docker", "export", container])
    proc = subprocess.Popen(["docker", "export", container], stdout=subprocess.PIPE)
    with tarfile.open(fileobj=proc.stdout, mode="r|") as source, tarfile.open(output, "w") as tar:
        if root:
            _add_file(tar, root.rstrip("/"), None)
        for member in source:
            if member.isdev():
                continue
            member.name = root + member.name
            if member.islnk():  # a hard link names another member: under the same root
                member.linkname = root + member.linkname
            tar.addfile(member, source.extractfile(member) if member.isfile() else None)
        for point in CH_MOUNT_POINTS:
            _add_file(tar, root + point, None)
        _add_file(tar, f"{root}ch/environment", environment.encode())
        for name, data in (extra or {}).items():
            _add_file(tar, name, data)
    if proc.wait() != 0:
        raise BuildError(f"docker export {container} failed with exit status {proc.returncode}")


def _add_file(tar: tarfile.TarFile, name: str, data: bytes | None) -> None:
    """A file of `data` (0644) or, for None, a directory (0755) into `tar`."""
    info = tarfile.TarInfo(name)
    info.mtime = int(time.time())
    if data is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    else:
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))


def ch_image(tag: str, output: Path, force: bool = False) -> None:
    """The image as Charliecloud's ch-run reads it: a tar of its root file system (docker
    export), which the user unpacks into a directory on shared storage, with the image's ENV in
    ch/environment: ch-run applies no ENV of its own and reads that file with --set-env (the
    venv's PATH, TFSLURM_*). A directory image, not SquashFS: ch-run's FUSE parent unmounts a
    SquashFS image on Slurm's SIGTERM, under the running tasks."""
    recipe = inspect.getsource(ch_image)
    _export_image("ch-image", tag, output, force, recipe, root="", config=None)
    progress(
        "ch-image",
        f"unpack it where every node reads it (mkdir tf-slurm.ch && tar -xf {output.name} -C "
        "tf-slurm.ch); docs/runtimes.md has the srun ch-run line",
    )


# What every task needs from the node inside Slurm's OCI container, bound as Apptainer and
# ch-run bind them: its devices (GPUs), /sys, a node-local /tmp, and its names for the other
# nodes (TF_CONFIG names hosts; the image's /etc/hosts knows none of them).
OCI_NODE_BINDS = ("/dev", "/sys", "/tmp", "/etc/hosts", "/etc/resolv.conf")


def oci_config(env: list[str], binds: list[str]) -> dict:
    """config.json of the OCI bundle for Slurm's `srun --container` with rootless crun
    (Slurm's documented oci.conf): Slurm replaces process.args with the task's command and
    merges process.env over the step's environment (slurmstepd/container.c), so the image's
    ENV wins: its PATH finds tfslurm-entry in the venv. The node's network (no network
    namespace: TensorFlow's ports are the node's), its hostname (no uts namespace), a pid
    namespace of the task's own (the entrypoint is its pid 1 and handles Slurm's signals). No
    uidMappings: crun maps the invoking user to root in a user namespace of its own, so one
    bundle serves every user (runc wants the mapping written in: docs/runtimes.md)."""
    mounts = [{"destination": "/proc", "type": "proc", "source": "proc"}]
    for path in [*OCI_NODE_BINDS, *binds]:
        options = ["rbind", "nosuid"] + (["ro"] if path.startswith("/etc/") else [])
        mounts.append({"destination": path, "type": "bind", "source": path, "options": options})
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": ["tfslurm-entry"],
            "env": env,
            "cwd": "/",
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "mounts": mounts,
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]},
    }


def oci_bundle(tag: str, output: Path, binds: list[str], force: bool = False) -> None:
    """The image as Slurm's OCI support runs it (`srun --container=BUNDLE`): a tar of an OCI
    runtime bundle, config.json (oci_config) and rootfs/ (the same files as ch-image's, so
    rootfs/ is also a Charliecloud image, what Slurm's ch-run oci.conf runs). `binds`: the
    site's shared file systems, where the user's programs and checkpoints are."""
    for path in binds:
        if not path.startswith("/") or path in OCI_NODE_BINDS:
            raise BuildError(f"OCI_BINDS: {path!r} is not an absolute path the bundle lacks")
    recipe = inspect.getsource(oci_bundle) + inspect.getsource(oci_config) + repr(binds)
    _export_image("oci-bundle", tag, output, force, recipe, root="rootfs/", config=binds)
    progress(
        "oci-bundle",
        f"unpack it where every node reads it (mkdir tf-slurm.oci && tar -xf {output.name} -C "
        "tf-slurm.oci); docs/runtimes.md has the srun --container line",
    )


def docker_archive(tag: str, output: Path, force: bool = False) -> None:
    """The image as `docker save` writes it, for `podman load -i` where Podman runs it (and,
    loaded, `enroot import podman://` or `dockerd://`): the runtimes that take a Docker image
    and reach no registry of ours; rebuilt when the image's id changed."""

    def save(partial: Path) -> None:
        progress("docker-archive", f"docker save {tag} -> {output.name}")
        run(["docker", "save", "--output", str(partial), tag])

    if _made_once("docker-archive", tag, output, "", force, save):
        progress(
            "docker-archive",
            f"podman load -i {output.name} on each node; docs/runtimes.md has the srun podman line",
        )


def _made_once(
    stage: str, tag: str, output: Path, recipe: str, force: bool, make: Callable[[Path], None]
) -> bool:
    """`make` writes `output` (into a partial file, renamed into place) unless it was made from
    this image's id by this recipe (the record beside the SIF's); whether it made it now."""
    built_from = image_id(tag)
    if built_from is None:
        raise BuildError(f"image {tag} does not exist: run `make image` first")
    key = hashlib.sha256(f"{built_from}\0{recipe}".encode()).hexdigest()
    record = _sif_record(output)
    if not force and sif_up_to_date(output, record, key):
        progress(stage, f"{output.name} up to date: {tag} unchanged (FORCE=1 rebuilds)")
        return False
    partial = output.with_suffix(".partial")
    make(partial)
    os.replace(partial, output)
    BUILD.mkdir(parents=True, exist_ok=True)
    record.write_text(f"{key}\n{_sif_stamp(output)}\n")
    progress(stage, f"{output.name} ready ({output.stat().st_size / 1e6:.0f} MB)")
    return True


def _export_image(
    stage: str,
    tag: str,
    output: Path,
    force: bool,
    recipe: str,
    root: str,
    config: list[str] | None,
) -> bool:
    """docker export of `tag` into `output` (see _export_for_ch), unless the tar there was made
    from the same image by the same recipe; with `config` (the binds), an OCI bundle."""

    def export(partial: Path) -> None:
        env = (
            json.loads(
                subprocess.run(
                    ["docker", "image", "inspect", "--format", "{{json .Config.Env}}", tag],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            or []
        )
        extra = {}
        if config is not None:
            extra["config.json"] = (json.dumps(oci_config(env, config), indent=2) + "\n").encode()
        name = f"tfslurm-export-{os.getpid()}"
        progress(stage, f"docker export {tag} -> {output.name}")
        run(["docker", "create", "--name", name, tag], stdout=subprocess.DEVNULL)
        try:
            _export_for_ch(name, partial, "".join(f"{pair}\n" for pair in env), root, extra)
        finally:
            quiet(["docker", "rm", "--force", name])

    return _made_once(stage, tag, output, recipe + inspect.getsource(_export_for_ch), force, export)


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("archive-uri", help="print the host's Debian archive address")
    sub.add_parser("prerequisites", help="apt-get install what the builds need, at once")
    p = sub.add_parser("base-image", help="debootstrap + docker import")
    p.add_argument("--suite", default="bookworm")
    p.add_argument("--tag")
    p.add_argument("--force", action="store_true")
    variant_help = "cpu (tensorflow-cpu, the default) or gpu (tensorflow[and-cuda])"
    for name in ("lock", "wheelhouse"):
        p = sub.add_parser(name)
        p.add_argument("--index-url", default=PYPI)
        p.add_argument("--variant", choices=VARIANTS, default="cpu", help=variant_help)
    p = sub.add_parser("lock-venv", help="resolve requirements-venv.in (make venv's tools)")
    p.add_argument("--index-url", default=PYPI)
    p = sub.add_parser("image", help="build the TensorFlow image (and its wheelhouse)")
    p.add_argument("--variant", choices=VARIANTS, default="cpu", help=variant_help)
    p.add_argument("--index-url", default=PYPI)
    p.add_argument("--force", action="store_true", help="build even if the inputs are unchanged")
    p.add_argument("--tag", help="default: tf-slurm:latest (cpu), tf-slurm:gpu (gpu)")
    p.add_argument("--base", default=DEFAULT_BASE)
    p.add_argument("--suite", default="bookworm", help="Debian suite of the offline base")
    p = sub.add_parser("builder", help="build the Apptainer builder image")
    p.add_argument("--tag", default=BUILDER_IMAGE)
    p.add_argument("--base", default=BUILDER_BASE)
    p = sub.add_parser("sif", help="build tf-slurm.sif from the image")
    p.add_argument("--variant", choices=VARIANTS, default="cpu", help=variant_help)
    p.add_argument("--tag", help="default: the variant's image tag")
    p.add_argument(
        "--output", type=Path, help="default: tf-slurm.sif (cpu), tf-slurm-gpu.sif (gpu)"
    )
    p.add_argument("--builder", default=BUILDER_IMAGE)
    p.add_argument("--builder-base", default=BUILDER_BASE)
    p.add_argument("--force", action="store_true")
    p.add_argument(
        "--mksquashfs-args",
        default=SIF_MKSQUASHFS_ARGS,
        help=f"squashfs options (default: {SIF_MKSQUASHFS_ARGS!r}; Apptainer's own: -comp gzip)",
    )
    p = sub.add_parser("ch-image", help="tf-slurm.ch.tar from the image: Charliecloud's form")
    p.add_argument("--tag", help="default: tf-slurm:latest")
    p.add_argument("--output", type=Path, default=ROOT / "tf-slurm.ch.tar")
    p.add_argument("--force", action="store_true")
    p = sub.add_parser("docker-archive", help="tf-slurm.docker.tar: docker save, for Podman")
    p.add_argument("--tag", help="default: tf-slurm:latest")
    p.add_argument("--output", type=Path, default=ROOT / "tf-slurm.docker.tar")
    p.add_argument("--force", action="store_true")
    p = sub.add_parser("oci-bundle", help="tf-slurm.oci.tar: an OCI bundle for srun --container")
    p.add_argument("--tag", help="default: tf-slurm:latest")
    p.add_argument("--output", type=Path, default=ROOT / "tf-slurm.oci.tar")
    p.add_argument("--bind", action="append", default=[], help="a site path to bind (repeat)")
    p.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    variant = VARIANTS[getattr(args, "variant", "cpu")]
    tag = getattr(args, "tag", None) or variant.tag
    try:
        if args.command == "archive-uri":
            print(archive_uri())
        elif args.command == "prerequisites":
            prerequisites()
        elif args.command == "base-image":
            base_image(args.suite, args.tag, args.force)
        elif args.command == "lock":
            lock(args.index_url, variant)
        elif args.command == "lock-venv":
            lock_venv(args.index_url)
        elif args.command == "wheelhouse":
            wheelhouse(args.index_url, variant)
        elif args.command == "image":
            image(tag, args.base, args.suite, variant, args.index_url, args.force)
        elif args.command == "builder":
            builder_image(args.tag, args.base)
        elif args.command == "sif":
            sif(
                tag,
                (args.output or ROOT / variant.sif).resolve(),
                args.builder,
                args.builder_base,
                args.force,
                args.mksquashfs_args,
                variant,
            )
        elif args.command == "ch-image":
            ch_image(tag, args.output.resolve(), args.force)
        elif args.command == "docker-archive":
            docker_archive(tag, args.output.resolve(), args.force)
        elif args.command == "oci-bundle":
            oci_bundle(tag, args.output.resolve(), args.bind, args.force)
    except BuildError as exc:
        progress(args.command, f"FAILED: {exc}")
        return 1
    if args.command != "archive-uri":
        progress(args.command, "done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
