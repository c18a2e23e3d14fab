"""The thin command line: options in; print, explain or run out; exit status 2 on bad input."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence

from . import __version__
from .errors import ConfigError, bad_var
from .resolve import Options, network, ports, resolve, roles
from .resolve.gpus import detect_node_gpus
from .resolve.show import config_json, explain
from .resolve.slurm_env import read_step_env
from .run import Settings, cuda, run_task, sitecheck

DEFAULT_CHIEF_TIMEOUT = Settings.chief_timeout
DEFAULT_WORKER_RESTARTS = Settings.worker_restarts
DEFAULT_END_BARRIER = Settings.end_barrier

# option dest -> environment variable that sets it when the flag is absent (the flag wins)
ENV_VARS = {
    "strategy": "TFSLURM_STRATEGY",
    "num_ps": "TFSLURM_NUM_PS",
    "port_base": "TFSLURM_PORT_BASE",
    "gpus_per_task": "TFSLURM_GPUS_PER_TASK",
    "network": "TFSLURM_NETWORK",
    "chief_timeout": "TFSLURM_CHIEF_TIMEOUT",
    "worker_restarts": "TFSLURM_WORKER_RESTARTS",
    "result_file": "TFSLURM_RESULT_FILE",
    "require_gpu": "TFSLURM_REQUIRE_GPU",
    "end_barrier": "TFSLURM_END_BARRIER",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, not usage plus a message
        raise ConfigError(message, f"see {self.prog} --help")


def _count(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _switch(text: str) -> bool:
    if text.lower() in ("1", "yes", "true", "on"):
        return True
    if text.lower() in ("0", "no", "false", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not 1 or 0 (yes or no)")


def _port(text: str) -> int:
    port = _count(text)
    if not 1 <= port <= ports.MAX_PORT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port between 1 and {ports.MAX_PORT}")
    return port


def _network(text: str) -> str:
    try:
        network.kind(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(
            f"{err.what.removeprefix('--network ')}: {err.hint}"
        ) from None
    return text


CONVERTERS = {
    "strategy": str,
    "num_ps": _count,
    "port_base": _port,
    "gpus_per_task": _count,
    "network": _network,
    "chief_timeout": _count,
    "worker_restarts": _count,
    "result_file": str,
    "require_gpu": _switch,
    "end_barrier": _count,
}
# Options of the run, not of the resolution: read_options returns them, Settings holds them.
RUN_OPTIONS = ("chief_timeout", "worker_restarts", "result_file", "require_gpu", "end_barrier")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tfslurm-entry",
        description="Inside a Slurm job step: build TF_CONFIG and CUDA_VISIBLE_DEVICES for this "
        "task, then start its role (run PROGRAM, or a TensorFlow server for ps/worker tasks of "
        "a parameter-server job).",
        epilog="Each option can also be set by its TFSLURM_* variable; the flag wins.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--print-config", action="store_true", help="print this task's resolution as JSON and exit"
    )
    mode.add_argument(
        "--explain", action="store_true", help="print the whole cluster as a table and exit"
    )
    mode.add_argument(
        "--check-gpu",
        action="store_true",
        help="check that every CUDA library TensorFlow loads for a GPU loads here, and exit "
        "(0: all do)",
    )
    mode.add_argument(
        "--site-check",
        action="store_true",
        help="for administrators, as a step of one task per node (srun -N NODES "
        "--ntasks-per-node=1 ...): check what would break or slow a job on each node (names "
        "and ports between the nodes, proxy, ephemeral ports, the paths given as arguments, "
        "GPUs, CPU binding, clocks, TMPDIR); rank 0 prints one table; exit 1 if a node would "
        "break a job",
    )
    parser.add_argument(
        "--strategy",
        choices=roles.STRATEGIES,
        help="multi-worker (default) or parameter-server [TFSLURM_STRATEGY]",
    )
    parser.add_argument(
        "--ps",
        dest="num_ps",
        type=_count,
        metavar="N",
        help="parameter servers in a parameter-server job (default 1) [TFSLURM_NUM_PS]",
    )
    parser.add_argument(
        "--port-base",
        type=_port,
        metavar="P",
        help="first port on each node, overriding the default: the ports srun reserved for "
        "the step (SLURM_STEP_RESV_PORTS, slurm.conf MpiParams=ports), else a window of "
        f"{ports.WINDOW} in {ports.DEFAULT_RANGE.start}-{ports.DEFAULT_RANGE.stop - 1} "
        "picked from the job and step ids [TFSLURM_PORT_BASE]",
    )
    parser.add_argument(
        "--gpus-per-task",
        type=_count,
        metavar="N",
        help="GPUs per GPU-using task (default: the node's GPUs split evenly; "
        "0 hides them) [TFSLURM_GPUS_PER_TASK]",
    )
    parser.add_argument(
        "--network",
        type=_network,
        metavar="NETWORK",
        help="the network TensorFlow's and the kit's connections between tasks use: the "
        "nodes' names there as a pattern made from Slurm's ('{host}-ib' gives c1-ib for node "
        "c1), its interface name (ib0) or its subnet (10.1.0.0/16), each node's own address "
        "there exchanged at start-up (default: Slurm's node names) [TFSLURM_NETWORK]",
    )
    parser.add_argument(
        "--chief-timeout",
        type=_count,
        metavar="S",
        help="every task waits at most S seconds for the step's other tasks to start; then "
        "the step is stopped, naming the missing rank "
        f"(default {DEFAULT_CHIEF_TIMEOUT}) [TFSLURM_CHIEF_TIMEOUT]",
    )
    parser.add_argument(
        "--worker-restarts",
        type=_count,
        metavar="N",
        help="parameter-server jobs: a worker server that dies is restarted in place up to N "
        "times, and the step goes on without a worker that is lost for good while the chief, "
        f"every ps and another worker remain; 0 fails the step at the first loss "
        f"(default {DEFAULT_WORKER_RESTARTS}) [TFSLURM_WORKER_RESTARTS]",
    )
    parser.add_argument(
        "--result-file",
        metavar="PATH",
        help="rank 0 writes how the step ended there, one line starting with completed, "
        "interrupted (a task was killed or lost: a requeue may help) or failed "
        "[TFSLURM_RESULT_FILE]",
    )
    parser.add_argument(
        "--require-gpu",
        action="store_const",
        const=True,
        help="a task whose role computes (every multi-worker task, a parameter-server worker) "
        "stops with an error before it starts when TensorFlow would run on the CPU (no GPUs "
        "given, no driver, a CUDA library missing, the CPU image) [TFSLURM_REQUIRE_GPU=1]",
    )
    parser.add_argument(
        "--end-barrier",
        type=_count,
        metavar="S",
        help="multi-worker jobs: a Python program that ends normally waits at most S seconds "
        "for every other task's program to end too, and rank 0's leaves last, so TensorFlow "
        "reports no task as crashed; a failing one does not wait; 0 turns it off "
        f"(default {DEFAULT_END_BARRIER}) [TFSLURM_END_BARRIER]",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "program",
        nargs="?",
        metavar="PROGRAM",
        help="what to run; a .py file runs with this Python",
    )
    parser.add_argument(
        "args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for PROGRAM"
    )
    return parser


def read_options(ns: argparse.Namespace, environ: Mapping[str, str]) -> dict:
    """Options from flags, falling back to TFSLURM_* variables, then to the defaults."""
    values = {}
    for dest, var in ENV_VARS.items():
        value = getattr(ns, dest)
        if value is None and environ.get(var):
            try:
                value = CONVERTERS[dest](environ[var])
            except argparse.ArgumentTypeError as err:
                raise bad_var(
                    var,
                    environ[var],
                    f"is invalid: {err}",
                    "fix or unset it; see tfslurm-entry --help",
                ) from None
        if value is not None:
            values[dest] = value
    return values


def run(argv: Sequence[str] | None, environ: Mapping[str, str]) -> int:
    """Everything main() does, with errors raised rather than printed (for tests)."""
    ns = build_parser().parse_args(argv)
    if ns.check_gpu:
        return cuda.report()
    chosen = read_options(ns, environ)
    check_in = chosen.get("chief_timeout", sitecheck.CHECK_IN_S)
    settings = Settings(**{name: chosen.pop(name) for name in RUN_OPTIONS if name in chosen})
    step = read_step_env(environ)
    if ns.site_check:
        paths = [ns.program, *ns.args] if ns.program else []
        return sitecheck.run(resolve(step, Options(**chosen)), paths, environ, check_in)
    node_gpus = []
    if step and step.num_tasks > 1 and not step.gpus_inherited:
        node_gpus = detect_node_gpus(step.cuda_visible_devices)
    plan = resolve(step, Options(**chosen), node_gpus)
    if ns.print_config:
        print(config_json(plan))
        return 0
    if ns.explain:
        sys.stdout.write(explain(plan, environ))
        return 0
    if ns.program is None:
        raise ConfigError("no PROGRAM given", "usage: tfslurm-entry [OPTIONS] [--] PROGRAM [ARGS]")
    return run_task(plan, ns.program, ns.args, environ, settings)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    try:
        return run(argv, os.environ if environ is None else environ)
    except ConfigError as err:
        print(f"tfslurm-entry: error: {err}", file=sys.stderr)
        return err.exit_code
