"""The thin command line: options in; print, explain or run out; exit status 2 on bad input."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import __version__, launch, roles, supervise
from .errors import ConfigError, bad_var
from .gpus import detect_node_gpus
from .resolve import Options, Plan, resolve
from .slurm_env import read_step_env

DEFAULT_CHIEF_TIMEOUT = 300
DEFAULT_WORKER_RESTARTS = 3

# option dest -> environment variable that sets it when the flag is absent (the flag wins)
ENV_VARS = {
    "strategy": "TFSLURM_STRATEGY",
    "num_ps": "TFSLURM_NUM_PS",
    "port_base": "TFSLURM_PORT_BASE",
    "gpus_per_task": "TFSLURM_GPUS_PER_TASK",
    "chief_timeout": "TFSLURM_CHIEF_TIMEOUT",
    "worker_restarts": "TFSLURM_WORKER_RESTARTS",
    "result_file": "TFSLURM_RESULT_FILE",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, not usage plus a message
        raise ConfigError(message, f"see {self.prog} --help")


def _count(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _port(text: str) -> int:
    port = _count(text)
    if not 1 <= port <= roles.MAX_PORT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port between 1 and {roles.MAX_PORT}")
    return port


CONVERTERS = {
    "strategy": str,
    "num_ps": _count,
    "port_base": _port,
    "gpus_per_task": _count,
    "chief_timeout": _count,
    "worker_restarts": _count,
    "result_file": str,
}
# Options of the run, not of the resolution: read_options returns them, Options does not hold them.
RUN_OPTIONS = {"chief_timeout": DEFAULT_CHIEF_TIMEOUT, "worker_restarts": DEFAULT_WORKER_RESTARTS,
               "result_file": None}  # fmt: skip


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
        help="first port on each node (default: derived from the job and step "
        "ids) [TFSLURM_PORT_BASE]",
    )
    parser.add_argument(
        "--gpus-per-task",
        type=_count,
        metavar="N",
        help="GPUs per GPU-using task (default: the node's GPUs split evenly; "
        "0 hides them) [TFSLURM_GPUS_PER_TASK]",
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


def explain(plan: Plan) -> str:
    """The whole cluster as a table, this task marked with '*'."""
    if plan.me is None:
        where = "outside Slurm" if plan.rank is None else "a one-task Slurm step"
        return f"{where}: no TF_CONFIG; the program runs as is\n"
    hosts = list(dict.fromkeys(t.host for t in plan.tasks))
    het = plan.me.component is not None
    groups = sorted({t.component for t in plan.tasks}) if het else []
    head = (
        f"strategy {plan.strategy}: {len(plan.tasks)} tasks on {len(hosts)} hosts"
        + (f" in het groups {','.join(map(str, groups))}" if het else "")
        + f", port base {plan.port_base}, rank 0 supervises on {plan.control_address}, "
        f"this task is rank {plan.rank} (*)"
        + (f" with SLURM_PROCID {plan.procid}" if plan.procid != plan.rank else "")
    )
    header = ("", "rank", "host", "local", "role", "index", "address", "gpus")
    header += ("group",) if het else ()
    rows = [header] + [
        (
            "*" if t.rank == plan.rank else "",
            str(t.rank),
            t.host,
            str(t.local_index),
            t.task_type,
            str(t.index),
            t.address,
            "untouched" if t.gpus is None else (t.gpus or "none"),
        )
        + ((str(t.component),) if het else ())
        for t in plan.tasks
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [head] + [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.append(
        "gpus: CUDA_VISIBLE_DEVICES each task gets; other hosts are shown as if they had this "
        "node's GPUs; 'untouched' keeps what Slurm set; 'none' hides all GPUs"
    )
    return "\n".join(lines) + "\n"


def config_json(plan: Plan) -> str:
    me = plan.me
    return json.dumps(
        {
            "TF_CONFIG": plan.tf_config,
            "CUDA_VISIBLE_DEVICES": plan.cuda_visible_devices,
            "role": plan.role,
            "strategy": plan.strategy,
            "rank": plan.rank,
            "procid": plan.procid,
            "num_tasks": len(plan.tasks) if plan.tasks else (1 if plan.rank is not None else None),
            "host": me.host if me else None,
            "address": me.address if me else None,
            "component": me.component if me else None,
        }
    )


def run(argv: Sequence[str] | None, environ: Mapping[str, str]) -> int:
    """Everything main() does, with errors raised rather than printed (for tests)."""
    ns = build_parser().parse_args(argv)
    chosen = read_options(ns, environ)
    run_options = {name: chosen.pop(name, default) for name, default in RUN_OPTIONS.items()}
    options = Options(**chosen)
    step = read_step_env(environ)
    node_gpus = []
    if step and step.num_tasks > 1 and not step.gpus_inherited:
        node_gpus = detect_node_gpus(step.cuda_visible_devices)
    plan = resolve(step, options, node_gpus)
    if ns.print_config:
        print(config_json(plan))
        return 0
    if ns.explain:
        sys.stdout.write(explain(plan))
        return 0
    if ns.program is None:
        raise ConfigError("no PROGRAM given", "usage: tfslurm-entry [OPTIONS] [--] PROGRAM [ARGS]")
    argv_ = launch.program_argv(ns.program, ns.args)
    launch.check_port_free(plan)
    env = launch.child_env(plan, environ)
    launch.check_open_files(plan)
    launch.check_result_file(plan, run_options["result_file"])
    me = plan.me
    if me is None:
        launch.log(launch.task_line(plan))
        launch.log_cpu_fallback(environ)
        launch.exec_program(argv_, env)  # no cluster to join: the program is the task
    with launch.task_tmpdir(me, environ) as tmpdir:
        env["TMPDIR"] = str(tmpdir)
        launch.log(launch.task_line(plan))
        launch.log_cpu_fallback(environ)
        return run_role(plan, argv_, env, tmpdir, **run_options)


def run_role(
    plan: Plan,
    argv: list[str],
    env: dict[str, str],
    tmpdir: Path,
    chief_timeout: int,
    worker_restarts: int,
    result_file: str | None,
) -> int:
    """Start this task's role under supervision (see supervise.py); its exit status."""
    me = plan.me
    servers = plan.strategy == "parameter-server"
    if me.rank == 0:
        members = {t.rank: t.host for t in plan.tasks[1:]}
        port = roles.port_of(plan.control_address)
        others_ended = None if servers else tmpdir / "others-ended"
        if others_ended:
            env[supervise.OTHERS_ENDED_VAR] = str(others_ended)
        expendable = {}
        if servers and worker_restarts > 0:
            expendable = {
                t.rank: f"worker {t.index}" for t in plan.tasks if t.task_type == "worker"
            }
        return supervise.run_head(
            argv, env, port, me.host, members, servers, chief_timeout, launch.log, others_ended,
            expendable, Path(result_file) if result_file else None,
        )  # fmt: skip
    if servers:
        return launch.run_server(me, env, plan.control_address, chief_timeout, worker_restarts)
    return supervise.run_member(
        me.rank, me.host, plan.control_address, chief_timeout, launch.log, argv, env
    )


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    try:
        return run(argv, os.environ if environ is None else environ)
    except ConfigError as err:
        print(f"tfslurm-entry: error: {err}", file=sys.stderr)
        return err.exit_code
