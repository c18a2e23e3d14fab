"""What a user's script does with TensorFlow's own SlurmClusterResolver, for side-by-side timing.

    python bench/upstream_resolver.py                      # print TF_CONFIG like --print-config
    python bench/upstream_resolver.py --in-process N       # time N resolutions after the import

Reads the same SLURM_* variables as tfslurm-entry. On a CPU-only machine the resolver cannot be
left to find GPUs (it runs nvidia-smi and fails) nor told there are none (gpus_per_node=0 ends in
`range() arg 3 must not be zero`): like a CPU user must, it is told one GPU per task and not to
set CUDA_VISIBLE_DEVICES (auto_set_gpu=False).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def tf_config() -> dict:
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import (
        SlurmClusterResolver,
    )

    per_node = max(
        int(group.split("(")[0]) for group in os.environ["SLURM_STEP_TASKS_PER_NODE"].split(",")
    )
    resolver = SlurmClusterResolver(gpus_per_node=per_node, gpus_per_task=1, auto_set_gpu=False)
    return {
        "cluster": resolver.cluster_spec().as_dict(),
        "task": {"type": resolver.task_type, "index": resolver.task_id},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-process", type=int, metavar="N", default=0)
    args = parser.parse_args()
    if not args.in_process:
        print(json.dumps({"TF_CONFIG": tf_config()}))
        return 0
    tf_config()  # the import and first call are not part of the in-process figure
    samples = []
    for _ in range(args.in_process):
        start = time.perf_counter()
        tf_config()
        samples.append(time.perf_counter() - start)
    print(json.dumps(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
