"""Stage 3: assign each rank its TensorFlow role and its host:port address."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError

MULTI_WORKER = "multi-worker"
PARAMETER_SERVER = "parameter-server"
STRATEGIES = (MULTI_WORKER, PARAMETER_SERVER)
DEFAULT_NUM_PS = 1

# Default ports: one window of PORT_STRIDE ports per (job, step), inside [PORT_MIN, PORT_MAX).
# Windows are numbered job_id * STEPS_PER_JOB + step_id, so steps 0..15 of one job, and jobs
# whose ids differ by less than WINDOWS // STEPS_PER_JOB, never share a window on a node.
PORT_MIN, PORT_MAX = 10000, 60000
PORT_STRIDE = 64
STEPS_PER_JOB = 16
WINDOWS = (PORT_MAX - PORT_MIN) // PORT_STRIDE
MAX_PORT = 65535


def default_port_base(job_id: int, step_id: int) -> int:
    """A port base that two jobs or two steps sharing a node do not both pick."""
    window = (job_id * STEPS_PER_JOB + step_id) % WINDOWS
    return PORT_MIN + window * PORT_STRIDE


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ConfigError(
            f"unknown strategy {strategy!r}",
            f"use --strategy (TFSLURM_STRATEGY) {' or '.join(STRATEGIES)}",
        )


def assign_roles(
    num_tasks: int, strategy: str, num_ps: int = DEFAULT_NUM_PS
) -> list[tuple[str, int]]:
    """(task type, task index) for each rank, in rank order."""
    check_strategy(strategy)
    if strategy == MULTI_WORKER:
        return [("worker", rank) for rank in range(num_tasks)]
    if num_ps < 1:
        raise ConfigError(
            f"parameter-server needs at least one ps, got --ps {num_ps}", "use --ps 1 or more"
        )
    if num_tasks < num_ps + 2:
        raise ConfigError(
            f"parameter-server with {num_ps} ps needs at least {num_ps + 2} tasks "
            f"(chief, {num_ps} ps, 1 worker) but the step has {num_tasks}",
            f"start the step with srun -n {num_ps + 2} or more, or lower --ps",
        )
    roles = [("chief", 0)]
    roles += [("ps", i) for i in range(num_ps)]
    roles += [("worker", i) for i in range(num_tasks - 1 - num_ps)]
    return roles


def addresses(hosts: Sequence[str], local_index: Sequence[int], port_base: int) -> list[str]:
    """host:(port_base + local index) for each rank."""
    top = port_base + max(local_index, default=0)
    if top > MAX_PORT:
        raise ConfigError(
            f"port base {port_base} plus {max(local_index) + 1} tasks on one node reaches port "
            f"{top}, above {MAX_PORT}",
            f"set --port-base (TFSLURM_PORT_BASE) to {MAX_PORT - max(local_index)} or lower",
        )
    return [f"{host}:{port_base + i}" for host, i in zip(hosts, local_index, strict=True)]


def port_of(address: str) -> int:
    """The port of a "host:port" address this module made."""
    return int(address.rsplit(":", 1)[1])


def cluster_spec(roles: Sequence[tuple[str, int]], addrs: Sequence[str]) -> dict[str, list[str]]:
    """TF_CONFIG's "cluster": each task type's addresses, ordered by task index (= rank order)."""
    spec: dict[str, list[str]] = {}
    for (task_type, _), addr in zip(roles, addrs, strict=True):
        spec.setdefault(task_type, []).append(addr)
    return spec
