"""The step's supervision: rank 0 (the head) and every other task (a member) over the control
connections, so that the step's tasks start together and end together. The parts:

    protocol   -> the words on the wire: one type per message, its line and its parsing
    control    -> the sockets that carry them: rank 0's selector, a member's connection
    head       -> rank 0: every member checks in and reaches its peers, then the program runs;
                  one failure stops the step, the chief's end stops the servers
    member     -> every other task: checks in, starts and ends as the head says
    reach      -> the start-up check: each task reaches the TensorFlow ports of its peers
    notice     -> Slurm's signals: its notice (preemption, time limit, requeue) as one SIGTERM
    preempted  -> rank 0's view of a step Slurm is stopping: who ended how, the verdict
    outcome    -> exit statuses, failures and the step's verdict (--result-file)
"""
