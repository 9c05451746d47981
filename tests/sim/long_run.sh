#!/usr/bin/env bash
# The checker's long run (docs/sim.md#the-long-run): loom-sim --check over many programs per
# protocol, in chunks, on every CPU, resumable.
#
#   tests/sim/long_run.sh [options] PROTOCOL...      (PROTOCOL: a name, or "all")
#     --programs N     programs per protocol (default 100000)
#     --seed S         the first program's seed (default 1000000); programs S .. S+N-1
#     --chunk C        programs per loom-sim run (default 1000)
#     --jobs J         loom-sim runs at once, each pinned to a CPU of its own (default: the CPUs)
#     --settings M     vary (default) or default: loom-sim --settings
#     --dir D          where the results go (default build/long-run); run again to resume
#     --build B        the build directory holding bin/loom-sim (default build)
#     --summary        print the summary of what D holds and stop
#     -- ARGS...       more loom-sim arguments for every run (a fixed setting, a mutant)
#
# Each chunk's result is one file in D/PROTOCOL/: run-FIRST.json (loom-sim's JSON and the run's
# seconds) when every program from FIRST to the chunk's end passed, or run-FIRST.fail-SEED (what
# loom-sim printed) when program SEED failed; the programs after SEED then run as a chunk of their
# own. A run that is stopped leaves nothing, so running the same command again resumes where it
# stopped (and a larger --programs extends a finished run). The loom-sim runs are niced (19).
# Exit status: 0 if no program failed, 1 if one did, 2 on a usage error.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

programs=100000 seed=1000000 chunk=1000 jobs=$(nproc) mode=vary dir=build/long-run build=build
summary_only=0
protocols=() extra=()
usage() { sed -n '4,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case $1 in
    --programs) programs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --chunk) chunk=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --settings) mode=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --summary) summary_only=1; shift ;;
    -h|--help) usage ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "long_run.sh: unknown option $1" >&2; usage ;;
    *) protocols+=("$1"); shift ;;
  esac
done
for n in "$programs" "$seed" "$chunk" "$jobs"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "long_run.sh: '$n' is not a number" >&2; exit 2; }
done
((chunk > 0 && jobs > 0)) || { echo "long_run.sh: --chunk and --jobs must be positive" >&2; exit 2; }
[[ $mode == vary || $mode == default ]] || { echo "long_run.sh: --settings vary|default" >&2; exit 2; }
sim=$build/bin/loom-sim
[[ -x $sim ]] || { echo "long_run.sh: no $sim (build the loom-sim target)" >&2; exit 2; }
if [[ ${protocols[*]:-} == all || ${#protocols[@]} -eq 0 && $summary_only -eq 1 ]]; then
  protocols=(hlrc sc_mrsw erc_sw lrc_mw single_owner hybrid hlrc_update)
fi
((${#protocols[@]})) || { echo "long_run.sh: name at least one protocol (or all)" >&2; usage; }
mkdir -p "$dir" || exit 2

# A directory holds one run: the same first seed, chunk size and settings mode (the chunks' files
# are named by their first seeds).
config="seed=$seed chunk=$chunk settings=$mode${extra[*]:+ args=${extra[*]}}"
if [[ -f $dir/config ]]; then
  if [[ $(cat "$dir/config") != "$config" ]]; then
    echo "long_run.sh: $dir holds a run with $(cat "$dir/config"), not $config (use another --dir)" >&2
    exit 2
  fi
else
  echo "$config" >"$dir/config"
fi

# Prints the summary of every protocol's results (and with "progress", one line per protocol).
summarize() {
  python3 - "$dir" "$seed" "$programs" "$1" "${protocols[@]}" <<'PY'
import glob, json, os, re, sys
d, first, want, what, protocols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
progress = []
for p in protocols:
    runs = glob.glob(os.path.join(d, p, "run-*.json"))
    fails = sorted(glob.glob(os.path.join(d, p, "run-*.fail-*")),
                   key=lambda f: int(f.rsplit("-", 1)[1]))
    n = reads = msgs = litmus = 0
    secs = 0.0
    drawn = {}
    for f in runs:
        with open(f) as fh:
            j = json.loads(fh.readline())
            secs += float(fh.readline() or 0)
        n += j["checked"]; reads += j["reads_checked"]; msgs += j["messages"]; litmus += j["litmus"]
        for name, counts in j.get("settings_drawn", {}).items():
            for v, c in counts.items():
                drawn.setdefault(name, {}).setdefault(int(v), 0)
                drawn[name][int(v)] += c
    for f in fails:
        m = re.search(r"run-(\d+)\.fail-(\d+)$", f)
        n += int(m.group(2)) - int(m.group(1)) + 1  # those before it passed; it failed
    if what == "progress":
        progress.append(f"{p} {n}/{want}" + (f" ({len(fails)} FAILED)" if fails else ""))
        continue
    rate = n / secs if secs else 0
    print(f"{p}: {n} programs ({litmus} litmus) from seed {first}, {reads} reads verified, "
          f"{msgs} messages, {len(fails)} failed; {secs:.0f} s of loom-sim runs ({rate:.0f} programs/s)")
    if drawn:
        print("  programs per setting value: " + "; ".join(
            name + " " + " ".join(f"{v}:{c}" for v, c in sorted(vals.items()))
            for name, vals in sorted(drawn.items())))
    for f in fails:
        with open(f) as fh:
            text = fh.read()
        lines = [l for l in text.splitlines() if l.startswith("loom-sim:")]
        print(f"  FAILED program {f.rsplit('-', 1)[1]}:")
        for l in lines[:4]:
            print("    " + l)
if progress:
    print("  progress: " + ", ".join(progress))
PY
}

if ((summary_only)); then
  summarize summary
  exit $(( $(ls "$dir"/*/run-*.fail-* 2>/dev/null | wc -l) > 0 ))
fi

# The work: for each chunk of each protocol, the first seed not yet covered by a result file.
# Chunks are interleaved across protocols so that every protocol advances at once.
queue=$dir/queue
: >"$queue"
nchunks=$(( (programs + chunk - 1) / chunk ))
for ((k = 0; k < nchunks; ++k)); do
  for p in "${protocols[@]}"; do
    mkdir -p "$dir/$p"
    a=$((seed + k * chunk))
    end=$((seed + (k + 1) * chunk))
    s=$a
    while ((s < end)); do
      if [[ -f $dir/$p/run-$s.json ]]; then s=$end; break; fi
      f=$(ls "$dir/$p/run-$s".fail-* 2>/dev/null | head -1)
      [[ -n $f ]] || break
      s=$(( ${f##*-} + 1 ))
    done
    ((s < end)) && echo "$p $s $end" >>"$queue"
  done
done
echo 0 >"$queue.next"
total=$(wc -l <"$queue")
echo "long_run.sh: ${protocols[*]}: $programs programs each from seed $seed, settings $mode${extra[*]:+, ${extra[*]}};" \
  "$total chunks of up to $chunk to run on $jobs CPUs (results in $dir)"

next_task() {
  (
    flock 9
    i=$(cat "$queue.next")
    line=$(sed -n "$((i + 1))p" "$queue")
    [[ -n $line ]] || exit 1
    echo $((i + 1)) >"$queue.next"
    echo "$line"
  ) 9>"$queue.lock"
}

ncpu=$(nproc)
worker() {
  local cpu=$(( $1 % ncpu )) task p s end t0 t1 out rc failed
  while task=$(next_task); do
    read -r p s end <<<"$task"
    while ((s < end)); do
      out=$dir/$p/run-$s
      t0=$(date +%s.%N)
      nice -n 19 taskset -c "$cpu" "$sim" --check $((end - s)) --seed "$s" --protocol "$p" \
        --settings "$mode" --json "${extra[@]}" >"$out.tmp" 2>"$out.err"
      rc=$?
      t1=$(date +%s.%N)
      if ((rc == 0)); then
        echo "$t1 - $t0" | bc >>"$out.tmp"
        mv "$out.tmp" "$out.json"
        rm -f "$out.err"
        echo "[$(date +%T)] $p: programs $s..$((end - 1)) passed"
        s=$end
      else
        failed=$(grep -o 'program [0-9]* ran with' "$out.err" | head -1 | grep -o '[0-9]*')
        if [[ -z $failed ]]; then
          echo "[$(date +%T)] $p: loom-sim --check $((end - s)) --seed $s exited with $rc:" \
            "$(tail -1 "$out.err")" >&2
          rm -f "$out.tmp"
          return 1
        fi
        cat "$out.tmp" "$out.err" >"$out.fail-$failed"
        rm -f "$out.tmp" "$out.err"
        echo "[$(date +%T)] $p: program $failed FAILED: $(grep -m1 '^loom-sim:' "$out.fail-$failed")"
        s=$((failed + 1))
      fi
    done
    summarize progress
  done
}

pids=()
for ((w = 0; w < jobs; ++w)); do
  worker "$w" &
  pids+=($!)
done
# note: a worker's loom-sim is its child (nice and taskset exec it).
stop() {
  for pid in "${pids[@]}"; do pkill -TERM -P "$pid"; kill "$pid"; done 2>/dev/null
  exit 130
}
trap stop INT TERM
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=2; done
echo
echo "== summary"
summarize summary
if ls "$dir"/*/run-*.fail-* >/dev/null 2>&1; then exit 1; fi
exit $status
