"""Imported at start-up by every Python a multi-worker step's program starts: tfslurm-entry
puts this directory first on the program's PYTHONPATH (tfslurm_entry/program_end.py says why).

It arranges the end-of-job barrier, takes this directory off sys.path again, and runs the
sitecustomize it shadows, if there is one, so the program sees the Python it would without
the kit. A Python without the kit installed loads program_end.py from next door.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _program_end():
    try:
        from tfslurm_entry import program_end
    except ImportError:
        path = os.path.join(os.path.dirname(_HERE), "program_end.py")
        spec = importlib.util.spec_from_file_location("_tfslurm_program_end", path)
        program_end = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(program_end)
    return program_end


def _hand_over() -> None:
    """Leave sys.path as it was without this directory, and run the shadowed sitecustomize."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_program_end().install()
_hand_over()
