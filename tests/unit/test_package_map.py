"""The package's map stays true: each subpackage's docstring lists every module it holds (one
`name ->` line each, in the order the docstring explains) and nothing that is not there; the
top package's names every subpackage and every module at the top. A module added, moved or
renamed without its line fails here, not in a new contributor's first hour."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import tfslurm_entry

PACKAGE = Path(tfslurm_entry.__file__).parent
SUBPACKAGES = sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))
LISTED = re.compile(r"^ {4}(\w+)\s+->", re.M)


def modules(directory: Path) -> set[str]:
    return {p.stem for p in directory.glob("*.py") if p.stem != "__init__"}


def docstring(directory: Path) -> str:
    return ast.get_docstring(ast.parse((directory / "__init__.py").read_text())) or ""


@pytest.mark.parametrize("directory", SUBPACKAGES, ids=lambda p: p.name)
def test_each_subpackage_lists_every_module_it_holds_and_no_other(directory):
    listed = LISTED.findall(docstring(directory))
    assert len(listed) == len(set(listed)), f"{directory.name}/__init__.py lists one twice"
    assert set(listed) == modules(directory), (
        f"{directory.name}/__init__.py: listed but absent "
        f"{sorted(set(listed) - modules(directory))}, present but not listed "
        f"{sorted(modules(directory) - set(listed))}"
    )


def test_the_top_package_names_every_subpackage_and_top_module():
    text = docstring(PACKAGE)
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    missing = [f"{name}/" for name in sorted(folders) if f"{name}/" not in text]
    missing += [
        m for m in sorted(modules(PACKAGE) - {"__main__"}) if not re.search(rf"\b{m}\b", text)
    ]
    assert missing == []


def test_the_benchmarks_import_nothing_from_the_tests():
    """bench/ shares its helpers (repo, localstep) with tests/, not the other way round."""
    bench = Path(__file__).resolve().parents[2] / "bench"
    found = []
    for path in bench.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "tests"]
    assert found == []
