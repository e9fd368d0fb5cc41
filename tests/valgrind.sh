#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# valgrind.sh --- the wrapper of the "valgrind" test setup: runs a test
# under valgrind and fails it (exit 119) on any memory error or definite
# leak in any of its processes.  Criterion runs tests in worker
# processes whose exit status its runner does not pass on, so valgrind's
# own exit code is not enough: every process's log is read.
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# Trace the test binary and the workers it re-executes, not the
# mkfs/debugfs/sh it runs.
valgrind --leak-check=full --errors-for-leak-kinds=definite \
  --show-leak-kinds=definite --error-exitcode=119 --trace-children=yes \
  --trace-children-skip='/bin/*,/usr/bin/*,/sbin/*,/usr/sbin/*' \
  --suppressions="$here/valgrind.supp" --log-file="$logs/vg.%p" "$@"
status=$?
bad=$(grep -l 'ERROR SUMMARY: [1-9]' "$logs"/vg.* 2>/dev/null)
if [ -n "$bad" ]; then
  cat $bad >&2
  exit 119
fi
exit $status
