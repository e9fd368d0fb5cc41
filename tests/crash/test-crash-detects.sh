#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-crash-detects.sh --- the crash checker must be able to fail.  The
# journaled workload runs once; then crashgen builds "unsafe" states from
# its log: the writes a store flush covered are dropped while the writes
# after that flush are kept, as a server that acknowledged a flush without
# writing back would leave them.  The test passes only if the checker
# (e2fsck and the durability oracle) reports failures for them, and if the
# honest flush-boundary states of the same log pass.
#
# Then the timestamp side: under policy=lazy a fsync'ed mtime may be lost
# (the promise exempts timestamps there).  A policy=lazy log, checked with
# the mtime/ctime comparison that strict and atime get, must show such
# losses (the workload sets mtimes and fsyncs them after a checkpoint, a
# transaction lazy absorbs), and every such state must fail on a timestamp
# alone: its filesystem clean, its files' contents and sizes durable.
# (The workloads are short: test-crash.sh checks the same kinds of log at
# length; here the checker only has to be shown to fail.)
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/crashlib.sh"

crash_init
crash_run_guest detect "" strictatime fsync 30 11

crash_check detect 1 all 0 --flush \
  || e2e_fail "the flush-boundary states of the log failed (see above)"
honest=$CRASH_SUMMARY

if crash_check detect 1 all 0 --unsafe; then
  e2e_fail "the checker passed every unsafe state: it cannot detect a lost flush"
fi
unsafe=$CRASH_SUMMARY
echo "CRASH: honest: $honest"
echo "CRASH: unsafe: $unsafe"
read -r n c o < <(sed -E 's/.*checked ([0-9]+) states: fsck clean ([0-9]+)\/[0-9]+, oracle pass ([0-9]+)\/.*/\1 \2 \3/' <<<"$unsafe")
[ "$n" -gt 0 ] || e2e_fail "no unsafe state was made"
echo "CRASH: of $n unsafe states, $((n - c)) failed e2fsck and $((n - o)) failed the durability oracle"

E2E_PLUGIN_ARGS="policy=lazy ${E2E_PLUGIN_ARGS:-}" \
  crash_run_guest lazytimes "" strictatime,commit=1 fsync 40 12
[ "$CRASH_ABSORBED" -gt 0 ] || e2e_fail "policy=lazy absorbed no transaction"
if CRASH_TIMES=1 crash_check lazytimes 1 all 0 --flush --subset 100 --seed 12; then
  e2e_fail "policy=lazy lost no fsync'ed mtime: the timestamp check is not shown to work"
fi
lazy_times=$CRASH_SUMMARY
read -r n c < <(sed -E 's/.*checked ([0-9]+) states: fsck clean ([0-9]+)\/.*/\1 \2/' <<<"$lazy_times")
[ "$n" -gt 0 ] && [ "$c" = "$n" ] \
  || e2e_fail "policy=lazy: a state failed e2fsck ($lazy_times)"
# Every line a failed state's report has must be a timestamp difference.
logs=("$E2E_TMP/lazytimes.logs"/*)
[ -f "${logs[0]}" ] || e2e_fail "policy=lazy: the failed states left no report"
if grep -hv ' mtime [0-9.]* ctime [0-9.]*, durable mtime ' "${logs[@]}" | grep -q .; then
  grep -hv ' mtime [0-9.]* ctime [0-9.]*, durable mtime ' "${logs[@]}" | head -n 5 >&2
  e2e_fail "policy=lazy: a state failed on something other than a timestamp"
fi
echo "CRASH: policy=lazy, mtime/ctime compared: $lazy_times; ${#logs[@]} states failed, on timestamps alone"
echo "PASS: the checker caught a flush acknowledged without writing back, and timestamps lost under policy=lazy"
