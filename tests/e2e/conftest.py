"""The e2e session fixture: a real Slurm dev cluster (slurm-dev-cluster/), reused if running
(brought up to date first: a changed node image rebuilt and its containers recreated, this
checkout's SIF, examples and tools installed on it).

A cluster this session started is removed at the end (set TFSLURM_KEEP_CLUSTER=1 to keep it);
one that was already running is left as it was.

Cases run side by side on pytest-xdist workers (`make test-e2e`, E2E_WORKERS), each worker on a
dev cluster of its own: the first on the usual one (tfslurm-dev, or TFSLURM_DEV_PROJECT), worker
N on PROJECT-wN beside it, with its own nodes, daemons, network and /data. So a case that stops
a node, restarts the controller or fills the partitions with jobs never meets another's jobs,
and no case declares nodes: what it may share across workers is only the machine's cores
(`xdist_group`s, tests/README.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import docker
except ImportError:  # a missing prerequisite fails the layer (tests/conftest.py)
    raise pytest.UsageError(
        "the e2e tests need the Docker SDK (docker==7.2.0): run `make venv`, or "
        "pip install -r containers/requirements-venv.lock --no-deps"
    ) from None

from bench.repo import ROOT, tool

DEVCLUSTER = [sys.executable, str(ROOT / "slurm-dev-cluster" / "devcluster.py")]


def _worker_project() -> str:
    """This xdist worker's compose project: the usual one for the first worker (and without
    xdist), `-wN` after it for worker N. Put into TFSLURM_DEV_PROJECT, which devcluster.py, the
    dev-cluster inventory of playbooks/ and bench/ read, in this process and its children."""
    base = tool("slurm-dev-cluster/devcluster.py").PROJECT
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker.removeprefix("gw") or 0)
    return f"{base}-w{index}" if index else base


os.environ["TFSLURM_DEV_PROJECT"] = _worker_project()
sys.modules.pop("devcluster", None)  # read again with this worker's project
devcluster = tool("slurm-dev-cluster/devcluster.py")  # the release table and project names

SLURM = devcluster.release_named(devcluster.SLURM_VERSION)  # TFSLURM_SLURM, make SLURM=
PROJECT = devcluster.PROJECT
# How a task runs the kit on this release's nodes: the SIF, or the venv where Debian has no
# Apptainer (devcluster.Release.apptainer).
SIF = devcluster.SIF_ON_CLUSTER
LAUNCH = f"apptainer run {SIF}" if SLURM.apptainer else "tfslurm-entry"
IN_IMAGE = devcluster.in_image(SLURM)
JOB_USER = "runner"


@dataclass
class Result:
    code: int
    out: str
    err: str


class Cluster:
    """Commands on the dev cluster's containers, through the Docker SDK."""

    def __init__(self, client, project: str = PROJECT) -> None:
        self.client, self.project = client, project

    def container(self, service: str, stopped: bool = False):
        """The service's running container (or, with stopped, one in any state)."""
        found = self.client.containers.list(
            all=stopped,
            filters={
                "label": [
                    f"com.docker.compose.project={self.project}",
                    f"com.docker.compose.service={service}",
                ]
            },
        )
        if not found:
            which = "" if stopped else "running "
            raise LookupError(f"no {which}{service} container in compose project {self.project}")
        return found[0]

    def run(self, command: str, service: str = "login", user: str = JOB_USER) -> Result:
        code, (out, err) = self.container(service).exec_run(
            ["bash", "-lc", command], user=user, demux=True, workdir="/data"
        )
        return Result(code, (out or b"").decode(), (err or b"").decode())

    def until(self, condition: str, timeout: float, every: float = 0.5, **where) -> bool:
        """Whether the shell condition came true within `timeout` s, tried every `every` s in
        one exec on the container rather than one exec a try: an exec costs about 40 ms of CPU,
        which, at two a second in every waiting case, was a tenth of the e2e layer's CPU."""
        loop = f"until {condition}; do sleep {every}; done"
        seconds = max(1, round(timeout))  # `timeout 0` would wait for ever
        return self.run(f"timeout {seconds} bash -c {shlex.quote(loop)}", **where).code == 0

    def until_logged(self, path: str, pattern: str, timeout: float, **where) -> bool:
        """Whether the file came to match the regular expression within `timeout` s, matched
        as Python's re.search(pattern, text, re.M) would (grep -P on the whole file)."""
        found = f"grep -qzP {shlex.quote('(?m)' + pattern)} {shlex.quote(path)} 2>/dev/null"
        return self.until(found, timeout, **where)

    def ok(self, command: str, **kwargs) -> str:
        result = self.run(command, **kwargs)
        assert result.code == 0, f"`{command}` exited {result.code}:\n{result.out}\n{result.err}"
        return result.out

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    def node_report(self, node: str) -> str:
        """What Slurm says is on a node and why it is in its state: for a test whose node did
        not come back idle."""
        jobs_on = self.run(f"squeue -a -w {node} -o '%i %j %T %M %N %r'").out
        steps = self.run(f"squeue -a -s -w {node} -o '%i %j %N'").out
        state = self.run(f"scontrol show node {node} | grep -E 'State=|Reason=|Alloc'").out
        return f"jobs on {node}:\n{jobs_on}steps:\n{steps}{state}"


def _node_states(cluster: Cluster) -> dict[str, str] | None:
    """Every node's state by name (c1.., and the gpu partition's g1, g2), or None if the
    cluster is not running."""
    try:
        out = cluster.run("sinfo --noheader --Node --format='%N %T'")
    except (LookupError, docker.errors.APIError):
        return None
    return dict(line.split() for line in out.out.splitlines()) if out.code == 0 else None


@contextlib.contextmanager
def one_bring_up_at_a_time():
    """Workers bring their clusters up one after another: on a new machine the first builds the
    node images (minutes), which the others then find built instead of building them again."""
    lock = ROOT / "build" / "e2e-bring-up.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def dev_cluster(request, project: str, nodes: int):
    """A dev cluster of `nodes` compute nodes in compose project `project`: reused (brought up
    to date) if it is running, else brought up here and removed at the end (unless
    TFSLURM_KEEP_CLUSTER)."""
    cluster = Cluster(docker.from_env(), project)
    states = _node_states(cluster)
    compute = sorted(name for name in states or {} if name.startswith("c"))
    if compute and len(compute) != nodes:
        pytest.fail(
            f"dev cluster {project} runs {len(compute)} compute nodes; these tests need {nodes}: "
            f"run `make dev-cluster-down` or `make dev-cluster NODES={nodes}`"
        )
    reuse = bool(states) and set(states.values()) == {"idle"}
    env = {**os.environ, "TFSLURM_DEV_PROJECT": project}
    # Bring-up and tear-down take minutes: show their progress lines instead of capturing them.
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled(), one_bring_up_at_a_time():
        # A running cluster too: `up` rebuilds a node image whose files changed and compose
        # recreates the containers that run an older one (seconds when nothing changed), and
        # the SIF, examples and tools are this checkout's, not what the cluster last got.
        subprocess.run([*DEVCLUSTER, "up", "--nodes", str(nodes)], check=True, cwd=ROOT, env=env)
    try:
        yield cluster
    finally:
        if not reuse and not os.environ.get("TFSLURM_KEEP_CLUSTER"):
            with capture.global_and_fixture_disabled():
                subprocess.run([*DEVCLUSTER, "down"], check=False, cwd=ROOT, env=env)


APPTAINER_CONF = "/etc/apptainer/apptainer.conf"
DATA_BIND = "bind path = /data"


@contextlib.contextmanager
def data_bind(cluster: Cluster, nodes: tuple[str, ...], present: bool):
    """The site's `bind path = /data` line in each node's apptainer.conf (present) or not, until
    the block ends; then each node's file as it was (the rollout's tests leave the line)."""
    has = f"grep -qx '{DATA_BIND}' {APPTAINER_CONF}"
    add = f"{has} || echo '{DATA_BIND}' >> {APPTAINER_CONF}"
    remove = f"sed -i '\\#^{DATA_BIND}$#d' {APPTAINER_CONF}"
    had = {node: cluster.run(has, service=node).code == 0 for node in nodes}
    for node in nodes:
        cluster.ok(add if present else remove, service=node, user="root")
    try:
        yield
    finally:
        for node in nodes:
            cluster.ok(add if had[node] else remove, service=node, user="root")


@pytest.fixture(scope="session")
def cluster(request):
    with dev_cluster(request, PROJECT, 3) as running:
        yield running


@pytest.fixture(scope="session")
def sample(cluster):
    """The CIFAR-10-format sample in /data/cifar10 (make_sample.py is idempotent)."""
    cluster.ok(f"{IN_IMAGE}python /data/examples/cifar10/make_sample.py /data/cifar10")
    return "/data/cifar10"


USER_PROGRAMS = ROOT / "tests" / "user_programs"
USER_PROGRAMS_DIR = "/data/user-programs"


@pytest.fixture(scope="session")
def programs(cluster) -> str:
    """TensorFlow's tutorials, our copies (tests/user_programs), on the cluster's shared /data,
    owned by the job user."""
    for path in sorted(USER_PROGRAMS.rglob("*.py")):
        target = f"{USER_PROGRAMS_DIR}/{path.relative_to(USER_PROGRAMS)}"
        cluster.ok(
            f"mkdir -p {Path(target).parent} && cat > {target} <<'EOF'\n{path.read_text()}EOF"
        )
    return USER_PROGRAMS_DIR


# ---- a failed test leaves its jobs' output for whoever reads the report ---------------------

JOB_LOGS = ROOT / "build" / "test-reports" / "e2e-job-logs"
STARTED = pytest.StashKey[float]()


def pytest_runtest_setup(item) -> None:
    item.stash[STARTED] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """After a failed e2e test: every job output file (*.out under /data) written since it
    started, copied to build/test-reports/e2e-job-logs/TEST/."""
    outcome = yield
    report = outcome.get_result()
    cluster = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None
    if not report.failed or report.when != "call" or not isinstance(cluster, Cluster):
        return
    since = int(item.stash.get(STARTED, time.time())) - 5
    found = cluster.run(f"find /data -maxdepth 3 -name '*.out' -newermt @{since} 2>/dev/null")
    target = JOB_LOGS / re.sub(r"[^\w.-]+", "_", item.nodeid)
    for path in found.out.split()[:50]:
        target.mkdir(parents=True, exist_ok=True)
        (target / path.strip("/").replace("/", "_")).write_text(cluster.run(f"cat {path}").out)
