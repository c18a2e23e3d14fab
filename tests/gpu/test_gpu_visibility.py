"""On a machine with NVIDIA GPUs: detection by nvidia-smi and CUDA_VISIBLE_DEVICES narrowing,
checked by asking the CUDA driver itself (libcuda) how many devices each task sees.

Skipped where there is no GPU; run with `make test-gpu` on a GPU node.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_slurm import step_env
from tfslurm_entry.resolve.gpus import detect_node_gpus

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi: no GPU here"),
]
REPO = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

# Counts the devices the CUDA driver exposes to this process (honours CUDA_VISIBLE_DEVICES).
COUNT_DEVICES = """
import ctypes, json, os, sys
cuda = ctypes.CDLL("libcuda.so.1")
count = ctypes.c_int(0)
init = cuda.cuInit(0)
if init == 0:
    cuda.cuDeviceGetCount(ctypes.byref(count))
print(json.dumps({"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "init": init,
                  "count": count.value}))
"""


def nvidia_smi_uuids() -> list[str]:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(UUID: (GPU-[0-9a-f-]+)\)", out)


def run_task(tmp_path, env, *argv):
    """One task's entrypoint running COUNT_DEVICES; its CompletedProcess."""
    return start_task(tmp_path, env, *argv).communicate_result()


def start_task(tmp_path, env, *argv):
    program = tmp_path / "count_devices.py"
    program.write_text(COUNT_DEVICES)
    env = {**env, "PATH": os.environ["PATH"], "PYTHONPATH": PYTHONPATH}
    return Task([sys.executable, "-m", "tfslurm_entry", *argv, str(program)], env)


class Task(subprocess.Popen):
    def __init__(self, argv, env):
        super().__init__(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def communicate_result(self) -> subprocess.CompletedProcess:
        out, err = self.communicate(timeout=120)
        return subprocess.CompletedProcess(self.args, self.returncode, out, err)


# Two "nodes" that are both this machine, one task each: every task is alone on its node, and
# rank 0's entrypoint (which supervises the step) hears from rank 1 as in a real step.
TWO_NODES = ("localhost,127.0.0.1", "1(x2)")


def run_alone_on_node(tmp_path, cvd, *argv):
    """Both ranks of a two-node step; rank 0's CompletedProcess once both have ended."""
    tasks = [start_task(tmp_path, step_env(rank, *TWO_NODES, **cvd), *argv) for rank in (0, 1)]
    results = [t.communicate_result() for t in tasks]
    assert results[1].returncode == 0, results[1].stderr
    return results[0]


def test_nvidia_smi_detection_matches_the_driver():
    gpus = detect_node_gpus(None)
    assert gpus == [str(i) for i in range(len(nvidia_smi_uuids()))]
    assert gpus, "nvidia-smi lists no GPU"


@pytest.mark.parametrize("use_uuids", [False, True])
def test_worker_alone_on_its_node_sees_all_node_gpus_by_their_own_ids(tmp_path, use_uuids):
    ids = nvidia_smi_uuids() if use_uuids else detect_node_gpus(None)
    cvd = {"CUDA_VISIBLE_DEVICES": ",".join(ids)}
    result = run_alone_on_node(tmp_path, cvd, "--port-base", "21000")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got["cvd"] == ",".join(ids)  # Slurm's own ids (or UUIDs), never renumbered
    assert (got["init"], got["count"]) == (0, len(ids))


def test_unset_cuda_visible_devices_comes_from_nvidia_smi(tmp_path):
    result = run_alone_on_node(tmp_path, {}, "--port-base", "21010")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    ids = detect_node_gpus(None)
    assert (got["cvd"], got["count"]) == (",".join(ids), len(ids))


def test_parameter_server_chief_and_ps_see_no_gpu(tmp_path):
    ids = ",".join(detect_node_gpus(None))
    # The chief alone: its ps and worker (TensorFlow servers) are not started here, so after
    # the program has run its entrypoint gives up waiting for them, naming them.
    env = step_env(0, "n1", "3", CUDA_VISIBLE_DEVICES=ids, TFSLURM_CHIEF_TIMEOUT="2")
    result = run_task(tmp_path, env, "--strategy", "parameter-server", "--port-base", "21020")
    assert "rank 1 on n1 did not connect to rank 0 within 2 s" in result.stderr
    got = json.loads(result.stdout)
    assert (got["cvd"], got["count"]) == ("", 0)
    ps = subprocess.run(
        [sys.executable, "-m", "tfslurm_entry", "--print-config", "--strategy", "parameter-server"],
        env={**step_env(1, "n1", "3", CUDA_VISIBLE_DEVICES=ids), "PYTHONPATH": PYTHONPATH},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(ps.stdout)["CUDA_VISIBLE_DEVICES"] == ""


def test_gpus_per_task_zero_hides_every_gpu(tmp_path):
    cvd = {"CUDA_VISIBLE_DEVICES": ",".join(detect_node_gpus(None))}
    result = run_alone_on_node(tmp_path, cvd, "--gpus-per-task", "0", "--port-base", "21030")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["count"] == 0


def test_more_tasks_than_gpus_is_refused_before_start(tmp_path):
    ids = detect_node_gpus(None)
    env = step_env(0, "n1", str(len(ids) + 1))
    result = run_task(tmp_path, env, "--port-base", "21200")
    assert result.returncode == 2
    assert f"host n1 has {len(ids)} GPUs" in result.stderr
    assert result.stdout == ""
