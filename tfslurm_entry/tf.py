"""For the TensorFlow program a task runs: end a multi-worker job without error lines.

    from tfslurm_entry.tf import end_of_job
    ...                       # train; the chief checkpoints, evaluates, writes metrics
    end_of_job(strategy)      # on every task, as its last TensorFlow call

Programs import this module; the entrypoint never does (it stays free of TensorFlow).

Why it is needed: in TensorFlow 2.21 no MultiWorkerMirroredStrategy task tells the
coordination service (which lives in the coordination leader's process: the chief, else
worker 0) that it is leaving. So a worker that exits while the chief still evaluates stops
sending heartbeats, and about ten seconds later the service declares it crashed on every task
still running (``E0000 ... The following tasks are unhealthy (stopped sending heartbeats)``,
tensorflow/tensorflow#58434); and a task still running when the leader exits fails its next
heartbeat (``Connection refused``). TensorFlow's own source asks programs to call a barrier of
their own at the end of a workload. end_of_job does that, and makes the leader leave last.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from .run.head import OTHERS_ENDED_VAR

BARRIER_ID = "tfslurm/end_of_job"


def end_of_job(strategy, timeout: float = 3600.0, linger: float = 60.0) -> None:
    """Return on every task of a multi-worker job once all of them have reached this call.

    Call it once, on every task, after all chief-only work (final checkpoint, evaluation,
    metrics): no task returns before the slowest one arrives, at most ``timeout`` seconds.
    The coordination leader then also waits, at most ``linger`` seconds, until tfslurm-entry
    has seen every other task's program end, so the coordination service outlives them all.

    Parameter-server jobs and single processes need nothing: there only the chief runs a
    program, and tfslurm-entry stops the ps and worker servers when it ends.
    """
    import tensorflow as tf
    from tensorflow.python.eager import context  # the coordination service's Python handle

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec()
    coordinated = [job for job in ("chief", "worker") if job in spec.jobs]
    if sum(spec.num_tasks(job) for job in coordinated) < 2:
        return  # one worker, or no TF_CONFIG: nothing to wait for
    # MultiWorkerMirroredStrategy always starts the coordination service for two or more tasks.
    context.context().wait_at_barrier(BARRIER_ID, int(timeout * 1000))
    if (resolver.task_type, resolver.task_id) == (coordinated[0], 0):
        wait_for_others(os.environ.get(OTHERS_ENDED_VAR), linger)


def wait_for_others(marker: str | None, linger: float, poll: float = 0.05) -> bool:
    """Wait until the file ``marker`` exists, at most ``linger`` seconds; whether it does.

    tfslurm-entry creates it in rank 0's task once every other task's program has ended.
    Without it (not under tfslurm-entry) there is nothing to wait for.
    """
    if not marker:
        return False
    path, deadline = Path(marker), time.monotonic() + linger
    while not path.exists():
        if time.monotonic() >= deadline:
            print(
                f"tfslurm: end_of_job: other tasks still running {linger:g} s after the "
                "end-of-job barrier; the coordination leader ends anyway",
                file=sys.stderr,
                flush=True,
            )
            return False
        time.sleep(poll)
    return True
