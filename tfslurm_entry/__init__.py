"""tfslurm_entry: turn a Slurm job step into TensorFlow's TF_CONFIG and GPU visibility.

The pipeline, one module per stage, read top to bottom:

    slurm_env  -> read the Slurm job-step environment into a typed record
    placement  -> place ranks on hosts the way Slurm did (block, cyclic, plane)
    roles      -> assign chief / ps / worker roles and host:port addresses
    gpus       -> split the node's GPUs among its GPU-using tasks
    resolve    -> compose the stages into one Plan (pure, no TensorFlow import)
    launch     -> export the plan and start the role (the only side effects)
    cli        -> options, --print-config / --explain, exit codes
"""

__version__ = "0.1.0"
