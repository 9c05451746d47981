#!/usr/bin/env bash
# A survivor that learns of a failure from a broken connection must name the node the launcher
# names, not whichever connection it happens to find broken first (the lost peer may have
# stopped because of the launcher's news; measured in CI: a survivor named a node that had
# stopped because another was killed). Node 3 does not watch loomrun's news
# (LOOM_FAULT_INJECT=3:setup:deaf), so it learns of the failure from its connections; nodes 2, 0
# and 1 are killed at once (none can send node 3 an abort). Node 3's error line must name the
# node loomrun names first.
#
# usage: late_survivor_test.sh LOOMRUN COMM_CHECK
set -u
loomrun=$1 check=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

LOOM_FAULT_INJECT=3:setup:deaf "$loomrun" -n 4 --timeout 90 "$check" spin 60 >"$out" 2>&1 &
job=$!

pid_of() { grep -m1 -oE "^rank $1 pid [0-9]+" "$out" | awk '{print $4}'; }
for _ in $(seq 1 200); do
  [[ $(grep -c '^rank [0-9]* pid' "$out") -ge 4 ]] && break
  sleep 0.05
done
p0=$(pid_of 0) p1=$(pid_of 1) p2=$(pid_of 2)
if [[ -z $p0 || -z $p1 || -z $p2 ]] || ! grep -q "inject: setup deaf" "$out"; then
  echo "FAILED: the nodes never started (or node 3 was not made deaf)"; cat "$out"; kill "$job"
  exit 1
fi
sleep 1  # traffic flows
kill -KILL "$p2" "$p0" "$p1"
for _ in $(seq 1 300); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$job" 2>/dev/null; then
  echo "FAILED: the job still runs 30 s after the kills"
  kill -TERM "$job"; cat "$out"; exit 1
fi
wait "$job"; rc=$?
echo "job exited with status $rc"
cat "$out"
fail=0
if [[ $rc -eq 0 ]]; then echo "FAILED: the job exited 0"; fail=1; fi
named=$(grep -m1 -oE "^loomrun: node [0-9]+ " "$out" | awk '{print $3}')
line=$(grep -m1 -E "^loom\[3\] error: " "$out")
if [[ -z $named ]]; then
  echo "FAILED: loomrun named no node"; fail=1
elif [[ -z $line ]]; then
  echo "FAILED: node 3 printed no error line"; fail=1
elif ! grep -qE "node $named\b" <<<"$line"; then
  echo "FAILED: loomrun named node $named, node 3 another: $line"; fail=1
fi
exit $fail
