"""Where the task runs. Under Slurm's `srun --container`, a task starts in its bundle's
process.cwd (`/` in `make oci-bundle`'s), not in srun's working directory: Slurm gives the
runtime its own spool directory and passes the step's directory into the container nowhere. A
relative program path would then name nothing, so the entrypoint moves to $PWD, the directory
srun was started in (srun --chdir does not change it), and rank 0 says so once."""

from __future__ import annotations

import os
from collections.abc import Mapping


def step_directory(cwd: str, environ: Mapping[str, str]) -> str | None:
    """The directory a task of Slurm's --container should move to, or None: only a task in
    `/` with SLURM_CONTAINER set, and only to an absolute $PWD other than `/`."""
    pwd = environ.get("PWD", "")
    if not environ.get("SLURM_CONTAINER") or cwd != "/" or not pwd.startswith("/") or pwd == "/":
        return None
    return pwd


def enter_step_directory(environ: Mapping[str, str]) -> str | None:
    """Move to step_directory's choice if the container has it; the line that says so."""
    target = step_directory(os.getcwd(), environ)
    if target is None or not os.path.isdir(target):
        return None
    os.chdir(target)
    return (
        f"Slurm's --container started this task in / (the bundle's process.cwd): running in "
        f"{target}, srun's working directory ($PWD)"
    )
