"""The environment the role runs with: TF_CONFIG and GPU visibility from the plan, gRPC off any
proxy between the step's tasks, the tf.keras that runs under the strategies."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import ConfigError
from ..log import log
from ..resolve import Plan, proxy
from . import cuda, keras

# Linux refuses (E2BIG) an execve whose single "NAME=value" string is this long or longer.
MAX_ENV_STRING = 128 * 1024


def child_env(plan: Plan, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the role runs with: TF_CONFIG and CUDA_VISIBLE_DEVICES from the plan."""
    env = dict(environ)
    in_slurm = plan.rank is not None
    if in_slurm and "TF_CONFIG" in env:
        log("warning: TF_CONFIG inherited from the submitting shell is replaced by the step's own")
        del env["TF_CONFIG"]
    env.update(tf_config_env(plan))
    if plan.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = plan.cuda_visible_devices
        env.update(cuda.no_gpu_env(plan.cuda_visible_devices, environ))
    library_path = cuda.library_path(env)
    if library_path is not None:
        env["LD_LIBRARY_PATH"] = library_path
    return env


def tf_config_env(plan: Plan) -> dict[str, str]:
    """{"TF_CONFIG": the plan's, as one JSON line}, or {} outside a step of several tasks."""
    tf_config = plan.tf_config
    if tf_config is None:
        return {}
    text = json.dumps(tf_config, separators=(",", ":"))
    if len("TF_CONFIG=") + len(text) >= MAX_ENV_STRING:
        raise ConfigError(
            f"TF_CONFIG for {len(plan.tasks)} tasks is {len(text)} bytes, over Linux's "
            f"{MAX_ENV_STRING}-byte limit for one environment variable",
            "run fewer, larger tasks (more GPUs or threads per task)",
        )
    return {"TF_CONFIG": text}


def distributed_env(
    plan: Plan, environ: Mapping[str, str], argv: Sequence[str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """What a task of a distributed step needs around TensorFlow: gRPC between the tasks off
    any proxy (resolve/proxy.py), and a tf.keras whose Model.fit runs under the strategies
    (keras.py); and what rank 0 says about it, once for the step (about Keras only when the
    program is a Python: a shell script's Pythons get the variable, not the line)."""
    if plan.me is None:
        return {}, ()
    found = proxy.for_tasks(environ, plan.tasks)
    choice = keras.choose(environ, keras.installed())
    python = Path(argv[0]).name.startswith("python")
    notes = (proxy.describe(found), choice.line if python else None) if plan.me.rank == 0 else ()
    return {**(found.env if found else {}), **choice.env}, tuple(n for n in notes if n)


def network_env(plan: Plan, environ: Mapping[str, str]) -> dict[str, str]:
    """What changes in a role's environment once every node's address is known: TF_CONFIG,
    and the proxy exemption of the step's hosts, now addresses."""
    found = proxy.for_tasks(environ, plan.tasks)
    return {**tf_config_env(plan), **(found.env if found else {})}
