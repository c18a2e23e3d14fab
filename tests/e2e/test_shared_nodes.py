"""Many jobs on shared nodes: ports that never collide, steps that never talk to each other,
nothing left running.

- 6 small jobs at once (24 in make test-soak; a job array on the OverSubscribe partition,
  several per node), while one node's ephemeral ports are churned by a process opening and
  closing connections: every job COMPLETED, no port taken, no check-in from another step. Each
  job's program is a user's program that knows only TF_CONFIG: it listens on its task's
  address, as TensorFlow's server would, and checks that every peer it reaches is of its own
  job.
- A user's shell wrapper with background children (one leaves the process group): for a
  failing rank, scancel (what a time limit does) and a normal end, nothing of it is left on the
  nodes afterwards.

The dev cluster's slurm.conf reserves ports per step (MpiParams=ports), so these jobs take their
ports from SLURM_STEP_RESV_PORTS.
"""

from __future__ import annotations

import time
import uuid

import pytest

from .clean_end import node_processes
from .conftest import IN_IMAGE, LAUNCH

pytestmark = pytest.mark.e2e

SOAK_JOBS = 24  # make test-soak; make test runs 6: two per node, each node shared
DIR = "/data/shared-nodes"

# A user's program: knows TF_CONFIG, not the kit. It listens on its own address, then connects
# to every other task of its cluster and exchanges job ids with it: a peer of another job (two
# steps given the same port) is an error.
PEERS = """\
import json, os, socket, sys, threading, time
config = json.loads(os.environ["TF_CONFIG"])
addresses = [a for kind in sorted(config["cluster"]) for a in config["cluster"][kind]]
me = config["cluster"][config["task"]["type"]][config["task"]["index"]]
job = os.environ["SLURM_JOB_ID"]
peers = [a for a in addresses if a != me]
server = socket.create_server(("", int(me.rsplit(":", 1)[1])), backlog=64)
heard_from = set()

def answer():  # like a TensorFlow server: always answering, in a thread of its own
    while True:
        conn, _ = server.accept()
        with conn:
            their_job, their_address = conn.makefile().readline().split()
            conn.sendall(f"{job}\\n".encode())
            if their_job == job:
                heard_from.add(their_address)

threading.Thread(target=answer, daemon=True).start()
reached, deadline = set(), time.time() + 120
while (len(reached) < len(peers) or len(heard_from) < len(peers)) and time.time() < deadline:
    for peer in [p for p in peers if p not in reached]:
        host, port = peer.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                conn.sendall(f"{job} {me}\\n".encode())
                theirs = conn.makefile().readline().strip()
        except OSError:
            continue
        if theirs != job:
            sys.exit(f"PEER OF ANOTHER JOB: {peer} answered job {theirs}")
        reached.add(peer)
    time.sleep(0.2)
if len(reached) < len(peers) or len(heard_from) < len(peers):
    sys.exit(f"peers missing: reached {sorted(reached)}, heard from {sorted(heard_from)}")
reserved = os.environ.get("SLURM_STEP_RESV_PORTS")
print(f"peers ok: {me} reached {len(peers)} peers of job {job}, reserved {reserved}", flush=True)
"""

# SRUN_OPTIONS: "--resv-ports" without a count reserves no ports (Slurm 22.05 to 26.05): the
# tasks then take the kit's default windows.
ARRAY = f"""#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=2 --oversubscribe -t 10
srun --kill-on-bad-exit=1 $SRUN_OPTIONS {LAUNCH} python3 {DIR}/peers.py
"""

# Opens and closes connections to a local listener as fast as it can: every connection takes
# an ephemeral port, which stays in TIME_WAIT for a minute.
CHURN = """\
import socket, threading, time
server = socket.create_server(("127.0.0.1", 0), backlog=512)
port = server.getsockname()[1]

def serve():  # waits for the client's close, so that the client's port goes to TIME_WAIT
    while True:
        conn, _ = server.accept()
        conn.recv(1)
        conn.close()

threading.Thread(target=serve, daemon=True).start()
end = time.time() + 300
while time.time() < end:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        time.sleep(0.002)  # up to 500 a second: the ephemeral range stays in TIME_WAIT
    except OSError:  # every ephemeral port taken
        time.sleep(0.01)
"""


CHURNED = 9000  # of the 28232 ports in Linux's default ephemeral range


def time_wait_on_c1(cluster) -> int:
    """Connections in TIME_WAIT on c1 (state 06): ephemeral ports the churner holds."""
    command = "cat /proc/net/tcp /proc/net/tcp6 | awk '$4 == \"06\"' | wc -l"
    return int(cluster.ok(command, service="c1", user="root"))


def put(cluster, name: str, text: str) -> str:
    path = f"{DIR}/{name}"
    cluster.ok(f"mkdir -p {DIR} && cat > {path} <<'EOF'\n{text}EOF\nchmod +x {path}")
    return path


def wait_jobs(cluster, job: str, jobs: int, timeout: float) -> list[str]:
    """Every array task's final State."""
    deadline = time.monotonic() + timeout
    while True:
        states = cluster.ok(f"sacct -X -n -P -j {job} -o JobID,State").split()
        done = [s for s in states if s.split("|")[1] not in ("PENDING", "RUNNING", "COMPLETING")]
        if len(states) >= jobs and len(done) == len(states):
            return states
        assert time.monotonic() < deadline, states
        time.sleep(0.5)


@pytest.mark.parametrize("jobs", [6, pytest.param(SOAK_JOBS, marks=pytest.mark.soak, id="soak")])
@pytest.mark.parametrize("ports", ["reserved-by-slurm", "default-windows"])
def test_jobs_on_shared_nodes_with_churned_ephemeral_ports_all_complete(cluster, ports, jobs):
    put(cluster, "peers.py", PEERS)
    put(cluster, "churn.py", CHURN)
    script = put(cluster, "array.sbatch", ARRAY)
    churn = f"{IN_IMAGE}python {DIR}/churn.py"  # in the image: the nodes have no Python
    cluster.container("c1").exec_run(
        ["bash", "-lc", churn], user="runner", detach=True, workdir="/data"
    )  # apptainer binds the working directory
    try:
        deadline = time.monotonic() + 90
        while time_wait_on_c1(cluster) < CHURNED:  # the churner has taken a third of them
            assert time.monotonic() < deadline, "the churner did not get going on c1"
            time.sleep(2)
        options = "--resv-ports" if ports == "default-windows" else ""
        job = cluster.ok(
            f"SRUN_OPTIONS={options} sbatch --parsable --array=1-{jobs} "
            f"-o {DIR}/job-%A_%a.out {script}"
        )
        job = job.strip()
        states = wait_jobs(cluster, job, jobs, 600)
        waiting = time_wait_on_c1(cluster)
    finally:
        cluster.run("pkill -f churn.py", service="c1", user="root")
    # still churning at the end (slower: the jobs had the CPUs)
    assert waiting >= CHURNED // 2, f"the churner held only {waiting} ephemeral ports on c1"
    logs = cluster.ok(f"cat {DIR}/job-{job}_*.out")
    assert all(s.endswith("|COMPLETED") for s in states), f"{states}\n{logs}"
    assert logs.count("peers ok:") == jobs * 4, logs
    assert "is taken" not in logs and "turned away" not in logs and "ANOTHER JOB" not in logs
    # The jobs ran at once on shared nodes, and each task listened on a port Slurm reserved
    # for its step, or else on one of the default windows, below the ephemeral range.
    rows = cluster.ok(f"SLURM_TIME_FORMAT=%s sacct -X -n -P -j {job} -o Start,End").split()
    spans = [tuple(int(x) for x in row.split("|")) for row in rows]
    together = max(sum(1 for s, e in spans if s <= at < e) for at, _ in spans)
    print(f"{jobs} jobs, at most {together} at once on 3 nodes; {waiting} ports in TIME_WAIT on c1")
    assert together >= jobs // 2, spans
    for line in (x for x in logs.splitlines() if x.startswith("peers ok:")):
        port = int(line.split()[2].rsplit(":", 1)[1])
        reserved = line.rsplit("reserved ", 1)[1]
        if ports == "default-windows":
            assert reserved == "None" and 10000 <= port < 32768, line
            continue
        low, high = reserved.split(",")[0].split("-")
        assert 12000 <= int(low) <= port <= int(high) <= 12999, line


WRAPPER = """#!/bin/sh
# run.sh: a user's wrapper: helpers in the background, then the program
sleep 1{mark}.1 &
setsid sleep 1{mark}.2 &
if [ "$SLURM_PROCID" = "$FAIL_RANK" ]; then sleep 3; exit 3; fi
sleep {work}.{mark}
"""


@pytest.mark.parametrize("end", ["failing-rank", "scancel", "normal"])
def test_nothing_of_a_wrapper_is_left_on_the_nodes(cluster, end):
    mark = str(uuid.uuid4().int % 10**7).zfill(7)
    work = 8 if end == "normal" else 300
    script = put(cluster, f"run-{mark}.sh", WRAPPER.format(mark=mark, work=work))
    fail = "1" if end == "failing-rank" else "none"
    job = cluster.ok(
        f"FAIL_RANK={fail} sbatch --parsable -N2 --ntasks-per-node=2 -o {DIR}/wrap-%j.out "
        f"--wrap 'srun {LAUNCH} {script}'"
    ).strip()
    if end == "scancel":
        deadline = time.monotonic() + 60
        while mark not in "".join(node_processes(cluster).values()):
            assert time.monotonic() < deadline, cluster.run(f"cat {DIR}/wrap-{job}.out").out
            time.sleep(1)
        time.sleep(2)
        cluster.ok(f"scancel {job}")
    deadline = time.monotonic() + 120
    while cluster.ok(f"squeue -h -j {job}").strip():
        assert time.monotonic() < deadline
        time.sleep(1)
    log = cluster.run(f"cat {DIR}/wrap-{job}.out").out
    time.sleep(2)
    left = {node: ps for node, ps in node_processes(cluster).items() if mark in ps}
    assert left == {}, f"{left}\n{log}"
    if end != "scancel":
        assert "left its process group" in log, log
    state = cluster.ok(f"sacct -X -n -P -j {job} -o State").split()[0]
    expected = {"failing-rank": "FAILED", "scancel": "CANCELLED", "normal": "COMPLETED"}[end]
    assert state.startswith(expected), f"{state}\n{log}"


# Holds a port on c1 the way another job's listener would.
HOLDER = """\
import socket, sys, time
server = socket.create_server(("", int(sys.argv[1])))
time.sleep(600)
"""


def test_a_port_taken_at_the_start_requeues_the_job_which_then_completes(cluster, sample):
    """Rank 0's port is taken on c1: it exits 75 before anything starts, its verdict says
    interrupted, the batch template requeues the job, and the next run (the port free again)
    completes."""
    port = 23456  # in the default range, outside the reserved one: only --port-base picks it
    holder = put(cluster, "holder.py", HOLDER)
    cluster.container("c1").exec_run(
        ["bash", "-lc", f"{IN_IMAGE}python {holder} {port}"],
        user="runner",
        detach=True,
        workdir="/data",
    )
    out = f"/data/runs/port-taken-{uuid.uuid4().hex[:6]}"
    try:
        deadline = time.monotonic() + 60
        while f":{port} " not in cluster.run("ss -ltn", service="c1", user="root").out:
            assert time.monotonic() < deadline, "the holder never listened on c1"
            time.sleep(1)
        job = cluster.ok(
            f"OUTPUT_DIR={out} TFSLURM_PORT_BASE={port} TFSLURM_MAX_REQUEUES=2 sbatch --parsable "
            "-w c1,c2 "
            "--ntasks-per-node=1 "
            f"-o {DIR}/taken-%j.out /data/examples/cifar10/multi-worker.sbatch --steps 20 "
            "--log-every 10"
        ).strip()
        deadline = time.monotonic() + 180
        while "requeuing job" not in cluster.run(f"cat {DIR}/taken-{job}.out").out:
            assert time.monotonic() < deadline, cluster.run(f"cat {DIR}/taken-{job}.out").out
            time.sleep(0.5)
    finally:
        cluster.run("pkill -f holder.py", service="c1", user="root")
    deadline = time.monotonic() + 300
    while (state := cluster.ok(f"sacct -X -n -P -j {job} -o State").strip()) != "COMPLETED":
        assert time.monotonic() < deadline and state not in ("FAILED", "CANCELLED"), state
        time.sleep(0.5)
    log = cluster.ok(f"cat {DIR}/taken-{job}.out")
    assert f"port {port} on host c1 (rank 0, c1:{port}, --port-base {port}) is taken" in log, log
    assert "rank 0: interrupted: rank 0 on c1 could not start" in log, log
    interrupted = "tfslurm-run: the step was interrupted (rank 0 on c1 could not start"
    assert interrupted in log and f"requeuing job {job} (requeue 1 of 2;" in log, log
    assert "step 20/20" in log, log
