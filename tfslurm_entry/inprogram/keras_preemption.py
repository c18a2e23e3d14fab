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

Standard library only: every Python the program starts imports this module (the change is
after_import.py's).
"""

from __future__ import annotations

from types import ModuleType

try:
    from .after_import import change_on_import
except ImportError:  # loaded by path, next door (autoload/sitecustomize.py), which loaded it too
    from _tfslurm_after_import import change_on_import

GATE_MODULE = "tf_keras.src.distribute.distributed_file_utils"
CALLBACKS_MODULE = "tf_keras.src.callbacks"


_installed = False


def install() -> None:
    """Change tf-keras as it imports the two modules concerned."""
    global _installed
    if not _installed:
        change_on_import(ENABLE)
        _installed = True


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
