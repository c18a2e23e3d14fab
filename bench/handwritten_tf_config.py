"""A hand-written TF_CONFIG script of the common kind: stdlib only, one `name[a-b]` range.

It is the floor for a whole-process resolution (a Python start and a JSON dump) and, like most
such scripts, it handles only block placement of a single bracket range. Timing only.
"""

from __future__ import annotations

import json
import os
import re

nodelist = os.environ["SLURM_STEP_NODELIST"]
match = re.fullmatch(r"(\w+)\[(\d+)-(\d+)\]", nodelist)
if match:
    prefix, first, last = match.groups()
    hosts = [f"{prefix}{i:0{len(first)}d}" for i in range(int(first), int(last) + 1)]
else:
    hosts = nodelist.split(",")
per_node = int(os.environ["SLURM_STEP_TASKS_PER_NODE"].split("(")[0])
workers = [f"{host}:{8888 + local}" for host in hosts for local in range(per_node)]
rank = int(os.environ["SLURM_PROCID"])
print(
    json.dumps(
        {"TF_CONFIG": {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}}
    )
)
