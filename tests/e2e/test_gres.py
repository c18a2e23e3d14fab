"""GPUs as Slurm's GRES logic hands them out, on the dev cluster's gpu partition.

g1 and g2 declare 4 GPUs each (gres.conf names placeholder devices: Slurm allocates, binds and
exports them as it would real ones). Every task prints what Slurm itself set in it
(CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS) next to what the entrypoint resolved, so each test
compares the entrypoint with Slurm's own choice in that very task.
"""

from __future__ import annotations

import json
import re

import pytest

# One worker: the module fixture (its jobs) runs once (tests/README.md: side by side).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("gres")]

SLURM_LINE = re.compile(r"^SLURM rank=(\d+) node=(\S+) cvd=(\S*) step_gpus=(\S*)$", re.M)
# Each task: Slurm's own view first, then the entrypoint from the SIF with the given arguments.
TASK = """#!/bin/bash
echo "SLURM rank=$SLURM_PROCID node=$SLURMD_NODENAME cvd=${CUDA_VISIBLE_DEVICES-unset} \
step_gpus=${SLURM_STEP_GPUS-unset}"
exec apptainer run /data/tf-slurm.sif "$@"
"""
# A program run by the entrypoint: what it was given.
SHOW = """#!/bin/sh
echo "PROGRAM rank=$SLURM_PROCID cvd=${CUDA_VISIBLE_DEVICES-unset}"
"""


@pytest.fixture(scope="module")
def gpus(cluster):
    for name, text in (("task.sh", TASK), ("show.sh", SHOW)):
        cluster.ok(
            f"mkdir -p /data/gres && cat > /data/gres/{name} <<'EOF'\n{text}EOF\n"
            f"chmod 0755 /data/gres/{name}"
        )
    return cluster


def gpu_step(cluster, srun_options: str, entry: str = "--print-config", check: bool = True):
    """One srun on the gpu partition; per rank, Slurm's view and the entrypoint's output."""
    result = cluster.run(f"cd /data && srun -p gpu {srun_options} /data/gres/task.sh {entry} 2>&1")
    if check:
        assert result.code == 0, result.out
    slurm = {
        int(m[0]): {"node": m[1], "cvd": m[2], "step_gpus": m[3]}
        for m in SLURM_LINE.findall(result.out)
    }
    configs = {}
    for line in result.out.splitlines():
        if line.startswith("{"):
            config = json.loads(line)
            configs[config["rank"]] = config
    return slurm, configs, result


def test_a_nodes_four_gpus_are_split_between_its_two_tasks_keeping_slurms_ids(gpus):
    slurm, configs, _ = gpu_step(gpus, "-N1 --gres=gpu:4 --ntasks-per-node=2")
    assert [slurm[r]["cvd"] for r in (0, 1)] == ["0,1,2,3", "0,1,2,3"]  # Slurm: the node's 4
    assert [configs[r]["CUDA_VISIBLE_DEVICES"] for r in (0, 1)] == ["0,1", "2,3"]
    # --explain shows the same split for the whole step
    _, _, result = gpu_step(gpus, "-N1 --gres=gpu:4 --ntasks-per-node=2", "--explain")
    rows = [
        [word for word in line.split() if word != "*"]
        for line in result.out.splitlines()
        if re.match(r"^\*?\s*\d+\s+g\d", line)
    ]
    # each of the two tasks prints the whole table: rank and gpus, the last column
    assert sorted((row[0], row[-1]) for row in rows) == sorted([("0", "0,1"), ("1", "2,3")] * 2)


def test_gpus_per_task_keeps_slurms_per_task_binding(gpus):
    """srun --gpus-per-task=1: Slurm binds one GPU to each task itself (SLURM_TRES_BIND
    gres/gpu:per_task:1); the entrypoint must leave it as it is, not split it again."""
    slurm, configs, _ = gpu_step(gpus, "-N2 --ntasks-per-node=2 --gpus-per-task=1")
    assert sorted(configs) == [0, 1, 2, 3]
    for rank, config in configs.items():
        assert config["CUDA_VISIBLE_DEVICES"] is None, config  # untouched: Slurm's stays
        assert len(slurm[rank]["cvd"].split(",")) == 1, slurm[rank]
    per_node: dict[str, set[str]] = {}
    for view in slurm.values():
        per_node.setdefault(view["node"], set()).add(view["cvd"])
    assert all(len(ids) == 2 for ids in per_node.values()), per_node  # distinct on each node
    # and the program really runs with Slurm's own binding
    slurm, _, result = gpu_step(
        gpus, "-N2 --ntasks-per-node=2 --gpus-per-task=1", "/data/gres/show.sh"
    )
    seen = {
        int(r): cvd for r, cvd in re.findall(r"^PROGRAM rank=(\d+) cvd=(\S+)$", result.out, re.M)
    }
    assert seen == {rank: view["cvd"] for rank, view in slurm.items()}, result.out
    assert len(seen) == 4


def test_gpu_bind_single_keeps_slurms_binding(gpus):
    slurm, configs, _ = gpu_step(gpus, "-N1 -n2 --gres=gpu:2 --gpu-bind=single:1")
    assert sorted(slurm[r]["cvd"] for r in (0, 1)) == ["0", "1"]
    assert [configs[r]["CUDA_VISIBLE_DEVICES"] for r in (0, 1)] == [None, None]


def test_parameter_server_chief_and_ps_see_no_gpus_workers_split_their_nodes(gpus):
    slurm, configs, _ = gpu_step(
        gpus,
        "-N2 --ntasks-per-node=2 --gres=gpu:4",
        "--print-config --strategy parameter-server",
    )
    roles = {r: (c["role"], c["CUDA_VISIBLE_DEVICES"]) for r, c in configs.items()}
    assert roles == {0: ("chief", ""), 1: ("ps", ""), 2: ("worker", "0,1"), 3: ("worker", "2,3")}
    assert {slurm[r]["cvd"] for r in range(4)} == {"0,1,2,3"}
    assert slurm[2]["node"] == slurm[3]["node"] != slurm[0]["node"]


def test_more_gpu_tasks_than_gpus_is_exit_2_naming_the_host(gpus):
    slurm, configs, result = gpu_step(gpus, "-N1 -n3 --gres=gpu:2", check=False)
    assert result.code != 0 and configs == {}
    node = slurm[0]["node"]
    assert f"tfslurm-entry: error: host {node} has 2 GPUs (0,1) for 3 GPU-using tasks" in result.out
    assert "exit code 2" in result.out


def test_gpus_per_task_0_hides_slurms_gpus(gpus):
    slurm, configs, _ = gpu_step(gpus, "-N1 -n2 --gres=gpu:4", "--print-config --gpus-per-task 0")
    assert [slurm[r]["cvd"] for r in (0, 1)] == ["0,1,2,3", "0,1,2,3"]
    assert [configs[r]["CUDA_VISIBLE_DEVICES"] for r in (0, 1)] == ["", ""]
