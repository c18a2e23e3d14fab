"""What every Python interpreter in the image does when it starts (a .pth file in site-packages
imports this): serve compiled modules from the bytecode bundle, and collect garbage less often
while TensorFlow is imported. Both make `import tensorflow` cheaper in every task; both have a
switch (TFSLURM_BYTECODE_BUNDLE=0, TFSLURM_IMPORT_GC=0). Standard library only."""

from __future__ import annotations

from . import bytecode_bundle, import_gc


def install() -> None:
    bytecode_bundle.install()
    import_gc.install()
