"""import_gc: the collector runs less while the watched package imports, then freezes what was
imported and gets its thresholds back, whatever way the import ends. Each case runs in a fresh
interpreter, installed as the image's start-up hook installs it, with a stand-in package."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.fresh_python import run_python
from tfslurm_entry.fastimport import import_gc

# The stand-in for tensorflow: records the thresholds in force while it executes.
PACKAGE = """
import gc, sys
THRESHOLD_DURING = gc.get_threshold()
if "{fail}" == "yes":
    raise RuntimeError("broken package")
"""


def run(tmp_path: Path, code: str, fail: bool = False, **env: str) -> dict:
    pkg = tmp_path / "fakeflow"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(PACKAGE.format(fail="yes" if fail else "no"))
    script = (
        "import gc, json, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from tfslurm_entry.fastimport import import_gc\n"
        "out = {'installed': import_gc.install('fakeflow'), 'before': gc.get_threshold()}\n"
        + textwrap.dedent(code)
        + "out['after'] = gc.get_threshold(); out['frozen'] = gc.get_freeze_count()\n"
        "out['watching'] = [type(f).__name__ for f in sys.meta_path].count('_Watch')\n"
        "print(json.dumps(out))\n"
    )
    done = run_python(script, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_collects_less_during_the_import_then_freezes_and_restores(tmp_path):
    out = run(
        tmp_path,
        """
        import fakeflow
        out['during'] = fakeflow.THRESHOLD_DURING
        out['loader'] = type(fakeflow.__loader__).__name__
        out['spec_loader'] = type(fakeflow.__spec__.loader).__name__
        """,
    )
    assert out["installed"] is True
    default = list(gc_default())
    assert out["before"] == [import_gc.THRESHOLD, *default[1:]]
    assert out["during"] == out["before"]
    assert out["after"] == default
    assert out["frozen"] > 1000  # the interpreter's and the package's objects
    # The package keeps its real loader (inspect, importlib.resources and reload use it).
    assert out["loader"] == out["spec_loader"] == "SourceFileLoader"
    assert out["watching"] == 0


def test_a_failing_import_still_restores_and_raises_as_before(tmp_path):
    out = run(
        tmp_path,
        """
        try:
            import fakeflow
        except RuntimeError as err:
            out['error'] = str(err)
        """,
        fail=True,
    )
    assert out["error"] == "broken package"
    assert out["after"] == list(gc_default()) and out["watching"] == 0


def test_a_lookup_alone_does_not_end_it(tmp_path):
    """importlib.util.find_spec (a library probing for the package) finds it through the
    other finders; the watch goes on until the package really executes."""
    out = run(
        tmp_path,
        """
        import importlib.util
        out['found'] = importlib.util.find_spec('fakeflow').origin.endswith('__init__.py')
        out['after_lookup'] = gc.get_threshold()
        import fakeflow
        """,
    )
    assert out["found"] is True
    assert out["after_lookup"][0] == import_gc.THRESHOLD
    assert out["after"] == list(gc_default()) and out["frozen"] > 1000


def test_a_process_that_never_imports_it_keeps_collecting(tmp_path):
    out = run(
        tmp_path,
        """
        class Node:
            pass
        for _ in range(200_000):  # cycles: only the collector frees them
            a, b = Node(), Node()
            a.other, b.other = b, a
        out['enabled'] = gc.isenabled()
        out['collections'] = sum(s['collections'] for s in gc.get_stats())
        """,
    )
    assert out["enabled"] is True and out["collections"] > 0
    assert out["after"][0] == import_gc.THRESHOLD and out["frozen"] == 0


def test_the_switch_turns_it_off(tmp_path):
    out = run(tmp_path, "import fakeflow\n", TFSLURM_IMPORT_GC="0")
    assert out["installed"] is False
    assert out["before"] == out["after"] == list(gc_default()) and out["frozen"] == 0


def gc_default() -> tuple[int, int, int]:
    """Python's own thresholds, as a fresh interpreter has them."""
    done = subprocess.run(
        [sys.executable, "-c", "import gc; print(*gc.get_threshold())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return tuple(int(x) for x in done.stdout.split())
