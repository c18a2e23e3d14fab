"""A program in the image started without the kit's entrypoint, in a Slurm step of several
tasks: the trap under every runtime that does not run an image's entrypoint (Charliecloud's
ch-run never does, Slurm's --container replaces the bundle's command, pyxis does not unless
asked, `apptainer exec` skips the runscript, `podman run --entrypoint` replaces it). Without
TF_CONFIG, MultiWorkerMirroredStrategy makes a cluster of one: every task trains alone, the
step "works", and nothing says so.

So every Python the image starts runs `arm` from a .pth file (PTH_LINE, written into the
image's site-packages by `write_pth`); in a step of several tasks with no TF_CONFIG it has
after_import.py change MultiWorkerMirroredStrategy's start-up (nothing else, and nothing at all
until the program imports TensorFlow's strategy): a strategy made from TF_CONFIG (no cluster
resolver given: SlurmClusterResolver users are not concerned) stops every task before training
(exit 2), each saying the same one line: what happened and the fix for the runtime it finds
itself in.

Standard library only: every Python in the image imports this module in such a step.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from .after_import import change_on_import

STRATEGY_MODULE = "tensorflow.python.distribute.collective_all_reduce_strategy"
PTH_NAME = "tfslurm-unstarted.pth"
# Cheap where it does not apply: `os` is imported already, the module only in a step of several
# tasks without TF_CONFIG. A line of a .pth file that starts with "import" is executed.
PTH_LINE = (
    "import os; os.environ.get('SLURM_STEP_NUM_TASKS', os.environ.get('SLURM_NTASKS', '1')) "
    "not in ('', '0', '1') and 'TF_CONFIG' not in os.environ and "
    "__import__('tfslurm_entry.inprogram.unstarted').inprogram.unstarted.arm()\n"
)
EXIT = 2
ENTRY = "tfslurm-entry"
# The runtime the program runs in (a variable it sets in the container), and how its line runs
# the entrypoint. First match wins: Slurm's --container may run ch-run (its oci.conf recipe).
RUNTIMES: tuple[tuple[str, str, str], ...] = (
    (
        "SLURM_CONTAINER",
        "Slurm's --container",
        f"Slurm gives the bundle the task's command: srun --container=BUNDLE {ENTRY} PROGRAM ARGS",
    ),
    (
        "PYXIS_VERSION",
        "enroot + pyxis",
        f"pyxis does not run the image's entrypoint: srun --container-image=IMAGE {ENTRY} "
        "PROGRAM ARGS (or --container-entrypoint)",
    ),
    (
        "CH_RUNNING",
        "Charliecloud",
        "ch-run never runs the image's entrypoint: srun ch-run --set-env --cd $PWD IMAGE -- "
        f"{ENTRY} PROGRAM ARGS (--set-env: the image's PATH, where {ENTRY} is)",
    ),
    (
        "container=podman",
        "Podman",
        "podman runs the image's entrypoint unless --entrypoint replaces it: srun podman run "
        "-e 'SLURM_*' --network host IMAGE PROGRAM ARGS",
    ),
    (
        "APPTAINER_CONTAINER",
        "Apptainer",
        "apptainer exec does not run the image's runscript: srun apptainer run IMAGE PROGRAM "
        f"ARGS, or apptainer exec IMAGE {ENTRY} PROGRAM ARGS",
    ),
)


def runtime(environ: Mapping[str, str]) -> tuple[str, str]:
    """The runtime the environment says it is in, and its fix (a generic one if none)."""
    for marker, name, fix in RUNTIMES:
        key, _, value = marker.partition("=")
        if key in environ and (not value or environ[key] == value):
            return name, fix
    return "", f"start it through the image's entrypoint: {ENTRY} PROGRAM ARGS"


def message(environ: Mapping[str, str]) -> str:
    """Each task's one line."""
    tasks = environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS", "?")
    name, fix = runtime(environ)
    where = f"under {name}" if name else "here"
    return (
        f"tfslurm: error: this program makes a MultiWorkerMirroredStrategy in a Slurm step of "
        f"{tasks} tasks without TF_CONFIG: the kit's entrypoint did not start it, and each task "
        f"would train alone; stopped before training (exit {EXIT}). {where[0].upper()}"
        f"{where[1:]}: {fix}"
    )


_armed = False


def arm(environ: Mapping[str, str] = os.environ) -> None:
    """Watch for the strategy (from the .pth file, in a step of several tasks); once, though a
    venv's site-packages is read twice (lib and its lib64 link: each runs the .pth)."""
    global _armed
    if not _armed:
        _armed = True
        change_on_import({STRATEGY_MODULE: lambda module: _guard(module, environ)})


def _guard(module: ModuleType, environ: Mapping[str, str]) -> None:
    """Stop a MultiWorkerMirroredStrategy made from TF_CONFIG while there is none."""
    extended = getattr(module, "CollectiveAllReduceExtended", None)
    if extended is None:
        return
    made = extended.__init__

    def __init__(self, container_strategy, cluster_resolver, *args, **kwargs):
        devices = kwargs.get("devices", args[1] if len(args) > 1 else None)  # local: not ours
        if cluster_resolver is None and devices is None and "TF_CONFIG" not in environ:
            # Every task says it: the first to stop may end the others (srun
            # --kill-on-bad-exit) before task 0 would have.
            print(message(environ), file=sys.stderr, flush=True)
            raise SystemExit(EXIT)
        made(self, container_strategy, cluster_resolver, *args, **kwargs)

    extended.__init__ = __init__


def write_pth(site_packages: str) -> Path:
    """The .pth file that arms this in every Python of the image (the Dockerfile calls it)."""
    path = Path(site_packages) / PTH_NAME
    path.write_text(PTH_LINE)
    return path


if __name__ == "__main__":  # python -m tfslurm_entry.inprogram.unstarted SITE_PACKAGES
    print(write_pth(sys.argv[1]))
