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
