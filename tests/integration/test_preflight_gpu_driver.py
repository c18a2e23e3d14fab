"""The preflight role's GPU checks (playbooks/roles/preflight/tasks/gpu.yml), really run.

ansible-playbook runs the role's GPU tasks against localhost (connection local) with a stand-in
`nvidia-smi` first on PATH that lists one GPU and prints the driver version under test: the
driver check must pass a driver new enough for the GPU image's CUDA and stop on an older one
with its message. Nothing else of preflight runs, so neither munge nor srun is needed here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.repo import ROOT

pytestmark = pytest.mark.integration

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

PLAYBOOK = """\
- name: The preflight GPU checks on localhost
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run preflight's GPU tasks
      ansible.builtin.include_role:
        name: preflight
        tasks_from: gpu.yml
"""

NVIDIA_SMI = """\
#!/bin/sh
# A stand-in for nvidia-smi: one GPU, driver {driver}.
case "$*" in
-L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
"--query-gpu=driver_version --format=csv,noheader") echo "{driver}" ;;
*) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


def run_gpu_checks(tmp_path: Path, driver: str, *extra: str) -> subprocess.CompletedProcess:
    """The GPU tasks of preflight on localhost, with `nvidia-smi` reporting `driver`."""
    if not ANSIBLE_PLAYBOOK.exists():
        pytest.fail(f"{ANSIBLE_PLAYBOOK} is missing: pip install -e '.[deploy]' (or `make venv`)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "nvidia-smi"
    fake.write_text(NVIDIA_SMI.format(driver=driver))
    fake.chmod(0o755)
    playbook = tmp_path / "gpu-checks.yml"
    playbook.write_text(PLAYBOOK)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_ROLES_PATH": str(ROOT / "playbooks" / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
    }
    command = [
        str(ANSIBLE_PLAYBOOK),
        "-i",
        "localhost,",
        str(playbook),
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        *extra,
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def shown(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"


def test_a_driver_new_enough_for_cuda_12_passes(tmp_path: Path) -> None:
    proc = run_gpu_checks(tmp_path, "550.54.15")
    assert proc.returncode == 0, shown(proc)
    # The driver check ran (not skipped) and passed.
    assert re.search(r"Check the driver is new enough[^\n]*\nok: \[localhost\]", proc.stdout), (
        shown(proc)
    )


def test_an_old_driver_stops_with_what_to_do(tmp_path: Path) -> None:
    proc = run_gpu_checks(tmp_path, "470.57.02")
    assert proc.returncode != 0, shown(proc)
    assert (
        "localhost: NVIDIA driver 470.57.02 is too old for the GPU image, whose CUDA 12.9 needs "
        "driver 525.60.13 or newer; upgrade the driver on localhost to 525.60.13 or newer, "
        "or run its jobs on the CPU image"
    ) in " ".join(proc.stdout.split()), shown(proc)


def test_the_minimum_follows_the_images_cuda_major(tmp_path: Path) -> None:
    """A CUDA 13 image needs the r580 driver: 550 is enough for 12.9, not for 13.0."""
    proc = run_gpu_checks(tmp_path, "550.54.15", "-e", "tfslurm_gpu_cuda_version=13.0")
    assert proc.returncode != 0, shown(proc)
    assert "CUDA 13.0 needs driver 580.65.06 or newer" in " ".join(proc.stdout.split()), shown(proc)


def test_the_minimum_itself_passes_and_an_unreadable_version_stops(tmp_path: Path) -> None:
    proc = run_gpu_checks(tmp_path / "exact", "525.60.13")
    assert proc.returncode == 0, shown(proc)
    proc = run_gpu_checks(tmp_path / "garbage", "[N/A]")
    assert proc.returncode != 0, shown(proc)
    assert "printed no driver version" in proc.stdout, shown(proc)
