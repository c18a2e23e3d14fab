"""A Model.fit program that knows nothing of the kit (examples/preemption/keras_fit.py, as
TensorFlow's multi-worker Keras tutorial writes it, without reading TF_CONFIG itself) started
without the entrypoint, as ch-run, Slurm's --container, pyxis or `apptainer exec` start it, in
a 2-task step: real TensorFlow meets the image's guard (inprogram/unstarted.py, armed by its
.pth file at start-up) when the program makes its MultiWorkerMirroredStrategy. Without it, each
task would train alone. (TensorFlow's own tutorial reads TF_CONFIG first: a KeyError, not
silent.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# tests/integration is not a package: pytest puts its directory on sys.path
from test_tensorflow_localhost import slurm_env

from tfslurm_entry.inprogram import unstarted

pytestmark = pytest.mark.integration

PROGRAM = Path(__file__).resolve().parents[2] / "examples" / "preemption" / "keras_fit.py"


def test_a_program_started_without_the_entrypoint_stops_with_one_line(tmp_path):
    site = tmp_path / "site-packages"  # stands for the image's: the .pth runs at start-up
    site.mkdir()
    unstarted.write_pth(str(site))
    start = (
        f"import runpy, site, sys; site.addsitedir({str(site)!r}); "
        f"sys.argv = [{str(PROGRAM)!r}, {str(tmp_path / 'backup')!r}, '1', '5']; "
        f"runpy.run_path({str(PROGRAM)!r}, run_name='__main__')"
    )
    tasks = []
    for rank in (0, 1):
        env = {**slurm_env(rank, 2), "CH_RUNNING": "Weird Al Yankovic"}
        command = [sys.executable, "-c", start]
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        tasks.append(subprocess.Popen(command, env=env, cwd=tmp_path, **pipes))
    ended = [task.communicate(timeout=120) for task in tasks]
    assert [task.returncode for task in tasks] == [2, 2], ended
    for out, err in ended:  # each task stops before training, saying the same one line
        said = [line for line in err.splitlines() if line.startswith("tfslurm: ")]
        assert len(said) == 1 and "in a Slurm step of 2 tasks without TF_CONFIG" in said[0], err
        assert "Under Charliecloud: ch-run never runs the image's entrypoint: srun ch-run" in err
        assert "epoch" not in out, out
