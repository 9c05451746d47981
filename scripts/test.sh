#!/usr/bin/env bash
# Quick start, step 2: build and run all tests.
#
#   scripts/test.sh            release build + every test (unit, launcher, multi-process), then
#                              the same suite under ASan+UBSan and ThreadSanitizer, without:
#                              the tests labelled "slow" and "heavy" (longer runs of code that a
#                              smaller test covers there: more seeds, more nodes, repetitions),
#                              which run in the release pass; and the loom-sim batch runs, label
#                              "sim_batch" (they repeat the simulator code of the "sim" tests over
#                              many programs, one thread at a time, ~4 min under ASan); and
#                              the clang -Wthread-safety build, which also builds the fuzz
#                              targets with libFuzzer and runs each for a few seconds (label
#                              fuzz; docs/fuzz.md). In the sanitizer passes each
#                              multi-process job (label mp) runs under one sanitizer: two thirds
#                              of them under ASan, the others under TSan. The clang, ASan and
#                              TSan builds compile (SCHED_IDLE) while the release tests run (the
#                              TSan build also while the ASan tests run, the clang build while
#                              the TSan tests run)
#   scripts/test.sh --quick    release build + every test only
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
quick=0
[[ ${1:-} == --quick ]] && quick=1
status=0
step() { echo; echo "== $* ($(date +%T))"; }
# The end of each failed test's output, from a build directory's last ctest run; printed again
# at the end of the log, where a reader of only its tail (CI's record) still sees why.
digest=""
digest_failures() {
  local dir=$1 failed=$1/Testing/Temporary/LastTestsFailed.log name
  [[ -f $failed ]] || return 0
  while IFS=: read -r _ name; do
    digest+=$'\n'"--- $dir: $name (last 25 lines of its output)"$'\n'
    digest+=$(awk -v t="$name" '$0 ~ "^[0-9]+/[0-9]+ Test: " && $3 == t { on = 1; n = 0; next }
      on && /^<end of output>/ { on = 0 } on { buf[n++ % 25] = $0 }
      END { for (i = (n > 25 ? n - 25 : 0); i < n; i++) print buf[i % 25] }' \
      "$dir/Testing/Temporary/LastTest.log")
  done <"$failed"
}

# The tests of a sanitizer pass: every test but the labels left out above, except that each
# multi-process job (label mp: real loomrun/mpirun jobs, most of a pass's time) runs under one of
# the two sanitizers only: ctest's stride (-I START,,3) gives ASan the ones numbered 1 and 2
# modulo 3 and TSan those numbered 0 modulo 3 (a job takes about twice as long under TSan).
sanitizer_tests() {
  local preset=$1 dir=build-$1 skip='bench|slow|heavy|sim_batch' start
  shift
  ctest --preset "$preset" -j2 -LE "mp|$skip" || { status=1; digest_failures "$dir"; }
  for start in "$@"; do
    ctest --preset "$preset" -j2 -L mp -LE "$skip" -I "$start,,3" ||
      { status=1; digest_failures "$dir"; }
  done
}

step "layering check (docs/architecture.md)"
scripts/check-layers.sh || status=1
# Status::ok() is the static factory: `s.ok()` compiles but is always OK. Tests use s.is_ok().
if grep -rnE '[A-Za-z_0-9)\]]\.ok\(\)' src tools tests bench apps; then
  echo "test.sh: the lines above call the factory Status::ok() on a value; use .is_ok()"
  status=1
fi

step "release build and tests"
cmake --preset release >/dev/null && cmake --build --preset release || exit 1

# The ASan, TSan and clang builds compile, one after another, while the release tests (and then
# the ASan and TSan tests) run, at the lowest priority: SCHED_IDLE (chrt --idle), which runs them only on
# a core no test wants. Most of a pass's time is multi-process jobs that leave a core idle
# (waiting on a failure bound, a peer, a timer), which the builds then use; this takes ~5 min off
# CI on a 2-core machine. why not nice 19: a nice-19 task still holds a core for a slice when a
# test's thread wakes up, and these tests wake up all the time (bench.soak_2n took 27 s beside a
# nice-19 build, 10 s beside a SCHED_IDLE one, 8 s alone). Each build's output is printed when
# it is waited for; each writes its status to a file when it is done.
if chrt --idle 0 true 2>/dev/null; then low_priority=(chrt --idle 0); else low_priority=(nice -n 19); fi
bg_dir=$(mktemp -d)
trap 'rm -rf "$bg_dir"' EXIT
bg_pid=0
# Waits until the background builds have written status file $1 (or have ended without it),
# prints log $2, and returns the status (1 if there is none).
wait_build() {
  local done=$bg_dir/$1 log=$bg_dir/$2
  until [[ -f $done ]]; do
    kill -0 "$bg_pid" 2>/dev/null || break
    sleep 1
  done
  [[ -f $log ]] && cat "$log"
  echo "(waited until $(date +%T))"
  [[ -f $done ]] || return 1
  return "$(cat "$done")"
}
if ((quick == 0)); then
  # In the order their tests need them: the ASan build (its tests come first), the TSan build
  # (made while the ASan tests run), then the clang build (made while the TSan tests run).
  # note: the clang build checks the annotated code, which is in the libraries and tools (the
  # tests and benchmarks carry no annotations, and leaving them out keeps CI within its time
  # budget on a 2-core machine). It is the one build with an object per source file (the others
  # are unity builds), so it also checks that each file of them includes what it uses. It is
  # instrumented for libFuzzer with ASan+UBSan (docs/fuzz.md):
  # its fuzz targets run a few seconds each at the end (label fuzz); the release pass replays
  # their corpora.
  "${low_priority[@]}" bash -c 'cd "$1" || exit 1
    { echo "== ASan+UBSan build"; cmake --preset asan >/dev/null && cmake --build --preset asan
    } >"$2/asan.log" 2>&1
    echo $? >"$2/asan.status"
    { echo "== ThreadSanitizer build"; cmake --preset tsan >/dev/null && cmake --build --preset tsan
    } >"$2/tsan.log" 2>&1
    echo $? >"$2/tsan.status"
    {
      echo "== clang -Wthread-safety build, and the fuzz targets"
      cmake --preset clang-tsa >/dev/null &&
        cmake --build --preset clang-tsa --target loom_runtime loom_sim loom_parmacs \
          fuzz_wire_header fuzz_boot_frames fuzz_pmix_contribution fuzz_handlers
    } >"$2/clang.log" 2>&1
    echo $? >"$2/clang.status"' bash "$PWD" "$bg_dir" &
  bg_pid=$!
fi
ctest --preset release -j2 || { status=1; digest_failures build; }

if ((quick == 0)); then
  step "ASan+UBSan build (made during the release tests) and tests (the TSan build goes on)"
  wait_build asan.status asan.log || exit 1
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" \
    sanitizer_tests asan 1 2

  step "ThreadSanitizer build (made during the release and ASan tests) and tests"
  wait_build tsan.status tsan.log || exit 1
  # note: UCX_MEM_MMAP_HOOK_MODE=none: UCX's libucm otherwise patches madvise(), which glibc
  # calls as a thread exits, and ThreadSanitizer's runtime crashes there. tests/tsan.supp says
  # which reports are one-sided writes ordered through another process; those suppressions match
  # on the writer's stack, so history_size=7 keeps enough history for TSan to restore it.
  # The shared region moves into the part of the address space TSan's shadow mapping allows
  # for application memory. report_signal_unsafe=0: Loom's SIGSEGV handler allocates and waits,
  # which is fine because its page faults are synchronous (raised by the faulting access
  # itself, never interrupting the allocator), but TSan cannot tell.
  UCX_MEM_MMAP_HOOK_MODE=none LOOM_REGION_BASE=0x4000000000 LOOM_REGION_SIZE=16G \
    TSAN_OPTIONS="halt_on_error=1 report_signal_unsafe=0 history_size=7 suppressions=$PWD/tests/tsan.supp" \
    sanitizer_tests tsan 3

  step "clang -Wthread-safety build (made during the TSan tests), and the fuzz targets"
  if wait_build clang.status clang.log; then
    ctest --preset clang-tsa -j2 -L fuzz || { status=1; digest_failures build-clang; }
  else
    status=1
  fi
fi
if [[ -n $digest ]]; then echo; echo "== the failed tests' output, again"; echo "$digest"; fi
if ((status == 0)); then echo; echo "== all tests passed"; else echo; echo "== SOME TESTS FAILED"; fi
exit $status
