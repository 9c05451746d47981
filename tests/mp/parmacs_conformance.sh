#!/usr/bin/env bash
# The conformance test of Loom's PARMACS macros (docs/parmacs.md): one program built twice, with
# bench/parmacs/c.m4.pthreads (the reference expansion shapes on plain pthreads) and with Loom's
# c.m4.loom, must print the same result. The pthreads build runs with P threads; the Loom build
# runs with P threads on NODES nodes (TPN threads per node) under loomrun, or under mpirun.
# Only stdout is compared (stderr is printed, for the reader: sanitizers and launchers write
# there), without the lines starting with "time:"; it must contain a line ending in "OK".
#
# usage: parmacs_conformance.sh LAUNCHER PTHREADS_PROG LOOM_PROG NODES TPN STDIN [args...]
#   LAUNCHER  loomrun's path, or "mpirun"
#   STDIN     a file given to the program on stdin, or "-" for none
#   "@P@" in the arguments and in the stdin file stands for the number of threads, NODES * TPN.
set -u
launcher=$1; pt=$2; loom=$3; nodes=$4; tpn=$5; input=$6; shift 6
P=$((nodes * tpn))
args=()
for a in "$@"; do args+=("${a//@P@/$P}"); done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ $input == - ]]; then
  : >"$work/in"
else
  sed "s/@P@/$P/g" "$input" >"$work/in" || { echo "FAILED: cannot read $input"; exit 1; }
fi
cd "$work" || exit 1
filter() { grep -v -e '^time:' -e '^loom\[' -e '^loomrun:' || true; }

ref=$("$pt" "${args[@]}" <in 2>err); rc=$?
echo "--- pthreads, $P threads (status $rc):"
echo "$ref"
cat err
if [[ $rc -ne 0 ]]; then echo "FAILED: the pthreads build exited with status $rc"; exit 1; fi

if [[ $launcher == mpirun ]]; then
  command -v mpirun >/dev/null || { echo "SKIP: mpirun is not installed"; exit 77; }
  out=$(timeout 200 mpirun --allow-run-as-root --oversubscribe -n "$nodes" \
        -x LOOM_PM_THREADS_PER_NODE="$tpn" "$loom" "${args[@]}" <in 2>err); rc=$?
else
  out=$("$launcher" -n "$nodes" --timeout 200 --pm-threads-per-node "$tpn" "$loom" "${args[@]}" \
        <in 2>err); rc=$?
fi
echo "--- Loom, $nodes nodes x $tpn threads (status $rc):"
echo "$out"
echo "--- its stderr:"
cat err
if [[ $rc -ne 0 ]]; then echo "FAILED: the Loom run exited with status $rc"; exit 1; fi
if ! grep -qE 'OK$' <<<"$out"; then echo "FAILED: no line ending in OK"; exit 1; fi
if ! diff <(filter <<<"$ref") <(filter <<<"$out"); then
  echo "FAILED: Loom's output differs from the pthreads build's (diff above: < pthreads, > Loom)"
  exit 1
fi
exit 0
