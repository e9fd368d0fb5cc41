#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A write over more inode-table blocks than the reference cache has
slots (1024) completes, in one request: a client reads 1025 and 4096
blocks from the start of the inode tables and writes them back as they
are, with one inode's atime changed (held: the store keeps its old
block, reads see the new one, shutdown writes it) and with one real
change (written through at once), on an ext4 of 1 KiB blocks and one of
4 KiB blocks.  Every request must complete within a generous bound (the
engine once waited for the whole range to come from the cache, which
the blocks evicted from each other: it never completed), and what is
read back is what was written."""
import time

from lazylib import *

# Generous: each request takes well under a second on an idle machine.
DEADLINE_S = 120


def write_within(srv, h, buf, off, what):
    """One write request of buf at off, completed within DEADLINE_S; a
    server that never answers is killed (SIGTERM did not end it)."""
    cookie = h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(buf)), off)
    t0 = time.monotonic()
    while not h.aio_command_completed(cookie):
        if time.monotonic() - t0 > DEADLINE_S:
            srv.proc.kill()
            srv.proc.wait()
            check(False, f"{what}: completed")
        h.poll(1)
    check(True, f"{what}: completed")


def first_run(img, bs, nblocks):
    """The device offset of the first inode table, which must be
    followed by nblocks blocks of inode table in one run."""
    ranges = sorted(itable_ranges(img))
    start, end = ranges[0]
    for a, b in ranges[1:]:
        if a != end:
            break
        end = b
    check(end - start >= nblocks * bs,
          f"the first inode-table run has {nblocks} blocks "
          f"({(end - start) // bs})")
    return start


def case(wd, bs, opts, nblocks):
    img = wd(f"disk-{bs}-{nblocks}.img")
    copy = img + ".copy"
    make_image(img, size="256M", block_size=bs,
               opts=("-O", "^has_journal") + opts)
    off = first_run(img, bs, nblocks)
    length = nblocks * bs
    name = f"{bs}-byte blocks, {nblocks} blocks"
    _, f1 = imap(img, "f1")
    check(off <= f1 < off + length, f"{name}: f1's inode is in the range")
    orig = read_at(img, off, length)

    srv = Server(wd, img)
    h = srv.connect()
    same = h.pread(length, off)
    check(same == orig, f"{name}: reads the inode tables as the store has")
    write_within(srv, h, same, off, f"{name}: unchanged")
    check(h.pread(length, off) == orig, f"{name}: unchanged, read back")
    st = fs0(srv.stats())
    check(st["held_blocks"] == 0, f"{name}: nothing held")
    check(st["unchanged"] >= nblocks, f"{name}: every block unchanged")

    # One atime changed: held, the rest unchanged.
    debugfs_copy(img, copy, "sif f1 atime 20200101")
    timed = read_at(copy, off, length)
    check(timed != orig, f"{name}: debugfs changed the atime")
    write_within(srv, h, timed, off, f"{name}: one atime")
    check(h.pread(length, off) == timed, f"{name}: one atime, read back")
    check(fs0(srv.stats())["held_blocks"] == 1, f"{name}: one block held")
    check(read_at(img, f1, bs) == orig[f1 - off:][:bs],
          f"{name}: the store keeps the old block while held")

    # One real change (the link count): through at once.
    debugfs_copy(copy, img + ".real", "sif f1 links_count 3")
    real = read_at(img + ".real", off, length)
    check(real != timed, f"{name}: debugfs changed the link count")
    write_within(srv, h, real, off, f"{name}: one real change")
    check(h.pread(length, off) == real, f"{name}: real change, read back")
    check(read_at(img, f1, bs) == real[f1 - off:][:bs],
          f"{name}: the real change is in the store")
    check(fs0(srv.stats())["held_blocks"] == 0,
          f"{name}: the real write took the hold's place")

    # An atime on top: held, and shutdown writes it back.
    debugfs_copy(img + ".real", copy, "sif f1 atime 20210101")
    timed = read_at(copy, off, length)
    write_within(srv, h, timed, off, f"{name}: an atime on top")
    check(fs0(srv.stats())["held_blocks"] == 1, f"{name}: held again")
    h.shutdown()
    del h
    check(srv.stop() == 0, f"{name}: nbdkit exits cleanly")
    check(read_at(img, off, length) == timed,
          f"{name}: the store has everything after shutdown")
    for f in (img, copy, img + ".real"):
        os.unlink(f)


require_tools()
wd = Workdir()
try:
    for nblocks in (1025, 4096):
        case(wd, 1024, (), nblocks)
        # -i 4096: 16 MiB of inode tables, one run of 4096 blocks.
        case(wd, 4096, ("-i", "4096"), nblocks)
finally:
    wd.close()
