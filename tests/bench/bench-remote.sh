#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench-remote.sh --- I/O throughput of ext4lazy in front of a remote
# backing store, against the usual way of serving that store over NBD:
#   rbd  ext4lazy rbd=POOL/IMAGE against qemu-storage-daemon's rbd driver,
#        both on the same RBD image of a throwaway single-node Ceph cluster
#        (tests/integration/cephlib.py, memstore);
#   nbd  ext4lazy nbd=URI against nbdkit's nbd plugin, both in front of the
#        same remote (nbdkit's file plugin on an image file);
#   nbd-delay  the same with the remote behind nbdkit's delay filter
#        (BENCH_REMOTE_DELAY): a remote with a round-trip cost.
# Measured with fio's nbd ioengine, the sides alternating in every round;
# the write cases also with a flushing guest (fio --fsync=32).
#
# Not part of the test suite: run it by hand (see tests/bench/README.md).
# Every setting is an environment variable; `bench-remote.sh --help` lists
# them.

set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage ()
{
  cat <<EOF
Usage: tests/bench/bench-remote.sh [--help]

Serves one ext4 image from a remote backing store two ways and runs fio
(ioengine=nbd) against each, in interleaved rounds:
  rbd: ext4lazy rbd= and qemu-storage-daemon (--blockdev driver=rbd,
       cache.direct=on) on the same RBD image of a single-node Ceph
       cluster (memstore) that the script starts and stops;
  nbd: ext4lazy nbd=URI and nbdkit's nbd plugin in front of the same
       nbdkit file plugin serving an image file;
  nbd-delay: the same, the remote behind nbdkit's delay filter
       (BENCH_REMOTE_DELAY).  With it, the results go to their own
       CSV, PNG and section (bench-remote-delay).
Reports the median IOPS and MiB/s of each side and the ratio ext4lazy /
other side per case.

Environment (defaults in brackets):
  EXT4LAZY_PLUGIN     plugin .so [build/plugin/nbdkit-ext4lazy-plugin.so]
  EXT4LAZY_PARAMS     extra parameters for both ext4lazy sides, e.g.
                      "policy=strict" []
  BENCH_VARIANTS      comparisons, subset of: rbd nbd nbd-delay [rbd nbd]
  BENCH_REMOTE_DELAY  the delay filter's parameters in nbd-delay's remote
                      (nbdkit 1.32's filter has no delay-flush, and
                      reads NNms as whole milliseconds: 0.5ms is 0)
                      [delay-read=1ms delay-write=1ms
                      delay-zero=1ms delay-trim=1ms]
  BENCH_SECTION       name of the CSV, PNG and docs section [bench-remote;
                      bench-remote-delay when BENCH_VARIANTS has nbd-delay]
  BENCH_SANITY        1: the other side on both sides of each comparison
                      (ratios should be about 1.00; shows the noise);
                      results go to tests/bench/out, not docs/ [0]
  BENCH_ROUNDS        rounds; each runs every case on every side once [3]
  BENCH_RUNTIME       seconds measured per fio run [10]
  BENCH_RAMP          seconds of warm-up per fio run, not measured [1]
  BENCH_SIZE          image size, 64M to 768M (the OSD's memstore holds
                      1 GiB) [512M]
  BENCH_THREADS       nbdkit -t threads, every nbdkit the same [16]
  BENCH_RAND_IODEPTH  iodepth of the 4 KiB random cases [16]
  BENCH_SEQ_IODEPTH   iodepth of the 1 MiB sequential cases [4]
  BENCH_CASES         subset of: randread randwrite seqread seqwrite
                      randwrite-flush seqwrite-flush (the write cases
                      with fio --fsync=32: an NBD FLUSH after 32 writes
                      at most, more often at queue depths above 1) [all]
  BENCH_OFFSET        start of the I/O region: a size, or "auto" for the
                      first MiB after the metadata at the head of the
                      filesystem [auto]
  BENCH_RBD_CACHE     librbd's rbd_cache for both rbd sides: false or true
                      (true: qemu-storage-daemon with cache.direct=off,
                      which qemu turns into rbd_cache=true) [false]
  BENCH_CACHE         page cache of the nbd comparison's image file:
                      warm: read it into the page cache before every run;
                      drop: sync and drop caches before every run (root)
                      [warm]
  BENCH_RESTORE       1: restore the image (rbd import, or a copy of the
                      file) after every write run, so that every run
                      starts from the same bytes [1]
  BENCH_MACHINE_NOTE  a sentence about the machine for the report
                      (e.g. "a shared VM: other work ran at the same
                      time") []
  CEPHLIB             the cluster helper [tests/integration/cephlib.py]
  BENCH_WORKDIR       images, sockets, logs and the cluster
                      [tests/bench/out/remote]
  BENCH_KEEP          1 keeps the images and logs after the run [0]
  BENCH_OUTDIR        where the CSV and PNG go [docs/bench]
  BENCH_DOC           markdown file whose bench-remote section is
                      (re)written [docs/benchmarks.md]
  BENCH_PLOT          0 skips the PNG [1]
EOF
}

bench_args "$@"

# ---- settings ----------------------------------------------------------

PLUGIN=${EXT4LAZY_PLUGIN:-$DEFAULT_PLUGIN}
read -r -a LAZY_PARAMS <<< "${EXT4LAZY_PARAMS:-}"
VARIANTS=${BENCH_VARIANTS:-rbd nbd}
REMOTE_DELAY=${BENCH_REMOTE_DELAY:-delay-read=1ms delay-write=1ms delay-zero=1ms delay-trim=1ms}
read -r -a DELAY_PARAMS <<< "$REMOTE_DELAY"
check_delay "$REMOTE_DELAY" || exit 1
# (lib.sh's BENCH_NAME is the script's name, for its messages.)
if [[ " $VARIANTS " == *" nbd-delay "* ]]; then
  NAME=${BENCH_SECTION:-bench-remote-delay}
else
  NAME=${BENCH_SECTION:-bench-remote}
fi
SANITY=${BENCH_SANITY:-0}
fio_settings 3 512M "$FIO_CASES"
RBD_CACHE=${BENCH_RBD_CACHE:-false}
CACHE=${BENCH_CACHE:-warm}
RESTORE=${BENCH_RESTORE:-1}
MACHINE_NOTE=${BENCH_MACHINE_NOTE:-}
CEPHLIB=${CEPHLIB:-$REPO/tests/integration/cephlib.py}
WORKDIR=${BENCH_WORKDIR:-$REPO/tests/bench/out/remote}
KEEP=${BENCH_KEEP:-0}
PLOT=${BENCH_PLOT:-1}
sanity_outputs "BENCH_SANITY=1: the other side on both sides of each comparison"

[ -n "$VARIANTS" ] || die "BENCH_VARIANTS is empty"
for v in $VARIANTS; do
  case "$v" in
    rbd|nbd|nbd-delay) ;;
    *) die "unknown comparison '$v' in BENCH_VARIANTS (rbd, nbd, nbd-delay)" ;;
  esac
done
case "$SANITY" in 0|1) ;; *) die "BENCH_SANITY must be 0 or 1" ;; esac
case "$RESTORE" in 0|1) ;; *) die "BENCH_RESTORE must be 0 or 1" ;; esac
case "$RBD_CACHE" in false|true) ;; *) die "BENCH_RBD_CACHE must be false or true" ;; esac
case "$CACHE" in warm|drop) ;; *) die "BENCH_CACHE must be warm or drop" ;; esac
has_variant () { [[ " $VARIANTS " == *" $1 "* ]]; }
# Either comparison with an nbd remote.
has_nbd () { has_variant nbd || has_variant nbd-delay; }
case "$REMOTE_DELAY$NAME" in
  *,*) die "BENCH_REMOTE_DELAY and BENCH_SECTION must not contain commas" ;;
esac
[[ "$NAME" =~ ^[A-Za-z0-9_-]+$ ]] || die "BENCH_SECTION: letters, digits, - and _ only"

if has_variant rbd && [ "$SIZE_BYTES" -gt $((768 << 20)) ]; then
  die "BENCH_SIZE must be at most 768M for rbd (the OSD's memstore holds 1 GiB and is full at 95%)"
fi

# ---- tool checks -------------------------------------------------------

check_fio_tools
command -v nbdkit >/dev/null || die "nbdkit not found (apt-get install nbdkit)"
if [ "$SANITY" = 0 ]; then
  check_plugin
  for v in $VARIANTS; do
    v=${v%-delay}
    grep -qx "ext4lazy_$v=yes" <<< "$PLUGIN_DUMP" ||
      die "$PLUGIN has no $v= backend (--dump-plugin: no ext4lazy_$v=yes)"
  done
fi
if has_nbd; then
  nbdkit --dump-plugin file >/dev/null 2>&1 || die "nbdkit cannot load its file plugin"
  nbdkit --dump-plugin nbd >/dev/null 2>&1 ||
    die "nbdkit cannot load its nbd plugin (apt-get install nbdkit)"
fi
if has_variant nbd-delay; then
  nbdkit --filter=delay memory 1M "${DELAY_PARAMS[@]}" --run true \
    >/dev/null 2>&1 ||
    die "nbdkit's delay filter does not take BENCH_REMOTE_DELAY='$REMOTE_DELAY'"
fi
if has_variant rbd; then
  [ -f "$CEPHLIB" ] || die "the cluster helper is missing: $CEPHLIB"
  if ! "$PY" "$CEPHLIB" check; then
    die "Ceph is not installed (see the ceph-* packages above)"
  fi
  check_qemu_rbd
fi
if [ "$CACHE" = drop ]; then
  sync
  (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null ||
    die "BENCH_CACHE=drop needs root (cannot write /proc/sys/vm/drop_caches)"
fi

# ---- workspace, processes and cleanup ----------------------------------

case "$WORKDIR$PLUGIN" in
  *[[:space:],]*) die "BENCH_WORKDIR and EXT4LAZY_PLUGIN must not contain spaces or commas" ;;
esac
case "${EXT4LAZY_PARAMS:-}" in
  *,*) die "EXT4LAZY_PARAMS must not contain commas (it goes into the CSV)" ;;
esac
mkdir -p "$WORKDIR" "$OUTDIR"
WORKDIR=$(cd "$WORKDIR" && pwd)
MASTER=$WORKDIR/master.img
IMG=$WORKDIR/remote.img          # the nbd comparison's remote
CEPHDIR=$WORKDIR/ceph            # emptied by "cephlib.py stop"
CLIENT_CONF=$WORKDIR/client.conf # the cluster's ceph.conf + rbd cache
RBD_POOL=rbd
RBD_IMAGE=bench
SOCK=$WORKDIR/front.sock         # what fio connects to
RSOCK=$WORKDIR/remote.sock       # the nbd comparison's remote
RAW=$WORKDIR/rounds.csv
FRONT_PID=
REMOTE_PID=
CEPH_PIDS=

stop_front ()
{
  if [ -n "$FRONT_PID" ]; then stop_pid "$FRONT_PID"; FRONT_PID=; fi
  rm -f "$SOCK" "$WORKDIR/front.pid"
}

stop_remote ()
{
  if [ -n "$REMOTE_PID" ]; then stop_pid "$REMOTE_PID"; REMOTE_PID=; fi
  rm -f "$RSOCK" "$WORKDIR/remote.pid"
}

stop_cluster ()
{
  [ -n "$CEPH_PIDS" ] || return 0
  "$PY" "$CEPHLIB" stop "$CEPHDIR" || note "cephlib.py stop failed"
  local p left=
  for p in $CEPH_PIDS; do
    if [ -d "/proc/$p" ] && grep -qa '^ceph-' "/proc/$p/cmdline" 2>/dev/null; then
      left="$left $p"
    fi
  done
  if [ -n "$left" ]; then
    note "Ceph daemons left after cephlib.py stop:$left; SIGKILL"
    # shellcheck disable=SC2086
    kill -9 $left 2>/dev/null || true
  fi
  CEPH_PIDS=
}

cleanup ()
{
  local rc=$?
  stop_front
  stop_remote
  stop_cluster
  rm -rf "$WORKDIR/populate"
  if [ "$KEEP" != 1 ]; then
    rm -f "$MASTER" "$IMG" "$CLIENT_CONF" "$WORKDIR"/*.log \
          "$WORKDIR"/fio.json "$WORKDIR"/fio.json.stderr
    rmdir "$CEPHDIR" 2>/dev/null || true
  fi
  exit $rc
}
bench_traps

# ---- the cluster -------------------------------------------------------

start_cluster ()
{
  local out
  mkdir -p "$CEPHDIR"
  note "starting a single-node Ceph cluster in $CEPHDIR"
  out=$("$PY" "$CEPHLIB" start "$CEPHDIR") || die "cephlib.py start failed"
  CEPH_PIDS=$("$PY" -c 'import json, sys
print(" ".join(str(p) for p in json.load(open(sys.argv[1]))["pids"].values()))' \
                "$CEPHDIR/cluster.json")
  # "CEPH_CONF=..." and, since cephlib.py binds other addresses too,
  # CEPH_MON_HOST and CEPH_FSID lines.
  local conf
  conf=$(sed -n 's/^CEPH_CONF=//p' <<< "$out")
  [ -f "$conf" ] || die "cephlib.py printed no CEPH_CONF: $out"
  # Both rbd sides read this file: the cluster's, with rbd_cache set.
  sed "s/^\[client\]\$/[client]\nrbd cache = $RBD_CACHE/" "$conf" > "$CLIENT_CONF"
  grep -q "^rbd cache = $RBD_CACHE\$" "$CLIENT_CONF" ||
    die "no [client] section in $conf"
  export CEPH_CONF=$CLIENT_CONF
}

restore_rbd ()
{
  rbd rm --no-progress "$RBD_POOL/$RBD_IMAGE" >/dev/null 2>&1 || true
  rbd import --no-progress "$MASTER" "$RBD_POOL/$RBD_IMAGE" ||
    die "rbd import failed"
}

restore_file ()
{
  cp --sparse=never "$MASTER" "$IMG"
}

# start_remote [COMPARISON]: nbd-delay's remote is behind the delay filter.
start_remote ()
{
  local log=$WORKDIR/remote.log
  stop_remote
  if [ "${1:-nbd}" = nbd-delay ]; then
    nbdkit_serve "$RSOCK" "$WORKDIR/remote.pid" "$log" \
                 --filter=delay file file="$IMG" "${DELAY_PARAMS[@]}"
  else
    nbdkit_serve "$RSOCK" "$WORKDIR/remote.pid" "$log" file file="$IMG"
  fi
  REMOTE_PID=$SERVER_PID
  wait_ready "nbdkit file (remote)" "$REMOTE_PID" "$WORKDIR/remote.pid" \
             "$RSOCK" "$log" 30
}

# ---- sides -------------------------------------------------------------
# A comparison has an ext4lazy side and an other side; with BENCH_SANITY=1
# the other side stands in for ext4lazy too ("...-again").

side_of ()  # COMPARISON ROLE
{
  case "$1:$2:$SANITY" in
    rbd:ext4lazy:0) echo lazy-rbd ;;
    rbd:ext4lazy:1) echo qsd-again ;;
    rbd:other:*)    echo qsd ;;
    nbd:ext4lazy:0|nbd-delay:ext4lazy:0) echo lazy-nbd ;;
    nbd:ext4lazy:1|nbd-delay:ext4lazy:1) echo nbdplugin-again ;;
    nbd:other:*|nbd-delay:other:*)       echo nbdplugin ;;
  esac
}

side_params ()
{
  case "$1" in
    lazy-rbd)  echo "ext4lazy rbd=${EXT4LAZY_PARAMS:+ $EXT4LAZY_PARAMS}" ;;
    qsd)       echo "qemu-storage-daemon rbd" ;;
    qsd-again) echo "qemu-storage-daemon rbd (sanity)" ;;
    lazy-nbd)  echo "ext4lazy nbd=${EXT4LAZY_PARAMS:+ $EXT4LAZY_PARAMS}" ;;
    nbdplugin) echo "nbdkit nbd plugin" ;;
    nbdplugin-again) echo "nbdkit nbd plugin (sanity)" ;;
  esac
}

side_uri ()
{
  case "$1" in
    qsd|qsd-again) echo "nbd+unix:///$RBD_IMAGE?socket=$SOCK" ;;
    *) echo "nbd+unix:///?socket=$SOCK" ;;
  esac
}

start_front ()
{
  local side=$1 log=$WORKDIR/front-$1.log pidfile=$WORKDIR/front.pid
  local direct=on
  [ "$RBD_CACHE" = true ] && direct=off
  stop_front
  SERVER_PID=
  case "$side" in
    lazy-rbd)
      nbdkit_serve "$SOCK" "$pidfile" "$log" \
             "$PLUGIN" rbd="$RBD_POOL/$RBD_IMAGE" ceph-conf="$CLIENT_CONF" \
             "${LAZY_PARAMS[@]}" ;;
    qsd|qsd-again)
      # No --exit-with-parent in qemu: the parent-death signal stands in.
      setpriv --pdeathsig TERM \
        qemu-storage-daemon \
          --blockdev "driver=rbd,node-name=rbd0,pool=$RBD_POOL,image=$RBD_IMAGE,conf=$CLIENT_CONF,cache.direct=$direct" \
          --nbd-server "addr.type=unix,addr.path=$SOCK" \
          --export "type=nbd,id=exp0,node-name=rbd0,name=$RBD_IMAGE,writable=on" \
          --pidfile "$pidfile" > "$log" 2>&1 &
      SERVER_PID=$! ;;
    lazy-nbd)
      nbdkit_serve "$SOCK" "$pidfile" "$log" \
             "$PLUGIN" nbd="nbd+unix:///?socket=$RSOCK" "${LAZY_PARAMS[@]}" ;;
    nbdplugin|nbdplugin-again)
      nbdkit_serve "$SOCK" "$pidfile" "$log" nbd socket="$RSOCK" ;;
  esac
  FRONT_PID=$SERVER_PID
  wait_ready "$side" "$FRONT_PID" "$pidfile" "$SOCK" "$log" 30
}

# ---- one run -----------------------------------------------------------

declare -A DIRTY=([rbd]=0 [nbd]=0 [nbd-delay]=0)

# run_one COMPARISON ROLE ROUND CASE POSITION: appends one CSV row to $RAW.
run_one ()
{
  local cmp=$1 role=$2 round=$3 c=$4 pos=$5 json=$WORKDIR/fio.json
  local side row
  side=$(side_of "$cmp" "$role")
  if [ "${DIRTY[$cmp]}" = 1 ]; then
    if [ "$cmp" = rbd ]; then restore_rbd; else restore_file; fi
    DIRTY[$cmp]=0
  fi
  if [ "$cmp" != rbd ]; then
    prepare_cache "$IMG"
    start_remote "$cmp"
  fi
  start_front "$side"
  run_fio "$(side_uri "$side")" "$c" "$OFFSET_BYTES" "$json" ||
    die "fio failed: round $round, $c, $side"
  if [ "$RESTORE" = 1 ] && is_write "$c"; then DIRTY[$cmp]=1; fi
  stop_front
  stop_remote
  row=$(fio_row "$json" "$round" "$c" "$side" "$(side_params "$side")" "$pos") ||
    die "no result from fio: round $round, $c, $side"
  echo "$cmp,$role,$row" >> "$RAW"
  awk -F, '{ printf "bench-remote:   round %s %-9s %-15s %10.0f IOPS %9.1f MiB/s\n", $3, $4, $5, $8, $9 }' \
      <<< "$cmp,$role,$row" >&2
}

# ---- run ---------------------------------------------------------------

describe_machine "$WORKDIR"
QSD_VERSION=$(qemu-storage-daemon --version 2>/dev/null | head -n 1 || echo "?")
CEPH_VERSION=$(ceph --version 2>/dev/null | sed 's/ (.*)//' || echo "?")
LIBNBD_VERSION=$(nbdinfo --version 2>/dev/null | grep -m1 '^libnbd' || echo "libnbd ?")

fio_image "$MASTER" "$WORKDIR"
# Where the journal is (the write cases overwrite it), for the report.
JOURNAL=$(debugfs -R 'stat <8>' "$MASTER" 2>/dev/null | "$PY" -c '
import re, sys
t = sys.stdin.read()
bs = int(sys.argv[1])
ext = [(int(a), int(b)) for a, b in re.findall(r"\(\d+-\d+\):(\d+)-(\d+)", t)]
if not ext:
    sys.exit(1)
lo = min(a for a, b in ext) * bs
n = sum(b - a + 1 for a, b in ext) * bs
print("%dM at offset %dM" % (n >> 20, lo >> 20))
' 4096) || JOURNAL="?"
if has_variant rbd; then
  start_cluster
  note "importing the image into $RBD_POOL/$RBD_IMAGE"
  restore_rbd
fi
if has_nbd; then
  restore_file
fi

# Start every side once, so that a bad parameter fails before the rounds.
for cmp in $VARIANTS; do
  if [ "$cmp" != rbd ]; then start_remote "$cmp"; fi
  for role in ext4lazy other; do
    start_front "$(side_of "$cmp" "$role")"
    stop_front
  done
  stop_remote
done

ncmp=$(wc -w <<< "$VARIANTS")
ncases=$(wc -w <<< "$CASES")
est=$((ROUNDS * ncases * ncmp * 2 * (RUNTIME + RAMP + 3)))
note "$ROUNDS rounds x $ncases cases x $ncmp comparisons x 2 sides, about $((est / 60 + 1)) min plus restoring the image after writes"

echo "comparison,role,round,case,side,params,position,iops,mib_s,clat_mean_us,runtime_ms" > "$RAW"
for ((r = 1; r <= ROUNDS; r++)); do
  for c in $CASES; do
    for cmp in $VARIANTS; do
      # ext4lazy first in odd rounds, second in even ones.
      k=0
      for role in $(rotate "$r" ext4lazy other); do
        run_one "$cmp" "$role" "$r" "$c" "$k"
        k=$((k + 1))
      done
    done
  done
done
stop_cluster

# ---- report ------------------------------------------------------------

CSV=$OUTDIR/$NAME.csv
PNG=$OUTDIR/$NAME.png
cp "$RAW" "$CSV"
[ "$PLOT" = 1 ] || PNG=

export_machine "$FS_DF"
export_fio_meta
export BENCH_META_NAME="$NAME"
export BENCH_META_REMOTE_DELAY="$REMOTE_DELAY"
export BENCH_META_MACHINE_NOTE="$MACHINE_NOTE"
export BENCH_META_QSD="$QSD_VERSION"
export BENCH_META_CEPH="$CEPH_VERSION"
export BENCH_META_LIBNBD="$LIBNBD_VERSION"
export BENCH_META_OSD="memstore, 1 OSD, 1 mon, pool size 1"
export BENCH_META_JOURNAL="$JOURNAL"
export BENCH_META_RBD_CACHE="$RBD_CACHE"
export BENCH_META_RESTORE="$RESTORE"
export BENCH_META_LAZY_PARAMS="${EXT4LAZY_PARAMS:-}"
"$PY" "$BENCH_SRC/bench-remote-report.py" "$CSV" "$DOC" "$REPO" "$PNG"
