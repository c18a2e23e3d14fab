"""The site check's look from outside the step (tfslurm_entry/sitecheck/outside.py): the
listener and rank 0's side on real localhost sockets, and the lines that say who can reach
TensorFlow's ports."""

from __future__ import annotations

import io
import threading

import pytest

from bench.localstep import free_port_base
from tfslurm_entry.sitecheck import outside
from tfslurm_entry.sitecheck.outside import Look, exclusive_users, exposure
from tfslurm_entry.step import reach
from tfslurm_entry.step.secret import ENV, from_environ

STEP = "4242.0"
SECRET = "ab" * 32


def listener(secret: str, timeout: float = 20) -> tuple[str, threading.Thread, list[int]]:
    """outside.listen in a thread: the address it printed, the thread, its exit status."""
    printed, status = io.StringIO(), []
    thread = threading.Thread(
        target=lambda: status.append(outside.listen({ENV: secret}, timeout, printed)), daemon=True
    )
    thread.start()
    for _ in range(200):
        if printed.getvalue().endswith("\n"):
            break
        threading.Event().wait(0.02)
    return printed.getvalue().strip(), thread, status


def test_the_listener_counts_the_task_ports_that_greet_it_as_their_task():
    address, thread, status = listener(SECRET)
    host, port = address.rsplit(":", 1)
    assert int(port) > 0 and host
    guarded, closed = free_port_base(2), free_port_base(2) + 1
    with reach.Guard(guarded, STEP, 0):
        targets = [(0, f"localhost:{guarded}"), (1, f"localhost:{closed}")]
        seen = outside.look(address, STEP, targets, from_environ({ENV: SECRET}))
    thread.join(10)
    assert seen == Look(host, 1, 2)
    assert status == [0]  # one conversation, then it ends


def test_a_rank_0_without_the_steps_secret_is_refused_and_the_listener_waits_on(capfd):
    address, thread, status = listener(SECRET, timeout=1)
    seen = outside.look(address, STEP, [(0, "localhost:1")], from_environ({ENV: "cd" * 32}))
    assert seen == f"the listener at {address} refused rank 0's proof of the step's secret"
    assert "did not prove step 4242.0's secret (not that check's rank 0)" in capfd.readouterr().err
    thread.join(10)
    assert status == [1]  # nobody proved it before its timeout


def test_no_listener_there_is_said_as_why_not_looked(monkeypatch):
    monkeypatch.setattr(outside, "REACH_S", 0.3)  # a port nobody listens on: retried till then
    address = f"localhost:{free_port_base(1)}"
    seen = outside.look(address, STEP, [(0, "localhost:1")], from_environ({ENV: SECRET}))
    assert seen == f"rank 0 could not connect to tfslurm-run's listener at {address}"


def test_each_partitions_exclusive_user_is_read_from_tfslurm_runs_variable():
    assert exclusive_users("debug=NO gpu=YES  bad =x") == {"debug": "NO", "gpu": "YES"}
    assert exclusive_users("") == {}


@pytest.mark.parametrize(
    ("network", "partition", "setting", "seen", "said"),
    [
        (
            None,
            "debug",
            "debug=NO",
            Look("login", 3, 3),
            [
                "network: Slurm's node names (no --network): every host on the nodes' default",
                "partition debug: ExclusiveUser=NO: other users' jobs may share these nodes",
                "from login, where the check was started: 3 of 3 task ports answer: anyone there",
            ],
        ),
        (
            "ib0",
            "gpu",
            "debug=NO gpu=YES",
            Look("login", 0, 4),
            [
                "network: --network 'ib0': only hosts on that network",
                "partition gpu: ExclusiveUser=YES: no other user's job shares these nodes",
                "from login, where the check was started: none of the 4 task ports answers",
            ],
        ),
        (
            None,
            "urgent",
            "debug=NO",
            None,
            [
                "partition urgent: ExclusiveUser not known here (tfslurm-run --site-check",
                "from the login node: not looked (tfslurm-run --site-check looks from where",
            ],
        ),
        (
            None,
            None,
            "",
            "rank 0 could not connect to tfslurm-run's listener at login:5",
            [
                "the partition: ExclusiveUser not known here",
                "from where the check was started: not looked: rank 0 could not connect to",
            ],
        ),
    ],
)
def test_exposure_says_which_of_the_measures_that_narrow_it_hold(
    network, partition, setting, seen, said
):
    lines = exposure(network, partition, {outside.EXCLUSIVE_ENV: setting}, seen)
    assert lines[0].startswith("who can reach TensorFlow's ports (a TensorFlow server runs what")
    assert len(lines) == 4
    for part in said:
        assert any(line.strip().startswith(part) for line in lines[1:]), (part, lines)
