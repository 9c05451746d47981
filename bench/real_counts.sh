#!/usr/bin/env bash
# Message counts of the thesis's applications in real runs (docs/protocols/message-counts.md,
# "Real runs"): each program on 2..8 nodes, one thread per node, under several protocols; one
# markdown table per program, rows = protocol x (messages, KB), columns = nodes, each cell the
# median of REPS runs (messages and bytes taken separately).
#
# is and ep report the messages and payload bytes of all nodes between their start and end
# barriers (their --json "messages" and "bytes": set-up and start-up left out, as in the
# simulator's scenarios); heat and the PARMACS N-body report none themselves, so their rows count
# the whole job (loomrun --stats-json, start-up included).
#
# usage: [ONLY=REGEX] bench/real_counts.sh [BUILD_DIR] [REPS] [PROTOCOLS...]
#   BUILD_DIR  default build (the release preset)
#   REPS       default 3
#   PROTOCOLS  default: single_owner lrc_mw hybrid
#   ONLY       run only the programs whose name matches the (extended) regular expression
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
reps=${2:-3}
shift $(($# > 2 ? 2 : $#))
protocols=("$@")
((${#protocols[@]})) || protocols=(single_owner lrc_mw hybrid)
loomrun=$build/bin/loomrun
[[ -x $loomrun ]] || { echo "real_counts.sh: no $loomrun (build first)" >&2; exit 2; }
nodes=(2 3 4 5 6 7 8)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name | kind (json: the program's --json fields; job: loomrun --stats-json) | command
programs=(
  "EP 2^24 pairs (Table 5.2)|json|$build/bench/ep --mode loom --json"
  "HFP_D 512x1024 x 30 (Table 5.3)|job|$build/bench/heat --form hfp_d --mode loom --n 512 --cols 1024 --iters 30"
  "HFP 512x1024 x 30 (Table 5.4)|job|$build/bench/heat --form hfp --mode loom --n 512 --cols 1024 --iters 30"
  "N-body 1024 x 3, PARMACS direct sum (Table 5.5)|job|$build/apps/parmacs/nbody NODES 1024 3"
  "IS_1024 2^23 keys x 10 (Table 5.6)|json|$build/bench/is --mode loom --keys 8388608 --bmax 1024 --json"
  "IS_128 2^23 keys x 10 (Table 5.7)|json|$build/bench/is --mode loom --keys 8388608 --bmax 128 --json"
)

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# run NODES PROTOCOL KIND COMMAND: prints "messages bytes" of one run
run() {
  local n=$1 proto=$2 kind=$3 cmd=${4//NODES/$1} out
  # shellcheck disable=SC2086
  out=$("$loomrun" -n "$n" --timeout 300 --protocol "$proto" --stats-json "$work/s.json" $cmd 2>&1) ||
    { echo "real_counts.sh: failed: $n nodes, $proto: $cmd" >&2; echo "$out" >&2; exit 1; }
  if [[ $kind == json ]]; then
    python3 -c 'import json, sys
j = json.loads([l for l in sys.stdin if l.startswith("{")][-1])
print(j["messages"], j["bytes"])' <<<"$out"
  else
    grep -qE ", OK|checksum" <<<"$out" || { echo "real_counts.sh: no result line: $cmd" >&2; echo "$out" >&2; exit 1; }
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(sum(n["messages"]["total"]["sent_msgs"] for n in d["nodes"]),
      sum(n["messages"]["total"]["sent_bytes"] for n in d["nodes"]))' "$work/s.json"
  fi
}

for entry in "${programs[@]}"; do
  IFS='|' read -r name kind cmd <<<"$entry"
  [[ -z ${ONLY:-} || $name =~ $ONLY ]] || continue
  echo "### $name"
  echo
  printf '| protocol | |'; for n in "${nodes[@]}"; do printf ' %s |' "$n"; done; echo
  printf '|---|---|'; for _ in "${nodes[@]}"; do printf -- '---:|'; done; echo
  for p in "${protocols[@]}"; do
    msgs="| \`$p\` | messages |"
    kb="| | KB |"
    for n in "${nodes[@]}"; do
      : >"$work/runs"
      for ((r = 0; r < reps; r++)); do run "$n" "$p" "$kind" "$cmd" >>"$work/runs"; done
      msgs+=" $(awk '{print $1}' "$work/runs" | median) |"
      kb+=" $(awk '{print $2}' "$work/runs" | median | awk '{printf "%.1f", $1 / 1000}') |"
    done
    echo "$msgs"
    echo "$kb"
  done
  echo
done
