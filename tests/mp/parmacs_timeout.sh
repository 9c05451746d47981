#!/usr/bin/env bash
# A PARMACS job that hangs is stopped by loomrun --timeout: the line main printed before the
# hang must reach loomrun's output (node 0's stdout is a pipe; it must not be lost in a buffer),
# loomrun must exit 124, and --stats-json must hold both nodes' counters, marked partial.
# usage: parmacs_timeout.sh LOOMRUN HANG_PROGRAM
set -u
loomrun=$1; prog=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$("$loomrun" -n 2 --timeout 3 --stats-json "$work/stats.json" "$prog" 2 2>&1); rc=$?
echo "$out"
echo "exit status: $rc"
[[ $rc -eq 124 ]] || { echo "FAILED: expected exit status 124 (timeout)"; exit 1; }
grep -q "hang: 2 threads will now wait forever" <<<"$out" ||
  { echo "FAILED: main's line before the hang was lost"; exit 1; }
python3 - "$work/stats.json" <<'PY' || { echo "FAILED: stats"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d.get("partial") is True, "the merged file is not marked partial"
assert "timeout" in d.get("stopped", ""), "no reason: %r" % d.get("stopped")
assert len(d["nodes"]) == 2, d
# Each node is stopped by loomrun's SIGTERM, or, if it learns first that a peer stopped, by the
# failure of the job; at least one of them by the signal.
reasons = []
for n in d["nodes"]:
    assert n is not None, "a node wrote no counters"
    why = n.get("stopped_by", "")
    assert n.get("partial") is True and (why == "SIGTERM" or why.startswith("job failed")), why
    assert "messages" in n and "dsm" in n, sorted(n)
    reasons.append(why)
assert "SIGTERM" in reasons, reasons
print("stats: both nodes partial, stopped by", reasons)
PY
exit 0
