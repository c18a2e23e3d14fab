"""Before anything starts: every check that can fail, the role's environment, the task's ports,
a private TMPDIR.

A task that cannot run says so in one line and exits here (2 for bad input, 75 for a port taken
right now), before it starts a program, so that no task of the step is left half-started.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError, TransientError
from ..log import log
from ..resolve import Plan, Task, network, ports, proxy, roles
from ..resolve.gpus import uses_gpus
from ..resolve.roles import port_of
from ..step import control, reach
from . import cuda, keras, mount

# Linux refuses (E2BIG) an execve whose single "NAME=value" string is this long or longer.
MAX_ENV_STRING = 128 * 1024
# Where the node says which local ports outgoing connections get (and which they never get).
SYSCTL_DIR = Path("/proc/sys/net/ipv4")


class Prepared(NamedTuple):
    argv: list[str]
    env: dict[str, str]
    """the program's environment"""
    notes: tuple[str, ...]
    """what the task says before it starts: rank 0 on the proxy and Keras, any task on its
    GPUs (check_gpus)"""


def prepare(
    plan: Plan,
    program: str,
    args: Sequence[str],
    environ: Mapping[str, str],
    result_file: str | None,
    require_gpu: bool,
) -> Prepared:
    """Every check, in the order a user should meet them; the program's argv and environment."""
    argv = program_argv(program, args, environ)
    check_network_name(plan)
    check_ephemeral_range(plan)
    env = child_env(plan, environ)
    extra, notes = distributed_env(plan, environ)
    env.update(extra)
    check_open_files(plan)
    check_result_file(plan, result_file)
    gpu_line = check_gpus(plan, env, require_gpu)
    notes = (*notes, gpu_line) if gpu_line else tuple(notes)
    if plan.rank == 0 and (exposed := mount.note()):
        notes = (*notes, exposed)
    return Prepared(argv, env, notes)


def check_gpus(plan: Plan, environ: Mapping[str, str], require: bool) -> str | None:
    """The line this task logs about its GPUs, if any (task/cuda.py). With require
    (--require-gpu), a task whose role computes and that would run on the CPU stops here."""
    me = plan.me
    wants = require and (me is None or uses_gpus(me.task_type, plan.strategy))
    line = cuda.check(me.gpus if me else None, environ, wants)
    if line and wants:
        who = f"rank {me.rank} on {me.host}: " if me else ""
        raise ConfigError(
            f"{who}{line}",
            "a GPU job must not train on the CPU (--require-gpu, TFSLURM_REQUIRE_GPU)",
        )
    return line


def child_env(plan: Plan, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the role runs with: TF_CONFIG and CUDA_VISIBLE_DEVICES from the plan."""
    env = dict(environ)
    in_slurm = plan.rank is not None
    if in_slurm and "TF_CONFIG" in env:
        log("warning: TF_CONFIG inherited from the submitting shell is replaced by the step's own")
        del env["TF_CONFIG"]
    env.update(tf_config_env(plan))
    if plan.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = plan.cuda_visible_devices
        env.update(cuda.no_gpu_env(plan.cuda_visible_devices, environ))
    library_path = cuda.library_path(env)
    if library_path is not None:
        env["LD_LIBRARY_PATH"] = library_path
    return env


def tf_config_env(plan: Plan) -> dict[str, str]:
    """{"TF_CONFIG": the plan's, as one JSON line}, or {} outside a step of several tasks."""
    tf_config = plan.tf_config
    if tf_config is None:
        return {}
    text = json.dumps(tf_config, separators=(",", ":"))
    if len("TF_CONFIG=") + len(text) >= MAX_ENV_STRING:
        raise ConfigError(
            f"TF_CONFIG for {len(plan.tasks)} tasks is {len(text)} bytes, over Linux's "
            f"{MAX_ENV_STRING}-byte limit for one environment variable",
            "run fewer, larger tasks (more GPUs or threads per task)",
        )
    return {"TF_CONFIG": text}


def distributed_env(
    plan: Plan, environ: Mapping[str, str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """What a task of a distributed step needs around TensorFlow: gRPC between the tasks off
    any proxy (resolve/proxy.py), and a tf.keras whose Model.fit runs under the strategies
    (keras.py); and what rank 0 says about it, once for the step."""
    if plan.me is None:
        return {}, ()
    found = proxy.for_tasks(environ, plan.tasks)
    choice = keras.choose(environ, keras.installed())
    notes = (proxy.describe(found), choice.line) if plan.me.rank == 0 else ()
    return {**(found.env if found else {}), **choice.env}, tuple(n for n in notes if n)


def program_argv(
    program: str, args: Sequence[str], environ: Mapping[str, str] = os.environ
) -> list[str]:
    """argv for the user's program; a .py file runs with this Python."""
    if program.endswith(".py"):
        if not os.path.isfile(program):
            raise missing_program(program, os.getcwd(), environ)
        return [sys.executable, program, *args]
    path = shutil.which(program)
    if path is None:
        raise ConfigError(
            f"program {program!r} not found on PATH", "give its full path or a .py file"
        )
    return [path, *args]


def missing_program(program: str, cwd: str, environ: Mapping[str, str]) -> ConfigError:
    """A program file that is not there. Inside Apptainer the likeliest cause is a path that
    exists on the node but is not bound into the container: by default Apptainer binds only
    $HOME, /tmp and the working directory, not a cluster's /data or /project."""
    where = f"(working directory {cwd})"
    image = container_image(environ)
    if not image:
        return ConfigError(
            f"program {program!r} not found {where}",
            "give a path that exists on every node, e.g. on the shared file system",
        )
    top = "/" + Path(os.path.normpath(os.path.join(cwd, program))).parts[1]
    return ConfigError(
        f"program {program!r} not found inside the container {image} {where}",
        f"if it exists on the node, its directory is not bound into the container (Apptainer "
        f"binds only $HOME, /tmp and the working directory by default): {bind_fix(top)}",
    )


def container_image(environ: Mapping[str, str]) -> str | None:
    """The image this process runs in, as Apptainer (or Singularity) says; None outside one."""
    return environ.get("APPTAINER_CONTAINER") or environ.get("SINGULARITY_CONTAINER")


def bind_fix(top: str) -> str:
    """The three ways a path of the node gets into an Apptainer container."""
    return (
        f"bind it with `apptainer run -B {top} ...`, export APPTAINER_BIND={top}, or ask for a "
        f"`bind path = {top}` line in the site's apptainer.conf"
    )


def check_network_name(plan: Plan) -> None:
    """With --network: this node's name on that network is one of this node's addresses.
    Otherwise every peer's connection to this task would fail or reach another machine, and
    the step would stop at the reach check, naming the peers but not the cause."""
    me = plan.me
    if me is None or plan.network is None or network.exchanged(plan.network):
        return  # an interface or a subnet: network_address() checks it
    name = roles.host_of(me.address)
    fix = (
        f"check --network {plan.network!r} against the nodes' names on that network "
        f"(`getent hosts {name}` on {me.host}), or unset it to use Slurm's node names"
    )
    problem = name_problem(name, me.host)
    if problem:
        raise ConfigError(
            f"{name}, the name of {me.host} on the network --network {plan.network!r} picks, "
            f"{problem}",
            fix,
        )


def network_address(plan: Plan) -> str | None:
    """This node's address on the interface or in the subnet --network names, which the task
    sends with its check-in (resolve/network.py); None for Slurm's names or a pattern. A node
    without one stops here, before anything starts."""
    me = plan.me
    if me is None or not network.exchanged(plan.network):
        return None
    import psutil  # here: only these steps pay for its import at start-up

    found = {
        name: [a.address for a in addresses if a.family == socket.AF_INET]
        for name, addresses in psutil.net_if_addrs().items()
    }
    fix = (
        f"check --network against the nodes' interfaces (`ip -br addr` on {me.host}), or unset "
        "it to use Slurm's node names"
    )
    with_ip = [f"{name} {addresses[0]}" for name, addresses in found.items() if addresses]
    if network.kind(plan.network) == network.INTERFACE:
        if plan.network not in found:
            raise ConfigError(
                f"host {me.host} has no network interface {plan.network!r} (--network); its "
                f"interfaces with an IPv4 address: {', '.join(with_ip)}",
                fix,
            )
        if not found[plan.network]:
            raise ConfigError(
                f"interface {plan.network} of host {me.host} has no IPv4 address (--network)", fix
            )
        return found[plan.network][0]
    subnet = ipaddress.ip_network(plan.network, strict=False)
    mine = [a for addresses in found.values() for a in addresses]
    inside = [a for a in mine if ipaddress.ip_address(a) in subnet]
    if not inside:
        raise ConfigError(
            f"no address of host {me.host} is in {plan.network} (--network); its interfaces "
            f"with an IPv4 address: {', '.join(with_ip)}",
            fix,
        )
    return inside[0]


def network_env(plan: Plan, environ: Mapping[str, str]) -> dict[str, str]:
    """What changes in a role's environment once every node's address is known: TF_CONFIG,
    and the proxy exemption of the step's hosts, now addresses."""
    found = proxy.for_tasks(environ, plan.tasks)
    return {**tf_config_env(plan), **(found.env if found else {})}


def name_problem(name: str, host: str) -> str | None:
    """Why peers that connect to `name` would not reach this node (host), or None: the name
    does not resolve here, or to none of this node's own addresses."""
    try:
        found = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:  # UnicodeError: a label over 63 characters
        why = err.strerror if isinstance(err, socket.gaierror) else "not a valid DNS name"
        return f"does not resolve on {host} ({why})"
    addresses = {(family, info[0]) for family, _, _, _, info in found}
    if not any(_is_local(family, address) for family, address in addresses):
        shown = ", ".join(sorted(address for _, address in addresses))
        return f"resolves to {shown}: not an address of {host}"
    return None


def _is_local(family: int, address: str) -> bool:
    """Whether the address is this machine's: only then can a socket bind to it."""
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((address, 0))
    except OSError:
        return False
    return True


def check_ephemeral_range(plan: Plan, sysctl_dir: Path = SYSCTL_DIR) -> None:
    """The kernel gives outgoing connections local ports from its ephemeral range; one that
    lands on a task's port before the task listens makes that port busy. The default ports
    come from a range below Linux's default ephemeral range: refuse on a node whose ephemeral
    range reaches into it. Ports the user or Slurm chose get a warning, once per node."""
    me = plan.me
    node = node_port_ranges(sysctl_dir)
    if me is None or node is None:
        return
    ephemeral, kernel_reserved = node
    span = f"{ephemeral.start}-{ephemeral.stop - 1}"
    if plan.ports.kind == ports.DEFAULT:
        error = default_range_clash(me.host, ephemeral, kernel_reserved)
        if error:
            raise error
        return
    if me.local_index == 0:  # one line per node
        here = sum(1 for t in plan.tasks if t.host == me.host)
        if roles.host_of(plan.control_address) == roles.host_of(me.address):
            here += 1
        clash = ports.ephemeral_clash(plan.ports.numbers[:here], ephemeral, kernel_reserved)
        if clash:
            log(
                f"warning: ports {ports.format_ranges(clash)} on {me.host} ({plan.ports.source}) "
                f"lie in its ephemeral range {span} (net.ipv4.ip_local_port_range): an outgoing "
                "connection can take one before its task listens"
            )


def default_range_clash(
    host: str, ephemeral: range, kernel_reserved: Sequence[range]
) -> ConfigError | None:
    """The error for a node whose ephemeral range reaches into the default ports' range."""
    clash = ports.ephemeral_clash(ports.DEFAULT_RANGE, ephemeral, kernel_reserved)
    if not clash:
        return None
    span = f"{ephemeral.start}-{ephemeral.stop - 1}"
    low, high = ports.DEFAULT_RANGE.start, ports.DEFAULT_RANGE.stop - 1
    return ConfigError(
        f"host {host}'s ephemeral ports {span} (net.ipv4.ip_local_port_range) reach into "
        f"{low}-{high}, where the default task ports come from: an outgoing connection "
        f"could take a task's port ({ports.format_ranges(clash)} not reserved)",
        f'on the nodes, run `sysctl -w net.ipv4.ip_local_port_range="32768 60999"` (Linux\'s '
        f"default) or `sysctl -w net.ipv4.ip_local_reserved_ports={low}-{high}`; or have "
        "Slurm reserve ports (MpiParams=ports=LO-HI in slurm.conf), or set --port-base "
        f"(TFSLURM_PORT_BASE) outside {span}",
    )


def node_port_ranges(sysctl_dir: Path = SYSCTL_DIR) -> tuple[range, list[range]] | None:
    """This node's ephemeral port range and the ports excluded from it; None if unreadable."""
    try:
        low, high = (int(n) for n in (sysctl_dir / "ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return None
    try:
        reserved = (sysctl_dir / "ip_local_reserved_ports").read_text().strip()
        excluded = ports.parse_ranges(reserved) if reserved else []
    except (OSError, ValueError):
        excluded = []
    return range(low, high + 1), excluded


class Held(NamedTuple):
    control: socket.socket | None
    """rank 0's control socket, already listening (None for any other task)"""
    reach: reach.Reach
    """the task's side of the start-up check: its port, listening until the program starts"""


@contextlib.contextmanager
def hold_ports(plan: Plan) -> Iterator[Held]:
    """This task's ports, held from before its program starts until the task ends.

    The task's own port is for TensorFlow, which listens there once the program runs; until
    then the task listens there itself (reach.Guard: its peers check that they reach it), and
    for the whole task it is also claimed, node-wide, with an abstract Unix socket named after
    it: another task of the kit on the node (another step whose ports collide with this one's)
    then finds it taken before its program starts, not when its TensorFlow server fails to bind
    minutes later.
    """
    me = plan.me
    port = port_of(me.address)
    with contextlib.ExitStack() as held:
        held.enter_context(_claim(plan, me, port))
        try:
            guard = held.enter_context(reach.Guard(port, plan.step, me.rank, len(plan.tasks)))
        except OSError as err:
            raise _busy(plan, me, port, err.strerror) from None
        listener = None
        if me.rank == 0:
            control_port = port_of(plan.control_address)
            try:
                listener = control.listen(control_port, len(plan.tasks) - 1)
            except OSError as err:
                raise _busy(plan, me, control_port, err.strerror) from None
            held.enter_context(listener)
        targets = [(t.rank, t.address) for t in roles.peers(plan.tasks, plan.strategy, me.rank)]
        yield Held(listener, reach.Reach(guard, targets, plan.step))


def _claim(plan: Plan, me: Task, port: int) -> socket.socket:
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(f"\0tfslurm-port-{port}")
    except OSError:
        claim.close()
        raise _busy(plan, me, port, "another tfslurm-entry task on this node claimed it") from None
    return claim


def _busy(plan: Plan, me: Task, port: int, why: str) -> TransientError:
    """A port taken right now is a clash of the moment, not a mistake in the job."""
    count = max(t.local_index for t in plan.tasks) + 2  # the busiest node's tasks + control
    choose = (
        "to choose ports yourself, set --port-base (TFSLURM_PORT_BASE) to a free range of "
        f"{count} ports"
    )
    if plan.ports.kind == ports.SLURM:
        choose = "ask the administrators what else uses the ports Slurm reserves (MpiParams)"
    return TransientError(
        f"port {port} on host {me.host} (rank {me.rank}, {me.host}:{port}, "
        f"{plan.ports.source}) is taken: {why}",
        "another job or step on this node has it, or had it a moment ago: this is transient "
        f"(exit {TransientError.exit_code}); requeue or resubmit the job; {choose}",
    )


def check_open_files(plan: Plan) -> None:
    """Rank 0 holds a control connection to every other task: make room for them before
    anything starts (control.raise_open_files_limit says why and when it cannot)."""
    me = plan.me
    if me is not None and me.rank == 0 and len(plan.tasks) > 1:
        control.raise_open_files_limit(len(plan.tasks) - 1, me.host)


def check_result_file(plan: Plan, path: str | None) -> None:
    """Rank 0 writes the step's verdict when the step ends: find out now, not then, that it
    cannot (the batch script would read no verdict after a whole training run)."""
    me = plan.me
    if path is None or me is None or me.rank != 0:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(
            f"cannot write the step's result to {path} (--result-file, TFSLURM_RESULT_FILE) on "
            f"host {me.host}: {directory} is not a writable directory",
            "create it first, or give a path on the shared file system the job can write",
        )


@contextlib.contextmanager
def task_tmpdir(me: Task, environ: Mapping[str, str]) -> Iterator[Path]:
    """A private temporary directory for this task's role, removed when the role ends.

    The program gets it as TMPDIR, so what TensorFlow and the program leave in the temporary
    directory (autograph's generated files, scratch checkpoints of non-chief workers) goes
    with it, even when the program is killed. Only an entrypoint killed with it leaves it
    behind: Slurm's job_container/tmpfs plugin (a private /tmp per job) covers that case.
    """
    base = environ.get("TMPDIR") or "/tmp"
    job, step = environ.get("SLURM_JOB_ID", "0"), environ.get("SLURM_STEP_ID", "0")
    try:
        path = Path(tempfile.mkdtemp(prefix=f"tfslurm-{job}.{step}-rank{me.rank}-", dir=base))
    except OSError as err:
        raise ConfigError(
            f"cannot create a temporary directory in {base} (TMPDIR) on host {me.host}: "
            f"{err.strerror}",
            "set TMPDIR to a writable directory on the node (inside the container too)",
        ) from None
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
