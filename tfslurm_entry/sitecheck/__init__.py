"""--site-check: an administrator's mode, not a run phase. One step over the nodes an admin
chooses, one table of what would break or slow a distributed TensorFlow job there. The parts:

    check      -> the step: every task asks its node's questions, reaches its peers, and rank 0
                  prints the table (on the control protocol, step/protocol.py)
    questions  -> the questions asked of one node: names, proxy, ports, binds, GPUs, CPUs, TMPDIR
    outside    -> who can reach the tasks' TensorFlow ports: the network, the partition's
                  ExclusiveUser, and the listener tfslurm-run starts where the check was started
"""
