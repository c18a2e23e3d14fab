"""Which Keras `tf.keras` is for a distributed program run outside our images.

Since TensorFlow 2.16 `tf.keras` is Keras 3, unless TF_USE_LEGACY_KERAS=1 makes it tf-keras
(Keras 2). Keras 3's Model.fit does not run under MultiWorkerMirroredStrategy (a PerReplica
conversion error; keras-team/keras#20585) and Keras 3 does not support ParameterServerStrategy,
so TensorFlow's own distributed Keras tutorials fail on a plain pip install. Our images set
TF_USE_LEGACY_KERAS=1; a task of a distributed step run from a pip install gets the same here
when tf-keras is installed, and one warning when it is not. A TF_USE_LEGACY_KERAS the user set,
to any value, is theirs and is kept.

Read from the installed distributions' metadata: the entrypoint never imports TensorFlow.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import NamedTuple

LEGACY_VAR = "TF_USE_LEGACY_KERAS"
FIRST_KERAS_3_TF = (2, 16)  # the first TensorFlow whose tf.keras is Keras 3
TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly")


class KerasChoice(NamedTuple):
    env: dict[str, str]
    """variables to set in the program's environment"""
    line: str | None
    """what rank 0 logs about it, if anything"""


def _version(distribution: str) -> tuple[int, ...] | None:
    import importlib.metadata  # here: 16 ms that --print-config and --explain need not pay

    try:
        text = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    parts = []
    for part in text.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def installed() -> dict[str, tuple[int, ...] | None]:
    """The versions that decide what tf.keras is: TensorFlow's, Keras's, tf-keras's."""
    tf = next((v for d in TF_DISTRIBUTIONS if (v := _version(d))), None)
    tf_keras = _version("tf-keras") if importlib.util.find_spec("tf_keras") else None
    return {"tensorflow": tf, "keras": _version("keras"), "tf_keras": tf_keras}


Versions = Mapping[str, tuple[int, ...] | None]


def choose(environ: Mapping[str, str], versions: Versions) -> KerasChoice:
    """For a task of a distributed step: TF_USE_LEGACY_KERAS=1 when tf.keras would be Keras 3
    and tf-keras is installed; a warning when tf-keras is not."""
    if LEGACY_VAR in environ:
        return KerasChoice({}, None)
    tf, keras = versions.get("tensorflow"), versions.get("keras")
    if tf is None or tf < FIRST_KERAS_3_TF or keras is None or keras < (3,):
        return KerasChoice({}, None)  # tf.keras is Keras 2 already, or there is no TensorFlow
    if versions.get("tf_keras") is not None:
        return KerasChoice(
            {LEGACY_VAR: "1"},
            f"{LEGACY_VAR}=1: tf.keras is tf-keras (Keras 2) for this step, as in the kit's "
            "images; Keras 3's Model.fit does not run under TensorFlow's distributed strategies "
            f"(set {LEGACY_VAR}=0 to keep Keras 3)",
        )
    major = ".".join(map(str, tf))
    return KerasChoice(
        {},
        f"warning: tf.keras is Keras 3 here (TensorFlow {major}, no tf-keras installed): its "
        "Model.fit fails under MultiWorkerMirroredStrategy and ParameterServerStrategy; "
        f"`pip install tf-keras=={major}.*` (the kit then sets {LEGACY_VAR}=1), or use a custom "
        "training loop",
    )
