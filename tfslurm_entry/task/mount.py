"""Part of a task's preparation: whether Slurm's signals can take this task's image away.

Unprivileged Apptainer mounts a SIF with squashfuse_ll, a process of the job step like any
other: Slurm's SIGTERM (preemption, a requeue, the time limit) and its --signal warnings reach it
too, and it unmounts the image; every task then dies of SIGBUS at its next read of it, before
it has saved. A squashfuse that ignores those signals (docs/failures.md: an admin's wrapper), a
setuid Apptainer's kernel mount, or a step run from an unpacked copy of the image (the README's
batch script) is safe. Rank 0 says so in one line when its image is not.

Read from /proc only: the squashfuse of this container is a child of one of this process's
ancestors (Apptainer's starter), and /proc/PID/status shows which signals it ignores.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from ..step.program import Proc, processes

FUSE_MOUNTERS = ("squashfuse_ll", "squashfuse")


def ancestors(pid: int, table: dict[int, Proc]) -> set[int]:
    found: set[int] = set()
    while pid in table and pid not in found and pid > 1:
        found.add(pid)
        pid = table[pid].parent
    return found


def ignores(pid: int, signum: int) -> bool | None:
    """Whether the process ignores signum (None: it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return None


def exposed_mount() -> Proc | None:
    """The squashfuse that mounts this process's image and would end on SIGTERM, if any."""
    table = {proc.pid: proc for proc in processes()}
    mine = ancestors(os.getpid(), table)
    for proc in table.values():
        ours = proc.name in FUSE_MOUNTERS and proc.parent in mine
        if ours and ignores(proc.pid, signal.SIGTERM) is False:
            return proc
    return None


def note() -> str | None:
    """Rank 0's line when Slurm's signals would unmount its image."""
    proc = exposed_mount()
    if proc is None:
        return None
    return (
        f"the image is mounted by {proc.name} (pid {proc.pid}), which Slurm's SIGTERM "
        "(preemption, a requeue, the time limit) ends: the tasks would then die of SIGBUS "
        "before they save; run the job through tfslurm-run, which copies the image onto each "
        "node first, or see docs/failures.md for the admins' fix"
    )


def report(print_line=print) -> int:
    """--check-mount, tfslurm-run's question before a job: 1 (and why) when Slurm's SIGTERM
    would unmount this image, 0 (and why not) when it would not."""
    proc = exposed_mount()
    if proc is not None:
        print_line(
            f"Apptainer mounts the image with {proc.name}, which Slurm's SIGTERM ends (the tasks "
            "would die of SIGBUS before they save)"
        )
        return 1
    print_line(
        "the image's mount outlives Slurm's signals (a kernel mount, a directory, or a "
        "squashfuse that ignores SIGTERM)"
    )
    return 0
