#!/usr/bin/env bash
# Runs a command that must end with a given exit status AND print a line matching a regex.
# usage: expect_status.sh STATUS REGEX command [args...]
set -u
want=$1; regex=$2; shift 2
out=$("$@" 2>&1); rc=$?
echo "$out"
echo "exit status: $rc"
if [[ $rc -ne $want ]]; then echo "FAILED: expected exit status $want"; exit 1; fi
if ! grep -qE -- "$regex" <<<"$out"; then echo "FAILED: no line matches: $regex"; exit 1; fi
exit 0
