#!/usr/bin/env bash
# Whole-program benchmark of Loom against pthreads: the programs of apps/parmacs/splash (written
# in the SPLASH-3 conventions, at the suites' standard sizes), each built twice by the build
# (c.m4.pthreads + cc, and c.m4.loom + loomcc), run with P = 2 threads three ways:
#   pthreads   plain pthreads, one process                        (the baseline)
#   loom 1x2   the Loom build as a plain process: 1 node, 2 threads
#   loom 2x1   loomrun -n 2: 2 nodes x 1 thread
# Runs are interleaved (pthreads, 1x2, 2x1, pthreads, ...); each time is the median of REPS whole
# runs (wall time of the process, start-up included). Every run must print its "OK" line. Beside
# the times: the ratios to pthreads, and counters of the last 2x1 run (summed over both nodes):
# home queries, twins, diffs, remote lock acquires, page requests and bytes sent.
#
# usage: bench/parmacs.sh [--build DIR] [--reps N] [--only a,b,...] [--out PREFIX] [--sizes test]
#   writes a markdown table to stdout, and PREFIX.csv and PREFIX.json (default:
#   parmacs-<date>) for loom-report and for bench/RESULTS.md.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$src/build
reps=3
only=""
out="parmacs-$(date +%Y%m%d-%H%M%S)"
sizes=bench
while (($#)); do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    *) echo "bench/parmacs.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin=$build/apps/parmacs/splash
loomrun=$build/bin/loomrun
P=2

# name | stdin file or - | arguments ("@P@" is the thread count), at the standard size
bench_programs=(
  "fft|-|-m24 -p@P@ -t"
  "lu|-|-n2048 -p@P@ -b16 -t"
  "radix|-|-p@P@ -n33554432 -t"
  "ocean|-|-n2050 -p@P@ -i4"
  "water|$src/apps/parmacs/splash/water/inputs/bench|"
  "barnes|$src/apps/parmacs/splash/barnes/inputs/bench|"
  "tasks|-|-p@P@ -n4000 -i10 -d8"
)
# the same at the test sizes (a quick check of the script itself)
test_programs=(
  "fft|-|-m16 -p@P@ -t"
  "lu|-|-n512 -p@P@ -b16 -t"
  "radix|-|-p@P@ -n262144 -t"
  "ocean|-|-n130 -p@P@ -i4"
  "water|$src/apps/parmacs/splash/water/inputs/test|"
  "barnes|$src/apps/parmacs/splash/barnes/inputs/test|"
  "tasks|-|-p@P@ -n512 -i2 -d5"
)
if [[ $sizes == test ]]; then programs=("${test_programs[@]}"); else programs=("${bench_programs[@]}"); fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# run LABEL STDIN command...: runs once, checks the OK line, appends the wall time to $work/LABEL
run() {
  local label=$1 input=$2; shift 2
  local t0 t1 o
  t0=$(date +%s.%N)
  if ! o=$("$@" <"$input" 2>&1); then
    echo "bench/parmacs.sh: failed ($label): $*" >&2; echo "$o" | tail -20 >&2; exit 1
  fi
  t1=$(date +%s.%N)
  grep -qE 'OK$' <<<"$o" || { echo "bench/parmacs.sh: no OK line ($label): $*" >&2; echo "$o" | tail -20 >&2; exit 1; }
  echo "$t1 - $t0" | bc -l >>"$work/$label"
}

rows=()
echo "| program | pthreads P=2 (s) | Loom 1x2 (s) | Loom 2x1 (s) | 1x2 / pthreads | **2x1 / pthreads** | home queries | twins | diffs | remote lock acquires | page requests | MB sent |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for entry in "${programs[@]}"; do
  IFS='|' read -r name input args <<<"$entry"
  if [[ -n $only && ",$only," != *",$name,"* ]]; then continue; fi
  [[ -x $bin/$name && -x $bin/${name}_pthreads ]] || { echo "bench/parmacs.sh: $bin/$name not built" >&2; continue; }
  args=${args//@P@/$P}
  if [[ $input == - ]]; then : >"$work/in"; else sed "s/@P@/$P/g" "$input" >"$work/in"; fi
  rm -f "$work"/{pt,l1,l2}
  for ((r = 0; r < reps; r++)); do
    # shellcheck disable=SC2086
    run pt "$work/in" "$bin/${name}_pthreads" $args
    # shellcheck disable=SC2086
    run l1 "$work/in" "$bin/$name" $args
    # shellcheck disable=SC2086
    run l2 "$work/in" "$loomrun" -n 2 --pm-threads-per-node 1 --stats-json "$work/stats.json" "$bin/$name" $args
  done
  tp=$(median <"$work/pt"); t1=$(median <"$work/l1"); t2=$(median <"$work/l2")
  counters=$(python3 - "$work/stats.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
tot = {"hq": 0, "twins": 0, "diffs": 0, "remote_locks": 0, "page_req": 0, "bytes": 0}
for n in d["nodes"]:
    if not n:
        continue
    m, dsm = n["messages"], n["dsm"]
    tot["hq"] += dsm.get("home_queries", 0)
    tot["twins"] += dsm.get("twins", 0)
    tot["diffs"] += dsm.get("diffs_created", 0)
    tot["remote_locks"] += dsm.get("lock_acquires_remote", 0)
    tot["page_req"] += m["by_type"].get("hlrc.page_request", {}).get("sent_msgs", 0)
    tot["bytes"] += m["total"]["sent_bytes"]
print(tot["hq"], tot["twins"], tot["diffs"], tot["remote_locks"], tot["page_req"], tot["bytes"])
PY
)
  read -r hq twins diffs rlocks preq bytes <<<"$counters"
  r1=$(echo "$t1 / $tp" | bc -l); r2=$(echo "$t2 / $tp" | bc -l)
  printf '| %s | %.3f | %.3f | %.3f | %.2f | **%.2f** | %s | %s | %s | %s | %s | %.1f |\n' "$name" "$tp" "$t1" "$t2" \
    "$r1" "$r2" "$hq" "$twins" "$diffs" "$rlocks" "$preq" "$(echo "$bytes / 1000000" | bc -l)"
  rows+=("$name,$(printf '%.4f,%.4f,%.4f,%.4f,%.4f' "$tp" "$t1" "$t2" "$r1" "$r2"),$hq,$twins,$diffs,$rlocks,$preq,$bytes")
done
{
  echo "program,pthreads_s,loom_1x2_s,loom_2x1_s,ratio_1x2,ratio_2x1,home_queries,twins,diffs,remote_lock_acquires,page_requests,bytes_sent"
  printf '%s\n' "${rows[@]}"
} >"$out.csv"
python3 - "$out.csv" "$out.json" "$reps" <<'PY'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows:
    for k, v in r.items():
        if k != "program":
            r[k] = float(v) if "." in v else int(v)
json.dump({"benchmark": "parmacs", "threads": 2, "reps": int(sys.argv[3]), "rows": rows},
          open(sys.argv[2], "w"), indent=2)
PY
echo
echo "(medians of $reps runs; tables also in $out.csv and $out.json)"
