"""The Docker image: non-root, tf-keras, and tfslurm-entry resolving fake Slurm steps."""

from __future__ import annotations

import json
from contextlib import ExitStack

import pytest

from .conftest import (
    LOADERS_CODE,
    Result,
    image_container,
    internal_network,
    result_of,
    slurm_env,
)

pytestmark = pytest.mark.container

NODE_GPUS = "4,5,6,7"  # what Slurm's gres plugin would set on each node of the step
RANKS = range(4)  # 2 nodes x 2 tasks


def test_runs_as_unprivileged_user(image, run_image):
    assert image.attrs["Config"]["User"] == "tf"
    result = run_image(["-c", "id -u; id -g"], entrypoint="sh")
    assert result.status == 0, result.stderr
    uid, gid = result.stdout.split()
    assert uid != "0" and gid != "0"


def test_entrypoint_and_environment(image):
    config = image.attrs["Config"]
    assert config["Entrypoint"] == ["tfslurm-entry"]
    assert "TF_USE_LEGACY_KERAS=1" in config["Env"]


def test_no_build_leftovers(run_image):
    """No compiler, pip, package caches, headers or test suites in the final image."""
    script = r"""
        site=/opt/venv/lib/python3.11/site-packages
        for tool in gcc cc g++ strip pip pip3; do command -v $tool && echo "found $tool"; done
        ls /var/lib/apt/lists | grep -v -e '^lock$' -e '^partial$' && echo "apt lists left"
        ls /var/cache/apt/archives/*.deb 2>/dev/null && echo "debs left"
        ls -d /root/.cache /root/.keras /home/tf/.cache /wheels 2>/dev/null && echo "caches left"
        ls -d $site/pip $site/tensorflow/include 2>/dev/null && echo "pip or headers left"
        true
    """
    result = run_image(["-c", script], entrypoint="sh", user="root")
    assert result.status == 0, result.stderr
    assert result.stdout.strip() == "", result.stdout


def test_a_program_started_without_the_entrypoint_in_a_step_stops_with_one_line(run_image):
    """`podman run --entrypoint python` (or ch-run, pyxis, apptainer exec): the image's .pth
    arms the guard in every Python; task 0 of a 2-task step making a MultiWorkerMirroredStrategy
    without TF_CONFIG says the runtime's fix, and stops."""
    code = "import tensorflow as tf; tf.distribute.MultiWorkerMirroredStrategy(); print('made')"
    env = {**slurm_env(0), "SLURM_STEP_NUM_TASKS": "2", "container": "podman"}
    result = run_image(["-c", code], entrypoint="python", env=env)
    assert result.status == 2 and "made" not in result.stdout, result.stderr
    said = "Under Podman: podman runs the image's entrypoint unless --entrypoint replaces it"
    assert said in result.stderr, result.stderr


def test_under_podman_without_slurms_variables_the_entrypoint_stops_with_one_line(run_image):
    """`srun podman run IMAGE train.py` without -e 'SLURM_*': Podman sets container=podman and
    passes no host variable; the entrypoint (the image's ENTRYPOINT, as podman runs it) names
    the flag, exit 2, the program not started. TFSLURM_LOCAL=1 runs it alone."""
    code = ["-c", "print('program ran')"]
    hidden = run_image(["python", *code], env={"container": "podman"})
    assert hidden.status == 2 and "program ran" not in hidden.stdout, hidden
    assert hidden.stderr.strip().splitlines() == [
        "tfslurm-entry: error: no SLURM_* variable in this Podman container: Podman passes none "
        "of the host's unless asked, and each task of a Slurm step would train alone; in a Slurm "
        "step: srun podman run -e 'SLURM_*' --network host IMAGE PROGRAM ARGS; outside Slurm, "
        "one process: podman run -e TFSLURM_LOCAL=1 IMAGE PROGRAM ARGS"
    ], hidden.stderr
    local = run_image(["python", *code], env={"container": "podman", "TFSLURM_LOCAL": "1"})
    assert local.status == 0 and "program ran" in local.stdout, local


def test_tf_keras_is_tf_keras(run_image):
    code = "import tensorflow as tf; print(tf.__version__, tf.keras.__name__)"
    result = run_image(["-c", code], entrypoint="python", env={"TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.status == 0, result.stderr
    version, keras_module = result.stdout.split()
    assert version == "2.21.0"
    assert keras_module.startswith("tf_keras")


@pytest.mark.parametrize("rank", RANKS)
def test_print_config_multi_worker(run_image, rank):
    env = slurm_env(rank, TFSLURM_PORT_BASE=23456, CUDA_VISIBLE_DEVICES=NODE_GPUS)
    result = run_image(["--print-config"], env)
    assert result.status == 0, result.stderr
    out = result.json()

    tf_config = out["TF_CONFIG"]
    workers = tf_config["cluster"]["worker"]
    assert list(tf_config["cluster"]) == ["worker"]
    assert [w.rsplit(":", 1)[0] for w in workers] == ["c1", "c1", "c2", "c2"]
    assert len(set(workers)) == 4, workers
    assert all(23456 <= int(w.rsplit(":", 1)[1]) < 23456 + 100 for w in workers), workers
    assert tf_config["task"] == {"type": "worker", "index": rank}
    assert out["role"] == "worker"
    assert out["address"] == workers[rank]
    # The node's four GPUs split in rank order, ids kept as Slurm gave them.
    assert out["CUDA_VISIBLE_DEVICES"] == ["4,5", "6,7"][rank % 2]


def test_print_config_parameter_server(run_image):
    outs = []
    for rank in RANKS:
        env = slurm_env(rank, TFSLURM_STRATEGY="parameter-server", CUDA_VISIBLE_DEVICES="0,1")
        result = run_image(["--print-config"], env)
        assert result.status == 0, result.stderr
        outs.append(result.json())
    cluster = outs[0]["TF_CONFIG"]["cluster"]
    assert all(o["TF_CONFIG"]["cluster"] == cluster for o in outs), "ranks disagree"
    assert len(cluster["chief"]) == 1 and len(cluster["ps"]) == 1 and len(cluster["worker"]) == 2
    for out in outs:
        if out["role"] == "worker":
            assert out["CUDA_VISIBLE_DEVICES"], out  # workers compute on GPUs
        else:
            assert out["CUDA_VISIBLE_DEVICES"] == "", out  # chief and ps see none


def test_a_member_without_rank_0_starts_nothing_and_gives_up(run_image):
    """Rank 3 alone: no program starts before every task has checked in with rank 0 and
    reached its peers (a whole step's programs get their TF_CONFIG: the next test); with no
    rank 0 to report to, the entrypoint gives up after the timeout and says so."""
    env = slurm_env(3, TFSLURM_PORT_BASE=23456, TFSLURM_CHIEF_TIMEOUT=1)
    result = run_image(["python", "-c", "print('started')"], env)
    assert "started" not in result.stdout, result.stdout
    assert result.status == 1 and "c1:23458 did not answer within 1 s" in result.stderr


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"SLURM_STEP_NUM_TASKS": "3"}, "SLURM_STEP_NUM_TASKS"),
        ({"SLURM_STEP_NODELIST": "c[2-1"}, "SLURM_STEP_NODELIST"),
        ({"SLURM_PROCID": "-1"}, "SLURM_PROCID"),
    ],
)
def test_broken_slurm_env_exits_2(run_image, change, names):
    env = slurm_env(0) | change
    result = run_image(["--print-config"], env)
    assert result.status == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tfslurm-entry: error: ")
    assert names in lines[0]


TRAIN = """
import json, os
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
    model.compile("sgd", "mse")
x, y = np.ones((64, 4), "float32"), np.ones((64, 1), "float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
history = model.fit(data, epochs=2, steps_per_epoch=3, verbose=0)
task = json.loads(os.environ["TF_CONFIG"])["task"]
print(json.dumps({"task": task, "keras": tf.keras.__name__, "loss": history.history["loss"]}))
"""


def test_two_containers_started_as_pyxis_starts_them_train_multi_worker(image):
    """Two containers, c1 and c2, as the two tasks of a step started the way enroot + pyxis
    starts a task (`srun --container-image=IMAGE tfslurm-entry PROGRAM`): the image's
    ENTRYPOINT not run, `tfslurm-entry` the command, the image's ENV applied, the job user's
    uid (not in the image's /etc/passwd) with its home mounted, each task its own SLURM_*, and
    pyxis' PYXIS_VERSION: model.fit under MWMS finishes, one model. pyxis itself has not run it
    (docs/runtimes.md)."""
    train_two_workers(image.id)


# A job user the image does not know, as pyxis runs a task: its uid, its home mounted.
PYXIS_USER = "4321:4321"
PYXIS_HOME = "/home/alice"


def train_two_workers(image_ref: str) -> list[Result]:
    """Run TRAIN as the two tasks of a step in containers c1 and c2 of `image_ref`, started as
    pyxis starts them; check that both finish one synchronised model. Their results (the GPU
    image's test reads them)."""
    results, runs = [], []
    # Both containers run before either is waited for; they go before their network.
    with internal_network() as network, ExitStack() as started:
        tasks = []
        for rank in range(2):
            host = f"c{rank + 1}"
            env = slurm_env(rank, tasks_per_node=1, TFSLURM_PORT_BASE=23456)
            env.update(TF_CPP_MIN_LOG_LEVEL="2", HOME=PYXIS_HOME, PYXIS_VERSION="0.20.0")
            task = (
                image_container(image_ref, ["tfslurm-entry", "python", "-c", TRAIN], env)
                .with_network(network)
                .with_network_aliases(host)
                .with_kwargs(hostname=host, entrypoint=[""], user=PYXIS_USER)
            )
            # The home pyxis mounts (docker's tmpfs options: testcontainers' own knows size only).
            task.tmpfs[PYXIS_HOME] = f"uid={PYXIS_USER.split(':')[0]},mode=0700"
            tasks.append(started.enter_context(task))
        for task in tasks:
            result = result_of(task, timeout=300)
            assert result.status == 0, result.stderr[-3000:]
            host_line = f"tfslurm: rank {len(results)}/2 host c{len(results) + 1}"
            assert host_line in result.stderr, result.stderr[-3000:]
            results.append(result.json())
            runs.append(result)
    assert [r["task"] for r in results] == [
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    assert all(r["keras"].startswith("tf_keras") for r in results)
    assert results[0]["loss"] == results[1]["loss"]  # one synchronised model
    return runs


def test_the_image_imports_from_its_bytecode_bundle_until_a_directory_changes(run_image):
    """The bundle serves the Docker image too; a derived image that installs into a directory
    (here: a new file in tensorflow/, as pip would add one) gets that directory from its files,
    never stale bytecode."""
    env = {"TF_CPP_MIN_LOG_LEVEL": "3"}
    result = run_image(["-c", LOADERS_CODE], entrypoint="python", env=env)
    assert result.status == 0, result.stderr
    loaders = result.json()
    assert loaders.get("BundleLoader", 0) > 2000 and loaders.get("SourceFileLoader", 0) < 50
    script = (
        "touch /opt/venv/lib/python3.11/site-packages/tensorflow/added_later.py && "
        f"python -c '{LOADERS_CODE}\nprint(type(tf.__spec__.loader).__name__)'"
    )
    result = run_image(["-c", script], entrypoint="sh", user="root", env=env)
    assert result.status == 0, result.stderr
    assert result.stdout.split()[-1] == "SourceFileLoader"  # tensorflow/__init__.py: files
    loaders = json.loads(result.stdout.splitlines()[-2])
    assert loaders.get("BundleLoader", 0) > 1000, loaders  # other directories: the bundle
