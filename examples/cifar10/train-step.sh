#!/bin/bash
# The body both CIFAR-10 batch scripts share: one `srun apptainer run` step of train.py, then
# `scontrol requeue` of this job (scontrol is on the node, not in the image), up to MAX_REQUEUES
# times, if Slurm's notice stopped the step (the time limit's #SBATCH --signal=TERM@120, or
# `scancel --signal=TERM JOB`: train.py checkpoints at a step all workers agree on), if a
# parameter-server step was interrupted by the loss of its chief or a ps, or if a task found its
# port taken (exit 75) (rank 0's verdict, TFSLURM_RESULT_FILE). Slurm requeues a job it
# preempts itself (#SBATCH --requeue).
#   train-step.sh STRATEGY [train.py options]
# Environment: TFSLURM_SIF, CIFAR10_EXAMPLES, CIFAR10_DATA, OUTPUT_DIR (default: one directory
# per job id, which a requeued job keeps), MAX_REQUEUES (default 3), TFSLURM_NODE_CACHE=1 (unpack
# the SIF once per node into node-local storage first, tfslurm-node-cache, so that Slurm's
# signals, which reach every process of the step, cannot take the image away from the tasks
# before they save: docs/failures.md; off here, where the dev cluster's tests run several jobs
# at once on nodes whose /tmp is memory),
# TFSLURM_LAUNCH (how each task starts the kit, default `apptainer run $TFSLURM_SIF`; e.g.
# `tfslurm-entry` where it is installed on the nodes instead, as on the dev cluster's Slurm 22.05).
set -euo pipefail
strategy=$1
shift
SIF=${TFSLURM_SIF:-/data/tf-slurm.sif}
EXAMPLES=${CIFAR10_EXAMPLES:-/data/examples/cifar10}
DATA=${CIFAR10_DATA:-/data/cifar10}
OUTPUT_DIR=${OUTPUT_DIR:-/data/runs/${SLURM_JOB_NAME}-${SLURM_JOB_ID}}
MAX_REQUEUES=${MAX_REQUEUES:-3}
restarts=${SLURM_RESTART_COUNT:-0}
mkdir -p "$OUTPUT_DIR"
# Rank 0 writes how the step ended here (completed / interrupted / failed, tfslurm-entry --help).
export TFSLURM_RESULT_FILE="$OUTPUT_DIR/step-result"
rm -f "$TFSLURM_RESULT_FILE"
if [ -z "${TFSLURM_LAUNCH:-}" ] && [ "${TFSLURM_NODE_CACHE:-0}" = 1 ]; then
    node_cache=$(command -v tfslurm-node-cache || echo /data/bin/tfslurm-node-cache)
    SIF=$("$node_cache" unpack "$SIF")
    trap '"$node_cache" remove' EXIT
fi
# In a heterogeneous job (heterogeneous.sbatch) the step spans every component; a plain srun
# would run in the first one only.
step_options=()
if [ "${SLURM_HET_SIZE:-1}" -le 1 ]; then
    where="${SLURM_NTASKS} tasks on ${SLURM_JOB_NODELIST}"
else  # no SLURM_NTASKS in a het job's batch script, and SLURM_JOB_NODELIST is component 0's
    step_options=(--het-group="0-$((SLURM_HET_SIZE - 1))")
    where="het groups 0-$((SLURM_HET_SIZE - 1)) on"
    for ((group = 0; group < SLURM_HET_SIZE; group++)); do
        nodes=SLURM_JOB_NODELIST_HET_GROUP_$group
        where+=" ${!nodes}"
    done
fi
read -r -a launch <<< "${TFSLURM_LAUNCH:-apptainer run $SIF}"
echo "job ${SLURM_JOB_ID} (restart ${restarts}): ${where}, output ${OUTPUT_DIR}, runs ${launch[*]}"
if [ "$strategy" = parameter-server ]; then
    # A parameter-server step outlives a lost worker (tfslurm-entry --worker-restarts): Slurm
    # must not end the step for one task's exit (so no --kill-on-bad-exit) nor the job for one
    # node's failure (--no-kill, with #SBATCH --no-kill). tfslurm-entry still stops the whole
    # step within seconds when the chief or a ps is lost.
    step_options+=(--no-kill)
else
    # --kill-on-bad-exit=1: one failed task ends the whole step instead of leaving the others
    # waiting forever on a collective. A lost node fails the job (NODE_FAIL) and Slurm requeues
    # it (#SBATCH --requeue); the next run resumes from the last checkpoint.
    step_options+=(--kill-on-bad-exit=1)
fi
# The job to requeue: in a job array, this array task alone (its SLURM_JOB_ID may be the
# array's own id, which scontrol takes for every task of the array).
job=${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID:-}}
job=${job:-$SLURM_JOB_ID}
requeue() {
    if [ "$restarts" -ge "$MAX_REQUEUES" ]; then
        echo "$1, but already requeued ${restarts} times (MAX_REQUEUES=${MAX_REQUEUES}): not requeuing" >&2
        exit 1
    fi
    echo "$1: requeuing job ${SLURM_JOB_ID} (restart $((restarts + 1)))"
    scontrol requeue "$job"
    exit 0
}
status=0
srun "${step_options[@]}" "${launch[@]}" --strategy "$strategy" \
    "$EXAMPLES/train.py" --data-dir "$DATA" --output-dir "$OUTPUT_DIR" "$@" || status=$?
result=$(cat "$TFSLURM_RESULT_FILE" 2>/dev/null || true)
echo "step ended: srun status ${status}, rank 0: ${result:-no verdict}"
case "$result" in
completed*) status=0 ;; # srun also counts the tasks of lost workers, which the step survived
preempted*) # a job that Slurm preempts (PreemptTime set) Slurm requeues itself
    if ! scontrol show job "$job" | grep -q "PreemptTime=[0-9]"; then
        requeue "stopped by Slurm's notice (${result#*: })"
    fi
    exit 0
    ;;
*"exit 75"* | *"could not start"*) requeue "a port was taken at the start (${result#*: })" ;;
interrupted*) [ "$strategy" = parameter-server ] && requeue "step interrupted (${result#*: })" ;;
esac
if [ "$status" -ne 0 ]; then
    echo "srun step failed with status ${status}" >&2
    exit "$status"
fi
