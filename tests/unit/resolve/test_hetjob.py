"""Heterogeneous steps, resolved from the variables of real het steps captured on the dev cluster.

tests/unit/resolve/data/het_steps.json holds every task's SLURM*/CUDA* variables from steps of
three het jobs (its "how" says which sbatch and srun). Each test resolves every task of a step on
its own, as the tasks do, and compares them with each other and with what Slurm said about it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostlist import expand_hostlist

from tfslurm_entry import cli
from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve import Options, resolve
from tfslurm_entry.resolve.slurm_env import read_step_env

STEPS = json.loads((Path(__file__).parent / "data" / "het_steps.json").read_text())["steps"]
HET = ["a-het", "a-cyclic", "b-het", "c-het", "c-cb", "c-bc", "c-cyc", "e-12", "e-02"]


def tasks(step: str) -> list[dict[str, str]]:
    return [dict(env, PATH="/usr/bin:/bin") for env in STEPS[step]["tasks"]]


def plans(step: str, **options):
    return [resolve(read_step_env(env), Options(**options)) for env in tasks(step)]


def config(env: dict[str, str], *args: str, capsys) -> dict:
    assert cli.run(["--print-config", *args], env) == 0
    return json.loads(capsys.readouterr().out)


# e-02 has one task in its first component: no parameter-server default (tested below)
CASES = [(step, "multi-worker") for step in HET] + [
    (step, "parameter-server") for step in HET if step != "e-02"
]


@pytest.mark.parametrize(("step", "strategy"), CASES)
def test_every_task_of_a_het_step_resolves_the_same_cluster_and_finds_itself(step, strategy):
    envs, resolved = tasks(step), plans(step, strategy=strategy)
    assert all(plan.me.component is not None for plan in resolved)
    clusters = {json.dumps(plan.tf_config["cluster"]) for plan in resolved}
    assert len(clusters) == 1, clusters  # every task builds the same TF_CONFIG cluster
    seen = set()
    for env, plan in zip(envs, resolved, strict=True):
        me = plan.me
        assert me.host == env["SLURMD_NODENAME"]
        assert me.local_index == int(env["SLURM_LOCALID"])
        assert plan.procid == int(env["SLURM_PROCID"])
        seen.add((me.task_type, me.index))
        assert me.host in expand_hostlist(env[f"SLURM_JOB_NODELIST_HET_GROUP_{me.component}"])
    assert len(seen) == len(envs)  # no two tasks took the same TensorFlow task
    assert resolved[0].rank == 0 and resolved[0].procid == 0  # rank 0 is Slurm's rank 0


def test_tasks_are_numbered_by_component_node_and_local_id_not_the_merged_nodelist():
    # b-het: component 0 is g[1-2], but the step's merged nodelist starts with c[1-2]
    env = tasks("b-het")[0]
    assert env["SLURM_STEP_NODELIST"] == "c[1-2],g[1-2]"
    plan = plans("b-het")[0]
    assert [t.host for t in plan.tasks] == ["g1", "g1", "g2", "g2", "c1", "c1", "c2", "c2"]
    assert [t.component for t in plan.tasks] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [plan.rank for plan in plans("b-het")] == list(range(8))  # = SLURM_PROCID here


def test_slurm_distribution_is_ignored_in_a_het_step_because_it_is_the_last_components():
    # c-het: component 0 (c1, c2, 2 tasks each) was dealt in blocks, yet every task says cyclic
    envs = tasks("c-het")
    assert {env["SLURM_DISTRIBUTION"] for env in envs} == {"cyclic"}
    assert [env["SLURM_GTIDS"] for env in envs[:2]] == ["0,1", "0,1"]
    assert [t.host for t in plans("c-het")[0].tasks] == ["c1", "c1", "c2", "c2", "g1", "g2"]


def test_a_component_dealt_cyclic_keeps_one_cluster_with_ranks_in_block_order():
    # c-cb: component 0 dealt cyclic, so SLURM_PROCID 2 is c1's second task; it becomes rank 1
    envs, resolved = tasks("c-cb"), plans("c-cb")
    by_procid = {plan.procid: plan for plan in resolved}
    assert envs[2]["SLURMD_NODENAME"] == "c1" and envs[2]["SLURM_LOCALID"] == "1"
    assert by_procid[2].rank == 1 and by_procid[2].me.address.startswith("c1:")
    assert by_procid[1].rank == 2 and by_procid[1].me.host == "c2"


def test_parameter_server_het_step_puts_chief_and_ps_in_the_first_component():
    resolved = plans("a-het", strategy="parameter-server")
    cluster = resolved[0].tf_config["cluster"]
    base = resolved[0].ports.numbers[0]
    assert cluster == {
        "chief": [f"c1:{base}"],
        "ps": [f"c1:{base + 1}", f"c1:{base + 2}"],
        "worker": [f"g1:{base}", f"g2:{base}"],
    }


def test_ps_option_wins_over_the_component_rule():
    cluster = plans("a-het", strategy="parameter-server", num_ps=1)[0].tf_config["cluster"]
    assert [len(cluster[kind]) for kind in ("chief", "ps", "worker")] == [1, 1, 3]
    assert cluster["worker"][0].startswith("c1:")


def test_parameter_server_het_step_with_one_task_in_the_first_component_is_refused():
    with pytest.raises(ConfigError, match=r"het group 0\), which has 1 task") as err:
        plans("e-02", strategy="parameter-server")
    assert "--ps N" in err.value.hint


def test_steps_in_one_component_resolve_as_if_the_job_were_not_heterogeneous():
    for step in ("a-plain", "a-g1"):
        for env in tasks(step):
            plain = {k: v for k, v in env.items() if "HET" not in k}
            het = resolve(read_step_env(env), Options())
            assert het == resolve(read_step_env(plain), Options())
            assert het.me.component is None


def test_gpus_follow_each_nodes_own_allocation(capsys):
    # a-het: --gres=gpu:2 on g1 and g2, one worker each; Slurm set nothing on c1 (no GPUs),
    # so chief and ps there are left as they are
    envs = tasks("a-het")
    assert [env.get("CUDA_VISIBLE_DEVICES") for env in envs] == [None] * 3 + ["0,1"] * 2
    got = [config(env, "--strategy", "parameter-server", capsys=capsys) for env in envs]
    assert [c["CUDA_VISIBLE_DEVICES"] for c in got] == [None, None, None, "0,1", "0,1"]
    assert [c["role"] for c in got] == ["chief", "ps", "ps", "worker", "worker"]


def test_a_cpu_components_inherited_cuda_visible_devices_is_hidden(capsys):
    # b-het: the batch script ran on g1, and srun carried its CUDA_VISIBLE_DEVICES=0,1,2,3 to
    # the tasks on c1 and c2, where Slurm gave no GPUs (no SLURM_STEP_GPUS there)
    envs = tasks("b-het")
    assert {env["CUDA_VISIBLE_DEVICES"] for env in envs} == {"0,1,2,3"}
    got = [config(env, capsys=capsys) for env in envs]
    assert [c["CUDA_VISIBLE_DEVICES"] for c in got] == ["0,1", "2,3"] * 2 + [""] * 4


def test_explain_shows_each_tasks_group_and_slurm_rank(capsys):
    env = tasks("c-cb")[2]  # SLURM_PROCID 2, rank 1
    assert cli.run(["--explain"], env) == 0
    out = capsys.readouterr().out
    assert "in het groups 0,1" in out and "this task is rank 1 (*) with SLURM_PROCID 2" in out
    rows = [line.split() for line in out.splitlines() if line.lstrip("* ").startswith("5 ")]
    assert rows and rows[0][-1] == "1"  # rank 5 (g2) is in group 1


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("SLURM_NODEID", "3", "SLURM_NODEID=3 disagrees with node 1"),
        ("SLURM_LOCALID", "1", "SLURM_LOCALID=1 disagrees with 1 tasks on g1"),
        ("SLURM_GTIDS", "4", "SLURM_GTIDS=4 disagrees with SLURM_PROCID=3 as task 0 of 1 on g1"),
        ("SLURM_PROCID", "1", "SLURM_PROCID=1 disagrees with ranks 3-4 for group 1"),
        ("SLURMD_NODENAME", "c2", "SLURMD_NODENAME='c2' is not a host"),
    ],
)
def test_a_task_whose_own_variables_disagree_with_the_het_layout_stops(var, value, message):
    env = tasks("a-het")[3]  # rank 3 on g1
    env[var] = value
    with pytest.raises(ConfigError, match=message) as err:
        resolve(read_step_env(env), Options())
    assert "group 0 on c1 (3 tasks), group 1 on g[1-2] (2 tasks)" in str(err.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SLURM_JOB_NODELIST_HET_GROUP_1": None}, "SLURM_HET_SIZE=2 but SLURM_JOB_NODELIST_HET"),
        ({"SLURM_JOB_NODELIST_HET_GROUP_1": "c1,g[1-2]"}, "host c1 is in components 0 and 1"),
        ({"SLURM_JOB_NODELIST_HET_GROUP_1": "g1"}, "step host g2 is in none of the 2"),
        ({"SLURM_JOB_NODELIST_HET_GROUP_0": "c[1"}, "SLURM_JOB_NODELIST_HET_GROUP_0='c\\[1'"),
        ({"SLURM_GTIDS": "3,x"}, "SLURM_GTIDS='3,x' is not a list of ranks"),
    ],
)
def test_malformed_het_variables_are_named(change, message):
    env = tasks("a-het")[3]
    for var, value in change.items():
        if value is None:
            del env[var]
        else:
            env[var] = value
    with pytest.raises(ConfigError, match=message):
        read_step_env(env)
