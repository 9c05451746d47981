#!/usr/bin/env bash
# Runs a command that must fail: non-zero exit status AND output matching a regular expression.
# usage: expect_failure.sh REGEX command [args...]
set -u
regex=$1; shift
out=$("$@" 2>&1); rc=$?
echo "$out"
echo "exit status: $rc"
if [[ $rc -eq 0 ]]; then echo "FAILED: expected a non-zero exit status"; exit 1; fi
if ! grep -qE -- "$regex" <<<"$out"; then echo "FAILED: no line matches: $regex"; exit 1; fi
exit 0
