#!/bin/bash
# test-crash-detects.sh --- the crash checker must be able to fail.  The
# journaled workload runs once; then crashgen builds "unsafe" states from
# its log: the writes a store flush covered are dropped while the writes
# after that flush are kept, as a server that acknowledged a flush without
# writing back would leave them.  The test passes only if the checker
# (e2fsck and the durability oracle) reports failures for them, and if the
# honest flush-boundary states of the same log pass.
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/crashlib.sh"

crash_init
crash_run_guest detect "" strictatime fsync 60 11

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
echo "PASS: of $n unsafe states, $((n - c)) failed e2fsck and $((n - o)) failed the durability oracle"
