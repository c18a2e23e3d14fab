"""For the TensorFlow program a task runs: end a multi-worker job without error lines.

    from tfslurm_entry.tf import end_of_job
    ...                       # train; the chief checkpoints, evaluates, writes metrics
    end_of_job(strategy)      # on every task, as its last TensorFlow call

Programs import this module; the entrypoint never does (it stays free of TensorFlow).

Under tfslurm-entry a multi-worker program needs none of this: the same barrier is passed
at its normal exit (inprogram/program_end.py says why and how). Call end_of_job to pass
it at a point of your choosing, or where the automatic one is off (--end-barrier 0) or out
of reach (a Python started with -I or -E, or without the kit); the barrier is passed once.
"""

from __future__ import annotations

import os

from .inprogram.program_end import (
    BARRIER_ID,
    LINGER_S,
    OTHERS_ENDED_VAR,
    end_here,
    task_name,
    wait_for_others,
)

__all__ = ["BARRIER_ID", "end_of_job", "wait_for_others"]


def end_of_job(strategy, timeout: float = 3600.0, linger: float = LINGER_S) -> None:
    """Return on every task of a multi-worker job once all of them have reached this call.

    Call it once, on every task, after all chief-only work (final checkpoint, evaluation,
    metrics): no task returns before the slowest one arrives, at most ``timeout`` seconds.
    The coordination leader then also waits, at most ``linger`` seconds, until tfslurm-entry
    has seen every other task's program end, so the coordination service outlives them all.

    Parameter-server jobs and single processes need nothing: there only the chief runs a
    program, and tfslurm-entry stops the ps and worker servers when it ends.
    """
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    resolver = strategy.cluster_resolver
    task = task_name(resolver.task_type, resolver.task_id) if resolver.task_type else None
    end_here(timeout, task, os.environ.get(OTHERS_ENDED_VAR), linger)
