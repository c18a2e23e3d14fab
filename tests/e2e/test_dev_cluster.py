"""The dev cluster is a real Slurm: scheduling, job-step environment, accounting, munge auth."""

from __future__ import annotations

import json
import re
import subprocess
import uuid

import pytest

from . import jobs
from .conftest import DEVCLUSTER, PROJECT, ROOT, data_bind

pytestmark = pytest.mark.e2e

SIF = "/data/tf-slurm.sif"


def test_three_idle_nodes_and_two_gpu_nodes(cluster):
    """The compute nodes in debug and in the preemptible and urgent partitions (a job of
    urgent preempts one of preemptible), the GPU nodes in gpu."""
    out = cluster.ok("sinfo --noheader --Node --format='%N %T %P %G'")
    assert sorted(out.split("\n")[:-1]) == [
        f"{node} idle {partition} (null)"
        for node in ("c1", "c2", "c3")
        for partition in ("debug*", "preemptible", "urgent")
    ] + ["g1 idle gpu gpu:4", "g2 idle gpu gpu:4"]


def test_srun_runs_on_every_node(cluster):
    assert sorted(cluster.ok("srun -N3 hostname").split()) == ["c1", "c2", "c3"]


def test_print_config_through_apptainer_agrees_with_the_job(cluster):
    tag = uuid.uuid4().hex[:8]
    script = (
        "#!/bin/bash\n"
        "echo NODELIST $(scontrol show hostnames $SLURM_JOB_NODELIST | tr '\\n' ' ')\n"
        f"srun --ntasks-per-node=2 apptainer run {SIF} --print-config\n"
    )
    cluster.ok(f"cat > /data/pc-{tag}.sh <<'EOF'\n{script}EOF\n")
    job_id, state = jobs.run(
        cluster, f"-N2 --ntasks-per-node=2 -o /data/pc-{tag}.out /data/pc-{tag}.sh"
    )
    assert state == "COMPLETED", cluster.run(f"cat /data/pc-{tag}.out").out
    lines = cluster.ok(f"cat /data/pc-{tag}.out").splitlines()
    hosts = next(line for line in lines if line.startswith("NODELIST")).split()[1:]
    configs = sorted(
        (json.loads(line) for line in lines if line.startswith("{")), key=lambda c: c["rank"]
    )
    assert [c["rank"] for c in configs] == [0, 1, 2, 3]
    clusters = {json.dumps(c["TF_CONFIG"]["cluster"]) for c in configs}
    assert len(clusters) == 1, "every task must see the same cluster"
    workers = configs[0]["TF_CONFIG"]["cluster"]["worker"]
    assert [a.split(":")[0] for a in workers] == [hosts[0], hosts[0], hosts[1], hosts[1]]
    base = int(workers[0].split(":")[1])
    assert [int(a.split(":")[1]) for a in workers] == [base, base + 1, base, base + 1]
    for c in configs:
        assert c["TF_CONFIG"]["task"] == {"type": "worker", "index": c["rank"]}
        assert c["host"] == hosts[c["rank"] // 2]

    states = cluster.ok(f"sacct -j {job_id} --noheader --parsable2 --format=JobID,State,ExitCode")
    rows = [line.split("|") for line in states.splitlines()]
    assert {r[0] for r in rows} >= {job_id, f"{job_id}.batch", f"{job_id}.0"}
    assert all(r[1] == "COMPLETED" and r[2] == "0:0" for r in rows), rows


def test_wrong_munge_key_is_refused(cluster):
    """A submit host whose munge key differs from the cluster's cannot submit."""
    node = cluster.container("login")
    script = (
        "install -d -o munge -g munge /run/munge && "
        "dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none && "
        "chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key && "
        "runuser -u munge -- munged && runuser -u runner -- sbatch --wrap hostname"
    )
    mounts = {m["Destination"]: m["Source"] for m in node.attrs["Mounts"]}
    container = cluster.client.containers.run(
        node.image.id,
        ["-c", script],
        entrypoint="bash",
        network=cluster.network,
        volumes={mounts["/etc/slurm/slurm.conf"]: {"bind": "/etc/slurm/slurm.conf", "mode": "ro"}},
        detach=True,
    )
    try:
        code = container.wait(timeout=60)["StatusCode"]
        logs = container.logs().decode()
    finally:
        container.remove(force=True)
    assert code != 0
    assert re.search(r"Protocol authentication error|Invalid authentication credential", logs), logs


def test_munge_key_lives_only_in_the_bring_up_volume(cluster):
    stat = cluster.ok(
        "stat -c '%a %U' /secrets/munge.key /etc/munge/munge.key", user="root", service="slurmctld"
    )
    assert stat.split("\n")[:2] == ["400 munge", "400 munge"]
    image = cluster.container("slurmctld").image.id
    listing = cluster.client.containers.run(
        image, ["-c", "ls -A /etc/munge"], entrypoint="sh", remove=True
    ).decode()
    assert "munge.key" not in listing, "a munge key is baked into the node image"


def test_jobs_run_as_the_unprivileged_user_and_nothing_is_privileged(cluster):
    assert cluster.ok("srun -N3 id -un").split() == ["runner"] * 3
    containers = cluster.client.containers.list(
        filters={"label": f"com.docker.compose.project={PROJECT}"}
    )
    assert len(containers) >= 7
    assert not [c.name for c in containers if c.attrs["HostConfig"]["Privileged"]]


def test_a_recreated_controller_keeps_counting_job_ids(cluster):
    """`make dev-cluster` recreates containers whose image or settings changed. The accounting
    database outlives them, so the controller's state must too: a controller that started
    over at job id 1 would reuse ids that sacct (and job output file names) already hold."""
    before = int(cluster.ok("sbatch --parsable -o /dev/null --wrap true").strip().split(";")[0])
    controller = cluster.container("slurmctld")
    controller.stop(timeout=30)  # as compose recreates it: SIGTERM, and slurmctld saves its state
    controller.remove()
    try:
        up = subprocess.run(
            [*DEVCLUSTER, "up"], cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert up.returncode == 0, (
            f"`devcluster.py up` exited {up.returncode}:\n{up.stdout[-4000:]}\n{up.stderr[-3000:]}"
            f"\n{controller_log(cluster)}"
        )
        after = int(cluster.ok("sbatch --parsable -o /dev/null --wrap true").strip().split(";")[0])
        assert after > before
        assert cluster.ok(f"sacct -X -n -P -j {after} -o JobID").split() == [str(after)]
    finally:  # the next cases on this worker's cluster need a controller, whatever happened here
        if cluster.run("scontrol ping").code != 0:
            subprocess.run([*DEVCLUSTER, "up"], cwd=ROOT, capture_output=True, timeout=300)


def controller_log(cluster) -> str:
    """The controller's container's state and last lines (running, restarting or exited)."""
    try:
        found = cluster.container("slurmctld", stopped=True)
    except LookupError as err:
        return str(err)
    return f"slurmctld container {found.status}:\n{found.logs(tail=40).decode(errors='replace')}"


def test_a_script_apptainer_does_not_bind_gets_the_bind_fix_and_runs_once_bound(cluster):
    """As a new user meets it on a site that binds nothing more: a script on the shared /data,
    run from a job whose working directory is a subdirectory of it. Apptainer binds only $HOME,
    /tmp and the working directory, so the script exists on every node but not in the
    container. Every task stops with the message naming the fix; the fix it names then works."""
    project = f"/data/project-{uuid.uuid4().hex[:6]}"
    cluster.ok(f"mkdir -p {project}/run1 && printf 'print(\"ran\", __file__)\\n' > {project}/x.py")
    srun = f"srun -N2 --ntasks-per-node=1 apptainer run{{bind}} {SIF} {project}/x.py"
    with data_bind(cluster, ("c1", "c2", "c3"), present=False):  # the rollout's tests add it
        _, unbound = jobs.run(
            cluster,
            f"--chdir={project}/run1 -N2 -o {project}/unbound.out --wrap '{srun.format(bind='')}'",
        )
    log = cluster.ok(f"cat {project}/unbound.out")
    assert unbound == "FAILED", log
    message = (
        f"tfslurm-entry: error: program '{project}/x.py' not found inside the container {SIF} "
        f"(working directory {project}/run1); if it exists on the node, its directory is not "
        "bound into the container"
    )
    assert log.count(message) == 2, log  # one line from each task, no traceback
    assert "`apptainer run -B /data ...`, export APPTAINER_BIND=/data" in log
    assert "Traceback" not in log and "ran " not in log
    _, bound = jobs.run(
        cluster,
        f"--chdir={project}/run1 -N2 -o {project}/bound.out "
        f"--wrap '{srun.format(bind=' -B /data')}'",
    )
    assert bound == "COMPLETED"
    assert cluster.ok(f"cat {project}/bound.out").count(f"ran {project}/x.py") == 2
