"""This task, after resolution: prepare it, then start its role under the step's supervision
(step/), which runs the user's program or a TensorFlow server as its child. The parts, in the
order a task meets them:

    run          -> run_task: the sequence, and the run's Settings (--chief-timeout, ...)
    workdir      -> where the task runs: srun's directory under Slurm's --container, not the
                    bundle's
    preflight    -> every check that can fail, before anything starts, from the parts below;
                    the role's environment
    argv         ->   (the program as an argv; the line when its file is not in the container)
    addresses    ->   (this node's name or address on the network --network picks)
    ephemeral    ->   (the node's ephemeral port range against the task ports)
    files        ->   (rank 0's open-files limit, the result file, the task's private TMPDIR)
    environment  ->   (TF_CONFIG, GPU visibility, gRPC off the proxy, which tf.keras)
    cuda         ->   (whether the GPU image's TensorFlow can use the node's GPUs)
    keras        ->   (which Keras tf.keras is, outside the kit's images)
    mount        ->   (whether Slurm's signals can unmount the image; also --check-mount,
                       tfslurm-run's question before it copies the image)
    hold         -> the task's ports, held from before its program starts until the task ends
    server       -> a parameter-server job's ps/worker task: a TensorFlow server, as a child
                    (python -m tfslurm_entry.task.server: nothing here imports it first)

Nothing is imported here: `python -m tfslurm_entry.task.server` must find its module unloaded.
"""
