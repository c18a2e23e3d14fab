"""Which Keras tf.keras is for a distributed program outside the images (task/keras.py)."""

from __future__ import annotations

import sys

import pytest

from tests.fake_slurm import step_env
from tfslurm_entry.resolve import Options, resolve
from tfslurm_entry.resolve.slurm_env import read_step_env
from tfslurm_entry.task import keras
from tfslurm_entry.task.environment import distributed_env

PIP_INSTALL = {"tensorflow": (2, 21), "keras": (3, 15), "tf_keras": (2, 21)}


def test_tf_keras_installed_makes_tf_keras_legacy_keras_and_says_so():
    choice = keras.choose({}, PIP_INSTALL)
    assert choice.env == {"TF_USE_LEGACY_KERAS": "1"}
    assert "tf.keras is tf-keras" in choice.line


@pytest.mark.parametrize("value", ["0", "1", "", "false"])
def test_the_users_own_setting_wins(value):
    assert keras.choose({"TF_USE_LEGACY_KERAS": value}, PIP_INSTALL) == ({}, None)


def test_keras_3_without_tf_keras_is_one_warning_naming_the_fix():
    choice = keras.choose({}, {**PIP_INSTALL, "tf_keras": None})
    assert choice.env == {}
    assert choice.line.startswith("warning: tf.keras is Keras 3 here (TensorFlow 2.21")
    assert "pip install tf-keras==2.21.*" in choice.line


@pytest.mark.parametrize(
    "versions",
    [
        {"tensorflow": (2, 15), "keras": (2, 15), "tf_keras": None},  # tf.keras is Keras 2
        {"tensorflow": (2, 15), "keras": (3, 0), "tf_keras": None},  # before TF 2.16
        {"tensorflow": None, "keras": (3, 15), "tf_keras": (2, 21)},  # no TensorFlow at all
    ],
)
def test_nothing_to_do_where_tf_keras_is_not_keras_3(versions):
    assert keras.choose({}, versions) == ({}, None)


def test_installed_reads_this_pythons_distributions():
    found = keras.installed()
    assert set(found) == {"tensorflow", "keras", "tf_keras"}
    assert all(v is None or isinstance(v, tuple) for v in found.values())


@pytest.mark.parametrize(("argv0", "said"), [(sys.executable, True), ("/bin/sh", False)])
def test_rank_0_says_which_keras_only_for_a_python_program(monkeypatch, argv0, said):
    """`sh -c 'exit 0'` is no Python: its Pythons, if any, get the variable, not the line."""
    monkeypatch.setattr(keras, "installed", lambda: PIP_INSTALL)
    plan = resolve(read_step_env(step_env(0)), Options(port_base=5000))
    env, notes = distributed_env(plan, {}, [argv0, "x"])
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert any("tf.keras is tf-keras" in note for note in notes) is said
