"""The site check: each question about a node (sitecheck/questions.py) on faked inputs, the table
(sitecheck/check.py), and whole checks of several tasks on localhost (fake Slurm variables).
The dev cluster's faults (a firewall, a missing bind) are in tests/e2e/test_site_check.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.localstep import LocalStep
from bench.repo import ROOT
from tests.fake_slurm import step_env
from tfslurm_entry.resolve import Options, resolve
from tfslurm_entry.resolve.slurm_env import read_step_env
from tfslurm_entry.sitecheck import check as sitecheck
from tfslurm_entry.sitecheck import questions
from tfslurm_entry.sitecheck.questions import FAIL, OK, WARN, Finding
from tfslurm_entry.step.reach import Unreached
from tfslurm_entry.task import cuda


def plan_of(rank: int = 0, **options):
    env = step_env(rank, "n[1-3]", "1(x3)")
    return resolve(read_step_env(env), Options(**options))


def test_a_proxy_grpc_would_use_is_a_warning_with_the_fix():
    found = questions.proxy_use({"https_proxy": "http://p:3128"}, ["n1", "n2"])
    assert found.level == WARN
    assert found.text.startswith("https_proxy=http://p:3128 reaches the tasks")
    assert "(n1, n2 not in no_proxy)" in found.text and "no_proxy" in found.fix
    exempt = {"https_proxy": "http://p:3128", "no_proxy": "n1,n2"}
    assert questions.proxy_use(exempt, ["n1", "n2"]).level == OK
    assert questions.proxy_use({}, ["n1"]).level == OK


def test_an_ephemeral_range_over_the_kits_windows_fails(tmp_path):
    (tmp_path / "ip_local_port_range").write_text("10000\t60999\n")
    found = questions.port_range("n1", tmp_path)
    assert found.level == FAIL and "reach into 10000-32767" in found.text
    assert "ip_local_port_range" in found.fix
    (tmp_path / "ip_local_reserved_ports").write_text("10000-32767\n")
    assert questions.port_range("n1", tmp_path).level == OK
    assert questions.port_range("n1", tmp_path / "none").level == WARN  # unreadable


def test_paths_missing_or_only_in_the_image_fail_with_the_bind_fix(tmp_path):
    found = questions.binds([str(tmp_path), "/no/such/fs"], {})
    assert (found.level, found.text) == (FAIL, "/no/such/fs missing on this node")
    assert questions.binds([str(tmp_path)], {}).level == OK
    image = {"APPTAINER_CONTAINER": "/data/tf-slurm.sif"}
    # Inside a container, a directory on the root file system is the image's own, not a bind.
    found = questions.binds(["/"], image)
    assert found.level == FAIL and found.text == "/ only the image's own directory"
    assert "`bind path = /` line in the site's apptainer.conf" in found.fix
    found = questions.binds(["/no/such/fs"], image)
    assert found.text == "/no/such/fs missing inside the container /data/tf-slurm.sif"
    assert "APPTAINER_BIND=/no/such/fs" in found.fix
    assert questions.binds([], {}).level == OK


def test_gpus_none_unused_and_unusable(tmp_path):
    assert questions.gpus({}, tmp_path) == Finding("gpus", OK, "none on this node")
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidiactl").touch()  # not a GPU
    given_none = questions.gpus({"CUDA_VISIBLE_DEVICES": ""}, tmp_path)
    assert given_none == Finding("gpus", OK, "1 on the node, none given to this step")
    # The GPU image without a driver in the container: a job would train on the CPU.
    image = {cuda.IMAGE_VARIANT_VAR: "gpu", "CUDA_VISIBLE_DEVICES": "0"}
    if not cuda.driver_found():
        found = questions.gpus(image, tmp_path)
        assert found.level == FAIL and "cannot be loaded in the container" in found.text
    cpu_image = questions.gpus({cuda.IMAGE_VARIANT_VAR: "cpu"}, tmp_path)
    assert cpu_image.level == WARN and "run the GPU image" in cpu_image.text


def test_a_task_bound_to_fewer_cpus_than_asked_is_a_warning():
    bound = len(os.sched_getaffinity(0))
    found = questions.cpus({"SLURM_CPUS_PER_TASK": str(bound + 1)})
    assert found.level == WARN and f"bound to {bound} CPUs of the {bound + 1}" in found.text


def test_tmpdir_that_cannot_be_written_fails(tmp_path):
    found = questions.tmpdir({"TMPDIR": str(tmp_path / "gone")})
    assert found.level == FAIL and "(TMPDIR) is not writable" in found.text
    assert questions.tmpdir({"TMPDIR": str(tmp_path)}).check == "tmpdir"


def mountinfo(path, fstype: str, options: str = "rw,nosuid") -> str:
    """/proc/self/mountinfo with / on ext4 and path on its own mount."""
    return (
        "1 0 8:1 / / rw,relatime - ext4 /dev/vda rw\n"
        f"2 1 0:5 / {path} {options} - {fstype} none rw\n"
    )


def test_the_copy_dir_is_disk_with_room_or_says_what_it_lacks(tmp_path):
    env = {"TFSLURM_COPY_DIR": str(tmp_path), "TFSLURM_COPY_BYTES": "1000"}
    found = questions.copy_dir(env, mountinfo(tmp_path, "xfs"))
    assert found.level == OK and found.text.startswith(f"{tmp_path}: xfs, ")
    found = questions.copy_dir(env, mountinfo(tmp_path, "tmpfs"))
    assert found.level == WARN and "each job's copy is node memory" in found.text
    found = questions.copy_dir(env, mountinfo(tmp_path, "xfs", "rw,noexec"))
    assert (found.level, found.text) == (FAIL, f"{tmp_path} is mounted noexec")
    huge = {**env, "TFSLURM_COPY_BYTES": str(10**18)}
    assert questions.copy_dir(huge, mountinfo(tmp_path, "xfs")).level == FAIL
    gone = {**env, "TFSLURM_COPY_DIR": str(tmp_path / "gone" / "deeper")}
    assert "is not writable" in questions.copy_dir(gone, mountinfo(tmp_path, "xfs")).text
    assert questions.copy_dir({"TFSLURM_COPY": "no"}).level == OK


def test_without_a_copy_dir_disk_comes_before_a_tmpfs_tmpdir(tmp_path):
    """tfslurm-run's own choice: TMPDIR (here in memory), then /var/tmp on disk."""
    env = {"TMPDIR": str(tmp_path), "TFSLURM_COPY_BYTES": "1000"}
    found = questions.copy_dir(env, mountinfo(tmp_path, "tmpfs"))
    assert found.level == OK and found.text.startswith("/var/tmp: ext4"), found


def test_clock_skew_levels():
    assert questions.clock(0.2, "n1").level == OK
    assert questions.clock(-2.5, "n1").level == WARN
    assert questions.clock(400, "n1").level == FAIL
    assert questions.clock(-2.5, "n1").text.startswith("-2.500 s against n1")


def test_unreached_peers_are_grouped_by_reason_with_a_fix_per_peer():
    plan = plan_of(0, port_base=13900)
    unreached = [
        Unreached(1, "n2:13900", "timeout"),
        Unreached(2, "n3:13900", "timeout"),
    ]
    found = questions.reached(plan, unreached, 15, 2)
    assert found.level == FAIL
    assert found.text == (
        "cannot reach n2 at n2:13900, n3 at n3:13900: no answer within 15 s (a firewall "
        "dropping the port, or an address on a network this node does not reach)"
    )
    assert found.fix == (
        "let TCP from n1 to n2 through on --port-base 13900; "
        "let TCP from n1 to n3 through on --port-base 13900"
    )
    unresolved = questions.reached(plan, [Unreached(1, "n2:13900", "unresolved")], 15, 2)
    assert unresolved.fix == "make n2 resolve on n1 (DNS or /etc/hosts), or --network"
    assert questions.reached(plan, [], 15, 2).level == OK


def test_the_table_gives_each_node_a_verdict_and_each_fault_once_with_its_nodes():
    ok = [Finding(c, OK, "fine") for c in sitecheck.COLUMNS]
    proxy = Finding("proxy", WARN, "https_proxy set", "unset it")
    reach = Finding("reach", FAIL, "cannot reach n3", "open it")
    rows = [("n1", [*ok, proxy, reach]), ("n2", [*ok, proxy]), ("n3", None)]
    text = sitecheck.table(rows, "title")
    lines = text.splitlines()
    assert lines[0] == "title"
    assert lines[1].split() == ["node", "verdict", *sitecheck.COLUMNS]
    assert lines[2].split()[:3] == ["n1", "FAIL", "ok"] and lines[2].split()[3] == "FAIL"
    assert lines[3].split()[:2] == ["n2", "warn"]
    assert lines[4].split()[:2] == ["n3", "FAIL"]
    assert "warn proxy on n1, n2: https_proxy set; fix: unset it" in lines
    assert "FAIL reach on n1: cannot reach n3; fix: open it" in lines
    assert any(line.startswith("FAIL did not report on n3: ") for line in lines)
    assert lines[-1] == "verdict: FAIL: 2 of 3 nodes would break a job; 1 with warnings"
    assert sitecheck.verdict_status(rows) == 1
    assert sitecheck.verdict_status(rows[1:2]) == 0


def site_check(tmp_path: Path, size: int, *argv: str, late=(), **env: str) -> LocalStep:
    """A site check of `size` tasks on localhost (ranks in late never start)."""
    return LocalStep(["--site-check", *argv], size, tmp_path, late=late, keep_stdout=True, **env)


@pytest.mark.processes
def test_three_tasks_on_localhost_check_in_and_rank_0_prints_one_table(tmp_path):
    """As tfslurm-run --site-check runs it: a secret, each partition's ExclusiveUser, and the
    listener (--site-check-observer) where the check was started, which tries the task ports."""
    secret = {"TFSLURM_STEP_SECRET": "5e" * 32}
    observer = subprocess.Popen(
        [sys.executable, "-m", "tfslurm_entry", "--site-check-observer"],
        env={**os.environ, **secret, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    here = observer.stdout.readline().strip()
    env = {**secret, "TFSLURM_SITE_CHECK_FROM": here, "TFSLURM_EXCLUSIVE_USER": "debug=NO"}
    env["SLURM_JOB_PARTITION"] = "debug"
    with site_check(tmp_path, 3, str(tmp_path), **env) as check:
        assert check.wait(60) == [0, 0, 0], check.log(0)
    assert observer.wait(timeout=10) == 0  # it ends after rank 0's one conversation
    table = check.out(0)
    host = here.rsplit(":", 1)[0]
    said = f"  from {host}, where the check was started: 3 of 3 task ports answer: anyone there"
    assert said in table, table
    assert "  partition debug: ExclusiveUser=NO: other users' jobs may share" in table, table
    assert table.splitlines()[-1].startswith("verdict: ok"), table
    assert "tfslurm site check of 3 tasks (step 4242.0)" in table
    rows = [line.split() for line in table.splitlines()[2:5]]
    assert [row[:4] for row in rows] == [
        ["localhost", "ok", "ok", "ok"],
        ["localhost/1", "ok", "ok", "ok"],
        ["localhost/2", "ok", "ok", "ok"],
    ], table
    assert check.out(1) == check.out(2) == ""  # only rank 0 prints


@pytest.mark.processes
def test_a_task_that_never_checks_in_fails_its_row_after_the_timeout(tmp_path):
    with site_check(tmp_path, 3, "--chief-timeout", "2", late=[2]) as check:  # no rank 2
        assert check.wait(60)[0] == 1, check.log(0)
    table = check.out(0)
    assert [line.split()[:2] for line in table.splitlines()[2:5]] == [
        ["localhost", "FAIL"],  # it could not reach rank 2's port either
        ["localhost/1", "FAIL"],
        ["localhost/2", "FAIL"],
    ], table
    assert "FAIL did not report on localhost/2: its task did not check in" in table
    assert "cannot reach localhost/2" not in table  # peers are named by their node
    assert "connection refused" in table
