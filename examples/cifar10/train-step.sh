#!/bin/bash
# The body both CIFAR-10 batch scripts share: one `srun apptainer run` step of train.py, then
# `scontrol requeue` of this job (scontrol is on the node, not in the image), up to MAX_REQUEUES
# times, if train.py checkpointed because of a preemption notice, if a parameter-server step
# was interrupted by the loss of its chief or a ps, or if a task found its port taken (exit 75)
# (rank 0's verdict, TFSLURM_RESULT_FILE).
# Preemption notice: Slurm sends SIGUSR1 to this batch shell (#SBATCH --signal=B:USR1@120, or
# `scancel --batch --signal=USR1 JOB`), which creates OUTPUT_DIR/PREEMPT_REQUESTED; train.py
# sees it at its next step. The signal is not sent into the step itself: there it would also
# reach the squashfuse process that mounts the SIF, and kill it.
#   train-step.sh STRATEGY [train.py options]
# Environment: TFSLURM_SIF, CIFAR10_EXAMPLES, CIFAR10_DATA, OUTPUT_DIR (default: one directory
# per job id, which a requeued job keeps), MAX_REQUEUES (default 3), TFSLURM_NODE_CACHE=1 (unpack
# the SIF once per node into node-local storage first: tfslurm-node-cache, containers/README.md),
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
rm -f "$OUTPUT_DIR/PREEMPTED" "$OUTPUT_DIR/PREEMPT_REQUESTED" "$TFSLURM_RESULT_FILE"
if [ "${TFSLURM_NODE_CACHE:-0}" = 1 ]; then
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
requeue() {
    if [ "$restarts" -ge "$MAX_REQUEUES" ]; then
        echo "$1, but already requeued ${restarts} times (MAX_REQUEUES=${MAX_REQUEUES}): not requeuing" >&2
        exit 1
    fi
    echo "$1: requeuing job ${SLURM_JOB_ID} (restart $((restarts + 1)))"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
}
srun "${step_options[@]}" "${launch[@]}" --strategy "$strategy" \
    "$EXAMPLES/train.py" --data-dir "$DATA" --output-dir "$OUTPUT_DIR" "$@" &
step=$!
trap 'echo "caught SIGUSR1: asking train.py to checkpoint"; touch "$OUTPUT_DIR/PREEMPT_REQUESTED"' USR1
# `wait` returns early (status > 128) when the trap runs; wait again until srun has ended.
status=0
while true; do
    wait "$step" && status=0 || status=$?
    kill -0 "$step" 2>/dev/null || break
done
trap - USR1
result=$(cat "$TFSLURM_RESULT_FILE" 2>/dev/null || true)
echo "step ended: srun status ${status}, rank 0: ${result:-no verdict}"
case "$result" in
completed*) status=0 ;; # srun also counts the tasks of lost workers, which the step survived
*"exit 75"* | *"could not start"*) requeue "a port was taken at the start (${result#*: })" ;;
interrupted*) [ "$strategy" = parameter-server ] && requeue "step interrupted (${result#*: })" ;;
esac
if [ "$status" -ne 0 ]; then
    echo "srun step failed with status ${status}" >&2
    exit "$status"
fi
if [ -f "$OUTPUT_DIR/PREEMPTED" ]; then
    requeue "preempted at $(cat "$OUTPUT_DIR/PREEMPTED") after a checkpoint"
fi
