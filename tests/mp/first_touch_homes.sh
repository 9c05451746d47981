#!/usr/bin/env bash
# Runs a loomrun job with --stats-json and checks what first-touch placement cost: the home
# questions sent by all nodes (heap.home_query to chunk owners and heap.home_arbitrate from owners
# to delegates) per page that a node touched first must be at most MAX, and at least MIN_PAGES
# pages must have been first-touched (the job really placed that many).
# usage: first_touch_homes.sh MAX MIN_PAGES LOOMRUN [loomrun args...]
set -u
max=$1; min_pages=$2; loomrun=$3; shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$("$loomrun" --stats-json "$work/stats.json" "$@" 2>&1); rc=$?
echo "$out"
[[ $rc -eq 0 ]] || { echo "FAILED: exit status $rc"; exit 1; }
python3 - "$work/stats.json" "$max" "$min_pages" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
max_ratio, min_pages = float(sys.argv[2]), int(sys.argv[3])
tot = {}
for k, n in enumerate(d["nodes"]):
    dsm = n["dsm"]
    keys = ("home_queries", "home_arbitrations", "first_touches", "first_touches_local",
            "homes_cached", "home_windows")
    print("node %d: %s" % (k, ", ".join("%s %d" % (c, dsm[c]) for c in keys)))
    for c in keys:
        tot[c] = tot.get(c, 0) + dsm[c]
questions = tot["home_queries"] + tot["home_arbitrations"]
touched = tot["first_touches"]
ratio = questions / max(touched, 1)
print("home questions %d (queries %d, arbitrations %d) for %d first-touched pages: %.5f per page"
      % (questions, tot["home_queries"], tot["home_arbitrations"], touched, ratio))
if touched < min_pages:
    print("FAILED: %d pages first-touched, expected at least %d" % (touched, min_pages))
    sys.exit(1)
if ratio > max_ratio:
    print("FAILED: %.5f home questions per first-touched page, expected at most %g" % (ratio, max_ratio))
    sys.exit(1)
PY
exit 0
