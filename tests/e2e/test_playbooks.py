"""playbooks/site.yml against the dev cluster: the real playbook on the real containers.

One module fixture runs site.yml once; the tests then check what it left on the nodes, that a
--check --diff run changes nothing (a real second run too, in make test-soak), that a job
through the installed template and tfslurm-run completes, that the GPU SIF goes out beside the
CPU one and tfslurm-run picks it for the gpu partition, that each image line prunes only its own
versions, that a second SIF version rolls out and back, that preflight stops on a node whose
munge is stopped, and that the site check at its end (one per partition) stops on a node without
the shared file system's bind. Every test leaves the cluster as it found it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e import jobs
from tests.e2e.clean_end import copies_left
from tests.e2e.conftest import ROOT, data_bind, devcluster

# One worker: the module fixture (the rollout) runs once (tests/README.md: side by side).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("playbooks")]

PLAYBOOKS = ROOT / "playbooks"
SIF = Path(os.environ.get("TFSLURM_SIF", ROOT / "tf-slurm.sif"))
# The GPU line's SIF, given to every run here: TFSLURM_GPU_SIF (e.g. `make sif-gpu`'s 4 GB
# tf-slurm-gpu.sif), else a stand-in the `gpu_sif` fixture makes: a SIF of one small data
# object. The rollout never looks inside a SIF beyond `apptainer sif list`, no test runs the GPU
# line's image, and `make test` does not build the GPU SIF (about 9 minutes on 2 cores).
GPU_SIF = Path(
    os.environ.get("TFSLURM_GPU_SIF")
    or Path(tempfile.gettempdir()) / f"tfslurm-e2e-{os.getpid()}" / "gpu-stand-in.sif"
)
GPU_ARGS = ("-e", f"tfslurm_image_gpu_src={GPU_SIF}")
IMAGE_DIR = "/data/tfslurm"
TEMPLATES = "/usr/local/share/tfslurm"
LAUNCHER = "/usr/local/bin/tfslurm-run"  # the rolled-out one (not /data/bin's, on PATH first)
CONFIG = "/etc/tfslurm/tfslurm-run.conf"
# Inventory host name -> compose service (inventories/dev-cluster/hosts.yml).
HOSTS = {"login1": "login", "c1": "c1", "c2": "c2", "c3": "c3"}
RECAP = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", re.MULTILINE)


def playbook(*args: str, inventory: str = "inventories/dev-cluster") -> subprocess.CompletedProcess:
    """ansible-playbook -i INVENTORY site.yml ARGS, from playbooks/."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    command = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        inventory,
        "site.yml",
        *GPU_ARGS,
        *args,
    ]
    return subprocess.run(
        command, cwd=PLAYBOOKS, env=env, capture_output=True, text=True, timeout=900
    )


def recap(proc: subprocess.CompletedProcess) -> dict[str, dict[str, int]]:
    """The PLAY RECAP counters per host: {'c1': {'ok': 17, 'changed': 0, ...}}."""
    return {
        host: {k: int(v) for k, v in (pair.split("=") for pair in counters.split())}
        for host, counters in RECAP.findall(proc.stdout)
    }


def shown(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def current(cluster, link: str = "current.sif") -> str:
    return cluster.ok(f"readlink {IMAGE_DIR}/{link}").strip()


@pytest.fixture(scope="module")
def v1() -> str:
    """The version site.yml gives the repository's tf-slurm.sif: its sha256's first 12 digits."""
    if not SIF.is_file():
        pytest.fail(f"{SIF} is missing: run `make sif` first")
    return sha256(SIF)[:12]


@pytest.fixture(scope="module")
def gpu_sif(cluster) -> Path:
    if "TFSLURM_GPU_SIF" in os.environ:
        if not GPU_SIF.is_file():
            pytest.fail(f"TFSLURM_GPU_SIF={GPU_SIF} is missing: run `make sif-gpu` first")
        yield GPU_SIF
        return
    GPU_SIF.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield stand_in_sif(cluster, GPU_SIF, "gpu-line-stand-in")
    finally:
        shutil.rmtree(GPU_SIF.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def gpu_sha256(gpu_sif) -> str:
    """The sha256 of the GPU SIF; site.yml names its version after the first 12 digits."""
    return sha256(gpu_sif)


@pytest.fixture(scope="module")
def deployed(cluster, v1, gpu_sif):
    """site.yml, once; at the end each node's tfslurm-run settings as they were (the node image's:
    the rollout's name the stand-in GPU SIF, which the later tests' jobs must not run)."""
    before = {service: cluster.ok(f"cat {CONFIG}", service=service) for service in HOSTS.values()}
    proc = playbook()
    assert proc.returncode == 0, shown(proc)
    yield proc
    for service, text in before.items():
        cluster.ok(f"cat > {CONFIG} <<'EOF'\n{text}EOF", service=service, user="root")


def test_site_rolls_out_image_launcher_and_binds(deployed, cluster, v1):
    counts = recap(deployed)
    assert set(counts) == set(HOSTS), shown(deployed)
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts

    assert current(cluster) == f"tf-slurm-{v1}.sif"
    cluster.ok(f"cd {IMAGE_DIR} && sha256sum -c tf-slurm-{v1}.sif.sha256")
    launcher = (ROOT / "tfslurm_entry" / "launcher" / "tfslurm-run").read_text()
    for service in HOSTS.values():
        cluster.ok(
            f"test -x {LAUNCHER} && test -r {TEMPLATES}/multi-worker.sbatch "
            "&& grep -qx 'bind path = /data' /etc/apptainer/apptainer.conf",
            service=service,
        )
        # The same file users write out of the image; the site's settings beside it.
        assert cluster.ok(f"cat {LAUNCHER}", service=service) == launcher
        settings = cluster.ok(f"grep -v '^#' {CONFIG}", service=service).splitlines()
        assert settings == [
            f"sif = {IMAGE_DIR}/current.sif",
            f"partition_sifs = gpu={IMAGE_DIR}/current-gpu.sif",
            "gpu_partitions = gpu",
            "copy = auto",
            "copy_dir = /tmp",
            "max_requeues = 3",
        ], settings
    # The last play: the site check over c1..c3, as the job user, every node ok; who can reach
    # the tasks' TensorFlow ports: the dev cluster has no firewall, so the login node can.
    assert "verdict: ok: no node would break a job" in deployed.stdout, shown(deployed)
    assert "partition debug: ExclusiveUser=NO: other users' jobs may" in deployed.stdout
    login = "from login, where the check was started: 3 of 3 task ports answer: anyone there"
    assert login in deployed.stdout, shown(deployed)


def test_check_diff_on_the_rollout_in_place_changes_nothing(deployed):
    """What an admin runs before a change: --check --diff over the rollout in place predicts no
    change on any host and shows no diff. It stands for a real second run (idempotence): every
    command, shell and raw task has changed_when (ansible-lint's production profile) and runs in
    --check too (check_mode: false, read-only), and the file, copy, template and package modules
    predict in --check what a real run would change; the site check, skipped in --check, only
    reads. The real second run is in make test-soak."""
    proc = playbook("--check", "--diff")
    assert proc.returncode == 0, shown(proc)
    counts = recap(proc)
    assert set(counts) == set(HOSTS), shown(proc)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), shown(proc)
    assert "\n+++ " not in proc.stdout, shown(proc)


@pytest.mark.soak
def test_second_run_changes_nothing(deployed):
    proc = playbook()
    assert proc.returncode == 0, shown(proc)
    counts = recap(proc)
    assert set(counts) == set(HOSTS)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), shown(proc)


def template_job(cluster, sample: str) -> tuple[str, str, str, str]:
    """A short CIFAR-10 job through the installed multi-worker template (2 nodes x 2 tasks);
    (job id, final state, its output, its output directory)."""
    output_dir = f"/data/runs/e2e-ansible-{uuid.uuid4().hex[:6]}"
    job, state = jobs.run(
        cluster,
        f"{TEMPLATES}/multi-worker.sbatch /data/examples/cifar10/train.py "
        f"--data-dir {sample} --output-dir {output_dir} --steps 20 --log-every 10",
    )
    return job, state, cluster.ok(f"cat /data/tf-multi-worker-{job}.out"), output_dir


def test_job_through_installed_template_completes(deployed, cluster, sample, v1):
    job, _, log, output_dir = template_job(cluster, sample)
    states = cluster.ok(f"sacct -j {job} --noheader --parsable2 --format=JobID,State,ExitCode")
    rows = [line.split("|") for line in states.splitlines()]
    assert rows and all(r[1] == "COMPLETED" and r[2] == "0:0" for r in rows), f"{rows}\n{log}"
    # tfslurm-run ran the rolled-out image, resolved from current.sif, on 2 nodes x 2 tasks.
    image = f"image {IMAGE_DIR}/tf-slurm-{v1}.sif ({IMAGE_DIR}/current.sif)"
    assert re.search(rf"^tfslurm-run: job {job} .*, {re.escape(image)}$", log, re.M), log
    assert len(set(re.findall(r"tfslurm: rank (\d)/4", log))) == 4, log
    assert cluster.ok(f"test -f {output_dir}/metrics.json && echo yes").strip() == "yes", log


@pytest.mark.soak
def test_a_site_on_slurms_oci_gets_the_templates_job_running_from_its_bundle(
    deployed, cluster, sample
):
    """tfslurm_runtime=oci: no Apptainer, no SIF; preflight looks for Slurm's oci.conf; the
    installed tfslurm-run's image is the bundle unpacked on the shared file system
    (tfslurm_launcher_sif), and the template's job runs each task with srun --container to
    COMPLETED. Left at current.sif, the launcher play stops before it changes anything."""
    devcluster.install_oci_bundle(ROOT / "tf-slurm.oci.tar")
    bundle = devcluster.OCI_ON_CLUSTER
    oci = ("--tags", "preflight,launcher", "-e", "tfslurm_runtime=oci")
    try:
        wrong = playbook(*oci)
        assert wrong.returncode != 0, shown(wrong)
        refusal = "set tfslurm_launcher_sif to the image unpacked on the shared file system"
        assert f"{refusal} (make oci-bundle" in wrong.stdout, shown(wrong)
        assert cluster.ok(f"grep '^sif = ' {CONFIG}").strip().endswith("/current.sif")
        proc = playbook(*oci, "-e", f"tfslurm_launcher_sif={bundle}")
        assert proc.returncode == 0, shown(proc)
        assert "Look for Slurm's oci.conf" in proc.stdout, shown(proc)
        for service in HOSTS.values():
            assert cluster.ok(f"grep '^sif = ' {CONFIG}", service=service).strip() == (
                f"sif = {bundle}"
            )
        job, state, log, _ = template_job(cluster, sample)
        assert state == "COMPLETED", log
        assert re.search(rf"^tfslurm-run: job {job} .*, image {bundle}$", log, re.M), log
        assert f"running from {bundle}: the image is a directory" in log, log
        assert len(set(re.findall(r"tfslurm: rank (\d)/4", log))) == 4, log
    finally:
        back = playbook("--tags", "launcher")  # the rollout's settings again: current.sif
        assert back.returncode == 0, shown(back)


def test_a_template_job_stopped_by_slurms_warning_saves_requeues_and_resumes(
    deployed, cluster, programs, v1
):
    """The examples' custom loop (PreemptionCheckpointHandler) through the installed template,
    which runs the step from a copy of the image on each node (the site's copy = auto: the dev
    cluster's Apptainer mounts a SIF with squashfuse) and has --requeue and the time limit's
    --signal=TERM@120. The warning sent to the batch shell alone (--signal=B:USR1, here by
    scancel --batch) reaches the program as SIGTERM through tfslurm-run; it saves, tfslurm-run
    requeues the job, which resumes there and completes; no copy is left at the end."""
    runs = f"/data/runs/e2e-template-{uuid.uuid4().hex[:6]}"
    # Long enough that the warning comes while it trains: on an idle machine the loop makes up
    # to 85 steps/s, and 400 steps once ended before the warning reached them.
    program = f"/data/examples/preemption/custom_loop.py {runs}/ckpt 1200"
    job = jobs.submit(
        cluster,
        f"-N2 --ntasks-per-node=1 {TEMPLATES}/multi-worker.sbatch {program}",
        f"TFSLURM_RUN_DIR={runs}",
    )
    log_file = f"/data/tf-multi-worker-{job}.out"
    assert cluster.until_logged(log_file, r"^step [3-9]\d ", 180), cluster.run(
        f"cat {log_file}"
    ).out
    cluster.ok(f"scancel --batch --signal=USR1 {job}")
    assert jobs.wait(cluster, job) == "COMPLETED", cluster.ok(f"cat {log_file}")
    log = cluster.ok(f"cat {log_file}")
    history = cluster.ok(f"sacct -D -X -n -P -j {job} -o State").split()
    assert history == ["REQUEUED", "COMPLETED"], f"{history}\n{log}"
    copying = f"copying {IMAGE_DIR}/tf-slurm-{v1}.sif ({IMAGE_DIR}/current.sif) (437 MB) onto "
    assert f"tfslurm-run: {copying}" in log, log
    copied = f"into /tmp/tfslurm-copy-{job} (tmpfs: node memory): Apptainer mounts the image with"
    assert copied in log, log
    assert "SIGUSR1 to the batch shell: passing it on to the job's steps as SIGTERM" in log, log
    assert f"requeuing job {job} (requeue 1 of 3; preemptions never count)" in log, log
    first, second = log.split("starting at step ")[1:3]
    last = max(int(n) for n in re.findall(r"^step (\d+) ", first, re.M))
    assert int(second.split()[0]) >= last > 0, log
    assert "done at step 1200" in second and "Bus error" not in log, log
    assert copies_left(cluster) == [], log
    outside = cluster.run(f"{LAUNCHER} --copy yes train.py")
    assert outside.code == 2 and "--copy yes needs a batch job" in outside.err, outside


def test_wrapper_adds_nv_on_gpu_partitions_only(deployed, cluster):
    gpu = cluster.ok(f"SLURM_JOB_PARTITION=gpu {LAUNCHER} --dry-run train.py")
    cpu = cluster.ok(f"SLURM_JOB_PARTITION=debug {LAUNCHER} --dry-run train.py")
    assert " --nv " in gpu and " --nv " not in cpu, (gpu, cpu)
    # Outside a job (the rollout's site check per partition): srun's own SLURM_PARTITION.
    check = cluster.ok(f"SLURM_PARTITION=gpu {LAUNCHER} --dry-run --site-check /data")
    assert " --nv " in check and "current-gpu.sif" not in check and "tf-slurm-gpu-" in check
    assert cpu.startswith("srun --kill-on-bad-exit=1 apptainer run "), cpu
    assert cluster.run(LAUNCHER).code == 2


def test_parameter_server_steps_survive_a_lost_worker(deployed, cluster):
    """No --kill-on-bad-exit but --no-kill for parameter-server steps, however the strategy is
    given; a program's own --strategy option does not count."""
    for options in ("--strategy parameter-server", "--ps 1 --strategy=parameter-server"):
        ps = cluster.ok(f"{LAUNCHER} --dry-run {options} train.py --strategy multi-worker")
        assert ps.startswith("srun --no-kill --kill-on-bad-exit=0 apptainer run "), ps
    ps = cluster.ok(f"TFSLURM_STRATEGY=parameter-server {LAUNCHER} --dry-run train.py")
    assert ps.startswith("srun --no-kill --kill-on-bad-exit=0 apptainer run "), ps
    mw = cluster.ok(f"{LAUNCHER} --dry-run train.py --strategy parameter-server")
    assert mw.startswith("srun --kill-on-bad-exit=1 apptainer run "), mw
    templates = "/usr/local/share/tfslurm"
    assert "#SBATCH --no-kill" in cluster.ok(f"cat {templates}/parameter-server.sbatch")
    assert "--no-kill" not in cluster.ok(f"cat {templates}/multi-worker.sbatch")


def test_gpu_image_goes_out_beside_the_cpu_image_for_the_gpu_partition(
    deployed, cluster, v1, gpu_sha256
):
    gpu_v1 = gpu_sha256[:12]
    gpu_image = f"{IMAGE_DIR}/tf-slurm-gpu-{gpu_v1}.sif"
    assert current(cluster, "current-gpu.sif") == f"tf-slurm-gpu-{gpu_v1}.sif"
    assert current(cluster) == f"tf-slurm-{v1}.sif"  # the CPU line is untouched
    # The role verified the copy's sha256 already; the record and the size say it is this SIF.
    record = cluster.ok(f"cat {gpu_image}.sha256")
    assert record == f"{gpu_sha256}  tf-slurm-gpu-{gpu_v1}.sif\n", record
    assert int(cluster.ok(f"stat -c %s {gpu_image}")) == GPU_SIF.stat().st_size

    # tfslurm-run picks the image by the job's partition; TFSLURM_SIF still wins.
    gpu = cluster.ok("SLURM_JOB_PARTITION=gpu tfslurm-run --dry-run train.py").strip()
    cpu = cluster.ok("SLURM_JOB_PARTITION=debug tfslurm-run --dry-run train.py").strip()
    own = cluster.ok(
        f"SLURM_JOB_PARTITION=gpu TFSLURM_SIF={IMAGE_DIR}/current.sif "
        "tfslurm-run --dry-run train.py"
    ).strip()
    assert gpu == f"srun --kill-on-bad-exit=1 apptainer run --nv {gpu_image} train.py", gpu
    assert cpu == f"srun --kill-on-bad-exit=1 apptainer run {IMAGE_DIR}/tf-slurm-{v1}.sif train.py"
    assert own.endswith(f"apptainer run --nv {IMAGE_DIR}/tf-slurm-{v1}.sif train.py"), own


def test_each_image_line_prunes_only_its_own_versions(deployed, cluster, v1, gpu_sha256):
    """tf-slurm-gpu-X.sif matches the CPU line's tf-slurm-*.sif too: keeping no previous CPU
    version must not remove a GPU one, nor the reverse."""
    gpu_v1 = gpu_sha256[:12]
    old = ["tf-slurm-e2eold.sif", "tf-slurm-gpu-e2eold.sif"]
    made = " ".join(f"{IMAGE_DIR}/{name}{ext}" for name in old for ext in ("", ".sha256"))
    cluster.ok(
        f"for f in {made}; do echo old > $f; done && touch -d '1 hour ago' {made}", user="root"
    )
    try:
        proc = playbook("--tags", "image", "-e", "tfslurm_image_gpu_keep=0")
        assert proc.returncode == 0, shown(proc)
        left = set(cluster.ok(f"ls {IMAGE_DIR}").split())
        assert not {"tf-slurm-gpu-e2eold.sif", "tf-slurm-gpu-e2eold.sif.sha256"} & left, left
        assert {"tf-slurm-e2eold.sif", f"tf-slurm-{v1}.sif", f"tf-slurm-gpu-{gpu_v1}.sif"} <= left

        proc = playbook("--tags", "image", "-e", "tfslurm_image_keep=0")
        assert proc.returncode == 0, shown(proc)
        left = set(cluster.ok(f"ls {IMAGE_DIR}").split())
        assert not {"tf-slurm-e2eold.sif", "tf-slurm-e2eold.sif.sha256"} & left, left
        assert {f"tf-slurm-gpu-{gpu_v1}.sif", f"tf-slurm-gpu-{gpu_v1}.sif.sha256"} <= left
        assert current(cluster) == f"tf-slurm-{v1}.sif"
        assert current(cluster, "current-gpu.sif") == f"tf-slurm-gpu-{gpu_v1}.sif"
    finally:
        cluster.ok(f"rm -f {made}", user="root")


def stand_in_sif(cluster, target: Path, note: str) -> Path:
    """A SIF holding one small data object (`apptainer sif new` + `sif add`), copied to
    `target` here: a file Apptainer reads as a SIF, with a sha256 of its own, a few KB instead of
    the real SIF's 437 MB for the versions whose content no test runs."""
    tmp = f"/tmp/tfslurm-sif-{uuid.uuid4().hex[:6]}"
    cluster.ok(
        f"mkdir {tmp} && apptainer sif new {tmp}/out.sif && echo {note} > {tmp}/note "
        f"&& apptainer sif add --datatype 7 --filename e2e-note {tmp}/out.sif {tmp}/note"
    )
    archive = target.with_suffix(".tar")
    try:
        stream, _ = cluster.container("login").get_archive(f"{tmp}/out.sif")
        with archive.open("wb") as f:
            for chunk in stream:
                f.write(chunk)
    finally:
        cluster.ok(f"rm -rf {tmp}")
    with tarfile.open(archive) as tar:
        tar.extractall(target.parent, filter="data")
    archive.unlink()
    (target.parent / "out.sif").replace(target)
    return target


def test_second_version_rolls_out_and_back(deployed, cluster, v1, tmp_path):
    v2_sif = stand_in_sif(cluster, tmp_path / "v2.sif", "e2e")
    v2 = sha256(v2_sif)[:12]
    assert v2 != v1
    try:
        proc = playbook("--tags", "image", "-e", f"tfslurm_image_src={v2_sif}")
        assert proc.returncode == 0, shown(proc)
        assert current(cluster) == f"tf-slurm-{v2}.sif"
        assert cluster.ok(f"sha256sum {IMAGE_DIR}/current.sif").split()[0] == sha256(v2_sif)
        cluster.ok(f"test -f {IMAGE_DIR}/tf-slurm-{v1}.sif")  # the previous version is kept

        # Back, keeping no previous version: the role also prunes v2 (and any older one).
        proc = playbook(
            "--tags", "image", "-e", f"tfslurm_image_rollback_to={v1}", "-e", "tfslurm_image_keep=0"
        )
        assert proc.returncode == 0, shown(proc)
        assert current(cluster) == f"tf-slurm-{v1}.sif"
        cluster.ok(f"cd {IMAGE_DIR} && sha256sum -c tf-slurm-{v1}.sif.sha256")
        # The CPU line's files only: the GPU line (current-gpu.sif, tf-slurm-gpu-*) is its own.
        left = [
            name
            for name in cluster.ok(f"ls {IMAGE_DIR}").split()
            if not (name.startswith("tf-slurm-gpu-") or name == "current-gpu.sif")
        ]
        assert left == ["current.sif", f"tf-slurm-{v1}.sif", f"tf-slurm-{v1}.sif.sha256"], left

        proc = playbook("--tags", "image", "-e", "tfslurm_image_rollback_to=no-such-version")
        assert proc.returncode != 0
        assert "tf-slurm-no-such-version.sif is not installed" in proc.stdout, shown(proc)
        assert current(cluster) == f"tf-slurm-{v1}.sif"
    finally:
        cluster.ok(
            f"ln -sfn tf-slurm-{v1}.sif {IMAGE_DIR}/current.sif && "
            f"rm -f {IMAGE_DIR}/tf-slurm-{v2}.sif {IMAGE_DIR}/tf-slurm-{v2}.sif.sha256",
            user="root",
        )


def test_preflight_stops_on_a_node_whose_munge_is_stopped(deployed, cluster):
    cluster.ok("kill $(cat /run/munge/munged.pid)", service="c3", user="root")
    try:
        proc = playbook("--tags", "preflight")
    finally:
        cluster.ok(
            "runuser -u munge -- munged && munge -n | unmunge >/dev/null", service="c3", user="root"
        )
    assert proc.returncode != 0, shown(proc)
    assert "c3: munge does not work" in proc.stdout, shown(proc)
    assert "start munged on c3" in proc.stdout, shown(proc)
    counts = recap(proc)
    assert counts["c3"]["failed"] == 1 and counts["login1"]["failed"] == 0, counts
    wait_idle(cluster, "c3")


def test_the_rollouts_site_check_stops_on_a_node_that_would_break_a_job(deployed, cluster):
    """One check per partition (debug: c1, c2; preemptible: c2, c3), each as that partition's
    jobs run, in the job user's login shell: c3 without the bind the apptainer role wrote: the
    play fails after showing both tables, the one that names c3 and the fix, and says which
    partition's check failed."""
    partitions = [
        {"name": "debug", "nodes": ["c1", "c2"]},
        {"name": "preemptible", "nodes": ["c2", "c3"]},
    ]
    # The job user's login shell sets a proxy (a dead one: nothing listens there), as a site's
    # profile.d may: the check runs in that shell, as the user's jobs do, and sees it.
    profile = "/home/runner/.bash_profile"
    cluster.ok(f"printf '. ~/.profile\\nexport https_proxy=http://127.0.0.1:9\\n' > {profile}")
    try:
        with data_bind(cluster, ("c3",), present=False):
            extra = json.dumps({"site_check_partitions": partitions})
            proc = playbook("--tags", "site_check", "-e", extra)
    finally:
        cluster.ok(f"rm -f {profile}")
    assert proc.returncode != 0, shown(proc)
    assert "warn proxy on c1, c2: https_proxy" in proc.stdout, shown(proc)
    assert "FAIL binds on c3: /data missing inside the container" in proc.stdout, shown(proc)
    assert "the site check found what would break a job (preemptible: exit 1)" in proc.stdout
    for name in ("debug", "preemptible"):
        assert f"partition {name}: ExclusiveUser=NO" in proc.stdout, shown(proc)
    assert proc.stdout.count("verdict: ") == 2, shown(proc)
    counts = recap(proc)
    assert counts["login1"]["failed"] == 1 and counts["login1"]["changed"] == 0, counts


def wait_idle(cluster, node: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cluster.run(f"sinfo --noheader --nodes={node} --format=%T").out.strip() == "idle":
            return
        time.sleep(2)
    pytest.fail(
        f"{node} not idle {timeout:.0f} s after munge came back\n{cluster.node_report(node)}"
    )


# A node as Debian 12 has it: no Apptainer installed, none in its repositories. The node
# image with Apptainer's package removed and apt pointed at an empty local repository (nothing
# leaves the machine).
WITHOUT_APPTAINER = (
    "dpkg -r --force-depends apptainer >/dev/null"
    " && rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*"
    " && mkdir -p /srv/empty-repo && : > /srv/empty-repo/Packages"
    " && echo 'deb [trusted=yes] file:/srv/empty-repo ./' > /etc/apt/sources.list"
)


def test_a_node_whose_os_has_no_apptainer_stops_the_rollout_before_it_changes_anything(
    cluster, tmp_path
):
    image = cluster.container("c1").image
    name = f"{cluster.project}-no-apptainer-{uuid.uuid4().hex[:6]}"
    node = cluster.client.containers.run(
        image, ["sleep", "600"], entrypoint=[], name=name, detach=True, network=cluster.network
    )
    try:
        code, out = node.exec_run(["bash", "-c", WITHOUT_APPTAINER], user="root")
        assert code == 0, out.decode()
        inventory = tmp_path / "hosts.yml"
        inventory.write_text(
            "all:\n  vars:\n    ansible_connection: community.docker.docker\n"
            "    ansible_user: root\n    ansible_python_interpreter: /usr/bin/python3\n"
            f"  children:\n    login:\n      hosts:\n        bare:\n"
            f"          ansible_host: {name}\n    compute:\n      hosts: {{}}\n"
        )
        proc = playbook("--tags", "apptainer", inventory=str(inventory))
        assert proc.returncode != 0, shown(proc)
        said = re.sub(r"\s+", " ", proc.stdout)
        assert "bare: Apptainer is not installed and the repositories of Debian " in said, said
        fix = (
            "have no package apptainer (Debian 12 has none; EL needs EPEL). Set "
            "apptainer_package_file to Apptainer's release package"
        )
        assert fix in said, shown(proc)
        assert recap(proc)["bare"]["changed"] == 0, shown(proc)
        code, conf = node.exec_run(["cat", "/etc/apptainer/apptainer.conf"], user="root")
        assert code == 0 and "bind path = /data" not in conf.decode()
    finally:
        node.remove(force=True)
