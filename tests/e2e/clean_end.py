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
LAST_END = re.compile(
    r"tfslurm: rank 0 on \S+: (?:all \d+ programs|chief program) ended with "
    r"exit 0.*\bat (\d{4}-\d\d-\d\dT[\d:.]+\+00:00)"
)
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


def program_step(cluster, job: str) -> int:
    """The job's first step that is not tfslurm-run's copy of the image (step 0 when the image
    was not copied, else step 1)."""
    rows = cluster.ok(f"sacct -n -P -j {job} -o JobID,JobName").split()
    names = {row.split("|")[0].split(".")[-1]: row.split("|")[1] for row in rows}
    steps = sorted(int(s) for s, name in names.items() if s.isdigit() and name != "tfslurm-copy")
    assert steps, f"job {job} ran no step but the copy: {rows}"
    return steps[0]


def check_clean_end(
    cluster, job: str, log: str, step: int | None = None, stopped_runs: int = 0
) -> None:
    """No error line, and every run of the job's step ended within seconds of its last program.

    step: the step that runs the programs (default: program_step's);
    stopped_runs: how many runs Slurm stopped first, each ending with rank 0's one `stopped by
    Slurm` line instead of a last program's time (test_preemption.py checks those runs)."""
    step = program_step(cluster, job) if step is None else step
    assert error_lines(log) == [], "\n".join(error_lines(log)) + f"\n---\n{log}"
    assert len(STOPPED.findall(log)) == stopped_runs, log
    programs, steps = last_program_ends(log), step_ends(cluster, job, step)
    assert programs and len(programs) == len(steps) - stopped_runs, f"{programs} {steps}\n{log}"
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


def copies_left(cluster, nodes: tuple[str, ...] = NODES) -> list[str]:
    """tfslurm-run's per-node copies of the image still on the nodes (in /tmp, where the dev
    cluster's config puts them, or /var/tmp, where the launcher's default does), as NODE:PATH."""
    return [
        f"{node}:{path}"
        for node in nodes
        for path in cluster.ok(
            "ls -d /tmp/tfslurm-copy-* /var/tmp/tfslurm-copy-* 2>/dev/null || true",
            service=node,
            user="root",
        ).split()
    ]
