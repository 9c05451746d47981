#!/usr/bin/env bash
# Message counts of the thesis's scenarios under several protocols, from the simulator
# (docs/protocols/message-counts.md): one markdown table per scenario, rows = protocol x
# (messages, KiB), columns = nodes. Counts are deterministic (seed 1).
#
# usage: bench/message_counts.sh [BUILD_DIR] [PROTOCOLS...]
#   BUILD_DIR  default build (the release preset)
#   PROTOCOLS  default: single_owner lrc_mw hlrc
set -euo pipefail
build=${1:-build}
shift || true
protocols=("$@")
((${#protocols[@]})) || protocols=(single_owner lrc_mw hlrc)
sim=$build/bin/loom-sim
[[ -x $sim ]] || { echo "message_counts.sh: no $sim (build first)" >&2; exit 2; }
nodes=(2 3 4 5 6 7 8)

for scenario in ep hfp hfp_d nbody is is_128 mandelbrot mandelbrot_pool writers_readers; do
  echo "### $scenario"
  echo
  printf '| protocol | |'; for n in "${nodes[@]}"; do printf ' %s |' "$n"; done; echo
  printf '|---|---|'; for _ in "${nodes[@]}"; do printf -- '---:|'; done; echo
  for p in "${protocols[@]}"; do
    msgs="| \`$p\` | messages |"
    kib="| | KiB |"
    for n in "${nodes[@]}"; do
      json=$("$sim" --scenario "$scenario" --nodes "$n" --protocol "$p" --json)
      m=$(sed -E 's/.*"messages":([0-9]+),"nodes".*/\1/' <<<"$json")
      b=$(sed -E 's/.*"bytes":([0-9]+),"messages":[0-9]+,"nodes".*/\1/' <<<"$json")
      msgs+=" $m |"
      kib+=" $(((b + 512) / 1024)) |"
    done
    echo "$msgs"
    echo "$kib"
  done
  echo
done
