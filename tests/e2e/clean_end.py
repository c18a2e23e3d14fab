"""What a clean end of a successful job looks like on the dev cluster, as checks.

No error line in the job's output, the step ends within seconds of the last task's program,
and nothing of the job is left in the compute nodes' /tmp.
"""

from __future__ import annotations

import re
from datetime import datetime

from tests.job_output import error_lines

NODES = ("c1", "c2", "c3")
GPU_NODES = ("g1", "g2")  # the gpu partition (heterogeneous and GRES tests)
# Rank 0's entrypoint says when the last program ended: for multi-worker "all N programs ended
# with exit 0, the last at T", for parameter-server "chief program ended ... (at T)".
LAST_END = re.compile(r"tfslurm: rank 0 on \S+: (?:all \d+ programs|chief program) ended with "
                      r"exit 0.*\bat (\d{4}-\d\d-\d\dT[\d:.]+\+00:00)")  # fmt: skip
STOPPED = re.compile(r"^tfslurm: rank 0 on \S+: stopped by Slurm: ", re.M)
STEP_END_WITHIN_S = 5


def last_program_ends(log: str) -> list[float]:
    """When the last program ended, as Unix time, for every step run in this output."""
    return [datetime.fromisoformat(t).timestamp() for t in LAST_END.findall(log)]


def step_ends(cluster, job: str, step: int = 0) -> list[float]:
    """sacct's End of every run of the job's step (a requeued job has one per run). A
    heterogeneous job's step has a row per component (JOB+0.0, JOB+1.0): it ends with the
    last of them."""
    out = cluster.ok(f"SLURM_TIME_FORMAT=%s sacct -D -n -P -j {job}.{step} -o JobID,End")
    runs: dict[str, list[float]] = {}
    for line in out.split():
        job_step, end = line.split("|")
        runs.setdefault(job_step, []).append(float(end))
    return [max(ends) for ends in zip(*runs.values(), strict=True)]


def check_clean_end(cluster, job: str, log: str, step: int = 0, stopped_runs: int = 0) -> None:
    """No error line, and every run of the job's step ended within seconds of its last program.

    step: the step that runs the programs (1 where the node cache's unpack is step 0);
    stopped_runs: how many runs Slurm stopped first, each ending with rank 0's one `stopped by
    Slurm` line instead of a last program's time (test_preemption.py checks those runs)."""
    assert error_lines(log) == [], "\n".join(error_lines(log)) + f"\n---\n{log}"
    assert len(STOPPED.findall(log)) == stopped_runs, log
    programs, steps = last_program_ends(log), step_ends(cluster, job, step)
    assert programs and len(programs) == len(steps) - stopped_runs, (programs, steps, log)
    for program, end in zip(programs, steps[stopped_runs:], strict=True):
        # sacct's End has one-second resolution: it may read up to 1 s before the program's end.
        assert -1 <= end - program <= STEP_END_WITHIN_S, (
            f"step {job}.{step} ended {end - program:.1f} s after its last program\n{log}"
        )


def tmp_entries(cluster, nodes: tuple[str, ...] = NODES) -> set[str]:
    """Everything in the compute nodes' /tmp, as NODE:PATH."""
    return {
        f"{node}:{path}"
        for node in nodes
        for path in cluster.ok("find /tmp -mindepth 1", service=node, user="root").split()
    }


def left_in_tmp(cluster, before: set[str], nodes: tuple[str, ...] = NODES) -> list[str]:
    """What appeared in the nodes' /tmp since ``before`` and is still there (should be none:
    scratch checkpoints, autograph's generated files, the tasks' own temporary directories)."""
    return sorted(tmp_entries(cluster, nodes) - before)


def node_processes(cluster, nodes: tuple[str, ...] = NODES) -> dict[str, str]:
    """What the job user still runs on each of the compute nodes."""
    return {
        node: cluster.run("ps -u runner -o pid=,args=", service=node, user="root").out.strip()
        for node in nodes
    }
