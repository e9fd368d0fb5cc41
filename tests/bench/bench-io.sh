#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench-io.sh --- I/O throughput of the ext4lazy plugin against nbdkit's own
# file plugin on the same backing image, measured with fio's nbd ioengine.
#
# Not part of the test suite: run it by hand (see tests/bench/README.md).
# Every setting is an environment variable; `bench-io.sh --help` lists them.

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_SRC="$REPO/tests/bench"

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

if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  usage
  exit 0
elif [ $# -gt 0 ]; then
  usage >&2
  exit 2
fi

PY=/usr/bin/python3
# shellcheck source-path=SCRIPTDIR source=fio-lib.sh
. "$BENCH_SRC/fio-lib.sh"

# ---- settings ----------------------------------------------------------

PLUGIN=${EXT4LAZY_PLUGIN:-$REPO/build/plugin/nbdkit-ext4lazy-plugin.so}
ROUNDS=${BENCH_ROUNDS:-5}
RUNTIME=${BENCH_RUNTIME:-10}
RAMP=${BENCH_RAMP:-1}
SIZE=${BENCH_SIZE:-1G}
THREADS=${BENCH_THREADS:-16}
RAND_IODEPTH=${BENCH_RAND_IODEPTH:-16}
SEQ_IODEPTH=${BENCH_SEQ_IODEPTH:-4}
CASES=${BENCH_CASES:-randread randwrite seqread seqwrite}
OFFSET=${BENCH_OFFSET:-auto}
WORKDIR=${BENCH_WORKDIR:-$REPO/tests/bench/out/work}
KEEP=${BENCH_KEEP:-0}
PLOT=${BENCH_PLOT:-1}

if [ "$PLUGIN" = "file" ]; then
  SANITY=1
  VARIANTS=${BENCH_VARIANTS:-sanity}
  OUTDIR=${BENCH_OUTDIR:-$REPO/tests/bench/out}
  DOC=${BENCH_DOC:-$REPO/tests/bench/out/benchmarks.md}
  note "EXT4LAZY_PLUGIN=file: sanity run, the file plugin on both sides"
  note "(ratios should be about 1.00; results go to $OUTDIR, not docs/)"
else
  SANITY=0
  VARIANTS=${BENCH_VARIANTS:-uring psync direct}
  OUTDIR=${BENCH_OUTDIR:-$REPO/docs/bench}
  DOC=${BENCH_DOC:-$REPO/docs/benchmarks.md}
fi

for v in "$ROUNDS" "$RUNTIME" "$RAMP" "$THREADS" "$RAND_IODEPTH" \
         "$SEQ_IODEPTH"; do
  [[ "$v" =~ ^[0-9]+$ ]] || die "not a number: '$v'"
done
[ "$ROUNDS" -ge 1 ] || die "BENCH_ROUNDS must be at least 1"
[ "$RUNTIME" -ge 1 ] || die "BENCH_RUNTIME must be at least 1"
for c in $CASES; do
  case "$c" in
    randread|randwrite|seqread|seqwrite) ;;
    *) die "unknown case '$c' in BENCH_CASES" ;;
  esac
done
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
[ -n "$CASES" ] || die "BENCH_CASES is empty"
[ -n "$VARIANTS" ] || die "BENCH_VARIANTS is empty"

SIZE_BYTES=$(numfmt --from=iec "$SIZE") || die "bad BENCH_SIZE '$SIZE'"
[ "$SIZE_BYTES" -ge $((64 * 1024 * 1024)) ] ||
  die "BENCH_SIZE must be at least 64M"
if [ "$OFFSET" != auto ]; then
  OFFSET_BYTES=$(numfmt --from=iec "$OFFSET") || die "bad BENCH_OFFSET"
  [ "$OFFSET_BYTES" -lt "$SIZE_BYTES" ] || die "BENCH_OFFSET beyond the image"
fi

# ---- tool checks -------------------------------------------------------

check_fio_tools
command -v nbdkit >/dev/null || die "nbdkit not found (apt-get install nbdkit)"
if [ "$SANITY" = 0 ]; then
  [ -f "$PLUGIN" ] ||
    die "plugin not found: $PLUGIN (build it, set EXT4LAZY_PLUGIN, or use EXT4LAZY_PLUGIN=file for a sanity run)"
  PLUGIN=$(cd "$(dirname "$PLUGIN")" && pwd)/$(basename "$PLUGIN")
fi
nbdkit --dump-plugin file >/dev/null 2>&1 || die "nbdkit cannot load its file plugin"
if [ "$SANITY" = 0 ]; then
  if ! err=$(nbdkit --dump-plugin "$PLUGIN" 2>&1 >/dev/null); then
    echo "$err" >&2
    die "nbdkit cannot load $PLUGIN"
  fi
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

stop_nbdkit ()
{
  if [ -n "$NBDKIT_PID" ]; then
    kill "$NBDKIT_PID" 2>/dev/null || true
    wait "$NBDKIT_PID" 2>/dev/null || true
    NBDKIT_PID=
  fi
  rm -f "$SOCK" "$PIDFILE"
}

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
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the image ---------------------------------------------------------
# make_image and head_metadata_end are in fio-lib.sh.

restore_image ()
{
  cp --sparse=never "$MASTER" "$IMG"
}

prepare_cache ()
{
  if [ "$CACHE" = drop ]; then
    sync
    echo 3 > /proc/sys/vm/drop_caches
  else
    cat "$IMG" > /dev/null
  fi
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

start_nbdkit ()
{
  local side=$1 log=$WORKDIR/nbdkit-$1.log
  stop_nbdkit
  # shellcheck disable=SC2046
  nbdkit -f --exit-with-parent -U "$SOCK" -P "$PIDFILE" -t "$THREADS" \
         $(side_args "$side") > "$log" 2>&1 &
  NBDKIT_PID=$!
  # nbdkit writes the pidfile once it is listening.
  for _ in $(seq 200); do
    [ -s "$PIDFILE" ] && return 0
    if ! kill -0 "$NBDKIT_PID" 2>/dev/null; then
      cat "$log" >&2
      NBDKIT_PID=
      die "nbdkit ($side) exited before it was ready; log above"
    fi
    sleep 0.05
  done
  cat "$log" >&2
  die "nbdkit ($side) not ready after 10 s"
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
  prepare_cache
  start_nbdkit "$side"
  run_fio "nbd+unix:///?socket=$SOCK" "$c" "$OFFSET_BYTES" "$json" ||
    die "fio failed: round $round, $c, $side"
  if is_write "$c"; then DIRTY=1; fi
  stop_nbdkit
  fio_row "$json" "$round" "$c" "$side" "$(side_params "$side")" "$pos" \
      >> "$RAW"
  tail -n 1 "$RAW" | awk -F, '{ printf "bench-io:   round %s %-9s %-8s %10.0f IOPS %9.1f MiB/s\n", $1, $2, $3, $6, $7 }' >&2
}

# ---- machine description -----------------------------------------------

describe_machine
FS_DF=$(df -T "$WORKDIR" | awk 'NR == 2 { print $2 }')
FS_STATF=$(stat -f -c %T "$WORKDIR")

# ---- run ---------------------------------------------------------------

make_image "$MASTER" "$SIZE_BYTES" "$WORKDIR"
if [ "$OFFSET" = auto ]; then
  OFFSET_BYTES=$(head_metadata_end "$MASTER") || die "dumpe2fs could not read the image"
  OFFSET=$(numfmt --to=iec "$OFFSET_BYTES")
  note "I/O region: from $OFFSET (after the head metadata) to the end"
fi
restore_image
DIRTY=0

# Load every side once, so that a bad parameter fails before the rounds.
SIDES="file $VARIANTS"
for s in $SIDES; do
  start_nbdkit "$s"
  stop_nbdkit
done

nsides=$(wc -w <<< "$SIDES")
ncases=$(wc -w <<< "$CASES")
est=$((ROUNDS * ncases * nsides * (RUNTIME + RAMP + 2)))
note "$ROUNDS rounds x $ncases cases x $nsides sides, about $((est / 60 + 1)) min (cache: $CACHE)"

echo "round,case,side,params,position,iops,mib_s,clat_mean_us,runtime_ms" > "$RAW"
read -r -a side_list <<< "$SIDES"
for ((r = 1; r <= ROUNDS; r++)); do
  for c in $CASES; do
    # Rotate the order each round so that no side always runs first or
    # right after a write: A B C D, then B C D A, ...
    for ((k = 0; k < nsides; k++)); do
      s=${side_list[$(((k + r - 1) % nsides))]}
      run_one "$r" "$c" "$s" "$k"
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
      note "no plot: python3-matplotlib is not installed (apt-get install python3-matplotlib)"
    else
      die "the plot script failed"
    fi
  fi
fi

export BENCH_META_DATE="$DATE"
BENCH_META_NPROC=$(nproc)
export BENCH_META_NPROC
export BENCH_META_CPU="$CPU_MODEL"
BENCH_META_KERNEL=$(uname -r)
export BENCH_META_KERNEL
export BENCH_META_FS="$FS_DF (stat -f: $FS_STATF)"
export BENCH_META_NBDKIT="$NBDKIT_VERSION"
export BENCH_META_FIO="$FIO_VERSION"
export BENCH_META_SIZE="$SIZE"
export BENCH_META_ROUNDS="$ROUNDS"
export BENCH_META_RUNTIME="$RUNTIME"
export BENCH_META_RAMP="$RAMP"
export BENCH_META_THREADS="$THREADS"
export BENCH_META_RAND_IODEPTH="$RAND_IODEPTH"
export BENCH_META_SEQ_IODEPTH="$SEQ_IODEPTH"
export BENCH_META_OFFSET="$OFFSET"
export BENCH_META_OFFSET_AUTO="${BENCH_OFFSET:-auto}"
export BENCH_META_CACHE="$CACHE"
export BENCH_META_SANITY="$SANITY"
export BENCH_META_PLUGIN="$PLUGIN"
"$PY" "$BENCH_SRC/bench-io-report.py" "$CSV" "$DOC" "$REPO" "$PLOT_NOTE"
