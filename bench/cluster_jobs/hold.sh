#!/bin/bash
# A task that holds tfslurm-run's copy of the image on its node while the import benchmark
# runs from it (bench/imports.py): says where the copy is, then sleeps until scancel.
#   hold.sh IMAGE_DIRECTORY [ignored...]
echo "COPY $1"
exec sleep 3600
