#!/usr/bin/env python3
"""Capture what each Slurm release really exports into a job step's tasks.

    make capture-slurm-env SLURM=22.05   # or: TFSLURM_SLURM=22.05 python3 capture_env.py

Runs every step in CASES on the running dev cluster of that release (make dev-cluster
SLURM=...), with `env` in every task, and writes each task's SLURM*/CUDA* variables to
tests/unit/resolve/data/slurm-<version>.json: the unit tests resolve them as the tasks would.
Scheduling noise (times, ports, pids, user and host names) is left out. Stdlib only.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import uuid
from datetime import date

import devcluster
from devcluster import on_login, progress

OUT_DIR = devcluster.ROOT / "tests" / "unit" / "resolve" / "data"
STAGE = "capture"
KEEP = re.compile(r"^(SLURM\w*|SLURMD_NODENAME|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL)=")
NOISE = re.compile(
    r"^SLURM_(JOB_(START|END)_TIME|TASK_PID|SRUN_COMM_(PORT|HOST)|LAUNCH_NODE_IPADDR"
    r"|STEP_LAUNCHER_PORT|SUBMIT_(HOST|DIR)|JOB_(USER|UID|GID|GROUP|NAME|QOS|ACCOUNT)"
    r"|CLUSTER_NAME|CONF|UMASK|PRIO_PROCESS|TOPOLOGY_ADDR\w*|WORKING_DIR|EXPORT_ENV"
    r"|SCRIPT_CONTEXT|JOB_RESERVATION)\w*$"
)
# Each case: the srun options (`:` separates the components of `srun a : b`), or a batch
# script whose srun line the tasks run in (het jobs made by sbatch). {cmd} is the task's command.
CASES: dict[str, str] = {
    "block": "srun -p debug -N2 -n4 {cmd}",
    "cyclic": "srun -p debug -N2 -n4 -m cyclic {cmd}",
    "plane": "srun -p debug -N2 -n5 -m plane=2 {cmd}",
    "pack": "srun -p debug -N2 -n4 -m pack {cmd}",
    "nopack": "srun -p debug -N3 -n4 -m nopack {cmd}",
    "gpus-per-task-1": "srun -p gpu -N1 -n4 --gpus-per-task=1 {cmd}",
    "gpus-per-task-2": "srun -p gpu -N2 -n4 --gpus-per-task=2 {cmd}",
    "gpu-bind-single": "srun -p gpu -N1 -n4 --gres=gpu:4 --gpu-bind=single:1 {cmd}",
    "gres-shared": "srun -p gpu -N1 -n2 --gres=gpu:4 {cmd}",
    "het-srun": "srun -p debug -N1 -n2 {cmd} : -p gpu -N2 -n2 --gpus-per-task=1 {cmd}",
    "het-sbatch": (
        "#!/bin/bash\n"
        "#SBATCH -p debug -N1 -n2\n"
        "#SBATCH hetjob\n"
        "#SBATCH -p gpu -N2 --ntasks-per-node=1 --gpus-per-task=2\n"
        "srun --het-group=0,1 {cmd}\n"
    ),
}


def capture(case: str, template: str, where: str) -> list[dict[str, str]]:
    """Run one case; every task's kept variables, in SLURM_PROCID order."""
    out = f"{where}/{case}"
    cmd = shlex.quote(f"env > {out}/$SLURM_PROCID.$SLURMD_NODENAME.env")
    cmd = f"bash -c {cmd}"
    on_login(f"mkdir -p {out}")
    if template.startswith("#!"):
        script = template.format(cmd=cmd)
        on_login(
            f"cat > {out}.sbatch <<'EOF'\n{script}EOF\n"
            f"sbatch --wait --quiet -o {out}.out {out}.sbatch"
        )
    else:
        on_login(template.format(cmd=cmd))
    listing = on_login(f'cd {out} && for f in *.env; do echo "== $f"; cat "$f"; done')
    tasks: list[dict[str, str]] = []
    for block in listing.split("== ")[1:]:
        lines = block.splitlines()[1:]
        env = dict(line.split("=", 1) for line in lines if KEEP.match(line))
        tasks.append({k: v for k, v in sorted(env.items()) if not NOISE.match(k)})
    return sorted(tasks, key=lambda env: int(env["SLURM_PROCID"]))


def main() -> int:
    release = devcluster.release_named(devcluster.SLURM_VERSION)
    version = on_login("sinfo --version").split()[-1]
    progress(STAGE, f"Slurm {version} on {devcluster.PROJECT}: {len(CASES)} steps")
    where = f"/data/capture-{uuid.uuid4().hex[:6]}"
    steps = {}
    for case, template in CASES.items():
        steps[case] = {
            "how": template.replace("{cmd}", "CMD").strip(),
            "tasks": capture(case, template, where),
        }
        progress(STAGE, f"{case}: {len(steps[case]['tasks'])} tasks")
    on_login(f"rm -rf {where} {where}.*")
    about = (
        f"Each task's SLURM*/CUDA* variables in the steps of `how` (CMD: `env` in every "
        f"task), captured on the dev cluster's Slurm {version} (Debian {release.suite}) on "
        f"{date.today()} by slurm-dev-cluster/capture_env.py. Scheduling noise (times, ports, "
        "pids, user and host names) is left out."
    )
    path = OUT_DIR / f"slurm-{release.version}.json"
    path.write_text(
        json.dumps({"about": about, "version": version, "steps": steps}, indent=1) + "\n"
    )
    progress(STAGE, f"wrote {path.relative_to(devcluster.ROOT)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except devcluster.BuildError as err:
        progress(STAGE, f"FAILED: {err}")
        sys.exit(1)
