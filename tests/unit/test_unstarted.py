"""A program started without the entrypoint in a step of several tasks (tfslurm_entry/
unstarted.py): which runtime it is in and its fix, when the image's .pth arms the guard, and the
guard on a stand-in for TensorFlow's strategy (real TensorFlow: tests/integration)."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

from bench.repo import ROOT
from tfslurm_entry.inprogram import unstarted
from tfslurm_entry.inprogram.unstarted import EXIT, PTH_LINE, message, runtime


@pytest.mark.parametrize(
    ("environ", "name", "fix"),
    [
        (
            {"CH_RUNNING": "Weird Al Yankovic"},
            "Charliecloud",
            "srun ch-run --set-env --cd $PWD IMAGE -- tfslurm-entry",
        ),
        ({"container": "podman"}, "Podman", "srun podman run -e 'SLURM_*' --network host IMAGE"),
        ({"container": "docker"}, "", "tfslurm-entry PROGRAM ARGS"),
        ({"SLURM_CONTAINER": "/b", "CH_RUNNING": "x"}, "Slurm's --container", "--container=BUNDLE"),
        ({"PYXIS_VERSION": "0.21"}, "enroot + pyxis", "(or --container-entrypoint)"),
        ({"APPTAINER_CONTAINER": "/x.sif"}, "Apptainer", "apptainer exec IMAGE tfslurm-entry"),
        ({}, "", "start it through the image's entrypoint: tfslurm-entry PROGRAM ARGS"),
    ],
)
def test_the_runtime_is_named_with_its_own_fix(environ, name, fix):
    found, said = runtime(environ)
    assert found == name and fix in said, (found, said)


def test_the_message_is_one_line_with_the_step_and_the_fix():
    said = message({"SLURM_STEP_NUM_TASKS": "4", "CH_RUNNING": "Weird Al Yankovic"})
    assert "\n" not in said and said.startswith("tfslurm: error: this program makes a ")
    assert "in a Slurm step of 4 tasks without TF_CONFIG" in said
    assert "stopped before training (exit 2). Under Charliecloud: ch-run never runs" in said


@pytest.mark.parametrize(
    ("env", "armed"),
    [
        ({"SLURM_STEP_NUM_TASKS": "4"}, True),
        ({"SLURM_NTASKS": "2"}, True),  # a runtime that passes the job's, not the step's
        ({"SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "4"}, False),  # a step of one task
        ({"SLURM_STEP_NUM_TASKS": "4", "TF_CONFIG": "{}"}, False),  # the entrypoint ran
        ({}, False),  # not in Slurm
    ],
)
def test_the_images_pth_line_arms_the_guard_only_in_a_step_of_several_tasks(env, armed):
    code = (
        f"exec({PTH_LINE!r})\nimport sys\nprint('tfslurm_entry.inprogram.unstarted' in sys.modules)"
    )
    env = {"PYTHONPATH": str(ROOT), **env}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(armed), done.stderr


class _Extended:
    """Stands for TensorFlow's CollectiveAllReduceExtended: records what it was made with."""

    def __init__(self, container_strategy, cluster_resolver, communication_options, devices=None):
        self.made = (cluster_resolver, devices)


def guarded(environ: dict[str, str]) -> type:
    module = ModuleType(unstarted.STRATEGY_MODULE)
    module.CollectiveAllReduceExtended = type("Extended", (_Extended,), {})
    unstarted._guard(module, environ)
    return module.CollectiveAllReduceExtended


def test_a_strategy_from_tf_config_without_one_stops_every_task_each_saying_why(capsys):
    step = {"SLURM_STEP_NUM_TASKS": "2", "APPTAINER_CONTAINER": "/x.sif"}
    for rank in ("0", "1"):  # each: the first to stop may end the others (--kill-on-bad-exit)
        with pytest.raises(SystemExit) as stopped:
            strategy = guarded({**step, "SLURM_PROCID": rank})
            strategy(None, cluster_resolver=None, communication_options=None)
        assert stopped.value.code == EXIT
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and "Under Apptainer: apptainer exec does not run" in err[0], err


def test_a_strategy_given_its_own_resolver_or_devices_or_tf_config_is_left_alone():
    step = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0"}
    resolver = object()  # e.g. SlurmClusterResolver: the program resolves the cluster itself
    assert guarded(step)(None, resolver, None).made == (resolver, None)
    assert guarded(step)(None, None, None, devices=["/cpu:0"]).made == (None, ["/cpu:0"])
    assert guarded({**step, "TF_CONFIG": "{}"})(None, None, None).made == (None, None)


def test_a_venv_reads_its_site_packages_twice_the_guard_is_armed_once():
    """lib and its lib64 link: Python runs the image's .pth for each (seen in the image)."""
    code = (
        f"exec({PTH_LINE!r}); exec({PTH_LINE!r})\nimport sys\n"
        "print(sum(type(f).__module__ == 'tfslurm_entry.inprogram.after_import'"
        " for f in sys.meta_path))"
    )
    env = {"PYTHONPATH": str(ROOT), "SLURM_STEP_NUM_TASKS": "2"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "1", done.stderr


def test_two_changes_to_one_module_both_run_without_asking_each_other_forever():
    code = (
        "from tfslurm_entry.inprogram.after_import import change_on_import\n"
        "seen = []\n"
        "change_on_import({'colorsys': lambda m: seen.append('first')})\n"
        "change_on_import({'colorsys': lambda m: seen.append('second')})\n"
        "import colorsys\nprint(sorted(seen))"
    )
    env = {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "['first', 'second']", done.stderr[-2000:]
