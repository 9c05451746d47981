#!/usr/bin/env bash
# Times each PARMACS program (apps/parmacs) built three ways, with P threads:
#   pthreads  the same source with bench/parmacs/c.m4.pthreads (plain pthreads, one process)
#   loom-1    loomcc, one node (a plain process)
#   loom-2    loomcc, loomrun -n 2 (P/2 threads per node)
# and prints a markdown table of median wall times (whole process, REPS runs each) with the
# ratios to pthreads. Every run must print its program's "OK" line.
# usage: bench/parmacs.sh [BUILD_DIR] [P] [REPS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
P=${2:-2}
reps=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# program and its arguments after the thread count (sizes a few seconds long on this machine)
programs=(
  "lu 1024 32"
  "radix 4000000"
  "fft 1024"
  "ocean 514 20"
  "nbody 2048 5"
  "taskq 4194304"
)

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_runs() {  # command...: prints the median wall time in seconds
  for ((r = 0; r < reps; r++)); do
    local t0 t1 out
    t0=$(date +%s.%N)
    out=$("$@" 2>&1) || { echo "bench/parmacs.sh: failed: $*" >&2; echo "$out" >&2; exit 1; }
    t1=$(date +%s.%N)
    grep -q ", OK" <<<"$out" || { echo "bench/parmacs.sh: no OK line: $*" >&2; echo "$out" >&2; exit 1; }
    echo "$t1 - $t0" | bc -l
  done | median
}

echo "| program | args | pthreads (s) | Loom 1 node (s) | Loom 2 nodes (s) | 1 node / pthreads | 2 nodes / pthreads |"
echo "|---|---|---:|---:|---:|---:|---:|"
for entry in "${programs[@]}"; do
  read -r name args <<<"$entry"
  [[ -f $src/apps/parmacs/$name.C ]] || continue
  m4 -s -Ulen -Uindex "$src/bench/parmacs/c.m4.pthreads" "$src/apps/parmacs/$name.C" > "${name}_pt.c"
  cc -O2 -I"$src/bench/parmacs" -o "${name}_pt" "${name}_pt.c" -lpthread -lm
  m4 -s -Ulen -Uindex "$("$build/bin/loomcc" --m4-macros)" "$src/apps/parmacs/$name.C" > "$name.c"
  "$build/bin/loomcc" -O2 -o "$name" "$name.c"
  # shellcheck disable=SC2086
  tp=$(time_runs "./${name}_pt" "$P" $args)
  # shellcheck disable=SC2086
  t1=$(time_runs "./$name" "$P" $args)
  # shellcheck disable=SC2086
  t2=$(time_runs "$build/bin/loomrun" -n 2 --pm-threads-per-node $((P / 2)) "./$name" "$P" $args)
  printf '| %s | %s | %.3f | %.3f | %.3f | %.2f | %.2f |\n' "$name" "${args:-(defaults)}" "$tp" "$t1" "$t2" \
    "$(echo "$t1 / $tp" | bc -l)" "$(echo "$t2 / $tp" | bc -l)"
done
