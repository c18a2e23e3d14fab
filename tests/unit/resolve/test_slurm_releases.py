"""Every Slurm release the kit supports, from what each really exported.

tests/unit/resolve/data/slurm-<version>.json holds every task's SLURM*/CUDA* variables from the
same steps run on the dev cluster of that release (`make capture-slurm-env SLURM=<version>`;
each step's "how" says which srun or sbatch): block, cyclic, plane, `-m pack`/`nopack`,
--gpus-per-task, --gpu-bind=single:1, a GPU allocation shared by a step's tasks, and het steps
made by sbatch and by `srun a : b` outside an allocation. Each task is resolved on its own,
through the CLI as in a job, and compared with the other tasks and with what Slurm said about it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfslurm_entry import cli

DATA = Path(__file__).parent / "data"
RELEASES = {
    path.stem.removeprefix("slurm-"): json.loads(path.read_text())["steps"]
    for path in sorted(DATA.glob("slurm-*.json"))
}
CASES = [(version, step) for version, steps in RELEASES.items() for step in steps]
GPU_BOUND = ("gpus-per-task-1", "gpus-per-task-2", "gpu-bind-single")


def configs(version: str, step: str, capsys, *args: str) -> list[dict]:
    """--print-config of every task of the step, in SLURM_PROCID order."""
    out = []
    for env in RELEASES[version][step]["tasks"]:
        code = cli.run(["--print-config", *args], dict(env, PATH="/usr/bin:/bin"))
        captured = capsys.readouterr()
        assert code == 0, (
            f"Slurm {version}, {step}, SLURM_PROCID={env['SLURM_PROCID']}: {captured.err}"
        )
        out.append(json.loads(captured.out))
    return out


def visible(config: dict, env: dict[str, str]) -> list[str]:
    """The GPUs the task's program sees: what the kit set, else what Slurm gave it."""
    value = config["CUDA_VISIBLE_DEVICES"]
    value = env.get("CUDA_VISIBLE_DEVICES", "") if value is None else value
    return [item for item in value.split(",") if item]


def test_every_release_was_captured():
    assert set(RELEASES) == {"22.05", "24.11", "26.05"}


# parameter-server needs a chief, a ps and a worker: not in the 2-task steps
STRATEGY_CASES = [(v, s, "multi-worker") for v, s in CASES] + [
    (v, s, "parameter-server") for v, s in CASES if len(RELEASES[v][s]["tasks"]) >= 3
]


@pytest.mark.parametrize(("version", "step", "strategy"), STRATEGY_CASES)
def test_every_task_finds_itself_in_one_cluster(version, step, strategy, capsys):
    envs = RELEASES[version][step]["tasks"]
    found = configs(version, step, capsys, "--strategy", strategy)
    assert len({json.dumps(c["TF_CONFIG"]["cluster"]) for c in found}) == 1
    tasks = {(c["TF_CONFIG"]["task"]["type"], c["TF_CONFIG"]["task"]["index"]) for c in found}
    assert len(tasks) == len(envs)  # no two tasks took the same TensorFlow task
    for env, config in zip(envs, found, strict=True):
        assert config["host"] == env["SLURMD_NODENAME"], (env, config)
        if "SLURM_HET_SIZE" not in env:
            assert config["rank"] == int(env["SLURM_PROCID"])


@pytest.mark.parametrize(("version", "step"), [c for c in CASES if c[1] in GPU_BOUND])
def test_gpus_slurm_bound_to_each_task_are_kept_as_slurm_gave_them(version, step, capsys):
    """22.05 exports no SLURM_TRES_BIND: the kit must still see that Slurm bound the GPUs
    (CUDA_VISIBLE_DEVICES narrower than SLURM_GPUS_ON_NODE) instead of splitting them again."""
    envs = RELEASES[version][step]["tasks"]
    for env, config in zip(envs, configs(version, step, capsys), strict=True):
        assert visible(config, env) == env["CUDA_VISIBLE_DEVICES"].split(","), (version, env)


@pytest.mark.parametrize("version", RELEASES)
def test_a_gpu_allocation_the_step_shares_is_split_between_its_tasks(version, capsys):
    envs = RELEASES[version]["gres-shared"]["tasks"]
    assert {env["CUDA_VISIBLE_DEVICES"] for env in envs} == {"0,1,2,3"}
    seen = [
        visible(config, env)
        for env, config in zip(envs, configs(version, "gres-shared", capsys), strict=True)
    ]
    assert seen == [["0", "1"], ["2", "3"]]


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("step", ["het-srun", "het-sbatch"])
def test_het_workers_get_their_components_gpus_and_the_cpu_component_none(version, step, capsys):
    envs = RELEASES[version][step]["tasks"]
    found = configs(version, step, capsys, "--strategy", "parameter-server")
    for env, config in zip(envs, found, strict=True):
        gpus = visible(config, env)
        if config["role"] == "worker":
            assert gpus == env["CUDA_VISIBLE_DEVICES"].split(",") and gpus, (version, env)
        else:
            assert gpus == [], (version, config)


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("step", ["pack", "nopack"])
def test_pack_and_nopack_are_laid_out_as_block(version, step, capsys):
    envs = RELEASES[version][step]["tasks"]
    hosts = [c["host"] for c in configs(version, step, capsys)]
    assert hosts == sorted(hosts, key=[e["SLURMD_NODENAME"] for e in envs].index)
