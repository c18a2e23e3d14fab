"""What a real site puts around a job, on the dev cluster: a proxy in every task's environment,
and a firewall between two nodes. The programs are TensorFlow's tutorials (tests/user_programs).

- Proxy: the jobs are submitted with http_proxy/https_proxy pointing to a proxy that is down
  (tests.localhost.DeadProxy, listening on this machine's address on the cluster's network: it
  accepts and never answers). A MultiWorkerMirroredStrategy job and a ParameterServerStrategy
  job complete and the proxy gets no connection from them; a plain HTTP request from a task of
  the same kind still goes to the proxy (the user's proxy keeps serving everything else).
- Firewall: on c2, a rule that drops TCP from other nodes to one task's TensorFlow port
  (iptables in c2's network namespace, set from this machine; the node container gets no
  capability for it; loopback passes, as it does through a site's firewall). For both
  strategies the job ends within its chief timeout, rank 0 names the pair in one line, nothing
  of the job keeps running and no program started.
- A second network: the compute nodes are also NODE-fast on the dev cluster's second network
  (devcluster.py). With --network '{host}-fast', its interface (eth1) or its subnet, a
  tutorial's tasks connect over it, as the nodes' own socket tables show.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import subprocess
import time

import docker
import pytest

from tests.localhost import DeadProxy

from . import jobs
from .clean_end import node_processes
from .conftest import IN_IMAGE, LAUNCH
from .test_user_programs import DIR, STEPS, run_job

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
    """TCP from other nodes to port dropped on node, as a site's firewall between nodes does,
    until the block ends. The node's own connections to its address go through loopback, which
    such a firewall lets through (so the node's own check of its port succeeds: only rank 0's
    names the pair, where both would race if the rule dropped loopback too)."""
    pid = cluster.container(node).attrs["State"]["Pid"]
    rule = ["!", "-i", "lo", "-p", "tcp", "--dport", str(port), "-j", "DROP"]
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


FAST_PORT_BASE = 13700  # fixed, so that the nodes' socket tables can be searched for the job


def sockets(cluster, node: str, ports: set[int]) -> set[tuple[str, ...]]:
    """(local address, port, peer address, port) of node's TCP connections, in any state but
    listening, with one of `ports` at either end (TIME-WAIT keeps a closed one for a minute)."""
    found = set()
    try:
        table = cluster.run("ss -Htan", service=node, user="root").out
    except ValueError:  # the Docker SDK misframed the exec's stream once (tests/README.md)
        table = cluster.run("ss -Htan", service=node, user="root").out
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[0] == "LISTEN":
            continue
        (local, local_port), (peer, peer_port) = (f.rsplit(":", 1) for f in fields[3:5])
        if {int(local_port), int(peer_port)} & ports:
            found.add((_ip(local), local_port, _ip(peer), peer_port))
    return found


def _ip(shown: str) -> str:
    """ss's [::ffff:172.23.0.2] as 172.23.0.2."""
    return shown.strip("[]").removeprefix("::ffff:")


def interface_in(cluster, node: str, subnet) -> str:
    """The name of node's network interface with an address in subnet."""
    for line in cluster.run("ip -br -4 addr", service=node, user="root").out.splitlines():
        name, _, *addresses = line.split()
        if any(ipaddress.ip_interface(a).ip in subnet for a in addresses):
            return name.split("@")[0]
    pytest.fail(f"{node} has no interface in {subnet}")


# The subnet form finds its interface as the interface form does (resolve/network.py, unit
# tested): in make test-soak.
@pytest.mark.parametrize(
    "form", ["pattern", "interface", pytest.param("subnet", marks=pytest.mark.soak)]
)
def test_with_network_a_tutorials_tasks_connect_over_the_second_network(cluster, programs, form):
    """--network as the nodes' names there ('{host}-fast'), as its interface on the nodes
    (eth1), or as its subnet: the Keras tutorial (2 nodes, a task each) completes, and every
    connection between its tasks on the nodes' socket tables, during the job and after it, runs
    between the nodes' addresses on the second network: TensorFlow's, and the kit's start-up
    check (the check-in with rank 0 too, for the pattern: the two other forms check in on
    Slurm's names, before any address is known)."""
    try:
        fast = cluster.client.networks.get(f"{cluster.project}_fast")
    except docker.errors.NotFound:
        pytest.fail("the dev cluster has no second network: make dev-cluster-down dev-cluster")
    subnet = ipaddress.ip_network(fast.attrs["IPAM"]["Config"][0]["Subnet"])
    interface = interface_in(cluster, "c1", subnet)
    assert interface_in(cluster, "c2", subnet) == interface
    network = {"pattern": "{host}-fast", "interface": interface, "subnet": str(subnet)}[form]
    ports = {FAST_PORT_BASE, FAST_PORT_BASE + 1}  # a task's on each node; rank 0's control
    name = "keras_multi_worker"
    before = sockets(cluster, "c1", ports) | sockets(cluster, "c2", ports)  # an earlier job's
    job = jobs.submit(
        cluster,
        f"-N2 --ntasks-per-node=1 -w c1,c2 -t 5 -D {DIR}/{name} -o {DIR}/fast-%j.out "
        f"--wrap 'srun --kill-on-bad-exit=1 {LAUNCH} main.py'",
        f"TUTORIAL_STEPS={STEPS} TFSLURM_NETWORK='{network}' TFSLURM_PORT_BASE={FAST_PORT_BASE}",
    )
    seen: set[tuple[str, ...]] = set()
    deadline = time.monotonic() + 300
    while cluster.run(f"squeue -h -j {job} -o %T").out.strip():
        assert time.monotonic() < deadline, f"job {job} still queued"
        seen |= sockets(cluster, "c1", ports) | sockets(cluster, "c2", ports)
        time.sleep(jobs.POLL_S)
    seen |= sockets(cluster, "c1", ports) | sockets(cluster, "c2", ports)
    log = cluster.ok(f"cat {DIR}/fast-{job}.out")
    assert jobs.wait(cluster, job) == "COMPLETED", log
    assert "Epoch 3/3" in log, log
    # The kit's check-in goes to Slurm's name with an interface or a subnet (no address is
    # known yet): only the TensorFlow port's connections must be on the second network then.
    checked = ports if form == "pattern" else {FAST_PORT_BASE}
    between_nodes = {
        (a, b)
        for a, a_port, b, b_port in seen - before
        if a != b and {int(a_port), int(b_port)} & checked
    }
    assert between_nodes, f"no connection between the tasks seen on c1 or c2\n{log}"
    outside = {
        pair for pair in between_nodes if not all(ipaddress.ip_address(a) in subnet for a in pair)
    }
    assert outside == set(), f"connections off the second network {subnet}: {outside}"
    if form == "pattern":  # what the kit said it would use
        assert f"addr c2-fast:{FAST_PORT_BASE}" in log, log
    else:
        said = re.search(
            rf"tfslurm: addresses on --network {re.escape(network)}: c1 (\S+), c2 "
            r"(\S+)\n",
            log,
        )
        assert said and all(ipaddress.ip_address(a) in subnet for a in said.groups()), log
