#!/usr/bin/env bash
# Runs a command that must die of a signal (directly, or as a loomrun job whose failing node
# did): exit status 128+SIGNAL AND output matching a regular expression. Under a sanitizer the
# usual death by SIGSEGV is the sanitizer's own report ("AddressSanitizer: SEGV ..."), with the
# sanitizer's exit status: that is accepted too (any non-zero status).
# usage: dsm_expect_signal.sh SIGNAL_NUMBER REGEX command [args...]
set -u
sig=$1; regex=$2; shift 2
out=$("$@" 2>&1); rc=$?
echo "$out"
echo "exit status: $rc"
if grep -qE -- "(Address|Thread|Memory|UndefinedBehavior)Sanitizer: SEGV" <<<"$out"; then
  if [[ $rc -eq 0 ]]; then echo "FAILED: expected a non-zero exit status"; exit 1; fi
elif [[ $rc -ne $((128 + sig)) ]]; then
  echo "FAILED: expected exit status $((128 + sig)) (signal $sig), got $rc"; exit 1
fi
if ! grep -qE -- "$regex" <<<"$out"; then echo "FAILED: no line matches: $regex"; exit 1; fi
exit 0
