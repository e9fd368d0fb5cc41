#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench-io-report.py --- summary of a bench-io.sh run.

Reads the raw rounds (CSV written by bench-io.sh), prints the table of
medians and ratios to stdout, and (re)writes the bench-io section of the
benchmarks markdown file, leaving any other section of that file alone.

Usage: bench-io-report.py ROUNDS.csv DOC.md REPO_ROOT [PLOT.png]
Machine and settings come from BENCH_META_* environment variables.
"""

import csv
import os
import statistics
import sys

BEGIN = "<!-- bench-io:begin -->"
END = "<!-- bench-io:end -->"
CASES = ["randread", "randwrite", "seqread", "seqwrite"]
CASE_LABEL = {
    "randread": "4 KiB random read",
    "randwrite": "4 KiB random write",
    "seqread": "1 MiB sequential read",
    "seqwrite": "1 MiB sequential write",
}


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
        sys.exit("bench-io-report: no rounds in " + path)
    return rows


def summarise(rows):
    """One result per (case, variant): medians and paired per-round ratios."""
    by = {}
    params = {}
    for r in rows:
        by.setdefault((r["case"], r["side"]), {})[r["round"]] = r
        params[r["side"]] = r["params"]
    cases = [c for c in CASES if any(k[0] == c for k in by)]
    variants = []
    for r in rows:
        if r["side"] != "file" and r["side"] not in variants:
            variants.append(r["side"])
    out = []
    for c in cases:
        base = by.get((c, "file"), {})
        f_iops = statistics.median(x["iops"] for x in base.values())
        f_mib = statistics.median(x["mib_s"] for x in base.values())
        f_vals = [x["iops"] for x in base.values()]
        f_spread = (max(f_vals) - min(f_vals)) / f_iops if f_iops else 0.0
        for v in variants:
            side = by.get((c, v), {})
            if not side:
                continue
            e_iops = statistics.median(x["iops"] for x in side.values())
            e_mib = statistics.median(x["mib_s"] for x in side.values())
            paired = [side[k]["iops"] / base[k]["iops"]
                      for k in sorted(side) if k in base and base[k]["iops"]]
            out.append({
                "case": c, "variant": v, "params": params[v],
                "f_iops": f_iops, "f_mib": f_mib,
                "e_iops": e_iops, "e_mib": e_mib,
                "ratio": e_iops / f_iops if f_iops else float("nan"),
                "rmin": min(paired), "rmax": max(paired),
                "f_spread": f_spread, "n": len(paired),
            })
    return out


def table(res, sanity):
    right = "file (2nd)" if sanity else "ext4lazy"
    head = ["case", "variant", "file IOPS", "file MiB/s", right + " IOPS",
            right + " MiB/s", "ratio", "per-round ratios", "file spread"]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] * 2 + ["---:"] * 7) + "|"]
    for r in res:
        lines.append("| " + " | ".join([
            CASE_LABEL.get(r["case"], r["case"]),
            r["params"],
            "%.0f" % r["f_iops"], "%.1f" % r["f_mib"],
            "%.0f" % r["e_iops"], "%.1f" % r["e_mib"],
            "**%.2f**" % r["ratio"],
            "%.2f–%.2f" % (r["rmin"], r["rmax"]),
            "%.0f%%" % (100 * r["f_spread"]),
        ]) + " |")
    return lines


def findings(res, sanity):
    out = []
    if sanity:
        worst = max(abs(1 - r["ratio"]) for r in res)
        lo = min(r["rmin"] for r in res)
        hi = max(r["rmax"] for r in res)
        out.append("This is a sanity run: the file plugin is on both sides, "
                   "so every ratio would be 1.00 without noise. The medians "
                   "differ from 1.00 by at most %.1f%%; single rounds ranged "
                   "%.2f–%.2f. Differences of that size in a real run are "
                   "noise, not the plugin." % (100 * worst, lo, hi))
        return out
    for r in res:
        what = "%s with %s" % (CASE_LABEL.get(r["case"], r["case"]),
                                r["params"])
        noisy = r["rmin"] <= 1.0 <= r["rmax"]
        if r["ratio"] < 1.0:
            s = ("%s: ext4lazy is **slower** than the file plugin, ratio "
                 "%.2f (%.0f%% fewer IOPS)" %
                 (what, r["ratio"], 100 * (1 - r["ratio"])))
        elif r["ratio"] > 1.0:
            s = ("%s: ext4lazy is faster than the file plugin, ratio "
                 "%.2f (%.0f%% more IOPS)" %
                 (what, r["ratio"], 100 * (r["ratio"] - 1)))
        else:
            s = "%s: ext4lazy is as fast as the file plugin, ratio 1.00" % what
        if noisy:
            s += "; single rounds fall on both sides of 1.00, so the " \
                 "difference is within the round-to-round noise"
        out.append("- " + s + ".")
    below = [r for r in res if r["ratio"] < 1.0]
    if below:
        out.insert(0, "%d of %d rows have a ratio below 1.00." %
                   (len(below), len(res)))
    else:
        out.insert(0, "No row has a ratio below 1.00.")
    return out


def section(res, sanity, csv_rel, png_rel):
    title = "## I/O throughput: ext4lazy vs the nbdkit file plugin"
    if sanity:
        title += " — SANITY RUN (file plugin on both sides, not ext4lazy)"
    L = [BEGIN, title, "",
         "Generated by `tests/bench/bench-io.sh` on %s; do not edit by "
         "hand, rerun the script (see `tests/bench/README.md`)." %
         meta("DATE"), "",
         "Machine: %s CPU(s), %s; kernel %s; backing filesystem %s; "
         "%s; %s." % (meta("NPROC"), meta("CPU"), meta("KERNEL"),
                      meta("FS"), meta("NBDKIT"), meta("FIO")), "",
         "Method: fio `ioengine=nbd` over a Unix socket to `nbdkit -t %s`, "
         "one job, on the same %s ext4 image (every block allocated with "
         "random data) for both plugins; %s s measured after %s s of "
         "warm-up per run; %s rounds, the sides' order rotated each round; "
         "random cases iodepth %s, sequential cases iodepth %s; I/O from "
         "offset %s%s to the end of the image. Page cache: %s. The image "
         "is restored from a pristine copy after every write run."
         % (meta("THREADS"), meta("SIZE"), meta("RUNTIME"), meta("RAMP"),
            meta("ROUNDS"), meta("RAND_IODEPTH"), meta("SEQ_IODEPTH"),
            meta("OFFSET"),
            " (just past the superblock, group descriptors, bitmaps and "
            "inode tables at the head of the filesystem; the journal and "
            "the data blocks are in the region)"
            if meta("OFFSET_AUTO") == "auto" else "",
            "caches synced and dropped before every run (cold)"
            if meta("CACHE") == "drop" else
            "the whole image read into the page cache before every run "
            "(warm, the same for both sides)"), "",
         "Columns: medians over the rounds; *ratio* = median ext4lazy IOPS "
         "/ median file IOPS (above 1.00: ext4lazy faster); *per-round "
         "ratios* = lowest and highest ratio of the two sides within one "
         "round; *file spread* = (max − min) / median of the file plugin's "
         "own rounds, a measure of the noise. Writes are not flushed: "
         "they measure how fast writes are acknowledged. The nbdkit file "
         "plugin has no O_DIRECT mode, so the `direct=true` row compares "
         "ext4lazy bypassing the page cache with the buffered file plugin.",
         ""]
    L += table(res, sanity)
    L += [""] + findings(res, sanity) + [""]
    L.append("Raw rounds: `%s`." % csv_rel)
    if png_rel:
        L += ["", "![ratio per case](%s)" % png_rel]
    L.append(END)
    return "\n".join(L) + "\n"


def write_doc(doc, text):
    if os.path.exists(doc):
        with open(doc) as f:
            old = f.read()
    else:
        old = "# ext4lazy benchmarks\n\n"
    if BEGIN in old and END in old:
        pre = old[:old.index(BEGIN)]
        post = old[old.index(END) + len(END):].lstrip("\n")
        new = pre + text + ("\n" + post if post else "")
    else:
        new = old.rstrip("\n") + "\n\n" + text
    os.makedirs(os.path.dirname(os.path.abspath(doc)), exist_ok=True)
    with open(doc, "w") as f:
        f.write(new)


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
    docdir = os.path.dirname(os.path.abspath(doc))
    csv_rel = os.path.relpath(os.path.abspath(csv_path), docdir)
    png_rel = os.path.relpath(os.path.abspath(png), docdir) if png else None

    print()
    if sanity:
        print("SANITY RUN: the file plugin on both sides (not ext4lazy)")
    for line in table(res, sanity):
        print(line.replace("**", ""))
    print()
    for line in findings(res, sanity):
        print(line.replace("**", ""))
    write_doc(doc, section(res, sanity, csv_rel, png_rel))
    print()
    print("written: %s (section bench-io), %s%s" %
          (shown(doc, repo), shown(csv_path, repo),
           ", " + shown(png, repo) if png else ""))


if __name__ == "__main__":
    main()
