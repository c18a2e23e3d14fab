"""The code that runs inside the user's program, not the entrypoint: every Python the program
(or, for unstarted, the image) starts loads it, so it is standard library only, touches
TensorFlow only once the program imported it, and imports nothing else of the package.

    program_end       -> the end-of-job barrier a multi-worker program's Python passes at exit
    after_import      -> the change to a module as the program imports it
                         (keras_preemption and unstarted use it)
    keras_preemption  -> tf-keras's save before preemption
    unstarted         -> the image's guard, from a .pth file, for a program started without the
                         entrypoint in a step of several tasks

and autoload/sitecustomize.py, not a module of the package: the directory tfslurm-entry puts
first on a multi-worker program's PYTHONPATH, which loads program_end and keras_preemption.
tfslurm_entry.tf is their public face: what a user's program may import (end_of_job).
"""
