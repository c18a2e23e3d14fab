"""Fewer garbage collections while a process imports TensorFlow, and none over what it imported.

`import tensorflow` creates about 270,000 objects that live as long as the process (the
modules, functions and classes of ~2,700 modules). With Python's default thresholds
(700, 10, 10) the collector runs ~630 times during that import, 4 times over every object:
about 0.4 s of a 2.2 s import, paid again by every task of every job, and later collections
keep walking those objects while the model is built and the first step traced.

install() (at interpreter start, from the image's .pth file; and by the entrypoint itself,
__main__.py, where there is no such file) raises the youngest generation's
threshold to 50,000 (about 8 collections during the import, none over everything). When the
top-level `import tensorflow` has executed, or failed while executing, it freezes every object
that exists then (gc.freeze: later collections skip them, as Python's documentation suggests
for state built at start-up) and puts the thresholds back. A process that never imports
TensorFlow keeps collecting, only less often. TFSLURM_IMPORT_GC=0 turns it off.

Standard library only: this runs in every interpreter the image starts.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import sys

ENV_SWITCH = "TFSLURM_IMPORT_GC"
WATCHED = "tensorflow"
THRESHOLD = 50_000
# The thresholds install() replaced, until the watched import has ended.
_saved: tuple[int, ...] | None = None


def install(watched: str = WATCHED) -> bool:
    """Raise the threshold until `watched` has been imported. False if left as it was."""
    global _saved
    if os.environ.get(ENV_SWITCH, "1") == "0" or watched in sys.modules or _saved is not None:
        return False
    thresholds = gc.get_threshold()
    if thresholds[0] == 0:  # automatic collection switched off: not ours to change
        return False
    _saved = thresholds
    gc.set_threshold(max(THRESHOLD, thresholds[0]), *thresholds[1:])
    sys.meta_path.insert(0, _Watch(watched))
    return True


def finish() -> None:
    """Freeze what exists, put the thresholds back and stop watching (once)."""
    global _saved
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Watch)]
    if _saved is None:
        return
    gc.freeze()
    gc.set_threshold(*_saved)
    _saved = None


class _Watch:
    """A meta path finder that only notices the watched module: the other finders find it, and
    its loader is wrapped so that finish() runs once the module has executed. It stays until
    then, so a mere lookup (importlib.util.find_spec) does not use it up."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._looking = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self._looking:
            return None
        self._looking = True  # the lookup below consults sys.meta_path, this finder included
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking = False
        if spec is not None and spec.loader is not None:
            spec.loader = _FinishAfter(spec.loader)
        return spec


class _FinishAfter:
    """The module's own loader, which calls finish() once the module has executed and then
    puts itself back in place (module.__loader__ and __spec__.loader)."""

    def __init__(self, loader) -> None:
        self._loader = loader

    def __getattr__(self, name: str):  # get_source, get_resource_reader, is_package, ...
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
            finish()
