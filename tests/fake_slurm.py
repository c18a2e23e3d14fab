"""Fake Slurm job-step environments: unit tests may fake variables, nothing else."""

from __future__ import annotations


def step_env(
    procid: int = 0,
    nodelist: str = "n[1-2]",
    tasks_per_node: str = "2(x2)",
    num_tasks: int | None = None,
    **extra: str,
) -> dict[str, str]:
    """The variables srun sets for one task of a step; num_tasks defaults to the sum."""
    if num_tasks is None:
        import hostlist

        num_tasks = sum(hostlist.parse_slurm_tasks_per_node(tasks_per_node))
    env = {
        "SLURM_PROCID": str(procid),
        "SLURM_STEP_NUM_TASKS": str(num_tasks),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_ID": "0",
        "PATH": "/usr/bin:/bin",  # no nvidia-smi unless a test adds one
    }
    env.update(extra)
    return env


# A stand-in for slurmstepd, the parent of a step's tasks on a node: named as Slurm's is (the
# entrypoint looks for it among its ancestors), it runs its command and exits with its status.
STEP_DAEMON = """
import ctypes, subprocess, sys
ctypes.CDLL(None).prctl(15, b"slurmstepd", 0, 0, 0)  # PR_SET_NAME: /proc/PID/stat's name
sys.exit(subprocess.call(sys.argv[1:]))
"""


def under_step_daemon(argv: list[str]) -> list[str]:
    """argv run as a child of a process named slurmstepd."""
    import sys

    return [sys.executable, "-c", STEP_DAEMON, *argv]


def signal_step(daemons: list[int], signum: int) -> None:
    """What Slurm's proctrack plugins do with a step's signal: every process below each
    step daemon gets it, whatever its process group."""
    import contextlib
    import os

    from tfslurm_entry.step.program import descendants

    for daemon in daemons:
        for proc in descendants(daemon):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signum)
