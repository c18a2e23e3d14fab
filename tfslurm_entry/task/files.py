"""What a task needs of files before it starts: rank 0's open-files limit (one connection per
member), the result file it will write, and the task's private TMPDIR."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from ..errors import ConfigError
from ..resolve import Plan, Task


def check_open_files(plan: Plan) -> None:
    """Rank 0 holds a control connection to every other task: make room for them before
    anything starts (control.raise_open_files_limit says why and when it cannot)."""
    me = plan.me
    if me is not None and me.rank == 0 and len(plan.tasks) > 1:
        from ..step import control  # rank 0's alone: no member imports it

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
def task_tmpdir(step: str, me: Task, environ: Mapping[str, str]) -> Iterator[Path]:
    """A private temporary directory for this task's role, removed when the role ends.

    The program gets it as TMPDIR, so what TensorFlow and the program leave in the temporary
    directory (autograph's generated files, scratch checkpoints of non-chief workers) goes
    with it, even when the program is killed. Only an entrypoint killed with it leaves it
    behind: Slurm's job_container/tmpfs plugin (a private /tmp per job) covers that case.
    """
    base = environ.get("TMPDIR") or "/tmp"
    try:
        path = Path(tempfile.mkdtemp(prefix=f"tfslurm-{step}-rank{me.rank}-", dir=base))
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
