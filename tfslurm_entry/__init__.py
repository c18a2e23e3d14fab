"""tfslurm_entry: turn a Slurm job step into TensorFlow's TF_CONFIG and GPU visibility, then
start the task's role and supervise the step. Three subpackages, each one concern:

    resolve/     the pure pipeline: Slurm variables -> placement -> roles and addresses -> GPUs
                 -> one Plan (no TensorFlow, no side effects)
    run/         the run phase of a task: preflight, then head (rank 0) or member, then the
                 user's program or a TensorFlow server; the control channel between them
    fastimport/  the image's start-up hook, run by every Python in the image through a .pth
                 file: the bytecode bundle and the import-time GC policy (unrelated to Slurm)

and at the top: cli (the console script tfslurm-entry: --print-config, --explain, exit codes),
options (every option made from the one field that declares it, in resolve's Options or run's
Settings: flags, TFSLURM_* variables, --help, the README's table), errors (the one error type
users see), program_end (the end-of-job barrier a multi-worker program's Python passes at exit,
loaded through autoload/sitecustomize.py) and tf (what a user's TensorFlow program may import:
end_of_job).
"""

__version__ = "0.1.0"
