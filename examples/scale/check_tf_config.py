"""A trivial task for steps too large for TensorFlow on a small machine: check TF_CONFIG.

Run through the entrypoint on every task of a step, e.g. 16 nodes x 8 tasks:

    srun -N16 --ntasks-per-node=8 apptainer run tf-slurm.sif check_tf_config.py [FAILING_RANK]

Each task prints one `task ...` line (its rank, the node Slurm ran it on, the address TF_CONFIG
gives it, its role and the cluster's size) and exits 0, or 5 if its address is not on its own
node. With FAILING_RANK, that rank exits 3 after a second and every other task sleeps (until
the entrypoint stops it): how fail-fast is checked at scale (tests/e2e/test_scale.py).
"""

import json
import os
import socket
import sys
import time

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
address = config["cluster"][task["type"]][task["index"]]
rank, node = os.environ["SLURM_PROCID"], os.environ["SLURMD_NODENAME"]
size = sum(len(addresses) for addresses in config["cluster"].values())
print(
    f"task rank={rank} node={node} hostname={socket.gethostname()} address={address} "
    f"type={task['type']} index={task['index']} tasks={size}",
    flush=True,
)
if len(sys.argv) > 1:
    if rank == sys.argv[1]:
        time.sleep(1)
        sys.exit(3)
    time.sleep(300)
sys.exit(0 if address.rsplit(":", 1)[0] == node == socket.gethostname() else 5)
