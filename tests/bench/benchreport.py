# SPDX-License-Identifier: BSD-3-Clause
"""benchreport.py --- what the Python halves of the benchmarks share.

The section of docs/benchmarks.md a report owns, the BENCH_META_*
settings the shell scripts hand over, the fio cases, paired per-round
ratios and the distribution-free interval of their median, the markdown
table rows, the ratio bar plot of bench-io and bench-remote, and ext4's
crc32c.  Imported, not run: the scripts put tests/bench on sys.path.
"""

import csv
import math
import os
import statistics
import sys

CASES = ["randread", "randwrite", "seqread", "seqwrite",
         "randwrite-flush", "seqwrite-flush"]
# The flushing cases: fio --fsync=32, an NBD FLUSH after every 32 writes.
FLUSHING = ["randwrite-flush", "seqwrite-flush"]
CASE_LABEL = {
    "randread": "4 KiB random read",
    "randwrite": "4 KiB random write",
    "seqread": "1 MiB sequential read",
    "seqwrite": "1 MiB sequential write",
    "randwrite-flush": "4 KiB random write, a flush every 32",
    "seqwrite-flush": "1 MiB sequential write, a flush every 32",
}
CASE_SHORT = {
    "randread": "4 KiB rand read",
    "randwrite": "4 KiB rand write",
    "seqread": "1 MiB seq read",
    "seqwrite": "1 MiB seq write",
    "randwrite-flush": "4 KiB rand write\n+flush/32",
    "seqwrite-flush": "1 MiB seq write\n+flush/32",
}


# ---- inputs ------------------------------------------------------------


def meta(key, default="?"):
    """A setting or machine fact the shell script exported."""
    return os.environ.get("BENCH_META_" + key, default)


def load_rows(path, who):
    """The rows of a CSV as dicts; exits naming WHO when there are none."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit("%s: no rows in %s" % (who, path))
    return rows


def load_rounds(path, who):
    """fio rounds (fio_row in lib.sh): round, iops and mib_s as numbers."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            r["round"] = int(r["round"])
            r["iops"] = float(r["iops"])
            r["mib_s"] = float(r["mib_s"])
            rows.append(r)
    if not rows:
        sys.exit("%s: no rounds in %s" % (who, path))
    return rows


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, "?" when it has none."""
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f
                     if line.startswith("model name")), "?")


# ---- numbers -----------------------------------------------------------


def pair(side, base):
    """One side's fio rounds against the base side's (dicts round -> row):
    the medians of both, the ratio of the medians, the per-round ratios
    and the spread of the base side's own rounds."""
    b_iops = statistics.median(x["iops"] for x in base.values())
    e_iops = statistics.median(x["iops"] for x in side.values())
    b_vals = [x["iops"] for x in base.values()]
    paired = [side[k]["iops"] / base[k]["iops"]
              for k in sorted(side) if k in base and base[k]["iops"]]
    return {
        "b_iops": b_iops,
        "b_mib": statistics.median(x["mib_s"] for x in base.values()),
        "e_iops": e_iops,
        "e_mib": statistics.median(x["mib_s"] for x in side.values()),
        "ratio": e_iops / b_iops if b_iops else float("nan"),
        "paired": paired,
        "rmin": min(paired), "rmax": max(paired),
        "spread": (max(b_vals) - min(b_vals)) / b_iops if b_iops else 0.0,
        "n": len(paired),
    }


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


def pct(vals, q):
    """Nearest-rank percentile."""
    v = sorted(vals)
    k = max(0, min(len(v) - 1, int(-(-q * len(v) // 100)) - 1))
    return v[k]


def ratio(a, b, digits=2):
    """a / b as text, "n/a" when b is 0."""
    return f"{a / b:.{digits}f}" if b else "n/a"


def kib(x):
    return f"{x / 1024:.0f}"


# ---- text --------------------------------------------------------------


def md_row(cells):
    return "| " + " | ".join(cells) + " |"


def md_rule(left, right):
    """A table's alignment row: LEFT plain columns, RIGHT right-aligned."""
    return "|" + "|".join(["---"] * left + ["---:"] * right) + "|"


def pair_cells(r):
    """The numbers of one pair() result, as bench-io and bench-remote
    print them: both sides' IOPS and MiB/s, the ratio, the per-round
    range."""
    return ["%.0f" % r["b_iops"], "%.1f" % r["b_mib"],
            "%.0f" % r["e_iops"], "%.1f" % r["e_mib"],
            "**%.2f**" % r["ratio"],
            "%.2f–%.2f" % (r["rmin"], r["rmax"])]


def verdict(r, than, same):
    """ext4lazy slower or faster than the other side, by the ratio of
    medians; SAME when the ratio is exactly 1."""
    if r["ratio"] < 1.0:
        return ("ext4lazy is **slower**%s, ratio %.2f (%.0f%% fewer IOPS)"
                % (than, r["ratio"], 100 * (1 - r["ratio"])))
    if r["ratio"] > 1.0:
        return ("ext4lazy is faster%s, ratio %.2f (%.0f%% more IOPS)"
                % (than, r["ratio"], 100 * (r["ratio"] - 1)))
    return same


def sanity_finding(res, who):
    """The finding of a sanity run: WHO on both sides, so the distance of
    the ratios from 1.00 is the noise."""
    worst = max(abs(1 - r["ratio"]) for r in res)
    return ("This is a sanity run: %s, so every ratio would be 1.00 without "
            "noise. The medians differ from 1.00 by at most %.1f%%; single "
            "rounds ranged %.2f–%.2f. Differences of that size in a real "
            "run are noise, not the plugin." %
            (who, 100 * worst, min(r["rmin"] for r in res),
             max(r["rmax"] for r in res)))


def section_tail(table, findings, csv_rel, png_rel):
    """The end of a fio section: the table, the findings, the CSV and the
    plot (when there is one), the last line empty."""
    L = table + [""] + findings + ["", "Raw rounds: `%s`." % csv_rel]
    if png_rel:
        L += ["", "![ratio per case](%s)" % png_rel]
    return L + [""]


def print_plain(lines):
    """Markdown lines on stdout without the bold marks."""
    for line in lines:
        print(line.replace("**", ""))


def report_args(doc):
    """The arguments of bench-io-report.py and bench-remote-report.py:
    ROUNDS.csv DOC.md REPO_ROOT [PLOT.png] (DOC, the usage, otherwise),
    and whether BENCH_META_SANITY says it is a sanity run."""
    if len(sys.argv) < 4:
        sys.exit(doc)
    csv_path, md, repo = sys.argv[1:4]
    png = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None
    return csv_path, md, repo, png, meta("SANITY", "0") == "1"


def print_report(banner, table, findings):
    """The table and the findings on stdout, BANNER (a sanity run's)
    first."""
    print()
    if banner:
        print(banner)
    print_plain(table)
    print()
    print_plain(findings)


def print_written(md, name, csv_path, png, repo):
    print()
    print("written: %s (section %s), %s%s" %
          (shown(md, repo), name, shown(csv_path, repo),
           ", " + shown(png, repo) if png else ""))


# ---- files -------------------------------------------------------------


def replace_section(md, name, lines):
    """Put one benchmark's section into MD: it sits between
    "<!-- NAME:begin -->" and "<!-- NAME:end -->", replaces the one
    already there, or is appended.  LINES end with an empty one."""
    text = open(md).read() if os.path.exists(md) else "# ext4lazy benchmarks\n"
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = begin + "\n" + "\n".join(lines) + end + "\n"
    if begin in text:
        text = (text[:text.index(begin)] + section
                + text[text.index(end) + len(end) + 1:])
    else:
        text = text.rstrip("\n") + "\n\n" + section
    os.makedirs(os.path.dirname(os.path.abspath(md)), exist_ok=True)
    with open(md, "w") as f:
        f.write(text)


def shown(path, repo):
    """PATH relative to the repository when it is inside it."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path, os.path.abspath(repo))
    return path if rel.startswith("..") else rel


def from_doc(path, doc):
    """PATH relative to the directory of DOC (for links in it)."""
    return os.path.relpath(os.path.abspath(path),
                           os.path.dirname(os.path.abspath(doc)))


# ---- plots -------------------------------------------------------------


def pyplot():
    """matplotlib.pyplot on the Agg backend, None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def ratio_bars(plt, out, cases, series, ylabel, title):
    """One group of bars per case, one bar per series: the median ratio
    with a whisker from the lowest to the highest per-round ratio.
    SERIES: (label, [(case index, ratio, lowest, highest), ...])."""
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    width = 0.8 / len(series)
    for i, (label, bars) in enumerate(series):
        xs = [j - 0.4 + width * (i + 0.5) for j, _, _, _ in bars]
        meds = [m for _, m, _, _ in bars]
        lo = [max(0.0, m - a) for _, m, a, _ in bars]
        hi = [max(0.0, b - m) for _, m, _, b in bars]
        drawn = ax.bar(xs, meds, width, yerr=[lo, hi], capsize=3, label=label)
        ax.bar_label(drawn, fmt="%.2f", fontsize=8, padding=2)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([CASE_SHORT[c] for c in cases])
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(0, max(1.2, ax.get_ylim()[1] * 1.08))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08),
              ncol=len(series), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out)


# ---- ext4 --------------------------------------------------------------

_CRC_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(crc, data):
    """ext4's ext4_chksum(): the raw CRC register, seed in, no final xor."""
    t = _CRC_TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc
