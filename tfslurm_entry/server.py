"""A ps or worker task's TensorFlow server, in a process of its own.

    python -m tfslurm_entry.server RANK PARENT_PID    # TF_CONFIG names the cluster and the task

tfslurm-entry starts it as a child (launch.run_server) instead of serving in its own process,
so that a worker server that dies can be started again in place while the task, and its control
connection to rank 0, stay up; TensorFlow's ClusterCoordinator then re-creates its per-worker
resources on it. Nothing here is for users to run by hand.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """Be SIGKILLed when the entrypoint that started this server dies: an entrypoint killed
    with SIGKILL cannot stop its child, and no server may outlive its task."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)


def main(argv: list[str]) -> None:
    rank, parent = argv
    die_with_parent(int(parent))
    # Slurm's preemption warning (USR1/USR2) reaches every task; a server has nothing to save
    # and must not die of it: the chief checkpoints, and its end stops the servers.
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    config = json.loads(os.environ["TF_CONFIG"])
    task_type, index = config["task"]["type"], config["task"]["index"]
    import tensorflow as tf

    server = tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]),
        job_name=task_type,
        task_index=index,
        protocol="grpc",
        start=True,
    )
    address = config["cluster"][task_type][index]
    print(f"tfslurm: rank {rank} {task_type} {index} serving on {address}", file=sys.stderr,
          flush=True)  # fmt: skip
    server.join()  # until SIGTERM (the chief ended, or Slurm stops the step) or SIGKILL


if __name__ == "__main__":
    main(sys.argv[1:])
