#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench-multiconn.py --- the planning and reporting half of
bench-multiconn.sh.

  bench-multiconn.py plan IMAGE NCONN PLAN
      Reads the ext4 image and writes the plan the C client reads: the
      geometry and checksum seed, then for each connection the in-use
      regular-file inodes it owns (whole inode-table blocks, dealt out
      round-robin, so the connections work on neighbouring blocks of the
      same inode-table runs but never on the same block) and a range of
      free data blocks of its own (neighbouring ranges of one free
      extent).

  bench-multiconn.py report CSV DOC
      Prints the table and (re)writes the "bench-multiconn" section of
      DOC.  Machine and settings come from BENCH_META_* variables.
"""

import os
import re
import statistics
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchreport import crc32c, load_rows, meta, replace_section  # noqa: E402

S_IFMT, S_IFREG = 0xF000, 0x8000
EA_INODE_FL = 0x200000


def cmd_plan(image, nconn, plan):
    nconn = int(nconn)
    with open(image, "rb") as f:
        f.seek(1024)
        sb = f.read(1024)
        if struct.unpack_from("<H", sb, 0x38)[0] != 0xEF53:
            sys.exit("bench-multiconn: no ext4 superblock")
        first_data = struct.unpack_from("<I", sb, 0x14)[0]
        bs = 1024 << struct.unpack_from("<I", sb, 0x18)[0]
        ipg = struct.unpack_from("<I", sb, 0x28)[0]
        first_ino = struct.unpack_from("<I", sb, 0x54)[0]
        isz = struct.unpack_from("<H", sb, 0x58)[0]
        incompat = struct.unpack_from("<I", sb, 0x60)[0]
        ro_compat = struct.unpack_from("<I", sb, 0x64)[0]
        inodes = struct.unpack_from("<I", sb, 0x00)[0]
        ngroups = inodes // ipg
        desc_size = struct.unpack_from("<H", sb, 0xFE)[0] if incompat & 0x80 else 32
        csum = 1 if ro_compat & 0x400 else 0
        if incompat & 0x2000:
            seed = struct.unpack_from("<I", sb, 0x270)[0]
        else:
            seed = crc32c(0xFFFFFFFF, sb[0x68:0x78])
        if incompat & 0x10:
            sys.exit("bench-multiconn: meta_bg images are not supported")
        f.seek((first_data + 1) * bs)
        gdt = f.read(ngroups * desc_size)
        blocks = []  # (byte offset, [(index in block, ino), ...])
        per_block = bs // isz
        for g in range(ngroups):
            d = gdt[g * desc_size:(g + 1) * desc_size]
            itab = struct.unpack_from("<I", d, 0x08)[0]
            if desc_size >= 64:
                itab |= struct.unpack_from("<I", d, 0x28)[0] << 32
            flags = struct.unpack_from("<H", d, 0x12)[0]
            if flags & 0x1:  # INODE_UNINIT
                continue
            f.seek(itab * bs)
            table = f.read(ipg * isz)
            for b in range(ipg // per_block):
                recs = []
                for k in range(per_block):
                    i = b * per_block + k
                    ino = g * ipg + i + 1
                    r = table[i * isz:(i + 1) * isz]
                    mode, links = struct.unpack_from("<H", r, 0)[0], struct.unpack_from("<H", r, 0x1A)[0]
                    fl = struct.unpack_from("<I", r, 0x20)[0]
                    if (ino < first_ino or mode & S_IFMT != S_IFREG or links == 0
                            or fl & EA_INODE_FL):
                        continue
                    recs.append((k, ino))
                if recs:
                    blocks.append((itab * bs + b * bs, recs))
    if len(blocks) < nconn:
        sys.exit(f"bench-multiconn: only {len(blocks)} inode-table blocks "
                 f"hold files; need at least {nconn}")
    # Free data blocks, from dumpe2fs: one large free extent, cut into
    # neighbouring ranges, one per connection.
    out = subprocess.run(["dumpe2fs", image], capture_output=True, text=True,
                         check=True).stdout
    free = []
    for m in re.finditer(r"^\s+Free blocks: (.*)$", out, re.M):
        for part in m.group(1).split(","):
            part = part.strip()
            if not part:
                continue
            a, _, b = part.partition("-")
            free.append((int(a), int(b or a)))
    free.sort(key=lambda x: x[0] - x[1])
    if not free:
        sys.exit("bench-multiconn: no free blocks")
    a, b = free[0]
    per = min(4096, (b - a + 1) // nconn)
    if per < 16:
        sys.exit("bench-multiconn: no free extent large enough")
    with open(plan, "w") as p:
        p.write(f"H {bs} {isz} {csum} {seed}\n")
        for n, (off, recs) in enumerate(blocks):
            for k, ino in recs:
                p.write(f"T {n % nconn} {off} {k} {ino}\n")
        for c in range(nconn):
            p.write(f"D {c} {(a + c * per) * bs} {per}\n")
    nin = sum(len(r) for _, r in blocks)
    print(f"bench-multiconn: plan: {nin} files in {len(blocks)} inode-table "
          f"blocks, {nconn} connection(s), {per} free data blocks each",
          file=sys.stderr)


KINDS = [("time", "time-only inode-table write"),
         ("real", "real inode-table write"),
         ("data", "4 KiB data write"),
         ("flush", "flush")]


def cmd_report(path, doc):
    rows = load_rows(path, "bench-multiconn")
    conns = sorted({int(r["conns"]) for r in rows}, reverse=True)
    rounds = len({r["round"] for r in rows})

    def sel(c, side):
        return [r for r in rows if int(r["conns"]) == c and r["side"] == side]

    def med(rs, k):
        return statistics.median(float(r[k]) for r in rs)

    tab = ["| connections | side | ops/s (median) | NBD requests/s | per-round ratios | "
           "time-only p50 / p99 µs | real p50 / p99 µs | data p50 / p99 µs | flush p50 / p99 µs |",
           "|---|---|---|---|---|---|---|---|---|"]
    ratios = ["| connections | ext4lazy / file ops/s | per-round range |", "|---|---|---|"]
    res = {}
    for c in conns:
        base = {r["round"]: float(r["ops_s"]) for r in sel(c, "file")}
        for side in ("ext4lazy", "file"):
            rs = sel(c, side)
            if not rs:
                continue
            paired = [float(r["ops_s"]) / base[r["round"]] for r in rs
                      if side == "ext4lazy" and base.get(r["round"])]
            res[(c, side)] = med(rs, "ops_s")
            lat = " | ".join(f"{med(rs, k + '_p50_us'):.0f} / {med(rs, k + '_p99_us'):.0f}"
                             for k, _ in KINDS)
            rng = f"{min(paired):.2f}–{max(paired):.2f}" if paired else ""
            tab.append(f"| {c} | {side} | {med(rs, 'ops_s'):.0f} | "
                       f"{med(rs, 'requests_s'):.0f} | {rng} | {lat} |")
        if (c, "ext4lazy") in res and (c, "file") in res:
            paired = [float(r["ops_s"]) / base[r["round"]] for r in sel(c, "ext4lazy")
                      if base.get(r["round"])]
            ratios.append(f"| {c} | {res[(c, 'ext4lazy')] / res[(c, 'file')]:.2f} | "
                          f"{min(paired):.2f}–{max(paired):.2f} |")
    find = []
    if len(conns) > 1:
        hi, lo = conns[0], conns[-1]
        for side in ("ext4lazy", "file"):
            if (hi, side) in res and (lo, side) in res:
                find.append(f"- {side}: {res[(hi, side)]:.0f} ops/s with {hi} "
                            f"connections against {res[(lo, side)]:.0f} with {lo} "
                            f"({res[(hi, side)] / res[(lo, side)]:.2f}×).")
    held = [r for r in rows if r["side"] == "ext4lazy" and r.get("held")]
    for c in conns:
        hs = [r for r in held if int(r["conns"]) == c]
        if hs:
            h = statistics.median(int(r["held"]) for r in hs)
            rw = statistics.median(int(r["real_writes"]) for r in hs)
            sp = statistics.median(int(r["superseded"]) for r in hs)
            find.append(f"- ext4lazy, {c} connection(s), per run (medians of its "
                        f"counters): {h:.0f} inode-table writes held as "
                        f"time-only, {rw:.0f} classified real, {sp:.0f} holds "
                        "superseded in memory (writes the store never saw).")
    lines = ["## Many connections on the inode tables", "",
             f"Measured {meta('DATE')} on {meta('NPROC')} CPUs ({meta('CPU')}), "
             f"kernel {meta('KERNEL')}, image on {meta('FS')}, {meta('NBDKIT')}, "
             f"by `tests/bench/bench-multiconn.sh` ({rounds} round(s), sides "
             "alternating, a fresh copy of the image for every run). A "
             f"{meta('SIZE')} ext4 (4 KiB blocks, 256-byte inodes, "
             f"metadata_csum) holding {meta('FILES')} files; "
             f"{meta('RUNTIME')} s per run, `nbdkit -t {meta('THREADS')}`"
             f"{meta('PARAMS_NOTE', '')}. Each connection is one thread of a "
             "C libnbd client, one request at a time, doing a random mix of: "
             f"{meta('MIX_TIME')}% time-only inode-table writes (read the "
             f"block, move {meta('TOUCH_NOTE')} of one inode, fix its "
             f"checksum, write it), {meta('MIX_REAL')}% real inode-table "
             "writes (the same with i_uid toggled), "
             f"{meta('MIX_DATA')}% 4 KiB data writes to free blocks and "
             f"{meta('MIX_FLUSH')}% flushes. Each connection owns whole "
             "inode-table blocks, dealt out round-robin, so the connections "
             "share inode-table runs but not blocks. An op is one item of "
             "the mix (an inode-table op is a read and a write); latencies "
             "are per op. Every run ends with `e2fsck -fn` clean.", ""]
    lines += tab + ["", "Ratios ext4lazy / file (median ops/s):", ""] + ratios + [""]
    if find:
        lines += find + [""]
    replace_section(doc, "bench-multiconn", lines)
    print("\n".join(tab + [""] + ratios + [""] + find))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "plan":
        cmd_plan(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "report":
        cmd_report(*sys.argv[2:])
    else:
        sys.exit(__doc__)
