"""Which Keras `tf.keras` is for a distributed program run outside our images.

Since TensorFlow 2.16 `tf.keras` is Keras 3, unless TF_USE_LEGACY_KERAS=1 makes it tf-keras
(Keras 2). Keras 3's Model.fit does not run under MultiWorkerMirroredStrategy (a PerReplica
conversion error; keras-team/keras#20585) and Keras 3 does not support ParameterServerStrategy,
so TensorFlow's own distributed Keras tutorials fail on a plain pip install. Our images set
TF_USE_LEGACY_KERAS=1; a task of a distributed step run from a pip install gets the same here
when tf-keras is installed, and one warning when it is not. A TF_USE_LEGACY_KERAS the user set,
to any value, is theirs and is kept.

Read from the installed distributions' metadata: the entrypoint never imports TensorFlow. Every
task of a distributed step reads it, so it is read the way importlib.metadata reads it, without
importing it (its imports, the email package's parser among them, cost each task some 15 ms of
CPU: near 4 s of CPU for a 256-task step); where the installation is not the plain case read
here (a zip or an egg on sys.path, another finder of distributions, no METADATA, a header not
plainly written), importlib.metadata answers.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Mapping
from typing import NamedTuple

LEGACY_VAR = "TF_USE_LEGACY_KERAS"
FIRST_KERAS_3_TF = (2, 16)  # the first TensorFlow whose tf.keras is Keras 3
TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly")
# How the names installed() asks for begin ("tf" for tf-keras and tf-nightly): every task lists
# its Python's distributions, and a large step's tasks start together, so only these are read.
ASKED = ("tensorflow", "tf", "keras")


class KerasChoice(NamedTuple):
    env: dict[str, str]
    """variables to set in the program's environment"""
    line: str | None
    """what rank 0 logs about it, if anything"""


# What email's parser (importlib.metadata's) takes for a header line: a name of printable
# characters but the colon, then the colon; "From " and whitespace first it reads its own way.
_HEADER = re.compile(r"^(From |[\041-\071\073-\176]*:|[\t ])")
_UNSURE = object()  # not the plain case: importlib.metadata answers


def _normalize(name: str) -> str:
    """A distribution's name as importlib.metadata compares it (PEP 503, dashes as underscores)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _listed(starts: tuple[str, ...] = ("",)) -> dict[str, str] | None:
    """Each distribution's .dist-info directory (by normalized name) where importlib.metadata
    would find it first: sys.path in order, each entry's listing in order; None where an entry
    or a finder is one importlib.metadata reads otherwise (a zip, an egg, not a path). Only the
    names that begin with one of starts (lowercase): normalizing keeps a name's first word."""
    for finder in sys.meta_path:
        own = finder is importlib.machinery.PathFinder
        if not own and hasattr(finder, "find_distributions"):
            return None
    found: dict[str, str] = {}
    for root in sys.path:
        if not isinstance(root, str):
            return None
        try:
            children = os.listdir(root or ".")
        except OSError:
            if os.path.exists(root or "."):
                return None  # a zip file, perhaps: importlib.metadata looks inside
            continue
        if os.path.basename(root).lower().endswith(".egg"):
            return None
        for child in children:
            low = child.lower()
            if low.startswith(starts) and low.endswith((".dist-info", ".egg-info")):
                name = _normalize(low.rpartition(".")[0].partition("-")[0])
                found.setdefault(name, os.path.join(root, child))
    return found


def _listed_version(listed: dict[str, str], distribution: str) -> str | object | None:
    """importlib.metadata.version(distribution) read from the listing: None when it is not
    installed, _UNSURE when the metadata is not a .dist-info's plain METADATA."""
    where = listed.get(_normalize(distribution))
    if where is None:
        return None
    if not where.lower().endswith(".dist-info"):
        return _UNSURE
    try:
        with open(os.path.join(where, "METADATA"), encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, ValueError):
        return _UNSURE
    for number, line in enumerate(lines):
        if not _HEADER.match(line):
            break  # the headers end: no Version among them
        if line.startswith(("From ", " ", "\t")):
            return _UNSURE
        name, _, value = line.partition(":")
        if name.lower() == "version":
            after = lines[number + 1] if number + 1 < len(lines) else ""
            return _UNSURE if after.startswith((" ", "\t")) else value.lstrip(" \t")
    return _UNSURE


def _metadata_version(distribution: str) -> str | None:
    import importlib.metadata  # here: only where _listed_version is unsure

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _version(distribution: str, listed: dict[str, str] | None = None) -> tuple[int, ...] | None:
    text = _UNSURE if listed is None else _listed_version(listed, distribution)
    if text is _UNSURE:
        text = _metadata_version(distribution)
    if text is None:
        return None
    parts = []
    for part in text.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def installed() -> dict[str, tuple[int, ...] | None]:
    """The versions that decide what tf.keras is: TensorFlow's, Keras's, tf-keras's."""
    listed = _listed(ASKED)
    tf = next((v for d in TF_DISTRIBUTIONS if (v := _version(d, listed))), None)
    tf_keras = _version("tf-keras", listed)
    if tf_keras is not None and not importlib.util.find_spec("tf_keras"):
        tf_keras = None  # its metadata without its package
    return {"tensorflow": tf, "keras": _version("keras", listed), "tf_keras": tf_keras}


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
