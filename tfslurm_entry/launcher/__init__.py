"""The batch script's side of a job: tfslurm-run, the launcher that runs the image as one step
on the job's nodes and takes the job through Slurm's stops (the per-node copy, the verdict,
the requeue). It is a bash file, not Python: it runs on the nodes outside the image, where the
kit promises only Apptainer. Users write it out of the image (`apptainer run IMAGE
--install-launcher DIR`, the --install-launcher mode); the rollout installs the same file.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError

LAUNCHER = Path(__file__).with_name("tfslurm-run")


def install(directory: str) -> Path:
    """Write tfslurm-run into directory (created if missing), executable; its path."""
    target = Path(directory).expanduser() / LAUNCHER.name
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_bytes(LAUNCHER.read_bytes())
        partial.chmod(0o755)
        os.replace(partial, target)  # a job reading the old one never reads half of the new
    except OSError as err:
        raise ConfigError(
            f"cannot write {target}: {err.strerror}",
            "give --install-launcher a directory you can write, e.g. ~/bin",
        ) from None
    return target
