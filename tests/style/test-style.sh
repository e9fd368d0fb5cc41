#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# test-style.sh --- the shape rules of the engine and plugin sources:
# every C file is as clang-format writes it (.clang-format), and no
# function in daemon/ or plugin/ is longer than 80 lines (from the "{"
# at column 0 to the "}" at column 0, GNU style).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
status=0

too_long=$(awk '
  /^[a-z_][a-z0-9_]* \(/ { name = $1 }
  /^\{/ { start = FNR }
  /^\}/ {
    if (start && FNR - start + 1 > 80)
      printf "%s:%d: %s is %d lines\n", FILENAME, start, name, FNR - start + 1
    start = 0
  }' daemon/*.c plugin/*.c)
if [ -n "$too_long" ]; then
  echo "functions over 80 lines:" >&2
  echo "$too_long" >&2
  status=1
fi

# One version, packaged on Debian 12 and 13 alike: versions format
# differently.
cf=clang-format-19
if ! command -v $cf >/dev/null 2>&1; then
  echo "SKIP: $cf is not installed (package $cf)" >&2
  [ $status -eq 0 ] && exit 77
  exit $status
fi
files=$(git ls-files '*.c' '*.h' 2>/dev/null || ls daemon/*.[ch] include/*.h plugin/*.c)
if ! $cf --dry-run --Werror $files; then
  echo "not as $cf writes them (run $cf -i)" >&2
  status=1
fi
exit $status
