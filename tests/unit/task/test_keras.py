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


def test_installed_reads_this_pythons_distributions(monkeypatch):
    found = keras.installed()
    assert set(found) == {"tensorflow", "keras", "tf_keras"}
    assert all(v is None or isinstance(v, tuple) for v in found.values())
    monkeypatch.setattr(keras, "ASKED", ("",))  # every distribution listed: the same answer
    assert keras.installed() == found


@pytest.mark.parametrize(("argv0", "said"), [(sys.executable, True), ("/bin/sh", False)])
def test_rank_0_says_which_keras_only_for_a_python_program(monkeypatch, argv0, said):
    """`sh -c 'exit 0'` is no Python: its Pythons, if any, get the variable, not the line."""
    monkeypatch.setattr(keras, "installed", lambda: PIP_INSTALL)
    plan = resolve(read_step_env(step_env(0)), Options(port_base=5000))
    env, notes = distributed_env(plan, {}, [argv0, "x"])
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert any("tf.keras is tf-keras" in note for note in notes) is said


def test_listed_versions_are_importlib_metadatas_for_every_installed_distribution():
    import importlib.metadata

    listed = keras._listed()
    assert listed is not None
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        found = keras._listed_version(listed, name)
        if found is not keras._UNSURE:
            assert found == importlib.metadata.version(name), name


def _dist(root, child, text=None):
    info = root / child
    info.mkdir(parents=True)
    if text is not None:
        (info / "METADATA").write_text(text)
    return info


def test_the_first_on_the_path_wins_and_names_compare_normalized(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    _dist(
        first,
        "tf_keras-2.20.0.dist-info",
        "Metadata-Version: 2.1\nName: tf_keras\nVersion: 2.20.0\n",
    )
    _dist(
        second,
        "tf_keras-2.21.0.dist-info",
        "Metadata-Version: 2.1\nName: tf_keras\nVersion: 2.21.0\n",
    )
    monkeypatch.setattr(sys, "path", [str(first), str(second), str(tmp_path / "gone")])
    listed = keras._listed()
    assert keras._version("tf-keras", listed) == keras._version("tf-keras") == (2, 20)
    assert keras._version("TF.Keras", listed) == (2, 20)
    assert keras._version("tf-keras", keras._listed(keras.ASKED)) == (2, 20)
    assert keras._listed_version(listed, "keras") is None
    assert keras._version("keras", listed) is None


@pytest.mark.parametrize(
    ("child", "text"),
    [
        ("keras-3.1.dist-info", None),  # no METADATA
        ("keras-3.1.dist-info", ""),  # an empty one
        ("keras-3.1.dist-info", "Name: keras\nVersion:\n 3.1\n"),  # folded
        ("keras-3.1.dist-info", "Name: keras\nSummary: x\n\nVersion: 3.1\n"),  # in the body
        ("keras-3.1.egg-info", "Name: keras\nVersion: 3.1\n"),  # an egg's
    ],
)
def test_what_is_not_the_plain_case_is_importlib_metadatas(tmp_path, monkeypatch, child, text):
    info = _dist(tmp_path, child, text)
    if child.endswith(".egg-info"):
        (info / "PKG-INFO").write_text(text)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert keras._listed_version(keras._listed(), "keras") is keras._UNSURE


def test_a_zip_on_the_path_is_importlib_metadatas(tmp_path, monkeypatch):
    (tmp_path / "lib.zip").write_bytes(b"PK\x05\x06" + bytes(18))
    monkeypatch.setattr(sys, "path", [str(tmp_path / "lib.zip")])
    assert keras._listed() is None
