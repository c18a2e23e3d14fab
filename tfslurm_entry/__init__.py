"""tfslurm_entry: turn a Slurm job step into TensorFlow's TF_CONFIG and GPU visibility, then
start the task's role and supervise the step. Subpackages, each one concern:

    resolve/     the pure pipeline: Slurm variables -> placement -> roles and addresses -> GPUs
                 -> one Plan (no TensorFlow, no side effects)
    task/        this task after resolution: preflight, then its role under step/, then the
                 user's program or a TensorFlow server
    step/        the step's supervision: rank 0 (head) and every other task (member) over the
                 control connections, and the protocol they speak (step/protocol.py)
    sitecheck/   --site-check, the admins' mode: one step over the nodes, one table
    launcher/    tfslurm-run, the batch script's side (bash: it runs outside the image): the
                 per-node copy of the image, the verdict, the requeue; --install-launcher
    fastimport/  the image's start-up hook, run by every Python in the image through a .pth
                 file: the bytecode bundle and the import-time GC policy (unrelated to Slurm)
    inprogram/   what runs inside the user's program, not the entrypoint (standard library
                 only): the end-of-job barrier, tf-keras's save before preemption, the guard
                 for a program started without the entrypoint

and at the top: cli (the console script tfslurm-entry: --print-config, --explain, exit codes),
options (every option made from the one field that declares it, in resolve's Options or task's
Settings: flags, TFSLURM_* variables, --help, the README's table), errors (the one error type
users see), log (the entrypoint's own lines) and tf (what a user's TensorFlow program may
import: end_of_job, from inprogram/).
"""

__version__ = "0.1.0"
