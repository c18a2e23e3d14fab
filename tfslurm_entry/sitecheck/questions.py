"""The site check's questions about one node (check.py asks them on every node).

Each answers with a Finding: ok, warn (TensorFlow without the kit would fail, or the job would
run slower than it should) or FAIL (a job run with the kit would fail or hang there), what was
found and what an administrator does about it. They reuse the checks a job's tasks make before
they start (task/, proxy.py), so the site check and a job never disagree.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError
from ..resolve import Plan, network, ports, proxy, roles
from ..resolve.gpus import detect_node_gpus
from ..step import reach
from ..step.protocol import Unreached, Why
from ..task import addresses, argv, cuda, ephemeral

OK, WARN, FAIL = "ok", "warn", "FAIL"
LEVELS = (OK, WARN, FAIL)  # worst last

TMP_FAIL_BYTES = 256 << 20  # below this a task's temporary files (autograph, scratch) run out
TMP_WARN_BYTES = 2 << 30  # a non-chief worker's scratch checkpoint is model-sized
SKEW_WARN_S = 1.0  # logs and TensorBoard events of different nodes out of order
SKEW_FAIL_S = 300.0  # munge's credentials live 300 s: past that Slurm itself refuses the node


class Finding(NamedTuple):
    check: str
    level: str
    text: str
    fix: str = ""


def worst(levels: Sequence[str]) -> str:
    return max(levels, key=LEVELS.index, default=OK)


def names(plan: Plan) -> Finding:
    """The name peers use for this node (on --network, if set) resolves here to this node."""
    me = plan.me
    name = roles.host_of(me.address)
    problem = addresses.name_problem(name, me.host)
    if problem is None:
        return Finding("names", OK, f"{name} resolves to this node")
    where = f"--network {plan.network!r}" if plan.network else "Slurm's node name"
    return Finding(
        "names",
        FAIL,
        f"{name} ({where}) {problem}",
        f"make {name} resolve to {me.host}'s own address on every node (DNS or /etc/hosts); "
        "with another network's names, set --network (TFSLURM_NETWORK), e.g. '{host}-ib'",
    )


def own_address(plan: Plan) -> tuple[str | None, Finding]:
    """This node's address on --network's interface or subnet, which the check exchanges as a
    job does (None for names), and the names column's finding."""
    if not network.exchanged(plan.network):
        return None, names(plan)
    try:
        address = addresses.network_address(plan)
    except ConfigError as err:
        return None, Finding("names", FAIL, err.what, err.hint)
    return address, Finding("names", OK, f"{address} on --network {plan.network}")


def task_ports(plan: Plan) -> str:
    """The ports a job's tasks listen on, as the site check's advice names them."""
    if plan.ports.kind == ports.DEFAULT:
        low, high = ports.DEFAULT_RANGE.start, ports.DEFAULT_RANGE.stop - 1
        return f"{low}-{high}, where the kit's default port windows lie"
    return plan.ports.source


def reached(plan: Plan, unreached: Sequence[Unreached], window: float, checked: int) -> Finding:
    """This node's connections to the `checked` other tasks' ports (reach.check_all)."""
    me = plan.me
    if not unreached:
        return Finding("reach", OK, f"reached all {checked} other tasks' ports")
    by_reason: dict[Why, list[str]] = {}
    fixes = []
    for peer in unreached:
        host = plan.tasks[peer.peer].host
        by_reason.setdefault(peer.reason, []).append(f"{host} at {peer.address}")
        name = roles.host_of(peer.address)
        if peer.reason == Why.UNRESOLVED:
            fixes.append(f"make {name} resolve on {me.host} (DNS or /etc/hosts), or --network")
        elif peer.reason == Why.STRANGER:
            fixes.append(f"{name} points to another machine on {me.host}: fix DNS or /etc/hosts")
        else:
            fixes.append(f"let TCP from {me.host} to {host} through on {task_ports(plan)}")
    texts = [f"{', '.join(peers)}: {reach.reason(why, window)}" for why, peers in by_reason.items()]
    return Finding(
        "reach", FAIL, "cannot reach " + "; ".join(texts), "; ".join(dict.fromkeys(fixes))
    )


def proxy_use(environ: Mapping[str, str], hosts: Sequence[str]) -> Finding:
    """Whether gRPC would send TensorFlow's traffic between these hosts through a proxy."""
    found = proxy.bypass(environ, hosts)
    if found is None:
        return Finding(
            "proxy", OK, "no proxy variable gRPC reads (grpc_proxy, https_proxy, http_proxy)"
        )
    if not found.added:
        return Finding("proxy", OK, f"{found.proxy_var} is set; the nodes are in no_proxy")
    return Finding(
        "proxy",
        WARN,
        f"{found.proxy_var}={environ[found.proxy_var]} reaches the tasks and gRPC would send "
        f"TensorFlow's traffic between them through it ({', '.join(found.added[:3])}"
        f"{', ...' if len(found.added) > 3 else ''} not in no_proxy): the kit keeps its jobs "
        "off it (no_grpc_proxy); TensorFlow started without the kit hangs or crawls",
        "add the compute nodes' names to no_proxy where the proxy is exported (login nodes' "
        "profile), or unset the proxy variables in job scripts",
    )


def port_range(host: str, sysctl_dir: Path = ephemeral.SYSCTL_DIR) -> Finding:
    """The node's ephemeral port range against the kit's default port windows."""
    node = ephemeral.node_port_ranges(sysctl_dir)
    if node is None:
        return Finding("ports", WARN, f"cannot read {sysctl_dir}/ip_local_port_range")
    kernels, kernel_reserved = node
    error = ephemeral.default_range_clash(host, kernels, kernel_reserved)
    if error:
        return Finding("ports", FAIL, error.what, error.hint)
    span = f"{kernels.start}-{kernels.stop - 1}"
    return Finding("ports", OK, f"ephemeral ports {span} stay clear of the kit's windows")


def binds(paths: Sequence[str], environ: Mapping[str, str]) -> Finding:
    """Each of the site's file systems is there, from the node, and writable."""
    if not paths:
        return Finding(
            "binds", OK, "no paths given (name the site's file systems after --site-check)"
        )
    image = argv.container_image(environ)
    root = os.stat("/").st_dev
    missing, image_only, read_only = [], [], []
    for path in paths:
        if not os.path.isdir(path):
            missing.append(path)
        elif image and os.stat(path).st_dev == root:
            image_only.append(path)  # the image's own directory: nothing was bound on it
        elif not os.access(path, os.W_OK | os.X_OK):
            read_only.append(path)
    inside = f"inside the container {image}" if image else "on this node"
    fix = (
        argv.bind_fix(",".join(missing + image_only))
        if image
        else "mount them on every compute node"
    )
    if missing or image_only:
        found = [f"{', '.join(missing)} missing {inside}"] if missing else []
        found += [f"{', '.join(image_only)} only the image's own directory"] if image_only else []
        return Finding("binds", FAIL, "; ".join(found), fix)
    if read_only:
        return Finding(
            "binds",
            WARN,
            f"{', '.join(read_only)} not writable {inside}",
            "checkpoints and outputs need a writable shared path",
        )
    return Finding("binds", OK, f"{', '.join(paths)} there and writable {inside}")


def gpus(environ: Mapping[str, str], devices: Path = Path("/dev")) -> Finding:
    """The node's GPUs, and whether TensorFlow here would compute on them."""
    cards = sorted(devices.glob("nvidia[0-9]*"))
    given = environ.get("CUDA_VISIBLE_DEVICES")
    if not cards and given is None:
        return Finding("gpus", OK, "none on this node")
    if given == "":
        return Finding("gpus", OK, f"{len(cards)} on the node, none given to this step")
    ids = detect_node_gpus(given) or [str(i) for i in range(len(cards))]
    image = environ.get(cuda.IMAGE_VARIANT_VAR)
    variant = image or cuda.installed_variant()
    driver = variant == "gpu" and cuda.driver_found()
    names = cuda.sonames(cuda.build_versions()) if variant == "gpu" else []
    failures = cuda.load_failures(names, cuda.program_library_path(environ)) if driver else {}
    problem = cuda.diagnose(variant, ",".join(ids), driver, failures, in_image=bool(image))
    if problem is None:
        return Finding(
            "gpus",
            OK,
            f"GPUs {','.join(ids)}: the driver and TensorFlow's {len(names)} CUDA libraries load",
        )
    return Finding("gpus", WARN if variant != "gpu" else FAIL, problem)


def cpus(environ: Mapping[str, str]) -> Finding:
    """How many CPUs the task may run on: TensorFlow sizes its thread pools to them."""
    bound, online = len(os.sched_getaffinity(0)), os.cpu_count() or 1
    asked = environ.get("SLURM_CPUS_PER_TASK", "")
    if asked.isdigit() and bound < int(asked):
        return Finding(
            "cpus",
            WARN,
            f"bound to {bound} CPUs of the {asked} the step asked for",
            "check the CPU binding (srun --cpu-bind, TaskPlugin, TaskPluginParam)",
        )
    if bound == 1 and online > 1:
        return Finding(
            "cpus",
            WARN,
            f"bound to 1 of the node's {online} CPUs: TensorFlow's threads and "
            "its input pipeline share one core",
            "give jobs' tasks CPUs: srun -c N (--cpus-per-task), or a DefCpuPerGPU",
        )
    return Finding("cpus", OK, f"{bound} of {online} CPUs")


def tmpdir(environ: Mapping[str, str]) -> Finding:
    """The task's temporary directory (TMPDIR): writable, with room for TensorFlow's files."""
    base = environ.get("TMPDIR") or "/tmp"
    fix = "set TMPDIR to a node-local directory with room (inside the container too)"
    try:
        os.rmdir(tempfile.mkdtemp(prefix="tfslurm-sitecheck-", dir=base))
        free = shutil.disk_usage(base).free
    except OSError as err:
        return Finding("tmpdir", FAIL, f"{base} (TMPDIR) is not writable: {err.strerror}", fix)
    shown = f"{base}: {free / (1 << 30):.1f} GiB free"
    if free < TMP_FAIL_BYTES:
        return Finding("tmpdir", FAIL, shown, fix)
    if free < TMP_WARN_BYTES:
        return Finding("tmpdir", WARN, shown, fix)
    return Finding("tmpdir", OK, shown)


COPY_BYTES = 1_300_000_000  # the CPU image unpacked, where tfslurm-run did not say its image's


def mount_of(path: str, mountinfo: str) -> tuple[str, set[str]]:
    """The file system type and the mount options of the mount that holds path."""
    best, found = "", ("?", set())
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        point = parts[4].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, found = point, (rest.split()[0], set(parts[5].split(",")))
    return found


def copy_dir(environ: Mapping[str, str], mountinfo: str | None = None) -> Finding:
    """Where tfslurm-run copies the image on this node before a job (its copy_dir, else the
    first of TMPDIR or /tmp and /var/tmp on disk with room, else in memory): writable, exec,
    with room for the image unpacked; a warn where it is memory (tmpfs)."""
    if environ.get("TFSLURM_COPY") == "no":
        return Finding("copy", OK, "off (copy = no): jobs run straight from the SIF")
    need = int(environ.get("TFSLURM_COPY_BYTES") or COPY_BYTES)
    chosen = environ.get("TFSLURM_COPY_DIR")
    candidates = [chosen] if chosen else [environ.get("TMPDIR") or "/tmp", "/var/tmp"]
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    fix = "give tfslurm-run node-local disk with room: copy_dir (tfslurm_launcher_copy_dir)"
    seen: list[Finding] = []
    for base in candidates:
        try:
            os.rmdir(tempfile.mkdtemp(prefix="tfslurm-sitecheck-", dir=base))
            free = shutil.disk_usage(base).free
        except OSError as err:
            seen.append(Finding("copy", FAIL, f"{base} is not writable: {err.strerror}", fix))
            continue
        kind, options = mount_of(os.path.realpath(base), mountinfo)
        shown = f"{base}: {kind}, {free / 1e9:.1f} GB free for a {need / 1e9:.1f} GB copy"
        if "noexec" in options:
            seen.append(Finding("copy", FAIL, f"{base} is mounted noexec", fix))
        elif free < need:
            seen.append(Finding("copy", FAIL, shown, fix))
        elif kind in ("tmpfs", "ramfs"):
            seen.append(Finding("copy", WARN, f"{shown}: each job's copy is node memory", fix))
        else:
            return Finding("copy", OK, shown)
    warned = [f for f in seen if f.level == WARN]
    return warned[0] if warned else seen[0]


def clock(skew: float, host0: str) -> Finding:
    """This node's wall clock against rank 0's."""
    shown = f"{skew:+.3f} s against {host0}"
    fix = "synchronise the nodes' clocks (chrony or ntpd against one time source)"
    if abs(skew) >= SKEW_FAIL_S:
        return Finding("clock", FAIL, shown, fix)
    if abs(skew) >= SKEW_WARN_S:
        return Finding("clock", WARN, f"{shown}: logs and TensorBoard events disagree", fix)
    return Finding("clock", OK, shown)
