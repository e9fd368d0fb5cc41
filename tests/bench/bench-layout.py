#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench-layout.py --- the measuring half of bench-layout.sh.

  bench-layout.py run IMAGE LABEL SERVER ROUND POSITION WRITES SOCK LOG CSV
      SERVER is "file" or the path of the ext4lazy plugin.  Starts
      `nbdkit -f -U SOCK` on IMAGE, times the start-up (launch to the
      first NBD connection that completes), then WRITES times a
      group-descriptor write and WRITES times a superblock write, each
      timed together with the 4 KiB data write that follows it, reads
      the server's VmRSS and VmHWM, restores the two metadata blocks,
      stops the server and appends one CSV row per timed pair to CSV.

  bench-layout.py report CSV DOC PNG|- [PLOT_NOTE]
      Prints the table, (re)writes the "bench-layout" section of DOC and,
      unless PNG is "-", draws the plot (exit status 77 from the plot
      alone means matplotlib is missing; the rest is still written).

Machine and settings for the report come from BENCH_META_* variables.
Needs the libnbd Python binding (the `nbd` module): run it with
/usr/bin/python3.
"""

import csv
import os
import statistics
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchreport import (crc32c, load_rows, meta, pct, pyplot,  # noqa: E402
                         ratio, replace_section)


# ---- ext4 superblock and group descriptors -----------------------------

SB_OFF = 1024
INCOMPAT_64BIT = 0x80
INCOMPAT_CSUM_SEED = 0x2000
RO_COMPAT_GDT_CSUM = 0x10
RO_COMPAT_METADATA_CSUM = 0x400
GD_FREE_BLOCKS_LO = 0x0C
GD_CHECKSUM = 0x1E
SB_WTIME = 0x30
SB_CHECKSUM = 0x3FC


class Fs:
    """What the benchmark needs from the primary superblock."""

    def __init__(self, sb):
        if struct.unpack_from("<H", sb, 0x38)[0] != 0xEF53:
            sys.exit("bench-layout: no ext4 superblock in the image")
        self.first_data_block = struct.unpack_from("<I", sb, 0x14)[0]
        self.block_size = 1024 << struct.unpack_from("<I", sb, 0x18)[0]
        self.blocks_per_group = struct.unpack_from("<I", sb, 0x20)[0]
        lo = struct.unpack_from("<I", sb, 0x04)[0]
        incompat = struct.unpack_from("<I", sb, 0x60)[0]
        ro_compat = struct.unpack_from("<I", sb, 0x64)[0]
        hi = struct.unpack_from("<I", sb, 0x150)[0] if incompat & INCOMPAT_64BIT else 0
        self.blocks_count = lo | hi << 32
        self.desc_size = 32
        if incompat & INCOMPAT_64BIT:
            self.desc_size = struct.unpack_from("<H", sb, 0xFE)[0]
        self.metadata_csum = bool(ro_compat & RO_COMPAT_METADATA_CSUM)
        if not self.metadata_csum and ro_compat & RO_COMPAT_GDT_CSUM:
            sys.exit("bench-layout: uninit_bg (crc16) descriptors are not "
                     "supported; make the image with -O metadata_csum")
        if incompat & INCOMPAT_CSUM_SEED:
            self.csum_seed = struct.unpack_from("<I", sb, 0x270)[0]
        else:
            self.csum_seed = crc32c(0xFFFFFFFF, sb[0x68:0x78])
        # The block holding the primary superblock, and where in it.
        self.sb_block_off = SB_OFF // self.block_size * self.block_size
        self.sb_in_block = SB_OFF - self.sb_block_off
        # The first descriptor block follows the superblock's block.
        self.gdt_off = (self.first_data_block + 1) * self.block_size
        # A data block in the middle of the filesystem: the middle of its
        # middle group, away from any backup superblock, descriptor copy,
        # bitmap or inode table.
        ngroups = (self.blocks_count - self.first_data_block
                   + self.blocks_per_group - 1) // self.blocks_per_group
        g = ngroups // 2
        blk = (self.first_data_block + g * self.blocks_per_group
               + self.blocks_per_group // 2)
        self.data_off = blk * self.block_size
        self.ngroups = ngroups

    def gd_csum(self, group, desc):
        if not self.metadata_csum:
            return None
        c = crc32c(self.csum_seed, struct.pack("<I", group))
        c = crc32c(c, desc[:GD_CHECKSUM])
        c = crc32c(c, b"\0\0")
        c = crc32c(c, desc[GD_CHECKSUM + 2:self.desc_size])
        return c & 0xFFFF

    def sb_csum(self, sb):
        return crc32c(0xFFFFFFFF, sb[:SB_CHECKSUM])


def desc_change(fs, block, step):
    """Group 0's descriptor with bg_free_blocks_count_lo moved by step."""
    b = bytearray(block)
    d = b[0:fs.desc_size]
    free = struct.unpack_from("<H", d, GD_FREE_BLOCKS_LO)[0]
    struct.pack_into("<H", d, GD_FREE_BLOCKS_LO, (free + step) & 0xFFFF)
    csum = fs.gd_csum(0, d)
    if csum is not None:
        struct.pack_into("<H", d, GD_CHECKSUM, csum)
    b[0:fs.desc_size] = d
    return bytes(b)


def sb_change(fs, block, step):
    """The superblock's block with s_wtime moved by step, s_checksum fixed."""
    b = bytearray(block)
    o = fs.sb_in_block
    sb = b[o:o + 1024]
    wtime = struct.unpack_from("<I", sb, SB_WTIME)[0]
    struct.pack_into("<I", sb, SB_WTIME, (wtime + step) & 0xFFFFFFFF)
    if fs.metadata_csum:
        struct.pack_into("<I", sb, SB_CHECKSUM, fs.sb_csum(sb))
    b[o:o + 1024] = sb
    return bytes(b)


def self_check(fs, gdt_block, sb):
    """The checksum code must reproduce what mkfs wrote."""
    if not fs.metadata_csum:
        return
    d = gdt_block[:fs.desc_size]
    have = struct.unpack_from("<H", d, GD_CHECKSUM)[0]
    if fs.gd_csum(0, d) != have:
        sys.exit("bench-layout: descriptor checksum self-check failed")
    if fs.sb_csum(sb) != struct.unpack_from("<I", sb, SB_CHECKSUM)[0]:
        sys.exit("bench-layout: superblock checksum self-check failed")


# ---- one server run ----------------------------------------------------


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
    return out.get("VmRSS", 0), out.get("VmHWM", 0)


def start_server(nbd, image, server, sock, log):
    if os.path.exists(sock):
        os.unlink(sock)
    args = ["nbdkit", "-f", "--exit-with-parent", "-U", sock]
    args += ["file", f"file={image}"] if server == "file" else [server, f"file={image}"]
    logf = open(log, "ab")
    t0 = time.perf_counter()
    p = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT)
    deadline = t0 + 600
    while True:
        if p.poll() is not None:
            sys.exit(f"bench-layout: nbdkit exited ({p.returncode}) before "
                     f"it served; see {log}")
        if os.path.exists(sock):
            h = nbd.NBD()
            try:
                h.connect_unix(sock)
                t1 = time.perf_counter()
                return p, h, (t1 - t0) * 1e3
            except nbd.Error:
                del h
        if time.perf_counter() > deadline:
            p.kill()
            sys.exit("bench-layout: nbdkit did not serve within 600 s")
        time.sleep(0.001)


def stop_server(p, h):
    h.shutdown()
    del h  # this libnbd binding has no close(): drop the handle
    p.terminate()
    try:
        p.wait(timeout=600)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def timed_pairs(h, fs, kind, writes, data):
    """writes timed (metadata write, data write) pairs; the original
    metadata block is restored (untimed) at the end."""
    if kind == "desc":
        off, length, change = fs.gdt_off, fs.block_size, desc_change
    else:
        # 4 KiB block 0 (the superblock's block) or, with 1 KiB blocks,
        # the 1 KiB superblock itself.
        off, length, change = fs.sb_block_off, fs.block_size, sb_change
    orig = h.pread(length, off)
    out = []
    for i in range(writes):
        cur = h.pread(length, off)
        new = change(fs, cur, 1 if i % 2 == 0 else -1)
        t0 = time.perf_counter_ns()
        h.pwrite(new, off)
        t1 = time.perf_counter_ns()
        h.pwrite(data, fs.data_off)
        t2 = time.perf_counter_ns()
        out.append(((t1 - t0) / 1e3, (t2 - t1) / 1e3))
    h.pwrite(orig, off)
    h.pwrite(data, fs.data_off)  # lets a deferred re-read happen now
    return out


def cmd_run(argv):
    import nbd

    image, label, server, rnd, pos, writes, sock, log, out = argv
    writes = int(writes)
    with open(image, "rb") as f:
        f.seek(0)
        head = f.read(SB_OFF + 1024)
        fs = Fs(head[SB_OFF:SB_OFF + 1024])
        f.seek(fs.gdt_off)
        self_check(fs, f.read(fs.block_size), head[SB_OFF:SB_OFF + 1024])
    data = bytes((i * 7 + 1) & 0xFF for i in range(4096))
    size_bytes = os.path.getsize(image)
    p, h, startup_ms = start_server(nbd, image, server, sock, log)
    rss0, _ = proc_status(p.pid)
    samples = {k: timed_pairs(h, fs, k, writes, data) for k in ("desc", "sb")}
    rss, hwm = proc_status(p.pid)
    stop_server(p, h)
    side = "file" if server == "file" else "ext4lazy"
    new = not os.path.exists(out) or os.path.getsize(out) == 0
    with open(out, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["size", "size_bytes", "groups", "block_size", "server",
                        "round", "position", "kind", "sample", "meta_us",
                        "next_us", "pair_us", "startup_ms", "rss_start_kb",
                        "rss_kb", "hwm_kb"])
        for kind, rows in samples.items():
            for i, (a, b) in enumerate(rows):
                w.writerow([label, size_bytes, fs.ngroups, fs.block_size, side,
                            rnd, pos, kind, i, f"{a:.1f}", f"{b:.1f}",
                            f"{a + b:.1f}", f"{startup_ms:.1f}", rss0, rss, hwm])
    med = {k: statistics.median(a + b for a, b in v) for k, v in samples.items()}
    print(f"bench-layout:   {label:>5} {side:8} round {rnd}: start {startup_ms:8.1f} ms, "
          f"desc+next {med['desc'] / 1e3:9.2f} ms, sb+next {med['sb'] / 1e3:9.2f} ms, "
          f"RSS {rss / 1024:7.1f} MiB (HWM {hwm / 1024:.1f})", file=sys.stderr)


# ---- report ------------------------------------------------------------


def fmt_ms(us):
    ms = us / 1e3
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def fmt_ratio(a, b):
    return ratio(a, b, 1)


def summarise(rows):
    sizes = []
    for r in rows:
        if r["size"] not in sizes:
            sizes.append(r["size"])
    sizes.sort(key=lambda s: int(next(r["size_bytes"] for r in rows if r["size"] == s)))
    res = {}
    for s in sizes:
        for side in ("ext4lazy", "file"):
            rs = [r for r in rows if r["size"] == s and r["server"] == side]
            if not rs:
                continue
            d = {"groups": int(rs[0]["groups"]), "bytes": int(rs[0]["size_bytes"]),
                 "block_size": int(rs[0]["block_size"])}
            for kind in ("desc", "sb"):
                pair = [float(r["pair_us"]) for r in rs if r["kind"] == kind]
                nxt = [float(r["next_us"]) for r in rs if r["kind"] == kind]
                first = [float(r["meta_us"]) for r in rs if r["kind"] == kind]
                d[kind] = {"med": statistics.median(pair), "p90": pct(pair, 90),
                           "n": len(pair), "next_med": statistics.median(nxt),
                           "meta_med": statistics.median(first)}
            runs = {}
            for r in rs:
                runs[r["round"]] = r
            d["startup"] = statistics.median(float(r["startup_ms"]) for r in runs.values())
            d["rss"] = statistics.median(int(r["rss_kb"]) for r in runs.values())
            d["rss0"] = statistics.median(int(r["rss_start_kb"]) for r in runs.values())
            d["hwm"] = max(int(r["hwm_kb"]) for r in runs.values())
            d["runs"] = len(runs)
            res[(s, side)] = d
    return sizes, res


def table(sizes, res):
    hdr = ("| size | groups | server | desc + next: median ms | p90 | "
           "sb + next: median ms | p90 | start-up ms | RSS MiB | HWM MiB |")
    lines = [hdr, "|---|---|---|---|---|---|---|---|---|---|"]
    for s in sizes:
        for side in ("ext4lazy", "file"):
            d = res.get((s, side))
            if not d:
                continue
            lines.append(
                f"| {s} | {d['groups']} | {side} | {fmt_ms(d['desc']['med'])} | "
                f"{fmt_ms(d['desc']['p90'])} | {fmt_ms(d['sb']['med'])} | "
                f"{fmt_ms(d['sb']['p90'])} | {d['startup']:.0f} | "
                f"{d['rss'] / 1024:.1f} | {d['hwm'] / 1024:.1f} |")
    rl = ["| size | desc + next | sb + next | start-up | RSS |",
          "|---|---|---|---|---|"]
    for s in sizes:
        a, b = res.get((s, "ext4lazy")), res.get((s, "file"))
        if not a or not b:
            continue
        rl.append(f"| {s} | {fmt_ratio(a['desc']['med'], b['desc']['med'])} | "
                  f"{fmt_ratio(a['sb']['med'], b['sb']['med'])} | "
                  f"{fmt_ratio(a['startup'], b['startup'])} | "
                  f"{fmt_ratio(a['rss'], b['rss'])} |")
    return lines, rl


def findings(sizes, res):
    out = []
    big, small = sizes[-1], sizes[0]
    a, f = res.get((big, "ext4lazy")), res.get((big, "file"))
    a0 = res.get((small, "ext4lazy"))
    if a and f and a0:
        out.append(
            f"- At {big} ({a['groups']} groups) a descriptor write and the "
            f"write after it take {fmt_ms(a['desc']['med'])} ms through "
            f"ext4lazy against {fmt_ms(f['desc']['med'])} ms through the file "
            f"plugin ({fmt_ratio(a['desc']['med'], f['desc']['med'])}x); at "
            f"{small}, {fmt_ms(a0['desc']['med'])} ms. Of the pair, the "
            f"metadata write itself takes {fmt_ms(a['desc']['meta_med'])} ms "
            f"and the next write {fmt_ms(a['desc']['next_med'])} ms "
            "(medians).")
        out.append(
            f"- A superblock write and the next: {fmt_ms(a['sb']['med'])} ms "
            f"at {big} against {fmt_ms(f['sb']['med'])} ms "
            f"({fmt_ratio(a['sb']['med'], f['sb']['med'])}x).")
        out.append(
            f"- Start-up (launch to the first NBD connection) at {big}: "
            f"{a['startup']:.0f} ms for ext4lazy, {f['startup']:.0f} ms for "
            f"the file plugin. Resident memory after the writes: "
            f"{a['rss'] / 1024:.1f} MiB against {f['rss'] / 1024:.1f} MiB "
            f"(peak {a['hwm'] / 1024:.1f} MiB).")
    return out


def plot(sizes, res, png):
    plt = pyplot()
    if plt is None:
        return 77
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    styles = {"ext4lazy": ("#3b7dd8", "o"), "file": ("#7a7a7a", "s")}
    for side in ("ext4lazy", "file"):
        col, mk = styles[side]
        xs = [res[(s, side)]["bytes"] / 2**30 for s in sizes if (s, side) in res]
        for ax, kind, title in ((axes[0], "desc", "descriptor write + next write"),
                                (axes[1], "sb", "superblock write + next write")):
            med = [res[(s, side)][kind]["med"] / 1e3 for s in sizes if (s, side) in res]
            p90 = [res[(s, side)][kind]["p90"] / 1e3 for s in sizes if (s, side) in res]
            ax.plot(xs, med, marker=mk, color=col, label=f"{side} median")
            ax.plot(xs, p90, marker=mk, color=col, linestyle=":", alpha=0.7,
                    label=f"{side} p90")
            ax.set_title(title, fontsize=9)
            ax.set_ylabel("latency (ms)")
        rss = [res[(s, side)]["rss"] / 1024 for s in sizes if (s, side) in res]
        hwm = [res[(s, side)]["hwm"] / 1024 for s in sizes if (s, side) in res]
        axes[2].plot(xs, rss, marker=mk, color=col, label=f"{side} VmRSS")
        axes[2].plot(xs, hwm, marker=mk, color=col, linestyle=":", alpha=0.7,
                     label=f"{side} VmHWM")
    axes[2].set_title("server memory after the writes", fontsize=9)
    axes[2].set_ylabel("MiB")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("filesystem size (GiB)")
        ax.legend(fontsize=7)
        ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    return 0


def cmd_report(argv):
    path, doc, png = argv[:3]
    rows = load_rows(path, "bench-layout")
    sizes, res = summarise(rows)
    plot_rc = None
    if png != "-":
        plot_rc = plot(sizes, res, png)
    tab, ratios = table(sizes, res)
    find = findings(sizes, res)
    rounds = max(d["runs"] for d in res.values())
    writes = max(d["desc"]["n"] for d in res.values()) // max(1, rounds)
    lines = ["## Large volumes: layout tracking", "",
             f"Measured {meta('DATE')} on {meta('NPROC')} CPUs ({meta('CPU')}), "
             f"kernel {meta('KERNEL')}, images on {meta('FS')}, "
             f"{meta('NBDKIT')}, by `tests/bench/bench-layout.sh` "
             f"({rounds} round(s) per size, server order ABAB; {writes} timed "
             "pairs per kind per round). Sparse images made with "
             f"`mkfs.ext4 {meta('MKFS')}`. ext4lazy checks a client's "
             "superblock or descriptor write against its layout, and where "
             "the layout changed re-reads it before it serves the next "
             "write; so each sample times the metadata write together with "
             "the 4 KiB data write (middle of the filesystem) that follows "
             "it, on one connection, one request at a time. A descriptor "
             "write moves group 0's "
             "bg_free_blocks_count by one (checksum recomputed); a superblock "
             "write moves s_wtime (s_checksum recomputed). Start-up is from "
             "launching nbdkit to the first completed NBD connection; RSS and "
             "HWM are VmRSS and VmHWM of the nbdkit process after the writes "
             "(HWM: the largest over the rounds).", ""]
    lines += tab + ["", "Ratios ext4lazy / file (medians):", ""] + ratios + [""]
    if find:
        lines += find + [""]
    if plot_rc == 0:
        lines += [f"![layout tracking](bench/{os.path.basename(png)})", ""]
    elif plot_rc == 77:
        lines += ["(plot skipped: python3-matplotlib is not installed)", ""]
    replace_section(doc, "bench-layout", lines)
    print("\n".join(tab + [""] + ["ratios ext4lazy / file:"] + ratios + [""] + find))
    return 77 if plot_rc == 77 else 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "run" and len(sys.argv) == 11:
        cmd_run(sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "report" and len(sys.argv) >= 5:
        sys.exit(cmd_report(sys.argv[2:]))
    else:
        sys.exit(__doc__)
