#!/bin/sh
# Slurm Epilog of the dev cluster: root, on every node of a job, once the job has ended however
# it ended (completed, failed, cancelled, timed out). Removes the job's per-node image cache
# (playbooks/roles/tfslurm_launcher/files/tfslurm-node-cache) from its default place, as a real
# cluster's per-job /tmp (job_container/tmpfs) would. It always exits 0: a failing Epilog
# drains the node.
if [ -n "${SLURM_JOB_ID:-}" ]; then
    rm -rf "/tmp/tfslurm-cache-$SLURM_JOB_ID" "/tmp/tfslurm-cache-$SLURM_JOB_ID.partial"
fi
exit 0
