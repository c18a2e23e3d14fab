"""On a machine with NVIDIA GPUs: TensorFlow itself on the GPU, through tfslurm-entry.

Two runtimes, each a parameter of every test and each skipped with its reason when absent:
- venv: a Python whose TensorFlow is the CUDA build from containers/requirements-gpu.lock
  (`make venv-gpu` makes .venv-gpu; TFSLURM_GPU_PYTHON names another, e.g. one whose
  packages were installed with `pip install --target` and are on PYTHONPATH);
- sif: tf-slurm-gpu.sif (`make sif-gpu`; TFSLURM_GPU_SIF names another) under
  `apptainer run --nv`.

What must hold: TensorFlow registers every GPU the task may see; a one-task train.py and a
parameter-server step on localhost (faked Slurm variables: chief, ps, one worker) complete with
the worker on the GPU; and no task of those successful runs prints an E-level line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.localstep import free_port_base
from bench.repo import ROOT as REPO
from tests.fake_slurm import step_env
from tfslurm_entry.resolve.gpus import detect_node_gpus

GPU_PYTHON = os.environ.get("TFSLURM_GPU_PYTHON") or str(REPO / ".venv-gpu" / "bin" / "python")
GPU_SIF = Path(os.environ.get("TFSLURM_GPU_SIF") or REPO / "tf-slurm-gpu.sif")
# absl's E-level lines ("E0000 00:00:...", "E1125 ...") and Python tracebacks.
E_LINE = re.compile(r"^(E\d{4} |Traceback)")
REGISTERED = (
    "import json, tensorflow as tf; print(json.dumps(len(tf.config.list_physical_devices('GPU'))))"
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi: no GPU here"),
]


def _venv_missing() -> str | None:
    if not Path(GPU_PYTHON).exists():
        return f"no {GPU_PYTHON}: make venv-gpu, or set TFSLURM_GPU_PYTHON"
    has_tf = "import importlib.metadata as m; m.version('tensorflow')"
    probe = subprocess.run([GPU_PYTHON, "-c", has_tf], capture_output=True)
    return None if probe.returncode == 0 else f"{GPU_PYTHON} has no tensorflow (CUDA build)"


def _sif_missing() -> str | None:
    if shutil.which("apptainer") is None:
        return "no apptainer on this node"
    return None if GPU_SIF.exists() else f"no {GPU_SIF}: make sif-gpu, or set TFSLURM_GPU_SIF"


@pytest.fixture(params=["venv", "sif"])
def runtime(request):
    """The command prefix that runs tfslurm-entry in the runtime, and its environment."""
    missing = _venv_missing() if request.param == "venv" else _sif_missing()
    if missing:
        pytest.skip(missing)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TFSLURM_"))}
    base.pop("TF_CONFIG", None)
    if request.param == "venv":
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        return [GPU_PYTHON, "-m", "tfslurm_entry"], {**base, "PYTHONPATH": path}, GPU_PYTHON
    return ["apptainer", "run", "--nv", "-B", str(REPO), str(GPU_SIF)], base, "python"


def e_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if E_LINE.search(line)]


def run(argv, env, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_tensorflow_registers_every_visible_gpu(runtime):
    entry, env, python = runtime
    done = run([*entry, python, "-c", REGISTERED], env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == len(detect_node_gpus(None))
    assert "would run on the CPU" not in done.stderr, done.stderr[-3000:]
    assert not e_lines(done.stderr), done.stderr[-3000:]


@pytest.fixture(scope="module")
def cifar10(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("cifar10")
    sample = [sys.executable, str(REPO / "examples/cifar10/make_sample.py"), str(data)]
    subprocess.run([*sample, "--train-per-file", "500", "--test", "200"], check=True)
    return data


def train_py(data: Path, out: Path, steps: int) -> list[str]:
    return [
        str(REPO / "examples/cifar10/train.py"),
        "--data-dir",
        str(data),
        "--output-dir",
        str(out),
        "--steps",
        str(steps),
        "--log-every",
        str(steps // 4),
    ]


def test_one_task_train_py_trains_on_the_gpu(runtime, cifar10, tmp_path):
    entry, env, _ = runtime
    train = train_py(cifar10, tmp_path / "out", 200)
    env = {**env, "CUDA_VISIBLE_DEVICES": detect_node_gpus(None)[0]}
    done = run([*entry, "--require-gpu", *train], env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "images/s" in done.stdout, done.stdout[-2000:]
    assert not e_lines(done.stderr), done.stderr[-3000:]


def test_parameter_server_step_on_localhost_puts_the_worker_on_the_gpu(runtime, cifar10, tmp_path):
    """chief (rank 0), ps (rank 1), worker (rank 2), all on localhost: the worker alone gets
    the GPU, --require-gpu is satisfied, and every task ends 0 without an E-level line."""
    entry, env, _ = runtime
    gpu = detect_node_gpus(None)[0]
    base = free_port_base(4)
    train = train_py(cifar10, tmp_path / "out", 60)
    procs = []
    for rank in range(3):
        task = step_env(
            rank,
            "localhost",
            "3",
            SLURMD_NODENAME="localhost",
            CUDA_VISIBLE_DEVICES=gpu,
            TFSLURM_CHIEF_TIMEOUT="120",
        )
        argv = [
            *entry,
            "--strategy",
            "parameter-server",
            "--port-base",
            str(base),
            "--require-gpu",
            *train,
        ]
        procs.append(
            subprocess.Popen(
                argv,
                env={**env, **task},
                cwd=REPO,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    outs = [p.communicate(timeout=900) for p in procs]
    for rank, (proc, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert proc.returncode == 0, f"rank {rank}: {out[-2000:]}{err[-3000:]}"
        assert not e_lines(err), f"rank {rank}: {err[-3000:]}"
    assert f"role worker index 0 addr localhost:{base + 2} gpus {gpu}" in outs[2][1]
    assert "gpus none" in outs[0][1] and "gpus none" in outs[1][1]
