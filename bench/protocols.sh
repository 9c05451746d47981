#!/usr/bin/env bash
# Times the application benchmarks under every built-in protocol (LOOM_PROTOCOL for every
# allocation) on NODES nodes x 1 thread, against the same program on NODES std::threads, and
# prints a markdown table: median seconds of the timed part (each benchmark's own "seconds",
# REPS repetitions inside one job), the ratio to std::threads, and messages sent per node
# (from --stats-json). Every run must print the checksum of the std::threads run.
# usage: bench/protocols.sh [BUILD_DIR] [NODES] [REPS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
nodes=${2:-2}
reps=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name, program, arguments (sizes of about a second per repetition on this machine)
benches=(
  "SOR 2048x50|$build/bench/sor|--n 2048 --iters 50"
  "HFP 2048x1024x30|$build/bench/heat|--form hfp --n 2048 --cols 1024 --iters 30"
  "HFP_D 2048x1024x30|$build/bench/heat|--form hfp_d --n 2048 --cols 1024 --iters 30"
)
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
messages() {  # stats file: messages sent per node (mean)
  python3 -c "
import json,sys
j=json.load(open('$1'))
ns=j['nodes']
tot=sum(n['messages']['total']['sent_msgs'] for n in ns)
print(round(tot/len(ns)))"
}

echo "| benchmark | std::threads ($nodes) s | protocol | Loom ($nodes nodes x 1) s | ratio | messages/node |"
echo "|---|---|---|---|---|---|"
for b in "${benches[@]}"; do
  IFS='|' read -r name prog args <<<"$b"
  # shellcheck disable=SC2086
  base=$("$prog" --mode threads --threads "$nodes" --reps "$reps" --json $args)
  base_s=$(field seconds <<<"$base")
  base_sum=$(field checksum <<<"$base")
  for p in hlrc sc_mrsw erc_sw; do
    # shellcheck disable=SC2086
    out=$("$build/bin/loomrun" -n "$nodes" --timeout 600 --protocol "$p" \
      --stats-json "$work/stats.json" "$prog" --mode loom --threads 1 --reps "$reps" --json $args \
      | grep '^{' | head -1)
    s=$(field seconds <<<"$out")
    sum=$(field checksum <<<"$out")
    if [[ "$sum" != "$base_sum" ]]; then
      echo "protocols.sh: $name under $p: checksum $sum, std::threads $base_sum" >&2
      exit 1
    fi
    ratio=$(python3 -c "print(f'{$s / $base_s:.2f}')")
    echo "| $name | $base_s | $p | $s | $ratio | $(messages "$work/stats.json") |"
  done
done
