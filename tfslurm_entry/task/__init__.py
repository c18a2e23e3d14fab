"""This task, after resolution: prepare it, then start its role under the step's supervision
(step/), which runs the user's program or a TensorFlow server as its child. The parts, in the
order a task meets them:

    run        -> run_task: the sequence, and the run's Settings (--chief-timeout, ...)
    workdir    -> where the task runs: srun's directory under Slurm's --container, not the bundle's
    preflight  -> every check that can fail, before anything starts; the role's environment;
                  the task's ports, held until it ends
    cuda       -> whether the GPU image's TensorFlow can use the node's GPUs; no GPU: CPU only
    keras      -> which Keras tf.keras is, outside the kit's images
    mount      -> whether Slurm's signals can unmount this task's image (squashfuse); also
                  --check-mount, tfslurm-run's question before it copies the image
    server     -> a parameter-server job's ps/worker task: a TensorFlow server, as a child
               (python -m tfslurm_entry.task.server: nothing here imports it first)

Nothing is imported here: `python -m tfslurm_entry.task.server` must find its module unloaded.
"""
