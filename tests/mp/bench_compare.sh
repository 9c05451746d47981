#!/usr/bin/env bash
# Runs an application benchmark (bench/*.cc: --mode seq|loom, --json with a "checksum") in seq
# mode, then on Loom with NODES nodes x TPN threads under PROTOCOL, and checks that both exit 0
# and print the same checksum.
# usage: bench_compare.sh LOOMRUN PROTOCOL NODES TPN PROGRAM [program args...]
set -u
loomrun=$1; protocol=$2; nodes=$3; tpn=$4; prog=$5; shift 5
checksum() { grep -oE '"checksum":("[^"]*"|[^,}]*)' <<<"$1"; }
ref=$("$prog" --mode seq --json "$@" 2>&1); rc=$?
echo "reference (seq): $ref"
if [[ $rc -ne 0 ]]; then echo "FAILED: the reference run exited with status $rc"; exit 1; fi
out=$("$loomrun" -n "$nodes" --timeout 50 --protocol "$protocol" "$prog" --mode loom \
  --threads "$tpn" --json "$@" 2>&1)
rc=$?
echo "$nodes nodes x $tpn threads, $protocol: $out"
if [[ $rc -ne 0 ]]; then echo "FAILED: exit status $rc"; exit 1; fi
want=$(checksum "$ref"); got=$(checksum "$out")
if [[ -z $want || -z $got ]]; then echo "FAILED: no checksum in the output"; exit 1; fi
if [[ $got != "$want" ]]; then echo "FAILED: $got differs from the seq run's $want"; exit 1; fi
exit 0
