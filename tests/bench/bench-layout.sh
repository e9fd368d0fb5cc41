#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench-layout.sh --- what tracking the layout of a large filesystem costs:
# the latency of a group-descriptor write and of a superblock write (each
# timed together with the write after it, which would wait for a re-read
# of the layout), the server's start-up time and its resident
# memory, against filesystem size, for ext4lazy and nbdkit's file plugin.
#
# Not part of the test suite: run it by hand (see tests/bench/README.md).
# Every setting is an environment variable; `bench-layout.sh --help` lists
# them.

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_SRC="$REPO/tests/bench"

usage ()
{
  cat <<EOF
Usage: tests/bench/bench-layout.sh [--help]

For each size, makes a sparse ext4 image (mkfs.ext4 with lazy inode-table
and journal init, metadata_csum, 64bit) and serves it alternately with
ext4lazy and with nbdkit's file plugin (ABAB...).  Each run times the
start-up (launch to the first NBD connection), then BENCH_WRITES
descriptor writes and BENCH_WRITES superblock writes, each together with
the 4 KiB data write that follows it, and reads VmRSS/VmHWM of nbdkit.
Reports median and p90 latency, start-up, RSS and the ratios
ext4lazy / file per size.

Environment (defaults in brackets):
  EXT4LAZY_PLUGIN  plugin .so [build/plugin/nbdkit-ext4lazy-plugin.so]
  BENCH_SIZES      filesystem sizes [256M 64G 1T 4T 15T]
                   (15T, not 16T: ext4 with 4 KiB blocks limits a host
                   file to just under 16 TiB)
  BENCH_ROUNDS     rounds per size; each runs both servers [3]
  BENCH_WRITES     timed pairs per kind (descriptor, superblock) per run [20]
  BENCH_DIR        where the temporary directory of images is made
                   [/var/tmp]
  BENCH_FSCK       1 checks each image with e2fsck -fn after its runs [1]
  BENCH_OUTDIR     where layout.csv and layout.png go [docs/bench]
  BENCH_DOC        markdown file whose bench-layout section is (re)written
                   [docs/benchmarks.md]
  BENCH_PLOT       0 skips the PNG [1]
EOF
}

if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  usage
  exit 0
elif [ $# -gt 0 ]; then
  usage >&2
  exit 2
fi

PY=/usr/bin/python3

die ()
{
  echo "bench-layout: error: $*" >&2
  exit 1
}

note ()
{
  echo "bench-layout: $*" >&2
}

# ---- settings ----------------------------------------------------------

PLUGIN=${EXT4LAZY_PLUGIN:-$REPO/build/plugin/nbdkit-ext4lazy-plugin.so}
SIZES=${BENCH_SIZES:-256M 64G 1T 4T 15T}
ROUNDS=${BENCH_ROUNDS:-3}
WRITES=${BENCH_WRITES:-20}
BASEDIR=${BENCH_DIR:-/var/tmp}
FSCK=${BENCH_FSCK:-1}
OUTDIR=${BENCH_OUTDIR:-$REPO/docs/bench}
DOC=${BENCH_DOC:-$REPO/docs/benchmarks.md}
PLOT=${BENCH_PLOT:-1}
MKFS_OPTS="-q -F -E lazy_itable_init=1,lazy_journal_init=1 -O metadata_csum,64bit"

for v in "$ROUNDS" "$WRITES"; do
  [[ "$v" =~ ^[0-9]+$ ]] || die "not a number: '$v'"
done
[ "$ROUNDS" -ge 1 ] || die "BENCH_ROUNDS must be at least 1"
[ "$WRITES" -ge 1 ] || die "BENCH_WRITES must be at least 1"
[ -n "$SIZES" ] || die "BENCH_SIZES is empty"
for s in $SIZES; do
  b=$(numfmt --from=iec "$s" 2>/dev/null) || die "bad size '$s' in BENCH_SIZES"
  [ "$b" -ge $((64 * 1024 * 1024)) ] || die "size '$s' is below 64M"
done

# ---- tool checks -------------------------------------------------------

[ -x "$PY" ] || die "$PY not found"
"$PY" -c 'import nbd' 2>/dev/null ||
  die "$PY has no nbd module (apt-get install python3-libnbd)"
command -v nbdkit >/dev/null || die "nbdkit not found (apt-get install nbdkit)"
command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 not found (e2fsprogs)"
[ -f "$PLUGIN" ] || die "plugin not found: $PLUGIN (build it or set EXT4LAZY_PLUGIN)"
PLUGIN=$(cd "$(dirname "$PLUGIN")" && pwd)/$(basename "$PLUGIN")
nbdkit --dump-plugin file >/dev/null 2>&1 || die "nbdkit cannot load its file plugin"
if ! err=$(nbdkit --dump-plugin "$PLUGIN" 2>&1 >/dev/null); then
  echo "$err" >&2
  die "nbdkit cannot load $PLUGIN"
fi

# ---- workspace and cleanup ---------------------------------------------

[ -d "$BASEDIR" ] || die "BENCH_DIR $BASEDIR is not a directory"
# The images are sparse: mkfs with lazy init writes a few hundred MiB at
# most (about 220 MiB for 15T).  Ask for 2 GiB free to be safe.
avail_kb=$(df -Pk "$BASEDIR" | awk 'NR == 2 { print $4 }')
[ "$avail_kb" -ge $((2 * 1024 * 1024)) ] ||
  die "less than 2 GiB free in $BASEDIR (set BENCH_DIR)"
WORK=$(mktemp -d "$BASEDIR/bench-layout.XXXXXX")
SOCK=$WORK/nbd.sock
RAW=$WORK/samples.csv
LOG=$WORK/nbdkit.log
IMG=$WORK/fs.img

cleanup ()
{
  local rc=$?
  # bench-layout.py runs nbdkit with --exit-with-parent and waits for it,
  # so no server outlives the measuring script.
  if [ $rc != 0 ] && [ -s "$LOG" ]; then
    note "last lines of the server log:"
    tail -n 5 "$LOG" >&2
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

make_image ()
{
  local size=$1
  rm -f "$IMG"
  truncate -s "$size" "$IMG" ||
    die "cannot make a $size file in $BASEDIR (its filesystem's file-size limit?)"
  # shellcheck disable=SC2086
  mkfs.ext4 $MKFS_OPTS "$IMG" >/dev/null ||
    die "mkfs.ext4 failed for $size"
}

# ---- machine description -----------------------------------------------

CPU_MODEL=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
[ -n "$CPU_MODEL" ] || CPU_MODEL=unknown
FS_DF=$(df -T "$WORK" | awk 'NR == 2 { print $2 }')
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

# ---- run ---------------------------------------------------------------

nsizes=$(wc -w <<< "$SIZES")
note "$nsizes sizes x $ROUNDS rounds x 2 servers, $WRITES pairs per kind; images in $WORK"
for s in $SIZES; do
  t0=$(date +%s)
  make_image "$s"
  alloc=$(( $(stat -c %b "$IMG") * $(stat -c %B "$IMG") ))
  note "$s: image made in $(( $(date +%s) - t0 )) s, $(numfmt --to=iec "$alloc") allocated"
  for ((r = 1; r <= ROUNDS; r++)); do
    pos=0
    for server in "$PLUGIN" file; do
      "$PY" "$BENCH_SRC/bench-layout.py" run "$IMG" "$s" "$server" "$r" \
            "$pos" "$WRITES" "$SOCK" "$LOG" "$RAW"
      pos=$((pos + 1))
    done
  done
  if [ "$FSCK" = 1 ]; then
    e2fsck -fn "$IMG" > "$WORK/fsck.log" 2>&1 || {
      cat "$WORK/fsck.log" >&2
      die "e2fsck -fn found the $s image damaged after its runs"
    }
  fi
  rm -f "$IMG"
done

# ---- report ------------------------------------------------------------

mkdir -p "$OUTDIR"
CSV=$OUTDIR/layout.csv
PNG=$OUTDIR/layout.png
cp "$RAW" "$CSV"

export BENCH_META_DATE="$DATE"
BENCH_META_NPROC=$(nproc)
export BENCH_META_NPROC
export BENCH_META_CPU="$CPU_MODEL"
BENCH_META_KERNEL=$(uname -r)
export BENCH_META_KERNEL
export BENCH_META_FS="$FS_DF"
BENCH_META_NBDKIT=$(nbdkit --version | head -n 1)
export BENCH_META_NBDKIT
export BENCH_META_MKFS="${MKFS_OPTS#-q -F }"

[ "$PLOT" = 1 ] || PNG=-
rc=0
"$PY" "$BENCH_SRC/bench-layout.py" report "$CSV" "$DOC" "$PNG" || rc=$?
if [ "$rc" = 77 ]; then
  note "no plot: python3-matplotlib is not installed (apt-get install python3-matplotlib)"
elif [ "$rc" != 0 ]; then
  die "the report failed"
fi
written="$CSV"
if [ "$PNG" != - ] && [ "$rc" = 0 ]; then written="$written, $PNG"; fi
note "wrote $written and the bench-layout section of $DOC"
