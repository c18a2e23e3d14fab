"""Local demo of the kit: a fake N-task Slurm step on this machine, every task via tfslurm-entry.

Each task gets the variables srun would set (SLURM_PROCID, SLURM_STEP_NODELIST, ...) and is
started as `tfslurm-entry train.py`, exactly as `srun apptainer run tf-slurm.sif train.py`
starts it on a cluster. Output lines are prefixed with the rank.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
START = time.monotonic()


def stage(message: str) -> None:
    print(f"[{time.monotonic() - START:6.1f}s] {message}", flush=True)


def free_port_range(count: int) -> int:
    """First port of `count` consecutive ports nobody listens on."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("", 0))
            base = probe.getsockname()[1]
        if base + count <= 65535 and all(_free(base + i) for i in range(count)):
            return base
    raise SystemExit("no free port range found on this machine")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def task_env(rank: int, tasks: int, port_base: int) -> dict[str, str]:
    return {
        **os.environ,
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "SLURM_STEP_NUM_TASKS": str(tasks),
        "SLURM_STEP_TASKS_PER_NODE": str(tasks),
        "SLURM_STEP_NODELIST": "localhost",
        "SLURMD_NODENAME": "localhost",
        "SLURM_JOB_ID": "1",
        "SLURM_STEP_ID": "0",
        "TFSLURM_PORT_BASE": str(port_base),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONUNBUFFERED": "1",
    }


# TensorFlow's C++ start-up chatter ("I0000 ... cudart_stub.cc ...") hides the demo's own lines.
TF_NOISE = re.compile(r"^([IWE]\d{4} |WARNING: All log messages before absl)")


def relay(rank: int, stream) -> None:
    for line in stream:
        if not TF_NOISE.match(line):
            print(f"[rank {rank}] {line}", end="", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    entry = str(Path(sys.executable).with_name("tfslurm-entry"))
    base = free_port_range(args.tasks + 1)  # + rank 0's control port
    stage(f"fake Slurm step: {args.tasks} tasks on localhost, ports {base}-{base + args.tasks}")
    subprocess.run([entry, "--explain"], env=task_env(0, args.tasks, base), check=True)
    stage("starting every task as `tfslurm-entry train.py` (TensorFlow import takes a few s)")
    procs = []
    for rank in range(args.tasks):
        proc = subprocess.Popen(
            [entry, str(HERE / "train.py"), "--steps", str(args.steps)],
            env=task_env(rank, args.tasks, base),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=relay, args=(rank, proc.stdout), daemon=True).start()
        procs.append(proc)
    try:
        codes = [
            proc.wait(timeout=max(1, args.timeout - (time.monotonic() - START))) for proc in procs
        ]
    except subprocess.TimeoutExpired:
        codes = None
    finally:
        for proc in procs:
            proc.kill()
    if codes is None or any(codes):
        stage(f"FAILED: exit codes {codes or 'timeout'}")
        return 1
    stage(f"done: {args.tasks} tasks trained in sync and exited 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
