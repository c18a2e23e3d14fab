"""What a real site puts around a job, on the dev cluster: a proxy in every task's environment,
and a firewall between two nodes. The programs are TensorFlow's tutorials (tests/user_programs).

- Proxy: the jobs are submitted with http_proxy/https_proxy pointing to a proxy that is down
  (tests.localhost.DeadProxy, listening on this machine's address on the cluster's network: it
  accepts and never answers). A MultiWorkerMirroredStrategy job and a ParameterServerStrategy
  job complete and the proxy gets no connection from them; a plain HTTP request from a task of
  the same kind still goes to the proxy (the user's proxy keeps serving everything else).
- Firewall: on c2, a rule that drops TCP to one task's TensorFlow port (iptables in c2's network
  namespace, set from this machine; the node container gets no capability for it). For both
  strategies the job ends within its chief timeout, rank 0 names the pair in one line, nothing
  of the job keeps running and no program started.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time

import pytest

from tests.localhost import DeadProxy

from . import jobs
from .conftest import IN_IMAGE, LAUNCH
from .test_lifecycle import node_processes
from .test_user_programs import DIR, run_job

pytestmark = pytest.mark.e2e

# Short: the start-up check's window is what is left of it (at most 15 s; the unit tests prove
# the default window), so the blocked job ends in seconds.
CHIEF_TIMEOUT = 8
PORT_BASE = 13500  # fixed, so that the firewall knows the TensorFlow ports: task i of a node
# A request that is not TensorFlow's: it goes to the proxy, which never answers.
FETCH = (
    "python -c \"import urllib.request; urllib.request.urlopen('http://data.example/x', "
    'timeout=3)"'
)


@pytest.fixture
def dead_proxy(cluster):
    """A dead proxy on this machine's address on the cluster's network."""
    network = cluster.client.networks.get(cluster.network)
    gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
    with DeadProxy(host=gateway) as proxy:
        yield proxy


@pytest.mark.parametrize("name", ["keras_multi_worker", "parameter_server"])
def test_a_job_with_a_dead_proxy_set_completes(cluster, programs, dead_proxy, name):
    env = f"http_proxy={dead_proxy.url} https_proxy={dead_proxy.url}"
    _, state, log = run_job(cluster, name, env)
    assert state == "COMPLETED", log
    assert dead_proxy.connections == 0, log
    assert re.search(r"tfslurm: proxy: https_proxy is set; the step's \d hosts \(c", log), log
    # The variables did reach the tasks: anything else still goes to the proxy.
    fetch = cluster.run(f"{env} srun -N1 -n1 -t 1 {IN_IMAGE}{FETCH}")
    assert fetch.code != 0
    assert dead_proxy.connections == 1, (fetch.out, fetch.err)


@contextlib.contextmanager
def dropped(cluster, node: str, port: int):
    """TCP to port dropped on node, as a site's firewall does, until the block ends."""
    pid = cluster.container(node).attrs["State"]["Pid"]
    rule = ["-p", "tcp", "--dport", str(port), "-j", "DROP"]
    base = ["nsenter", "-t", str(pid), "-n", "iptables"]
    subprocess.run([*base, "-I", "INPUT", *rule], check=True)
    try:
        yield
    finally:
        subprocess.run([*base, "-D", "INPUT", *rule], check=True)


# name -> (sbatch options, entrypoint options, the blocked task: its node, its rank)
BLOCKED = {
    "keras_multi_worker": ("-N2 --ntasks-per-node=1", "", ("c2", 1)),
    "parameter_server": ("-N2 -n3", " --strategy parameter-server", ("c2", 2)),
}


@pytest.mark.parametrize("name", list(BLOCKED))
def test_a_tensorflow_port_blocked_between_two_nodes_ends_the_job_naming_the_pair(
    cluster, programs, name
):
    options, launch, (node, rank) = BLOCKED[name]
    command = (
        f"srun --kill-on-bad-exit=1 {LAUNCH}{launch} --chief-timeout {CHIEF_TIMEOUT} "
        f"--port-base {PORT_BASE} main.py"
    )
    with dropped(cluster, node, PORT_BASE):
        start = time.monotonic()
        job, state = jobs.run(
            cluster,
            f"{options} -w c1,c2 -t 5 -D {DIR}/{name} -o {DIR}/blocked-%j.out --wrap '{command}'",
            timeout=120,
        )
        took = time.monotonic() - start
        log = cluster.ok(f"cat {DIR}/blocked-{job}.out")
        assert state == "FAILED", log
        assert took < CHIEF_TIMEOUT + 15, f"ended after {took:.0f} s\n{log}"
        pair = (
            rf"rank 0 on c1: rank 0 on c1 cannot reach rank {rank}'s TensorFlow port "
            rf"{node}:{PORT_BASE}: no answer within \d+ s \(a firewall dropping the port.*\); "
            "stopping the step before any program started"
        )
        assert len(re.findall(pair, log)) == 1, log
        assert "Epoch" not in log, log
        assert node_processes(cluster, ("c1", "c2")) == {"c1": "", "c2": ""}
