#!/usr/bin/env bash
# The failure-injection matrix (issue 25): a node fails in one phase of a job, in every way a node
# can fail, and the job must stop on its own, soon, naming that node, leaving nothing behind.
#
# usage: fail_matrix.sh LAUNCHER FAIL_CHECK PHASE [NODES]
#   LAUNCHER    path to loomrun, or "mpirun" (Open MPI; skipped if it is not installed)
#   FAIL_CHECK  the fail_check program (tests/mp/fail_check.cc)
#   PHASE       boot | setup | run | shutdown | exit | all  (fault_inject.h: boot = before
#               the node joins, setup = between the address exchange and the start-up barrier,
#               run = at a barrier of the program, shutdown = between the shutdown barriers,
#               exit = after the last shutdown barrier)
#   NODES       nodes per job (default 3); the victim rotates over them from one action to the next
#
# Actions: kill (SIGKILL), stop (SIGSTOP), exit (exit(1)), exit0 (exit(0)), hang (the thread that
# runs the phase sleeps forever); in the run phase also return and return1 (main returns 0 or 1:
# its loom::Session ends) and finalize (loom::finalize while the others wait at a barrier).
#
# Each job must:
#   - end by itself within its bound plus a margin (no hang; the script's own timeout kills it);
#     under mpirun a job whose nodes have all ended while mpirun itself still runs is Open MPI's
#     hang, reported as a NOTE and judged by what its nodes printed;
#   - under loomrun, end with the failed node's status (137 when it was killed or SIGKILLed after
#     being stopped, its exit status when it exited, 3 when it stopped the job itself) and name
#     that node in loomrun's first line;
#   - have every surviving node that printed an error name the failed node in its first one, and
#     at least one do so (under mpirun, mpirun's own report may name it instead: it kills the
#     others itself when a process exits non-zero or dies, and then Open MPI 4.1 sometimes says
#     only that one did); after the last shutdown barrier the others have finished normally and
#     only the launcher names it;
#   - leave no file in /dev/shm and none in its TMPDIR (a private one), and no process behind;
#   - print no "UCX ERROR" line (Loom's own report says what failed).
# One line per job: "phase action victim status seconds" (seconds from the injection to the
# launcher's exit), then "stop times PHASE LAUNCHER: median M s, max X s over N jobs".
#
# FAIL_MATRIX_ACTIONS="kill exit exit0" runs only those actions (the short variant of the test suite).
#
# The bounds default to short values so that the matrix runs in minutes (bench/RESULTS.md has the
# times measured with them); FAIL_MATRIX_DEFAULTS=1 keeps Loom's defaults.
set -u
launcher=$1 check=$2 phase=$3 nodes=${4:-3}

if [[ $launcher == mpirun ]]; then
  command -v mpirun >/dev/null || { echo "SKIP: mpirun is not installed"; exit 77; }
fi

# A node that exit()s in the middle of a phase leaves UCX's objects allocated (nothing tears
# them down on that path, as in any process that exits while it works): under ASan, leak
# detection would make it abort (SIGABRT) instead of exiting with its status (measured: the setup
# phase's exit cases, 96 bytes from ucs_malloc). The sanitizer's other checks stay on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

if [[ ${FAIL_MATRIX_DEFAULTS:-0} == 1 ]]; then
  settings=()
  limit=90
else
  settings=(STARTUP_TIMEOUT_MS=3000 SHUTDOWN_TIMEOUT_MS=3000 HEARTBEAT_MS=250 PEER_TIMEOUT_MS=1500)
  limit=30
fi

if [[ $phase == all ]]; then
  # Every phase, one after another (the short variant: with FAIL_MATRIX_ACTIONS).
  status=0
  for p in boot setup run shutdown exit; do "$0" "$launcher" "$check" "$p" "$nodes" || status=1; done
  exit $status
fi

case $phase in
  run) actions=(kill stop exit exit0 hang return return1 finalize) ;;
  boot | setup | shutdown | exit) actions=(kill stop exit exit0 hang) ;;
  *) echo "usage: fail_matrix.sh LAUNCHER FAIL_CHECK boot|setup|run|shutdown|exit|all [NODES]"; exit 64 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Leftovers in /dev/shm are only attributable to the job if it has a /dev/shm of its own: other
# jobs on the machine (a parallel ctest) create and remove UCX segments there all the time. With
# a private mount namespace (root, or unprivileged user namespaces) each job gets an empty tmpfs
# on /dev/shm and what is in it after the job is exactly what the job left. Without one, new
# entries of the shared /dev/shm are reported but do not fail the matrix.
private_shm=0
if unshare -m sh -c 'mount -t tmpfs tmpfs /dev/shm' 2>/dev/null; then
  private_shm=1
else
  echo "NOTE: no private /dev/shm (unshare -m failed): leftovers there are reported, not failed"
fi
fail=0
times=()

show() { sed 's/^/  | /' "$out" | grep -v "^  | rank [0-9]* pid" | head -40; }

for i in "${!actions[@]}"; do
  action=${actions[$i]}
  victim=$(( (i + 1) % nodes ))
  # Only the chosen actions (each keeps its victim from the full matrix).
  [[ -n ${FAIL_MATRIX_ACTIONS:-} && " $FAIL_MATRIX_ACTIONS " != *" $action "* ]] && continue
  out=$work/out
  jobtmp=$work/tmp.$i
  mkdir -p "$jobtmp"
  shm_before=$(ls /dev/shm)

  env_args=()
  for s in "${settings[@]}"; do env_args+=("LOOM_$s"); done
  if [[ $phase == run ]]; then
    # The victim fails at round 20; the others wait for it at that round's barrier. "hang" in the
    # run phase is the program's own business: the node sleeps in a computation (its server
    # thread still answers), so it is not a failure; use "stop" instead.
    [[ $action == hang ]] && continue
  fi
  if [[ $launcher == mpirun && $phase == exit && $action == stop ]]; then
    # Not detectable under mpirun: after the last shutdown barrier the other nodes have ended
    # normally, and mpirun waits for the stopped one (docs/comm.md, "What is not detected").
    continue
  fi
  if [[ $phase == run ]]; then
    prog=("$check" 100000 "$victim" 20 "$action")
  else
    env_args+=("LOOM_FAULT_INJECT=$victim:$phase:$action")
    prog=("$check" 5)
  fi
  if [[ $launcher == mpirun ]]; then
    xs=()
    for kv in "${env_args[@]}"; do xs+=(-x "$kv"); done
    cmd=(mpirun --allow-run-as-root --oversubscribe "${xs[@]}" -n "$nodes" "${prog[@]}")
  else
    cmd=(env "${env_args[@]}" "$launcher" -n "$nodes" --kill-grace 2 "${prog[@]}")
  fi

  # A session of its own, so that every process of the job can be found afterwards.
  if [[ $private_shm == 1 ]]; then
    # The job's session leader is the wrapper; it lists /dev/shm after the launcher has ended.
    cmd=(unshare -m bash -c 'mount -t tmpfs tmpfs /dev/shm || exit 99; "$@"; rc=$?
      ls -A /dev/shm >"$FAIL_MATRIX_SHM_LIST"; exit $rc' wrapper "${cmd[@]}")
  fi
  rm -f "$work/shm.$i"
  FAIL_MATRIX_SHM_LIST=$work/shm.$i TMPDIR=$jobtmp setsid "${cmd[@]}" >"$out" 2>&1 &
  job=$!
  ended=""
  for _ in $(seq 1 $(( limit * 10 ))); do
    if ! kill -0 "$job" 2>/dev/null; then ended=1; break; fi
    sleep 0.1
  done
  end=$(date +%s.%N)
  mpirun_hung=""
  if [[ -z $ended ]]; then
    # Open MPI 4.1's mpirun itself sometimes hangs (a futex) after every process of the job has
    # ended: 2 of 41 SIGSTOP jobs and 1 "hang" job in the shutdown phase (2026-11-27), each
    # node a zombie that had printed its error. That is mpirun's hang, not Loom's: reported,
    # and the job is judged by what its nodes printed. Any node process still alive is Loom's.
    alive=$(ps -eo sid=,stat=,comm= | awk -v s="$job" -v c="$(basename "$check" | cut -c1-15)" \
      '$1 == s && $3 == c && $2 !~ /^Z/' | wc -l)
    if [[ $launcher == mpirun && $alive -eq 0 ]]; then
      mpirun_hung=1
      echo "NOTE: $phase $action (victim $victim): every node ended, but mpirun still runs" \
        "after $limit s (Open MPI's hang); judged by the nodes' output"
    else
      echo "FAILED: $phase $action (victim $victim): the job still runs after $limit s"
      fail=1
      show
    fi
    ps -o pid,stat,wchan:24,cmd -s "$job" | sed 's/^/  /'
    kill -KILL -- "-$job" 2>/dev/null  # its session's process group (setsid): the whole job
  fi
  wait "$job" 2>/dev/null; rc=$?
  # Whatever is left of the job's session is a failure, and is killed here (by pid).
  # (Zombies are not: their launcher has ended, and init reaps them.) A node process may still
  # be exiting when mpirun has ended (unmapping its memory takes a moment: CI 2026-12-07 saw one
  # listed as left behind and a zombie in the listing after), so a process counts as left
  # behind only if it is still there, not a zombie, 3 s after the job.
  left=""
  for _ in $(seq 1 30); do
    left=$(ps -eo pid=,sid=,stat= | awk -v s="$job" '$2 == s && $3 !~ /^Z/ {print $1}')
    [[ -z $left ]] && break
    sleep 0.1
  done
  if [[ -n $left ]]; then
    echo "FAILED: $phase $action (victim $victim): processes left behind: $left"
    ps -o pid,stat,cmd -p $(echo $left | tr ' ' ,) | sed 's/^/  /'
    kill -KILL $left 2>/dev/null
    fail=1
  fi

  inject=$(grep -m1 -oE "inject: [a-z]+ [a-z0-9]+ at [0-9.]+" "$out" | awk '{print $5}')
  secs="?"
  if [[ -n $inject && -z $mpirun_hung ]]; then
    secs=$(echo "$end - $inject" | bc)
    times+=("$secs")
  elif [[ $action != kill && $action != stop ]] || [[ $phase != boot ]]; then
    : # (a node killed or stopped before its first line may not have printed it)
  fi
  printf "%s %s victim %d status %d %s s\n" "$phase" "$action" "$victim" "$rc" "$secs"
  # UCX's own ERROR lines (e.g. "shmat(...) failed" when a peer died during start-up) are noise
  # beside Loom's report, and once came with a survivor blaming the wrong node: none may appear.
  if ucx=$(grep -m3 -E "UCX +ERROR" "$out"); then
    echo "FAILED: $phase $action: UCX printed errors of its own: $ucx"; fail=1
  elif ucx=$(grep -m3 -E "UCX +WARN" "$out"); then
    echo "NOTE: $phase $action: UCX warned: $ucx"
  fi

  # The status.
  if [[ $rc -eq 0 && $phase != exit ]] || [[ $rc -eq 0 && $action != exit0 ]]; then
    echo "FAILED: $phase $action: the job exited 0"; show; fail=1
  fi
  if [[ $launcher != mpirun ]]; then
    case $action in
      kill) want="137" ;;
      stop) want="137" ;;
      exit) want="1" ;;
      exit0) want="1 3" ;;
      hang) want="143 137 3" ;;
      return | return1 | finalize) want="3" ;;
    esac
    if ! grep -qw "$rc" <<<"$want"; then
      echo "FAILED: $phase $action: loomrun exited $rc, expected one of: $want"; show; fail=1
    fi
    first=$(grep -m1 "^loomrun: " "$out")
    if ! grep -qE "^loomrun: node $victim \(pid [0-9]+\)|because of node $victim \(pid" <<<"$first"; then
      echo "FAILED: $phase $action: loomrun's first line does not name node $victim: $first"
      show; fail=1
    fi
  fi

  # The survivors.
  named=0
  for ((r = 0; r < nodes; r++)); do
    [[ $r -eq $victim ]] && continue
    line=$(grep -m1 -E "^loom\[$r\] error: " "$out")
    [[ -z $line ]] && continue
    if grep -qE "node $victim\b" <<<"$line"; then
      named=$((named + 1))
    else
      echo "FAILED: $phase $action: node $r blamed another node: $line"; show; fail=1
    fi
  done
  if [[ $named -eq 0 && $phase != exit ]]; then
    if [[ $launcher == mpirun ]] &&
        grep -qE "process rank $victim |Process name: \[\[[0-9]+,[0-9]+\],$victim\]" "$out"; then
      :  # mpirun stopped the job itself and says which process failed
    elif [[ $launcher == mpirun ]] && grep -q "Per user-direction, the job has been aborted" "$out"; then
      # mpirun stopped the job itself as soon as the node exited, killing the others before they
      # could say anything; Open MPI 4.1 then sometimes leaves out which process it was.
      echo "  (mpirun ended the job itself and did not say which process failed)"
    elif [[ $launcher == mpirun && $rc -ne 0 && $phase == boot ]] &&
        ! grep -qE "^loom\[[0-9]+\] error: " "$out"; then
      # A node that ends before it joins (PMIx_Init) while the others have joined: Open MPI
      # 4.1's mpirun kills the others at once and, in ~1 of 4 runs, exits 1 without printing its
      # "exiting improperly" report (2026-11-27: 2 of 8 exit0 jobs), before any survivor could
      # learn which node it was. The job still stops (1-2 s), non-zero.
      echo "  (mpirun ended the job itself, silently, before any node could name the failed one)"
    else
      echo "FAILED: $phase $action: no surviving node named node $victim"; show; fail=1
    fi
  fi

  # Nothing left behind (by a job that ended: a hung mpirun that was killed never cleaned up).
  if [[ -n $mpirun_hung ]]; then
    rm -rf "${jobtmp:?}"/*
  elif [[ $private_shm == 1 ]]; then
    if [[ ! -f $work/shm.$i ]]; then
      echo "FAILED: $phase $action: the wrapper did not list the job's /dev/shm"; fail=1
    elif [[ -s $work/shm.$i ]]; then
      echo "FAILED: $phase $action: left in /dev/shm: $(tr '\n' ' ' <"$work/shm.$i")"; fail=1
    fi
  elif new_shm=$(comm -13 <(echo "$shm_before") <(ls /dev/shm)) && [[ -n $new_shm ]]; then
    echo "NOTE: $phase $action: new in the shared /dev/shm (this job's or another's): $new_shm"
  fi
  # Open MPI 4.1's mpirun itself sometimes dies of SIGSEGV (in libopen-rte's free(), from its
  # event loop) while it aborts a job whose node exited with an error: twice in CI runs of this
  # script (boot phase on 2026-11-27, setup phase on 2026-11-28; the signal report shows
  # mpirun's own frames).
  # A crashed mpirun cannot remove its session directory (ompi.*): reported and removed; any
  # other leftover still fails.
  if [[ $launcher == mpirun ]] && grep -qE '^\[[^]]*\] \[ *[0-9]+\] mpirun\(' "$out" &&
      left=$(cd "$jobtmp" && find . -mindepth 1 -maxdepth 1) && [[ -n $left ]] &&
      ! grep -qvE '^\./ompi\.[^/]+$' <<<"$left"; then
    echo "NOTE: $phase $action: mpirun crashed (Open MPI's bug) and left its session directory" \
      "$(tr '\n' ' ' <<<"$left")"
    (cd "$jobtmp" && rm -rf ./ompi.*)
  fi
  if [[ $launcher == mpirun ]] && left=$(cd "$jobtmp" && find . -mindepth 1) &&
      [[ $left =~ ^\./ompi\.[^/]+$ ]]; then
    # Open MPI 4.1's own session directory, empty: mpirun sometimes leaves its top level behind
    # when it kills a stopped process (1 of 40 SIGSTOP jobs in the shutdown phase).
    echo "NOTE: $phase $action: mpirun left its empty session directory $left"
    rmdir "$jobtmp/$left"
  fi
  if [[ -n $(ls -A "$jobtmp") ]]; then
    echo "FAILED: $phase $action: left in TMPDIR: $(cd "$jobtmp" && find . -mindepth 1 | head)"
    show; fail=1
  fi
done

if [[ ${#times[@]} -gt 0 ]]; then
  sorted=($(printf "%s\n" "${times[@]}" | sort -g))
  n=${#sorted[@]}
  median=${sorted[$((n / 2))]}
  max=${sorted[$((n - 1))]}
  printf "stop times %s %s: median %.2f s, max %.2f s over %d jobs\n" "$phase" \
    "$( [[ $launcher == mpirun ]] && echo mpirun || echo loomrun)" "$median" "$max" "$n"
fi
exit $fail
