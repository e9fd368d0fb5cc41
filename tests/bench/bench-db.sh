#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench-db.sh --- the database case: what reaches the backing store while an
# unmodified guest kernel overwrites a preallocated file at random 4 KiB
# offsets with an fdatasync every few writes, on a journaled ext4.  Side by
# side in one run, the same guest workload through:
#   file-relatime: nbdkit's file plugin, guest mounted relatime (what the
#                  guest sends)
#   file-lazytime: the file plugin, guest mounted lazytime (the kernel's own
#                  lazytime: the floor)
#   strict, atime, lazy: ext4lazy with that policy, guest mounted relatime
# Each guest makes a journaled 256 MiB ext4 (4 KiB blocks), fills a 64 MiB
# file and syncs it, waits past a journal commit, then, inside a window cut
# by two marker reads, overwrites for 30 s (fdatasync every 8 writes) and
# idles 35 s; it unmounts and runs fsck, and the host runs e2fsck -fn.  The
# backing store is a loop device with direct I/O, counted from
# /sys/block/loopN/stat (writes, sectors, flushes) over the window.
# BENCH_RUNS rounds (default 2), the configs interleaved within a round;
# writes the table and a plot into docs/benchmarks.md and docs/bench/.
# Knobs: BENCH_RUNS, BENCH_DB_SECS (30), BENCH_DB_SYNC (8), BENCH_CONFIGS,
# EXT4LAZY_PLUGIN, BENCH_OUTDIR (csv, png), BENCH_DOC (the markdown file).
# "bench-db.sh --report" only rewrites the section and the plot from the
# csv of an earlier run (same BENCH_DB_SECS and BENCH_DB_SYNC).
# As root (loop devices); needs the e2e packages (tests/e2e/README.md).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
runs=${BENCH_RUNS:-2}
secs=${BENCH_DB_SECS:-30}
every=${BENCH_DB_SYNC:-8}
PLUGIN=${EXT4LAZY_PLUGIN:-$DEFAULT_PLUGIN}
OUTDIR=${BENCH_OUTDIR:-$REPO/docs/bench}
doc=${BENCH_DOC:-$REPO/docs/benchmarks.md}
configs=${BENCH_CONFIGS:-"file-relatime file-lazytime strict atime lazy"}
report_only=no
case ${1:-} in
  --report) report_only=yes ;;
  "") ;;
  *) echo "usage: bench-db.sh [--report]" >&2; exit 2 ;;
esac
[ $report_only = yes ] || [ -f "$PLUGIN" ] \
  || { note "build the plugin first ($PLUGIN)"; exit 1; }
for cfg in $configs; do
  case $cfg in
    file-relatime|file-lazytime|strict|atime|lazy) ;;
    *) note "unknown config $cfg"; exit 2 ;;
  esac
done

# The harness picks the server under test from these; this script names the
# server of every run itself.
unset E2E_PLUGIN E2E_PLUGIN_ARGS
export EXT4LAZY_PLUGIN=$PLUGIN
. "$REPO/tests/e2e/lib.sh"
if [ $report_only = yes ]; then
  e2e_find_kernel || E2E_KVER=unknown
else
  e2e_init
fi

DB_MIB=64
FS_BLOCKS=65536                             # 256 MiB of 4 KiB blocks
MSTART=$((FS_BLOCKS * 4096 + 256 * 1024))   # marker blocks outside the fs
MEND=$((MSTART + 64 * 1024))
IMG_SIZE=$((FS_BLOCKS * 4096 + 1024 * 1024))
workload=(workload=mkfs,mount,db,umount,fsck
          mkfsfeat=has_journal fsblocks=$FS_BLOCKS seed=11
          settle=7 idle=35 mstart=$MSTART mend=$MEND
          dbsize=$DB_MIB dbsecs=$secs dbsync=$every)

# Write requests, sectors written and flushes so far on loop device DEV
# (fields 5, 7 and 16 of /sys/block/loopN/stat), after pushing what the host
# buffers for it onto it, as e2e_loop_stat does.
db_loop_stat ()
{
  blockdev --flushbufs "$1" 2>/dev/null
  awk 'NF >= 17 { print $5, $7, $16; next } { print $5, $7, "NA" }' \
    "/sys/block/$(basename "$1")/stat"
}

# Flush requests and FUA writes the client sent between the marker reads:
# "FLUSHES FUA_WRITES".
db_log_flushes ()
{
  local s e
  s=$(printf 'offset=0x%x' "$1")
  e=$(printf 'offset=0x%x' "$2")
  awk -v s="$s" -v e="$e" '
    / Read id=/ && index($0, s " ") { on = 1; next }
    / Read id=/ && index($0, e " ") { on = 0; exit }
    on && / Flush id=/ { f++ }
    on && / Write id=/ && / fua=1/ { u++ }
    END { printf "%d %d\n", f, u }' "$3"
}

mkdir -p "$OUTDIR"
csv=$OUTDIR/bench-db.csv
[ $report_only = yes ] || echo "config,run,window_s,write_reqs,sectors,flushes,guest_writes,guest_syncs,guest_seconds,nondata_sectors,guest_writes_per_s,client_sectors,client_flushes,client_fua_writes,after_window_sectors" >"$csv"

# run CFG ROUND: one guest run; appends a csv row.
run ()
{
  local cfg=$1 round=$2 name img dev win srv opts s e final client cf
  local sreq ssec sfl st ereq esec efl et freq fsec ffl gw gs gt
  name=$cfg-$round
  case $cfg in
    file-relatime) srv=file opts=relatime ;;
    file-lazytime) srv=file opts=lazytime ;;
    *) srv=$PLUGIN opts=relatime ;;
  esac
  E2E_PLUGIN_ARGS=
  [ "$srv" = "$PLUGIN" ] && E2E_PLUGIN_ARGS=policy=$cfg
  img=$E2E_TMP/$name.img
  win=$E2E_TMP/$name.window
  e2e_image "$img" "$IMG_SIZE"
  e2e_loop_attach "$img"
  dev=$E2E_LOOP
  e2e_nbdkit_start "$name" "$srv" "$dev"
  # "start REQS SECTORS FLUSHES TIME" and "end ..." lines into $win.
  e2e_window_watch "$E2E_NBDLOG" "$dev" "$MSTART" "$MEND" "$win" db_loop_stat
  e2e_boot "$name" "${workload[@]}" mountopts="$opts" \
    || e2e_fail "$name: guest run failed"
  wait "$E2E_WATCH_PID"
  e2e_forget_pid "$E2E_WATCH_PID"
  e2e_nbdkit_stop || e2e_fail "$name: server did not exit cleanly"
  final=$(db_loop_stat "$dev")
  e2e_loop_detach "$dev"
  e2fsck -fn "$img" >"$E2E_TMP/$name.fsck" 2>&1 \
    || { cat "$E2E_TMP/$name.fsck" >&2; e2e_fail "$name: e2fsck -fn"; }
  s=$(grep '^start ' "$win") && e=$(grep '^end ' "$win") \
    || e2e_fail "$name: the markers were not seen in the server log"
  read -r _ sreq ssec sfl st <<<"$s"
  read -r _ ereq esec efl et <<<"$e"
  read -r freq fsec ffl <<<"$final"
  gw=$(e2e_result db writes) gs=$(e2e_result db syncs) gt=$(e2e_result db seconds)
  [ -n "$gw" ] && [ -n "$gs" ] && [ -n "$gt" ] \
    || e2e_fail "$name: no db result from the guest"
  client=$(e2e_log_write_sectors "$MSTART" "$MEND" "$E2E_NBDLOG")
  cf=$(db_log_flushes "$MSTART" "$MEND" "$E2E_NBDLOG")
  awk -v cfg="$cfg" -v r="$round" -v st="$st" -v et="$et" \
      -v req=$((ereq - sreq)) -v sec=$((esec - ssec)) -v sfl="$sfl" -v efl="$efl" \
      -v gw="$gw" -v gs="$gs" -v gt="$gt" -v client="$client" -v cf="$cf" \
      -v after=$((fsec - esec)) '
    BEGIN {
      split(cf, c, " ")
      fl = (sfl == "NA" || efl == "NA") ? "" : efl - sfl
      printf "%s,%s,%.1f,%d,%d,%s,%d,%d,%s,%d,%.1f,%d,%d,%d,%d\n", cfg, r,
        et - st, req, sec, fl, gw, gs, gt, sec - 8 * gw, gw / gt, client,
        c[1], c[2], after
    }' >>"$csv"
  tail -n 1 "$csv" | awk -F, '{
    printf "bench-db: %-13s round %s: window %5.1fs backing: %d writes %d sectors %s flushes; guest: %d writes %d syncs (%.1f/s); non-data %d sectors; client sent %d sectors %d flushes %d FUA; after window %d sectors\n",
      $1, $2, $3, $4, $5, $6, $7, $8, $11, $10, $12, $13, $14, $15 }'
  rm -f "$img"
}

if [ $report_only = no ]; then
  for round in $(seq 1 "$runs"); do
    for cfg in $configs; do
      run "$cfg" "$round"
    done
  done
fi
[ -s "$csv" ] || { note "no results in $csv"; exit 1; }

PYTHONPATH="$BENCH_SRC" "$PY" - "$csv" "$doc" "$OUTDIR" "$E2E_KVER" \
  "$secs" "$every" "$DB_MIB" <<'PY'
import csv, os, platform, statistics, sys, datetime
from benchreport import cpu_model, pyplot, replace_section
path, md, outdir, kver, secs, every, mib = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
for r in rows:   # what the guest sent beyond its data, from the server's log
    r["sent_nondata"] = str(int(r["client_sectors"]) - 8 * int(r["guest_writes"]))
order = ["file-relatime", "file-lazytime", "strict", "atime", "lazy"]
desc = {"file-relatime": ("nbdkit file", "relatime"),
        "file-lazytime": ("nbdkit file", "lazytime"),
        "strict": ("ext4lazy policy=strict", "relatime"),
        "atime": ("ext4lazy policy=atime", "relatime"),
        "lazy": ("ext4lazy policy=lazy", "relatime")}
configs = [c for c in order if any(r["config"] == c for r in rows)]
def med(c, k):
    v = [float(r[k]) for r in rows if r["config"] == c and r[k] != ""]
    return statistics.median(v) if v else None
def fmt(v, d=0):
    return "n/a" if v is None else f"{v:.{d}f}"
def ratio(a, b):
    if a is None or b is None:
        return "n/a"
    return f"{a / b:.2f}" if b > 0 else f"+{a:.0f} (floor 0)" if a > 0 else "same (0)"
cpu = cpu_model()
nruns = max(sum(r["config"] == c for r in rows) for c in configs)
lines = ["## The database case: random overwrites with fdatasync, journaled ext4", "",
         f"Measured {datetime.date.today()} on {os.cpu_count()} cores ({cpu}), "
         f"host kernel {platform.release()}, guest kernel {kver} in qemu (TCG, "
         "one vCPU), by `tests/bench/bench-db.sh` (medians of "
         f"{nruns} run(s) per row, the configs interleaved in each round). The "
         "guest makes a journaled 256 MiB ext4 (4 KiB blocks), fills a "
         f"{mib} MiB file and syncs it, waits 7 s, then, inside the window, "
         f"overwrites 4 KiB blocks at random aligned offsets for {secs} s with "
         f"an fdatasync every {every} writes (distinct blocks between two "
         "fdatasyncs), idles 35 s, and ends the window. Counted on the backing "
         "store (a loop device with direct I/O, /sys/block/loopN/stat): write "
         "requests, sectors (512 B) and flushes in the window. *Non-data "
         "sectors* = sectors − 8 × guest writes: what the journal, metadata and "
         "timestamps cost on top of the data; *guest sent* is the same "
         "difference over what the guest wrote to the server (its request "
         "log). The number of guest writes depends on how fast the TCG guest "
         "ran on a shared 2-core machine that was running other jobs, so "
         "total sectors, requests, flushes and writes/s vary with it; the "
         "non-data sectors do not, and the ratios are of those.", "",
         "| config | server | guest mount | sectors | non-data sectors | guest sent non-data | write requests | flushes | guest fdatasyncs | guest writes/s | non-data vs file-relatime | non-data vs file-lazytime | after window |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
base_r = med("file-relatime", "nondata_sectors") if "file-relatime" in configs else None
base_l = med("file-lazytime", "nondata_sectors") if "file-lazytime" in configs else None
for c in configs:
    srv, mnt = desc[c]
    nd = med(c, "nondata_sectors")
    lines.append(f"| {c} | {srv} | {mnt} | {fmt(med(c, 'sectors'))} | {fmt(nd)} | "
                 f"{fmt(med(c, 'sent_nondata'))} | {fmt(med(c, 'write_reqs'))} | "
                 f"{fmt(med(c, 'flushes'))} | {fmt(med(c, 'guest_syncs'))} | "
                 f"{fmt(med(c, 'guest_writes_per_s'), 1)} | "
                 f"{ratio(nd, base_r)} | {ratio(nd, base_l)} | "
                 f"{fmt(med(c, 'after_window_sectors'))} |")

# What the numbers show, computed from them.
nd = {c: med(c, "nondata_sectors") for c in configs}
sent = {c: med(c, "sent_nondata") for c in configs}
after = {c: med(c, "after_window_sectors") for c in configs}
def span(vals):
    lo, hi = min(vals), max(vals)
    return f"{lo:.0f}" if lo == hi else f"{lo:.0f}–{hi:.0f}"
find = []
find.append("Non-data sectors in the window (medians): " + ", ".join(
    f"{c} {nd[c]:.0f}" for c in configs) + ".")
rel = [c for c in configs if desc[c][1] == "relatime"]
if rel:
    sent_rel = span([float(r["sent_nondata"]) for r in rows
                     if r["config"] in rel])
    find[-1] = (find[-1][:-1] + f"; the guest mounted relatime sent {sent_rel} "
                "per run: the journal commits that log the file's mtime/ctime "
                "every few seconds, and the inode's block written in place.")
if "lazy" in configs and "file-lazytime" in configs:
    a, b, s = nd["lazy"], nd["file-lazytime"], sent["lazy"]
    cmp = ("the same as" if a == b else "fewer than" if a < b else
           f"{a - b:.0f} sectors more than")
    find.append(f"Under `lazy` the backing store got {cmp} the kernel's own "
                f"lazytime ({a:.0f} against {b:.0f}); it held {s - a:.0f} of "
                f"the {s:.0f} sectors the guest sent, which reached the store "
                f"after the window ({after['lazy']:.0f} sectors after the "
                "window, against "
                + (f"{after['file-relatime']:.0f} for file-relatime)."
                   if "file-relatime" in configs else "?)."))
pol = [c for c in ("strict", "atime") if c in configs]
if pol:
    find.append(" and ".join(f"`{c}`" for c in pol) + " wrote " +
                " and ".join(f"{nd[c]:.0f}" for c in pol) + " of the " +
                " and ".join(f"{sent[c]:.0f}" for c in pol) +
                " non-data sectors the guest sent: each journal commit comes "
                "with flushes, and these policies keep nothing but atime past a "
                "flush, so they cannot hold the mtime/ctime changes the commits "
                "log; what they held (" +
                " and ".join(f"{sent[c] - nd[c]:.0f}" for c in pol) +
                " sectors) was sent after the window's last flush and reached the store after the window.")
extra = {c: [float(r["flushes"]) - float(r["client_flushes"]) for r in rows
             if r["config"] == c and r["flushes"] != ""] for c in configs}
same = [c for c in configs if extra[c] and max(map(abs, extra[c])) == 0]
more = [c for c in configs if extra[c] and c not in same]
if same or more:
    s = ""
    if same:
        s = ("The backing store got exactly the flushes the guest sent (about "
             "one per fdatasync) under " + ", ".join(same))
    if more:
        s += ("; under " if s else "Under ") + ", ".join(
            f"{c} it got {span(extra[c])} more per run than the guest sent"
            for c in more)
    share = max(100 * (float(r["sectors"]) - 8 * float(r["guest_writes"]))
                / float(r["sectors"]) for r in rows if float(r["sectors"]) > 0)
    find.append(s + f"; non-data sectors were at most {share:.3f}% of the "
                "sectors of a run, so what differs between the configs here is "
                "a few journal and inode blocks, not the total.")
lines += ["", " ".join(find), "",
          "*After window*: sectors written between the end of the window and "
          "the server's exit (unmount, fsck, and what a server held until "
          "shutdown). *Write requests* on the loop device include its flushes "
          "(each flush is also counted as a write request there). Every run "
          "ended with a clean server exit and a clean `e2fsck -fn` of the "
          "image. Raw runs: `bench/bench-db.csv`.", "",
          "![database case](bench/bench-db.png)", ""]
plt = pyplot()
if plt:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    x = list(range(len(configs)))
    cols = {"file-relatime": "#d86b3b", "file-lazytime": "#7a7a7a",
            "strict": "#9cc3f0", "atime": "#5e9be0", "lazy": "#1f5fb0"}
    w = 0.38
    v1 = [nd[c] or 0 for c in configs]
    v2 = [sent[c] or 0 for c in configs]
    ax1.bar([i - w / 2 for i in x], v1, w, color=[cols[c] for c in configs],
            label="reached the backing store")
    ax1.bar([i + w / 2 for i in x], v2, w, color="none", edgecolor="#444",
            hatch="//", label="guest sent")
    ax1.set_title("non-data sectors in the window", fontsize=9)
    ax1.set_ylim(0, max(v1 + v2 + [1]) * 1.45)
    ax1.legend(fontsize=7, loc="upper center", ncol=2)
    for i in x:
        ax1.annotate(f"{v1[i]:.0f}", (i - w / 2, v1[i]), ha="center",
                     va="bottom", fontsize=7)
    per = [statistics.median(extra[c]) if extra[c] else 0 for c in configs]
    ax2.bar(x, per, color=[cols[c] for c in configs])
    ax2.set_title("backing-store flushes beyond those the guest sent\n"
                  f"(the guest sent about {statistics.median(float(r['client_flushes']) for r in rows):.0f} per run)",
                  fontsize=9)
    for i in x:
        ax2.annotate(f"{per[i]:.0f}", (i, per[i]), ha="center", va="bottom",
                     fontsize=7)
    ax2.margins(y=0.2)
    for ax in (ax1, ax2):
        ax.set_xticks(x)
        ax.set_xticklabels(configs, fontsize=8, rotation=20)
    fig.suptitle(f"random 4 KiB overwrites, fdatasync every {every} writes, "
                 f"{secs} s, journaled ext4 (medians)", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "bench-db.png"), dpi=100)
else:
    lines[-2] = "(plot skipped: python3-matplotlib is not installed)"
replace_section(md, "bench-db", lines)
print("\n".join(lines))
PY
