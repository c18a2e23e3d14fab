"""Where a task of Slurm's --container runs: srun's directory, not the bundle's `/`."""

from __future__ import annotations

import os

import pytest

from tfslurm_entry.task import workdir

CONTAINER = {"SLURM_CONTAINER": "/shared/tf-slurm.oci", "PWD": "/shared/me/run"}


def test_a_container_task_in_slash_moves_to_srun_directory():
    assert workdir.step_directory("/", CONTAINER) == "/shared/me/run"


@pytest.mark.parametrize(
    ("cwd", "environ"),
    [
        ("/", {"PWD": "/shared/me/run"}),  # not Slurm's --container: its cwd is the step's
        ("/shared/me", CONTAINER),  # a bundle whose process.cwd is not /: the user chose it
        ("/", {**CONTAINER, "PWD": "/"}),
        ("/", {**CONTAINER, "PWD": "relative"}),
        ("/", {"SLURM_CONTAINER": "/shared/tf-slurm.oci"}),  # no $PWD at all
    ],
)
def test_anywhere_else_the_task_stays(cwd, environ):
    assert workdir.step_directory(cwd, environ) is None


def test_the_move_is_made_and_said(tmp_path, monkeypatch):
    monkeypatch.chdir("/")
    line = workdir.enter_step_directory({**CONTAINER, "PWD": str(tmp_path)})
    assert os.getcwd() == str(tmp_path)
    assert line is not None and f"running in {tmp_path}, srun's working directory" in line


def test_a_directory_the_container_lacks_is_not_entered(tmp_path, monkeypatch):
    monkeypatch.chdir("/")
    assert workdir.enter_step_directory({**CONTAINER, "PWD": str(tmp_path / "gone")}) is None
    assert os.getcwd() == "/"
