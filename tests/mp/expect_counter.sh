#!/usr/bin/env bash
# Runs a loomrun job with --stats and checks that it succeeds and that a counter summed over
# all nodes is at least MIN (the feature the test is about really ran).
# usage: expect_counter.sh COUNTER MIN LOOMRUN [loomrun args...]
set -u
counter=$1; min=$2; shift 2
out=$("$@" 2>&1); rc=$?
echo "$out"
if [[ $rc -ne 0 ]]; then echo "FAILED: exit status $rc"; exit 1; fi
sum=$(awk -v c="$counter" '$1 == c { s += $2 } END { print s + 0 }' <<<"$out")
echo "$counter summed over the nodes: $sum"
if ((sum < min)); then echo "FAILED: $counter is $sum, expected at least $min"; exit 1; fi
exit 0
