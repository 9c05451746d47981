#!/usr/bin/env bash
# Runs a job under Open MPI's mpirun (cluster mode: Loom bootstraps through PMIx), or skips.
# usage: mpirun_job.sh NODES program [args...]
command -v mpirun >/dev/null || { echo "SKIP: mpirun is not installed"; exit 77; }
n=$1; shift
exec timeout 80 mpirun --allow-run-as-root --oversubscribe -n "$n" "$@"
