#!/usr/bin/env bash
# Runs a command that must succeed: exit status 0 AND output matching a regular expression.
# usage: expect_success.sh REGEX command [args...]
set -u
regex=$1; shift
out=$("$@" 2>&1); rc=$?
echo "$out"
echo "exit status: $rc"
if [[ $rc -ne 0 ]]; then echo "FAILED: expected exit status 0"; exit 1; fi
if ! grep -qE -- "$regex" <<<"$out"; then echo "FAILED: no line matches: $regex"; exit 1; fi
exit 0
