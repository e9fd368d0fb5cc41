#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# make-seeds.py --- seed corpora for the libFuzzer targets, made from
# real images (mkfs.ext4, debugfs, sfdisk), so that no binary file is
# committed.
#
#   tests/fuzz/make-seeds.py OUTDIR
#
# writes OUTDIR/{jbd2,layout,classify,follower}/ (OUTDIR/work holds the
# images).  The seeds are the same on every run: fixed UUIDs, hash seed
# and time (E2FSPROGS_FAKE_TIME).  docs/fuzz.md lists what each holds.
import os
import shutil
import struct
import subprocess
import sys
import zlib

UUID = "6b2f3f84-6b0e-4a7c-9a51-3c1f0a9e2d10"
ENV = dict(os.environ, E2FSPROGS_FAKE_TIME="1700000000", LC_ALL="C",
           PATH="/usr/local/sbin:/usr/sbin:/sbin:" + os.environ.get("PATH", ""))
JBD2_MAGIC = 0xC03B3998


def run(*cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, env=ENV, capture_output=True)
    if r.returncode != 0:
        sys.exit("make-seeds: %s failed:\n%s" % (" ".join(cmd),
                                                 r.stderr.decode()))
    return r.stdout.decode()


def debugfs(img, *cmds):
    """Run debugfs -w commands (one per argument) on img."""
    return run("debugfs", "-w", "-f", "-", img,
               stdin="\n".join(cmds).encode() + b"\n")


def mkfs(img, size, *opts):
    if os.path.exists(img):
        os.unlink(img)
    with open(img, "wb") as f:
        f.truncate(size)
    run("mkfs.ext4", "-q", "-F", "-U", UUID, "-E", "hash_seed=" + UUID,
        *opts, img)


def read_at(img, off, n):
    with open(img, "rb") as f:
        f.seek(off)
        return f.read(n)


def write_at(img, off, data):
    with open(img, "r+b") as f:
        f.seek(off)
        f.write(data)


def crc32c(crc, data):
    """The raw crc32c jbd2 and ext4 use (no final inversion)."""
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc


def pattern(n, k):
    return bytes((i * 7 + k * 31 + 3) & 0xFF for i in range(n))


def sparse(dev):
    """A device in fuzz-layout's sparse form: every run of non-zero
    512-byte sectors as a record (at most 65535 bytes each)."""
    out = bytearray(b"EXT4LAZY-SPARSE\n" + struct.pack("<BI", 0, len(dev)))
    zero = bytes(512)
    start = None
    for off in range(0, len(dev) + 512, 512):
        nz = off < len(dev) and dev[off:off + 512] != zero[:len(dev) - off]
        if nz and start is None:
            start = off
        if start is not None and (not nz or off - start >= 65024):
            for at in range(start, off, 65024):
                chunk = dev[at:min(off, at + 65024)]
                out += struct.pack("<IH", at, len(chunk)) + chunk
            start = off if nz else None
    return bytes(out)


def save(outdir, target, name, data):
    if target == "layout":
        data = sparse(data)
    with open(os.path.join(outdir, target, name), "wb") as f:
        f.write(data)


# ---- journals debugfs writes ---------------------------------------------

def journal_image(work, name, size, bs, opts, csum):
    """An fs with a few files and three transactions in its journal: two
    blocks (the second an escaped copy: it starts with the jbd2 magic),
    a revoke, and one without a commit block.  Returns (image, the
    journal's first blocks)."""
    img = os.path.join(work, name + ".img")
    mkfs(img, size, "-b", str(bs), *opts)
    files = []
    for i in range(3):
        p = os.path.join(work, "%s.f%d" % (name, i))
        with open(p, "wb") as f:
            f.write(pattern(bs * (i + 1), i))
        files.append("write %s file%d" % (p, i))
    two = os.path.join(work, name + ".two")
    with open(two, "wb") as f:
        f.write(pattern(bs, 7) + struct.pack(">I", JBD2_MAGIC)
                + pattern(bs - 4, 8))
    one = os.path.join(work, name + ".one")
    with open(one, "wb") as f:
        f.write(pattern(bs, 9))
    debugfs(img, *files, "jo -c" if csum else "jo",
            "jw -b 100,101 " + two, "jw -r 102", "jw -b 103 -c " + one, "jc")
    jdump = os.path.join(work, name + ".journal")
    run("debugfs", "-R", "dump <8> " + jdump, img)
    with open(jdump, "rb") as f:
        blocks = [f.read(bs) for _ in range(10)]
    return img, [fixed_commit_time(blocks[0], b) for b in blocks]


def fixed_commit_time(jsb, b):
    """debugfs stamps commit blocks with the time of day: set it to the
    fake time (and the commit checksum to match), so that the seeds are
    the same on every run."""
    if b[:4] != struct.pack(">I", JBD2_MAGIC) or b[4:8] != b"\0\0\0\2":
        return b
    b = bytearray(b)
    struct.pack_into(">QI", b, 0x30, 1700000000, 0)
    if struct.unpack_from(">I", jsb, 0x28)[0] & 0x18:  # csum v2/v3
        seed = crc32c(0xFFFFFFFF, jsb[0x30:0x40])
        struct.pack_into(">I", b, 0x10, 0)
        struct.pack_into(">I", b, 0x10, crc32c(seed, bytes(b)))
    return bytes(b)


def jsb_fields(jsb):
    bs, maxlen, first, seq, start = struct.unpack_from(">5I", jsb, 0x0C)
    compat, incompat = struct.unpack_from(">2I", jsb, 0x24)
    return dict(bs=bs, maxlen=maxlen, first=first, seq=seq, start=start,
                compat=compat, incompat=incompat, uuid=jsb[0x30:0x40])


def features_header(jsb, loglen, spare=0, start=None):
    """The FUZZ_FEATURES_BYTES header of fuzz.h for the journal of jsb,
    with a log of loglen blocks (and s_start start)."""
    f = jsb_fields(jsb)
    if start is not None:
        f["start"] = start
    flags = ((f["compat"] & 1) | (2 if f["incompat"] & 0x8 else 0)
             | (4 if f["incompat"] & 0x10 else 0)
             | (8 if f["incompat"] & 0x2 else 0)
             | (16 if f["incompat"] & 0x4 else 0)
             | (64 if f["incompat"] & 0x1 else 0) | 128)
    h = bytes([flags, {1024: 0, 2048: 1, 4096: 2, 8192: 3}[f["bs"]]])
    h += struct.pack("<H", loglen - 4) + bytes([f["first"] - 1])
    h += struct.pack("<H", 0) + struct.pack("<I", f["seq"])
    h += struct.pack("<I", f["start"]) + bytes([spare]) + f["uuid"]
    assert len(h) == 32
    return h


def write_op(lblk, block, op=0):
    """A follower write of block at lblk, kept short: the target
    zero-fills the block and, with op bit 3, sets its checksum.  A data
    block is its first 16 bytes (what the follower looks at is its
    first 4)."""
    if block[:4] != struct.pack(">I", JBD2_MAGIC):
        block = block[:16]
    elif struct.unpack_from(">I", block, 4)[0] in (1, 5):
        block = block[:-4] + bytes(4)  # descriptor, revoke: tail checksum
        op |= 8
    block = block.rstrip(b"\0")
    return bytes([op]) + struct.pack("<HH", lblk, len(block)) + block


def journal_seeds(outdir, name, blocks):
    jsb = blocks[0]
    # jbd2: the superblock, then each block.
    save(outdir, "jbd2", name + "-sb", jsb)
    for i, b in enumerate(blocks[1:8], 1):
        save(outdir, "jbd2", "%s-sb-blk%d" % (name, i), jsb + b)
        save(outdir, "jbd2", "%s-hdr-blk%d" % (name, i),
             features_header(jsb, 64) + b)
    # follower: the journal written in order, out of order, with a
    # reset, a tail update and lookups.
    hdr = features_header(jsb, 16, spare=3)
    w = [write_op(i, blocks[i]) for i in range(1, 8)]
    save(outdir, "follower", name + "-inorder", hdr + b"".join(w))
    async_hdr = bytes([hdr[0] | 16]) + hdr[1:]  # async_commit
    save(outdir, "follower", name + "-commit-first",
         async_hdr + w[3] + w[0] + w[1] + w[2] + b"".join(w[4:]))
    save(outdir, "follower", name + "-lookups",
         hdr + b"".join(x + b"\x05" + struct.pack("<H", 0) for x in w))
    save(outdir, "follower", name + "-reset",
         hdr + b"".join(w[:4]) + b"\x06" + features_header(jsb, 12, start=0)
         + b"".join(w[4:]))
    save(outdir, "follower", name + "-tail",
         hdr + b"".join(w[:4]) + b"\x07" + struct.pack("<II", 2, 5)
         + b"".join(w[4:]) + b"\x07" + struct.pack("<II", 3, 0))
    # The log wrapping: the first transaction from its last 3 blocks.
    save(outdir, "follower", name + "-wrap",
         features_header(jsb, 16, spare=3, start=14)
         + b"".join(write_op(lblk, blocks[1 + i], 8)
                    for i, lblk in enumerate([14, 15, 16, 1])))


# ---- small filesystems for layout ----------------------------------------

def small_journal(work, name, size, bs, opts, jsb, nblocks, extra=()):
    """An fs of size bytes with an nblocks-block journal: mke2fs wants
    at least 1024 journal blocks, so the journal is written as a file
    and its inode copied to inode 8.  jsb is a journal superblock (its
    maxlen is set to nblocks and its checksum recomputed); extra blocks
    follow it."""
    img = os.path.join(work, name + ".img")
    mkfs(img, size, "-b", str(bs), "-O", "^has_journal", *opts)
    sb = bytearray(jsb[:bs])
    struct.pack_into(">I", sb, 0x10, nblocks)
    struct.pack_into(">I", sb, 0x1C, 0)  # clean: s_start 0
    if sb[0x50] == 4:
        struct.pack_into(">I", sb, 0xFC, 0)
        struct.pack_into(">I", sb, 0xFC, crc32c(0xFFFFFFFF, bytes(sb[:1024])))
    data = bytes(sb) + b"".join(extra)
    data += bytes(nblocks * bs - len(data))
    jf = os.path.join(work, name + ".jnl")
    with open(jf, "wb") as f:
        f.write(data)
    # The first file of a new fs is inode 12.
    debugfs(img, "write %s jnl" % jf, "copy_inode <12> <8>", "unlink jnl",
            "clri <12>", "freei <12>", "sif <8> links_count 1",
            "ssv journal_inum 8", "feature has_journal")
    return img


def gpt_4k(fs):
    """A GPT with 4096-byte sectors around fs (crafted: sfdisk cannot)."""
    ss = 4096
    nfs = (len(fs) + ss - 1) // ss
    first, total = 6, 6 + nfs + 5
    last_lba = total - 1
    entry = (bytes.fromhex("af3dc60f838472478e793d69d8477de4")
             + bytes(range(16)) + struct.pack("<QQQ", first, first + nfs - 1, 0)
             + "fuzz".encode("utf-16-le"))
    entries = entry.ljust(128, b"\0") + bytes(127 * 128)

    def header(lba, alt, array_lba):
        h = bytearray(struct.pack(
            "<8sIIIIQQQQ16sQIII", b"EFI PART", 0x10000, 92, 0, 0, lba, alt,
            first, last_lba - 5, bytes(range(16, 32)), array_lba, 128, 128,
            zlib.crc32(entries)))
        struct.pack_into("<I", h, 16, zlib.crc32(bytes(h)))
        return bytes(h).ljust(ss, b"\0")

    mbr = bytearray(ss)
    mbr[446:462] = bytes([0, 0, 2, 0, 0xEE, 0xFF, 0xFF, 0xFF]) + struct.pack(
        "<II", 1, last_lba)
    mbr[510:512] = b"\x55\xaa"
    img = bytes(mbr) + header(1, last_lba, 2) + entries
    img += fs.ljust(nfs * ss, b"\0") + entries + header(last_lba, 1,
                                                        last_lba - 4)
    assert len(img) == total * ss
    return img


def layout_seeds(outdir, work, jsbs, tx1k):
    imgs = {}
    for name, size, bs, opts in [
            ("fs1k-csum", 128 << 10, 1024, ["-O", "^has_journal"]),
            ("fs1k-ext2", 128 << 10, 1024, ["-t", "ext2"]),
            ("fs4k-csum", 256 << 10, 4096, ["-O", "^has_journal"]),
            ("fs1k-i128-nocsum", 128 << 10, 1024,
             ["-I", "128", "-O", "^has_journal,^metadata_csum,^64bit"]),
            ("fs1k-bigalloc", 512 << 10, 1024,
             ["-O", "^has_journal,bigalloc", "-C", "4096"]),
            ("fs1k-metabg", 512 << 10, 1024,
             ["-O", "^has_journal,meta_bg,^resize_inode", "-g", "256",
              "-N", "64"]),
            ("fs1k-groups", 512 << 10, 1024,
             ["-O", "^has_journal,^flex_bg", "-g", "256", "-N", "64"])]:
        img = os.path.join(work, name + ".img")
        mkfs(img, size, "-b", str(bs), *opts)
        imgs[name] = img
    imgs["fs1k-csum-jnl"] = small_journal(
        work, "fs1k-csum-jnl", 192 << 10, 1024, [], jsbs["j1k-csum"], 16,
        tx1k)
    imgs["fs4k-csum-jnl"] = small_journal(
        work, "fs4k-csum-jnl", 256 << 10, 4096, [], jsbs["j4k-csum"], 8)
    imgs["fs1k-ext3-jnl"] = small_journal(
        work, "fs1k-ext3-jnl", 192 << 10, 1024,
        ["-t", "ext3", "-O", "^has_journal"], jsbs["j1k-plain"], 20)
    for name, img in imgs.items():
        with open(img, "rb") as f:
            save(outdir, "layout", name, f.read())

    def fs(name):
        with open(imgs[name], "rb") as f:
            return f.read()

    # MBR: a primary partition and an extended one with two logicals.
    mbr = os.path.join(work, "mbr.img")
    with open(mbr, "wb") as f:
        f.truncate(1 << 20)
    run("sfdisk", "-q", "--no-reread", "--no-tell-kernel", mbr,
        stdin=b"label: dos\nlabel-id: 0x1234abcd\n"
        b"start=64, size=384, type=83\n"
        b"start=448, size=1536, type=5\n"
        b"start=512, size=384, type=83\n"
        b"start=960, size=512, type=83\n")
    write_at(mbr, 64 * 512, fs("fs1k-csum-jnl"))
    write_at(mbr, 512 * 512, fs("fs1k-ext2"))
    write_at(mbr, 960 * 512, fs("fs4k-csum"))
    with open(mbr, "rb") as f:
        save(outdir, "layout", "mbr-extended", f.read())

    # GPT (512-byte sectors), and the same with only its backup header.
    gpt = os.path.join(work, "gpt.img")
    with open(gpt, "wb") as f:
        f.truncate(640 << 10)
    run("sfdisk", "-q", "--no-reread", "--no-tell-kernel", gpt,
        stdin=("label: gpt\nlabel-id: %s\nfirst-lba: 34\n"
               "start=40, size=384, type=L, uuid=%s\n"
               "start=424, size=512, type=L, uuid=%s\n"
               % (UUID, UUID[:-1] + "1", UUID[:-1] + "2")).encode())
    write_at(gpt, 40 * 512, fs("fs1k-csum-jnl"))
    write_at(gpt, 424 * 512, fs("fs4k-csum"))
    with open(gpt, "rb") as f:
        g = f.read()
    save(outdir, "layout", "gpt", g)
    save(outdir, "layout", "gpt-backup-only",
         g[:512] + bytes(512) + g[1024:])
    save(outdir, "layout", "gpt-4k", gpt_4k(fs("fs1k-csum")))


# ---- inode-table blocks for classify -------------------------------------

def classify_seeds(outdir, work):
    changes = [
        ("atime", ["sif <12> atime 20240102030405"]),
        ("mtime-ctime", ["sif <12> mtime 20240102030405",
                         "sif <12> ctime 20240102030405"]),
        ("crtime", ["sif <12> crtime 20240102030405"]),
        ("atime-extra", ["sif <12> atime_extra 12345"]),
        ("version", ["sif <12> ctime 20240102030405", "sif <12> version 7"]),
        ("mode", ["sif <12> mode 0100600"]),
        ("size", ["sif <12> size 5"]),
        ("links", ["sif <12> links_count 0"]),
        ("extra-isize", ["sif <12> extra_isize 28"]),
        ("flags", ["sif <12> flags 0x200000"]),
    ]
    for sel, isz in enumerate([128, 256, 512, 1024]):
        img = os.path.join(work, "cls%d.img" % isz)
        mkfs(img, 256 << 10, "-b", "1024", "-I", str(isz), "-O",
             "^has_journal")
        p = os.path.join(work, "cls.data")
        with open(p, "wb") as f:
            f.write(pattern(3000, isz))
        debugfs(img, "write %s a" % p, "write %s b" % p, "mkdir d")
        imap = run("debugfs", "-R", "imap <12>", img)
        blk = int(imap.split("located at block ")[1].split(",")[0])
        ioff = int(imap.split("offset ")[1].split()[0], 16)
        ref = read_at(img, blk * 1024, 1024)
        for name, cmds in changes:
            new = os.path.join(work, "cls-new.img")
            shutil.copy(img, new)
            debugfs(new, *cmds)
            nw = read_at(new, blk * 1024, 1024)
            save(outdir, "classify", "i%d-%s" % (isz, name),
                 bytes([sel]) + ref + nw)
            # Patch mode: the records from inode 12 on, and the bytes
            # that changed as (offset, xor) triples.
            k = min(4, (1024 - ioff) // isz)
            r, n = ref[ioff:ioff + k * isz], nw[ioff:ioff + k * isz]
            patch = b"".join(struct.pack("<HB", i, a ^ b)
                             for i, (a, b) in enumerate(zip(r, n)) if a != b)
            save(outdir, "classify", "i%d-%s-patch" % (isz, name),
                 bytes([4 | sel, k - 1]) + r + patch)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make-seeds.py OUTDIR")
    outdir = sys.argv[1]
    work = os.path.join(outdir, "work")
    for d in ["jbd2", "layout", "classify", "follower", "work"]:
        shutil.rmtree(os.path.join(outdir, d), ignore_errors=True)
        os.makedirs(os.path.join(outdir, d))

    jsbs = {}
    tx1k = None
    for name, size, bs, opts, csum in [
            ("j1k-csum", 2 << 20, 1024, [], True),
            ("j1k-plain", 2 << 20, 1024, ["-O", "^metadata_csum,^64bit"],
             False),
            ("j4k-csum", 8 << 20, 4096, [], True)]:
        _, blocks = journal_image(work, name, size, bs, opts, csum)
        jsbs[name] = blocks[0]
        journal_seeds(outdir, name, blocks)
        if name == "j1k-csum":
            tx1k = blocks[1:7]
    layout_seeds(outdir, work, jsbs, tx1k)
    classify_seeds(outdir, work)
    shutil.rmtree(work)
    for d in ["jbd2", "layout", "classify", "follower"]:
        print("make-seeds: %d %s seeds" % (len(os.listdir(
            os.path.join(outdir, d))), d))


if __name__ == "__main__":
    main()
