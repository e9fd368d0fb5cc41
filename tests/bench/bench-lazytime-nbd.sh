#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench-lazytime-nbd.sh --- bench-lazytime.sh's measurement with the volume
# on an NBD remote, counted at the remote: what reaches a remote nbdkit
# (file plugin on the image, behind nbdkit's log filter) while an
# unmodified guest kernel (Debian cloud 6.1 in qemu, TCG) reads a tree of
# files.  It runs tests/e2e/test-e2e-count.sh with E2E_COUNT_NBD_REMOTE=1
# (256 MiB journaled ext4, 2000 files of 3000 bytes) BENCH_RUNS times for
# each of BENCH_CONFIGS; each time, in this order:
#   B:  nbdkit's nbd plugin in front of the remote, guest mounted
#       lazytime,strictatime (the kernel's own lazytime)
#   A:  ext4lazy nbd=nbd+unix:///?socket=REMOTE policy=atime, guest
#       mounted strictatime
#   A2: the same with policy=lazy
# Configs:
#   window:   6 read scans 6 s apart, 35 s idle
#   deadline: ext4lazy max-age=30s (A and A2), the guest's
#             vm.dirtytime_expire_seconds=30 (every side), 3 scans 12 s
#             apart, 75 s idle: both sides' deadline falls inside the
#             window (bench-lazytime.sh's deadline rows)
# Every side gets a fresh copy of one populated template and a fresh
# remote.  Counted from the remote's log: Write commands and their bytes,
# Flush commands (and Zero/Trim commands, reported apart), in the window
# the guest cuts with two marker reads (as they reach the remote) and
# over the whole run (remote start to remote exit: mount, first open,
# the window, unmount, what the front server writes at exit).
#
# BENCH_REMOTE_DELAY="delay-read=1ms delay-write=1ms" (for instance) puts
# nbdkit's delay filter in the remote with those parameters (whole
# milliseconds: nbdkit 1.32 reads 0.5ms as 0; it has no delay-flush):
# the counts should not change; the guest's wall time may (the window's
# length less its pauses and idle time: the scans).
#
# Output: one line per side and run, docs/bench/bench-lazytime-nbd.csv
# (every run; BENCH_APPEND=1 adds to it), the table and the section
# between <!-- bench-lazytime-nbd:begin --> and <!-- bench-lazytime-nbd:end -->
# of docs/benchmarks.md.  "--report" redoes the section from the csv.
# Knobs: BENCH_RUNS (1), BENCH_CONFIGS ("window deadline"),
# BENCH_REMOTE_DELAY (none), EXT4LAZY_PLUGIN (build/plugin/...),
# BENCH_OUTDIR (docs/bench), BENCH_DOC (docs/benchmarks.md), BENCH_KEEP=1
# (keep the scratch directory: template and logs).  As root; needs the
# e2e packages (tests/e2e/README.md).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
usage ()
{
  sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}
report_only=no
case ${1:-} in
  --report) report_only=yes ;;
  --help|-h) usage; exit 0 ;;
  "") ;;
  *) usage >&2; exit 2 ;;
esac
runs=${BENCH_RUNS:-1}
configs=${BENCH_CONFIGS:-window deadline}
delay=${BENCH_REMOTE_DELAY:-}
PLUGIN=${EXT4LAZY_PLUGIN:-$DEFAULT_PLUGIN}
OUTDIR=${BENCH_OUTDIR:-$REPO/docs/bench}
doc=${BENCH_DOC:-$REPO/docs/benchmarks.md}
csv=$OUTDIR/bench-lazytime-nbd.csv

case $delay in *,*) note "BENCH_REMOTE_DELAY must not contain commas"; exit 2 ;; esac
check_delay "$delay" || exit 2
WORK=
cleanup ()
{
  local rc=$?
  bench_e2e_cleanup
  exit $rc
}

if [ $report_only = no ]; then
  bench_e2e_check
  for cfg in $configs; do
    case $cfg in window|deadline) ;; *) note "unknown config $cfg"; exit 2 ;; esac
  done
  bench_e2e_workdir
  [ -n "${BENCH_APPEND:-}" ] && [ -s "$csv" ] ||
    echo "config,delay,run,side,server,policy,mount,scans,pause,idle,window_s,guest_s,window_writes,window_flushes,window_zero_trim,window_bytes,guest_sent_sectors,after_writes,after_flushes,after_zero_trim,after_bytes,whole_writes,whole_flushes,whole_zero_trim,whole_bytes" >"$csv"
  filters=
  [ -n "$delay" ] && filters="--filter=delay $delay"
  for cfg in $configs; do
    scans=6 pause=6 idle=35 dirty= age=
    [ "$cfg" = deadline ] && { scans=3 pause=12 idle=75 dirty=30 age=" max-age=30s"; }
    for i in $(seq 1 "$runs"); do
      log=$WORK/$cfg-run$i.log
      note "$cfg run $i of $runs${delay:+ (remote delay: $delay)} (3 guest boots, 4 the first time; about 8-12 min)"
      bench_count "$log" "$cfg run $i" \
          E2E_COUNT_NBD_REMOTE=1 E2E_COUNT_REMOTE_FILTERS="$filters" \
          E2E_COUNT_TEMPLATE="$WORK/populated.img" \
          E2E_COUNT_FEAT=has_journal E2E_COUNT_MOUNT=strictatime \
          E2E_PLUGIN_ARGS="policy=atime$age" E2E_COUNT_ALSO="policy=lazy$age|" \
          E2E_COUNT_SCANS=$scans E2E_COUNT_PAUSE=$pause E2E_COUNT_IDLE=$idle \
          E2E_COUNT_DIRTYTIME=$dirty E2E_COUNT_NO_BOUNDS=1
      for side in B A A2; do
        case $side in
          A) server=ext4lazy policy=atime mount=strictatime ;;
          A2) server=ext4lazy policy=lazy mount=strictatime ;;
          B) server=nbd-plugin policy= mount=lazytime+strictatime ;;
        esac
        row=$(sed -En "s/^COUNT: $side +[^ ]+ +mount=[^ ]+ +window= *([0-9.]+)s remote: ([0-9]+) writes ([0-9]+) flushes ([0-9]+) zero\+trim ([0-9]+) bytes; client wrote ([0-9]+) sectors; after window to server exit: ([0-9]+) writes ([0-9]+) flushes ([0-9]+) zero\+trim ([0-9]+) bytes; whole run: ([0-9]+) writes ([0-9]+) flushes ([0-9]+) zero\+trim ([0-9]+) bytes$/\2,\3,\4,\5,\6,\7,\8,\9,\1/p" "$log")
        whole=$(sed -En "s/^COUNT: $side .* after window to server exit: [0-9]+ writes [0-9]+ flushes [0-9]+ zero\+trim ([0-9]+) bytes; whole run: ([0-9]+) writes ([0-9]+) flushes ([0-9]+) zero\+trim ([0-9]+) bytes$/\1,\2,\3,\4,\5/p" "$log")
        gs=$(sed -En "s/^e2e: $side: guest ran ([0-9]+) s .*/\1/p" "$log")
        [ -n "$row" ] && [ -n "$whole" ] && [ -n "$gs" ] \
          || { cat "$log" >&2; note "$cfg run $i: no count for side $side"; exit 1; }
        # sed has nine groups: the window's length came last; put it first.
        IFS=, read -r ww wf wz wb cs aw af az win <<<"$row"
        echo "$cfg,$delay,$i,$side,$server,$policy,$mount,$scans,$pause,$idle,$win,$gs,$ww,$wf,$wz,$wb,$cs,$aw,$af,$az,$whole" >>"$csv"
        note "$cfg run $i $side ($server${policy:+ policy=$policy}, $mount): $(count_line "$log" "$side")"
      done
    done
  done
fi

[ -s "$csv" ] || { note "no $csv: run the benchmark first"; exit 1; }
PYTHONPATH="$BENCH_SRC" "$PY" - "$csv" "$doc" \
  "$(guest_kernel)" "nbdkit $(nbdkit --version | awk '{ print $2 }')" <<'PY'
import csv, datetime, os, platform, statistics, sys
from benchreport import cpu_model, kib, ratio, replace_section
path, md, kver, versions = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
sides = ["A", "A2", "B"]
label = {"A": "ext4lazy nbd= policy=atime", "A2": "ext4lazy nbd= policy=lazy",
         "B": "nbdkit nbd plugin"}
mount = {"A": "strictatime", "A2": "strictatime", "B": "lazytime,strictatime"}
cfgs = [c for c in ("window", "deadline") if any(r["config"] == c for r in rows)]
delays = []
for r in rows:
    if r["delay"] not in delays:
        delays.append(r["delay"])

def sel(c, d, s):
    return [r for r in rows if r["config"] == c and r["delay"] == d and r["side"] == s]

def med(c, d, s, k):
    v = [float(r[k]) for r in sel(c, d, s)]
    return statistics.median(v) if v else None

def wf(c, d, s, span):
    return med(c, d, s, span + "_writes") + med(c, d, s, span + "_flushes")



def scan_s(c, d, s):
    r = sel(c, d, s)[0]
    return med(c, d, s, "window_s") - 1 - (int(r["scans"]) - 1) * int(r["pause"]) - int(r["idle"])

cpu = cpu_model()
nruns = max(len(sel(c, d, s)) for c in cfgs for d in delays for s in sides)
lines = [
    "## Timestamp writes on an NBD remote: ext4lazy nbd= vs the kernel's own lazytime",
    "",
    f"Measured {datetime.date.today()} by `tests/bench/bench-lazytime-nbd.sh` "
    f"({nruns} run(s) per row; medians when more) on a shared virtual machine "
    f"with {os.cpu_count()} cores ({cpu}) that ran other jobs at the same "
    f"time; host kernel {platform.release()}, guest Debian cloud kernel "
    f"{kver} in qemu (TCG); {versions}. The store is a remote nbdkit (file "
    "plugin on a copy of the image, on a Unix socket) behind nbdkit's log "
    "filter, started fresh for every side; what is counted is what its log "
    "shows: Write commands and the bytes they carry, and Flush commands "
    "(Zero and Trim commands: none in these runs unless the table says). "
    "A and A2 are ext4lazy with `nbd=nbd+unix:///?socket=REMOTE` (guest "
    "mounted `strictatime`); B is the kernel's own lazytime, the guest "
    "mounted `lazytime,strictatime` through nbdkit's nbd plugin in front of "
    "the same kind of remote. The workload is the one of the local "
    "measurement (\"Timestamp writes: ext4lazy vs the kernel's own "
    "lazytime\"): a journaled 256 MiB ext4 (4 KiB blocks) populated once "
    "with 2000 files of 3000 bytes, copied for every side. *window*: six "
    "read scans 6 s apart, then 35 s idle, between two marker reads of the "
    "guest (cut where they reach the remote); *deadline*: ext4lazy "
    "`max-age=30s` against the guest's `vm.dirtytime_expire_seconds=30`, "
    "three scans 12 s apart and 75 s idle, so that both sides' deadline "
    "falls inside the window. The whole run counts from the remote's start "
    "to its exit: mount, first open, the window, unmount and what the "
    "front server writes at exit. Ratios are to B; W+F = Write + Flush "
    "commands. These are counts: they do not depend on the machine's load.",
    "",
    "| scenario | remote | side | server | guest mount | window: writes + flushes | window: KiB | W+F / B | KiB / B | whole run: writes + flushes | whole run: KiB | W+F / B | KiB / B | zero+trim, whole run |",
    "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
verdict = []
for d in delays:
    for c in cfgs:
        if not sel(c, d, "B"):
            continue
        b = {k: wf(c, d, "B", k) for k in ("window", "whole")}
        bb = {k: med(c, d, "B", k + "_bytes") for k in ("window", "whole")}
        for s in sides:
            if not sel(c, d, s):
                continue
            w, h = wf(c, d, s, "window"), wf(c, d, s, "whole")
            wb, hb = med(c, d, s, "window_bytes"), med(c, d, s, "whole_bytes")
            lines.append(
                f"| {c} | {'delay ' + d if d else 'plain'} | {s} | {label[s]} | {mount[s]} | "
                f"{w:.0f} ({med(c, d, s, 'window_writes'):.0f} + {med(c, d, s, 'window_flushes'):.0f}) | "
                f"{kib(wb)} | {ratio(w, b['window'])} | {ratio(wb, bb['window'])} | "
                f"{h:.0f} ({med(c, d, s, 'whole_writes'):.0f} + {med(c, d, s, 'whole_flushes'):.0f}) | "
                f"{kib(hb)} | {ratio(h, b['whole'])} | {ratio(hb, bb['whole'])} | "
                f"{med(c, d, s, 'whole_zero_trim'):.0f} |")
            if s != "B":
                ok = [w <= b["window"], h <= b["whole"]]
                verdict.append((c, d, s, ok, w, b["window"], h, b["whole"]))
paras = []
if verdict:
    t = ("**Goal: remote Write + Flush commands at most 1.0 x the kernel's "
         "lazytime, in the window and over the whole run.** ")
    parts = []
    for c, d, s, ok, w, bw, h, bh in verdict:
        parts.append(
            f"{c}{' (delay)' if d else ''} {s}: window {w:.0f} vs {bw:.0f} "
            f"({'met' if ok[0] else '**not met**'}), whole run {h:.0f} vs "
            f"{bh:.0f} ({'met' if ok[1] else '**not met**'})")
    paras.append(t + "; ".join(parts) + ".")
if any(d for d in delays):
    tl = ["", "Wall time where the remote has a round-trip cost (a timing: "
          "TCG guest on a shared 2-core machine, one run; it moves with the "
          "load). *scans* = the window's length less the pauses, the idle "
          "time and the second after the first marker, i.e. the time the "
          "guest's read scans took; *guest* = the whole qemu run (boot, "
          "mount, window, unmount, fsck).", "",
          "| scenario | remote | side | server | scans, s | ÷ B | guest, s | ÷ B |",
          "|---|---|---|---|---:|---:|---:|---:|"]
    for d in delays:
        for c in cfgs:
            if not sel(c, d, "B"):
                continue
            bs, bg = scan_s(c, d, "B"), med(c, d, "B", "guest_s")
            for s in sides:
                if not sel(c, d, s):
                    continue
                ss, g = scan_s(c, d, s), med(c, d, s, "guest_s")
                tl.append(f"| {c} | {'delay ' + d if d else 'plain'} | {s} | {label[s]} | "
                          f"{ss:.1f} | {ratio(ss, bs)} | {g:.0f} | {ratio(g, bg)} |")
    lines += tl
for t in paras:
    lines += ["", t]
lines += ["", "Raw runs: `bench/bench-lazytime-nbd.csv`.", ""]
replace_section(md, "bench-lazytime-nbd", lines)
print("\n".join(lines))
PY
