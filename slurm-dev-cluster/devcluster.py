#!/usr/bin/env python3
"""Bring the docker-compose Slurm dev cluster up, down, or open a shell on it.

    python3 slurm-dev-cluster/devcluster.py up [--sif tf-slurm.sif] [--nodes N]  # build, start
    python3 slurm-dev-cluster/devcluster.py down                        # containers + volumes
    python3 slurm-dev-cluster/devcluster.py shell                       # login node, job user
    python3 slurm-dev-cluster/devcluster.py status
    python3 slurm-dev-cluster/devcluster.py exec CMD...                 # on login, job user
    python3 slurm-dev-cluster/devcluster.py submit SCRIPT [ARGS...]     # sbatch, stream, wait

`up` waits until every node is idle; --nodes N (default 3) runs compute nodes c1..cN.

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
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "containers"))
import buildtool  # noqa: E402  (the shared image-building machinery)
from buildtool import BuildError, progress, quiet  # noqa: E402

NODE_IMAGE = "tfslurm/slurm-node:24.11"
MARIADB_IMAGE = "tfslurm/mariadb:trixie"
DEFAULT_NODES = 3  # compose.yaml's c1-c3 and slurm.conf's c[1-3]; the e2e tests use 3
GPU_NODES = ["g1", "g2"]  # the gpu partition, 4 placeholder GPUs each (gres.conf)
JOB_USER = "runner"
SIF_ON_CLUSTER = "/data/tf-slurm.sif"
HOST_TOOLS = [ROOT / "playbooks" / "roles" / "tfslurm_launcher" / "files" / "tfslurm-node-cache"]
# TFSLURM_DEV_PROJECT runs a second, separate cluster beside the default one (own network,
# containers and /data volume), e.g. for developing playbooks while e2e tests run.
PROJECT = os.environ.get("TFSLURM_DEV_PROJECT", "tfslurm-dev")
# A cluster of another size gets generated files here: slurm.conf with its node names, and a
# compose override adding c4..cN (each extends compose.yaml's c1).
GENERATED = HERE / ".generated" / PROJECT
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
    """compose.yaml mounts ${TFSLURM_SLURM_CONF:-./slurm.conf}: the generated one if any."""
    env = dict(os.environ)
    if (GENERATED / "slurm.conf").exists():
        env["TFSLURM_SLURM_CONF"] = str(GENERATED / "slurm.conf")
    return env


def compose(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*compose_command(), *args], env=compose_env(), **kwargs)


def node_names(count: int) -> list[str]:
    return [f"c{i}" for i in range(1, count + 1)]


def configure_nodes(count: int) -> None:
    """Write (or, for the default size, remove) the files for a cluster of `count` nodes."""
    if count < DEFAULT_NODES:
        raise BuildError(f"--nodes {count}: the dev cluster needs at least {DEFAULT_NODES} "
                         f"nodes (compose.yaml defines c1-c{DEFAULT_NODES})")  # fmt: skip
    for name in ("slurm.conf", "compose.nodes.json"):
        (GENERATED / name).unlink(missing_ok=True)
    if count == DEFAULT_NODES:
        with contextlib.suppress(OSError):
            GENERATED.rmdir()
        return
    GENERATED.mkdir(parents=True, exist_ok=True)
    default = f"c[1-{DEFAULT_NODES}]"
    conf = (HERE / "slurm.conf").read_text()
    if conf.count(default) != 2:
        raise BuildError(f"slurm.conf should name its nodes {default} on the NodeName and "
                         "PartitionName lines")  # fmt: skip
    (GENERATED / "slurm.conf").write_text(conf.replace(default, f"c[1-{count}]"))
    extra = node_names(count)[DEFAULT_NODES:]
    started = {"condition": "service_started"}
    override = {
        "services": {
            **{n: {"extends": {"file": str(HERE / "compose.yaml"), "service": "c1"},
                   "hostname": n} for n in extra},
            # slurmctld resolves every node's name when it starts: nodes first (compose.yaml).
            "slurmctld": {"depends_on": {n: started for n in extra}},
        }
    }  # fmt: skip
    (GENERATED / "compose.nodes.json").write_text(json.dumps(override, indent=1) + "\n")


def configured_nodes() -> int:
    """How many nodes this project was brought up with."""
    conf = GENERATED / "slurm.conf"
    found = re.search(r"NodeName=c\[1-(\d+)\]", conf.read_text()) if conf.exists() else None
    return int(found.group(1)) if found else DEFAULT_NODES


def on_login(command: str, user: str = JOB_USER, check: bool = True) -> str:
    """Run a shell command on the login node as the job user; its stdout."""
    proc = compose("exec", "-T", "-u", user, "login", "bash", "-lc", command,
                   capture_output=True, text=True)  # fmt: skip
    if check and proc.returncode != 0:
        raise BuildError(f"on login: `{command}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def context_hash(context: Path) -> str:
    """Digest of every file in a build context, so an image is rebuilt only when it changed."""
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(context)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build(tag: str, context: Path, base: str) -> None:
    want = context_hash(context)
    label = subprocess.run(
        ["docker", "image", "inspect", "--format", '{{index .Config.Labels "tfslurm.context"}}',
         tag], capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if label == want:
        progress(STAGE, f"{tag} up to date")
        return
    progress(STAGE, f"docker build -> {tag} (base {base})")
    buildtool.run_build(
        ["docker", "build", "--build-arg", f"BASE_IMAGE={base}", "--label",
         f"tfslurm.context={want}", "--tag", tag, str(context)], STAGE,
    )  # fmt: skip
    progress(STAGE, f"{tag} ready ({buildtool.image_size(tag)})")


def build_images() -> None:
    builder = buildtool.BUILDER_IMAGE
    if not quiet(["docker", "image", "inspect", builder]):
        buildtool.builder_image(builder, buildtool.BUILDER_BASE)
    build(NODE_IMAGE, HERE / "node", builder)
    build(MARIADB_IMAGE, HERE / "mariadb", buildtool.pick_base(buildtool.BUILDER_BASE, "trixie"))


def node_states() -> dict[str, str]:
    out = on_login("sinfo --noheader --Node --format='%N %T'", check=False)
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def accounting_answers() -> bool:
    """slurmdbd (and MariaDB behind it) answer: sacct, which the tests and make bench read."""
    return on_login("sacct --noheader -X --starttime now-1minutes >/dev/null && echo ok",
                    check=False).strip() == "ok"  # fmt: skip


def wait_idle(nodes: list[str], timeout: float) -> None:
    """Until every node is idle and accounting answers: what `make dev-cluster` promises."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        states = node_states()
        if all(states.get(node) == "idle" for node in nodes) and accounting_answers():
            progress(STAGE, f"every node idle: {len(nodes)} nodes ({', '.join(nodes)}); "
                     "accounting answers")  # fmt: skip
            return
        if states != last:
            counts = {state: list(states.values()).count(state) for state in set(states.values())}
            shown = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no answer yet"
            progress(STAGE, f"waiting for idle nodes: {shown}")
            last = states
        time.sleep(1)
    compose("ps")
    raise BuildError(f"nodes not idle within {timeout:.0f} s: {node_states()}; "
                     "see `docker compose -f slurm-dev-cluster/compose.yaml logs`")  # fmt: skip


def install_sif(sif: Path) -> None:
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


def install_examples() -> None:
    """Put examples/ on the shared file system, where jobs on every node can read them."""
    progress(STAGE, "installing examples/ as /data/examples")
    on_login("rm -rf /data/examples.new && mkdir -p /data/examples.new")
    for example in sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir()):
        if compose("cp", str(example), "login:/data/examples.new/").returncode != 0:
            raise BuildError(f"docker compose cp {example} failed")
    on_login("chown -R runner:runner /data/examples.new && rm -rf /data/examples "
             "&& mv /data/examples.new /data/examples && find /data/examples -name __pycache__ "
             "-prune -exec rm -rf {} +", user="root")  # fmt: skip


def install_tools() -> None:
    """The kit's host-side tools, which a site's rollout puts on PATH (playbooks/), in
    /data/bin: the examples' batch scripts and the benchmark call them from there."""
    progress(STAGE, f"installing {', '.join(t.name for t in HOST_TOOLS)} into /data/bin")
    on_login("mkdir -p /data/bin")
    for tool in HOST_TOOLS:
        if compose("cp", str(tool), f"login:/data/bin/{tool.name}").returncode != 0:
            raise BuildError(f"docker compose cp {tool} failed")
    on_login("chown -R runner:runner /data/bin && chmod 0755 /data/bin/*", user="root")


def show() -> None:
    print(on_login("sinfo"), end="", flush=True)
    clusters = on_login("sacctmgr --noheader --parsable2 show cluster format=cluster,controlhost",
                        check=False).strip()  # fmt: skip
    print(f"accounting (slurmdbd): {clusters or 'not registered yet'}")
    print(f"shared /data: {on_login('ls -la /data | tail -n +2').strip()}")


def check_same_checkout() -> None:
    """Refuse a project whose containers another checkout started: compose would recreate
    them with this checkout's files (slurm.conf, the Epilog, the node image) on that cluster's
    volumes (accounting, controller state, /data), a mix neither checkout describes."""
    label = '{{.Label "com.docker.compose.project.working_dir"}}'
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={PROJECT}",
         "--format", label], capture_output=True, text=True,
    ).stdout  # fmt: skip
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
    configure_nodes(nodes)
    build_images()
    progress(STAGE, "docker compose up (munge key and database password generated in a volume)")
    # Not --wait: the healthchecks run every 30 s (compose.yaml); wait_idle checks readiness.
    # --remove-orphans: nodes beyond the count asked for, from an earlier, larger cluster.
    if compose("up", "--detach", "--remove-orphans").returncode != 0:
        compose("ps")
        raise BuildError("docker compose up failed; see `docker compose logs` in slurm-dev-cluster")
    wait_idle(node_names(nodes) + GPU_NODES, timeout)
    progress(STAGE, f"{nodes} nodes up and idle {time.monotonic() - started:.1f} s after "
             "`up` started")  # fmt: skip
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
    p.add_argument("--nodes", type=int, default=int(os.environ.get("TFSLURM_DEV_NODES") or 0),
                   help=f"compute nodes c1..cN (default: as the cluster was brought up, "
                   f"else {DEFAULT_NODES}) [TFSLURM_DEV_NODES]")  # fmt: skip
    sub.add_parser("down", help="remove containers, networks and volumes")
    sub.add_parser("shell", help="a login shell on the login node as the job user")
    sub.add_parser("status", help="show the cluster")
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
        elif args.command == "down":
            code = compose("down", "--volumes", "--remove-orphans").returncode
            if code == 0:
                configure_nodes(DEFAULT_NODES)  # the generated files go with the cluster
            return code
        elif args.command == "shell":
            shell = [*compose_command(), "exec", "-u", JOB_USER, "login", "bash", "-l"]
            os.execvpe("docker", shell, compose_env())
        elif args.command == "status":
            show()
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
