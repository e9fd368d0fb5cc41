# SPDX-License-Identifier: BSD-3-Clause
# lib.sh --- what the benchmark scripts share: messages and argument
# handling, checks of settings and tools, the nbdkit servers and their
# cleanup, the machine description handed to the reports, the fio cases
# (the benchmark image, one fio run turned into a CSV row) and the scratch
# directory of the benchmarks that run tests/e2e guests.
#
# Sourced, not run:  . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# It sets REPO, BENCH_SRC, PY (the python3 of the reports) and BENCH_NAME
# (the script's name, for its messages).  The fio functions read RUNTIME,
# RAMP, RAND_IODEPTH and SEQ_IODEPTH (fio_settings sets them); the server
# functions read THREADS.
# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables set here are the callers'

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_SRC=$REPO/tests/bench
PY=/usr/bin/python3
BENCH_NAME=$(basename "$0" .sh)
DEFAULT_PLUGIN=$REPO/build/plugin/nbdkit-ext4lazy-plugin.so

# ---- messages and arguments --------------------------------------------

# die MESSAGE, note MESSAGE: to stderr, named after the script.
die ()
{
  echo "$BENCH_NAME: error: $*" >&2
  exit 1
}

note ()
{
  echo "$BENCH_NAME: $*" >&2
}

# bench_args "$@": --help prints the caller's usage; anything else is an
# error.
bench_args ()
{
  if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
    usage
    exit 0
  elif [ $# -gt 0 ]; then
    usage >&2
    exit 2
  fi
}

# bench_traps: the caller's cleanup runs on exit, on an error and on
# Ctrl-C.
bench_traps ()
{
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# ---- settings ----------------------------------------------------------

# check_numbers VALUE...: each a whole number.
check_numbers ()
{
  local v
  for v in "$@"; do
    [[ "$v" =~ ^[0-9]+$ ]] || die "not a number: '$v'"
  done
}

# check_rounds: BENCH_ROUNDS and BENCH_RUNTIME (ROUNDS, RUNTIME) at least 1.
check_rounds ()
{
  [ "$ROUNDS" -ge 1 ] || die "BENCH_ROUNDS must be at least 1"
  [ "$RUNTIME" -ge 1 ] || die "BENCH_RUNTIME must be at least 1"
}

# check_delay PARAMS: nbdkit's delay filter (1.32) takes "0.5ms" without
# a word and waits 0 ms (NNms is a whole number; measured: 200 reads took
# 0.09 s with delay-read=0.5ms, 0.29 s with 1ms).  Fails naming the first
# such parameter.
check_delay ()
{
  local p
  for p in $1; do
    if [[ "$p" =~ =[0-9]*\.[0-9]*ms$ ]]; then
      note "BENCH_REMOTE_DELAY: '$p': nbdkit's delay filter takes whole milliseconds (NNms) or seconds"
      return 1
    fi
  done
}

# sanity_outputs MESSAGE: OUTDIR and DOC, under tests/bench/out for a
# sanity run (SANITY=1, announced with MESSAGE), else docs/.
sanity_outputs ()
{
  if [ "$SANITY" = 1 ]; then
    OUTDIR=${BENCH_OUTDIR:-$REPO/tests/bench/out}
    DOC=${BENCH_DOC:-$REPO/tests/bench/out/benchmarks.md}
    note "$1"
    note "(ratios should be about 1.00; results go to $OUTDIR, not docs/)"
  else
    OUTDIR=${BENCH_OUTDIR:-$REPO/docs/bench}
    DOC=${BENCH_DOC:-$REPO/docs/benchmarks.md}
  fi
}

# ---- tools -------------------------------------------------------------

# check_nbdkit: nbdkit and its file plugin.
check_nbdkit ()
{
  command -v nbdkit >/dev/null || die "nbdkit not found (apt-get install nbdkit)"
  nbdkit --dump-plugin file >/dev/null 2>&1 || die "nbdkit cannot load its file plugin"
}

# check_plugin [HINT]: PLUGIN exists and nbdkit loads it; PLUGIN becomes
# an absolute path and PLUGIN_DUMP its --dump-plugin output.  HINT is what
# the message says to do when it is missing.
# shellcheck disable=SC2120
check_plugin ()
{
  [ -f "$PLUGIN" ] ||
    die "plugin not found: $PLUGIN (${1:-build it or set EXT4LAZY_PLUGIN})"
  PLUGIN=$(cd "$(dirname "$PLUGIN")" && pwd)/$(basename "$PLUGIN")
  if ! PLUGIN_DUMP=$(nbdkit --dump-plugin "$PLUGIN" 2>&1); then
    echo "$PLUGIN_DUMP" >&2
    die "nbdkit cannot load $PLUGIN"
  fi
}

# check_qemu_rbd: qemu-storage-daemon and its rbd driver.
check_qemu_rbd ()
{
  command -v qemu-storage-daemon >/dev/null ||
    die "qemu-storage-daemon not found (apt-get install qemu-system-common)"
  compgen -G '/usr/lib/*/qemu/block-rbd.so' >/dev/null ||
    die "qemu has no rbd driver (apt-get install qemu-block-extra)"
}

# bench_workdir BASEDIR KIB WHAT: a new directory WORK in BASEDIR (the
# benchmark's name and a random suffix), once BASEDIR has KIB KiB free
# (WHAT says how much in the message).
bench_workdir ()
{
  local avail_kb
  [ -d "$1" ] || die "BENCH_DIR $1 is not a directory"
  avail_kb=$(df -Pk "$1" | awk 'NR == 2 { print $4 }')
  [ "$avail_kb" -ge "$2" ] || die "less than $3 free in $1 (set BENCH_DIR)"
  WORK=$(mktemp -d "$1/$BENCH_NAME.XXXXXX")
}

# ---- servers -----------------------------------------------------------

# nbdkit_serve SOCK PIDFILE LOG ARGS...: nbdkit in the background, ARGS
# being the plugin and its parameters, with THREADS threads; its PID in
# SERVER_PID.  (A function, not a subshell, so that the server is this
# script's child.)
nbdkit_serve ()
{
  local sock=$1 pidfile=$2 log=$3
  shift 3
  nbdkit -f --exit-with-parent -U "$sock" -P "$pidfile" -t "$THREADS" \
         "$@" > "$log" 2>&1 &
  SERVER_PID=$!
}

# wait_ready NAME PID PIDFILE SOCKET LOG SECONDS: until the server wrote
# its pidfile and listens (nbdkit and qemu-storage-daemon write the
# pidfile once they listen); its log and an error if it exits first or
# takes longer.
wait_ready ()
{
  local name=$1 pid=$2 pidfile=$3 sock=$4 log=$5 secs=$6
  for _ in $(seq $((secs * 20))); do
    [ -s "$pidfile" ] && [ -S "$sock" ] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$log" >&2
      die "$name exited before it was ready; log above"
    fi
    sleep 0.05
  done
  cat "$log" >&2
  die "$name not ready after $secs s"
}

# stop_pid PID: SIGTERM, then SIGKILL after 30 s; the process is a child
# of this script.
stop_pid ()
{
  local pid=$1
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    note "process $pid did not stop within 30 s: SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# stop_nbdkit, start_nbdkit NAME LOG SECONDS ARGS...: the one nbdkit of a
# benchmark, NBDKIT_PID, on SOCK with PIDFILE; start_nbdkit stops the one
# before and waits up to SECONDS for the new one (nbdkit (NAME) in the
# messages).
# shellcheck disable=SC2153  # SOCK and PIDFILE are the caller's
stop_nbdkit ()
{
  if [ -n "${NBDKIT_PID:-}" ]; then stop_pid "$NBDKIT_PID"; NBDKIT_PID=; fi
  rm -f "$SOCK" "$PIDFILE"
}

start_nbdkit ()
{
  local name=$1 log=$2 secs=$3
  shift 3
  stop_nbdkit
  nbdkit_serve "$SOCK" "$PIDFILE" "$log" "$@"
  NBDKIT_PID=$SERVER_PID
  wait_ready "nbdkit ($name)" "$NBDKIT_PID" "$PIDFILE" "$SOCK" "$log" "$secs"
}

# work_cleanup RC: the end of a benchmark in a scratch directory WORK
# with its server's log in LOG: the last lines of the log after a
# failure (RC not 0), WORK removed.
work_cleanup ()
{
  if [ "$1" != 0 ] && [ -s "$LOG" ]; then
    note "last lines of the server log:"
    tail -n 5 "$LOG" >&2
  fi
  rm -rf "$WORK"
}

# prepare_cache FILE: before a run, drop the page cache (CACHE=drop, as
# root) or read FILE into it (CACHE=warm).
prepare_cache ()
{
  if [ "$CACHE" = drop ]; then
    sync
    echo 3 > /proc/sys/vm/drop_caches
  else
    cat "$1" > /dev/null
  fi
}

# rotate ROUND ITEM...: the items, rotated by ROUND - 1: A B C, then
# B C A, ...  With two sides, the first goes first in odd rounds.
rotate ()
{
  local r=$1
  shift
  local n=$# k items=("$@")
  for ((k = 0; k < n; k++)); do
    echo "${items[$(((k + r - 1) % n))]}"
  done
}

# ---- the machine, for the reports --------------------------------------

# describe_machine DIR: CPU_MODEL, NBDKIT_VERSION, DATE and FS_DF (the
# filesystem DIR is on).
describe_machine ()
{
  CPU_MODEL=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  [ -n "$CPU_MODEL" ] || CPU_MODEL=unknown
  NBDKIT_VERSION=$(nbdkit --version | head -n 1)
  DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
  FS_DF=$(df -T "$1" | awk 'NR == 2 { print $2 }')
}

# export_machine FS: the machine for the report (BENCH_META_DATE, NPROC,
# CPU, KERNEL, FS, NBDKIT), after describe_machine.
export_machine ()
{
  export BENCH_META_DATE="$DATE"
  BENCH_META_NPROC=$(nproc)
  export BENCH_META_NPROC
  export BENCH_META_CPU="$CPU_MODEL"
  BENCH_META_KERNEL=$(uname -r)
  export BENCH_META_KERNEL
  export BENCH_META_FS="$1"
  export BENCH_META_NBDKIT="$NBDKIT_VERSION"
}

# no_plot_note: what a report says when matplotlib is missing.
no_plot_note ()
{
  note "no plot: python3-matplotlib is not installed (apt-get install python3-matplotlib)"
}

# ---- fio ---------------------------------------------------------------

# The fio cases every benchmark here knows (fio_args).  The two
# flushing ones run fio --fsync=FLUSH_EVERY: fio 3.33's nbd engine then
# sends an NBD FLUSH after FLUSH_EVERY writes at most, more often at a
# queue depth above 1 (nbdkit's stats filter counted one per 3.5 4 KiB
# writes at iodepth 16, one per 10 1 MiB writes at iodepth 4).
FIO_CASES="randread randwrite seqread seqwrite randwrite-flush seqwrite-flush"
FLUSH_EVERY=32

# fio_settings ROUNDS SIZE [CASES]: the settings of a fio benchmark from
# the environment (the defaults of BENCH_ROUNDS, BENCH_SIZE and
# BENCH_CASES given; CASES defaults to the four unflushed ones), checked.
fio_settings ()
{
  ROUNDS=${BENCH_ROUNDS:-$1}
  RUNTIME=${BENCH_RUNTIME:-10}
  RAMP=${BENCH_RAMP:-1}
  SIZE=${BENCH_SIZE:-$2}
  THREADS=${BENCH_THREADS:-16}
  RAND_IODEPTH=${BENCH_RAND_IODEPTH:-16}
  SEQ_IODEPTH=${BENCH_SEQ_IODEPTH:-4}
  CASES=${BENCH_CASES:-${3:-randread randwrite seqread seqwrite}}
  OFFSET=${BENCH_OFFSET:-auto}
  check_numbers "$ROUNDS" "$RUNTIME" "$RAMP" "$THREADS" "$RAND_IODEPTH" \
                "$SEQ_IODEPTH"
  check_rounds
  [ -n "$CASES" ] || die "BENCH_CASES is empty"
  local c
  for c in $CASES; do
    [[ " $FIO_CASES " == *" $c "* ]] ||
      die "unknown case '$c' in BENCH_CASES ($FIO_CASES)"
  done
  SIZE_BYTES=$(numfmt --from=iec "$SIZE") || die "bad BENCH_SIZE '$SIZE'"
  [ "$SIZE_BYTES" -ge $((64 << 20)) ] || die "BENCH_SIZE must be at least 64M"
  if [ "$OFFSET" != auto ]; then
    OFFSET_BYTES=$(numfmt --from=iec "$OFFSET") || die "bad BENCH_OFFSET"
    [ "$OFFSET_BYTES" -lt "$SIZE_BYTES" ] || die "BENCH_OFFSET beyond the image"
  fi
}

# check_fio_tools: what every fio benchmark here needs.
check_fio_tools ()
{
  [ -x "$PY" ] || die "$PY not found (the report is made with it)"
  command -v fio >/dev/null || die "fio not found (apt-get install fio)"
  command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 not found (e2fsprogs)"
  command -v dumpe2fs >/dev/null || die "dumpe2fs not found (e2fsprogs)"
  command -v timeout >/dev/null || die "timeout not found (coreutils)"
  # fio prints the engine's options (uri) when it has a usable nbd engine.
  if ! fio --enghelp=nbd 2>/dev/null | grep -q '^uri'; then
    die "this fio has no nbd ioengine (fio --enghelp=nbd); it needs libnbd"
  fi
}

# make_image IMAGE SIZE_BYTES SCRATCH_DIR: an ext4 image of SIZE_BYTES.
# The file is filled with random bytes first, so that every block of it is
# allocated on the host and reads hit real data; mkfs.ext4 then lays a
# filesystem over it (no discard), populated with one large file of random
# data (80% of the image), so that ext4lazy finds a real ext4 layout to
# track.
make_image ()
{
  local img=$1 size=$2 scratch=$3/populate
  local fill=$((size * 80 / 100))
  note "making a $(numfmt --to=iec "$size") ext4 image with $(numfmt --to=iec "$fill") of file data"
  rm -f "$img"
  head -c "$size" /dev/urandom > "$img"
  rm -rf "$scratch"
  mkdir -p "$scratch"
  head -c "$fill" /dev/urandom > "$scratch/data"
  mkfs.ext4 -F -q -b 4096 -I 256 -m 0 -E nodiscard -L bench \
            -d "$scratch" "$img"
  rm -rf "$scratch"
  local alloc
  alloc=$(( $(stat -c %b "$img") * $(stat -c %B "$img") ))
  if [ "$alloc" -lt "$size" ]; then
    note "warning: image has only $(numfmt --to=iec "$alloc") allocated of $(numfmt --to=iec "$size")"
  fi
}

# head_metadata_end IMAGE: the end of the metadata at the head of the
# filesystem (superblock, group descriptors, reserved GDT blocks, and the
# bitmaps and inode tables that flex_bg packs into group 0), rounded up to
# a MiB.  Random bytes written there would stand for no real client: a
# trashed superblock turns the ext4lazy side into plain pass-through for
# the rest of the run.
head_metadata_end ()
{
  dumpe2fs "$1" 2>/dev/null | "$PY" -c '
import re, sys
t = sys.stdin.read()
bs = int(re.search(r"^Block size:\s+(\d+)", t, re.M).group(1))
bpg = int(re.search(r"^Blocks per group:\s+(\d+)", t, re.M).group(1))
end = 0
for m in re.finditer(r"(?:superblock|descriptors|GDT blocks|bitmap|"
                     r"Inode table) at (\d+)(?:-(\d+))?", t):
    e = int(m.group(2) or m.group(1))
    if e < bpg:
        end = max(end, e)
mib = 1 << 20
print(((end + 1) * bs + mib - 1) // mib * mib)
'
}

# fio_image IMAGE DIR: make_image of SIZE_BYTES, then, with
# BENCH_OFFSET=auto, OFFSET_BYTES and OFFSET from head_metadata_end.
fio_image ()
{
  make_image "$1" "$SIZE_BYTES" "$2"
  if [ "$OFFSET" = auto ]; then
    OFFSET_BYTES=$(head_metadata_end "$1") || die "dumpe2fs could not read the image"
    OFFSET=$(numfmt --to=iec "$OFFSET_BYTES")
    note "I/O region: from $OFFSET (after the head metadata) to the end"
  fi
}

fio_args ()
{
  case "$1" in
    randread)  echo "--rw=randread --bs=4k --iodepth=$RAND_IODEPTH" ;;
    randwrite) echo "--rw=randwrite --bs=4k --iodepth=$RAND_IODEPTH" ;;
    seqread)   echo "--rw=read --bs=1m --iodepth=$SEQ_IODEPTH" ;;
    seqwrite)  echo "--rw=write --bs=1m --iodepth=$SEQ_IODEPTH" ;;
    # fio's nbd engine refuses --fdatasync (EINVAL); --fsync=N sends an
    # NBD FLUSH (see FIO_CASES).
    *-flush)   echo "$(fio_args "${1%-flush}") --fsync=$FLUSH_EVERY" ;;
  esac
}

is_write ()
{
  case "$1" in *write|*write-*) return 0 ;; *) return 1 ;; esac
}

# run_fio URI CASE OFFSET_BYTES JSON: one fio job on one NBD connection,
# RUNTIME seconds measured after RAMP; fails (returns 1) with fio's output
# on stderr.
run_fio ()
{
  local uri=$1 c=$2 offset=$3 json=$4
  rm -f "$json"
  # shellcheck disable=SC2046
  # --foreground: an interrupt from the terminal reaches fio too.
  if ! timeout --foreground $((RUNTIME + RAMP + 120)) \
       fio --name="$c" --ioengine=nbd --uri="$uri" \
           $(fio_args "$c") --numjobs=1 --offset="$offset" \
           --time_based --runtime="$RUNTIME" --ramp_time="$RAMP" \
           --output-format=json --output="$json" \
           > "$json.stderr" 2>&1; then
    cat "$json.stderr" "$json" >&2 2>/dev/null || true
    return 1
  fi
}

# fio_row JSON ROUND CASE SIDE PARAMS POSITION: the CSV row of one run
# (round,case,side,params,position,iops,mib_s,clat_mean_us,runtime_ms).
fio_row ()
{
  "$PY" - "$@" <<'PYEOF'
import json, sys
path, rnd, case, side, params, pos = sys.argv[1:7]
with open(path) as f:
    text = f.read()
# fio may print notices before the JSON document.
doc = json.loads(text[text.index("{"):])
job = doc["jobs"][0]
if job.get("error"):
    sys.exit("fio job error %s" % job["error"])
d = job["write" if "write" in case else "read"]
if d["io_bytes"] <= 0:
    sys.exit("fio moved no data")
print("%s,%s,%s,%s,%s,%.3f,%.3f,%.3f,%d" % (
    rnd, case, side, params, pos, d["iops"], d["bw_bytes"] / 1048576.0,
    d["clat_ns"]["mean"] / 1000.0, job["job_runtime"]))
PYEOF
}

# export_fio_meta: the fio settings and versions for the report, after
# fio_image (OFFSET is then the start of the region).
export_fio_meta ()
{
  BENCH_META_FIO=$(fio --version | head -n 1)
  export BENCH_META_FIO
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
}

# ---- benchmarks that run tests/e2e guests ------------------------------

# bench_e2e_check: as root, with the plugin built (PLUGIN).
bench_e2e_check ()
{
  [ "$(id -u)" = 0 ] || { note "run as root (the e2e harness needs it)"; exit 1; }
  [ -f "$PLUGIN" ] || { note "build the plugin first ($PLUGIN)"; exit 1; }
}

# bench_e2e_workdir: OUTDIR, and a scratch directory WORK in /var/tmp,
# removed at exit unless BENCH_KEEP=1 (the caller's cleanup calls
# bench_e2e_cleanup).
bench_e2e_workdir ()
{
  mkdir -p "$OUTDIR"
  WORK=$(mktemp -d "/var/tmp/$BENCH_NAME.XXXXXX")
  trap cleanup EXIT
  trap 'exit 1' INT TERM HUP
}

bench_e2e_cleanup ()
{
  if [ -n "${WORK:-}" ]; then
    if [ "${BENCH_KEEP:-0}" = 1 ]; then note "kept $WORK"; else rm -rf "$WORK"; fi
  fi
}

# bench_count LOG WHAT VAR=VALUE...: tests/e2e/test-e2e-count.sh with those
# settings, the plugin (not E2E_PLUGIN) and BENCH_KEEP (else E2E_KEEP), its
# output in LOG; on a failure the log, "WHAT failed" and exit.
bench_count ()
{
  local log=$1 what=$2
  shift 2
  if ! env -u E2E_PLUGIN E2E_KEEP="${BENCH_KEEP:-${E2E_KEEP:-0}}" "$@" \
      EXT4LAZY_PLUGIN="$PLUGIN" \
      bash "$REPO/tests/e2e/test-e2e-count.sh" > "$log" 2>&1; then
    cat "$log" >&2
    note "$what failed"
    exit 1
  fi
}

# count_line LOG SIDE: SIDE's COUNT line of LOG without its head.
count_line ()
{
  grep "^COUNT: $2 " "$1" | sed 's/^COUNT: [^ ]* *//'
}

# guest_kernel: the version of the newest Debian cloud kernel in /boot
# (the e2e guests'), "unknown" without one.
guest_kernel ()
{
  local k
  # shellcheck disable=SC2012
  k=$(ls -1 /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n 1)
  k=${k#/boot/vmlinuz-}
  echo "${k:-unknown}"
}
