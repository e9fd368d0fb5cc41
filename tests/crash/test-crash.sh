#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-crash.sh --- crash-consistency test of one policy: an unmodified
# guest kernel runs a workload of changes made durable one by one (fsync,
# fdatasync, sync) on ext4 served by the plugin with record=PATH; crash
# states are built from the log (crashgen: every flush boundary, seeded
# random subsets of the writes after a flush, SIGKILL at random records and
# at the end) and each is replayed and checked: e2fsck -fn clean, and every
# change declared durable before the crash point present (the durability
# oracle; see check-state.sh and expect.awk), timestamps exempt as the
# policy's promise says (docs/crash.md).
#
#   tests/crash/test-crash.sh [--policy=strict|atime|lazy] [--long]
#                             [--seed N] [--report FILE] [--only=WORKLOAD]
#
# --policy: the plugin's policy (default $CRASH_POLICY, else strict).
#   Under strict and atime the oracle also compares the mtime and ctime of
#   files whose times were made durable; under lazy it does not.
# --times=on|off: compare mtime/ctime or not, whatever the policy (the
#   detection test checks a policy=lazy log with them on).
# --long: >= 10,000 states per workload (longer workloads, more subsets).
# --report FILE: append the results to FILE as a Markdown section.
# Exits 0 when every state passed, 1 on any failure, 77 when a
# prerequisite is missing (see tests/e2e/README.md).
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/crashlib.sh"

long=0 seed=42 report= only= times= policy=${CRASH_POLICY:-strict}
while [ $# -gt 0 ]; do
  case $1 in
    --long) long=1 ;;
    --seed) seed=$2; shift ;;
    --seed=*) seed=${1#*=} ;;
    --policy=*) policy=${1#*=} ;;
    --report) report=$2; shift ;;
    --report=*) report=${1#*=} ;;
    --only=*) only=${1#*=} ;;
    --times=*) times=${1#*=} ;;
    *) echo "usage: $0 [--policy=P] [--times=on|off] [--long] [--seed N] [--report FILE] [--only=WORKLOAD]" >&2
       exit 2 ;;
  esac
  shift
done
case $policy in
  strict|atime) export CRASH_TIMES=1 ;;
  lazy) export CRASH_TIMES=0 ;;
  *) echo "bad --policy=$policy" >&2; exit 2 ;;
esac
case $times in
  on) CRASH_TIMES=1 ;;
  off) CRASH_TIMES=0 ;;
  '') ;;
  *) echo "bad --times=$times" >&2; exit 2 ;;
esac
[ -n "$report" ] && report=$(realpath -m "$report")
export E2E_PLUGIN_ARGS="policy=$policy ${E2E_PLUGIN_ARGS:-}"

crash_init
t0=$(date +%s)
if [ "$long" = 1 ]; then
  # Distinct states are what the log allows: about 3.5 flush boundaries
  # per step, and subsets of the writes between two flushes.
  steps=1000 subset=10000 kills=2500 every=200
  crash_set_markers $((steps * 2 + 64))
else
  steps=90 subset=180 kills=24 every=8
fi
e2e_log "policy=$policy: mtime/ctime $([ "$CRASH_TIMES" = 1 ] && echo compared || echo "not compared (exempt)")"

# NAME MKFSFEAT MOUNTOPTS CRASHMODE JOURNAL FSCK_KINDS
workloads=(
  "journal||strictatime,commit=1|fsync|1|all"
  "nojournal|^has_journal|strictatime|sync|0|marker end"
)
fail=0 i=0 rows=()
for w in "${workloads[@]}"; do
  IFS='|' read -r name feat opts mode journal kinds <<<"$w"
  i=$((i + 1))
  [ -z "$only" ] || [ "$only" = "$name" ] || continue
  wseed=$((seed + i))
  ws=$steps
  extra=(--flush --subset "$subset" --end --kill-random "$kills")
  if [ "$journal" = 0 ]; then
    # Without a journal the filesystem is consistent only where a sync()
    # ended (the marker reads); e2fsck runs on those states (and at the
    # end), the oracle on all.
    # (Its log has fewer distinct states per step: with --long it runs
    # longer to give 10,000 of them.)
    if [ "$long" = 1 ]; then ws=$((steps * 9 / 5)); else ws=$((steps / 2)); fi
    extra+=(--markers)
  fi
  crash_run_guest "$name" "$feat" "$opts" "$mode" "$ws" "$wseed"
  decl=$CRASH_DECLARED
  # Under atime and lazy the states must have been built with holds in
  # play, or they would test nothing the strict policy does not.
  case $policy in
    atime|lazy) [ "$CRASH_HELD" -gt 0 ] \
      || e2e_fail "$name: policy=$policy held nothing" ;;
  esac
  # With a max-age shorter than the run, deadline write-backs are part of
  # what the states are built from.
  case $E2E_PLUGIN_ARGS in
    *max-age=*) [ "$CRASH_DEADLINE_WB" -gt 0 ] \
      || e2e_fail "$name: no deadline write-back inside the recorded run" ;;
  esac
  # And under atime and lazy on a journal, an absorbed transaction's
  # deadline met in place with its blocks in the log only (the first quiet
  # spell's): the logged copies written in place, the log held.
  case $policy/$journal/$E2E_PLUGIN_ARGS in
    atime/1/*max-age=*|lazy/1/*max-age=*)
      [ "$CRASH_DEADLINE_MET" -gt 0 ] && [ "$CRASH_DEADLINE_COPIED" -gt 0 ] \
        || e2e_fail "$name: no absorbed transaction met in place inside the recorded run ($CRASH_DEADLINE_MET met, $CRASH_DEADLINE_COPIED copied)" ;;
  esac
  # The first transaction after the mount is of time-only changes (the
  # guest's reads of /seed): they absorb it, so the states before the
  # workload's first change hold it in the server only.
  case $policy/$journal in
    atime/1|lazy/1)
      [ "$CRASH_FIRST_ABSORBED" -ge 1 ] && [ "$CRASH_FIRST_REAL" = 0 ] \
        || e2e_fail "$name: policy=$policy did not absorb the first transaction after the mount ($CRASH_FIRST_ABSORBED absorbed, $CRASH_FIRST_REAL real)" ;;
  esac
  crash_check "$name" "$journal" "$kinds" "$every" --seed "$wseed" "${extra[@]}" \
    || fail=1
  made=$(grep '^crashgen: made' "$E2E_TMP/$name.crashgen" | sed 's/^crashgen: //')
  loginfo=$(grep '^crashgen: log' "$E2E_TMP/$name.crashgen" | sed 's/^crashgen: log: //')
  echo "CRASH: $name: $CRASH_SUMMARY"
  rows+=("| $policy | $name | $mode | $ws | $decl | $CRASH_HELD | $CRASH_FIRST_ABSORBED / $CRASH_ABSORBED | $CRASH_HELD_NOW | $loginfo | $made | ${CRASH_SUMMARY#crashgen: checked } |")
  rm -f "$E2E_TMP/$name.img"
done
t1=$(date +%s)

clean_rate=$(crash_rate "$CRASH_T_CLEAN" "$CRASH_T_STATES")
oracle_rate=$(crash_rate "$CRASH_T_ORACLE" "$CRASH_T_STATES")
echo "CRASH: states checked $CRASH_T_STATES, clean rate $clean_rate, oracle pass rate $oracle_rate, checker errors $CRASH_T_ERRORS, kernel-replay sample $CRASH_T_MOUNTED states, $((t1 - t0)) s"

if [ -n "$report" ]; then
  tnote="exempt, not compared"
  [ "$CRASH_TIMES" = 1 ] && tnote=compared
  {
    echo "### policy=$policy"
    echo
    echo "\`tests/crash/test-crash.sh --policy=$policy$([ "$long" = 1 ] && echo ' --long') --seed $seed\`"
    echo "on $(date -u +%Y-%m-%d), guest kernel $E2E_KVER, $(nproc) CPUs, $((t1 - t0)) s:"
    echo "$CRASH_T_STATES states, e2fsck clean rate $clean_rate, durability-oracle pass rate $oracle_rate"
    echo "(mtime/ctime $tnote),"
    echo "checker errors $CRASH_T_ERRORS, $CRASH_T_MOUNTED states also replayed by the kernel."
    echo
    echo "| policy | workload | persist | steps | declarations | writes held | tx absorbed (first / all) | held at kill | log | states made | checked |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
  } >>"$report"
  e2e_log "appended to $report"
fi

[ "$CRASH_T_STATES" -gt 0 ] || e2e_fail "no state was checked"
[ "$fail" = 0 ] && [ "$CRASH_T_ERRORS" = 0 ] \
  || e2e_fail "some crash states failed (reports above)"
echo "PASS: $CRASH_T_STATES crash states clean and durable"
