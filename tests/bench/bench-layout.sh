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

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

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

bench_args "$@"

# ---- settings ----------------------------------------------------------

PLUGIN=${EXT4LAZY_PLUGIN:-$DEFAULT_PLUGIN}
SIZES=${BENCH_SIZES:-256M 64G 1T 4T 15T}
ROUNDS=${BENCH_ROUNDS:-3}
WRITES=${BENCH_WRITES:-20}
BASEDIR=${BENCH_DIR:-/var/tmp}
FSCK=${BENCH_FSCK:-1}
OUTDIR=${BENCH_OUTDIR:-$REPO/docs/bench}
DOC=${BENCH_DOC:-$REPO/docs/benchmarks.md}
PLOT=${BENCH_PLOT:-1}
MKFS_OPTS="-q -F -E lazy_itable_init=1,lazy_journal_init=1 -O metadata_csum,64bit"

check_numbers "$ROUNDS" "$WRITES"
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
command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 not found (e2fsprogs)"
check_nbdkit
check_plugin

# ---- workspace and cleanup ---------------------------------------------

# The images are sparse: mkfs with lazy init writes a few hundred MiB at
# most (about 220 MiB for 15T).  Ask for 2 GiB free to be safe.
bench_workdir "$BASEDIR" $((2 * 1024 * 1024)) "2 GiB"
SOCK=$WORK/nbd.sock
RAW=$WORK/samples.csv
LOG=$WORK/nbdkit.log
IMG=$WORK/fs.img

cleanup ()
{
  local rc=$?
  # bench-layout.py runs nbdkit with --exit-with-parent and waits for it,
  # so no server outlives the measuring script.
  work_cleanup $rc
  exit $rc
}
bench_traps

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

describe_machine "$WORK"

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

export_machine "$FS_DF"
export BENCH_META_MKFS="${MKFS_OPTS#-q -F }"

[ "$PLOT" = 1 ] || PNG=-
rc=0
"$PY" "$BENCH_SRC/bench-layout.py" report "$CSV" "$DOC" "$PNG" || rc=$?
if [ "$rc" = 77 ]; then
  no_plot_note
elif [ "$rc" != 0 ]; then
  die "the report failed"
fi
written="$CSV"
if [ "$PNG" != - ] && [ "$rc" = 0 ]; then written="$written, $PNG"; fi
note "wrote $written and the bench-layout section of $DOC"
