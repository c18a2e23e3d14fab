"""On a machine with NVIDIA GPUs: detection by nvidia-smi and CUDA_VISIBLE_DEVICES narrowing,
checked by asking the CUDA driver itself (libcuda) how many devices each task sees.

The machine is one node: a step played on it has all its tasks on that node (two "nodes" that
were both this machine would claim the same ports, as two real nodes never do). Skipped where
there is no GPU; run with `make test-gpu` on a GPU node.
"""

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

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi: no GPU here"),
]
PYTHONPATH = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
# What a task's environment takes from this one: the tools, the package, the driver's directory.
PASSED = {name: os.environ[name] for name in ("PATH", "LD_LIBRARY_PATH") if name in os.environ}

# Counts the devices the CUDA driver exposes to this process (honours CUDA_VISIBLE_DEVICES).
COUNT_DEVICES = """
import ctypes, json, os, sys
cuda = ctypes.CDLL("libcuda.so.1")
count = ctypes.c_int(0)
init = cuda.cuInit(0)
if init == 0:
    cuda.cuDeviceGetCount(ctypes.byref(count))
out = sys.argv[1].replace("RANK", os.environ.get("SLURM_PROCID", ""))
with open(out, "w") as f:
    json.dump({"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "init": init,
               "count": count.value}, f)
"""


def nvidia_smi_uuids() -> list[str]:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(UUID: (GPU-[0-9a-f-]+)\)", out)


def two_names_per_task(use_uuids: bool) -> list[str]:
    """CUDA_VISIBLE_DEVICES for a node whose two tasks each get half: the node's GPUs by index
    or UUID, an even number of them; a one-GPU machine lists its GPU twice, by index and by
    UUID, so that each task gets it under a name of its own."""
    ids, uuids = detect_node_gpus(None), nvidia_smi_uuids()
    if len(ids) == 1:
        return [ids[0], uuids[0]]
    names = uuids if use_uuids else ids
    return names[: len(names) // 2 * 2]


def run_step(tmp_path, tasks: int, argv=(), **env) -> list[dict]:
    """Every task of a one-node step of `tasks` tasks running COUNT_DEVICES through the
    entrypoint; what each task's program saw, in rank order."""
    program = tmp_path / "count_devices.py"
    program.write_text(COUNT_DEVICES)
    base = free_port_base(tasks + 1)  # + rank 0's control port
    procs = []
    for rank in range(tasks):
        task = {
            **step_env(
                rank,
                "localhost",
                str(tasks),
                SLURMD_NODENAME="localhost",
                SLURM_LOCALID=str(rank),
                **env,
            ),
            **PASSED,
            "PYTHONPATH": PYTHONPATH,
        }
        command = [
            sys.executable,
            "-m",
            "tfslurm_entry",
            "--port-base",
            str(base),
            *argv,
            str(program),
            str(tmp_path / "seen.RANK"),
        ]
        procs.append(
            subprocess.Popen(
                command, env=task, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    for rank, proc in enumerate(procs):
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"rank {rank}: {err}"
    return [json.loads((tmp_path / f"seen.{rank}").read_text()) for rank in range(tasks)]


def driver_count(cvd: str) -> int:
    """How many devices the CUDA driver shows a process given this CUDA_VISIBLE_DEVICES."""
    out = Path(os.environ.get("TMPDIR", "/tmp"), f"count-{os.getpid()}.json")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": cvd}
    subprocess.run([sys.executable, "-c", COUNT_DEVICES, str(out)], env=env, check=True)
    got = json.loads(out.read_text())
    out.unlink()
    return got["count"] if got["init"] == 0 else 0


def print_config(env: dict, *argv: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tfslurm_entry", "--print-config", *argv],
        env={**env, **PASSED, "PYTHONPATH": PYTHONPATH},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


def test_nvidia_smi_detection_matches_the_driver():
    gpus = detect_node_gpus(None)
    assert gpus == [str(i) for i in range(len(nvidia_smi_uuids()))]
    assert gpus, "nvidia-smi lists no GPU"
    assert driver_count(",".join(gpus)) == len(gpus)


@pytest.mark.parametrize("use_uuids", [False, True], ids=["indices", "uuids"])
def test_each_task_sees_its_half_of_the_node_gpus_by_their_own_names(tmp_path, use_uuids):
    names = two_names_per_task(use_uuids)
    seen = run_step(tmp_path, 2, CUDA_VISIBLE_DEVICES=",".join(names))
    half = len(names) // 2
    for rank, got in enumerate(seen):
        mine = names[rank * half : (rank + 1) * half]
        assert got["cvd"] == ",".join(mine)  # Slurm's own names, never renumbered
        assert (got["init"], got["count"]) == (0, len(mine))


def test_a_task_alone_on_its_node_gets_every_gpu_nvidia_smi_lists(tmp_path):
    """CUDA_VISIBLE_DEVICES unset (Slurm gave no GPUs by name): rank 1, alone on its node in a
    two-node step, gets every GPU nvidia-smi lists, and the driver shows them all."""
    got = print_config(step_env(1, "n[1-2]", "1(x2)"))
    ids = detect_node_gpus(None)
    assert got["CUDA_VISIBLE_DEVICES"] == ",".join(ids)
    assert driver_count(got["CUDA_VISIBLE_DEVICES"]) == len(ids)


def test_parameter_server_chief_and_ps_see_no_gpu():
    ids = ",".join(detect_node_gpus(None))
    for rank in (0, 1):  # chief, ps; rank 2 the worker
        env = step_env(rank, "n1", "3", CUDA_VISIBLE_DEVICES=ids)
        got = print_config(env, "--strategy", "parameter-server")
        assert got["role"] == ("chief", "ps")[rank] and got["CUDA_VISIBLE_DEVICES"] == ""
    assert driver_count("") == 0


def test_gpus_per_task_zero_hides_every_gpu(tmp_path):
    ids = ",".join(detect_node_gpus(None))
    seen = run_step(tmp_path, 2, ["--gpus-per-task", "0"], CUDA_VISIBLE_DEVICES=ids)
    assert [(got["cvd"], got["count"]) for got in seen] == [("", 0), ("", 0)]


def test_more_tasks_than_gpus_is_refused_before_start(tmp_path):
    ids = detect_node_gpus(None)
    env = step_env(0, "n1", str(len(ids) + 1))
    proc = subprocess.run(
        [sys.executable, "-m", "tfslurm_entry", "--port-base", "21200", "true"],
        env={**env, **PASSED, "PYTHONPATH": PYTHONPATH},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert f"host n1 has {len(ids)} GPUs" in proc.stderr
    assert proc.stdout == ""
