"""A change to a module of TensorFlow or tf-keras made right after the module is executed, in
the user's program, without importing it earlier than the program does (importing TensorFlow
costs seconds): a finder first on sys.meta_path finds the module with the other finders and
wraps its loader. keras_preemption.py (tf-keras's save before preemption) and unstarted.py (a
program started without the entrypoint) use it.

Standard library only, no relative imports: autoload/sitecustomize.py loads it by path in a
Python that does not have the kit installed.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable, Mapping
from types import ModuleType

Change = Callable[[ModuleType], None]


def change_on_import(changes: Mapping[str, Change]) -> None:
    """Once each module named in `changes` is imported, call its change with it."""
    sys.meta_path.insert(0, _Finder(dict(changes)))


class _Finder(importlib.abc.MetaPathFinder):
    """Finds a target with the other finders, and wraps its loader."""

    def __init__(self, changes: dict[str, Change]) -> None:
        self.changes = changes
        self._looking: set[str] = set()

    def find_spec(self, fullname, path, target=None):
        # Another finder that delegates the same way (a second of these for the same module,
        # fastimport's) asks this one again while it looks: it answers None then.
        if fullname not in self.changes or fullname in self._looking:
            return None
        self._looking.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None and spec.loader is not None:
                    spec.loader = _Loader(spec.loader, self.changes[fullname])
                    return spec
            return None
        finally:
            self._looking.discard(fullname)


class _Loader(importlib.abc.Loader):
    """The module's own loader, then its change; everything else is the loader's own."""

    def __init__(self, inner, change: Change) -> None:
        self._inner = inner
        self._change = change

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._change(module)

    def __getattr__(self, name: str):  # get_source, get_filename, ...: tracebacks need them
        return getattr(self._inner, name)
