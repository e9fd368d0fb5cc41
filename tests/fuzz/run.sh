#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# run.sh --- run the libFuzzer targets one after another (docs/fuzz.md).
#
#   tests/fuzz/run.sh [-t SECONDS | -n RUNS] BUILDDIR [TARGET...]
#
# BUILDDIR is a build made with CC=clang meson setup BUILDDIR
# -Dfuzz=enabled.  Each target (default: all four) runs for SECONDS
# (default 25) or RUNS executions from the seeds make-seeds.py writes
# to BUILDDIR/fuzz-seeds (made if missing), adding what it finds to
# BUILDDIR/fuzz-corpus/TARGET.  A crash, leak, timeout or memory limit
# leaves its input in BUILDDIR/fuzz-artifacts/TARGET/ and makes the
# exit status 1.  One summary line per target: executions, time,
# exec/s, coverage and features at the end.
set -uo pipefail

limit=(-max_total_time=25)
while getopts t:n: opt; do
  case $opt in
    t) limit=(-max_total_time="$OPTARG") ;;
    n) limit=(-runs="$OPTARG") ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -lt 1 ]; then
  echo "usage: $0 [-t SECONDS | -n RUNS] BUILDDIR [TARGET...]" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(jbd2 layout classify follower)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Inputs no larger than the seeds need: a 1 MiB device in the sparse form
# fuzz-layout.c reads (at most 128 KiB), two 4 KiB
# journal blocks, two 4 KiB inode-table blocks.
declare -A max_len=([jbd2]=8448 [layout]=131072 [classify]=8200
                    [follower]=8192)

seeds=$build/fuzz-seeds
if [ ! -d "$seeds/layout" ]; then
  python3 "$here/make-seeds.py" "$seeds" || exit 1
fi

# A small ASan quarantine keeps the RSS (corpus included) well under
# the 512 MiB limit.
asan=detect_leaks=1:quarantine_size_mb=32:malloc_context_size=20
export ASAN_OPTIONS=${ASAN_OPTIONS:-$asan}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

status=0
for t in "${targets[@]}"; do
  exe=$build/tests/fuzz/fuzz-$t
  corpus=$build/fuzz-corpus/$t
  art=$build/fuzz-artifacts/$t
  log=$build/fuzz-$t.log
  if [ ! -x "$exe" ] || [ -z "${max_len[$t]:-}" ]; then
    echo "fuzz: no target $t in $build" >&2
    status=1
    continue
  fi
  mkdir -p "$corpus" "$art"
  start=$(date +%s)
  "$exe" "$corpus" "$seeds/$t" "${limit[@]}" -max_len="${max_len[$t]}" \
    -rss_limit_mb=512 -malloc_limit_mb=128 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$art/" >"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  rate=$(( ${runs:-0} / (secs > 0 ? secs : 1) ))
  if [ $rc -eq 0 ]; then
    echo "fuzz-$t: ok: ${runs:-?} runs in ${secs}s (${rate}/s)," \
      "cov ${cov:-?}, ft ${ft:-?}"
  else
    echo "fuzz-$t: FAILED (exit $rc) after ${runs:-?} runs in ${secs}s;" \
      "input in $art/, log $log:" >&2
    grep -E 'ERROR|SUMMARY|runtime error|invariant broken|unit written' \
      "$log" | head -n 8 >&2
    status=1
  fi
done
exit $status
