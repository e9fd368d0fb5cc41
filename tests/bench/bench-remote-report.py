#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench-remote-report.py --- summary and plot of a bench-remote.sh run.

Reads the raw rounds (CSV written by bench-remote.sh), prints the table of
medians and ratios, draws the ratios (when PLOT.png is given and
matplotlib is installed) and (re)writes the bench-remote section of the
benchmarks markdown file through docsection.py.

Usage: bench-remote-report.py ROUNDS.csv DOC.md REPO_ROOT [PLOT.png]
Machine and settings come from BENCH_META_* environment variables.
"""

import csv
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docsection import replace_section  # noqa: E402

NAME = os.environ.get("BENCH_META_NAME", "bench-remote")
CASES = ["randread", "randwrite", "seqread", "seqwrite"]
CASE_LABEL = {
    "randread": "4 KiB random read",
    "randwrite": "4 KiB random write",
    "seqread": "1 MiB sequential read",
    "seqwrite": "1 MiB sequential write",
}
SHORT = {
    "randread": "4 KiB rand read",
    "randwrite": "4 KiB rand write",
    "seqread": "1 MiB seq read",
    "seqwrite": "1 MiB seq write",
}
COMPARISONS = ["rbd", "nbd", "nbd-delay"]
CMP_LABEL = {
    "rbd": "RBD: ext4lazy rbd= / qemu-storage-daemon",
    "nbd": "NBD: ext4lazy nbd= / nbdkit nbd plugin",
    "nbd-delay": "NBD, delayed remote: ext4lazy nbd= / nbdkit nbd plugin",
}
OTHER = {"rbd": "qemu-storage-daemon", "nbd": "nbd plugin",
         "nbd-delay": "nbd plugin"}


def meta(key, default="?"):
    return os.environ.get("BENCH_META_" + key, default)


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            r["round"] = int(r["round"])
            r["iops"] = float(r["iops"])
            r["mib_s"] = float(r["mib_s"])
            rows.append(r)
    if not rows:
        sys.exit("bench-remote-report: no rounds in " + path)
    return rows


def median_ci(xs):
    """A distribution-free confidence interval for the median of xs, from
    the order statistics: [x(k), x(n+1-k)] with the largest k whose two
    binomial tails together stay within 5%.  Returns (low, high,
    coverage); with fewer than 6 values even the whole range covers less
    than 95%, and the range is returned with its coverage."""
    xs = sorted(xs)
    n = len(xs)

    def below(k):  # P(fewer than k of n values below the median)
        return sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k < n // 2 and 2 * below(k + 1) <= 0.05:
        k += 1
    return xs[k - 1], xs[n - k], 1 - 2 * below(k)


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
            o_iops = statistics.median(x["iops"] for x in other.values())
            e_iops = statistics.median(x["iops"] for x in lazy.values())
            o_vals = [x["iops"] for x in other.values()]
            paired = [lazy[k]["iops"] / other[k]["iops"]
                      for k in sorted(lazy) if k in other and other[k]["iops"]]
            lo, hi, cover = median_ci(paired)
            out.append({
                "cmp": cmp, "case": c,
                "pmed": statistics.median(paired),
                "ci_lo": lo, "ci_hi": hi, "cover": cover,
                "o_iops": o_iops,
                "o_mib": statistics.median(x["mib_s"] for x in other.values()),
                "e_iops": e_iops,
                "e_mib": statistics.median(x["mib_s"] for x in lazy.values()),
                "ratio": e_iops / o_iops if o_iops else float("nan"),
                "paired": paired,
                "rmin": min(paired), "rmax": max(paired),
                "o_spread": (max(o_vals) - min(o_vals)) / o_iops
                if o_iops else 0.0,
                "n": len(paired),
            })
    return out


def table(res, sanity):
    right = "same again" if sanity else "ext4lazy"
    head = ["comparison", "case", "other IOPS", "other MiB/s",
            right + " IOPS", right + " MiB/s", "ratio", "per-round ratios",
            "paired median [CI]", "other spread"]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] * 2 + ["---:"] * 8) + "|"]
    for r in res:
        lines.append("| " + " | ".join([
            CMP_LABEL[r["cmp"]].split(":")[0] + " (" + OTHER[r["cmp"]] + ")",
            CASE_LABEL[r["case"]],
            "%.0f" % r["o_iops"], "%.1f" % r["o_mib"],
            "%.0f" % r["e_iops"], "%.1f" % r["e_mib"],
            "**%.2f**" % r["ratio"],
            "%.2f–%.2f" % (r["rmin"], r["rmax"]),
            "%.2f [%.2f–%.2f]" % (r["pmed"], r["ci_lo"], r["ci_hi"]),
            "%.0f%%" % (100 * r["o_spread"]),
        ]) + " |")
    return lines


def findings(res, sanity):
    if sanity:
        worst = max(abs(1 - r["ratio"]) for r in res)
        return ["This is a sanity run: the same server on both sides of "
                "each comparison, so every ratio would be 1.00 without "
                "noise. The medians differ from 1.00 by at most %.1f%%; "
                "single rounds ranged %.2f–%.2f. Differences of that size "
                "in a real run are noise, not the plugin." %
                (100 * worst, min(r["rmin"] for r in res),
                 max(r["rmax"] for r in res))]
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
            what = CASE_LABEL[r["case"]]
            if r["ratio"] < 1.0:
                s = ("%s: ext4lazy is **slower**, ratio %.2f (%.0f%% fewer "
                     "IOPS)" % (what, r["ratio"], 100 * (1 - r["ratio"])))
            elif r["ratio"] > 1.0:
                s = ("%s: ext4lazy is faster, ratio %.2f (%.0f%% more IOPS)"
                     % (what, r["ratio"], 100 * (r["ratio"] - 1)))
            else:
                s = "%s: as fast, ratio 1.00" % what
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
        out.append("")
    return out[:-1] if out and out[-1] == "" else out


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
    if "nbd-delay" in cmps and "rbd" not in cmps:
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
          "flushed: they measure how fast writes are acknowledged.", ""]
    L += table(res, sanity)
    L += [""] + findings(res, sanity) + [""]
    L.append("Raw rounds: `%s`." % csv_rel)
    if png_rel:
        L += ["", "![ratio per case](%s)" % png_rel]
    return L + [""]


def plot(res, out, sanity):
    """Bars of the median ratio, whiskers from the lowest to the highest
    per-round ratio.  False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cmps = [c for c in COMPARISONS if any(r["cmp"] == c for r in res)]
    cases = [c for c in CASES if any(r["case"] == c for r in res)]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    width = 0.8 / len(cmps)
    for i, cmp in enumerate(cmps):
        xs, meds, lo, hi = [], [], [], []
        for j, c in enumerate(cases):
            r = [x for x in res if x["cmp"] == cmp and x["case"] == c]
            if not r:
                continue
            r = r[0]
            xs.append(j - 0.4 + width * (i + 0.5))
            meds.append(r["ratio"])
            lo.append(max(0.0, r["ratio"] - r["rmin"]))
            hi.append(max(0.0, r["rmax"] - r["ratio"]))
        bars = ax.bar(xs, meds, width, yerr=[lo, hi], capsize=3,
                      label=CMP_LABEL[cmp])
        ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([SHORT[c] for c in cases])
    if sanity:
        ax.set_ylabel("same server / same server (IOPS)")
        ax.set_title("bench-remote sanity run: the other side twice")
    else:
        ax.set_ylabel("ext4lazy / other (IOPS)")
        ax.set_title("ext4lazy in front of RBD and NBD (median, whiskers: "
                     "per-round range)")
    ax.set_ylim(0, max(1.2, ax.get_ylim()[1] * 1.08))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08),
              ncol=len(cmps), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out)
    return True


def shown(path, repo):
    """PATH relative to the repository when it is inside it."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path, os.path.abspath(repo))
    return path if rel.startswith("..") else rel


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    csv_path, doc, repo = sys.argv[1:4]
    png = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None
    sanity = meta("SANITY", "0") == "1"
    res = summarise(load(csv_path))
    if png and not plot(res, png, sanity):
        print("bench-remote: no plot: python3-matplotlib is not installed "
              "(apt-get install python3-matplotlib)", file=sys.stderr)
        png = None
    docdir = os.path.dirname(os.path.abspath(doc))
    csv_rel = os.path.relpath(os.path.abspath(csv_path), docdir)
    png_rel = os.path.relpath(os.path.abspath(png), docdir) if png else None

    print()
    if sanity:
        print("SANITY RUN: the other side on both sides (not ext4lazy)")
    for line in table(res, sanity):
        print(line.replace("**", ""))
    print()
    for line in findings(res, sanity):
        print(line.replace("**", ""))
    os.makedirs(docdir, exist_ok=True)
    replace_section(doc, NAME, section(res, sanity, csv_rel, png_rel))
    print()
    print("written: %s (section %s), %s%s" %
          (shown(doc, repo), NAME, shown(csv_path, repo),
           ", " + shown(png, repo) if png else ""))


if __name__ == "__main__":
    main()
