"""The start-up check (step/reach.py) on real loopback sockets, and a whole step that fails it."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time

import pytest

from bench.localstep import free_port_base
from bench.repo import ROOT
from tests.fake_slurm import step_env
from tfslurm_entry.resolve import roles
from tfslurm_entry.resolve.plan import Task
from tfslurm_entry.step import dial, reach
from tfslurm_entry.step.inputs import Step
from tfslurm_entry.step.outcome import ABORTED, UNREACHED
from tfslurm_entry.step.protocol import (
    Done,
    Hello,
    Release,
    Released,
    Start,
)
from tfslurm_entry.step.secret import NO_SECRET
from tfslurm_entry.step.startup import first_tasks

STEP = "7.0"
UNRESOLVABLE = "n" * 70  # a DNS label over 63 characters: refused locally, no lookup sent


@pytest.fixture
def port():
    return free_port_base(1)


def test_a_guarded_port_answers_as_its_task(port):
    with reach.Guard(port, STEP, 3):
        assert reach.check([(3, f"localhost:{port}")], STEP, 2) is None
        # the same port, asked for as another rank or step: something else answered
        assert reach.check([(4, f"localhost:{port}")], STEP, 2).reason == "stranger"
        assert reach.check([(3, f"localhost:{port}")], "8.0", 2).reason == "stranger"


def test_a_port_nobody_listens_on_is_refused_at_once(port):
    start = time.monotonic()
    found = reach.check([(1, f"127.0.0.1:{port}")], STEP, 10)
    assert found == reach.Unreached(1, f"127.0.0.1:{port}", "refused")
    assert time.monotonic() - start < 2


def test_a_port_that_never_answers_times_out_within_the_window(port):
    """A listener whose accept queue is full drops the SYN, as a firewall's DROP does."""
    with socket.socket() as full:
        full.bind(("127.0.0.1", port))
        full.listen(0)
        queued = []
        for _ in range(3):  # fill the queue; later connections get no answer
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", port))
            queued.append(client)
        time.sleep(0.2)
        start = time.monotonic()
        found = reach.check([(2, f"127.0.0.1:{port}")], STEP, 1.5)
        took = time.monotonic() - start
        for client in queued:
            client.close()
    assert found.reason == "timeout"
    assert 1.0 < took < 4
    assert "no answer within 2 s" in reach.describe(found, 1.5)


def test_a_name_that_does_not_resolve(port):
    found = reach.check([(5, f"{UNRESOLVABLE}:{port}")], STEP, 2)
    assert found.reason == "unresolved"
    said = reach.describe(found, 2)
    assert said.startswith(f"cannot reach rank 5's TensorFlow port {UNRESOLVABLE}")


def test_the_lowest_unreached_rank_is_reported(port):
    with reach.Guard(port, STEP, 1):
        targets = [(1, f"localhost:{port}"), (2, f"localhost:{port + 1}"), (3, "x:1")]
        assert reach.check(targets, STEP, 2).peer == 2


def test_the_guard_frees_the_port_for_tensorflow(port):
    guard = reach.Guard(port, STEP, 0)
    assert reach.check([(0, f"localhost:{port}")], STEP, 2) is None
    guard.close()
    with socket.create_server(("", port)):  # what TensorFlow's server does next
        pass


def _tasks(types: list[str]) -> list[Task]:
    return [Task(r, f"n{r}", 0, t, 0, f"n{r}:1") for r, t in enumerate(types)]


def test_parameter_server_peers_are_who_connects_to_whom():
    tasks = _tasks(["chief", "ps", "ps", "worker", "worker"])
    ranks = {r: [t.rank for t in roles.peers(tasks, roles.PARAMETER_SERVER, r)] for r in range(5)}
    assert ranks == {0: [1, 2, 3, 4], 1: [], 2: [], 3: [1, 2], 4: [1, 2]}


@pytest.mark.parametrize("n", [2, 5, 65, 300])
def test_multi_worker_peers_cover_every_pair_or_64_neighbours(n):
    tasks = _tasks(["worker"] * n)
    peers = {r: [t.rank for t in roles.peers(tasks, roles.MULTI_WORKER, r)] for r in range(n)}
    assert all(len(p) == min(n - 1, roles.MAX_PEERS) and r not in p for r, p in peers.items())
    checked_by = {r: sum(r in p for p in peers.values()) for r in range(n)}
    assert set(checked_by.values()) == {min(n - 1, roles.MAX_PEERS)}


# Rank 1 of the step below, played by the real member code: its entrypoint cannot run on the
# same machine as rank 0's (both would claim the same port, local index 0 on either "node").
MEMBER = """
import sys
from tfslurm_entry.step.member import Seat, run_member
from tfslurm_entry.step.program import Command
from tfslurm_entry.step.reach import Reach
seat = Seat(rank=1, host=sys.argv[1], address=sys.argv[2], step="4242.0", size=2, timeout=20,
            save_timeout=20, command=Command(["/bin/touch", sys.argv[3]], {}))
sys.exit(run_member(seat, print, Reach(None, [], "4242.0")))
"""


@pytest.mark.processes
def test_a_step_whose_peer_cannot_be_reached_stops_before_any_program_starts(tmp_path):
    """Rank 0 through the real entrypoint; rank 1's node name does not resolve on rank 0's
    node: rank 0 names the pair in one line, both end within seconds, no program runs."""
    base = free_port_base(3)
    marker = tmp_path / "started"
    env = step_env(
        0,
        f"localhost,{UNRESOLVABLE}",
        "1(x2)",
        SLURMD_NODENAME="localhost",
        SLURM_LOCALID="0",
        TFSLURM_PORT_BASE=str(base),
        TFSLURM_CHIEF_TIMEOUT="20",
        PYTHONPATH=str(ROOT),
    )
    head = subprocess.Popen(
        [sys.executable, "-m", "tfslurm_entry", "/bin/touch", str(marker)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    member = subprocess.Popen(
        [sys.executable, "-c", MEMBER, UNRESOLVABLE, f"localhost:{base + 1}", str(marker)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    start = time.monotonic()
    try:
        codes = [p.wait(20) for p in (head, member)]
    finally:
        for p in (head, member):
            with contextlib.suppress(ProcessLookupError):
                p.kill()
    took = time.monotonic() - start
    log = head.stderr.read()
    assert codes == [UNREACHED, ABORTED], log
    assert took < 10
    pair = (
        f"rank 0 on localhost cannot reach rank 1's TensorFlow port {UNRESOLVABLE}:{base}: "
        "its host name does not resolve on this node (--network picks the nodes' names on a "
        "network where they do, e.g. '{host}-ib'); stopping the step before any program started"
    )
    assert pair in log
    assert "stopping: rank 0 on localhost failed with exit 2" in member.stdout.read()
    assert not marker.exists()


@pytest.mark.processes
def test_programs_start_only_once_every_member_has_freed_its_port(tmp_path):
    """Rank 0 (the real entrypoint) starts its program only after every member said that its
    guard is closed: rank 1, played here by hand, takes a second to say so, and rank 0's
    program waits that second. Otherwise a program that connects to a peer at once could meet
    the peer's guard instead of its TensorFlow server."""
    base = free_port_base(3)
    marker = tmp_path / "started"
    # No key file: the step has no secret.
    env = step_env(
        0,
        "localhost",
        "2",
        SLURM_LOCALID="0",
        SLURMD_NODENAME="localhost",
        TFSLURM_PORT_BASE=str(base),
        PYTHONPATH=str(ROOT),
        HOME=str(tmp_path),
    )
    head = subprocess.Popen(
        [sys.executable, "-m", "tfslurm_entry", "/bin/touch", str(marker)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with reach.Guard(base + 1, "4242.0", 1) as guard:  # rank 1's port
            channel = dial.Channel(dial.connect(f"localhost:{base + 2}", 20), "member")
            assert dial.check_in(channel, Hello("4242.0", 2, 1), NO_SECRET, 20)
            # One node: no task checks rank 1's port, and rank 1 checks none (a node's second
            # task), so it is told to free it at once.
            assert channel.next(20) == Release()
            time.sleep(1)
            assert not marker.exists(), "rank 0's program started before rank 1 freed its port"
            guard.close()
            channel.send(Released(1))
            assert channel.next(20) == Start()
            channel.send(Done(1, 0))
            assert head.wait(20) == 0, head.stderr.read()
            channel.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            head.kill()
    assert marker.exists()


def _placed(hosts: list[str]) -> list[Task]:
    """Workers on these hosts, in rank order, each with its index on its host."""
    seen: dict[str, int] = {}
    tasks = []
    for rank, host in enumerate(hosts):
        index = seen.get(host, 0)
        seen[host] = index + 1
        tasks.append(_tasks(["worker"] * len(hosts))[rank]._replace(host=host, local_index=index))
    return tasks


def test_one_node_checks_only_that_its_own_name_leads_back_to_it():
    """256 tasks on one node: loopback between them, nothing to check but the node's name."""
    tasks = _placed(["n1"] * 256)
    assert [t.rank for t in roles.reach_targets(tasks, roles.MULTI_WORKER, 0)] == [0]
    assert all(roles.reach_targets(tasks, roles.MULTI_WORKER, r) == [] for r in range(1, 256))


def test_each_nodes_first_task_checks_every_peer_of_its_node_on_other_nodes():
    tasks = _placed(["n1", "n1", "n2", "n2", "n3"])
    found = {
        r: [t.rank for t in roles.reach_targets(tasks, roles.MULTI_WORKER, r)] for r in range(5)
    }
    assert found == {0: [0, 2, 3, 4], 1: [], 2: [0, 1, 2, 4], 3: [], 4: [0, 1, 2, 3, 4]}
    ps = _placed(["n1", "n1", "n2"])  # chief, ps on n1; worker on n2
    ps = [ps[0]._replace(task_type="chief"), ps[1]._replace(task_type="ps"), ps[2]]
    assert [t.rank for t in roles.reach_targets(ps, roles.PARAMETER_SERVER, 0)] == [0, 2]
    assert [t.rank for t in roles.reach_targets(ps, roles.PARAMETER_SERVER, 2)] == [1, 2]


@pytest.mark.parametrize(
    "hosts",
    [["n1"] * 8, ["n1", "n1", "n2", "n2", "n3"], ["n1", "n2", "n1", "n2"], ["n1", "n2", "n2"]],
    ids=["one-node", "block", "cyclic", "uneven"],
)
def test_rank_0_probes_the_members_that_check_something_and_no_other(hosts):
    """startup.first_tasks (rank 0's side, from its Step) names exactly the members whose
    reach_targets (each member's own side, from its plan) are not empty."""
    tasks = _placed(hosts)
    members = {t.rank: t.host for t in tasks[1:]}
    step = Step(hosts[0], 0, members, servers=False, timeout=5.0)
    checking = {t.rank for t in tasks[1:] if roles.reach_targets(tasks, roles.MULTI_WORKER, t.rank)}
    assert first_tasks(step) == checking
