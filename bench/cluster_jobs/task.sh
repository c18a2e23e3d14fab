#!/bin/bash
# One task of a benchmark step: stamp when Slurm started it, `apptainer run` the image (the
# unchanged kit: its runscript execs tfslurm-entry), stamp when that ended.
#   task.sh IMAGE [tfslurm-entry arguments...]
# PYTHONPATH puts hook/sitecustomize.py into the container's Python, which stamps when the
# entrypoint's interpreter started (i.e. when apptainer had the container up).
image=$1
shift
stamp() {
    echo "BENCH {\"event\":\"$1\",\"t\":$EPOCHREALTIME,\"rank\":$SLURM_PROCID,\"host\":\"$SLURMD_NODENAME\"${2:+,$2}}"
}
stamp task_start
PYTHONPATH=/data/bench/hook apptainer run "$image" "$@"
status=$?
stamp task_end "\"status\":$status"
exit $status
