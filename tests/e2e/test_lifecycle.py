"""Lifecycle on the dev cluster (first part): a parameter-server job's servers stop with it."""

from __future__ import annotations

import re
import time
import uuid

import pytest

pytestmark = pytest.mark.e2e

SIF = "/data/tf-slurm.sif"
EXAMPLES = "/data/examples/cifar10"


def node_processes(cluster) -> dict[str, str]:
    """What the job user still runs on each compute node."""
    return {
        node: cluster.run("ps -u runner -o pid=,args=", service=node, user="root").out.strip()
        for node in ("c1", "c2", "c3")
    }


def elapsed_seconds(text: str) -> int:
    parts = [int(p) for p in re.split("[-:]", text)]
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + part
    return seconds


def test_parameter_server_job_ends_with_its_chief(cluster):
    cluster.ok(f"apptainer exec {SIF} python {EXAMPLES}/make_sample.py /data/cifar10")
    out = f"/data/runs/lifecycle-{uuid.uuid4().hex[:6]}"
    job = cluster.ok(
        f"OUTPUT_DIR={out} sbatch --wait --parsable -o /data/lifecycle-%j.out "
        f"{EXAMPLES}/parameter-server.sbatch --steps 40 --log-every 20"
    ).strip()
    log = cluster.ok(f"cat /data/lifecycle-{job}.out")
    rows = cluster.ok(f"sacct -j {job} -n -P -o JobID,State,ExitCode,Elapsed").splitlines()
    states = {r.split("|")[0]: r.split("|")[1:] for r in rows}
    assert all(state == "COMPLETED" and code == "0:0" for state, code, _ in states.values()), rows
    # The step lasts as long as the chief's program, plus start-up and a few seconds.
    chief = float(re.search(r"chief program ended with exit 0 after ([\d.]+) s", log).group(1))
    step = elapsed_seconds(states[f"{job}.0"][2])
    assert step <= chief + 30, f"step took {step} s, chief {chief} s\n{log}"
    assert len(re.findall(r"chief ended with exit 0; exiting with 0", log)) == 3, log
    assert node_processes(cluster) == {"c1": "", "c2": "", "c3": ""}


def test_servers_give_up_when_the_chief_never_comes(cluster):
    """Rank 0 dies before its entrypoint starts: ps and workers exit non-zero after the timeout."""
    script = (
        'if [ "$SLURM_PROCID" = 0 ]; then echo "rank 0 crashing"; exit 3; fi; '
        f"exec apptainer run {SIF} --strategy parameter-server --chief-timeout 15 true"
    )
    start = time.monotonic()
    result = cluster.run(f"srun -N2 --ntasks-per-node=2 bash -c '{script}'")
    took = time.monotonic() - start
    assert result.code != 0
    assert result.err.count("did not answer within 15 s") == 3, result.err
    assert took < 60, f"servers took {took:.0f} s to give up"
    assert node_processes(cluster) == {"c1": "", "c2": "", "c3": ""}
