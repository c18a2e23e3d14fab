"""Fixtures for the container tests: the Docker engine, the built image, the SIF.

Prerequisites (make test-container does the first two): a Docker engine that answers
(containers/ensure-docker.sh), `make image`, and `make sif` for the Apptainer tests. A missing
prerequisite is a test failure naming the make target, not a skip: these tests exist to
prove the images work.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import docker
except ImportError:  # only these tests need it; fail them, not the whole test session
    docker = None

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("TF_SLURM_IMAGE", "tf-slurm:latest")
SIF = Path(os.environ.get("TF_SLURM_SIF", ROOT / "tf-slurm.sif")).resolve()
BUILDER = os.environ.get("TF_SLURM_BUILDER", "tfslurm/apptainer-builder:latest")

# What Apptainer needs from Docker to run without --privileged (containers/README.md).
APPTAINER_SECURITY_OPT = ["seccomp=unconfined", "apparmor=unconfined"]

# Prints, as JSON, which loader served the image's source modules that `import tensorflow`
# and tf.keras load: the bytecode bundle's (BundleLoader) or the files' (SourceFileLoader).
LOADERS_CODE = """
import collections, json, sys, tensorflow as tf
tf.keras.layers.Dense
modules = [m for m in list(sys.modules.values()) if getattr(m, "__spec__", None)]
ours = [m for m in modules if (m.__spec__.origin or "").endswith(".py")
        and m.__spec__.origin.startswith(("/opt/venv/", "/usr/lib/python3"))]
print(json.dumps(collections.Counter(type(m.__spec__.loader).__name__ for m in ours)))
"""


@dataclass(frozen=True)
class Result:
    """How a one-shot container ended."""

    status: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        """The last stdout line as JSON (apptainer may print notices before it)."""
        lines = self.stdout.strip().splitlines()
        assert lines, f"no output; stderr: {self.stderr}"
        return json.loads(lines[-1])


@pytest.fixture(scope="session")
def client():
    if docker is None:
        pytest.fail("the Docker SDK is missing: pip install -r containers/test-requirements.txt")
    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker engine answers ({exc}); run `make docker-engine`")
    return client


@pytest.fixture(scope="session")
def image(client):
    try:
        return client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {IMAGE} is not built; run `make image`")


@pytest.fixture(scope="session")
def sif(image) -> Path:
    if not SIF.is_file():
        pytest.fail(f"{SIF} is not built; run `make sif`")
    return SIF


@pytest.fixture(scope="session")
def builder(client):
    try:
        return client.images.get(BUILDER)
    except docker.errors.ImageNotFound:
        pytest.fail(f"builder image {BUILDER} is not built; run `make apptainer-builder`")


def run_container(
    client,
    image: str,
    command,
    env=None,
    *,
    entrypoint=None,
    user=None,
    apptainer: bool = False,
    devices=(),
    binds=None,
) -> Result:
    """Run a container to completion (no network) and return its exit status and streams.

    apptainer=True adds what Apptainer needs without --privileged: seccomp and AppArmor
    unconfined plus the CLI's `--security-opt systempaths=unconfined`, which the Engine API
    spells as empty MaskedPaths and ReadonlyPaths (the SDK has no keyword for it).
    """
    api = client.api
    host_config = api.create_host_config(
        network_mode="none",
        security_opt=APPTAINER_SECURITY_OPT if apptainer else None,
        devices=list(devices) or None,
        binds=binds,
    )
    if apptainer:
        host_config["MaskedPaths"] = []
        host_config["ReadonlyPaths"] = []
    container = api.create_container(
        image,
        command,
        environment=env or {},
        entrypoint=entrypoint,
        user=user,
        host_config=host_config,
    )["Id"]
    try:
        api.start(container)
        status = api.wait(container, timeout=600)["StatusCode"]
        out = api.logs(container, stdout=True, stderr=False).decode()
        err = api.logs(container, stdout=False, stderr=True).decode()
    finally:
        api.remove_container(container, force=True)
    return Result(status, out, err)


@pytest.fixture(scope="session")
def run_image(client, image):
    """run_image(args, env, **kwargs) -> Result, for the TensorFlow image."""

    def run(args, env=None, **kwargs) -> Result:
        return run_container(client, IMAGE, list(args), env, **kwargs)

    return run


@pytest.fixture(scope="session")
def run_apptainer(client, builder, sif):
    """run_apptainer(argv, env) -> Result: argv runs as the non-root user in the builder.

    The SIF is mounted read-only at /sif/tf-slurm.sif; with /dev/fuse passed in, apptainer
    mounts it with squashfuse instead of unpacking it to a sandbox.
    """
    devices = ["/dev/fuse:/dev/fuse"] if Path("/dev/fuse").exists() else []

    def run(argv, env=None) -> Result:
        return run_container(
            client,
            BUILDER,
            ["as-user", *argv],
            env,
            apptainer=True,
            devices=devices,
            binds={str(sif): {"bind": "/sif/tf-slurm.sif", "mode": "ro"}},
        )

    return run


def slurm_env(procid: int, tasks_per_node: int = 2, nodes: int = 2, **extra) -> dict[str, str]:
    """The variables srun sets for one task of a block-distributed step on c1..cN."""
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(procid % tasks_per_node),
        "SLURM_NODEID": str(procid // tasks_per_node),
        "SLURMD_NODENAME": f"c{procid // tasks_per_node + 1}",
        "SLURM_STEP_NUM_TASKS": str(nodes * tasks_per_node),
        "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_STEP_NODELIST": f"c[1-{nodes}]",
        "SLURM_STEP_TASKS_PER_NODE": f"{tasks_per_node}(x{nodes})",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env
