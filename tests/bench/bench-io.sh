#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench-io.sh --- I/O throughput of the ext4lazy plugin against nbdkit's own
# file plugin on the same backing image, measured with fio's nbd ioengine.
#
# Not part of the test suite: run it by hand (see tests/bench/README.md).
# Every setting is an environment variable; `bench-io.sh --help` lists them.

set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage ()
{
  cat <<EOF
Usage: tests/bench/bench-io.sh [--help]

Runs fio (ioengine=nbd) against nbdkit's file plugin and against the
ext4lazy plugin on the same ext4 image, in interleaved rounds, and reports
the median IOPS and MiB/s of each side and their ratio (ext4lazy / file).

Environment (defaults in brackets):
  EXT4LAZY_PLUGIN     plugin .so, or "file" for a file-vs-file sanity run
                      [build/plugin/nbdkit-ext4lazy-plugin.so]
  BENCH_ROUNDS        rounds; each round runs every side once per case [5]
  BENCH_RUNTIME       seconds measured per fio run [10]
  BENCH_RAMP          seconds of warm-up per fio run, not measured [1]
  BENCH_SIZE          image size (fio/numfmt suffixes: 512M, 1G, ...) [1G]
  BENCH_THREADS       nbdkit -t threads, the same for every side [16]
  BENCH_RAND_IODEPTH  iodepth of the 4 KiB random cases [16]
  BENCH_SEQ_IODEPTH   iodepth of the 1 MiB sequential cases [4]
  BENCH_CASES         subset of: randread randwrite seqread seqwrite [all]
  BENCH_VARIANTS      ext4lazy variants, subset of: uring psync direct
                      baseline [uring psync direct; "sanity" when
                      EXT4LAZY_PLUGIN=file]
  EXT4LAZY_BASELINE   for the "baseline" variant: another build of the
                      plugin (e.g. an earlier commit's), with backend=uring,
                      to compare two builds side by side in one run
  EXT4LAZY_PARAMS     more parameters for every ext4lazy side, e.g.
                      "policy=strict" to compare builds whose default
                      policies differ []
  BENCH_OFFSET        start of the I/O region in the image: a size, or
                      "auto" for the first MiB after the metadata at the
                      head of the filesystem (superblock, descriptors,
                      bitmaps, inode tables) [auto]
  BENCH_CACHE         drop: sync + drop caches before every run (root only)
                      warm: read the whole image into the page cache
                      before every run [drop when root, else warm]
  BENCH_WORKDIR       where the images live [tests/bench/out/work]
  BENCH_KEEP          1 keeps the images after the run [0]
  BENCH_OUTDIR        where the CSV and PNG go
                      [docs/bench; tests/bench/out for a sanity run]
  BENCH_DOC           markdown file whose bench-io section is (re)written
                      [docs/benchmarks.md; tests/bench/out/benchmarks.md
                      for a sanity run]
  BENCH_PLOT          0 skips the PNG [1]
EOF
}

bench_args "$@"

# ---- settings ----------------------------------------------------------

PLUGIN=${EXT4LAZY_PLUGIN:-$DEFAULT_PLUGIN}
fio_settings 5 1G
WORKDIR=${BENCH_WORKDIR:-$REPO/tests/bench/out/work}
KEEP=${BENCH_KEEP:-0}
PLOT=${BENCH_PLOT:-1}

if [ "$PLUGIN" = "file" ]; then
  SANITY=1
  VARIANTS=${BENCH_VARIANTS:-sanity}
else
  SANITY=0
  VARIANTS=${BENCH_VARIANTS:-uring psync direct}
fi
sanity_outputs "EXT4LAZY_PLUGIN=file: sanity run, the file plugin on both sides"

for v in $VARIANTS; do
  case "$v" in
    uring|psync|direct) [ "$SANITY" = 0 ] ||
      die "variant '$v' needs the ext4lazy plugin, not EXT4LAZY_PLUGIN=file" ;;
    baseline) [ -f "${EXT4LAZY_BASELINE:-}" ] ||
      die "variant 'baseline' needs EXT4LAZY_BASELINE, a plugin .so" ;;
    sanity) [ "$SANITY" = 1 ] ||
      die "variant 'sanity' is only for EXT4LAZY_PLUGIN=file" ;;
    *) die "unknown variant '$v' in BENCH_VARIANTS" ;;
  esac
done
[ -n "$VARIANTS" ] || die "BENCH_VARIANTS is empty"

# ---- tool checks -------------------------------------------------------

check_fio_tools
check_nbdkit
if [ "$SANITY" = 0 ]; then
  check_plugin "build it, set EXT4LAZY_PLUGIN, or use EXT4LAZY_PLUGIN=file for a sanity run"
fi

# Page-cache policy.
CACHE=${BENCH_CACHE:-}
if [ -z "$CACHE" ]; then
  if [ "$(id -u)" = 0 ]; then CACHE=drop; else CACHE=warm; fi
fi
case "$CACHE" in
  drop)
    sync
    if ! (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then
      note "cannot write /proc/sys/vm/drop_caches: using BENCH_CACHE=warm"
      CACHE=warm
    fi ;;
  warm) ;;
  *) die "BENCH_CACHE must be drop or warm" ;;
esac

# ---- workspace and cleanup ---------------------------------------------

case "$WORKDIR$PLUGIN" in
  *[[:space:]]*) die "BENCH_WORKDIR and EXT4LAZY_PLUGIN must not contain spaces" ;;
esac
mkdir -p "$WORKDIR" "$OUTDIR"
MASTER=$WORKDIR/master.img
IMG=$WORKDIR/bench.img
SOCK=$WORKDIR/nbd.sock
PIDFILE=$WORKDIR/nbdkit.pid
RAW=$WORKDIR/rounds.csv
NBDKIT_PID=

cleanup ()
{
  local rc=$?
  stop_nbdkit
  rm -rf "$WORKDIR/populate"
  if [ "$KEEP" != 1 ]; then
    rm -f "$MASTER" "$IMG"
  fi
  exit $rc
}
bench_traps

# ---- the image ---------------------------------------------------------
# fio_image, make_image and head_metadata_end are in lib.sh.

restore_image ()
{
  cp --sparse=never "$MASTER" "$IMG"
}

# ---- sides -------------------------------------------------------------
# A side is "file" (nbdkit's file plugin) or an ext4lazy variant.

side_args ()
{
  case "$1" in
    file|sanity) echo "file file=$IMG" ;;
    uring)  echo "$PLUGIN file=$IMG backend=uring ${EXT4LAZY_PARAMS:-}" ;;
    psync)  echo "$PLUGIN file=$IMG backend=psync ${EXT4LAZY_PARAMS:-}" ;;
    direct) echo "$PLUGIN file=$IMG direct=true ${EXT4LAZY_PARAMS:-}" ;;
    baseline) echo "$EXT4LAZY_BASELINE file=$IMG backend=uring ${EXT4LAZY_PARAMS:-}" ;;
  esac
}

side_params ()
{
  case "$1" in
    file) echo "file plugin" ;;
    sanity) echo "file plugin (sanity)" ;;
    uring)  echo "backend=uring" ;;
    psync)  echo "backend=psync" ;;
    direct) echo "direct=true" ;;
    baseline) echo "baseline build with backend=uring" ;;
  esac
}

# start_side SIDE: nbdkit serving SIDE.
start_side ()
{
  # shellcheck disable=SC2046
  start_nbdkit "$1" "$WORKDIR/nbdkit-$1.log" 10 $(side_args "$1")
}

# ---- one fio run -------------------------------------------------------

# run_one ROUND CASE SIDE POSITION: appends one CSV row to $RAW.
run_one ()
{
  local round=$1 c=$2 side=$3 pos=$4 json=$WORKDIR/fio.json
  if [ "$DIRTY" = 1 ]; then
    restore_image
    DIRTY=0
  fi
  prepare_cache "$IMG"
  start_side "$side"
  run_fio "nbd+unix:///?socket=$SOCK" "$c" "$OFFSET_BYTES" "$json" ||
    die "fio failed: round $round, $c, $side"
  if is_write "$c"; then DIRTY=1; fi
  stop_nbdkit
  fio_row "$json" "$round" "$c" "$side" "$(side_params "$side")" "$pos" \
      >> "$RAW"
  tail -n 1 "$RAW" | awk -F, '{ printf "bench-io:   round %s %-9s %-8s %10.0f IOPS %9.1f MiB/s\n", $1, $2, $3, $6, $7 }' >&2
}

# ---- machine description -----------------------------------------------

describe_machine "$WORKDIR"
FS_STATF=$(stat -f -c %T "$WORKDIR")

# ---- run ---------------------------------------------------------------

fio_image "$MASTER" "$WORKDIR"
restore_image
DIRTY=0

# Load every side once, so that a bad parameter fails before the rounds.
SIDES="file $VARIANTS"
for s in $SIDES; do
  start_side "$s"
  stop_nbdkit
done

nsides=$(wc -w <<< "$SIDES")
ncases=$(wc -w <<< "$CASES")
est=$((ROUNDS * ncases * nsides * (RUNTIME + RAMP + 2)))
note "$ROUNDS rounds x $ncases cases x $nsides sides, about $((est / 60 + 1)) min (cache: $CACHE)"

echo "round,case,side,params,position,iops,mib_s,clat_mean_us,runtime_ms" > "$RAW"
for ((r = 1; r <= ROUNDS; r++)); do
  for c in $CASES; do
    # Rotate the order each round so that no side always runs first or
    # right after a write: A B C D, then B C D A, ...
    k=0
    # shellcheck disable=SC2086
    for s in $(rotate "$r" $SIDES); do
      run_one "$r" "$c" "$s" "$k"
      k=$((k + 1))
    done
  done
done

# ---- report ------------------------------------------------------------

CSV=$OUTDIR/bench-io.csv
PNG=$OUTDIR/bench-io.png
cp "$RAW" "$CSV"

PLOT_NOTE=
if [ "$PLOT" = 1 ]; then
  if "$PY" "$BENCH_SRC/bench-io-plot.py" "$CSV" "$PNG" "$SANITY"; then
    PLOT_NOTE=$PNG
  else
    rc=$?
    if [ "$rc" = 77 ]; then
      no_plot_note
    else
      die "the plot script failed"
    fi
  fi
fi

export_machine "$FS_DF (stat -f: $FS_STATF)"
export_fio_meta
export BENCH_META_PLUGIN="$PLUGIN"
"$PY" "$BENCH_SRC/bench-io-report.py" "$CSV" "$DOC" "$REPO" "$PLOT_NOTE"
