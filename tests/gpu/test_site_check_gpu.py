"""On a machine with NVIDIA GPUs: the site check's GPU row (tfslurm-entry --site-check) in
TensorFlow's CUDA build, against what TensorFlow itself registers.

Skipped where there is no GPU; run with `make test-gpu` on a GPU node (.venv-gpu, or
TFSLURM_GPU_PYTHON naming a Python with TensorFlow's CUDA build).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.gpu.test_tensorflow_gpu import GPU_PYTHON, REGISTERED, REPO, _venv_missing

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi: no GPU here"),
]


@pytest.fixture
def env():
    missing = _venv_missing()
    if missing:
        pytest.skip(missing)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TFSLURM_"))}
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**base, "PYTHONPATH": path}


def site_check(env) -> subprocess.CompletedProcess:
    argv = [GPU_PYTHON, "-m", "tfslurm_entry", "--site-check"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=REPO)


def gpus_row(table: str) -> str:
    """The gpus cell of the table's one node row."""
    head, row = table.splitlines()[1:3]
    return row.split()[head.split().index("gpus")]


def test_the_site_check_says_tensorflow_will_use_the_gpus_when_it_does(env):
    # TensorFlow as the kit starts it (its library path: the CUDA wheels wherever installed)
    argv = [GPU_PYTHON, "-m", "tfslurm_entry", GPU_PYTHON, "-c", REGISTERED]
    registered = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert int(registered.stdout.strip().splitlines()[-1]) >= 1, registered.stderr[-3000:]
    result = site_check(env)
    print(result.stdout)
    assert gpus_row(result.stdout) == "ok", result.stdout
    found = r"^ok gpus on \S+: GPUs [\w,-]+: the driver and TensorFlow's \d+ CUDA libraries load$"
    assert re.search(found, result.stdout, re.MULTILINE), result.stdout


def test_a_step_given_no_gpus_is_told_so(env):
    result = site_check({**env, "CUDA_VISIBLE_DEVICES": ""})
    print(result.stdout)
    assert gpus_row(result.stdout) == "ok", result.stdout
    assert "none given to this step" in result.stdout, result.stdout
