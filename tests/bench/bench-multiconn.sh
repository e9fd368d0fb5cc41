#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench-multiconn.sh --- several NBD connections hammering the inode
# tables of one ext4 image at once: time-only and real inode-table writes,
# data writes and flushes, through ext4lazy and through nbdkit's file
# plugin, with BENCH_CONNS connections and with one.
#
# Not part of the test suite: run it by hand (see tests/bench/README.md).
# Every setting is an environment variable; `bench-multiconn.sh --help`
# lists them.

set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage ()
{
  cat <<EOF
Usage: tests/bench/bench-multiconn.sh [--help]

Makes an ext4 image holding BENCH_FILES files, then runs a C libnbd
client (tests/bench/bench-multiconn.c, built by this script) against
ext4lazy and against nbdkit's file plugin, alternately, each run on a
fresh copy of the image, with BENCH_CONNS connections and with 1.  Each
connection does a random mix of time-only inode-table writes, real
inode-table writes, 4 KiB data writes and flushes for BENCH_RUNTIME
seconds.  Reports ops/s per side, the ratio ext4lazy / file and the
latency of each kind of op.

Environment (defaults in brackets):
  EXT4LAZY_PLUGIN  plugin .so [build/plugin/nbdkit-ext4lazy-plugin.so]
  EXT4LAZY_PARAMS  extra plugin parameters, e.g. "policy=lazy" []
  BENCH_CONNS      connections of the concurrent variant [4]
  BENCH_VARIANTS   connection counts to run [\$BENCH_CONNS 1]
  BENCH_ROUNDS     rounds; each runs every variant on both sides [3]
  BENCH_RUNTIME    seconds per run [10]
  BENCH_MIX        percentages time,real,data,flush [60,10,25,5]
  BENCH_TOUCH      what a time-only write moves: all (i_atime, i_mtime,
                   i_ctime) or atime (i_atime alone) [all]
  BENCH_SIZE       image size [1G]
  BENCH_FILES      files in the image [4000]
  BENCH_THREADS    nbdkit -t threads, the same for both sides [16]
  BENCH_SEED       seed of the clients' random choices [1]
  BENCH_DIR        where the temporary directory of images is made
                   [/var/tmp]
  BENCH_FSCK       1 checks the image with e2fsck -fn after every run [1]
  EXT4LAZYCTL      ext4lazyctl, to read ext4lazy's counters at the end of
                   each run (held, real, superseded); none: skip them
                   [build/daemon/ext4lazyctl]
  BENCH_OUTDIR     where multiconn.csv goes [docs/bench]
  BENCH_DOC        markdown file whose bench-multiconn section is
                   (re)written [docs/benchmarks.md]
EOF
}

bench_args "$@"

# ---- settings ----------------------------------------------------------

PLUGIN=${EXT4LAZY_PLUGIN:-$DEFAULT_PLUGIN}
PARAMS=${EXT4LAZY_PARAMS:-}
CONNS=${BENCH_CONNS:-4}
VARIANTS=${BENCH_VARIANTS:-$CONNS 1}
ROUNDS=${BENCH_ROUNDS:-3}
RUNTIME=${BENCH_RUNTIME:-10}
MIX=${BENCH_MIX:-60,10,25,5}
TOUCH=${BENCH_TOUCH:-all}
SIZE=${BENCH_SIZE:-1G}
FILES=${BENCH_FILES:-4000}
THREADS=${BENCH_THREADS:-16}
SEED=${BENCH_SEED:-1}
BASEDIR=${BENCH_DIR:-/var/tmp}
FSCK=${BENCH_FSCK:-1}
OUTDIR=${BENCH_OUTDIR:-$REPO/docs/bench}
DOC=${BENCH_DOC:-$REPO/docs/benchmarks.md}
CTL=${EXT4LAZYCTL:-$REPO/build/daemon/ext4lazyctl}

# shellcheck disable=SC2086
check_numbers "$CONNS" "$ROUNDS" "$RUNTIME" "$FILES" "$THREADS" "$SEED" $VARIANTS
check_rounds
[ "$FILES" -ge 16 ] || die "BENCH_FILES must be at least 16"
for v in $VARIANTS; do
  [ "$v" -ge 1 ] || die "a connection count must be at least 1"
done
IFS=, read -r MIX_TIME MIX_REAL MIX_DATA MIX_FLUSH <<< "$MIX"
for v in "$MIX_TIME" "$MIX_REAL" "$MIX_DATA" "$MIX_FLUSH"; do
  [[ "$v" =~ ^[0-9]+$ ]] || die "BENCH_MIX must be four numbers: time,real,data,flush"
done
[ $((MIX_TIME + MIX_REAL + MIX_DATA + MIX_FLUSH)) = 100 ] ||
  die "BENCH_MIX must add up to 100"
case "$TOUCH" in
  all|atime) ;;
  *) die "BENCH_TOUCH must be all or atime" ;;
esac
SIZE_BYTES=$(numfmt --from=iec "$SIZE") || die "bad BENCH_SIZE '$SIZE'"
[ "$SIZE_BYTES" -ge $((256 * 1024 * 1024)) ] || die "BENCH_SIZE must be at least 256M"

# ---- tool checks -------------------------------------------------------

[ -x "$PY" ] || die "$PY not found"
command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 not found (e2fsprogs)"
command -v dumpe2fs >/dev/null || die "dumpe2fs not found (e2fsprogs)"
command -v cc >/dev/null || die "cc not found (apt-get install gcc)"
pkg-config --exists libnbd 2>/dev/null ||
  die "libnbd development files not found (apt-get install libnbd-dev pkg-config)"
check_nbdkit
check_plugin

# ---- workspace and cleanup ---------------------------------------------

bench_workdir "$BASEDIR" $((SIZE_BYTES * 3 / 1024)) "3 x $SIZE"
MASTER=$WORK/master.img
IMG=$WORK/run.img
SOCK=$WORK/nbd.sock
PIDFILE=$WORK/nbdkit.pid
LOG=$WORK/nbdkit.log
RAW=$WORK/runs.csv
CLIENT=$WORK/bench-multiconn
CTLSOCK=$WORK/ctl.sock
NBDKIT_PID=
if [ "$CTL" != none ] && [ ! -x "$CTL" ]; then
  note "no $CTL: ext4lazy's counters are not read (set EXT4LAZYCTL)"
  CTL=none
fi

cleanup ()
{
  local rc=$?
  stop_nbdkit
  work_cleanup $rc
  exit $rc
}
bench_traps

# ---- the client and the image ------------------------------------------

# shellcheck disable=SC2046
cc -O2 -std=gnu17 -Wall -o "$CLIENT" "$BENCH_SRC/bench-multiconn.c" \
   $(pkg-config --cflags --libs libnbd) -lpthread ||
  die "cannot build the client"

make_master ()
{
  local tree=$WORK/tree d
  note "making a $SIZE ext4 image with $FILES files"
  mkdir -p "$tree"
  # Files of 1-8 KiB in 16 directories, so that the inodes fill many
  # inode-table blocks (of more than one group) with real records.
  "$PY" - "$tree" "$FILES" <<'PYEOF'
import os, random, sys
tree, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
for d in range(16):
    os.makedirs(os.path.join(tree, f"d{d:02}"), exist_ok=True)
for i in range(n):
    with open(os.path.join(tree, f"d{i % 16:02}", f"f{i:06}"), "wb") as f:
        f.write(rng.randbytes(rng.randint(1, 8) * 1024))
PYEOF
  truncate -s "$SIZE" "$MASTER"
  mkfs.ext4 -q -F -b 4096 -I 256 -O metadata_csum,64bit -E nodiscard \
            -d "$tree" "$MASTER" || die "mkfs.ext4 failed"
  rm -rf "$tree"
  d=$(e2fsck -fn "$MASTER" 2>&1) || { echo "$d" >&2; die "the new image is not clean"; }
}

# start_side SIDE: nbdkit serving SIDE (ext4lazy or file).
start_side ()
{
  local side=$1 args=(file "file=$IMG")
  # shellcheck disable=SC2206
  [ "$side" = ext4lazy ] && args=("$PLUGIN" "file=$IMG" $PARAMS)
  [ "$side" = ext4lazy ] && [ "$CTL" != none ] && args+=("control=$CTLSOCK")
  start_nbdkit "$side" "$LOG" 20 "${args[@]}"
}

# run_one ROUND POSITION CONNS SIDE: appends one CSV row to $RAW.
run_one ()
{
  local round=$1 pos=$2 n=$3 side=$4 out=$WORK/client.out
  cp --sparse=always "$MASTER" "$IMG"
  start_side "$side"
  if ! timeout --foreground $((RUNTIME + 120)) \
       "$CLIENT" "$SOCK" "$WORK/plan-$n" "$n" "$RUNTIME" "$MIX_TIME" \
       "$MIX_REAL" "$MIX_DATA" "$MIX_FLUSH" "$TOUCH" "$SEED" > "$out"; then
    die "the client failed: round $round, $n connection(s), $side"
  fi
  # ext4lazy's counters for the whole run, summed over its instances.
  local held='' realw='' sup=''
  if [ "$side" = ext4lazy ] && [ "$CTL" != none ]; then
    read -r held realw sup < <("$CTL" -s "$CTLSOCK" stats | awk '
      $1 == "held" { h += $2 } $1 == "real_writes" { r += $2 }
      $1 == "superseded" { s += $2 } END { print h + 0, r + 0, s + 0 }')
  fi
  # Stopping the server writes back what ext4lazy holds.
  stop_nbdkit
  local fsck=skipped
  if [ "$FSCK" = 1 ]; then
    if e2fsck -fn "$IMG" > "$WORK/fsck.log" 2>&1; then
      fsck=clean
    else
      cat "$WORK/fsck.log" >&2
      die "e2fsck -fn: the image is damaged after round $round, $n connection(s), $side"
    fi
  fi
  "$PY" - "$out" "$round" "$pos" "$n" "$side" "$fsck" "$held" "$realw" "$sup" \
      >> "$RAW" <<'PYEOF'
import sys
out, rnd, pos, n, side, fsck, held, realw, sup = sys.argv[1:10]
kv = dict(l.strip().split("=", 1) for l in open(out) if "=" in l)
cols = ["elapsed_s", "ops", "ops_s", "requests", "requests_s"]
for k in ("time", "real", "data", "flush"):
    cols += [f"{k}_n", f"{k}_p50_us", f"{k}_p99_us", f"{k}_mean_us"]
print(",".join([rnd, pos, n, side] + [kv[c] for c in cols] + [fsck, held, realw, sup]))
PYEOF
  tail -n 1 "$RAW" | awk -F, '{ printf "bench-multiconn:   round %s %s conn %-8s %9.0f ops/s %9.0f requests/s\n", $1, $3, $4, $7, $9 }' >&2
}

# ---- machine description -----------------------------------------------

describe_machine "$WORK"

# ---- run ---------------------------------------------------------------

make_master
for n in $VARIANTS; do
  "$PY" "$BENCH_SRC/bench-multiconn.py" plan "$MASTER" "$n" "$WORK/plan-$n"
done

{
  printf 'round,position,conns,side,elapsed_s,ops,ops_s,requests,requests_s'
  for k in time real data flush; do
    printf ',%s_n,%s_p50_us,%s_p99_us,%s_mean_us' "$k" "$k" "$k" "$k"
  done
  printf ',fsck,held,real_writes,superseded\n'
} > "$RAW"
nvar=$(wc -w <<< "$VARIANTS")
note "$ROUNDS rounds x $nvar variants x 2 sides x $RUNTIME s, about $((ROUNDS * nvar * 2 * (RUNTIME + 3) / 60 + 1)) min"
for ((r = 1; r <= ROUNDS; r++)); do
  pos=0
  for n in $VARIANTS; do
    for side in ext4lazy file; do
      run_one "$r" "$pos" "$n" "$side"
      pos=$((pos + 1))
    done
  done
done

# ---- report ------------------------------------------------------------

mkdir -p "$OUTDIR"
CSV=$OUTDIR/multiconn.csv
cp "$RAW" "$CSV"

export_machine "$FS_DF"
export BENCH_META_SIZE="$SIZE" BENCH_META_FILES="$FILES"
export BENCH_META_RUNTIME="$RUNTIME" BENCH_META_THREADS="$THREADS"
export BENCH_META_MIX_TIME="$MIX_TIME" BENCH_META_MIX_REAL="$MIX_REAL"
export BENCH_META_MIX_DATA="$MIX_DATA" BENCH_META_MIX_FLUSH="$MIX_FLUSH"
if [ "$TOUCH" = all ]; then
  export BENCH_META_TOUCH_NOTE="i_atime, i_mtime and i_ctime"
else
  export BENCH_META_TOUCH_NOTE="i_atime"
fi
if [ -n "$PARAMS" ]; then
  export BENCH_META_PARAMS_NOTE=", ext4lazy with \`$PARAMS\`"
else
  export BENCH_META_PARAMS_NOTE=", ext4lazy with its defaults (policy=atime)"
fi
"$PY" "$BENCH_SRC/bench-multiconn.py" report "$CSV" "$DOC" ||
  die "the report failed"
note "wrote $CSV and the bench-multiconn section of $DOC"
