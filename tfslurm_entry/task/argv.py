"""The user's program as an argv, and what to say when its file is not there (inside
Apptainer: most often a path of the node that is not bound into the container)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import ConfigError


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
