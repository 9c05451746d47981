#!/usr/bin/env bash
# Home migration (hlrc): SOR whose grid node 0 initializes (so node 0 is the home of every page)
# on 2 nodes. With LOOM_HOME_MIGRATION on, the homes of the other node's rows move to it
# (homes_moved > 0); with it off, none moves. Both runs must give the sequential checksum.
# usage: home_migration.sh LOOMRUN SOR
set -u
loomrun=$1 sor=$2
args=(--n 256 --iters 10)
checksum() { grep -o '"checksum":[^,}]*' <<<"$1" | cut -d: -f2; }
moved() { awk '$1 == "homes_moved" { s += $2 } END { print s + 0 }' <<<"$1"; }

seq=$("$sor" --mode seq "${args[@]}" --json) || { echo "FAILED: sequential run"; exit 1; }
want=$(checksum "$seq")
for setting in 3 0; do
  out=$(LOOM_HOME_MIGRATION=$setting "$loomrun" -n 2 --timeout 100 --stats "$sor" --mode loom \
    --threads 2 --init node0 "${args[@]}" --json 2>&1)
  rc=$?
  echo "$out" | grep -E '"checksum"|homes_moved|redirects|diffs_forwarded'
  if ((rc != 0)); then echo "$out"; echo "FAILED: LOOM_HOME_MIGRATION=$setting: exit status $rc"; exit 1; fi
  got=$(checksum "$out")
  if [[ "$got" != "$want" ]]; then
    echo "FAILED: LOOM_HOME_MIGRATION=$setting: checksum $got, sequential $want"; exit 1
  fi
  n=$(moved "$out")
  echo "LOOM_HOME_MIGRATION=$setting: $n homes moved"
  if ((setting != 0 && n == 0)); then echo "FAILED: no home moved"; exit 1; fi
  if ((setting == 0 && n != 0)); then echo "FAILED: $n homes moved with migration off"; exit 1; fi
done
echo "ok"
