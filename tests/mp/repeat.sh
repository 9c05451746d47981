#!/usr/bin/env bash
# Runs a command N times; fails at the first run that fails (non-zero status or a line with
# FAILED), printing that run's output. For races that show in some runs only.
# usage: repeat.sh N command [args...]
set -u
n=$1; shift
for ((i = 1; i <= n; i++)); do
  out=$("$@" 2>&1); rc=$?
  if ((rc != 0)) || grep -q FAILED <<<"$out"; then
    echo "$out"
    echo "FAILED: run $i of $n (exit status $rc)"
    exit 1
  fi
done
echo "ok: $n runs"
