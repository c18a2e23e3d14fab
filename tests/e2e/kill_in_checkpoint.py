"""On the chief's node (in the SIF, as the job's user): SIGKILL rank 0's train.py at a chosen
moment of a checkpoint write, and print what the checkpoint directory held at that moment.

    python kill_in_checkpoint.py CHECKPOINT_DIR MOMENT MIN_STEP LEADER_PID

MOMENT, as TensorFlow's CheckpointManager.save goes (seen on the dev cluster): "temp" (the
shards are being written under ckpt-N_temp/), "index" (ckpt-N.index and its data are in place,
the `checkpoint` state file does not name N yet), "state" (the state file is being replaced:
checkpoint.tmp<hex> exists). It polls as fast as it can; MIN_STEP skips the first checkpoints so
that the kill comes mid-run. Exits 1 without killing if the program ends first. LEADER_PID:
rank 0's task on this node as `scontrol listpids` names it (GLOBALID 0 of step 0); scontrol is
on the node, not in the image, and the job's /proc/PID/environ cannot be read from another
container's namespace, so the caller finds it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time

CKPT = re.compile(r"^ckpt-(\d+)\.index$")
TEMP = re.compile(r"^ckpt-(\d+)_temp$")
STATE = re.compile(r'^model_checkpoint_path: "(?:.*/)?ckpt-(\d+)"', re.M)


def parent(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[1]  # the field after the state
    except OSError:
        return None


def chief_program(leader: str) -> int | None:
    """The pid of rank 0's train.py: the process under rank 0's task (``leader``, from
    `scontrol listpids`) whose argv[1] is train.py (its entrypoint's argv[1] is the script)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) < 2 or not argv[1].endswith(b"/train.py"):
            continue
        up = pid
        while up not in (None, "0", "1", leader):
            up = parent(up)
        if up == leader:
            return int(pid)
    return None


def state_step(directory: str) -> int | None:
    try:
        with open(os.path.join(directory, "checkpoint")) as f:
            found = STATE.search(f.read())
    except OSError:
        return None
    return int(found.group(1)) if found else None


def due(directory: str, moment: str, min_step: int) -> list[str] | None:
    """The directory's entries when the moment has come, else None."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return None
    steps = [int(m.group(1)) for e in entries if (m := CKPT.match(e))]
    if moment == "temp":
        hit = any(int(m.group(1)) >= min_step for e in entries if (m := TEMP.match(e)))
    elif moment == "index":
        hit = max(steps, default=0) >= min_step and (state_step(directory) or 0) < max(steps)
    else:
        hit = max(steps, default=0) >= min_step and any(
            e.startswith("checkpoint.tmp") for e in entries
        )
    return sorted(entries) if hit else None


def main() -> int:
    directory, moment, min_step, leader = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if not os.path.isdir(f"/proc/{leader}"):  # e.g. -1: listpids before the task started
        print(json.dumps({"moment": moment, "killed": None, "error": f"no process {leader}"}))
        return 2
    deadline = time.monotonic() + 600
    pid = None
    while time.monotonic() < deadline:
        pid = pid or chief_program(leader)
        if pid and not os.path.exists(f"/proc/{pid}"):
            break  # it ended before the moment came
        entries = due(directory, moment, min_step) if pid else None
        if entries is not None:
            os.kill(pid, signal.SIGKILL)
            print(
                json.dumps(
                    {
                        "moment": moment,
                        "killed": pid,
                        "entries": entries,
                        "state_step": state_step(directory),
                    }
                )
            )
            return 0
    print(json.dumps({"moment": moment, "killed": None}))
    return 1


if __name__ == "__main__":
    sys.exit(main())
