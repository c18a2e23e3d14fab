"""examples/cifar10/train.py, unchanged, with a `BENCH {json}` line at each start-up milestone.

Run by tfslurm-entry as the task's program (so its start marks the entrypoint's end). Stamps:
program_start, tf_imported (after `import tensorflow`), connected (train.py's first line,
printed once its strategy has joined the cluster and the model is built), step (each progress
line, the first after step 1 with --log-every 1), program_end.
"""

import time

T_PROGRAM = time.time()

import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402

EXAMPLES = os.environ.get("CIFAR10_EXAMPLES", "/data/examples/cifar10")
REAL_STDOUT = sys.stdout
CONNECTED = re.compile(r"\] (multi-worker|parameter-server): \d+ workers")


def stamp(event: str, t: float | None = None, **fields) -> None:
    record = {
        "event": event,
        "t": time.time() if t is None else t,
        "rank": int(os.environ.get("SLURM_PROCID", "0")),
        "host": os.environ.get("SLURMD_NODENAME", ""),
        **fields,
    }
    REAL_STDOUT.write(f"BENCH {json.dumps(record)}\n")
    REAL_STDOUT.flush()


class Watch(io.TextIOBase):
    """stdout that passes train.py's lines on and stamps the ones that mark a milestone."""

    def __init__(self) -> None:
        self.pending = ""
        self.connected = False

    def write(self, text: str) -> int:
        REAL_STDOUT.write(text)
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            if not self.connected and CONNECTED.search(line):
                self.connected = True
                stamp("connected")
            step = re.search(r"\] step (\d+)/\d+ .* (\d+) images/s", line)
            if step:
                stamp("step", step=int(step.group(1)), images_per_s=int(step.group(2)))
        return len(text)

    def flush(self) -> None:
        REAL_STDOUT.flush()


stamp("program_start", T_PROGRAM, pid=os.getpid())
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import tensorflow  # noqa: E402, F401

stamp("tf_imported")
sys.path.insert(0, EXAMPLES)
import train  # noqa: E402

sys.stdout = Watch()
status = train.main(sys.argv[1:])
sys.stdout = REAL_STDOUT
stamp("program_end", status=status)
sys.exit(status)
