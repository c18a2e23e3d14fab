"""The run phase of one task, after resolution: preflight, then head or member, then program
or server. task.run_task is that sequence; each step is a module:

    task      -> run_task: the sequence, and the run's Settings
    preflight -> every check that can fail, before anything starts; the role's environment;
                 the task's ports, held until it ends
    head      -> rank 0: supervises the step, and runs the program (the chief, or worker 0)
                 once every task has checked in and reached its peers
    member    -> every other task: checks in with the head, starts and ends as it says
    reach     -> the start-up check: each task reaches the TensorFlow ports of its peers
    notice    -> Slurm's signals: its notice (preemption, time limit, requeue) as one SIGTERM
    preempted -> rank 0's view of a step Slurm is stopping: who ended how, the verdict
    mount     -> whether Slurm's signals can unmount this task's image (squashfuse)
    program   -> the user's program as a child, signals sent to its group (or exec'ed)
    server    -> a parameter-server job's ps/worker task: a TensorFlow server, as a child
    control   -> the head's and members' control connections and their line protocol
    outcome   -> exit statuses, failures and the step's verdict
    cuda      -> whether the GPU image's TensorFlow can use the node's GPUs
    keras     -> which Keras tf.keras is, outside the kit's images
    log       -> the entrypoint's own lines
    sitecheck -> --site-check: one step over the nodes an admin chooses, one table (nodecheck:
                 the questions it asks of each node)
"""

from .task import Settings, run_task

__all__ = ["Settings", "run_task"]
