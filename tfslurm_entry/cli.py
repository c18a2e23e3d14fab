"""The thin command line: options in; print, explain or run out; exit status 2 on bad input."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import __version__, launcher, options
from .errors import ConfigError, bad_var
from .log import log
from .resolve import Options, resolve
from .resolve.gpus import detect_node_gpus
from .resolve.show import config_json, explain
from .resolve.slurm_env import read_step_env
from .step import secret
from .task import cuda, mount
from .task.run import Settings, run_task

# Every option, defined on the field it sets (options.py): the resolution's, then the run's.
OPTIONS = options.options_of(Options, Settings)
_RUN = {f.name for f in dataclasses.fields(Settings)}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, not usage plus a message
        raise ConfigError(message, f"see {self.prog} --help")


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
        "--check-mount",
        action="store_true",
        help="say whether Slurm's SIGTERM would unmount this image (a squashfuse that ends on "
        "it: exit 1) or not (exit 0); tfslurm-run asks it before a job, to copy the image onto "
        "each node where it would",
    )
    mode.add_argument(
        "--install-launcher",
        metavar="DIR",
        help="write tfslurm-run, the launcher for batch jobs, into DIR (e.g. ~/bin) and exit: "
        "apptainer run IMAGE --install-launcher ~/bin",
    )
    mode.add_argument(
        "--make-step-key",
        action="store_true",
        help="write a private key to ~/.config/tfslurm/step-key (0600) unless one is there, and "
        "exit: steps not run through tfslurm-run (which gives each job a fresh secret) then "
        "each get a secret of their own from it, and rank 0 counts only the tasks that prove "
        "it; your home must be the same on every node",
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
    mode.add_argument(
        "--site-check-observer",
        action="store_true",
        help="tfslurm-run --site-check starts this where it runs (the login node): it prints "
        "HOST:PORT, the check's rank 0 sends it the tasks' ports, it says how many answer "
        "from here; it ends after that or in 15 minutes",
    )
    options.add_arguments(parser, OPTIONS)
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
    """Options from flags, falling back to TFSLURM_* variables; the rest keep their defaults."""
    first = environ.get("SLURM_PROCID", "0") == "0"  # a renamed variable: said once a step
    try:
        return options.chosen(vars(ns), OPTIONS, environ, log if first else lambda _: None)
    except options.BadVariable as bad:
        var, value, why = bad.args
        raise bad_var(
            var, value, f"is invalid: {why}", "fix or unset it; see tfslurm-entry --help"
        ) from None


def run(argv: Sequence[str] | None, environ: Mapping[str, str]) -> int:
    """Everything main() does, with errors raised rather than printed (for tests)."""
    ns = build_parser().parse_args(argv)
    if ns.check_gpu:
        return cuda.report()
    if ns.check_mount:
        return mount.report()
    if ns.install_launcher is not None:
        target = launcher.install(ns.install_launcher)
        print(
            f"wrote {target} ({launcher.LAUNCHER.name} {__version__}); in a batch script: "
            f"{target.name} IMAGE.sif train.py ARGS ({target.name} --help)"
        )
        return 0
    if ns.make_step_key:
        path, made = secret.make_key(Path.home())
        said = "wrote" if made else "kept the key already at"
        print(f"{said} {path}: steps without TFSLURM_STEP_SECRET derive their secret from it")
        return 0
    if ns.site_check_observer:
        from .sitecheck import outside  # an admin's mode: no job's task imports it

        return outside.listen(environ, outside.LISTEN_S)
    chosen = read_options(ns, environ)
    timeout = chosen.get("chief_timeout")
    settings = Settings(**{name: chosen.pop(name) for name in _RUN & chosen.keys()})
    step = read_step_env(environ)
    if ns.site_check:
        from .sitecheck import check as sitecheck  # an admin's mode: no job's task imports it

        check_in = sitecheck.CHECK_IN_S if timeout is None else timeout
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
