#!/usr/bin/env python3
"""Bring the docker-compose Slurm dev cluster up, down, or open a shell on it.

    python3 slurm-dev-cluster/devcluster.py up [--sif tf-slurm.sif] [--nodes N]  # build, start
    python3 slurm-dev-cluster/devcluster.py down                        # containers + volumes
    python3 slurm-dev-cluster/devcluster.py shell                       # login node, job user
    python3 slurm-dev-cluster/devcluster.py status
    python3 slurm-dev-cluster/devcluster.py sample [DIR]                # CIFAR-10 sample on /data
    python3 slurm-dev-cluster/devcluster.py exec CMD...                 # on login, job user
    python3 slurm-dev-cluster/devcluster.py submit SCRIPT [ARGS...]     # sbatch, stream, wait

`up` waits until every node is idle; --nodes N (default 3) runs compute nodes c1..cN.
TFSLURM_SLURM=22.05|24.11|26.05 (make dev-cluster SLURM=...) picks the Slurm release (RELEASES):
each is its own compose project, so several can be up at once.

Images are built offline with the machinery in containers/buildtool.py (debootstrapped Debian
base, the Apptainer image) and rebuilt only when their build context changed. Stdlib only.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "containers"))
import buildtool  # noqa: E402  (the shared image-building machinery)
from buildtool import BuildError, progress, quiet  # noqa: E402


@dataclass(frozen=True)
class Release:
    """A Slurm release the dev cluster runs: Debian's packages of it, from one suite."""

    version: str
    suite: str
    apptainer: bool
    """Debian has Apptainer for this suite (it needs libc >= 2.38). Without it the nodes run
    tfslurm-entry from the CPU image's venv, copied in: the Slurm behaviour is what is tested."""

    @property
    def node_image(self) -> str:
        return f"tfslurm/slurm-node:{self.version}"


RELEASES = {
    release.version: release
    for release in (
        Release("22.05", "bookworm", apptainer=False),
        Release("24.11", "trixie", apptainer=True),
        Release("26.05", "sid", apptainer=True),
    )
}
DEFAULT_SLURM = "24.11"


def release_named(version: str) -> Release:
    if version not in RELEASES:
        known = ", ".join(RELEASES)
        raise BuildError(
            f"SLURM={version}: the dev cluster runs Slurm {known} (Debian's "
            "packages); pick one of them"
        )
    return RELEASES[version]


def default_project(version: str) -> str:
    """Each Slurm release's cluster is its own compose project, so several can be up at once."""
    return "tfslurm-dev" if version == DEFAULT_SLURM else f"tfslurm-slurm{version.replace('.', '')}"


MARIADB_IMAGE = "tfslurm/mariadb:trixie"
DEFAULT_NODES = 3  # compose.yaml's c1-c3 and slurm.conf's c[1-3]; the e2e tests use 3
GPU_NODES = ["g1", "g2"]  # the gpu partition, 4 placeholder GPUs each (gres.conf)
JOB_USER = "runner"
SIF_ON_CLUSTER = "/data/tf-slurm.sif"
CH_ON_CLUSTER = "/data/tf-slurm.ch"  # the image unpacked for Charliecloud's ch-run
OCI_ON_CLUSTER = "/data/tf-slurm.oci"  # the OCI bundle unpacked for Slurm's srun --container
LAUNCHER = ROOT / "tfslurm_entry" / "launcher" / "tfslurm-run"
# TFSLURM_SLURM (make dev-cluster SLURM=22.05) picks the Slurm release; the default project
# name follows it. TFSLURM_DEV_PROJECT runs a second, separate cluster beside the default one
# (own network, containers and /data volume), e.g. for developing playbooks while e2e tests run.
SLURM_VERSION = os.environ.get("TFSLURM_SLURM") or DEFAULT_SLURM
PROJECT = os.environ.get("TFSLURM_DEV_PROJECT") or default_project(SLURM_VERSION)
# A cluster of another size gets generated files here: slurm.conf with its node names, and a
# compose override adding c4..cN (each extends compose.yaml's c1).
GENERATED = HERE / ".generated" / PROJECT
# The configuration files written per release or node count, and compose.yaml's variable for each.
CONF_FILES = {
    "slurm.conf": "TFSLURM_SLURM_CONF",
    "cgroup.conf": "TFSLURM_CGROUP_CONF",
    "oci.conf": "TFSLURM_OCI_CONF",
}
STAGE = "dev-cluster"
# TensorFlow's C++ start-up chatter ("I0000 ...", "W0000 ...") is left in the job's
# output file but not echoed; its error lines ("E0000 ...") are shown.
TF_NOISE = re.compile(r"^([IW]\d{4} |WARNING: All log messages before absl|To enable the )")


def compose_command() -> list[str]:
    """docker compose for this project, with the generated node files if it has any."""
    files = ["-f", str(HERE / "compose.yaml")]
    if (GENERATED / "compose.nodes.json").exists():
        files += ["-f", str(GENERATED / "compose.nodes.json")]
    return ["docker", "compose", "--project-directory", str(HERE), *files, "-p", PROJECT]


def compose_env() -> dict[str, str]:
    """compose.yaml's ${TFSLURM_*} settings: the release's node image, and the generated
    configuration files (CONF_FILES) where there are any."""
    env = dict(os.environ, TFSLURM_NODE_IMAGE=release_named(SLURM_VERSION).node_image)
    for name, var in CONF_FILES.items():
        if (GENERATED / name).exists():
            env[var] = str(GENERATED / name)
    return env


def compose(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*compose_command(), *args], env=compose_env(), **kwargs)


def node_names(count: int) -> list[str]:
    return [f"c{i}" for i in range(1, count + 1)]


# The compute nodes' second network, as a site's fast network (InfiniBand's IPoIB, a
# high-speed Ethernet) beside the management one: node c1 is also c1-fast, on it only. It is
# connected after `compose up`, not declared in compose.yaml: compose would register each
# service's own name (c1) on every network it joins, and Slurm's node names must keep meaning
# the first network, as on a site. Internal: no route out of the machine.
FAST_SUFFIX = "-fast"


def fast_network() -> str:
    return f"{PROJECT}_fast"


def connect_fast_network(nodes: list[str]) -> None:
    """Create the second network if missing and put each node on it as NODE-fast."""
    name = fast_network()
    if _docker("network", "inspect", name).returncode != 0:
        created = _docker("network", "create", "--internal", name)
        if created.returncode != 0:
            raise BuildError(f"docker network create {name} failed: {created.stderr.strip()}")
    for node in nodes:
        container = f"{PROJECT}-{node}-1"
        networks = _docker("inspect", "--format", "{{json .NetworkSettings.Networks}}", container)
        if name in json.loads(networks.stdout or "{}"):
            continue
        done = _docker("network", "connect", "--alias", f"{node}{FAST_SUFFIX}", name, container)
        if done.returncode != 0:
            raise BuildError(f"connecting {container} to {name} failed: {done.stderr.strip()}")
    progress(STAGE, f"second network {name}: {', '.join(n + FAST_SUFFIX for n in nodes)}")


def _docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


def remove_fast_network() -> None:
    _docker("network", "rm", fast_network())


def configure(count: int, release: Release) -> None:
    """Write (or, for the default cluster, remove) the files for a cluster of `count` nodes
    on `release`: slurm.conf, cgroup.conf and oci.conf as that Slurm needs them, compose's
    extra nodes."""
    if count < DEFAULT_NODES:
        raise BuildError(
            f"--nodes {count}: the dev cluster needs at least {DEFAULT_NODES} "
            f"nodes (compose.yaml defines c1-c{DEFAULT_NODES})"
        )
    for name in (*CONF_FILES, "compose.nodes.json"):
        (GENERATED / name).unlink(missing_ok=True)
    if count == DEFAULT_NODES and release.version == DEFAULT_SLURM:
        with contextlib.suppress(OSError):
            GENERATED.rmdir()
        return
    GENERATED.mkdir(parents=True, exist_ok=True)
    default = f"c[1-{DEFAULT_NODES}]"
    conf = (HERE / "slurm.conf").read_text()
    if conf.count(f"NodeName={default} ") != 1 or f"Nodes={default} " not in conf:
        raise BuildError(
            f"slurm.conf should name its nodes {default} on the NodeName and PartitionName lines"
        )
    conf = conf.replace(default, f"c[1-{count}]")
    files = {"slurm.conf": conf} | {
        name: (HERE / name).read_text() for name in CONF_FILES if name != "slurm.conf"
    }
    for name, text in for_release(release, files).items():
        (GENERATED / name).write_text(text)
    if count == DEFAULT_NODES:
        return
    extra = node_names(count)[DEFAULT_NODES:]
    started = {"condition": "service_started"}
    override = {
        "services": {
            **{
                n: {"extends": {"file": str(HERE / "compose.yaml"), "service": "c1"}, "hostname": n}
                for n in extra
            },
            # slurmctld resolves every node's name when it starts: nodes first (compose.yaml).
            "slurmctld": {"depends_on": {n: started for n in extra}},
        }
    }
    (GENERATED / "compose.nodes.json").write_text(json.dumps(override, indent=1) + "\n")


def for_release(release: Release, files: dict[str, str]) -> dict[str, str]:
    """The configuration files (CONF_FILES' names: their text, written for 24.11) as another
    release needs them. Each Slurm stops at a key or a pattern it does not know."""
    if release.version != "22.05":
        return files
    dropped = {
        # 24.05's: 22.05 knows only cgroup/v1, cgroup/v2 and autodetect. Its slurmd loads no
        # cgroup plugin for proctrack/linuxproc + task/none.
        "cgroup.conf": ["CgroupPlugin"],
        # Not in 22.05 (slurmctld stops at it): a job is held after 5 requeues, compiled in.
        "slurm.conf": ["MaxBatchRequeue"],
        # Not in 22.05: its slurmstepd fails every --container task at them ("Unspecified
        # error" in srun); without them the step's SLURM_CONF reaches the container (unread).
        "oci.conf": ["EnvExclude", "RunTimeEnvExclude"],
    }
    files = {
        name: re.sub(rf"(?m)^({'|'.join(dropped[name])})=.*$", r"# (22.05 has no \1)", text)
        for name, text in files.items()
    }
    # 22.05's OCI patterns have no %U (the user's id; slurmstepd: "unexpected replacement
    # character: U"): crun keeps its state in /tmp, as 22.05's own containers.html example did.
    files["oci.conf"] = files["oci.conf"].replace("--root=/run/user/%U/", "--root=/tmp/")
    return files


def configured_nodes() -> int:
    """How many nodes this project was brought up with."""
    conf = GENERATED / "slurm.conf"
    found = re.search(r"NodeName=c\[1-(\d+)\]", conf.read_text()) if conf.exists() else None
    return int(found.group(1)) if found else DEFAULT_NODES


def on_login(command: str, user: str = JOB_USER, check: bool = True) -> str:
    """Run a shell command on the login node as the job user; its stdout."""
    proc = compose(
        "exec", "-T", "-u", user, "login", "bash", "-lc", command, capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        raise BuildError(f"on login: `{command}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def context_hash(context: Path, extra: list[str] = ()) -> str:
    """Digest of every file in a build context (and of `extra`: build arguments, input image
    ids), so an image is rebuilt only when one of them changed."""
    digest = hashlib.sha256("\n".join(extra).encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(context)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build(tag: str, context: Path, args: dict[str, str], *inputs: str) -> None:
    """docker build, unless the image was built from this context, these build arguments and
    these input images (their ids) already."""
    ids = [buildtool.image_id(name) or "" for name in inputs]
    want = context_hash(context, [f"{k}={v}" for k, v in sorted(args.items())] + ids)
    if buildtool.image_label(tag, "tfslurm.context") == want:
        progress(STAGE, f"{tag} up to date")
        return
    progress(STAGE, f"docker build -> {tag} ({', '.join(f'{k} {v}' for k, v in args.items())})")
    build_args = [arg for k, v in args.items() for arg in ("--build-arg", f"{k}={v}")]
    buildtool.run_build(
        [
            "docker",
            "build",
            *build_args,
            "--label",
            f"tfslurm.context={want}",
            "--tag",
            tag,
            str(context),
        ],
        STAGE,
    )
    progress(STAGE, f"{tag} ready ({buildtool.image_size(tag)})")


def build_images(release: Release) -> None:
    """The release's node image on its suite (with Apptainer where Debian has it, else with
    the CPU image's venv), and MariaDB."""
    if release.suite == "trixie":
        base = buildtool.BUILDER_IMAGE  # the SIF builder: trixie + Apptainer
        if not quiet(["docker", "image", "inspect", base]):
            buildtool.builder_image(base, buildtool.BUILDER_BASE)
    elif release.apptainer:
        base = f"tfslurm/apptainer:{release.suite}"
        if not quiet(["docker", "image", "inspect", base]):
            buildtool.builder_image(base, buildtool.base_image(release.suite), release.suite)
    else:
        base = buildtool.base_image(release.suite)
    if release.apptainer:
        build(release.node_image, HERE / "node", {"BASE_IMAGE": base})
    else:
        plain = f"tfslurm/slurm-node-base:{release.version}"
        build(plain, HERE / "node", {"BASE_IMAGE": base})
        tf_image = buildtool.CPU.tag
        if not quiet(["docker", "image", "inspect", tf_image]):
            raise BuildError(
                f"Slurm {release.version}'s nodes run tfslurm-entry from "
                f"{tf_image}'s venv (no Apptainer for Debian {release.suite}): "
                "run `make image` first"
            )
        build(
            release.node_image,
            HERE / "node-venv",
            {"NODE_IMAGE": plain, "TF_IMAGE": tf_image},
            tf_image,
        )
    build(
        MARIADB_IMAGE,
        HERE / "mariadb",
        {"BASE_IMAGE": buildtool.pick_base(buildtool.BUILDER_BASE, "trixie")},
    )


def node_states() -> dict[str, str]:
    out = on_login("sinfo --noheader --Node --format='%N %T'", check=False)
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def accounting_answers() -> bool:
    """slurmdbd (and MariaDB behind it) answer: sacct, which the tests and make bench read."""
    return (
        on_login(
            "sacct --noheader -X --starttime now-1minutes >/dev/null && echo ok", check=False
        ).strip()
        == "ok"
    )


def wait_idle(nodes: list[str], timeout: float) -> None:
    """Until every node is idle and accounting answers: what `make dev-cluster` promises."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        states = node_states()
        if all(states.get(node) == "idle" for node in nodes) and accounting_answers():
            progress(
                STAGE,
                f"every node idle: {len(nodes)} nodes ({', '.join(nodes)}); accounting answers",
            )
            return
        if states != last:
            counts = {state: list(states.values()).count(state) for state in set(states.values())}
            shown = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no answer yet"
            progress(STAGE, f"waiting for idle nodes: {shown}")
            last = states
        time.sleep(1)
    compose("ps")
    raise BuildError(
        f"nodes not idle within {timeout:.0f} s: {node_states()}; "
        "see `docker compose -f slurm-dev-cluster/compose.yaml logs`"
    )


def in_image(release: Release) -> str:
    """How a command runs with the kit's TensorFlow on this release's nodes."""
    return f"apptainer exec {SIF_ON_CLUSTER} " if release.apptainer else ""


def make_sample(target: str) -> None:
    """The CIFAR-10-format sample (examples/cifar10/make_sample.py, idempotent) in `target`."""
    release = release_named(SLURM_VERSION)
    progress(STAGE, f"CIFAR-10 sample in {target}")
    print(
        on_login(f"{in_image(release)}python /data/examples/cifar10/make_sample.py {target}"),
        end="",
        flush=True,
    )


def install_sif(sif: Path) -> None:
    if not release_named(SLURM_VERSION).apptainer:
        progress(
            STAGE,
            f"Slurm {SLURM_VERSION}'s nodes have no Apptainer: tfslurm-entry runs "
            "from the venv in their image, no SIF installed",
        )
        return
    if not sif.is_file():
        progress(STAGE, f"no {sif.name} here: skipped installing it (run `make sif`)")
        return
    local = hashlib.sha256(sif.read_bytes()).hexdigest()
    remote = on_login(f"sha256sum {SIF_ON_CLUSTER} 2>/dev/null || true").split(" ")[0]
    if remote == local:
        progress(STAGE, f"{SIF_ON_CLUSTER} up to date")
        return
    progress(
        STAGE, f"installing {sif.name} ({sif.stat().st_size / 1e6:.0f} MB) as {SIF_ON_CLUSTER}"
    )
    tmp = f"{SIF_ON_CLUSTER}.new"
    if compose("cp", str(sif), f"login:{tmp}").returncode != 0:
        raise BuildError(f"docker compose cp {sif} failed")
    on_login(f"chown {JOB_USER}:{JOB_USER} {tmp} && mv {tmp} {SIF_ON_CLUSTER}", user="root")


def install_ch_image(tar: Path) -> None:
    """`make ch-image`'s tar unpacked as the job user into CH_ON_CLUSTER, a directory image on
    the shared /data as a user puts it (ch-run needs no more), unless it is there already."""
    _install_unpacked(tar, CH_ON_CLUSTER, "make ch-image")


def install_oci_bundle(tar: Path) -> None:
    """`make oci-bundle`'s tar unpacked as the job user into OCI_ON_CLUSTER, an OCI bundle on
    the shared /data, which every node's slurmstepd reads for srun --container."""
    _install_unpacked(tar, OCI_ON_CLUSTER, "make oci-bundle")


def _install_unpacked(tar: Path, where: str, make: str) -> None:
    """`tar` unpacked as the job user into `where` (beside it, then renamed: a job never sees a
    half-unpacked image), unless the tar unpacked there is this one (a stamp file)."""
    if not tar.is_file():
        raise BuildError(f"no {tar.name} here: run `{make}` first")
    stamp = f"{tar.stat().st_size} {tar.stat().st_mtime_ns}"
    marker = ".tfslurm-source"
    if on_login(f"cat {where}/{marker} 2>/dev/null || true").strip() == stamp:
        progress(STAGE, f"{where} up to date")
        return
    size = f"{tar.stat().st_size / 1e6:.0f} MB"
    progress(STAGE, f"unpacking {tar.name} ({size}) into {where}")
    new = f"{where}.new"
    if compose("cp", str(tar), f"login:{new}.tar").returncode != 0:
        raise BuildError(f"docker compose cp {tar} failed")
    on_login(f"chown {JOB_USER}: {new}.tar", user="root")
    on_login(
        f"rm -rf {new} && mkdir {new} && tar -xf {new}.tar -C {new} && rm {new}.tar "
        f"&& echo '{stamp}' > {new}/{marker} && rm -rf {where} && mv {new} {where}"
    )


def install_examples() -> None:
    """Put examples/ on the shared file system, where jobs on every node can read them."""
    progress(STAGE, "installing examples/ as /data/examples")
    on_login("rm -rf /data/examples.new && mkdir -p /data/examples.new")
    for example in sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir()):
        if compose("cp", str(example), "login:/data/examples.new/").returncode != 0:
            raise BuildError(f"docker compose cp {example} failed")
    on_login(
        "chown -R runner:runner /data/examples.new && rm -rf /data/examples "
        "&& mv /data/examples.new /data/examples && find /data/examples -name __pycache__ "
        "-prune -exec rm -rf {} +",
        user="root",
    )


def install_tools() -> None:
    """tfslurm-run, the launcher of the examples' batch scripts, in /data/bin, written out of
    the SIF as a user does (`apptainer run IMAGE --install-launcher DIR`); where the nodes have
    no Apptainer (Slurm 22.05's), copied from this checkout."""
    progress(STAGE, "installing tfslurm-run into /data/bin")
    on_login("mkdir -p /data/bin && chown runner:runner /data/bin", user="root")
    if release_named(SLURM_VERSION).apptainer:
        on_login(f"apptainer run {SIF_ON_CLUSTER} --install-launcher /data/bin")
    else:
        if compose("cp", str(LAUNCHER), "login:/data/bin/tfslurm-run").returncode != 0:
            raise BuildError(f"docker compose cp {LAUNCHER} failed")
        on_login("chmod 0755 /data/bin/tfslurm-run && chown runner: /data/bin/tfslurm-run", "root")
    on_login("rm -f /data/bin/tfslurm-node-cache", user="root")


def show() -> None:
    print(on_login("sinfo"), end="", flush=True)
    clusters = on_login(
        "sacctmgr --noheader --parsable2 show cluster format=cluster,controlhost", check=False
    ).strip()
    print(f"accounting (slurmdbd): {clusters or 'not registered yet'}")
    print(f"shared /data: {on_login('ls -la /data | tail -n +2').strip()}")


def check_same_checkout() -> None:
    """Refuse a project whose containers another checkout started: compose would recreate
    them with this checkout's files (slurm.conf, the node image) on that cluster's
    volumes (accounting, controller state, /data), a mix neither checkout describes."""
    label = '{{.Label "com.docker.compose.project.working_dir"}}'
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label=com.docker.compose.project={PROJECT}",
            "--format",
            label,
        ],
        capture_output=True,
        text=True,
    ).stdout
    others = sorted({d for d in out.split() if d != str(HERE)})
    if others:
        raise BuildError(
            f"dev cluster {PROJECT} was started from another checkout ({', '.join(others)}); "
            f"run `make dev-cluster-down` there first, or set TFSLURM_DEV_PROJECT to run a "
            "second cluster beside it"
        )


def up(sif: Path, timeout: float, nodes: int) -> None:
    started = time.monotonic()
    for script in (ROOT / "containers" / "ensure-docker.sh", HERE / "ensure-compose.sh"):
        if subprocess.run([str(script)]).returncode != 0:
            raise BuildError(f"{script.name} failed")
    check_same_checkout()
    release = release_named(SLURM_VERSION)
    progress(
        STAGE, f"Slurm {release.version} (Debian {release.suite}'s packages), project {PROJECT}"
    )
    configure(nodes, release)
    build_images(release)
    progress(STAGE, "docker compose up (munge key and database password generated in a volume)")
    # Not --wait: the healthchecks run every 30 s (compose.yaml); wait_idle checks readiness.
    # --remove-orphans: nodes beyond the count asked for, from an earlier, larger cluster.
    if compose("up", "--detach", "--remove-orphans").returncode != 0:
        compose("ps")
        raise BuildError("docker compose up failed; see `docker compose logs` in slurm-dev-cluster")
    connect_fast_network(node_names(nodes) + GPU_NODES)
    wait_idle(node_names(nodes) + GPU_NODES, timeout)
    progress(
        STAGE, f"{nodes} nodes up and idle {time.monotonic() - started:.1f} s after `up` started"
    )
    install_sif(sif)
    install_examples()
    install_tools()
    show()


def submit(script: str, script_args: list[str], env: list[str]) -> int:
    """sbatch SCRIPT on the login node, stream its output until the job ends; its exit code."""
    # Variables go in through sbatch's default --export=ALL: in these unprivileged containers
    # slurmd dies with "fatal: clone: Operation not permitted" on a job with --export=ALL,X=Y.
    assignments = " ".join(shlex.quote(e) for e in env)
    job = (
        on_login(
            f"{assignments} sbatch --parsable --chdir=/data "
            f"{shlex.quote(script)} {shlex.join(script_args)}"
        )
        .strip()
        .split(";")[0]
    )
    # A heterogeneous job shows one record per component, all with the batch script's output.
    out = on_login(f"scontrol show job {job} | grep -o 'StdOut=[^ ]*'").split()[0].split("=", 1)[1]
    progress(STAGE, f"submitted job {job} ({script}); output {out}")
    shown = 0
    while True:
        # one line per component of a heterogeneous job; it has ended when they all have
        states = on_login(f"sacct -X -n -P -j {job} -o State,ExitCode").split()
        text = on_login(f"cat {shlex.quote(out)} 2>/dev/null || true")
        lines = text.splitlines()
        for line in lines[shown:]:
            if not TF_NOISE.match(line):
                print(line, flush=True)
        shown = len(lines)
        fields = [line.split("|") for line in states]
        running = ("PENDING", "RUNNING", "REQUEUED", "COMPLETING")
        if fields and not any(f[0] in running for f in fields):
            state, code = next((f for f in fields if f[0] != "COMPLETED"), fields[0])
            progress(STAGE, f"job {job} ended: {state}, exit code {code}")
            return 0 if state == "COMPLETED" else 1
        time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("up", help="build what is missing, start, wait until every node is idle")
    p.add_argument("--sif", type=Path, default=ROOT / "tf-slurm.sif")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument(
        "--nodes",
        type=int,
        default=int(os.environ.get("TFSLURM_DEV_NODES") or 0),
        help=f"compute nodes c1..cN (default: as the cluster was brought up, "
        f"else {DEFAULT_NODES}) [TFSLURM_DEV_NODES]",
    )
    p = sub.add_parser(
        "install",
        help="put this checkout's SIF, examples and tools on the "
        "running cluster (each only if it changed)",
    )
    p.add_argument("--sif", type=Path, default=ROOT / "tf-slurm.sif")
    sub.add_parser("images", help="build the release's node and MariaDB images if missing")
    sub.add_parser("down", help="remove containers, networks and volumes")
    sub.add_parser("shell", help="a login shell on the login node as the job user")
    sub.add_parser("status", help="show the cluster")
    p = sub.add_parser("sample", help="write the CIFAR-10-format sample on the shared /data")
    p.add_argument("target", nargs="?", default="/data/cifar10")
    p = sub.add_parser("exec", help="run a command on the login node as the job user")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p = sub.add_parser("submit", help="sbatch a script on the login node and follow it")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            up(args.sif, args.timeout, args.nodes or configured_nodes())
        elif args.command == "install":
            install_sif(args.sif)
            install_examples()
            install_tools()
        elif args.command == "images":
            build_images(release_named(SLURM_VERSION))
        elif args.command == "down":
            code = compose("down", "--volumes", "--remove-orphans").returncode
            remove_fast_network()  # not compose's: its nodes are gone now
            if code == 0:
                configure(DEFAULT_NODES, RELEASES[DEFAULT_SLURM])  # the generated files go
            return code
        elif args.command == "shell":
            shell = [*compose_command(), "exec", "-u", JOB_USER, "login", "bash", "-l"]
            os.execvpe("docker", shell, compose_env())
        elif args.command == "status":
            show()
        elif args.command == "sample":
            make_sample(args.target)
        elif args.command == "exec":
            return compose("exec", "-T", "-u", JOB_USER, "login", *args.cmd).returncode
        elif args.command == "submit":
            return submit(args.script, args.args, args.env)
    except BuildError as err:
        progress(STAGE, f"FAILED: {err}")
        return 1
    progress(STAGE, "done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
