#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench-lazytime.sh --- what reaches the backing store while an unmodified
# guest kernel reads a tree of files, side by side in one run:
#   ext4lazy (policy=strict), guest mounted strictatime
#   nbdkit's file plugin, guest mounted lazytime,strictatime (the kernel's
#   own lazytime)
#   and, from the same ext4lazy run's request log, what the guest sent —
#   what the file plugin would have written with strictatime.
# It runs tests/e2e/test-e2e-count.sh (256 MiB, 2000 files of 3000 bytes,
# 6 read scans 6 s apart, 35 s idle) BENCH_RUNS times for each of:
#   nojournal-strict:  no journal, policy=strict, strictatime
#   journal-atime:     journal, policy=atime, strictatime
#   journal-lazy:      journal, policy=lazy, strictatime
#   journal-atime-rel: journal, policy=atime, relatime
# Each is counted in the steady-state window and over the whole run
# (server start to server exit: mount, first open, scans, idle, unmount).
# and writes the table and a plot into docs/benchmarks.md and docs/bench/.
# As root (loop devices); needs the e2e packages (tests/e2e/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
runs=${BENCH_RUNS:-3}
plugin=${EXT4LAZY_PLUGIN:-$here/build/plugin/nbdkit-ext4lazy-plugin.so}
out=${BENCH_OUTDIR:-$here/docs/bench}
[ -f "$plugin" ] || { echo "bench-lazytime: build the plugin first ($plugin)" >&2; exit 1; }
mkdir -p "$out"
csv=$out/bench-lazytime.csv
echo "config,run,ext4lazy_strictatime,file_lazytime,guest_sent_strictatime,ext4lazy_after_window,ext4lazy_whole,file_whole,ext4lazy_requests,file_requests" >"$csv"
configs=${BENCH_CONFIGS:-"nojournal-strict journal-atime journal-lazy journal-atime-rel"}
for cfg in $configs; do
 case $cfg in
   nojournal-strict) feat=^has_journal args=policy=strict mnt=strictatime ;;
   journal-atime) feat=has_journal args=policy=atime mnt=strictatime ;;
   journal-lazy) feat=has_journal args=policy=lazy mnt=strictatime ;;
   journal-atime-rel) feat=has_journal args=policy=atime mnt=relatime ;;
   *) echo "bench-lazytime: unknown config $cfg" >&2; exit 2 ;;
 esac
 for i in $(seq 1 "$runs"); do
  log=$(mktemp)
  E2E_COUNT_FEAT=$feat E2E_COUNT_MOUNT=$mnt E2E_PLUGIN_ARGS=$args \
  EXT4LAZY_PLUGIN=$plugin bash "$here/tests/e2e/test-e2e-count.sh" >"$log" 2>&1 ||
    { cat "$log" >&2; echo "bench-lazytime: $cfg run $i failed" >&2; exit 1; }
  # The window's store write requests (the loop device's, flushes
  # included) next to its sectors.
  a=$(sed -n 's/^COUNT: A .* backing: \([0-9]*\) writes \([0-9]*\) sectors; client wrote \([0-9]*\) sectors; after window to server exit: \([0-9]*\) sectors; whole run: \([0-9]*\) sectors$/\2 \3 \4 \5 \1/p' "$log")
  b=$(sed -n 's/^COUNT: B .* backing: \([0-9]*\) writes \([0-9]*\) sectors;.* whole run: \([0-9]*\) sectors$/\2 \3 \1/p' "$log")
  read -r asec asent aafter awhole areq <<<"$a"
  read -r bsec bwhole breq <<<"$b"
  echo "$cfg,$i,$asec,$bsec,$asent,$aafter,$awhole,$bwhole,$areq,$breq" >>"$csv"
  echo "$cfg run $i: window: ext4lazy $asec sectors in $areq write requests (flushes included), file+lazytime $bsec in $breq, guest sent $asent; whole run: ext4lazy $awhole, file+lazytime $bwhole"
  rm -f "$log"
 done
done

PYTHONPATH="$here/tests/bench" /usr/bin/python3 - "$csv" "$here/docs/benchmarks.md" "$out" <<'PY'
import csv, os, platform, statistics, sys, datetime
path, md, outdir = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
names = {"nojournal-strict": ("no journal", "strict", "strictatime"),
         "journal-atime": ("journal", "atime", "strictatime"),
         "journal-lazy": ("journal", "lazy", "strictatime"),
         "journal-atime-rel": ("journal", "atime", "relatime")}
configs = [c for c in names if any(r["config"] == c for r in rows)]
def med(c, k):
    return statistics.median(int(r[k]) for r in rows if r["config"] == c)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "?")
lines = ["## Timestamp writes: ext4lazy vs the kernel's own lazytime", "",
         f"Measured {datetime.date.today()} on {os.cpu_count()} cores ({cpu}), "
         f"host kernel {platform.release()}, guest Debian cloud kernel 6.1 in "
         "qemu (TCG), by `tests/bench/bench-lazytime.sh` (medians of "
         f"{max(sum(r['config'] == c for r in rows) for c in configs)} run(s) "
         "per row). Sectors (512 B) reaching the backing store (a loop "
         "device, counted from /sys/block/loopN/stat) in a ~70 s window: six "
         "read scans of 2000 files of 3000 bytes, 6 s apart, then 35 s idle; "
         "256 MiB ext4, 4 KiB blocks. The comparison is the same guest through "
         "nbdkit's file plugin mounted `lazytime,strictatime`, measured in the "
         "same run; \"guest sent\" is what the guest wrote to ext4lazy in the "
         "window, i.e. what the file plugin would have written. The window "
         "is the steady state (it opens after a first file open and a "
         "journal commit); the whole run counts from server start to server "
         "exit on a filesystem populated beforehand: mount, first open, the "
         "scans, idle, unmount, and what the server writes at exit.", "",
         "| filesystem | ext4lazy policy | guest mount | window: ext4lazy | window: file + kernel lazytime | ratio | guest sent | whole run: ext4lazy | whole run: file + kernel lazytime | ratio |",
         "|---|---|---|---|---|---|---|---|---|---|"]
def ratio(a, b):
    return f"{a / b:.2f}" if b else "n/a"
for c in configs:
    fs, pol, mnt = names[c]
    a, b, sent = med(c, "ext4lazy_strictatime"), med(c, "file_lazytime"), med(c, "guest_sent_strictatime")
    wa, wb = med(c, "ext4lazy_whole"), med(c, "file_whole")
    lines.append(f"| {fs} | {pol} | {mnt} | {a:.0f} | {b:.0f} | {ratio(a, b)} | {sent:.0f} | {wa:.0f} | {wb:.0f} | {ratio(wa, wb)} |")
lines += ["", "In the window, held timestamps reach the store after it (at "
          "shutdown here), as the kernel's lazytime writes them at unmount; "
          "the whole run counts them.", "",
          "![timestamp writes](bench/bench-lazytime.png)", ""]
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    x = range(len(configs))
    for ax, title, bars in [
            (axes[0], "steady-state window", [
                ("ext4lazy_strictatime", "ext4lazy", "#3b7dd8"),
                ("file_lazytime", "file + kernel lazytime", "#7a7a7a"),
                ("guest_sent_strictatime", "guest sent (file, no lazytime)", "#d86b3b")]),
            (axes[1], "whole run (server start to exit)", [
                ("ext4lazy_whole", "ext4lazy", "#3b7dd8"),
                ("file_whole", "file + kernel lazytime", "#7a7a7a")])]:
        w = 0.8 / len(bars)
        for k, (key, label, col) in enumerate(bars):
            vals = [med(c, key) for c in configs]
            ax.bar([i + (k - (len(bars) - 1) / 2) * w for i in x], vals, w,
                   label=label, color=col)
        ax.set_xticks(list(x))
        ax.set_xticklabels(["\n".join(names[c]) for c in configs], fontsize=7)
        ax.set_yscale("symlog")
        ax.set_ylabel("sectors written")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "bench-lazytime.png"), dpi=100)
except ImportError:
    lines[-2] = "(plot skipped: python3-matplotlib is not installed)"
from docsection import replace_section
replace_section(md, "bench-lazytime", lines)
print("\n".join(lines))
PY
