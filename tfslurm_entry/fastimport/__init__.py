"""The image's fast start: what every Python interpreter in the image does when it starts.

A .pth file in the image's site-packages (written by `python -m tfslurm_entry.fastimport.build`)
runs install(): serve compiled modules from the bytecode bundle (bytecode_bundle.py), and
collect garbage less often while TensorFlow is imported (import_gc.py). Both make
`import tensorflow` cheaper in every task; both have a switch (TFSLURM_BYTECODE_BUNDLE=0,
TFSLURM_IMPORT_GC=0). Nothing here knows of Slurm. Standard library only. The parts:

    bytecode_bundle  -> the compiled modules in one file, served by a meta path finder
    import_gc        -> the garbage collector's thresholds while TensorFlow is imported
    build            -> the bundle and the .pth file, written when the image is built
"""

from __future__ import annotations

from . import bytecode_bundle, import_gc


def install() -> None:
    bytecode_bundle.install()
    import_gc.install()
