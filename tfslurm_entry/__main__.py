"""`python -m tfslurm_entry` and the console script tfslurm-entry: fewer garbage collections
while the entrypoint imports what its role needs (fastimport/import_gc, which the image's .pth
file sets for every Python; a venv or a pip install has no such file), then the CLI. Every task
of a large step starts at once on a node's CPUs."""

import sys

from .fastimport import import_gc


def start() -> int:
    import_gc.install()
    from .cli import main

    return main()


if __name__ == "__main__":
    sys.exit(start())
