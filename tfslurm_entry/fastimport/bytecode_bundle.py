"""Serve the image's compiled Python from one file, so that `import tensorflow` from a SIF is
not ~15,000 trips through FUSE.

An unprivileged Apptainer mounts the SIF with squashfuse for every process, so the kernel has
nothing of it cached: each of the ~2,500 modules `import tensorflow` loads costs a lookup of
its `.py`, its `__pycache__` and its `.pyc`, then an open, reads and a release, each one a round
trip through the FUSE daemon. The bundle (built with the image by fastimport/build.py) holds
every valid `.pyc` of the image's Python, ordered as `import tensorflow` loads them; it is
mapped once, and a path hook serves those modules from it.

Nothing else changes: a module keeps its real `__file__`, `__cached__`, `__path__` and source
(tracebacks, `inspect`, `importlib.resources` read the files as before); names resolve in
`sys.path` order exactly as Python's FileFinder resolves them (the bundled finder *is* a
FileFinder, which it falls back to for anything not bundled); and a directory is served from the
bundle only while its mtime is the one recorded at build time (adding, removing or replacing a
file there, as pip and `sed -i` do, changes it). `TFSLURM_BYTECODE_BUNDLE=0` turns it off.

This module is imported by a `.pth` file at every interpreter start: standard library only,
nothing heavy.
"""

from __future__ import annotations

import importlib.machinery as machinery
import importlib.util
import marshal
import mmap
import os
import sys

FORMAT = b"TFSLURM-PYC-BUNDLE-1\n"
ENV_SWITCH = "TFSLURM_BYTECODE_BUNDLE"
# How FileFinder ranks candidates in a directory; the bundle is built to rank them the same way.
LOADERS = (
    (machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
    (machinery.SourceFileLoader, machinery.SOURCE_SUFFIXES),
    (machinery.SourcelessFileLoader, machinery.BYTECODE_SUFFIXES),
)
# directory -> (its mtime at build time, {name: (source path, offset, length, package)}),
# package: the mtime of the package's own directory (where its __init__.py is), or None.
Entry = tuple[str, int, int, "int | None"]
Index = dict[str, tuple[int, dict[str, Entry]]]
# The bundle this interpreter serves imports from, once install() has succeeded.
ACTIVE: str | None = None


def default_path() -> str:
    """Beside the environment it was built from: /opt/venv/tfslurm-bytecode.bundle in the image."""
    return os.path.join(sys.prefix, "tfslurm-bytecode.bundle")


class BundleLoader(machinery.SourceFileLoader):
    """A SourceFileLoader whose first get_code comes from the bundle (a reload reads files)."""

    def __init__(self, fullname: str, path: str, code: memoryview | None) -> None:
        super().__init__(fullname, path)
        self._code = code

    def get_code(self, fullname: str):
        code, self._code = self._code, None
        if code is None:
            return super().get_code(fullname)
        return marshal.loads(code)


class BundleFinder(machinery.FileFinder):
    """The FileFinder of one directory, answering from the bundle first. Being a FileFinder,
    it lists modules for pkgutil and finds what the bundle lacks as Python itself would."""

    def __init__(self, path: str, entries: dict, blob: memoryview) -> None:
        super().__init__(path, *LOADERS)
        self._entries, self._blob = entries, blob

    def find_spec(self, fullname: str, target=None):
        entry = self._entries.get(fullname.rpartition(".")[2])
        if entry is None:
            return super().find_spec(fullname, target)
        source, offset, length, package = entry
        locations = None
        if package is not None:
            locations = [os.path.dirname(source)]
            if not unchanged(locations[0], package):  # its __init__.py lives there
                return super().find_spec(fullname, target)
        loader = BundleLoader(fullname, source, self._blob[offset : offset + length])
        return importlib.util.spec_from_file_location(
            fullname, source, loader=loader, submodule_search_locations=locations
        )


def header_size() -> int:
    return len(FORMAT) + len(importlib.util.MAGIC_NUMBER) + 8


def load(path: str) -> tuple[Index, memoryview] | None:
    """The bundle's index and bytecode; None if it is missing or not for this Python."""
    try:
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    view = memoryview(data)
    start = header_size()
    if bytes(view[: start - 8]) != FORMAT + importlib.util.MAGIC_NUMBER:
        return None
    end = start + int.from_bytes(view[start - 8 : start], "little")
    try:
        index = marshal.loads(view[start:end])
    except (EOFError, ValueError, TypeError):
        return None
    return index, view[end:]


def unchanged(directory: str, mtime: int) -> bool:
    """Whether the directory still is as the bundle saw it."""
    try:
        return int(os.stat(directory).st_mtime) == mtime
    except OSError:
        return False


def install(path: str | None = None) -> bool:
    """Put the bundle's path hook first (from the .pth file, at start-up). False if unused."""
    global ACTIVE
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return False
    path = path or default_path()
    loaded = load(path)
    if loaded is None:
        return False
    index, blob = loaded

    def hook(directory: str) -> machinery.FileFinder:
        if directory not in index:
            raise ImportError  # not a bundled directory: the next hook (FileFinder) takes it
        mtime, entries = index[directory]
        if not unchanged(directory, mtime):
            return machinery.FileFinder(directory, *LOADERS)
        return BundleFinder(directory, entries, blob)

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()  # the finders site made before the hook existed
    ACTIVE = path
    return True
