"""Only the step's own tasks get in: another user of the cluster (`other`), who knows what
squeue shows every user (the job, its step and task count) and the port range (MpiParams),
finds rank 0's control port and checks in as a rank of the job user's running step. Rank 0
refuses it with one line naming where it came from, and the step completes; `other` cannot
read the step's secret where the tasks hold it. The site check's conversation the same way.

The intruder is a plain Python script, not the kit: it scans the range on the step's first
node for the port that greets with a challenge, and answers with a hello of the step's
words and a made-up proof.
"""

from __future__ import annotations

import ast
import re

import pytest

from . import jobs
from .conftest import LAUNCH, SIF
from .conftest import USER_PROGRAMS_DIR as DIR

pytestmark = pytest.mark.e2e

OTHER = "other"  # the node image's second user (slurm-dev-cluster/node/Dockerfile)
PORTS = (12000, 12999)  # slurm.conf's MpiParams=ports
INTRUDER = "/tmp/intruder.py"
INTRUDE = """\
import socket, sys, time
host, steps, size, rank, lo, hi, wait = sys.argv[1:8]

def hello(port, step):
    \"\"\"Rank 0's answer to a hello for that step, or None: not a control port.\"\"\"
    try:
        conn = socket.create_connection((host, port), timeout=1)
    except OSError:
        return None
    with conn:
        conn.settimeout(2)
        lines = conn.makefile("rb")
        try:
            if not lines.readline().startswith(b"challenge "):
                return None
            conn.sendall(f"hello {step} {size} {rank} {'0' * 64}\\n".encode())
            return lines.readline().decode().strip()
        except OSError:
            return None

deadline = time.time() + float(wait)
while time.time() < deadline:
    for port in range(int(lo), int(hi) + 1):
        for step in steps.split(","):  # the job's steps, as squeue -s shows them
            answer = hello(port, step)
            if answer is None:
                break
            if not answer.startswith("other "):
                print([port, step, answer])
                sys.exit(0)
    time.sleep(0.5)
sys.exit("no control port of the job's steps found")
"""


def intrude(cluster, host: str, job: str, size: int, rank: int, wait: float = 60) -> list:
    """As `other` on the login node, knowing what squeue shows every user: the job's steps:
    [rank 0's control port, the step, rank 0's answer]."""
    steps_of = f"squeue -h -s -j {job} -o %i"
    assert cluster.until(f"{steps_of} | grep -qE '[.][0-9]+$'", 60, user=OTHER), "no step started"
    listed = cluster.ok(steps_of, user=OTHER).split()
    steps = ",".join(s for s in listed if s.split(".")[-1].isdigit())
    cluster.ok(f"cat > {INTRUDER} <<'EOF'\n{INTRUDE}EOF", user=OTHER)
    out = cluster.ok(
        f"python3 {INTRUDER} {host} {steps} {size} {rank} {PORTS[0]} {PORTS[1]} {wait:.0f}",
        user=OTHER,
    )
    return ast.literal_eval(out.strip().splitlines()[-1])


def first_node(cluster, job: str) -> str:
    nodes = cluster.ok(f"squeue -h -j {job} -o %N", user=OTHER).strip()
    return cluster.ok(f"scontrol show hostnames '{nodes}'").split()[0]


def test_another_user_cannot_join_a_running_step_nor_read_its_secret(cluster, programs):
    """TensorFlow's Keras tutorial through tfslurm-run, which gives the step its secret."""
    log_file = f"{DIR}/secret-%j.out"
    job = jobs.submit(
        cluster,
        f"-N2 --ntasks-per-node=1 -t 10 -D {DIR}/keras_multi_worker -o {log_file} "
        f"--wrap 'tfslurm-run {SIF} main.py'",
        "TUTORIAL_STEPS=60",
    )
    log_file = log_file.replace("%j", job)
    # From rank 0's first line its control port answers (the intruder goes in while the
    # step runs, however fast the tutorial is on this machine).
    started = r"^tfslurm: rank 0/2 host "
    assert cluster.until_logged(log_file, started, 180), cluster.run(f"cat {log_file}").out
    head = first_node(cluster, job)
    # Where the secret is: the tasks' environment, which srun gave them; the job user's alone.
    pid = cluster.ok("pgrep -u runner -of 'tfslurm-entry'", service=head).strip()
    environ = f"tr '\\0' '\\n' < /proc/{pid}/environ | grep -c '^TFSLURM_STEP_SECRET='"
    assert cluster.ok(environ, service=head).strip() == "1"
    denied = cluster.run(environ, service=head, user=OTHER)
    assert denied.code != 0 and "Permission denied" in denied.err, denied
    port, step, answer = intrude(cluster, head, job, 2, 1)
    assert answer == "refused", (port, step, answer)
    assert jobs.wait(cluster, job) == "COMPLETED", cluster.ok(f"cat {log_file}")
    log = cluster.ok(f"cat {log_file}")
    refused = re.findall(
        rf"rank 0 on {head}: refused a check-in as rank 1 from [\d.]+:\d+: it did not prove "
        r"the step's secret \(not one of this step's tasks\)",
        log,
    )
    assert len(refused) == 1, log
    assert "Epoch 3/3" in log and "has no secret" not in log, log
    cluster.ok(f"rm -rf /data/tfslurm-run-{job}")  # tfslurm-run's run directory


def test_another_user_cannot_report_to_a_site_check(cluster):
    """The site check as a user's own step (srun; the secret exported by hand), its rank 1
    held back 20 s so that the intruder comes while rank 0 still gathers the reports: rank 0
    refuses it, and the table counts the real rank 1."""
    log_file = "/data/secret-check-%j.out"
    script = (
        'export TFSLURM_STEP_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d " \\n"); '
        "srun -N2 --ntasks-per-node=1 bash -c "
        f'"[ \\$SLURM_PROCID = 1 ] && sleep 20; exec {LAUNCH} --site-check"'
    )
    job = jobs.submit(cluster, f"-N2 -t 5 -o {log_file} --wrap '{script}'")
    log_file = log_file.replace("%j", job)
    cluster.until(f'[ -n "$(squeue -h -j {job} -t R)" ]', 60)
    head = first_node(cluster, job)
    port, step, answer = intrude(cluster, head, job, 2, 1)
    assert answer == "refused", (port, step, answer)
    assert jobs.wait(cluster, job) == "COMPLETED", cluster.ok(f"cat {log_file}")
    log = cluster.ok(f"cat {log_file}")
    assert re.search(
        rf"rank 0 on {head}: refused a report as rank 1 from [\d.]+:\d+: it did not prove the "
        r"check's secret",
        log,
    ), log
    # Exit 0: every task reported (one that did not would fail the check), none was refused
    # but the intruder.
    assert "did not check in with rank 0 in time" not in log and "has no secret" not in log, log
