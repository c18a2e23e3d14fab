"""Build the image's bytecode bundle (see bytecode_bundle) and the .pth file that installs it
(with the rest of the image's start-up hook, fastimport/__init__.py).

    python -m tfslurm_entry.fastimport.build build --modules tensorflow tf_keras
    python -m tfslurm_entry.fastimport.build status    # exit 0 if this Python uses it

containers/Dockerfile runs `build` after the last install into the image's environment; a
later install changes the directories it recorded, and those are then imported from files.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import marshal
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from . import bytecode_bundle
from .bytecode_bundle import FORMAT, LOADERS, Index

# The image's start-up hook: the bundle's path hook and the import-time GC policy (install()).
PTH_NAME = "tfslurm-startup.pth"
PTH_LINE = "import tfslurm_entry.fastimport as s; s.install()\n"


def valid_pyc(source: Path) -> bytes | None:
    """The code in source's .pyc, if that .pyc is the one Python would use: this Python's,
    timestamp-checked, and matching the source's mtime and size."""
    try:
        data = Path(importlib.util.cache_from_source(str(source))).read_bytes()
        st = source.stat()
    except OSError:
        return None
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER or data[4:8] != bytes(4):
        return None
    if data[8:12] != (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little"):
        return None
    if data[12:16] != (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"):
        return None
    return data[16:]


def package_init(directory: Path) -> Path | None:
    """The __init__ file FileFinder would load for this directory as a package, if any."""
    for _, suffixes in LOADERS:
        for suffix in suffixes:
            if (init := directory / f"__init__{suffix}").is_file():
                return init
    return None


def module_files(directory: Path) -> Iterator[tuple[str, Path, bool | None]]:
    """(name, source, is package) for each name FileFinder would import from source here;
    (name, directory, None) for a namespace package's portion (google/ of google.protobuf)."""
    try:
        entries = {entry.name: entry for entry in os.scandir(directory)}
    except OSError:
        return
    for name, entry in entries.items():
        if entry.is_dir(follow_symlinks=False) and name.isidentifier():
            init = package_init(directory / name)
            if init is None:
                yield name, directory / name, None
            elif init.name == "__init__.py":
                yield name, init, True
        elif name.endswith(".py") and name[:-3].isidentifier():
            stem = name[:-3]
            if package_init(directory / stem) is not None:
                continue  # a package of that name wins
            if any(stem + suffix in entries for suffix in importlib.machinery.EXTENSION_SUFFIXES):
                continue  # so does an extension module
            yield stem, directory / name, False


def collect(roots: Sequence[Path]) -> dict[str, tuple[str, Path, bool]]:
    """Every module under the roots: fully qualified name -> (directory, source, is package).
    The first root that has a name wins, as in sys.path."""
    found: dict[str, tuple[str, Path, bool]] = {}
    todo = [(root, "") for root in reversed(roots)]
    while todo:
        directory, prefix = todo.pop()
        for name, source, is_package in module_files(directory):
            fullname = prefix + name
            if is_package is None:  # a namespace portion: nothing to bundle, but its modules
                todo.append((source, fullname + "."))
            elif fullname not in found:
                found[fullname] = (str(directory), source, is_package)
                if is_package:
                    todo.append((source.parent, fullname + "."))
    return found


def import_order(modules: Sequence[str]) -> list[str]:
    """The modules a fresh interpreter loads for `import MODULES`, in the order it loads them."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {list(modules)!r}: importlib.import_module(m)\n"
        "print(json.dumps(list(sys.modules)))\n"
    )
    env = {**os.environ, bytecode_bundle.ENV_SWITCH: "0", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def build(output: Path, roots: Sequence[Path], imports: Sequence[str] = ()) -> tuple[int, int]:
    """Write the bundle; returns (modules, bytes of bytecode). With imports, it holds what
    `import IMPORTS` loads from the roots, in load order (a process importing them reads one
    stretch of the file); without, every module under the roots."""
    modules = collect(roots)
    order = [m for m in import_order(imports) if m in modules] if imports else sorted(modules)
    index: Index = {}
    blob = bytearray()
    for fullname in order:
        directory, source, is_package = modules[fullname]
        code = valid_pyc(source)
        if code is None:
            continue
        if directory not in index:
            index[directory] = (int(os.stat(directory).st_mtime), {})
        package = int(source.parent.stat().st_mtime) if is_package else None
        entry = (str(source), len(blob), len(code), package)
        index[directory][1][fullname.rpartition(".")[2]] = entry
        blob += code
    header = marshal.dumps(index)
    partial = output.with_name(output.name + ".partial")
    with open(partial, "wb") as f:
        f.write(FORMAT + importlib.util.MAGIC_NUMBER + len(header).to_bytes(8, "little"))
        f.write(header)
        f.write(blob)
    partial.replace(output)
    return sum(len(entries) for _, entries in index.values()), len(blob)


def default_roots() -> list[Path]:
    """This interpreter's own import directories: the standard library and site-packages."""
    prefixes = {sys.prefix, sys.base_prefix}
    return [
        Path(entry)
        for entry in sys.path
        if entry and os.path.isdir(entry) and any(entry.startswith(p + os.sep) for p in prefixes)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfslurm_entry.fastimport.build", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="write the bundle and the .pth file that installs it")
    make.add_argument("--output", type=Path, default=Path(bytecode_bundle.default_path()))
    make.add_argument(
        "--modules",
        nargs="*",
        default=[],
        metavar="MODULE",
        help="bundle what importing these loads (default: every module)",
    )
    sub.add_parser("status", help="whether this interpreter serves imports from the bundle")
    args = parser.parse_args(argv)
    if args.command == "status":
        active = bytecode_bundle.ACTIVE
        print(f"bytecode bundle: {f'in use ({active})' if active else 'not in use'}")
        return 0 if active else 1
    roots = default_roots()
    site = next((r for r in roots if r.name == "site-packages"), None)
    if site is None:
        parser.error(f"no site-packages among {[str(r) for r in roots]}")
    # The .pth file first: it goes into site-packages, whose mtime the bundle records.
    (site / PTH_NAME).write_text(PTH_LINE)
    count, size = build(args.output, roots, args.modules)
    print(f"bytecode bundle: {count} modules, {size / 1e6:.1f} MB of bytecode -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
