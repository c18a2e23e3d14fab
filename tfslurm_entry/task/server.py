"""A ps or worker task's TensorFlow server, in a process of its own.

    python -m tfslurm_entry.task.server RANK PARENT_PID    # TF_CONFIG names the cluster and task

A parameter-server job's ps and worker tasks run this instead of the program. The member
(member.py) starts it as a child (command()) instead of serving in its own process, so that a
worker server that dies can be started again in place while the task, and its control
connection to rank 0, stay up; TensorFlow's ClusterCoordinator then re-creates its per-worker
resources on it. main() is the child's side. Nothing here is for users to run by hand.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import signal
import sys
from collections.abc import Mapping

from ..errors import ConfigError
from ..log import log
from ..resolve import Task
from ..step.program import Command

PR_SET_PDEATHSIG = 1  # linux/prctl.h
# A ps/worker server with a single inter-op thread deadlocks: a worker running a scheduled
# function blocks that thread waiting on the ps, and the chief waits forever in
# ClusterCoordinator.join(). TensorFlow sizes the pool from the CPU affinity, so a step with
# --cpus-per-task=1 hits this; servers always get at least this many.
MIN_SERVER_INTEROP_THREADS = 2


def command(me: Task, env: Mapping[str, str]) -> Command:
    """The server's argv and environment, for the member to start it (and restart it)."""
    if importlib.util.find_spec("tensorflow") is None:
        raise ConfigError(
            f"the {me.task_type} role runs a TensorFlow server but TensorFlow is not installed",
            "install tfslurm-entry[tf] or run inside tf-slurm.sif",
        )
    asked = env.get("TF_NUM_INTEROP_THREADS")
    server_env = interop_env(env, len(os.sched_getaffinity(0)))
    if server_env.get("TF_NUM_INTEROP_THREADS") != asked:
        log(
            f"rank {me.rank} {me.task_type} server uses {MIN_SERVER_INTEROP_THREADS} "
            "inter-op threads (fewer deadlock the parameter-server coordinator)"
        )
    argv = [sys.executable, "-m", "tfslurm_entry.task.server", str(me.rank), str(os.getpid())]
    return Command(argv, server_env)


def interop_env(env: Mapping[str, str], cpus: int) -> dict[str, str]:
    """The server's environment: at least MIN_SERVER_INTEROP_THREADS inter-op threads."""
    env = dict(env)
    asked = env.get("TF_NUM_INTEROP_THREADS", "")
    threads = int(asked) if asked.isdigit() and int(asked) > 0 else cpus
    if threads < MIN_SERVER_INTEROP_THREADS:
        env["TF_NUM_INTEROP_THREADS"] = str(MIN_SERVER_INTEROP_THREADS)
    return env


def die_with_parent(parent: int) -> None:
    """Be SIGKILLed when the entrypoint that started this server dies: an entrypoint killed
    with SIGKILL cannot stop its child, and no server may outlive its task."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)


def main(argv: list[str]) -> None:
    rank, parent = argv
    die_with_parent(int(parent))
    # Slurm's notice (SIGTERM, or its --signal warning: step/notice.py) reaches every process
    # of the step. A server has nothing to save and must outlive it: the chief's program saves
    # the variables from the ps. The chief's end stops the servers (SIGKILL from the member),
    # and Slurm's own SIGKILL after KillWait or GraceTime ends them anyway.
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT, signal.SIGHUP):
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
    print(
        f"tfslurm: rank {rank} {task_type} {index} serving on {address}",
        file=sys.stderr,
        flush=True,
    )
    server.join()  # until SIGKILL: the chief ended, or the step failed or was stopped


if __name__ == "__main__":
    main(sys.argv[1:])
