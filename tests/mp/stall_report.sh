#!/usr/bin/env bash
# A page fault that waits long says so, with the page's state (LOOM_STALL_REPORT_MS; README,
# configuration): node 0 of a `dsm_check stall` job stops itself after a barrier, and this script
# continues it 1.5 s later. Meanwhile node 1's two threads read node 0's page: one waits for its
# request's reply, the other for that thread's fetch. With LOOM_STALL_REPORT_MS=500 each fault
# must print its report once, naming what it waits for and the page's state, and the job must
# then end normally.
# usage: stall_report.sh LOOMRUN DSM_CHECK
set -u
loomrun=$1 dsm=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# (no fetch-ahead, prefetch or pushes: node 1 must not have the page before it faults)
"$loomrun" -n 2 --timeout 60 --stall-report-ms 500 --fetch-ahead 0 --prefetch 0 --push-pages 0 \
  "$dsm" stall 2 >"$out" 2>&1 &
job=$!
pid=""
for _ in $(seq 1 600); do
  pid=$(sed -n 's/^stall: node 0 stops (pid \([0-9]*\))$/\1/p' "$out")
  [[ -n $pid ]] && break
  sleep 0.05
done
if [[ -z $pid ]]; then
  kill "$job"; wait "$job"; cat "$out"
  echo "FAILED: node 0 did not say that it stops"; exit 1
fi
for _ in $(seq 1 250); do
  [[ $(ps -o stat= -p "$pid") == T* ]] && break
  sleep 0.02
done
sleep 1.5
kill -CONT "$pid"
wait "$job"
rc=$?
cat "$out"
fail() { echo "FAILED: $*"; exit 1; }
((rc == 0)) || fail "the job ended with status $rc"
grep -q "^ok: stall node 0" "$out" && grep -q "^ok: stall node 1" "$out" ||
  fail "a node did not finish its check"
for what in "node 0's answer to its request" "another thread's fetch"; do
  n=$(grep -c "warn: a read fault has waited [0-9]* ms for $what: page [0-9]* on node 1: home=0" "$out")
  ((n == 1)) || fail "$n reports of a read fault waiting for $what (expected 1)"
done
echo "ok: both waiting faults reported once, and the job went on"
