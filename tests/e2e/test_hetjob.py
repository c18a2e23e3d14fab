"""Heterogeneous jobs on the dev cluster: one step across a CPU component and a GPU component.

The dev cluster's debug partition (c1-c3) has no GPUs; its gpu partition (g1, g2) declares 4
each (placeholders, see slurm-dev-cluster/README.md). Every task prints what Slurm set in it
next to the entrypoint's result, so each assertion compares the entrypoint with Slurm's own view
of that very task.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

from . import jobs
from .clean_end import GPU_NODES, NODES, check_clean_end, left_in_tmp, tmp_entries

# One worker runs the CIFAR-10 training modules one after another (tests/README.md: side by side).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("cifar10-training")]

EXAMPLES = "/data/examples/cifar10"
# Each task: Slurm's view of it, then the entrypoint's (arguments after the script name).
TASK = """#!/bin/bash
echo "SLURM procid=$SLURM_PROCID node=$SLURMD_NODENAME local=$SLURM_LOCALID \
cvd=${CUDA_VISIBLE_DEVICES-unset} step_gpus=${SLURM_STEP_GPUS-unset}"
exec apptainer run /data/tf-slurm.sif "$@"
"""
STEP_MARK = "=== next step"
SLURM_LINE = re.compile(
    r"^SLURM procid=(\d+) node=(\S+) local=(\d+) cvd=(\S*) step_gpus=(\S*)$", re.M
)


def het_job(cluster, components: list[str], steps: list[str]) -> list[str]:
    """sbatch a het job of ``components`` (#SBATCH lines) running ``steps`` (srun lines) one
    after the other; wait for it and return each step's output."""
    name = f"het-{uuid.uuid4().hex[:6]}"
    lines = ["#!/bin/bash", f"#SBATCH --output=/data/hetjob/{name}.out"]
    lines += "\n#SBATCH hetjob\n".join(f"#SBATCH {c}" for c in components).splitlines()
    for step in steps:
        lines += [f"echo '{STEP_MARK}'", f"{step} || echo STEP FAILED $?"]
    script = "\n".join(lines) + "\n"
    cluster.ok(f"cat > /data/hetjob/{name}.sbatch <<'EOF'\n{script}EOF")
    state = jobs.wait(cluster, jobs.submit(cluster, f"/data/hetjob/{name}.sbatch", "cd /data &&"))
    out = cluster.ok(f"cat /data/hetjob/{name}.out")
    assert state == "COMPLETED", out
    assert "STEP FAILED" not in out, out
    return out.split(STEP_MARK + "\n")[1:]


def views(out: str) -> tuple[dict[int, dict], dict[int, dict]]:
    """Per SLURM_PROCID: Slurm's view of the task, and the entrypoint's --print-config with
    the local index it chose (its port's place among its host's ports)."""
    slurm = {
        int(m[0]): {"node": m[1], "local": int(m[2]), "cvd": m[3], "step_gpus": m[4]}
        for m in SLURM_LINE.findall(out)
    }
    entry = {}
    for line in out.splitlines():
        if line.startswith("{"):
            config = json.loads(line)
            ports = [
                int(a.rsplit(":", 1)[1])
                for kind in config["TF_CONFIG"]["cluster"].values()
                for a in kind
                if a.startswith(config["host"] + ":")
            ]
            config["local"] = int(config["address"].rsplit(":", 1)[1]) - min(ports)
            entry[config["procid"]] = config
    return slurm, entry


@pytest.fixture(scope="module")
def het(cluster):
    cluster.ok(
        f"mkdir -p /data/hetjob && cat > /data/hetjob/task.sh <<'EOF'\n{TASK}EOF\n"
        "chmod 0755 /data/hetjob/task.sh"
    )
    return cluster


def test_a_het_step_resolves_one_cluster_with_each_nodes_own_gpus(het):
    """Component 0 on the gpu partition (the batch script runs on g1), component 1 on CPU
    nodes: Slurm's merged nodelist is c[1-2],g[1-2], srun carries g1's CUDA_VISIBLE_DEVICES to
    c1 and c2, and component 0's ranks are dealt cyclic in the second step."""
    outputs = het_job(
        het,
        ["-p gpu -N2 --ntasks-per-node=2 --gres=gpu:4", "-p debug -N2 --ntasks-per-node=2"],
        [
            "srun --het-group=0,1 /data/hetjob/task.sh --print-config",
            "srun --het-group=0 -m cyclic /data/hetjob/task.sh --print-config : "
            "--het-group=1 /data/hetjob/task.sh --print-config",
        ],
    )
    for number, text in enumerate(outputs):
        slurm, entry = views(text)
        assert sorted(slurm) == sorted(entry) == list(range(8)), text
        clusters = {json.dumps(c["TF_CONFIG"]["cluster"]) for c in entry.values()}
        assert len(clusters) == 1, clusters  # all eight agree
        workers = json.loads(clusters.pop())["worker"]
        hosts = [a.split(":")[0] for a in workers]
        assert hosts == ["g1", "g1", "g2", "g2", "c1", "c1", "c2", "c2"]
        for procid, config in entry.items():
            view = slurm[procid]
            assert (config["host"], config["local"]) == (view["node"], view["local"])
            assert config["component"] == (0 if view["node"] in GPU_NODES else 1)
            if view["node"] in GPU_NODES:  # Slurm's 4 on the node, split between its 2 tasks
                assert view["cvd"] == view["step_gpus"] == "0,1,2,3"
                assert config["CUDA_VISIBLE_DEVICES"] == ("0,1", "2,3")[view["local"]]
            else:  # carried over from g1 by srun, no GPU of this node: hidden
                assert (view["cvd"], view["step_gpus"]) == ("0,1,2,3", "unset")
                assert config["CUDA_VISIBLE_DEVICES"] == ""
        # TensorFlow's task index follows the component's nodes and local ids; Slurm's rank is
        # the same under block (first step) and differs where component 0 was dealt cyclic
        moved = sorted(p for p, c in entry.items() if c["rank"] != p)
        assert moved == ([] if number == 0 else [1, 2]), entry


PS_CONFIG = "/data/hetjob/task.sh --strategy parameter-server --print-config"


def test_a_parameter_server_het_step_puts_chief_and_ps_on_the_cpu_component(het):
    het_step, plain_step = het_job(
        het,
        ["-p debug -N1 --ntasks-per-node=3", "-p gpu -N2 --ntasks-per-node=1 --gres=gpu:2"],
        [f"srun --het-group=0,1 {PS_CONFIG}", f"srun {PS_CONFIG}"],
    )
    slurm, entry = views(het_step)
    roles = {p: (c["role"], c["host"], c["CUDA_VISIBLE_DEVICES"]) for p, c in entry.items()}
    assert roles == {
        0: ("chief", "c1", None),
        1: ("ps", "c1", None),
        2: ("ps", "c1", None),
        3: ("worker", slurm[3]["node"], "0,1"),
        4: ("worker", slurm[4]["node"], "0,1"),
    }
    assert {slurm[3]["node"], slurm[4]["node"]} == set(GPU_NODES)
    assert slurm[3]["step_gpus"] == slurm[4]["step_gpus"] == "0,1"  # Slurm's, kept whole
    # a plain srun runs in component 0 only: an ordinary step (3 tasks: chief, ps, worker)
    _, plain = views(plain_step)
    assert [plain[p]["role"] for p in range(3)] == ["chief", "ps", "worker"]
    assert {c["component"] for c in plain.values()} == {None}


def test_heterogeneous_cifar10_job_completes_with_workers_on_the_gpu_nodes(het, sample):
    output_dir = f"/data/runs/e2e-het-{uuid.uuid4().hex[:6]}"
    nodes = NODES + GPU_NODES
    before = tmp_entries(het, nodes)
    job, _ = jobs.run(
        het,
        f"{EXAMPLES}/heterogeneous.sbatch --steps 150 --log-every 25 --checkpoint-every 50",
        f"OUTPUT_DIR={output_dir}",
    )
    log = het.ok(f"cat /data/cifar10-heterogeneous-{job}.out")
    check_clean_end(het, job, log)
    assert left_in_tmp(het, before, nodes) == [], log

    sacct = het.ok(f"sacct -j {job} --noheader --parsable2 --format=JobID,State,ExitCode")
    rows = [line.split("|") for line in sacct.splitlines()]
    assert {r[0] for r in rows} >= {f"{job}+0", f"{job}+0.batch", f"{job}+0.0", f"{job}+1.0"}
    assert all(r[1] == "COMPLETED" and r[2] == "0:0" for r in rows), f"{rows}\n{log}"

    tasks = re.findall(
        r"rank (\d)/4 host (\S+) het group (\d) role (\w+) index \d addr \S+ "
        r"gpus (\S+)",
        log,
    )
    assert sorted(tasks) == [
        ("0", "c1", "0", "chief", "untouched"),
        ("1", "c1", "0", "ps", "untouched"),
        ("2", "g1", "1", "worker", "0,1"),
        ("3", "g2", "1", "worker", "0,1"),
    ], log
    metrics = json.loads(het.ok(f"cat {output_dir}/metrics.json"))
    assert metrics["global_step"] == 150 and metrics["workers"] == 2
    assert metrics["test_accuracy"] > 0.6, metrics
