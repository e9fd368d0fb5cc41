#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# bench-lazytime-rbd.sh --- bench-lazytime.sh's measurement with the volume
# on Ceph RBD: what reaches the cluster while an unmodified guest kernel
# (Debian cloud 6.1 in qemu, TCG) reads a tree of files.  It runs
# tests/e2e/test-e2e-count.sh with E2E_COUNT_RBD (256 MiB ext4, journaled
# unless BENCH_FEAT says otherwise, 2000 files of 3000 bytes, 6 read scans
# 6 s apart, 35 s idle) BENCH_RUNS times; each time, in this order:
#   B:  qemu-storage-daemon's rbd driver (librbd, cache.direct=on), guest
#       mounted lazytime,strictatime (the kernel's own lazytime)
#   A:  ext4lazy rbd=rbd/IMAGE ceph-conf=... policy=atime, guest mounted
#       strictatime
#   A2: the same with policy=lazy
#   C:  qemu-storage-daemon again, guest mounted strictatime (what a guest
#       without lazytime sends)
# The cluster is a throwaway one (tests/integration/cephlib.py: one mon,
# one OSD on memstore, pool "rbd" of size 1, 127.0.0.1 only) started here
# and stopped at exit.  One populated template is made first (a guest
# through nbdkit's file plugin, as test-e2e-count.sh does) and every run
# gets a fresh image "rbd import"ed from it; after the run the image is
# exported, checked with e2fsck -fn and removed.
#
# What is counted: the OSD's perf counters, read from its admin socket
# (tests/e2e/lib.sh e2e_osd_stat): osd.op_w (write ops), osd.op_in_bytes
# (bytes the clients sent it) and osd.op_rw (read-modify-write ops: librbd's
# own object-map updates and exclusive-lock calls on the header; not in
# op_w).  Nobody else uses the cluster meanwhile, so every op is the
# server's (and, before the server starts, "rbd import"'s, which the counts
# leave out).  Two spans:
#   the window: the steady state the guest cuts with O_DIRECT reads of two
#     marker blocks past the filesystem's end.  The host cannot see a
#     remote store's stat file, so it watches the request log of the server
#     the guest talks to: nbdkit's log filter, in front of ext4lazy for A
#     and in front of nbdkit's nbd plugin, a plain pass-through to
#     qemu-storage-daemon's socket, for B and C (the same filter for every
#     side).  The log line is written when the marker read arrives, before
#     it is served; tail -F (inotify) sees it, and the OSD's counters are
#     read at once (tens of milliseconds; the guest idles 1 s after each
#     marker).  No client-side cache holds writes back: qemu-storage-daemon
#     runs librbd with its cache off, and ext4lazy's librbd default
#     (writearound) sends every write at once; the OSD has no disk to wait
#     for (memstore).  So a write the server issued before the marker is
#     counted before it.  (The other choice, sampling when the guest prints
#     a line on its serial console, cuts after the read completed and needs
#     a change to the guest's init; the log is what the loop-device
#     measurement already cuts at.)
#   the whole run: from before the server starts (for B and C, before
#     qemu-storage-daemon starts) to after it exited: mount, first open, the
#     window, unmount, and what the server writes and librbd closes at exit.
#
# Output: one line per run, the table, docs/bench/bench-lazytime-rbd.csv
# (every run), docs/bench/bench-lazytime-rbd.png and the section between
# <!-- bench-lazytime-rbd:begin --> and <!-- bench-lazytime-rbd:end --> of
# docs/benchmarks.md.  "--report" redoes table, plot and section from the
# csv.  Knobs: BENCH_RUNS (3), BENCH_FEAT (mkfs features: has_journal),
# EXT4LAZY_PLUGIN (build/plugin/...), BENCH_OUTDIR (docs/bench), BENCH_DOC
# (docs/benchmarks.md), BENCH_KEEP=1 (keep the scratch directory:
# template, logs of every run, the cluster's logs).  As root; needs the
# e2e packages (tests/e2e/README.md), ceph-mon, ceph-osd, ceph-common,
# qemu-system-common (qemu-storage-daemon) and qemu-block-extra (its rbd
# driver).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
runs=${BENCH_RUNS:-3}
feat=${BENCH_FEAT:-has_journal}
PLUGIN=${EXT4LAZY_PLUGIN:-$DEFAULT_PLUGIN}
OUTDIR=${BENCH_OUTDIR:-$REPO/docs/bench}
doc=${BENCH_DOC:-$REPO/docs/benchmarks.md}
csv=$OUTDIR/bench-lazytime-rbd.csv
cephlib=$REPO/tests/integration/cephlib.py
report_only=no
case ${1:-} in
  --report) report_only=yes ;;
  "") ;;
  *) echo "usage: bench-lazytime-rbd.sh [--report]" >&2; exit 2 ;;
esac

WORK='' cluster=''
# bench-lazytime-nbd.sh's cleanup, and the cluster stopped first.
cleanup ()
{
  local rc=$?
  if [ -n "$cluster" ]; then
    "$PY" "$cephlib" stop "$cluster" || rc=1
  fi
  bench_e2e_cleanup
  exit $rc
}

if [ $report_only = no ]; then
  bench_e2e_check
  nbdkit "$PLUGIN" --dump-plugin 2>/dev/null | grep -qx ext4lazy_rbd=yes \
    || { note "$PLUGIN has no rbd= backend (built without librbd?)"; exit 1; }
  "$PY" "$cephlib" check || { note "Ceph is not installed"; exit 1; }
  check_qemu_rbd
  bench_e2e_workdir
  cluster=$WORK/ceph
  unset CEPH_CONF
  eval "$("$PY" "$cephlib" start "$cluster")"
  [ -n "${CEPH_CONF:-}" ] || { note "the cluster did not start"; exit 1; }
  note "cluster up ($CEPH_CONF; daemons $(tr -d '\n' <"$cluster/cluster.json"))"

  echo "run,side,server,policy,mount,window_s,window_write_ops,window_bytes,window_rw_ops,guest_sent_sectors,after_write_ops,after_bytes,after_rw_ops,whole_write_ops,whole_bytes,whole_rw_ops" >"$csv"
  for i in $(seq 1 "$runs"); do
    log=$WORK/run$i.log
    note "run $i of $runs (5 guest boots the first time, 4 after; about 8-15 min)"
    bench_count "$log" "run $i" \
        E2E_COUNT_RBD="$CEPH_CONF" E2E_COUNT_TEMPLATE="$WORK/populated.img" \
        E2E_COUNT_FEAT="$feat" E2E_COUNT_MOUNT=strictatime \
        E2E_PLUGIN_ARGS=policy=atime E2E_COUNT_ALSO="policy=lazy|" \
        E2E_COUNT_BASE_ALSO=strictatime
    for side in B A A2 C; do
      case $side in
        A) server=ext4lazy policy=atime mount=strictatime ;;
        A2) server=ext4lazy policy=lazy mount=strictatime ;;
        B) server=qemu-storage-daemon policy= mount=lazytime+strictatime ;;
        C) server=qemu-storage-daemon policy= mount=strictatime ;;
      esac
      row=$(sed -En "s/^COUNT: $side +[^ ]+ +mount=[^ ]+ +window= *([0-9.]+)s cluster: ([0-9]+) write ops ([0-9]+) bytes ([0-9]+) rw ops; client wrote ([0-9]+) sectors; after window to server exit: ([0-9]+) write ops ([0-9]+) bytes ([0-9]+) rw ops; whole run: ([0-9]+) write ops ([0-9]+) bytes ([0-9]+) rw ops$/\1,\2,\3,\4,\5,\6,\7,\8/p" "$log")
      whole=$(sed -En "s/^COUNT: $side .* whole run: ([0-9]+) write ops ([0-9]+) bytes ([0-9]+) rw ops$/\1,\2,\3/p" "$log")
      [ -n "$row" ] && [ -n "$whole" ] \
        || { cat "$log" >&2; note "run $i: no count for side $side"; exit 1; }
      echo "$i,$side,$server,$policy,$mount,$row,$whole" >>"$csv"
      note "run $i $side ($server${policy:+ policy=$policy}, $mount): $(count_line "$log" "$side")"
    done
  done
fi

[ -s "$csv" ] || { note "no $csv: run the benchmark first"; exit 1; }
versions="$(ceph --version | awk '{ print "ceph", $3 }'), $(qemu-storage-daemon --version | head -n 1 | awk '{ print "qemu-storage-daemon", $3 }'), nbdkit $(nbdkit --version | awk '{ print $2 }')"
PYTHONPATH="$BENCH_SRC" "$PY" - "$csv" "$doc" "$OUTDIR" \
  "$(guest_kernel)" "$versions" "$feat" <<'PY'
import csv, datetime, os, platform, statistics, sys
from benchreport import cpu_model, kib, pyplot, ratio, replace_section
path, md, outdir, kver, versions, feat = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
order = ["A", "A2", "B", "C"]
label = {"A": "ext4lazy policy=atime", "A2": "ext4lazy policy=lazy",
         "B": "qemu-storage-daemon", "C": "qemu-storage-daemon"}
mount = {"A": "strictatime", "A2": "strictatime",
         "B": "lazytime,strictatime", "C": "strictatime"}
sides = [s for s in order if any(r["side"] == s for r in rows)]
nruns = max(sum(r["side"] == s for r in rows) for s in sides)

def med(s, k):
    return statistics.median(float(r[k]) for r in rows if r["side"] == s)



cpu = cpu_model()
fs = "journaled" if "^has_journal" not in feat else "no journal"
lines = [
    "## Timestamp writes on Ceph RBD: ext4lazy vs the kernel's own lazytime",
    "",
    f"Measured {datetime.date.today()} by `tests/bench/bench-lazytime-rbd.sh` "
    f"(medians of {nruns} run(s) per row) on a shared virtual machine with "
    f"{os.cpu_count()} cores ({cpu}) that ran other jobs at the same time; "
    f"host kernel {platform.release()}, guest Debian cloud kernel {kver} in "
    f"qemu (TCG); {versions}. The volume is an RBD image on a throwaway "
    "one-node cluster on the same machine (one mon, one OSD on memstore, "
    "pool size 1, 127.0.0.1). The guest workload is the one of the local "
    "measurement (\"Timestamp writes: ext4lazy vs the kernel's own "
    f"lazytime\"): a {fs} 256 MiB ext4 (4 KiB blocks), populated once "
    "with 2000 files of 3000 bytes and `rbd import`ed into a fresh image "
    "for each side; six read scans 6 s apart, then 35 s idle. What is "
    "counted is what reaches the cluster: the OSD's perf counters `op_w` "
    "(write ops) and `op_in_bytes` (bytes the clients sent), in the "
    "steady-state window the guest cuts with two marker reads (seen in "
    "the front server's request log) and over the whole run, from server "
    "start to server exit (mount, first open, the window, unmount, what "
    "the server writes at exit). B is the kernel's own lazytime through "
    "qemu-storage-daemon's rbd driver (librbd, the way a qemu guest uses "
    "RBD); C is the same server with the guest mounted `strictatime` and "
    "no lazytime, what such a guest sends today. Ratios are to B.",
    "",
    "| side | server | guest mount | window: write ops | window: KiB | ops / B | KiB / B | whole run: write ops | whole run: KiB | ops / B | KiB / B | guest sent in window: KiB | librbd rw ops, whole run |",
    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
b = {k: med("B", k) for k in ("window_write_ops", "window_bytes",
                               "whole_write_ops", "whole_bytes")} \
    if "B" in sides else None
for s in sides:
    wo, wb = med(s, "window_write_ops"), med(s, "window_bytes")
    ho, hb = med(s, "whole_write_ops"), med(s, "whole_bytes")
    r = (lambda k, v: ratio(v, b[k]) if b else "n/a")
    lines.append(
        f"| {s} | {label[s]} | {mount[s]} | {wo:.0f} | {kib(wb)} | "
        f"{r('window_write_ops', wo)} | {r('window_bytes', wb)} | {ho:.0f} | "
        f"{kib(hb)} | {r('whole_write_ops', ho)} | {r('whole_bytes', hb)} | "
        f"{med(s, 'guest_sent_sectors') * 512 / 1024:.0f} | "
        f"{med(s, 'whole_rw_ops'):.0f} |")

# What it means, from the medians.
def avg(s, ops, byts):
    n = med(s, ops)
    return f"{med(s, byts) / n / 1024:.0f}" if n else "0"

paras = []
if b and "A" in sides:
    a_w, a_b = med("A", "window_write_ops"), med("A", "window_bytes")
    # The e2e test's bound on a local file: 1.25 x B plus two 4 KiB blocks.
    met = (a_w <= 1.25 * b["window_write_ops"] + 2
           and a_b <= 1.25 * b["window_bytes"] + 8192)
    t = (f"**Steady state.** In the window ext4lazy (policy=atime) sent the "
         f"cluster {a_w:.0f} write op(s) ({kib(a_b)} KiB)")
    if "A2" in sides:
        t += (f", policy=lazy {med('A2', 'window_write_ops'):.0f} "
              f"({kib(med('A2', 'window_bytes'))} KiB)")
    t += (f", the kernel's own lazytime {b['window_write_ops']:.0f} "
          f"({kib(b['window_bytes'])} KiB). ")
    if met:
        t += ("That is within the bound the e2e test sets on a local file "
              "(1.25 x the kernel's lazytime plus two 4 KiB writes): the "
              "project's goal, the steady state through ext4lazy equal to "
              "the kernel's own lazytime as on a local file, holds on RBD. ")
    else:
        t += ("That is **not** within the bound the e2e test sets on a "
              "local file (1.25 x the kernel's lazytime plus two 4 KiB "
              "writes): the project's goal, the steady state through "
              "ext4lazy equal to the kernel's own lazytime as on a local "
              "file, is not met on RBD in this run. ")
    t += (f"The guest, mounted strictatime, sent ext4lazy "
          f"{med('A', 'guest_sent_sectors') * 512 / 1024:.0f} KiB in the "
          "window")
    if "C" in sides:
        t += (f"; without lazytime (C) the same guest's writes reach the "
              f"cluster as {med('C', 'window_write_ops'):.0f} write ops "
              f"({kib(med('C', 'window_bytes'))} KiB, "
              f"{avg('C', 'window_write_ops', 'window_bytes')} KiB per op: "
              "the guest sends its journal and inode-table writes in large "
              "requests, each one op)")
    paras.append(t + ".")
    a_h, a_hb = med("A", "whole_write_ops"), med("A", "whole_bytes")
    t = (f"**Whole run.** From server start to exit ext4lazy sent "
         f"{a_h:.0f} write ops ({kib(a_hb)} KiB), the kernel's lazytime "
         f"{med('B', 'whole_write_ops'):.0f} ({kib(med('B', 'whole_bytes'))} "
         "KiB)")
    if "C" in sides:
        t += (f" and strictatime without lazytime "
              f"{med('C', 'whole_write_ops'):.0f} "
              f"({kib(med('C', 'whole_bytes'))} KiB)")
    t += (f": ext4lazy {ratio(a_hb, b['whole_bytes'])} x the kernel's "
          f"lazytime in bytes, {ratio(a_h, b['whole_write_ops'])} x in "
          "write ops. ")
    after = [int(r["after_write_ops"]) for r in rows
             if r["side"] in ("A", "A2")]
    t += (f"The held timestamps reach the cluster when the server stops "
          f"(policy=atime: {med('A', 'after_write_ops'):.0f} write ops "
          f"after the window, "
          f"{avg('A', 'after_write_ops', 'after_bytes')} KiB each on "
          "average; "
          + (f"{min(after)} to {max(after)} in every run of both policies"
             if min(after) != max(after) else
             f"{min(after)} in every run of both policies")
          + "), as the kernel's lazytime writes its dirty inode "
          "tables, and their journal copies, at unmount: "
          f"{med('B', 'after_write_ops'):.0f} ops "
          f"({avg('B', 'after_write_ops', 'after_bytes')} KiB each). "
          "ext4lazy's write-back hands librbd the held blocks of a batch "
          "sorted by offset, and neighbours on the image go as one "
          "`rbd_aio_writev` (docs/design.md, the rbd backend).")
    paras.append(t)
    # The goal of the issue on store operations: over the whole run, OSD
    # write ops at most 1.0 x the kernel's lazytime, bytes at most 0.6 x.
    parts = []
    for s in ("A", "A2"):
        if s not in sides:
            continue
        ro = med(s, "whole_write_ops") / b["whole_write_ops"] \
            if b["whole_write_ops"] else float("inf")
        rb = med(s, "whole_bytes") / b["whole_bytes"] \
            if b["whole_bytes"] else float("inf")
        parts.append(
            f"{label[s]}: write ops {ro:.2f} x "
            f"({'met' if ro <= 1.0 else '**not met**'}), bytes {rb:.2f} x "
            f"({'met' if rb <= 0.6 else '**not met**'})")
    paras.append("**Goal** (whole run, against the kernel's lazytime B): "
                 "OSD write ops at most 1.0 x, bytes at most 0.6 x. "
                 + "; ".join(parts) + ".")
    paras.append(
        "Every whole run also counts the mount and unmount, the guest's "
        "journal commits and the first write to each RBD object the import "
        "left unallocated (zeroed journal blocks, for instance). librbd's "
        "own object-map updates and exclusive-lock calls are `op_rw` (last "
        "column), not write ops; their few bytes are in `op_in_bytes`. "
        f"{nruns} run(s) per side on a shared machine under TCG: the "
        "window's length moves with the load, and an inode writeback more "
        "or less can fall inside it.")
for t in paras:
    lines += ["", t]
lines += ["", "![timestamp writes on RBD](bench/bench-lazytime-rbd.png)", ""]
plt = pyplot()
if plt:
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.9))
    short = {"A": "A\next4lazy\natime", "A2": "A2\next4lazy\nlazy",
             "B": "B\nqsd\nlazytime", "C": "C\nqsd\nstrictatime"}
    colours = {"A": "#3b7dd8", "A2": "#76a7e8", "B": "#7a7a7a", "C": "#d86b3b"}
    for ax, key, title, scale in [
            (axes[0], "window_write_ops", "window: write ops", 1),
            (axes[1], "window_bytes", "window: KiB", 1024),
            (axes[2], "whole_write_ops", "whole run: write ops", 1),
            (axes[3], "whole_bytes", "whole run: KiB", 1024)]:
        vals = [med(s, key) / scale for s in sides]
        ax.bar(range(len(sides)), vals, color=[colours[s] for s in sides])
        for i, v in enumerate(vals):
            ax.text(i, v, f"{v:.0f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(sides)))
        ax.set_xticklabels([short[s] for s in sides], fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.margins(y=0.15)
    fig.suptitle("What reaches the RBD cluster (OSD op_w, op_in_bytes); "
                 "guest mounted strictatime but for B (lazytime); "
                 "qsd = qemu-storage-daemon", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "bench-lazytime-rbd.png"), dpi=100)
else:
    lines[-2] = "(plot skipped: python3-matplotlib is not installed)"
replace_section(md, "bench-lazytime-rbd", lines)
print("\n".join(lines))
PY
