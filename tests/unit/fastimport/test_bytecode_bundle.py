"""The bytecode bundle: modules come from it, resolve as Python's FileFinder would, and the
files win whenever the bundle is off, stale, broken or lacks a module. Every check runs in a
fresh interpreter, with the bundle installed the way the image's .pth file installs it."""

from __future__ import annotations

import compileall
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.fresh_python import run_python
from tfslurm_entry.fastimport import build as builder
from tfslurm_entry.fastimport import bytecode_bundle

EXT = bytecode_bundle.machinery.EXTENSION_SUFFIXES[0]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small import root: a package, modules, and names that FileFinder resolves specially."""
    lib = tmp_path / "lib"
    files = {
        "pkg/__init__.py": "WHERE = 'pkg'\n",
        "pkg/mod.py": "VALUE = 1\n",
        "pkg/broken.py": "def fail():\n    raise RuntimeError('from broken')  # source line\n",
        "top.py": "import pkg.mod\nVALUE = pkg.mod.VALUE + 1\n",
        "both/__init__.py": "KIND = 'package'\n",  # a package and a module of one name
        "both.py": "KIND = 'module'\n",
        f"native{EXT}": "not really a shared object\n",  # an extension beats native.py
        "native.py": "KIND = 'source'\n",
        "nsp/portion.py": "X = 1\n",  # a namespace package (no __init__)
    }
    for name, text in files.items():
        (lib / name).parent.mkdir(parents=True, exist_ok=True)
        (lib / name).write_text(text)
    assert compileall.compile_dir(lib, quiet=1)
    return lib


def bundle_of(tree: Path) -> Path:
    out = tree.parent / "test.bundle"
    builder.build(out, [tree])
    return out


def run(tree: Path, bundle: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    """A fresh interpreter with the bundle installed, then CODE (after sys.path gets tree)."""
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(tree)!r})\n"
        "from tfslurm_entry.fastimport import bytecode_bundle\n"
        f"print('installed', bytecode_bundle.install({str(bundle)!r}))\n" + textwrap.dedent(code)
    )
    return run_python(script, **env)


def loader_of(name: str) -> str:
    return f"import {name}; print('loader', {name!r}, type({name}.__spec__.loader).__name__)\n"


def test_modules_come_from_the_bundle_with_their_real_paths(tree: Path) -> None:
    bundle = bundle_of(tree)
    for pyc in tree.rglob("*.pyc"):
        pyc.unlink()  # served without them: the code can only come from the bundle
    # Removing the .pyc files changed only __pycache__ directories, which the bundle ignores.
    code = textwrap.dedent("""
        import pkg, top
        print('values', top.VALUE, pkg.WHERE)
        print('file', pkg.mod.__file__)
        print('path', pkg.__path__)
        print('cached', pkg.mod.__cached__)
    """)
    done = run(tree, bundle, loader_of("pkg.mod") + loader_of("top") + code)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "installed True" in out
    assert "loader pkg.mod BundleLoader" in out and "loader top BundleLoader" in out
    assert "values 2 pkg" in out
    assert f"file {tree / 'pkg' / 'mod.py'}" in out
    assert f"path [{str(tree / 'pkg')!r}]" in out
    assert f"cached {tree / 'pkg' / '__pycache__' / 'mod'}" in out


def test_names_resolve_as_filefinder_resolves_them(tree: Path) -> None:
    bundle = bundle_of(tree)
    index, _ = bytecode_bundle.load(str(bundle))
    _, entries = index[str(tree)]
    assert entries["both"][0] == str(tree / "both" / "__init__.py")  # the package, not both.py
    assert "native" not in entries  # the extension module wins; the files decide
    assert "nsp" not in entries  # a namespace package is FileFinder's, its modules are ours
    assert "portion" in index[str(tree / "nsp")][1]
    code = loader_of("both") + loader_of("nsp.portion") + "print(both.KIND)\n"
    done = run(tree, bundle, code)
    assert done.returncode == 0, done.stderr
    assert "loader both BundleLoader" in done.stdout and "package" in done.stdout
    assert "loader nsp.portion BundleLoader" in done.stdout
    # native.<ext> is not a real shared object: importing it fails exactly as without a bundle.
    without = run(tree, bundle, "import native\n", TFSLURM_BYTECODE_BUNDLE="0")
    served = run(tree, bundle, "import native\n")
    assert served.returncode == without.returncode != 0
    assert served.stderr.splitlines()[-1] == without.stderr.splitlines()[-1]


def test_tracebacks_show_the_source(tree: Path) -> None:
    done = run(tree, bundle_of(tree), "import pkg.broken; pkg.broken.fail()\n")
    assert done.returncode != 0
    assert "raise RuntimeError('from broken')  # source line" in done.stderr
    assert str(tree / "pkg" / "broken.py") in done.stderr


def test_a_changed_directory_is_read_from_its_files(tree: Path) -> None:
    bundle = bundle_of(tree)
    (tree / "pkg" / "mod.py").write_text("VALUE = 10\n")  # as pip or sed -i replace a file
    (tree / "pkg" / "__init__.py").write_text("WHERE = 'changed'\n")
    later = os.stat(tree / "pkg").st_mtime + 10  # a new mtime, even within the same second
    os.utime(tree / "pkg", (later, later))
    code = loader_of("pkg") + loader_of("pkg.mod") + loader_of("top")
    done = run(tree, bundle, code + "print(pkg.WHERE, top.VALUE)\n")
    assert done.returncode == 0, done.stderr
    # pkg's __init__.py and mod.py live in the changed directory: files. top's did not change.
    assert "loader pkg SourceFileLoader" in done.stdout
    assert "loader pkg.mod SourceFileLoader" in done.stdout
    assert "loader top BundleLoader" in done.stdout
    assert done.stdout.splitlines()[-1] == "changed 11"


@pytest.mark.parametrize("damage", ["missing", "not a bundle", "other python", "truncated"])
def test_a_bad_bundle_is_not_used(tree: Path, damage: str) -> None:
    bundle = bundle_of(tree)
    data = bundle.read_bytes()
    start = len(bytecode_bundle.FORMAT)
    if damage == "missing":
        bundle.unlink()
    elif damage == "not a bundle":
        bundle.write_bytes(b"#!/bin/sh\n" + data)
    elif damage == "other python":
        bundle.write_bytes(data[:start] + b"\x00\x00\r\n" + data[start + 4 :])
    else:
        bundle.write_bytes(data[: bytecode_bundle.header_size() + 5])
    done = run(tree, bundle, loader_of("top") + "print(top.VALUE)\n")
    assert done.returncode == 0, done.stderr
    assert "installed False" in done.stdout
    assert "loader top SourceFileLoader" in done.stdout and done.stdout.endswith("2\n")


def test_the_switch_turns_it_off(tree: Path) -> None:
    done = run(tree, bundle_of(tree), loader_of("top"), TFSLURM_BYTECODE_BUNDLE="0")
    assert done.returncode == 0, done.stderr
    assert "installed False" in done.stdout and "loader top SourceFileLoader" in done.stdout


def test_a_bundle_of_imports_holds_what_they_load_in_load_order(tree: Path) -> None:
    """`build --modules top`: what importing top loads from the roots, nothing else, in the
    order the import loads it (the file is then read front to back)."""
    env = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{tree}{os.pathsep}{env}" if env else str(tree)
    try:
        count, _ = builder.build(tree.parent / "top.bundle", [tree], ["top"])
    finally:
        os.environ["PYTHONPATH"] = env
    index, _ = bytecode_bundle.load(str(tree.parent / "top.bundle"))
    entries = {
        name: (directory, offset)
        for directory, (_, names) in index.items()
        for name, (_, offset, _, _) in names.items()
    }
    assert count == 3 and set(entries) == {"top", "pkg", "mod"}
    assert [n for n, _ in sorted(entries.items(), key=lambda e: e[1][1])] == ["pkg", "mod", "top"]
