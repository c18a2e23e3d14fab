"""A Plan for people and scripts: --explain's table and --print-config's JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping

from . import network, ports, proxy
from .plan import Plan


def explain(plan: Plan, environ: Mapping[str, str] | None = None) -> str:
    """The whole cluster as a table, this task marked with '*'; then what the task's
    environment changes (a proxy gRPC would use)."""
    if plan.me is None:
        where = "outside Slurm" if plan.rank is None else "a one-task Slurm step"
        return f"{where}: no TF_CONFIG; the program runs as is\n"
    hosts = list(dict.fromkeys(t.host for t in plan.tasks))
    het = plan.me.component is not None
    groups = sorted({t.component for t in plan.tasks}) if het else []
    head = (
        f"strategy {plan.strategy}: {len(plan.tasks)} tasks on {len(hosts)} hosts"
        + (f" in het groups {','.join(map(str, groups))}" if het else "")
        + f", ports {ports.format_ranges(plan.ports.numbers)} ({plan.ports.source}), "
        f"rank 0 supervises on {plan.control_address}, this task is rank {plan.rank} (*)"
        + (f" with SLURM_PROCID {plan.procid}" if plan.procid != plan.rank else "")
    )
    header = ("", "rank", "host", "local", "role", "index", "address", "gpus")
    header += ("group",) if het else ()
    rows = [header] + [
        (
            "*" if t.rank == plan.rank else "",
            str(t.rank),
            t.host,
            str(t.local_index),
            t.task_type,
            str(t.index),
            t.address,
            "untouched" if t.gpus is None else (t.gpus or "none"),
        )
        + ((str(t.component),) if het else ())
        for t in plan.tasks
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [head] + [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.append(
        "gpus: CUDA_VISIBLE_DEVICES each task gets; other hosts are shown as if they had this "
        "node's GPUs; 'untouched' keeps what Slurm set; 'none' hides all GPUs"
    )
    if plan.network and network.exchanged(plan.network):
        where = "on interface" if network.kind(plan.network) == network.INTERFACE else "in"
        lines.append(
            f"address: Slurm's node name until the step starts; then each node's own address "
            f"{where} {plan.network} (--network), exchanged when the tasks check in"
        )
    elif plan.network:
        lines.append(
            f"address: each node's name on the network --network {plan.network!r} picks; host: "
            "Slurm's node name"
        )
    if line := proxy.describe(proxy.for_tasks(environ or {}, plan.tasks)):
        lines.append(line)
    return "\n".join(lines) + "\n"


def config_json(plan: Plan) -> str:
    me = plan.me
    return json.dumps(
        {
            "TF_CONFIG": plan.tf_config,
            "CUDA_VISIBLE_DEVICES": plan.cuda_visible_devices,
            "role": plan.role,
            "strategy": plan.strategy,
            "rank": plan.rank,
            "procid": plan.procid,
            "num_tasks": len(plan.tasks) if plan.tasks else (1 if plan.rank is not None else None),
            "host": me.host if me else None,
            "address": me.address if me else None,
            "component": me.component if me else None,
        }
    )
