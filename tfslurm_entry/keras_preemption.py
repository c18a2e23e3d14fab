"""tf-keras's save_before_preemption on a Slurm cluster: for the programs a multi-worker step
runs, imported at their start by autoload/sitecustomize.py.

tf-keras 2.21's `BackupAndRestore(save_before_preemption=True)` saves at the end of the batch
in flight when the job is being stopped, through TensorFlow's PreemptionCheckpointHandler
(which, off Google's platforms, takes SIGTERM as the notice, agrees a step across the workers
and exits 42 once it has saved). But tf-keras turns it on only where it finds Google Cloud's
metadata server (distributed_file_utils.support_on_demand_checkpoint_callback asks
metadata.google.internal, waiting up to 5 s); everywhere else the argument does nothing, and
a preempted job loses the epoch in flight. Under tfslurm-entry the notice is SIGTERM to every
program (step/notice.py), just what the handler watches, so for MultiWorkerMirroredStrategy
(the one strategy tf-keras supports it for) the question is answered yes, without asking the
metadata server. And the callback checks for the notice at the end of each batch only when
Model.fit calls batch hooks, which with its default save_freq ("epoch") it asks for only when
another callback does (verbose=1's progress bar does, verbose=0 or 2 do not): it asks for them
whenever save_before_preemption is on. Nothing else of tf-keras changes, and nothing at all
until a program imports it.

Standard library only: every Python the program starts imports this module.
"""

from __future__ import annotations

import importlib.abc
import sys
from types import ModuleType

GATE_MODULE = "tf_keras.src.distribute.distributed_file_utils"
CALLBACKS_MODULE = "tf_keras.src.callbacks"


def install() -> None:
    """Change tf-keras as it imports the two modules concerned."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def enable_gate(module: ModuleType) -> None:
    """The gate: on for MultiWorkerMirroredStrategy, as tf-keras itself answers on Google
    Cloud."""

    def support_on_demand_checkpoint_callback(strategy) -> bool:
        import tensorflow as tf

        return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)

    if hasattr(module, "support_on_demand_checkpoint_callback"):
        module.support_on_demand_checkpoint_callback = support_on_demand_checkpoint_callback


def enable_batch_hooks(module: ModuleType) -> None:
    """BackupAndRestore asks for batch hooks when save_before_preemption is on."""
    callback = getattr(module, "BackupAndRestore", None)
    implements = getattr(callback, "_implements_train_batch_hooks", None)
    if implements is None:
        return

    def _implements_train_batch_hooks(self) -> bool:
        return implements(self) or bool(getattr(self, "save_before_preemption", False))

    callback._implements_train_batch_hooks = _implements_train_batch_hooks


ENABLE = {GATE_MODULE: enable_gate, CALLBACKS_MODULE: enable_batch_hooks}


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the target with the other finders, and wraps its loader."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in ENABLE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, ENABLE[fullname])
                return spec
        return None


class _Loader(importlib.abc.Loader):
    """The module's own loader, then its change; everything else is the loader's own."""

    def __init__(self, inner, change) -> None:
        self._inner = inner
        self._change = change

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._change(module)

    def __getattr__(self, name: str):  # get_source, get_filename, ...: tracebacks need them
        return getattr(self._inner, name)
