#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench-lazytime.sh --- what reaches the backing store while an unmodified
# guest kernel reads a tree of files, side by side in one run:
#   ext4lazy, guest mounted strictatime (or relatime)
#   nbdkit's file plugin, guest mounted lazytime,strictatime (the kernel's
#   own lazytime)
#   and, from the same ext4lazy run's request log, what the guest sent —
#   what the file plugin would have written with strictatime.
# It runs tests/e2e/test-e2e-count.sh (256 MiB, 2000 files of 3000 bytes)
# BENCH_RUNS times for each of BENCH_CONFIGS:
#   nojournal-strict:  no journal, policy=strict, strictatime
#   journal-atime:     journal, policy=atime, strictatime
#   journal-lazy:      journal, policy=lazy, strictatime
#   journal-atime-rel: journal, policy=atime, relatime
#   journal-lazy-rel:  journal, policy=lazy, relatime
# (6 read scans 6 s apart, 35 s idle) and, the deadline scenario, where
# both sides' deadline falls inside the window: ext4lazy max-age=30s, the
# guest's vm.dirtytime_expire_seconds=30, 3 scans 12 s apart, 75 s idle:
#   deadline-atime:    journal, policy=atime, strictatime
#   deadline-lazy-rel: journal, policy=lazy, relatime
# Each is counted in sectors and in store operations (write requests and
# flushes) in the measurement window and over the whole run (server start
# to server exit: mount, first open, scans, idle, unmount), and the table
# and a plot go into docs/benchmarks.md and docs/bench/.
# "--report" redoes the table and plot from the csv without measuring.
# Knobs: BENCH_RUNS (3), BENCH_CONFIGS (all), BENCH_APPEND=1 (add to the
# csv), BENCH_OUTDIR (docs/bench), BENCH_DOC (docs/benchmarks.md).
# As root (loop devices); needs the e2e packages (tests/e2e/README.md).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
runs=${BENCH_RUNS:-3}
PLUGIN=${EXT4LAZY_PLUGIN:-$DEFAULT_PLUGIN}
OUTDIR=${BENCH_OUTDIR:-$REPO/docs/bench}
[ -f "$PLUGIN" ] || { note "build the plugin first ($PLUGIN)"; exit 1; }
mkdir -p "$OUTDIR"
csv=$OUTDIR/bench-lazytime.csv
# BENCH_APPEND=1 adds to the rows of an earlier run (other configs).
report_only=no
[ "${1:-}" = --report ] && report_only=yes
[ -n "${BENCH_APPEND:-}" ] || [ $report_only = yes ] && [ -s "$csv" ] ||
  echo "config,run,ext4lazy_strictatime,file_lazytime,guest_sent_strictatime,ext4lazy_after_window,ext4lazy_whole,file_whole,ext4lazy_requests,file_requests,ext4lazy_whole_requests,file_whole_requests" >"$csv"
configs=${BENCH_CONFIGS:-"nojournal-strict journal-atime journal-lazy journal-atime-rel journal-lazy-rel deadline-atime deadline-lazy-rel"}
[ $report_only = yes ] && configs=
for cfg in $configs; do
 scans=6 pause=6 idle=35 dirty= age=
 case $cfg in
   nojournal-strict) feat=^has_journal args=policy=strict mnt=strictatime ;;
   journal-atime) feat=has_journal args=policy=atime mnt=strictatime ;;
   journal-lazy) feat=has_journal args=policy=lazy mnt=strictatime ;;
   journal-atime-rel) feat=has_journal args=policy=atime mnt=relatime ;;
   journal-lazy-rel) feat=has_journal args=policy=lazy mnt=relatime ;;
   deadline-atime) feat=has_journal args=policy=atime mnt=strictatime age=30s ;;
   deadline-lazy-rel) feat=has_journal args=policy=lazy mnt=relatime age=30s ;;
   *) note "unknown config $cfg"; exit 2 ;;
 esac
 [ -n "$age" ] && { args="$args max-age=$age"; scans=3 pause=12 idle=75 dirty=30; }
 for i in $(seq 1 "$runs"); do
  log=$(mktemp)
  bench_count "$log" "$cfg run $i" \
    E2E_COUNT_FEAT=$feat E2E_COUNT_MOUNT=$mnt E2E_PLUGIN_ARGS="$args" \
    E2E_COUNT_SCANS=$scans E2E_COUNT_PAUSE=$pause E2E_COUNT_IDLE=$idle \
    E2E_COUNT_DIRTYTIME=$dirty E2E_COUNT_NO_BOUNDS=1
  # The store operations (write requests and flushes of the loop
  # device) next to the sectors, in the window and over the whole run.
  a=$(sed -n 's/^COUNT: A .* backing: \([0-9]*\) ops \([0-9]*\) sectors; client wrote \([0-9]*\) sectors; after window to server exit: \([0-9]*\) sectors; whole run: \([0-9]*\) sectors \([0-9]*\) ops$/\2 \3 \4 \5 \1 \6/p' "$log")
  b=$(sed -n 's/^COUNT: B .* backing: \([0-9]*\) ops \([0-9]*\) sectors;.* whole run: \([0-9]*\) sectors \([0-9]*\) ops$/\2 \3 \1 \4/p' "$log")
  read -r asec asent aafter awhole areq awreq <<<"$a"
  read -r bsec bwhole breq bwreq <<<"$b"
  [ -n "${awreq:-}" ] && [ -n "${bwreq:-}" ] ||
    { cat "$log" >&2; note "$cfg run $i: no counts"; exit 1; }
  echo "$cfg,$i,$asec,$bsec,$asent,$aafter,$awhole,$bwhole,$areq,$breq,$awreq,$bwreq" >>"$csv"
  echo "$cfg run $i: window: ext4lazy $asec sectors in $areq ops, file+lazytime $bsec in $breq, guest sent $asent; whole run: ext4lazy $awhole sectors in $awreq ops, file+lazytime $bwhole in $bwreq"
  rm -f "$log"
 done
done

PYTHONPATH="$BENCH_SRC" "$PY" - "$csv" "${BENCH_DOC:-$REPO/docs/benchmarks.md}" "$OUTDIR" <<'PY'
import csv, os, platform, statistics, sys, datetime
from benchreport import cpu_model, pyplot, ratio, replace_section
path, md, outdir = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
names = {"nojournal-strict": ("no journal", "strict", "strictatime"),
         "journal-atime": ("journal", "atime", "strictatime"),
         "journal-lazy": ("journal", "lazy", "strictatime"),
         "journal-atime-rel": ("journal", "atime", "relatime"),
         "journal-lazy-rel": ("journal", "lazy", "relatime"),
         "deadline-atime": ("journal, deadline", "atime", "strictatime"),
         "deadline-lazy-rel": ("journal, deadline", "lazy", "relatime")}
configs = [c for c in names if any(r["config"] == c for r in rows)]
def med(c, k):
    return statistics.median(int(r[k]) for r in rows if r["config"] == c)
cpu = cpu_model()
lines = ["## Timestamp writes: ext4lazy vs the kernel's own lazytime", "",
         f"Measured {datetime.date.today()} on {os.cpu_count()} cores ({cpu}), "
         f"host kernel {platform.release()}, guest Debian cloud kernel 6.1 in "
         "qemu (TCG), by `tests/bench/bench-lazytime.sh` (medians of "
         f"{max(sum(r['config'] == c for r in rows) for c in configs)} run(s) "
         "per row). What reaches the backing store (a loop device, counted "
         "from /sys/block/loopN/stat): sectors (512 B) and operations (write "
         "requests plus flushes, what a store's queue or a remote charges "
         "for). The window: six read scans of 2000 files of 3000 bytes, 6 s "
         "apart, then 35 s idle; 256 MiB ext4, 4 KiB blocks. The deadline "
         "rows: ext4lazy max-age=30s against the guest's "
         "vm.dirtytime_expire_seconds=30, three scans 12 s apart and 75 s "
         "idle, so that both sides' deadline falls inside the window. The "
         "comparison is the same guest through nbdkit's file plugin mounted "
         "`lazytime,strictatime`, measured in the same run; \"guest sent\" "
         "is what the guest wrote to ext4lazy in the window, i.e. what the "
         "file plugin would have written. The window is the steady state "
         "(it opens after a first file open and a journal commit); the whole "
         "run counts from server start to server exit on a filesystem "
         "populated beforehand: mount, first open, the scans, idle, unmount, "
         "and what the server writes at exit.", "",
         "| filesystem | policy | guest mount | window sectors: ext4lazy / kernel lazytime (ratio) | window ops | guest sent | whole run sectors | whole run ops |",
         "|---|---|---|---|---|---|---|---|"]
def cell(a, b):
    return f"{a:.0f} / {b:.0f} ({ratio(a, b)})"
for c in configs:
    fs, pol, mnt = names[c]
    a, b, sent = med(c, "ext4lazy_strictatime"), med(c, "file_lazytime"), med(c, "guest_sent_strictatime")
    wa, wb = med(c, "ext4lazy_whole"), med(c, "file_whole")
    oa, ob = med(c, "ext4lazy_requests"), med(c, "file_requests")
    woa, wob = med(c, "ext4lazy_whole_requests"), med(c, "file_whole_requests")
    lines.append(f"| {fs} | {pol} | {mnt} | {cell(a, b)} | {cell(oa, ob)} | {sent:.0f} | {cell(wa, wb)} | {cell(woa, wob)} |")
lines += ["", "In the window, held timestamps reach the store after it (at "
          "shutdown here), as the kernel's lazytime writes them at unmount; "
          "the whole run counts them. In the deadline rows both write their "
          "expired timestamps inside the window.", "",
          "![timestamp writes](bench/bench-lazytime.png)", ""]
plt = pyplot()
if plt:
    fig, axes = plt.subplots(2, 2, figsize=(12, 7))
    x = range(len(configs))
    for ax, title, unit, bars in [
            (axes[0][0], "window: sectors", "sectors written", [
                ("ext4lazy_strictatime", "ext4lazy", "#3b7dd8"),
                ("file_lazytime", "file + kernel lazytime", "#7a7a7a"),
                ("guest_sent_strictatime", "guest sent (file, no lazytime)", "#d86b3b")]),
            (axes[0][1], "whole run: sectors", "sectors written", [
                ("ext4lazy_whole", "ext4lazy", "#3b7dd8"),
                ("file_whole", "file + kernel lazytime", "#7a7a7a")]),
            (axes[1][0], "window: store operations", "writes + flushes", [
                ("ext4lazy_requests", "ext4lazy", "#3b7dd8"),
                ("file_requests", "file + kernel lazytime", "#7a7a7a")]),
            (axes[1][1], "whole run: store operations", "writes + flushes", [
                ("ext4lazy_whole_requests", "ext4lazy", "#3b7dd8"),
                ("file_whole_requests", "file + kernel lazytime", "#7a7a7a")])]:
        w = 0.8 / len(bars)
        for k, (key, label, col) in enumerate(bars):
            vals = [med(c, key) for c in configs]
            ax.bar([i + (k - (len(bars) - 1) / 2) * w for i in x], vals, w,
                   label=label, color=col)
        ax.set_xticks(list(x))
        ax.set_xticklabels(["\n".join(names[c]) for c in configs], fontsize=7)
        ax.set_yscale("symlog")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "bench-lazytime.png"), dpi=100)
else:
    lines[-2] = "(plot skipped: python3-matplotlib is not installed)"
replace_section(md, "bench-lazytime", lines)
print("\n".join(lines))
PY
