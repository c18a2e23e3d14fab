"""The site check (tfslurm-entry --site-check) as an administrator runs it: one task per node on
the dev cluster's three compute nodes, from the job user's home (so that only the site's
Apptainer binds put /data into the container, not the working directory).

- Clean: every compute node's apptainer.conf binds /data, as the rollout writes it
  (`bind path = /data`): every node's verdict is ok and the step exits 0.
- Three faults put in at once, each on purpose: a proxy in the step's environment (every node),
  TCP to c2's task port dropped by a firewall (iptables in c2's network namespace, set from this
  machine), and c3's apptainer.conf without the /data bind. The table names each node with its
  fault and its fix, and the step exits 1. The proxy is never contacted: nothing leaves the
  machine.
"""

from __future__ import annotations

import pytest

from .conftest import LAUNCH, SLURM, data_bind
from .test_site_environment import dropped

pytestmark = pytest.mark.e2e

NODES = ("c1", "c2", "c3")
PORT_BASE = 13900  # fixed, so that the firewall knows c2's task port: one task per node
CHECK = (
    f"cd ~ && srun -N3 --ntasks-per-node=1 -w c1,c2,c3 -t 2 {LAUNCH} --site-check "
    f"--port-base {PORT_BASE} /data"
)


@pytest.fixture
def data_bound(cluster):
    """/data in every compute node's apptainer.conf, as the rollout writes it."""
    assert SLURM.apptainer, f"Slurm {SLURM.name}'s dev cluster runs no Apptainer"
    with data_bind(cluster, NODES, present=True):
        yield


def verdicts(out: str) -> dict[str, str]:
    """node -> verdict, from the table's rows."""
    rows = [line.split() for line in out.splitlines()]
    return {row[0]: row[1] for row in rows if len(row) > 2 and row[0] in NODES}


def test_on_a_clean_cluster_every_node_passes(cluster, data_bound):
    result = cluster.run(CHECK)
    assert result.code == 0, result.out + result.err
    assert verdicts(result.out) == dict.fromkeys(NODES, "ok"), result.out
    assert result.out.rstrip().endswith("verdict: ok: no node would break a job"), result.out


def test_a_proxy_a_blocked_port_and_a_missing_bind_are_each_named_with_their_node_and_fix(
    cluster, data_bound
):
    with data_bind(cluster, ("c3",), present=False), dropped(cluster, "c2", PORT_BASE):
        result = cluster.run(f"export https_proxy=http://127.0.0.1:3128; {CHECK}")
    out = result.out
    assert result.code == 1, out + result.err
    assert verdicts(out) == {"c1": "FAIL", "c2": "warn", "c3": "FAIL"}, out
    assert "verdict: FAIL: 2 of 3 nodes would break a job; 1 with warnings" in out, out
    blocked = "cannot reach c2 at c2:13900: no answer within 15 s (a firewall dropping the port"
    for node in ("c1", "c3"):
        line = next(x for x in out.splitlines() if x.startswith(f"FAIL reach on {node}:"))
        assert blocked in line, out
        assert line.endswith(f"fix: let TCP from {node} to c2 through on --port-base 13900"), out
    assert (
        "FAIL binds on c3: /data missing inside the container /data/tf-slurm.sif; fix: bind it "
        "with `apptainer run -B /data ...`, export APPTAINER_BIND=/data, or ask for a "
        "`bind path = /data` line in the site's apptainer.conf"
    ) in out, out
    proxy = next(x for x in out.splitlines() if x.startswith("warn proxy on c1, c2, c3: "))
    assert (
        "https_proxy=http://127.0.0.1:3128" in proxy
        and "fix: add the compute nodes' names to no_proxy" in proxy
    ), out
