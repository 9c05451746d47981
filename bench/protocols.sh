#!/usr/bin/env bash
# Runs the application benchmarks under every built-in protocol on 1, 2 and 4 nodes and prints a
# markdown table: median wall time (whole job, REPS runs), median messages and MiB sent (all
# nodes, from --stats-json; each median taken on its own), and the time relative to hlrc at the
# same node count (when hlrc is the first protocol). Every run must
# print its program's result line (SOR/HFP/Mandelbrot checksums, PARMACS ", OK").
#
# The allocations a program makes without naming a protocol use the job's default
# (loomrun --protocol / LOOM_PROTOCOL); a PARMACS program's static segment stays HLRC.
# Threads: 4 in all (4 x 1 node, 2 x 2 nodes, 1 x 4 nodes) on whatever cores the machine has.
#
# usage: [ONLY=REGEX] bench/protocols.sh [BUILD_DIR] [REPS] [PROTOCOLS...]
#   ONLY: run only the programs whose name matches the (extended) regular expression.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
reps=${2:-3}
shift $(($# > 2 ? 2 : $#))
protocols=("$@")
((${#protocols[@]})) || protocols=(hlrc sc_mrsw erc_sw lrc_mw single_owner hybrid hlrc_update)
loomrun=$build/bin/loomrun
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name | kind | command after "loomrun ... " with THREADS for the threads per node [| runs per
# REPS]. Mandelbrot takes 3x the runs: its task pool hands blocks out in a different order every
# run, and its message counts vary by +-30% from run to run (under every protocol).
programs=(
  "SOR 1024^2 x 20|loom|$build/bench/sor --mode loom --threads THREADS --n 1024 --iters 20"
  "HFP 1024x512 x 30|loom|$build/bench/heat --form hfp --mode loom --threads THREADS --n 1024 --cols 512 --iters 30"
  "HFP_D 1024x512 x 30|loom|$build/bench/heat --form hfp_d --mode loom --threads THREADS --n 1024 --cols 512 --iters 30"
  "Mandelbrot 1440x960 whole set|loom|$build/bench/mandelbrot --mode loom --threads THREADS --region -2,0.5,-1.25,1.25 --width 1440 --height 960 --iters 2048|3"
  "IS_1024 2^23 keys x 10|loom|$build/bench/is --mode loom --threads THREADS --keys 8388608 --bmax 1024"
  "IS_128 2^23 keys x 10|loom|$build/bench/is --mode loom --threads THREADS --keys 8388608 --bmax 128"
  "EP 2^26 pairs|loom|$build/bench/ep --mode loom --threads THREADS --pairs-log2 26"
  "LU 512, blocks of 16|pm|$build/apps/parmacs/lu 4 512 16"
  "N-body 1024 x 3|pm|$build/apps/parmacs/nbody 4 1024 3"
  "radix sort 1000000|pm|$build/apps/parmacs/radix 4 1000000"
  "FFT 2^10 x 2^10|pm|$build/apps/parmacs/fft 4 1024"
  "ocean 258 x 10|pm|$build/apps/parmacs/ocean 4 258 10"
)

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# run NODES PROTOCOL KIND COMMAND: prints "seconds messages bytes" of one run
run() {
  local nodes=$1 proto=$2 kind=$3 cmd=$4 tpn=$((4 / $1)) t0 t1 out
  cmd=${cmd//THREADS/$tpn}
  local extra=()
  [[ $kind == pm ]] && extra=(--pm-threads-per-node "$tpn")
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  out=$("$loomrun" -n "$nodes" --timeout 300 --protocol "$proto" --stats-json "$work/s.json" \
    "${extra[@]}" $cmd 2>&1) || { echo "protocols.sh: failed: $nodes nodes, $proto: $cmd" >&2; echo "$out" >&2; exit 1; }
  t1=$(date +%s.%N)
  grep -qE ", OK|checksum" <<<"$out" || { echo "protocols.sh: no result line: $cmd" >&2; echo "$out" >&2; exit 1; }
  python3 - "$work/s.json" "$(echo "$t1 - $t0" | bc -l)" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
m = sum(n["messages"]["total"]["sent_msgs"] for n in d["nodes"])
b = sum(n["messages"]["total"]["sent_bytes"] for n in d["nodes"])
print(sys.argv[2], m, b)
EOF
}

header="| program | nodes |"
sep="|---|---:|"
for p in "${protocols[@]}"; do
  header+=" $p s | $p msgs | $p MiB |"
  sep+="---:|---:|---:|"
done
[[ ${protocols[0]} == hlrc ]] && for p in "${protocols[@]:1}"; do header+=" $p / hlrc |"; sep+="---:|"; done
echo "$header"
echo "$sep"
for entry in "${programs[@]}"; do
  IFS='|' read -r name kind cmd factor <<<"$entry"
  runs=$((reps * ${factor:-1}))
  [[ -z ${ONLY:-} || $name =~ $ONLY ]] || continue
  for nodes in 1 2 4; do
    row="| $name | $nodes |"
    declare -A secs=()
    for p in "${protocols[@]}"; do
      : > "$work/runs"
      for ((r = 0; r < runs; r++)); do run "$nodes" "$p" "$kind" "$cmd" >> "$work/runs"; done
      # medians of each column over the runs (messages vary from run to run with timing)
      s=$(awk '{print $1}' "$work/runs" | median)
      m=$(awk '{print $2}' "$work/runs" | median)
      b=$(awk '{print $3}' "$work/runs" | median)
      secs[$p]=$s
      row+=$(printf ' %.3f | %d | %.1f |' "$s" "$m" "$(echo "$b / 1048576" | bc -l)")
    done
    if [[ ${protocols[0]} == hlrc ]]; then
      for p in "${protocols[@]:1}"; do row+=$(printf ' %.2f |' "$(echo "${secs[$p]} / ${secs[hlrc]}" | bc -l)"); done
    fi
    echo "$row"
    unset secs
  done
done
