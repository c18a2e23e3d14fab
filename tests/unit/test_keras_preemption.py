"""tf-keras's save_before_preemption turned on under the kit (inprogram/keras_preemption.py),
on stand-ins for the two tf-keras modules it changes, imported by a fresh Python as a program
would import them: the gate answers yes for MultiWorkerMirroredStrategy without asking Google
Cloud's metadata server, BackupAndRestore asks for batch hooks when save_before_preemption is
on, and nothing else changes. (The real tf-keras, stopped by Slurm: tests/e2e/test_preemption.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from bench.repo import ROOT

FILES = {
    "tensorflow/__init__.py": """
        class _Distribute:
            class MultiWorkerMirroredStrategy: pass
            class MirroredStrategy: pass
        distribute = _Distribute()
    """,
    "tf_keras/__init__.py": "",
    "tf_keras/src/__init__.py": "",
    "tf_keras/src/distribute/__init__.py": "",
    "tf_keras/src/distribute/distributed_file_utils.py": """
        ASKED = []
        def _on_gcp():
            ASKED.append(1)
            return False
        def support_on_demand_checkpoint_callback(strategy):
            return bool(_on_gcp())
        def other():
            return "untouched"
    """,
    "tf_keras/src/callbacks.py": """
        class BackupAndRestore:
            def __init__(self, save_freq="epoch", save_before_preemption=False):
                self.save_freq = save_freq
                self.save_before_preemption = save_before_preemption
            def _implements_train_batch_hooks(self):
                return self.save_freq != "epoch"
    """,
}

PROGRAM = """
import json, sys
from tfslurm_entry.inprogram import keras_preemption
if sys.argv[1] == "on":
    keras_preemption.install()
import tensorflow as tf
from tf_keras.src.distribute import distributed_file_utils as dfu
from tf_keras.src.distribute.distributed_file_utils import support_on_demand_checkpoint_callback
from tf_keras.src.callbacks import BackupAndRestore
print(json.dumps({
    "mwms": support_on_demand_checkpoint_callback(tf.distribute.MultiWorkerMirroredStrategy()),
    "mirrored": support_on_demand_checkpoint_callback(tf.distribute.MirroredStrategy()),
    "asked_gcp": len(dfu.ASKED),
    "other": dfu.other(),
    "hooks_epoch_on": BackupAndRestore(save_before_preemption=True)._implements_train_batch_hooks(),
    "hooks_epoch_off": BackupAndRestore()._implements_train_batch_hooks(),
    "hooks_every_10": BackupAndRestore(save_freq=10)._implements_train_batch_hooks(),
    "source": dfu.__loader__.get_source(dfu.__name__) is not None,
}))
"""


def run(tmp_path: Path, mode: str) -> dict:
    for name, text in FILES.items():
        path = tmp_path / "site" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    path = f"{tmp_path / 'site'}:{ROOT}"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": path},
        check=True,
    )
    return json.loads(done.stdout)


def test_under_the_kit_the_gate_is_open_for_multi_worker_and_batch_hooks_are_asked_for(tmp_path):
    got = run(tmp_path, "on")
    assert got["mwms"] is True and got["mirrored"] is False
    assert got["asked_gcp"] == 0  # no request to metadata.google.internal
    assert got["other"] == "untouched" and got["source"] is True
    assert got["hooks_epoch_on"] is True
    assert (got["hooks_epoch_off"], got["hooks_every_10"]) == (False, True)


def test_without_it_tf_keras_asks_google_cloud_and_stays_off(tmp_path):
    got = run(tmp_path, "off")
    assert got["mwms"] is False and got["asked_gcp"] == 2  # once per question
    assert got["hooks_epoch_on"] is False
