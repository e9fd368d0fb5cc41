#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench-remote-report.py --- summary and plot of a bench-remote.sh run.

Reads the raw rounds (CSV written by bench-remote.sh), prints the table of
medians and ratios, draws the ratios (when PLOT.png is given and
matplotlib is installed) and (re)writes the bench-remote section of the
benchmarks markdown file (benchreport.replace_section).

Usage: bench-remote-report.py ROUNDS.csv DOC.md REPO_ROOT [PLOT.png]
Machine and settings come from BENCH_META_* environment variables.
"""

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchreport import (CASES, CASE_LABEL, FLUSHING,  # noqa: E402
                         from_doc,
                         load_rounds, md_row, md_rule, median_ci, meta,
                         pair, pair_cells, print_report, print_written,
                         pyplot, ratio_bars, replace_section, report_args,
                         sanity_finding, section_tail, verdict)

NAME = os.environ.get("BENCH_META_NAME", "bench-remote")
COMPARISONS = ["rbd", "nbd", "nbd-delay"]
CMP_LABEL = {
    "rbd": "RBD: ext4lazy rbd= / qemu-storage-daemon",
    "nbd": "NBD: ext4lazy nbd= / nbdkit nbd plugin",
    "nbd-delay": "NBD, delayed remote: ext4lazy nbd= / nbdkit nbd plugin",
}
OTHER = {"rbd": "qemu-storage-daemon", "nbd": "nbd plugin",
         "nbd-delay": "nbd plugin"}


def summarise(rows):
    """One result per (comparison, case): medians, paired ratios."""
    by = {}
    for r in rows:
        by.setdefault((r["comparison"], r["case"], r["role"]),
                      {})[r["round"]] = r
    out = []
    for cmp in COMPARISONS:
        for c in CASES:
            lazy = by.get((cmp, c, "ext4lazy"), {})
            other = by.get((cmp, c, "other"), {})
            if not lazy or not other:
                continue
            r = pair(lazy, other)
            lo, hi, cover = median_ci(r["paired"])
            out.append(dict(r, cmp=cmp, case=c,
                            pmed=statistics.median(r["paired"]),
                            ci_lo=lo, ci_hi=hi, cover=cover))
    return out


def table(res, sanity):
    right = "same again" if sanity else "ext4lazy"
    head = ["comparison", "case", "other IOPS", "other MiB/s",
            right + " IOPS", right + " MiB/s", "ratio", "per-round ratios",
            "paired median [CI]", "other spread"]
    lines = [md_row(head), md_rule(2, 8)]
    for r in res:
        lines.append(md_row(
            [CMP_LABEL[r["cmp"]].split(":")[0] + " (" + OTHER[r["cmp"]] + ")",
             CASE_LABEL[r["case"]]]
            + pair_cells(r)
            + ["%.2f [%.2f–%.2f]" % (r["pmed"], r["ci_lo"], r["ci_hi"]),
               "%.0f%%" % (100 * r["spread"])]))
    return lines


def findings(res, sanity):
    if sanity:
        return [sanity_finding(
            res, "the same server on both sides of each comparison")]
    out = []
    for cmp in COMPARISONS:
        rs = [r for r in res if r["cmp"] == cmp]
        if not rs:
            continue
        met = [r for r in rs if r["ratio"] >= 1.0]
        below = [r for r in rs if r["ci_hi"] < 1.0]
        out.append("%s: %d of %d cases at or above the goal of 1.00; %d "
                   "below it beyond the noise (the confidence interval of "
                   "the paired median below 1.00)." %
                   (CMP_LABEL[cmp], len(met), len(rs), len(below)))
        for r in rs:
            s = "%s: %s" % (CASE_LABEL[r["case"]],
                            verdict(r, "", "as fast, ratio 1.00"))
            if r["rmax"] < 1.0:
                s += "; slower in every round"
            elif r["rmin"] > 1.0:
                s += "; faster in every round"
            elif r["ci_lo"] <= 1.0 <= r["ci_hi"]:
                s += ("; the paired median's %.0f%% interval (%.2f–%.2f) "
                      "holds 1.00: within the noise of %d rounds"
                      % (100 * r["cover"], r["ci_lo"], r["ci_hi"], r["n"]))
            else:
                s += ("; the paired median's %.0f%% interval (%.2f–%.2f) "
                      "lies %s 1.00, though single rounds fall on both "
                      "sides" % (100 * r["cover"], r["ci_lo"], r["ci_hi"],
                                 "below" if r["ci_hi"] < 1.0 else "above"))
            out.append("- " + s + ".")
        out += flush_goal(rs)
        out.append("")
    return out[:-1] if out and out[-1] == "" else out


def flush_goal(rs):
    """The goal of the flushing cases of an nbd comparison: 0.95 of the
    nbd plugin or more, the paired median's interval included."""
    fl = [r for r in rs if r["case"] in FLUSHING and r["cmp"] != "rbd"]
    if not fl:
        return []
    met = [r for r in fl if r["ci_lo"] >= 0.95]
    return ["- Flushing cases, goal 0.95 with the interval's lower end: "
            "%d of %d met (%s)." % (
                len(met), len(fl), "; ".join(
                    "%s %.2f [%.2f–%.2f]" % (CASE_LABEL[r["case"]], r["pmed"],
                                             r["ci_lo"], r["ci_hi"])
                    for r in fl))]


def method(res, sanity):
    cache = ("`rbd_cache=false`: librbd caches nothing, every write is "
             "acknowledged once the OSD has it; qemu-storage-daemon runs "
             "with `cache.direct=on`, which qemu turns into "
             "`rbd_cache=false` as well"
             if meta("RBD_CACHE") == "false" else
             "`rbd_cache=true` (librbd's write-back cache, write-through "
             "until the first flush); qemu-storage-daemon with "
             "`cache.direct=off`, which qemu turns into `rbd_cache=true`")
    page = ("the image file read into the page cache before every run "
            "(warm, the same for both sides)" if meta("CACHE") == "warm"
            else "caches synced and dropped before every run (cold)")
    lazy = meta("LAZY_PARAMS", "")
    lazy = " " + lazy if lazy and not sanity else ""
    L = [
        "Method: fio `ioengine=nbd`, one job on one connection over a Unix "
        "socket; %s s measured after %s s of warm-up per run; %s rounds, "
        "ext4lazy first in odd rounds and second in even ones; random cases "
        "iodepth %s, sequential cases iodepth %s; I/O from offset %s%s to "
        "the end of the same %s ext4 image (every block random data); "
        "the region holds the ext4 journal (%s), which the write cases "
        "overwrite with random bytes, the sequential one on every pass. "
        "Every nbdkit runs with `-t %s`. %s"
        % (meta("RUNTIME"), meta("RAMP"), meta("ROUNDS"),
           meta("RAND_IODEPTH"), meta("SEQ_IODEPTH"), meta("OFFSET"),
           " (just past the superblock, group descriptors, bitmaps and "
           "inode tables at the head of the filesystem)"
           if meta("OFFSET_AUTO") == "auto" else "",
           meta("SIZE"), meta("JOURNAL"), meta("THREADS"),
           "The image is restored after every write run, so every run "
           "starts from the same bytes." if meta("RESTORE") == "1" else
           "The image is not restored between runs."),
    ]
    cmps = set(r["cmp"] for r in res)
    L.append("")
    if "rbd" in cmps:
        L.append(
            "- **RBD**: `nbdkit ext4lazy rbd=rbd/bench ceph-conf=...%s` "
            "against `qemu-storage-daemon --blockdev driver=rbd,...,"
            "cache.direct=%s --nbd-server addr.type=unix,... --export "
            "type=nbd,...`, both on the same RBD image (`rbd import` of the "
            "image%s) of a throwaway "
            "single-node Ceph cluster (`tests/integration/cephlib.py`: %s, "
            "auth none, on 127.0.0.1), %s. Both read the same `ceph.conf`, "
            "whose `[client]` section sets %s."
            % (lazy, "on" if meta("RBD_CACHE") == "false" else "off",
               "; restored with `rbd rm` and `rbd import`"
               if meta("RESTORE") == "1" else "",
               meta("OSD"), meta("CEPH"), cache))
    if "nbd" in cmps:
        L.append(
            "- **NBD**: `nbdkit ext4lazy nbd=nbd+unix:///?socket=R%s` "
            "against `nbdkit nbd socket=R`, where R is a fresh `nbdkit "
            "file` on a copy of the image on %s, started for each run; page "
            "cache: %s." % (lazy, meta("FS"), page))
    if "nbd-delay" in cmps:
        L.append(
            "- **NBD, delayed remote**: `nbdkit ext4lazy "
            "nbd=nbd+unix:///?socket=R%s` against `nbdkit nbd socket=R`, "
            "where R is a fresh `nbdkit --filter=delay file` on a copy of "
            "the image on %s with `%s`, started for each run: every read "
            "and write waits that long in the remote before it is served, "
            "as over a network link; flushes are not delayed (nbdkit %s's "
            "delay filter has no `delay-flush`), they cost the file "
            "plugin's `fdatasync`; page cache: %s."
            % (lazy, meta("FS"), meta("REMOTE_DELAY"),
               meta("NBDKIT").replace("nbdkit ", ""), page))
    if sanity:
        L += ["", "SANITY RUN: the other side (qemu-storage-daemon, the nbd "
              "plugin) on both sides of each comparison."]
    return L


def section(res, sanity, csv_rel, png_rel):
    cmps = set(r["cmp"] for r in res)
    if all(r["case"] in FLUSHING for r in res) and "rbd" not in cmps:
        title = ("### A flushing guest: ext4lazy nbd= against the nbdkit "
                 "nbd plugin, a flush every 32 writes"
                 + (" (the remote with and without the delay filter)"
                    if len(cmps) > 1 else ""))
    elif "nbd-delay" in cmps and "rbd" not in cmps:
        title = ("### A remote with a round-trip cost: ext4lazy nbd= "
                 "against the nbdkit nbd plugin, the remote behind "
                 "nbdkit's delay filter"
                 + (" (and without it, in the same run)"
                    if "nbd" in cmps else ""))
    else:
        title = ("## Remote stores: ext4lazy rbd= and nbd= against "
                 "qemu-storage-daemon and the nbdkit nbd plugin")
    if sanity:
        title += " — SANITY RUN (not ext4lazy)"
    note = meta("MACHINE_NOTE", "")
    L = [title, "",
         "Generated by `tests/bench/bench-remote.sh` on %s; do not edit by "
         "hand, rerun the script (see `tests/bench/README.md`)." %
         meta("DATE"), "",
         "Machine: %s CPU(s), %s; kernel %s; %s; %s; %s; %s.%s" %
         (meta("NPROC"), meta("CPU"), meta("KERNEL"), meta("NBDKIT"),
          meta("QSD"), meta("LIBNBD"), meta("FIO"),
          " " + note[0].upper() + note[1:].rstrip(".") + "." if note else ""),
         ""]
    L += method(res, sanity)
    L += ["",
          "Columns: medians over the rounds; *other* is qemu-storage-daemon "
          "(RBD) or the nbd plugin (NBD); *ratio* = median ext4lazy IOPS / "
          "median other IOPS (above 1.00: ext4lazy faster); *per-round "
          "ratios* = lowest and highest ratio of the two sides within one "
          "round; *paired median [CI]* = the median of those per-round "
          "ratios and its distribution-free confidence interval (order "
          "statistics; 95% or more from 6 rounds on, the whole range "
          "below that); *other spread* = (max − min) / median of the other "
          "side's own rounds, a measure of the noise. Writes are not "
          "flushed, except in the cases marked *a flush every 32* (fio "
          "`--fsync=32`; fio 3.33's nbd engine then sends an NBD FLUSH "
          "after 32 writes at most, and more often at a queue depth "
          "above 1: about one per 3.5 writes at 4 KiB and queue depth "
          "16, one per 10 at 1 MiB and queue depth 4, counted with "
          "nbdkit's stats filter; the nbd= side's replay log empties on "
          "each): the others measure how fast writes are acknowledged.",
          ""]
    return L + section_tail(table(res, sanity), findings(res, sanity),
                            csv_rel, png_rel)


def plot(res, out, sanity):
    """Bars of the median ratio, whiskers from the lowest to the highest
    per-round ratio.  False when matplotlib is not installed."""
    plt = pyplot()
    if plt is None:
        return False
    cmps = [c for c in COMPARISONS if any(r["cmp"] == c for r in res)]
    cases = [c for c in CASES if any(r["case"] == c for r in res)]
    series = []
    for cmp in cmps:
        bars = []
        for j, c in enumerate(cases):
            r = [x for x in res if x["cmp"] == cmp and x["case"] == c]
            if r:
                bars.append((j, r[0]["ratio"], r[0]["rmin"], r[0]["rmax"]))
        series.append((CMP_LABEL[cmp], bars))
    if sanity:
        ratio_bars(plt, out, cases, series,
                   "same server / same server (IOPS)",
                   "bench-remote sanity run: the other side twice")
    else:
        ratio_bars(plt, out, cases, series, "ext4lazy / other (IOPS)",
                   "ext4lazy in front of RBD and NBD (median, whiskers: "
                   "per-round range)")
    return True


def main():
    csv_path, doc, repo, png, sanity = report_args(__doc__)
    res = summarise(load_rounds(csv_path, "bench-remote-report"))
    if png and not plot(res, png, sanity):
        print("bench-remote: no plot: python3-matplotlib is not installed "
              "(apt-get install python3-matplotlib)", file=sys.stderr)
        png = None
    print_report(sanity and "SANITY RUN: the other side on both sides "
                 "(not ext4lazy)", table(res, sanity), findings(res, sanity))
    png_rel = from_doc(png, doc) if png else None
    replace_section(doc, NAME, section(
        res, sanity, from_doc(csv_path, doc), png_rel))
    print_written(doc, NAME, csv_path, png, repo)


if __name__ == "__main__":
    main()
