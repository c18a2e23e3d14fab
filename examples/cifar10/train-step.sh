#!/bin/bash
# The body the CIFAR-10 batch scripts share: train.py as one step through tfslurm-run, which
# copies the SIF onto each node first where Slurm's signals would unmount it, keeps rank 0's
# verdict in the run directory, and requeues the job after the time limit's warning or an
# interruption (Slurm requeues what it preempts): docs/failures.md, `tfslurm-run --help`.
#   train-step.sh STRATEGY [train.py options]
# Environment: TFSLURM_SIF (default /data/tf-slurm.sif), CIFAR10_EXAMPLES, CIFAR10_DATA,
# OUTPUT_DIR (train.py's output and the run directory; default one per job id, which a requeued
# job keeps: give a resubmitted job the last one's to go on from its checkpoint), and
# tfslurm-run's own settings (TFSLURM_MAX_REQUEUES, TFSLURM_COPY, TFSLURM_ENTRY: e.g.
# `tfslurm-entry` where the kit is installed on the nodes, as on the dev cluster's Slurm 22.05).
set -euo pipefail
strategy=$1
shift
examples=${CIFAR10_EXAMPLES:-/data/examples/cifar10}
output=${OUTPUT_DIR:-/data/runs/${SLURM_JOB_NAME}-${SLURM_JOB_ID}}
launcher=$(command -v tfslurm-run || echo /data/bin/tfslurm-run)
exec "$launcher" --run-dir "$output" "${TFSLURM_SIF:-/data/tf-slurm.sif}" --strategy "$strategy" \
    "$examples/train.py" --data-dir "${CIFAR10_DATA:-/data/cifar10}" --output-dir "$output" "$@"
