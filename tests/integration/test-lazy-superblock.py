#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""An in-place write of the superblock's block that changes only its
informational fields (s_mtime, s_wtime, s_kbytes_written, the checksum)
is held as a time-only inode-table write is: the backing file keeps the
old block, reads see the new one, policy=atime keeps it through a FLUSH,
shutdown writes it back.  Any other superblock change goes through.  A
FLUSH with nothing written since the last one does not flush the store
(the store request counters say so)."""
from lazylib import *

require_tools()
wd = Workdir()
try:
    img = wd("disk.img")
    copy = wd("copy.img")
    make_image(img)
    bs = block_size(img)
    sb = 1024 // bs * bs  # the superblock's block
    orig = read_at(img, sb, bs)
    # debugfs recomputes the checksum and sets s_wtime and
    # s_kbytes_written itself, as the kernel does.
    debugfs_copy(img, copy, "ssv mtime 20200101")
    new = read_at(copy, sb, bs)
    check(new != orig, "debugfs made a different block")

    srv = Server(wd, img, "policy=atime")
    h = srv.connect()
    h.flush()
    h.pwrite(new, sb)
    check(read_at(img, sb, bs) == orig, "store unchanged while held")
    check(h.pread(bs, sb) == new, "reads see the held superblock")
    check(h.pread(100, 1024 + 0x20) == new[1024 - sb + 0x20:][:100],
          "partial read of it")
    st = srv.stats()
    check(fs0(st)["name"].startswith("ext4@"), "the layout stays")
    check(fs0(st)["held_blocks"] == 1, "stats: one hold")
    skipped = st["store_flushes_skipped"]
    h.flush()
    check(read_at(img, sb, bs) == orig, "policy=atime keeps it past FLUSH")
    st = srv.stats()
    check(st["store_flushes_skipped"] == skipped + 1,
          "the FLUSH had nothing to flush")
    check(st["store_writes"]["passthrough"] == 0, "nothing passed through")
    h.shutdown()
    del h
    srv.stop()
    check(read_at(img, sb, bs) == new, "shutdown wrote it back")

    # Another field: through at once.
    debugfs_copy(img, copy, "ssv max_mnt_count 7")
    real = read_at(copy, sb, bs)
    check(real != new, "debugfs changed s_max_mnt_count")
    srv = Server(wd, img, "policy=atime")
    h = srv.connect()
    h.pwrite(real, sb)
    check(read_at(img, sb, bs) == real, "a real change goes through")
    check(fs0(srv.stats())["held_blocks"] == 0, "nothing held")
    w = srv.stats()["store_writes"]
    check(w["passthrough"] == 1, f"stats: one write passed through: {w}")
    h.shutdown()
    del h
    srv.stop()
    run("e2fsck", "-fn", img)
    print("ok: e2fsck -fn clean")
finally:
    wd.close()
