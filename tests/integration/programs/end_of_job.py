"""The end of a multi-worker job, for the integration tests of tfslurm_entry.tf.end_of_job.

Every worker takes part in a few all-reduces; then the chief (worker 1 with --late 1) alone
works on for CHIEF_EXTRA seconds (its evaluation and metrics, longer than TensorFlow's 10 s
heartbeat timeout), and every task ends with end_of_job(strategy), or without it when
--without is given (then tfslurm-entry's automatic barrier ends it, or nothing with
--end-barrier 0). Prints one line ``RESULT {json}`` on stdout. With --fail raise|exit,
worker 1 then fails instead of ending: an uncaught exception, or sys.exit(3).

Usage: python end_of_job.py CHIEF_EXTRA [--without] [--fail raise|exit] [--late TASK]
"""

import json
import os
import sys
import time
from pathlib import Path

import tensorflow as tf

from tfslurm_entry.tf import end_of_job


def main() -> None:
    extra, use_helper = float(sys.argv[1]), "--without" not in sys.argv
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    total = 0.0
    for _ in range(3):
        one = strategy.run(lambda: tf.constant(1.0))
        total += float(strategy.reduce(tf.distribute.ReduceOp.SUM, one, axis=None))
    late = int(sys.argv[sys.argv.index("--late") + 1]) if "--late" in sys.argv else 0
    if resolver.task_id == late:
        time.sleep(extra)  # the chief's final evaluation and metrics
    start = time.monotonic()
    if use_helper:
        end_of_job(strategy)
    marker = os.environ.get("TFSLURM_OTHERS_ENDED")
    result = {
        "task_id": resolver.task_id,
        "summed": total,
        "waited": time.monotonic() - start,
        # Rank 0 only: whether every other task's program had ended when end_of_job returned.
        "others_ended": Path(marker).exists() if marker else None,
    }
    print("RESULT " + json.dumps(result), flush=True)
    if "--fail" in sys.argv and resolver.task_id == 1:
        how = sys.argv[sys.argv.index("--fail") + 1]
        if how == "exit":
            sys.exit(3)
        raise RuntimeError("worker 1 fails at the end")


if __name__ == "__main__":
    main()
