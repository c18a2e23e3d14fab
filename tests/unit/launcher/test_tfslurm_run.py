"""tfslurm-run's pure parts, sourced into bash (TFSLURM_RUN_SOURCE=1): the decision after a
step (what the run found in, one decision and its line out), the settings' order (flag,
variable, the site's config, default), the config's bad lines, and --help naming every
setting. The parts that talk to Slurm are proven on the dev cluster (tests/e2e/test_preemption.py).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time

import pytest

from tfslurm_entry import __version__
from tfslurm_entry.launcher import LAUNCHER


def bash(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run script with tfslurm-run's functions defined, in a clean TFSLURM_-free environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TFSLURM_", "SLURM_"))}
    base.update({"TFSLURM_RUN_SOURCE": "1", "TFSLURM_RUN_CONFIG": "/nonexistent", **(env or {})})
    return subprocess.run(
        ["bash", "-c", f"source {shlex.quote(str(LAUNCHER))}; {script}"],
        env=base,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,  # a wait that never ends fails the test rather than hanging the suite
    )


def decide(verdict: str, status=0, notice="", preempting="", state="RUNNING", used=0, top=3):
    done = bash(
        f"JOB=42; decide {shlex.quote(verdict)} {status} '{notice}' '{preempting}' '{state}' "
        f"{used} {top}"
    )
    assert done.returncode == 0, done.stderr
    head, line = done.stdout.strip().split("|", 1)
    action, code = head.split()
    return action, int(code), line


def test_a_completed_step_is_done():
    assert decide("completed; lost worker 1 (rank 3 on c3)", status=1)[:2] == ("done", 0)


def test_a_preemption_is_slurms_to_requeue_and_never_counts():
    action, code, line = decide("preempted: Slurm's SIGTERM at ...", preempting="yes", used=3)
    assert (action, code) == ("slurm", 0)
    assert "preemptions never count" in line and "3 of 3 used" in line


def test_the_time_limits_warning_requeues_until_the_cap_then_says_why_not():
    action, code, line = decide("preempted: Slurm's SIGTERM at t; programs ended", used=1)
    assert (action, code) == ("requeue", 0)
    assert "requeuing job 42 (requeue 2 of 3; preemptions never count)" in line
    action, code, line = decide("preempted: Slurm's SIGTERM at t", used=3)
    assert (action, code) == ("stop", 1)
    assert "not requeued: 3 of 3 requeues used (--max-requeues)" in line
    assert "same --run-dir" in line


def test_an_interrupted_step_is_requeued_a_failed_one_is_not():
    verdict = "interrupted: rank 1 on c1 failed with exit 75 (EX_TEMPFAIL: transient)"
    action, _, line = decide(verdict, status=1)
    assert action == "requeue" and "a requeue may help" in line
    action, code, line = decide("failed: rank 0 on c1 failed with exit 1", status=1)
    assert (action, code) == ("stop", 1)
    assert line.startswith("not requeued: the program failed (rank 0 on c1 failed with exit 1)")


def test_a_notice_during_the_copy_still_brings_the_job_back():
    action, _, line = decide("", status=0, notice="yes")
    assert action == "requeue" and "before the program started" in line
    action, code, line = decide("", status=2)  # bad input: exit 2 before anything started
    assert (action, code) == ("stop", 2) and "no verdict from rank 0" in line
    # just after the copy, as the step started: its tasks found the copy gone (exit 75)
    action, _, line = decide("", status=75)
    assert action == "requeue" and "the copy of the image was gone" in line


def test_a_job_slurm_is_ending_is_left_to_slurm():
    action, code, line = decide("preempted: ...", status=0, state="COMPLETING")
    assert (action, code) == ("slurm", 0) and "JobState=COMPLETING" in line


def setting(name: str, env=None, argv: str = "", config: str | None = None, tmp_path=None):
    if config is not None:
        path = tmp_path / "tfslurm-run.conf"
        path.write_text(config)
        env = {**(env or {}), "TFSLURM_RUN_CONFIG": str(path)}
    return bash(f"read_config; parse_settings {argv}; setting {name}", env)


def test_the_flag_wins_then_the_variable_then_the_config_then_the_default(tmp_path):
    conf = "# the site's\nmax_requeues = 5\ncopy_dir = /local/scratch\n"
    assert setting("MAX_REQUEUES").stdout.strip() == "3"
    assert setting("MAX_REQUEUES", config=conf, tmp_path=tmp_path).stdout.strip() == "5"
    env = {"TFSLURM_MAX_REQUEUES": "7"}
    assert setting("MAX_REQUEUES", env, config=conf, tmp_path=tmp_path).stdout.strip() == "7"
    argv = "--max-requeues 9"
    assert setting("MAX_REQUEUES", env, argv, conf, tmp_path).stdout.strip() == "9"
    assert setting("MAX_REQUEUES", env, "--max-requeues=8").stdout.strip() == "8"
    assert setting("COPY_DIR", config=conf, tmp_path=tmp_path).stdout.strip() == "/local/scratch"


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ("max_requeues 5\n", r"line 1 is not 'key = value': max_requeues 5"),
        ("\ncopy_dri = /x\n", r"line 2: unknown setting 'copy_dri'; the settings: tfslurm-run"),
    ],
)
def test_a_bad_config_line_is_named(tmp_path, config, said):
    done = setting("COPY", config=config, tmp_path=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert re.fullmatch(rf"tfslurm-run: error: \S+tfslurm-run\.conf {said}.*", line), line


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ("--copy sometimes x.sif p.py", "(--copy) is 'sometimes': use auto, yes or no"),
        ("--max-requeues x p.py", "(--max-requeues) is 'x': give a whole number"),
        ("--run-dir", "--run-dir needs a value; see tfslurm-run --help"),
        ("x.sif", "no PROGRAM given; usage: tfslurm-run"),
        ("p.py", "no image given: tfslurm-run IMAGE.sif PROGRAM, or set TFSLURM_SIF"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, said):
    done = subprocess.run(
        ["bash", str(LAUNCHER), *argv.split()],
        env={"PATH": os.environ["PATH"], "TFSLURM_RUN_CONFIG": "/nonexistent"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done
    (line,) = done.stderr.splitlines()
    assert line.startswith("tfslurm-run: error: ") and said in line, line


def test_help_names_every_setting_and_the_version_is_the_packages():
    text = LAUNCHER.read_text()
    helped = subprocess.run(["bash", str(LAUNCHER), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0
    (settings,) = re.findall(r"^readonly SETTINGS=\(([^)]*)\)", text, re.M | re.S)
    read = set(re.findall(r"\bTFSLURM_[A-Z_]+", text)) - {"TFSLURM_RUN_SOURCE"}
    read -= {"TFSLURM_NODE_CACHE", "TFSLURM_NODE_CACHE_DIR"}  # the old names, said when used
    read -= {"TFSLURM_STRATEGY", "TFSLURM_RESULT_FILE"}  # tfslurm-entry's, read for the step
    # What it tells tfslurm-entry: Slurm's windows to save in, the site check's copy size, the
    # partitions' ExclusiveUser and its listener, the step's secret.
    read -= {"TFSLURM_GRACE_TIME", "TFSLURM_KILL_WAIT", "TFSLURM_COPY_BYTES", "TFSLURM_STEP_SECRET"}
    read -= {"TFSLURM_EXCLUSIVE_USER", "TFSLURM_SITE_CHECK_FROM"}
    expected = {f"TFSLURM_{name}" for name in settings.split()} | {"TFSLURM_RUN_CONFIG"}
    assert read == expected, (read, expected)
    for name in settings.split():
        var, key = f"TFSLURM_{name}", name.lower()
        assert re.search(rf"{var}, {key}:", helped.stdout), f"--help does not name {var}"
    version = subprocess.run(["bash", str(LAUNCHER), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == f"tfslurm-run {__version__}"


def test_the_launcher_written_out_of_the_image_is_this_file(tmp_path):
    from tfslurm_entry.cli import main

    assert main(["--install-launcher", str(tmp_path / "bin")], {}) == 0
    written = tmp_path / "bin" / "tfslurm-run"
    assert written.read_bytes() == LAUNCHER.read_bytes()
    assert os.access(written, os.X_OK)


@pytest.mark.parametrize(
    ("info", "seconds"),
    [
        # scancel or scontrol requeue: the job is no longer RUNNING; KillWait (10) less 2
        ("JobId=21 JobName=a JobState=COMPLETING Reason=None PreemptTime=None", 8),
        # a preemption: GraceTime (20), then KillWait (10)
        (
            "JobId=7 JobState=RUNNING PreemptEligibleTime=2026-11-27T12:37:10 "
            "PreemptTime=2026-11-27T12:37:25 EndTime=Unknown",
            28,
        ),
        # the time limit's warning, 120 s before EndTime: until then, and KillWait
        ("JobId=9 JobState=RUNNING PreemptTime=None EndTime=2026-11-27T12:02:00", 128),
        ("JobId=9 JobState=RUNNING PreemptTime=None EndTime=Unknown", 86398),  # no limit
    ],
)
def test_the_copy_waits_for_its_tasks_until_just_before_slurms_sigkill(info, seconds):
    """How long a node's keeper waits for the tasks still using the copy after a notice, from
    `scontrol show job --oneliner` (here at 12:00:00, two minutes before the job's EndTime)."""
    now = "$(date -u -d 2026-11-27T12:00:00 +%s)"
    windows = {"TFSLURM_KILL_WAIT": "10", "TFSLURM_GRACE_TIME": "20", "TZ": "UTC"}
    done = bash(f"kill_window {shlex.quote(info)} {now}", windows)
    assert done.stdout.strip() == str(seconds), done.stderr


@pytest.mark.parametrize(
    ("argv", "env", "image"),
    [
        ("/mine.sif train.py", {}, "/mine.sif"),  # the image on the command line
        ("train.py", {}, "/site/current-gpu.sif"),  # the site's image of the job's partition
        ("train.py", {"TFSLURM_SIF": "/user.sif"}, "/user.sif"),  # the user's wins over it
        ("--sif /flag.sif train.py", {"TFSLURM_SIF": "/user.sif"}, "/flag.sif"),
        ("train.py", {"SLURM_JOB_PARTITION": "debug"}, "/site/current.sif"),  # the site's rest
        # outside a job: srun's SLURM_PARTITION (the rollout's site check per partition)
        (
            "train.py",
            {"SLURM_JOB_PARTITION": "", "SLURM_PARTITION": "gpu"},
            "/site/current-gpu.sif",
        ),
    ],
)
def test_which_image_a_job_runs(tmp_path, argv, env, image):
    config = tmp_path / "tfslurm-run.conf"
    config.write_text("sif = /site/current.sif\npartition_sifs = gpu=/site/current-gpu.sif\n")
    env = {"SLURM_JOB_PARTITION": "gpu", "TFSLURM_RUN_CONFIG": str(config), **env}
    done = bash(f"read_config; parse_settings {argv}; pick_image; echo $IMAGE", env)
    assert done.stdout.strip() == image, done.stderr


def test_a_charliecloud_image_runs_with_ch_run(tmp_path):
    """A directory with ch/environment (make ch-image's tar, unpacked) is an image, which each
    task runs with ch-run: the image's ENV (--set-env), the binds without Apptainer's options,
    the batch script's working directory, and the entrypoint as the command."""
    image = tmp_path / "tf-slurm.ch"
    (image / "ch").mkdir(parents=True)
    (image / "ch" / "environment").write_text("PATH=/opt/venv/bin:/usr/bin\n")
    done = bash(
        f"cd {tmp_path}; read_config; parse_settings --bind /data:/data:ro {image} train.py; "
        'pick_image; apptainer_opts; launch; echo "${TASK[*]} ${ENTRY[*]}"',
        {"SLURM_JOB_PARTITION": "debug"},
    )
    assert done.stdout.strip() == (
        f"ch-run --set-env --bind /data:/data --cd {tmp_path} {image} -- tfslurm-entry train.py"
    ), done.stderr


def test_an_oci_bundle_runs_through_slurms_container_option(tmp_path):
    """A directory with config.json and rootfs/ (make oci-bundle's tar, unpacked) is an image,
    which each task runs through srun --container, the entrypoint as the command (Slurm
    replaces the bundle's); nothing to copy; the site check does not look from the login host."""
    image = tmp_path / "tf-slurm.oci"
    (image / "rootfs" / "ch").mkdir(parents=True)  # its rootfs is also a Charliecloud image
    (image / "rootfs" / "ch" / "environment").write_text("PATH=/opt/venv/bin:/usr/bin\n")
    (image / "config.json").write_text("{}")
    (tmp_path / "srun").write_text("#!/bin/sh\necho 'slurm 24.11.5'\n")  # srun --version
    (tmp_path / "srun").chmod(0o755)
    done = bash(
        f"cd {tmp_path}; read_config; parse_settings --bind /data {image} train.py; pick_image; "
        'apptainer_opts; launch; echo "${TASK[*]} ${ENTRY[*]}"; copy_wanted || echo "$COPY_WHY"; '
        "observe_from_here",
        {"SLURM_JOB_PARTITION": "debug", "PATH": f"{tmp_path}:{os.environ['PATH']}"},
    )
    assert done.stdout.splitlines()[:2] == [
        f"--container={image} tfslurm-entry train.py",
        "the image is a directory: nothing for Slurm's signals to unmount",
    ], done.stderr
    assert "an OCI bundle runs only in Slurm's steps (srun --container)" in done.stderr
    assert "the OCI bundle's own mounts apply (its config.json: make oci-bundle" in done.stderr


def test_a_podman_image_runs_with_podman_run_as_the_user(tmp_path):
    """podman://NAME is an image in each node's Podman: each task is `podman run` of it with
    what the documented line has (Slurm's variables and the kit's, the node's network, the
    user's own ids and home, the working directory), the binds and the run directory mounted
    where they are, the user's own podman options; nothing to copy, no file to resolve."""
    uid, gid, home = os.getuid(), os.getgid(), os.environ["HOME"]
    done = bash(
        f"cd {tmp_path}; read_config; parse_settings --bind /data --bind /s1:/shared "
        "--podman-opts '-e STEPS' podman://localhost/tf-slurm:latest train.py; pick_image; "
        'the_image; RUN_DIR=/data/run1 apptainer_opts; launch; echo "${TASK[*]} ${ENTRY[*]}"; '
        'copy_wanted || echo "$COPY_WHY"; echo "$SHOWN"; observe_from_here',
        {"SLURM_JOB_PARTITION": "debug"},
    )
    assert done.stdout.splitlines() == [
        f"podman run --rm -e SLURM_* -e TFSLURM_* --network host --userns=keep-id "
        f"--user {uid}:{gid} -v {home}:{home} -v /data:/data -v /s1:/shared "
        f"-v /data/run1:/data/run1 -e STEPS -w {tmp_path} localhost/tf-slurm:latest train.py",
        "a Podman image is in each node's own storage: nothing for Slurm's signals to unmount",
        "podman://localhost/tf-slurm:latest",
    ], done.stderr
    assert "it does not start a Podman container here" in done.stderr


def test_podman_containers_of_an_earlier_run_or_an_ended_job_are_swept(tmp_path):
    """Slurm's SIGKILL takes a container's conmon with the step, and Podman lists the container
    as running for ever: before its podman run, each task removes those of an earlier run of
    its job and of the user's ended jobs, each in one line; this run's and a running job's stay.
    Stand-ins for podman and squeue (job 8 is running)."""
    (tmp_path / "podman").write_text(
        "#!/bin/bash\n"
        'if [ "$1" = ps ]; then printf "%s\\n" "a1 7 0" "a2 7 1" "b1 8 0" "c1 5 2"; exit; fi\n'
        'echo "$*" >> "$0.log"; echo "${@: -1}"\n'
    )
    (tmp_path / "squeue").write_text('#!/bin/bash\n[[ " $* " == *" 8 "* ]] && echo 8\n')
    for tool in ("podman", "squeue"):
        (tmp_path / tool).chmod(0o755)
    done = bash(f"PATH={tmp_path}:$PATH; podman_sweep 7 1")
    assert (tmp_path / "podman.log").read_text().splitlines() == ["rm -f a1", "rm -f c1"]
    host = os.uname().nodename.split(".")[0]
    assert done.stderr.splitlines() == [
        f"tfslurm-run: removed Podman container a1 on {host}: left by run 1 of job 7, which "
        "Slurm ended",
        f"tfslurm-run: removed Podman container c1 on {host}: left by run 3 of job 5, which "
        "Slurm ended",
    ]


def test_a_podman_task_passes_slurms_signal_on_once_and_ends_with_its_containers_status(
    tmp_path,
):
    """The task is the shell, not `podman run` (which exits at the first SIGTERM): it starts
    the container detached, shows its output, passes a SIGTERM on once (podman kill), waits for
    the container's end, exits with its status and removes it. The SIGTERM goes to every
    process of the task, as Slurm sends it: the helpers (logs, wait) must outlive it. A
    stand-in podman whose container ends 0.5 s after it is killed (its save), with 42."""
    (tmp_path / "podman").write_text(
        "#!/bin/bash\n"
        'log="$0.log"; ended="$0.ended"\n'
        "case $1 in\n"
        "ps) ;;\n"
        "run) echo cid ;;\n"
        'logs) touch "$0.following"; echo "the program\'s line"\n'
        '      while [ ! -e "$ended" ]; do sleep 0.05; done ;;\n'
        'wait) while [ ! -e "$ended" ]; do sleep 0.05; done ;;\n'
        'kill) echo "$*" >> "$log"; (sleep 0.5; touch "$ended") & ;;\n'
        'inspect) if [[ $* == *Running* ]]; then [ -e "$ended" ] && echo false || echo true\n'
        '         else [ -e "$ended" ] && echo 42 || echo 0; fi ;;\n'
        'rm) [ -e "$ended" ] && echo "$* (ended)" >> "$log" || echo "$* (running)" >> "$log"\n'
        "    echo cid ;;\n"
        "esac\n"
    )
    (tmp_path / "podman").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFSLURM_", "SLURM_"))}
    env.update({"TFSLURM_RUN_SOURCE": "1", "PATH": f"{tmp_path}:{env['PATH']}"})
    line = "podman_task 7 0 podman run --rm localhost/tf-slurm:latest train.py"
    task = subprocess.Popen(
        ["bash", "-c", f"source {shlex.quote(str(LAUNCHER))}; {line}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # Once the output is followed, the traps are set (before it).
    deadline = time.monotonic() + 30
    while not (tmp_path / "podman.following").exists():
        assert time.monotonic() < deadline and task.poll() is None, task.stderr
        time.sleep(0.05)
    os.killpg(task.pid, signal.SIGTERM)  # as Slurm signals every process of the step
    out, err = task.communicate(timeout=30)
    assert task.returncode == 42, err
    assert out == "the program's line\n"
    assert (tmp_path / "podman.log").read_text().splitlines() == [
        "kill --signal TERM cid",
        "rm -f cid (ended)",
    ]


def test_a_task_whose_podman_cannot_start_the_image_says_where_and_what_to_check(tmp_path):
    """Podman's own error (125: an image not loaded on that node) ends the task with its status
    and one line naming the node and the fix, after Podman's."""
    (tmp_path / "podman").write_text(
        "#!/bin/bash\n"
        '[ "$1" = ps ] && exit 0\n'
        'echo "Error: localhost/tf-slurm:latest: image not known" >&2; exit 125\n'
    )
    (tmp_path / "podman").chmod(0o755)
    done = bash(
        f"PATH={tmp_path}:$PATH; podman_task 7 0 podman run --rm -e 'SLURM_*' "
        "localhost/tf-slurm:latest train.py"
    )
    host = os.uname().nodename.split(".")[0]
    assert done.returncode == 125
    assert done.stderr.splitlines() == [
        "Error: localhost/tf-slurm:latest: image not known",
        f"tfslurm-run: error: podman run exited 125 on {host} (its error above); is the image in "
        "your Podman there (podman images; podman load -i tf-slurm.docker.tar)?",
    ]


def test_the_requeue_that_slurm_will_hold_the_job_after_is_said():
    """Slurm holds a batch job requeued MaxBatchRequeue times (preemptions included), and only
    an admin may release it: the requeue that reaches it gets one line saying so."""
    said = bash("JOB=147; held_after 4 5; echo ---; held_after 3 5; held_after 9 ''")
    last, rest = said.stdout.split("---\n")
    assert last.startswith("this is the job's requeue 5, and Slurm holds a job requeued ")
    assert "MaxBatchRequeue (5) times" in last and "scontrol release 147" in last
    assert rest == ""


def test_the_requeue_limit_is_read_from_slurm_or_is_22_05s_compiled_in_five():
    """24.11 says MaxBatchRequeue in `scontrol show config`; 22.05 has no such line (its limit
    is compiled in); no config read, no limit claimed."""
    said = bash(
        "max_batch_requeue $'KillWait = 30 sec\\nMaxBatchRequeue = 20\\n'; "
        "max_batch_requeue $'KillWait = 30 sec\\nMinJobAge = 300 sec'; "
        "max_batch_requeue ''; echo end"
    )
    assert said.stdout.split("\n") == ["20", "5", "", "end", ""]


def test_an_oci_bundle_on_slurm_22_05_is_refused_before_anything_starts(tmp_path):
    """22.05's srun --container starts tasks without SLURM_PROCID and fails a node's second
    task (seen on its dev cluster): one line, exit 2, srun never asked to run a step."""
    said = bash(
        "for v in 'slurm-wlm 22.05.8' 'slurm 21.08.5' 'slurm 23.02.7' 'slurm-wlm 24.11.5' "
        "'slurm 26.05.5' ''; do container_runs_steps \"$v\" && echo yes || echo no; done"
    )
    assert said.stdout.split() == ["no", "no", "yes", "yes", "yes", "yes"]
    bundle = tmp_path / "tf-slurm.oci"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text("{}")
    (tmp_path / "srun").write_text(
        '#!/bin/sh\n[ "$1" = --version ] && echo "slurm-wlm 22.05.8" && exit 0\n'
        f"touch {tmp_path}/started\n"
    )
    (tmp_path / "srun").chmod(0o755)
    done = subprocess.run(
        [str(LAUNCHER), str(bundle), "train.py"],
        capture_output=True,
        text=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        "tfslurm-run: error: slurm-wlm 22.05.8's srun --container starts each task without its "
        "own variables (SLURM_PROCID...) and a node's second task not at all: a step cannot run "
        "from an OCI bundle on this Slurm; run the image with Apptainer (a SIF) or Charliecloud "
        "(make ch-image's directory) in the bundle's place, or use srun --container on Slurm "
        "24.11 or later"
    ], done.stderr
    assert not (tmp_path / "started").exists()


def test_the_old_names_still_work_and_say_their_new_ones():
    done = bash(
        "renamed; setting COPY; setting COPY_DIR",
        {"TFSLURM_NODE_CACHE": "1", "TFSLURM_NODE_CACHE_DIR": "/local"},
    )
    assert done.stdout.split() == ["yes", "/local"]
    assert done.stderr.splitlines() == [
        "tfslurm-run: TFSLURM_NODE_CACHE is now TFSLURM_COPY (yes/no/auto); it still works for "
        "now: rename it",
        "tfslurm-run: TFSLURM_NODE_CACHE_DIR is now TFSLURM_COPY_DIR; it still works for now: "
        "rename it",
    ]


def test_the_keepers_are_told_again_until_they_have_ended(tmp_path):
    """srun passes tfslurm-run's SIGUSR1 on once, and a node may miss it (the dev cluster, its
    host loaded: a finished job's keeper slept on, the job RUNNING). A stand-in for the keepers'
    srun that takes two signals to end: stop_copy returns, having said it more than once."""
    out = tmp_path / "keepers.out"
    out.write_text("ready c1 1 1.0 tmpfs\nready c2 1 1.0 tmpfs\nremoved c1\nremoved c2\n")
    on_usr1 = 'n=$((n + 1)); echo "USR1 $n" >> "$0.signals"; [ "$n" -ge 2 ] && exit 0'
    stand_in = f"n=0; trap {shlex.quote(on_usr1)} USR1; while :; do sleep 0.1; done"
    done = bash(
        f'say() {{ echo "said: $*"; }}; bash -c {shlex.quote(stand_in)} {out} & KEEPER=$!; '
        f"KEEPER_OUT={out}; COPY_DIR=/x; sleep 0.3; stop_copy; echo ended"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["said: removed the copy on 2 nodes", "ended"]
    assert (tmp_path / "keepers.out.signals").read_text().splitlines() == ["USR1 1", "USR1 2"]


def test_a_keeper_a_signal_ended_as_it_started_is_slurms_notice(tmp_path):
    """Slurm's notice as the copy step starts can end a keeper before its trap is set (seen on
    the dev cluster: srun said "c2: task 1: Terminated", and c1's keeper, started after the
    signal, copied and kept its copy). A stand-in for the keepers' srun printing those lines,
    which ends once told (SIGUSR1): start_copy sees a notice and stop_copy removes c1's copy."""
    image = tmp_path / "image.sif"
    image.write_bytes(b"x" * 1000)
    keepers = tmp_path / "keepers.sh"
    keepers.write_text(
        "trap 'echo removed c1; exit 1' USR1\n"
        "echo 'ready c1 1000 1.0 tmpfs'; echo 'srun: error: c2: task 1: Terminated'\n"
        "while :; do sleep 0.1; done\n"
    )
    done = bash(
        f'say() {{ echo "said: $*"; }}; on_each_node() {{ EACH_NODE=(bash {keepers}); }}; '
        f"SLURM_JOB_NUM_NODES=2 JOB=7 IMAGE={image} SHOWN={image} COPY_BASE={tmp_path} "
        f"COPY_RAM= COPY_WHY=; TFSLURM_RUN_DIR={tmp_path}/run open_run_dir; "
        'start_copy 1000; echo "returned $? notice=$COPY_NOTICE"; ls "$RUN_DIR"; stop_copy; '
        'ls "$RUN_DIR"'
    )
    said = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        r"said: Slurm's notice came as the copy started, [\d.]+ s in \(c2: task 1: "
        r"Terminated\): the program does not start",
        said[1],
    ), said
    # The keepers' report lives in the run directory (not the batch host's /tmp), until the end.
    assert said[2:] == [
        "returned 1 notice=yes",
        "tfslurm-run.copy",
        "tfslurm-run.state",
        "said: removed the copy on 1 nodes",
        "tfslurm-run.state",
    ]


def test_keepers_that_do_not_end_have_their_step_cancelled(tmp_path):
    """A keeper whose task never started (Slurm's notice during the copy step's launch) keeps
    the keepers' srun waiting: past stop_bound, stop_copy cancels the copy step (scancel, here
    a stand-in that ends the stand-in srun, which ignores SIGUSR1)."""
    out = tmp_path / "keepers.out"
    out.write_text("ready c2 1 1.0 tmpfs\nremoved c2\n")
    done = bash(
        'say() { echo "said: $*"; }; stop_bound() { echo 1; }; '
        'squeue() { printf "7.0 tfslurm-copy\\n7.1 tfslurm-task\\n"; }; '
        'scancel() { echo "scancel $*"; kill "$KEEPER"; }; '
        # Ignored before the fork, so inherited: a trap set in the child raced stop_copy's
        # first SIGUSR1 (seen under load: the stand-in died of it and nothing was cancelled).
        "trap '' USR1; bash -c 'while :; do sleep 0.1; done' & KEEPER=$!; trap - USR1; "
        f"JOB=7 KEEPER_OUT={out} COPY_DIR=/x; stop_copy; echo ended"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "said: the copy step 7.0 had not ended 1 s after its keepers were told to remove the "
        "copies (a keeper that never started or never heard): cancelling it (scancel 7.0)",
        "scancel 7.0",
        "said: removed the copy on 1 nodes",
        "ended",
    ]


def test_each_run_gets_a_fresh_secret_unless_the_user_gave_one():
    fresh = [bash("step_secret; echo $TFSLURM_STEP_SECRET").stdout.strip() for _ in range(2)]
    assert fresh[0] != fresh[1] and all(re.fullmatch(r"[0-9a-f]{64}", s) for s in fresh), fresh
    mine = "ab" * 32
    kept = bash("step_secret; echo $TFSLURM_STEP_SECRET", {"TFSLURM_STEP_SECRET": mine})
    assert kept.stdout.strip() == mine
    exported = bash("step_secret; bash -c 'echo ${TFSLURM_STEP_SECRET:-unset}'")
    assert exported.stdout.strip() not in ("", "unset")  # srun passes it on to the tasks


def test_the_site_check_is_told_each_partitions_exclusive_user_and_its_listener(tmp_path):
    """What --site-check adds for the step: ExclusiveUser from scontrol, and the HOST:PORT the
    listener it starts here (the image's --site-check-observer) prints; a listener that does
    not start is said in one line and the check runs without it."""
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        "#!/bin/sh\necho 'PartitionName=debug Default=YES ExclusiveUser=NO GraceTime=0'\n"
        "echo 'PartitionName=gpu Default=NO ExclusiveUser=YES GraceTime=0'\n"
    )
    listener = tmp_path / "listener"
    listener.write_text(
        '#!/bin/sh\n[ "$1" = --site-check-observer ] && echo login:4321\nexec sleep 30\n'
    )
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 3\n")
    for script in (scontrol, listener, silent):
        script.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    told = bash(
        f"exclusive_users; TASK=({listener}); observe_from_here; "
        "echo $TFSLURM_EXCLUSIVE_USER; echo $TFSLURM_SITE_CHECK_FROM; "
        'kill "$OBSERVER_ID" && echo ended',
        env,
    )
    assert told.stdout.split("\n")[:3] == ["debug=NO gpu=YES", "login:4321", "ended"], told
    none = bash(f'TASK=({silent}); observe_from_here; echo "[$OBSERVER_ID]"', env)
    assert none.stdout.strip() == "[]", none
    said = "tfslurm-run: the site check does not look from "
    assert (
        none.stderr.startswith(said) and f"({silent} --site-check-observer) did not" in none.stderr
    )
