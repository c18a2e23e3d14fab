"""Imported at start-up by every Python a multi-worker step's program starts: tfslurm-entry
puts this directory first on the program's PYTHONPATH (../program_end.py says why).

It arranges the end-of-job barrier and tf-keras's save before preemption
(../keras_preemption.py), takes this directory off sys.path again, and runs the
sitecustomize it shadows, if there is one, so the program sees the Python it would without
the kit. A Python without the kit installed loads both modules from next door.
"""

import importlib
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _kit(name: str):
    """tfslurm_entry's module name (stdlib only), from the package or from next door."""
    try:
        return importlib.import_module(f"tfslurm_entry.inprogram.{name}")
    except ImportError:
        path = os.path.join(os.path.dirname(_HERE), f"{name}.py")
        spec = importlib.util.spec_from_file_location(f"_tfslurm_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # keras_preemption imports after_import by this name
        spec.loader.exec_module(module)
        return module


def _hand_over() -> None:
    """Leave sys.path as it was without this directory, and run the shadowed sitecustomize."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_kit("program_end").install()
_kit("after_import")
_kit("keras_preemption").install()
_hand_over()
