#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A flood of time-only writes over many inode-table blocks stays under
max-held: the oldest holds are written back first, down to a low-water
mark, so that not every write past the cap costs a batch."""
from lazylib import *

require_tools()
wd = Workdir()
try:
    img = wd("disk.img")
    copy = wd("copy.img")
    make_image(img, size="64M", files=1200)
    bs = block_size(img)
    debugfs_copy(img, copy, *[f"set_inode_field /f{i} atime 2020010{i % 9 + 1}"
                              for i in range(1, 1201)])
    blocks = [b for a, e in itable_ranges(img) for b in range(a, e, bs)
              if read_at(img, b, bs) != read_at(copy, b, bs)]
    check(len(blocks) >= 60, f"{len(blocks)} inode-table blocks changed")

    cap = 64 * 1024
    srv = Server(wd, img, f"max-held={cap}")
    h = srv.connect()
    peak = 0
    for b in blocks:
        h.pwrite(read_at(copy, b, bs), b)
        st = fs0(srv.stats())
        peak = max(peak, st["held_bytes"])
        check(st["held_bytes"] <= cap, f"held {st['held_bytes']} <= {cap}")
    st = fs0(srv.stats())
    check(st["held"] == len(blocks), "every write was time-only")
    check(st["writeback"]["memory"] == len(blocks) - st["held_blocks"],
          "the excess was written back by the cap")
    # Down to the low-water mark (three quarters of the cap) each time:
    # one batch, one store flush, per cap // 4 of writes, not per write.
    low = cap - cap // 4
    check(low // bs <= st["held_blocks"] <= cap // bs,
          f"{st['held_blocks']} blocks held, between the marks")
    batches = srv.stats()["store_flushes"]["memory"]
    check(0 < batches <= (len(blocks) - low // bs) // (cap // 4 // bs) + 1,
          f"{batches} memory batches for {st['writeback']['memory']} blocks")
    # What was written back is the oldest: the first blocks are in the
    # store, the last ones are not.
    check(read_at(img, blocks[0], bs) == read_at(copy, blocks[0], bs),
          "oldest hold written back")
    check(read_at(img, blocks[-1], bs) != read_at(copy, blocks[-1], bs),
          "newest hold still held")
    for b in blocks:
        if h.pread(bs, b) != read_at(copy, b, bs):
            check(False, f"read of block at {b} shows the newest content")
    h.shutdown()
    del h
    srv.stop()
    for b in blocks:
        if read_at(img, b, bs) != read_at(copy, b, bs):
            check(False, f"block at {b} written back at shutdown")
    check(True, "everything written back at shutdown")
finally:
    wd.close()
