#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench-io-plot.py --- bar plot of the ext4lazy / file ratio per case.

Usage: bench-io-plot.py ROUNDS.csv OUT.png [SANITY]
One group of bars per case, one bar per ext4lazy variant: the median ratio,
with a whisker from the lowest to the highest per-round ratio. Exits 77 when
matplotlib (Debian: python3-matplotlib) is not installed.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchreport import (CASES, load_rounds, pair, pyplot,  # noqa: E402
                         ratio_bars)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, out = sys.argv[1:3]
    sanity = len(sys.argv) > 3 and sys.argv[3] == "1"
    plt = pyplot()
    if plt is None:
        sys.exit(77)
    data = {}
    params = {}
    for r in load_rounds(src, "bench-io-plot"):
        data.setdefault((r["case"], r["side"]), {})[r["round"]] = r
        params[r["side"]] = r["params"]
    cases = [c for c in CASES if (c, "file") in data]
    variants = [s for s in params if s != "file"]
    if not cases or not variants:
        sys.exit("bench-io-plot: nothing to plot in " + src)
    series = []
    for v in variants:
        bars = []
        for j, c in enumerate(cases):
            if (c, v) in data:
                p = pair(data[(c, v)], data[(c, "file")])
                bars.append((j, p["ratio"], p["rmin"], p["rmax"]))
        series.append((params[v], bars))
    if sanity:
        ratio_bars(plt, out, cases, series, "file / file (IOPS)",
                   "bench-io sanity run: file plugin on both sides")
    else:
        ratio_bars(plt, out, cases, series, "ext4lazy / file (IOPS)",
                   "ext4lazy vs nbdkit file plugin (median, whiskers: "
                   "per-round range)")


if __name__ == "__main__":
    main()
