"""Resolution: one task's Slurm job-step environment in, the whole step's Plan out.

The stages, one module each, in the order they run:

    slurm_env  -> read the step's SLURM_* variables into a typed, validated StepEnv
    hetjob     ->   (a heterogeneous step: its components and this task's rank in it)
    placement  -> place ranks on hosts the way Slurm did (block, cyclic, plane)
    roles      -> chief / ps / worker roles and host:port addresses
    ports      ->   (the ports: Slurm's reservation, --port-base, or the job's window)
    network    ->   (the hosts' names on the network chosen with --network)
    gpus       -> CUDA_VISIBLE_DEVICES for each task from the node's GPUs
    plan       -> resolve(): the stages composed into one Plan
    proxy      -> the step's hosts exempted from a proxy gRPC would use (no_grpc_proxy)
    show       -> the Plan as --explain's table and --print-config's JSON

Pure functions of their inputs: nothing here imports TensorFlow, and the only look outside the
process is gpus.detect_node_gpus asking nvidia-smi when Slurm named no GPUs.
"""

from .plan import Options, Plan, Task, resolve

__all__ = ["Options", "Plan", "Task", "resolve"]
