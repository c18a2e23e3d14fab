"""Fixtures for the container tests: the Docker engine, the built image, the SIF.

Prerequisites (make test-container does the first two): a Docker engine that answers
(containers/ensure-docker.sh), `make image`, and `make sif` for the Apptainer tests. A missing
prerequisite is a test failure naming the make target, not a skip: these tests exist to
prove the images work.

Containers are started with testcontainers and removed by the tests themselves: its Ryuk
reaper would be pulled from Docker Hub, which these hosts cannot reach, so it is off unless
TESTCONTAINERS_RYUK_DISABLED says otherwise. The helpers take the image tag or SIF path, so
that a module for another variant of the image can reuse them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.repo import ROOT

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # before testcontainers reads it

try:
    import docker
    from docker.models.images import Image
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.docker_client import DockerClient
    from testcontainers.core.labels import create_labels
    from testcontainers.core.network import Network
    from typing_extensions import Self
except ImportError as exc:  # only these tests need them; fail them, not the whole test session
    MISSING: ImportError | None = exc
else:
    MISSING = None

IMAGE = os.environ.get("TFSLURM_IMAGE", "tf-slurm:latest")
SIF = Path(os.environ.get("TFSLURM_SIF", ROOT / "tf-slurm.sif")).resolve()
BUILDER = os.environ.get("TFSLURM_BUILDER", "tfslurm/apptainer-builder:latest")

# Seconds any Docker API call may take (the engine may be busy with a build), and a one-shot
# container may run.
DOCKER_TIMEOUT = 300
RUN_TIMEOUT = 600

# What Apptainer needs from Docker to run without --privileged (containers/README.md); the
# third part, `systempaths=unconfined`, is UnmaskedContainer's.
APPTAINER_SECURITY_OPT = ["seccomp=unconfined", "apparmor=unconfined"]
# With /dev/fuse, apptainer mounts a SIF with squashfuse instead of unpacking it to a sandbox.
FUSE_DEVICES = ["/dev/fuse:/dev/fuse"] if Path("/dev/fuse").exists() else []

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


if MISSING is None:

    class UnmaskedContainer(DockerContainer):
        """A container as `docker run --security-opt systempaths=unconfined` starts it.

        Apptainer mounts a fresh /proc, which the kernel refuses while Docker masks parts of
        the host's. The CLI turns that option into empty MaskedPaths and ReadonlyPaths in the
        host config, client-side: the engine rejects it in SecurityOpt, docker-py's
        containers.create refuses keywords it does not know, and testcontainers has none. So
        start() creates the container with docker-py's low-level API, those fields added, and
        hands it to testcontainers, which reads its logs and removes it as any other.
        with_kwargs takes host-config keywords only here (network_mode, security_opt,
        devices); no Ryuk, no wait strategy.
        """

        def start(self) -> Self:
            client = self.get_docker_client().client
            host_config = client.api.create_host_config(
                binds={host: dict(mount) for host, mount in self.volumes.items()},
                **self._kwargs,
            )
            host_config.update(MaskedPaths=[], ReadonlyPaths=[])
            created = client.api.create_container(
                self.image,
                self._command,
                environment=self.env,
                host_config=host_config,
                labels=create_labels(self.image, None),
            )
            self._container = client.containers.get(created["Id"])
            self._container.start()
            return self


def image_container(
    image: str, command: Sequence[str], env: Mapping[str, str] | None = None
) -> DockerContainer:
    """A container of `image` (not started yet), with our Docker API timeout."""
    return (
        DockerContainer(image, docker_client_kw={"timeout": DOCKER_TIMEOUT})
        .with_command(list(command))
        .with_envs(**(env or {}))
    )


def internal_network() -> Network:
    """A bridge network without a way out (not created yet; a context manager)."""
    return Network(
        docker_client_kw={"timeout": DOCKER_TIMEOUT},
        docker_network_kw={"driver": "bridge", "internal": True},
    )


def result_of(started: DockerContainer, timeout: int = RUN_TIMEOUT) -> Result:
    """Wait for a started container to exit; its status and its two streams, kept apart."""
    wrapped = started.get_wrapped_container()
    status = wrapped.wait(timeout=timeout)["StatusCode"]
    out = wrapped.logs(stdout=True, stderr=False).decode()
    err = wrapped.logs(stdout=False, stderr=True).decode()
    return Result(status, out, err)


def run_to_completion(one_shot: DockerContainer) -> Result:
    """Start, wait for and remove a one-shot container."""
    with one_shot as started:
        return result_of(started)


def run_in_image(
    tag: str, args: Sequence[str], env: Mapping[str, str] | None = None, **kwargs: Any
) -> Result:
    """Run the image `tag` to completion with no network.

    kwargs: docker-py run() keywords such as entrypoint, user or device_requests. The network
    is `network`, not `network_mode`: testcontainers puts a container without one on the
    network of the container the tests run in, if any, which would override network_mode.
    """
    one_shot = image_container(tag, args, env).with_kwargs(**{"network": "none", **kwargs})
    return run_to_completion(one_shot)


def run_in_apptainer(
    sif_path: Path,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    name: str | None = None,
    builder: str = BUILDER,
    **kwargs: Any,
) -> Result:
    """Run argv as the non-root user in the builder container, with no network.

    The SIF is bound read-only at /sif/<name> (its file name unless given); kwargs: more
    host-config keywords (UnmaskedContainer).
    """
    one_shot = (
        UnmaskedContainer(builder, docker_client_kw={"timeout": DOCKER_TIMEOUT})
        .with_command(["as-user", *argv])
        .with_envs(**(env or {}))
        .with_volume_mapping(str(sif_path), f"/sif/{name or sif_path.name}", "ro")
        .with_kwargs(
            **{
                "network_mode": "none",
                "security_opt": APPTAINER_SECURITY_OPT,
                "devices": FUSE_DEVICES or None,
                **kwargs,
            }
        )
    )
    return run_to_completion(one_shot)


def require_image(client: docker.DockerClient, tag: str, target: str) -> Image:
    """The image `tag`, or a failure that says which make target builds it."""
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {tag} is not built; run `make {target}`")


def require_sif(path: Path, target: str) -> Path:
    """The SIF at `path`, or a failure that says which make target builds it."""
    if not path.is_file():
        pytest.fail(f"{path} is not built; run `make {target}`")
    return path


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    """The engine testcontainers talks to (DOCKER_HOST, TC_HOST or the Docker context)."""
    if MISSING is not None:
        pytest.fail(f"{MISSING}: make venv (containers/requirements-venv.lock)")
    try:
        client = DockerClient(timeout=DOCKER_TIMEOUT).client
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker engine answers ({exc}); run `make docker-engine`")
    return client


@pytest.fixture(scope="session")
def image(client: docker.DockerClient) -> Image:
    return require_image(client, IMAGE, "image")


@pytest.fixture(scope="session")
def sif(image: Image) -> Path:
    return require_sif(SIF, "sif")


@pytest.fixture(scope="session")
def builder(client: docker.DockerClient) -> Image:
    return require_image(client, BUILDER, "apptainer-builder")


@pytest.fixture(scope="session")
def run_image(image: Image) -> Callable[..., Result]:
    """run_image(args, env, **kwargs) -> Result, for the TensorFlow image."""

    def run(args: Sequence[str], env: Mapping[str, str] | None = None, **kwargs: Any) -> Result:
        return run_in_image(IMAGE, args, env, **kwargs)

    return run


@pytest.fixture(scope="session")
def run_apptainer(builder: Image, sif: Path) -> Callable[..., Result]:
    """run_apptainer(argv, env) -> Result, the SIF at /sif/tf-slurm.sif whatever its name."""

    def run(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Result:
        return run_in_apptainer(sif, argv, env, name="tf-slurm.sif")

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
