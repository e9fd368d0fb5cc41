#!/bin/bash
# test-crash-detects.sh --- the harness can fail: the same workload, with
# crash states built as an unsafe server would leave them (a flush
# acknowledged without the writes just before it), must be caught.
export CRASH_EXTRA="--unsafe-drop-before-flush 4"
export CRASH_SUBSETS=0
out=$(bash "$(dirname "$0")/test-crash.sh" 2>&1)
st=$?
echo "$out" | grep -E '^(CRASH|SKIP|FAIL)' >&2
[ $st -eq 77 ] && exit 77
if [ $st -eq 0 ]; then
  echo "FAIL: the checker passed an unsafe variant" >&2
  exit 1
fi
echo "$out" | grep -q '^CRASH: .* failed [1-9]' || {
  echo "$out" | tail -20 >&2
  echo "FAIL: the harness failed for another reason" >&2
  exit 1
}
echo "PASS: the checker caught the unsafe variant"
