"""The step's supervision: rank 0 (the head) and every other task (a member) over the control
connections, so that the step's tasks start together and end together. The parts:

    event      -> the base of what supervision hands around: messages and happenings
    protocol   -> the words on the wire and the conversation: one type per message, and each
                  side's Connection (sans I/O: framing, the order, one protocol error)
    control    -> rank 0's end of the connections: one selector, every member's lines as events;
                  a hello without the secret's proof is refused
    dial       -> a member's end: reaching rank 0, answering its challenge; a blocking Channel
    secret     -> the step's secret, which every check-in proves (nonce, MAC); where it is from
    inputs     -> what the head is given (Step; a member's Seat is member.py's)
    head       -> rank 0: every member checks in and reaches its peers, then the program runs;
                  one failure stops the step, the chief's end stops the servers; its phase
    startup    -> rank 0's part from the first hello to the programs' start
    books      -> rank 0's counts: who checked in, reached, freed its port; until when
    member     -> every other task: checks in, starts and ends as the head says
    program    -> the program (or server) as a child, signals sent to its group (or exec'ed)
    reach      -> the start-up check: each task reaches the TensorFlow ports of its peers
    notice     -> Slurm's signals: its notice (preemption, time limit, requeue) as one SIGTERM
    preempted  -> rank 0's view of a step Slurm is stopping: who ended how, the verdict
    outcome    -> exit statuses, failures and the step's verdict (--result-file)
"""
