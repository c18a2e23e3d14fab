"""A 128-task step on a 16-node dev cluster: placement at scale and fail-fast across nodes.

The cluster is a second compose project (TFSLURM_SCALE_PROJECT, default tfslurm-scale), so the
3-node cluster the other tests use is untouched; it is brought up here if it is not running
and removed at the end. The tasks run a trivial program through `apptainer run tf-slurm.sif`:
128 TensorFlow processes do not fit in a 2-core, 24 GiB machine.
"""

from __future__ import annotations

import collections
import os
import re
import time
import uuid

import pytest

from .conftest import dev_cluster

# The scale run is a soak (make test-soak): placement and fail-fast are proven in make test by
# the unit tests (resolution of 4096 nodes x 8 tasks, the 512-task supervision simulation) and
# the 3-node e2e jobs.
pytestmark = [pytest.mark.e2e, pytest.mark.soak]

PROJECT = os.environ.get("TFSLURM_SCALE_PROJECT", "tfslurm-scale")
NODES, PER_NODE = 16, 8
TASKS = NODES * PER_NODE
SIF = "/data/tf-slurm.sif"
# examples/scale/check_tf_config.py, installed by the cluster's bring-up: prints a `task` line.
CHECK = "/data/examples/scale/check_tf_config.py"
# From /data: Apptainer binds the working directory, and the program is under /data.
STEP = (
    f"mkdir -p /data/scale && cd /data && "
    f"srun -N{NODES} --ntasks-per-node={PER_NODE} apptainer run {SIF}"
)
TASK_LINE = re.compile(
    r"^task rank=(\d+) node=(\S+) hostname=(\S+) address=(\S+):\d+ type=(\S+) index=(\d+) "
    r"tasks=(\d+)$",
    re.M,
)


@pytest.fixture(scope="module")
def scale(request):
    with dev_cluster(request, PROJECT, NODES) as running:
        yield running


def test_a_128_task_step_on_16_nodes_completes_with_every_address_on_its_own_node(scale):
    tag = uuid.uuid4().hex[:8]
    started = time.monotonic()
    out = scale.ok(f"{STEP} {CHECK} > scale/ok-{tag}.out 2>&1; echo rc=$?; cat scale/ok-{tag}.out")
    took = time.monotonic() - started
    assert "rc=0" in out, out[-3000:]
    tasks = {int(m[0]): m[1:] for m in TASK_LINE.findall(out)}
    assert sorted(tasks) == list(range(TASKS)), out[-3000:]
    for rank, (node, hostname, host, task_type, index, total) in tasks.items():
        # The address TF_CONFIG gives this task is on the node Slurm ran it on.
        assert host == node == hostname, (rank, node, hostname, host)
        assert (task_type, int(index), int(total)) == ("worker", rank, TASKS)
    per_node = collections.Counter(node for node, *_ in tasks.values())
    assert per_node == {f"c{i}": PER_NODE for i in range(1, NODES + 1)}, per_node
    assert f"rank 0 on c1: all {TASKS} tasks checked in" in out
    assert f"rank 0 on c1: all {TASKS} programs ended with exit 0" in out
    job = scale.ok("sacct -n -X -P -o JobID --name apptainer | tail -1").strip()
    state = scale.ok(f"sacct -n -P -j {job}.0 -o State,ExitCode,NTasks,NNodes").strip()
    assert state == f"COMPLETED|0:0|{TASKS}|{NODES}", state
    print(f"128 tasks on 16 nodes: srun -> every task ended in {took:.1f} s")


def test_one_failing_task_of_128_stops_the_other_127_and_is_named(scale):
    tag, failing = uuid.uuid4().hex[:8], 77
    started = time.monotonic()
    out = scale.run(
        f"{STEP} {CHECK} {failing} > scale/fail-{tag}.out 2>&1; "
        f"echo rc=$?; cat scale/fail-{tag}.out"
    )
    took = time.monotonic() - started
    text = out.out
    assert "rc=0" not in text, text[-3000:]
    assert took < 120, f"the step took {took:.0f} s; the other tasks sleep 300 s"  # not hung
    # Where each rank runs, from its entrypoint's first line: a program stopped early may not
    # have printed its own.
    tasks = {int(r): h for r, h in re.findall(rf"tfslurm: rank (\d+)/{TASKS} host (\S+)", text)}
    assert sorted(tasks) == list(range(TASKS)), text[-3000:]
    host = tasks[failing]
    failure = f"rank {failing} on {host} failed with exit 3"
    assert f"rank 0 on c1: {failure}; stopping the step" in text, text[-3000:]
    stopped = re.findall(
        rf"tfslurm: rank (\d+) on (\S+): stopping: {failure}; exiting with 1", text
    )
    assert sorted(int(r) for r, _ in stopped) == sorted(set(range(1, TASKS)) - {failing})
    assert all(tasks[int(r)] == node for r, node in stopped)
    job = scale.ok("sacct -n -X -P -o JobID --name apptainer | tail -1").strip()
    state = scale.ok(f"sacct -n -X -P -j {job} -o State").strip()
    assert state == "FAILED", state
    left = {
        f"c{i}": scale.run("pgrep -f check_tf_config.py", service=f"c{i}", user="root").out
        for i in range(1, NODES + 1)
    }
    assert not any(left.values()), left
