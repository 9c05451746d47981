#!/usr/bin/env bash
# Runs a PARMACS program on NODES nodes with TPN threads per node and checks that it prints the
# same result line as the same program run as a plain process with one thread (the 1-node
# answer), and that the line ends with ", OK".
# usage: parmacs_compare.sh LOOMRUN PROGRAM NODES TPN [program args after the thread count...]
set -u
loomrun=$1; prog=$2; nodes=$3; tpn=$4; shift 4
threads=$((nodes * tpn))
ref=$("$prog" 1 "$@" 2>&1); rc=$?
echo "reference (1 thread, plain process): $ref"
if [[ $rc -ne 0 ]]; then echo "FAILED: the reference run exited with status $rc"; exit 1; fi
out=$("$loomrun" -n "$nodes" --timeout 200 --pm-threads-per-node "$tpn" "$prog" "$threads" "$@" 2>&1)
rc=$?
echo "$nodes nodes x $tpn threads: $out"
if [[ $rc -ne 0 ]]; then echo "FAILED: exit status $rc"; exit 1; fi
line=$(grep -E ", OK$" <<<"$out")
if [[ -z $line ]]; then echo "FAILED: no line ending in ', OK'"; exit 1; fi
if [[ $line != "$ref" ]]; then echo "FAILED: the result differs from the 1-node answer"; exit 1; fi
exit 0
