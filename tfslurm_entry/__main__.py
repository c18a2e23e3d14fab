"""`python -m tfslurm_entry` and the console script tfslurm-entry: fewer garbage collections
while the entrypoint imports what its role needs (fastimport/import_gc, which the image's .pth
file sets for every Python; a venv or a pip install has no such file), then the CLI, then an
exit without the interpreter's teardown. Every task of a large step starts at once on a node's
CPUs."""

import contextlib
import os
import sys

from .fastimport import import_gc


def start() -> int:
    """The CLI's exit status, as the process's: once the CLI has returned, everything the task
    held is closed (its ports, its temporary directory, its connections: all context-managed)
    and its threads are daemons, so what the interpreter's shutdown would still do (collect
    and free every object of every module, ~12 % of a member's CPU) changes nothing but the
    time. Standard output and error are flushed first; an exception still unwinds as usual."""
    import_gc.install()
    from .cli import main

    status = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone, or the stream closed
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    sys.exit(start())
