# SPDX-License-Identifier: BSD-3-Clause
# fio-lib.sh --- shared by bench-io.sh and bench-remote.sh: the benchmark
# image, the fio cases and one fio run turned into a CSV row.
#
# Sourced, not run.  The caller sets PY (the python3 that parses fio's
# JSON), RUNTIME, RAMP, RAND_IODEPTH and SEQ_IODEPTH.
# shellcheck shell=bash

# die MESSAGE, note MESSAGE: to stderr, named after the script.
BENCH_NAME=$(basename "$0" .sh)

die ()
{
  echo "$BENCH_NAME: error: $*" >&2
  exit 1
}

note ()
{
  echo "$BENCH_NAME: $*" >&2
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

# The checks every fio benchmark here needs.
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

fio_args ()
{
  case "$1" in
    randread)  echo "--rw=randread --bs=4k --iodepth=$RAND_IODEPTH" ;;
    randwrite) echo "--rw=randwrite --bs=4k --iodepth=$RAND_IODEPTH" ;;
    seqread)   echo "--rw=read --bs=1m --iodepth=$SEQ_IODEPTH" ;;
    seqwrite)  echo "--rw=write --bs=1m --iodepth=$SEQ_IODEPTH" ;;
  esac
}

is_write ()
{
  case "$1" in *write) return 0 ;; *) return 1 ;; esac
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
d = job["write" if case.endswith("write") else "read"]
if d["io_bytes"] <= 0:
    sys.exit("fio moved no data")
print("%s,%s,%s,%s,%s,%.3f,%.3f,%.3f,%d" % (
    rnd, case, side, params, pos, d["iops"], d["bw_bytes"] / 1048576.0,
    d["clat_ns"]["mean"] / 1000.0, job["job_runtime"]))
PYEOF
}

# Machine description for the reports: CPU_MODEL, NBDKIT_VERSION,
# FIO_VERSION, DATE.
# shellcheck disable=SC2034
describe_machine ()
{
  CPU_MODEL=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  [ -n "$CPU_MODEL" ] || CPU_MODEL=unknown
  NBDKIT_VERSION=$(nbdkit --version | head -n 1)
  FIO_VERSION=$(fio --version | head -n 1)
  DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
}
