"""What a real site puts around a job, on localhost with real TensorFlow processes.

- Proxy variables: every task's environment has http_proxy/https_proxy pointing to a proxy that
  is down (tests.localhost.DeadProxy: it accepts and never answers). Without the kit, gRPC
  between the tasks goes to it (the control); under tfslurm-entry, none of it does.
- A pip install, no container: TensorFlow's distributed tutorials (our copies in
  tests/user_programs, unchanged) run with this checkout's .venv (`make venv`) and nothing of
  the images' environment: no TF_USE_LEGACY_KERAS, so the kit must choose tf-keras itself.

Both at once for the tutorials: they are what a user on such a site runs.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

# tests/integration is not a package: pytest puts its directory on sys.path
from test_tensorflow_localhost import MULTI_WORKER_PROGRAM, Processes, entry_command, slurm_env

from bench.localstep import free_port_base
from tests.localhost import DeadProxy

pytestmark = pytest.mark.integration

TUTORIALS = Path(__file__).resolve().parents[1] / "user_programs"
# (tasks, entrypoint options, the line the tutorial prints at its end)
RUNS = {
    "keras_multi_worker": (2, [], "Epoch 3/3"),
    "ctl_multi_worker": (2, [], "Epoch: 2,"),
    "parameter_server": (5, ["--strategy", "parameter-server", "--ps", "2"], "Final loss is"),
}
STEPS = "3"  # TUTORIAL_STEPS: steps per epoch in the multi-worker tutorials (theirs: 70)
CONTROL_WAIT_S = 60  # how long the control may take to reach the dead proxy


def site_env(rank: int, tasks: int, proxy: DeadProxy) -> dict[str, str]:
    """srun's environment on a site that exports a proxy, without the images' Keras choice."""
    env = slurm_env(rank, tasks)
    del env["TF_USE_LEGACY_KERAS"]
    env.update(http_proxy=proxy.url, https_proxy=proxy.url, no_proxy="pypi.example")
    return env


@pytest.mark.soak  # the control: TensorFlow's behaviour without the kit (make test-soak)
def test_without_the_kit_grpc_between_the_tasks_goes_to_the_proxy(processes: Processes):
    """The control: the same proxy variables, TF_CONFIG written by hand, plain Python. The
    proxy gets TensorFlow's connections (and the step hangs: stopped here once it is seen)."""
    port = free_port_base(2)
    workers = [f"localhost:{port + r}" for r in range(2)]
    with DeadProxy() as proxy:
        for rank in range(2):
            env = site_env(rank, 2, proxy)
            env["TF_USE_LEGACY_KERAS"] = "1"  # our program's own choice, as in the kit's runs
            env["TF_CONFIG"] = json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
            )
            processes.start(f"plain{rank}", [sys.executable, MULTI_WORKER_PROGRAM, "2"], env)
        deadline = time.monotonic() + CONTROL_WAIT_S
        while proxy.connections == 0:
            assert time.monotonic() < deadline, processes.report()
            time.sleep(0.2)
        assert all(c.proc.poll() is None for c in processes.children), processes.report()


@pytest.mark.parametrize("name", list(RUNS))
def test_a_tutorial_runs_from_a_pip_install_with_a_dead_proxy_set(
    processes: Processes, tmp_path, name
):
    tasks, options, done = RUNS[name]
    processes.workdir = tmp_path / name  # the tutorial's own directory, as a user runs it
    shutil.copytree(TUTORIALS / name, processes.workdir)
    port_base = free_port_base(tasks + 1)
    command = [*entry_command(), "--port-base", str(port_base), *options, "main.py"]
    with DeadProxy() as proxy:
        children = [
            processes.start(
                f"rank{rank}", command, {**site_env(rank, tasks, proxy), "TUTORIAL_STEPS": STEPS}
            )
            for rank in range(tasks)
        ]
        processes.wait(children)
        assert proxy.connections == 0, processes.report()
    rank0 = children[0].stderr() + children[0].stdout()
    assert done in rank0, processes.report()
    assert "tfslurm: proxy: https_proxy is set; the step's 1 hosts (localhost) are added" in rank0
    assert "tfslurm: TF_USE_LEGACY_KERAS=1: tf.keras is tf-keras" in rank0
