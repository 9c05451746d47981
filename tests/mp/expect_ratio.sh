#!/usr/bin/env bash
# Runs a loomrun job with --stats and checks that it succeeds and that the ratio of two counters,
# each summed over all nodes, is at most MAX (and that the denominator is not zero).
# usage: expect_ratio.sh NUMERATOR DENOMINATOR[+DENOMINATOR...] MAX LOOMRUN [loomrun args...]
set -u
num=$1; den=$2; max=$3; shift 3
out=$("$@" 2>&1); rc=$?
echo "$out"
if [[ $rc -ne 0 ]]; then echo "FAILED: exit status $rc"; exit 1; fi
sum() { awk -v cs="$1" 'BEGIN { n = split(cs, c, "+"); for (i = 1; i <= n; i++) want[c[i]] = 1 }
                       ($1 in want) { s += $2 } END { print s + 0 }' <<<"$out"; }
n=$(sum "$num"); d=$(sum "$den")
echo "$num summed over the nodes: $n; $den: $d"
if ((d == 0)); then echo "FAILED: $den is 0"; exit 1; fi
if ! awk -v n="$n" -v d="$d" -v m="$max" 'BEGIN { r = n / d; printf "ratio %.4f (at most %s)\n", r, m; exit !(r <= m) }'; then
  echo "FAILED: $num / $den is above $max"; exit 1
fi
exit 0
