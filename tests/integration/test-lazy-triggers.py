#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A time-only write is held (the backing file is unchanged while every
connection reads the new content), and each trigger of semantics.md
writes back exactly what it says."""
import signal
import time

from lazylib import *

require_tools()
wd = Workdir()
try:
    img = wd("disk.img")
    copy = wd("copy.img")
    make_image(img)
    bs = block_size(img)
    ino, off = imap(img, "/f1")

    def atime_block(field="atime", value="20200101", target="/f1"):
        debugfs_copy(img, copy, f"set_inode_field {target} {field} {value}")
        return read_at(copy, off, bs)

    orig = read_at(img, off, bs)
    new = atime_block()
    check(new != orig, "debugfs made a different block")

    # --- held, visible everywhere, flushed by FLUSH -------------------
    srv = Server(wd, img, "policy=strict")
    h1, h2 = srv.connect(), srv.connect()
    h1.pwrite(new, off)
    check(read_at(img, off, bs) == orig, "store unchanged while held")
    check(h1.pread(bs, off) == new, "same connection reads the hold")
    check(h2.pread(bs, off) == new, "other connection reads the hold")
    check(h2.pread(100, off + 1000) == new[1000:1100], "partial read")
    st = fs0(srv.stats())
    check(st["held"] == 1 and st["held_blocks"] == 1, "stats: one hold")
    h2.flush()  # multi-conn: a flush on any connection writes back all
    check(read_at(img, off, bs) == new, "FLUSH wrote the hold back")
    check(fs0(srv.stats())["writeback"]["flush"] == 1, "stats: flush=1")

    # --- FUA: written through, nothing held ----------------------------
    new2 = atime_block(value="20200202")
    h1.pwrite(new2, off, nbd.CMD_FLAG_FUA)
    check(read_at(img, off, bs) == new2, "FUA time-only write goes through")
    check(fs0(srv.stats())["held_blocks"] == 0, "nothing held after FUA")

    # --- a real change to a held block ---------------------------------
    shutil.copyfile(img, wd("base.img"))
    new3 = atime_block(value="20200303")
    h1.pwrite(new3, off)
    check(read_at(img, off, bs) == new2, "held again")
    # The neighbour inode (same block) changes mode, on top of the hold.
    with open(img, "r+b") as f:
        f.seek(off)
        f.write(new3)
    debugfs_copy(img, copy, f"set_inode_field <{ino ^ 1}> mode 0100600")
    real = read_at(copy, off, bs)
    shutil.copyfile(wd("base.img"), img)
    h1.pwrite(real, off)
    check(read_at(img, off, bs) == real, "real change written with newest")
    check(fs0(srv.stats())["writeback"]["real"] == 1, "stats: real=1")

    # --- explicit flush --------------------------------------------------
    base = read_at(img, off, bs)
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200404")
    new4 = read_at(copy, off, bs)
    h1.pwrite(new4, off)
    check(read_at(img, off, bs) == base, "held before ext4lazyctl flush")
    srv.ctl_cmd("flush")
    check(read_at(img, off, bs) == new4, "ext4lazyctl flush wrote it back")

    # --- WRITE_ZEROES over a held block drops it ----------------------
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200505")
    h1.pwrite(read_at(copy, off, bs), off)
    h1.zero(bs, off)
    check(h2.pread(bs, off) == bytes(bs), "zero wins over the hold")
    h1.flush()
    check(read_at(img, off, bs) == bytes(bs), "the dropped hold stays gone")
    check(fs0(srv.stats())["dropped"] == 1, "stats: dropped=1")
    # put the block back for the rest of the test
    h1.pwrite(new4, off, nbd.CMD_FLAG_FUA)

    # --- the last client disconnecting --------------------------------
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200606")
    new6 = read_at(copy, off, bs)
    h1.pwrite(new6, off)
    h1.shutdown()
    del h1
    check(read_at(img, off, bs) == new4, "a client is still connected")
    h2.shutdown()
    del h2
    for _ in range(100):
        if read_at(img, off, bs) == new6:
            break
        time.sleep(0.05)
    check(read_at(img, off, bs) == new6, "last disconnect wrote it back")

    # --- shutdown (SIGTERM; nbdkit exits once the client has gone) ------
    h = srv.connect()
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200707")
    new7 = read_at(copy, off, bs)
    h.pwrite(new7, off)
    check(read_at(img, off, bs) == new6, "held before shutdown")
    srv.proc.send_signal(signal.SIGTERM)
    h.shutdown()
    del h
    srv.stop()
    check(read_at(img, off, bs) == new7, "shutdown wrote it back")

    # --- max-age=2s ------------------------------------------------------
    srv = Server(wd, img, "policy=strict", "max-age=2s")
    h = srv.connect()
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200808")
    new8 = read_at(copy, off, bs)
    h.pwrite(new8, off)
    check(read_at(img, off, bs) == new7, "held before the deadline")
    for _ in range(200):  # up to 20 s; only the outcome is asserted
        if read_at(img, off, bs) == new8:
            break
        time.sleep(0.1)
    check(read_at(img, off, bs) == new8, "max-age=2s expired the hold")
    # The block is in the store before its sync ends and the write-back
    # is counted: wait for the count too.
    for _ in range(100):
        if fs0(srv.stats())["writeback"]["deadline"] == 1:
            break
        time.sleep(0.1)
    check(fs0(srv.stats())["writeback"]["deadline"] == 1, "stats: deadline")
    h.shutdown()
    del h
    srv.stop()
    run("e2fsck", "-fn", img)
    print("ok: e2fsck -fn clean")
finally:
    wd.close()
