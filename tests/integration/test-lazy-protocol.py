#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Requests a strict client would never send (libnbd's checks off):
out of range, zero length, flags the command does not take.  Each gets
the NBD spec's error, none reaches the engine, and the server goes on
serving with what it holds intact."""
import errno

from lazylib import *

require_tools()
wd = Workdir()
try:
    img = wd("disk.img")
    copy = wd("copy.img")
    make_image(img)
    bs = block_size(img)
    _, blk = imap(img, "/f1")
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200101")
    srv = Server(wd, img, "policy=strict")
    h = srv.connect()
    h.set_strict_mode(0)
    size = h.get_size()
    # A time-only write held before the abuse, and still held after it.
    h.pwrite(read_at(copy, blk, bs), blk)
    check(fs0(srv.stats())["held_blocks"] == 1, "a timestamp is held")

    fails_with("read past the end", errno.EINVAL, lambda: h.pread(512, size))
    fails_with("read across the end", errno.EINVAL,
            lambda: h.pread(1024, size - 512))
    fails_with("read of 64 MiB", errno.EINVAL, lambda: h.pread(64 << 20, 0))
    fails_with("read of zero bytes", errno.EINVAL, lambda: h.pread(0, 0))
    fails_with("write past the end", errno.ENOSPC,
            lambda: h.pwrite(b"x" * 512, size))
    fails_with("write of zero bytes", errno.ENOSPC, lambda: h.pwrite(b"", bs))
    fails_with("zero past the end", errno.ENOSPC, lambda: h.zero(bs, size))
    fails_with("trim past the end", errno.EINVAL, lambda: h.trim(bs, size))
    fails_with("block status past the end", errno.EINVAL,
            lambda: h.block_status(512, size, lambda *a: 0))
    fails_with("write with DF (a read flag)", errno.EINVAL,
            lambda: h.pwrite(b"x" * 512, 0, nbd.CMD_FLAG_DF))
    fails_with("zero with an unknown flag", errno.EINVAL,
            lambda: h.zero(512, 0, 1 << 10))
    # Unaligned requests are valid (minimum block size 1).
    check(h.pread(1, 3) == read_at(img, 3, 1), "a 1-byte unaligned read")

    st = fs0(srv.stats())
    check(st["held_blocks"] == 1, "the hold survived")
    check(h.pread(bs, blk) == read_at(copy, blk, bs), "reads still see it")
    check(read_at(img, blk, bs) != read_at(copy, blk, bs),
          "the store still does not have it")
    h.flush()
    check(read_at(img, blk, bs) == read_at(copy, blk, bs),
          "a FLUSH writes it back")
    h.shutdown()
    check(srv.stop() == 0, "the server exits cleanly")
finally:
    wd.close()
