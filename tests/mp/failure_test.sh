#!/usr/bin/env bash
# A node of a running job is killed (SIGKILL) or stopped (SIGSTOP); every other node must stop
# on its own within a bound, non-zero, naming the node — no hang.
#
# usage: failure_test.sh LAUNCHER(loomrun-path|mpirun) COMM_CHECK SIGNAL(KILL|STOP) WITHIN_S NODES
set -u
launcher=$1 check=$2 sig=$3 within=$4 nodes=${5:-4}
victim=2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

if [[ $launcher == mpirun ]]; then
  command -v mpirun >/dev/null || { echo "SKIP: mpirun is not installed"; exit 77; }
  mpirun --allow-run-as-root --oversubscribe -n "$nodes" "$check" spin 60 >"$out" 2>&1 &
else
  "$launcher" -n "$nodes" --timeout 90 "$check" spin 60 >"$out" 2>&1 &
fi
job=$!

pid=""
for _ in $(seq 1 200); do
  pid=$(grep -m1 -oE "^rank $victim pid [0-9]+" "$out" | awk '{print $4}')
  [[ -n $pid ]] && [[ $(grep -c '^rank [0-9]* pid' "$out") -ge $nodes ]] && break
  sleep 0.05
done
if [[ -z $pid ]]; then echo "FAILED: node $victim never started"; cat "$out"; kill "$job"; exit 1; fi
sleep 1  # traffic flows
start=$(date +%s.%N)
kill -"$sig" "$pid"
# Bound the wait ourselves: the test must not hang even if Loom does.
for _ in $(seq 1 $(( (within + 20) * 10 ))); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$job" 2>/dev/null; then
  echo "FAILED: the job still runs $((within + 20)) s after SIG$sig of node $victim"
  cat "$out"
  kill -KILL "$pid" 2>/dev/null; kill -TERM "$job"; sleep 2; kill -KILL "$job" 2>/dev/null
  exit 1
fi
wait "$job"; rc=$?
end=$(date +%s.%N)
[[ $sig == STOP ]] && kill -KILL "$pid" 2>/dev/null
elapsed=$(echo "$end - $start" | bc)
echo "job exited with status $rc, $elapsed s after SIG$sig of node $victim"
cat "$out"
fail=0
if [[ $rc -eq 0 ]]; then echo "FAILED: the job exited 0"; fail=1; fi
if (( $(echo "$elapsed > $within" | bc) )); then echo "FAILED: took $elapsed s, limit $within s"; fail=1; fi
# Every surviving node names the failed node in its own error line (mpirun may kill some
# survivors once the first has exited, so there: at least one).
named=$(grep -cE "loom\[[0-9]+\] error: .*node $victim\b" "$out")
need=$(( nodes - 1 ))
[[ $launcher == mpirun ]] && need=1
if (( named < need )); then echo "FAILED: $named node(s) named node $victim, expected $need"; fail=1; fi
exit $fail
