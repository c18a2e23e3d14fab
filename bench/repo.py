"""The repository as the benchmarks and the tests find it, once: its root, and its dev tools
(scripts in folders that are not packages: slurm-dev-cluster/devcluster.py,
containers/buildtool.py, examples/cifar10/*.py) imported by path, without editing sys.path.

(tests/suite.py keeps a root of its own: `make test` runs it with the system's Python before
the project's environment exists.)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def tool(path: str) -> ModuleType:
    """The module in the file at path (relative to the root), imported once under its file's
    name, so that the tool's own `import` of a sibling finds it too."""
    file = ROOT / path
    name = file.stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
