#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench-io-plot.py --- bar plot of the ext4lazy / file ratio per case.

Usage: bench-io-plot.py ROUNDS.csv OUT.png [SANITY]
One group of bars per case, one bar per ext4lazy variant: the median ratio,
with a whisker from the lowest to the highest per-round ratio. Exits 77 when
matplotlib (Debian: python3-matplotlib) is not installed.
"""

import csv
import statistics
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(77)

CASES = ["randread", "randwrite", "seqread", "seqwrite"]
LABEL = {
    "randread": "4 KiB rand read",
    "randwrite": "4 KiB rand write",
    "seqread": "1 MiB seq read",
    "seqwrite": "1 MiB seq write",
}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, out = sys.argv[1:3]
    sanity = len(sys.argv) > 3 and sys.argv[3] == "1"
    data = {}
    params = {}
    with open(src, newline="") as f:
        for r in csv.DictReader(f):
            data.setdefault((r["case"], r["side"]), {})[int(r["round"])] = \
                float(r["iops"])
            params[r["side"]] = r["params"]
    cases = [c for c in CASES if (c, "file") in data]
    variants = [s for s in params if s != "file"]
    if not cases or not variants:
        sys.exit("bench-io-plot: nothing to plot in " + src)

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    width = 0.8 / len(variants)
    for i, v in enumerate(variants):
        meds, lo, hi, xs = [], [], [], []
        for j, c in enumerate(cases):
            base = data[(c, "file")]
            side = data.get((c, v))
            if not side:
                continue
            m = statistics.median(side.values()) / \
                statistics.median(base.values())
            paired = [side[k] / base[k] for k in side if k in base]
            meds.append(m)
            lo.append(max(0.0, m - min(paired)))
            hi.append(max(0.0, max(paired) - m))
            xs.append(j - 0.4 + width * (i + 0.5))
        bars = ax.bar(xs, meds, width, yerr=[lo, hi], capsize=3,
                      label=params[v])
        ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([LABEL[c] for c in cases])
    if sanity:
        ax.set_ylabel("file / file (IOPS)")
        ax.set_title("bench-io sanity run: file plugin on both sides")
    else:
        ax.set_ylabel("ext4lazy / file (IOPS)")
        ax.set_title("ext4lazy vs nbdkit file plugin (median, whiskers: "
                     "per-round range)")
    top = max(1.2, ax.get_ylim()[1] * 1.08)
    ax.set_ylim(0, top)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08),
              ncol=len(variants), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out)


if __name__ == "__main__":
    main()
