#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A server started on a journal that needs recovery (s_start != 0: a
guest still mounted while the server restarts) reads the log the store
holds as recovery would and keeps absorbing: the guest's next atime-only
transaction is held, and reaches the store only at shutdown.  Twice:
the second server starts on the log the first one wrote back.

The transactions are debugfs's (jo / jw / jc), each logging f1's inode
table block with another atime; the guest's writes are the journal
blocks debugfs wrote for the next one, sent as jbd2 sends them: the
descriptor and the logged copy, a flush, the commit with FUA."""
import re

from lazylib import *


def journal_blocks(img):
    """Device block numbers of the journal inode, from debugfs."""
    out = run("debugfs", "-R", "stat <8>", img)
    ext = out[out.index("EXTENTS:"):]
    blocks = set()
    for _, a, b in re.findall(r"\((\d+)(?:-\d+)?\):(\d+)(?:-(\d+))?", ext):
        blocks.update(range(int(a), int(b or a) + 1))
    return blocks


def log_tx(img, out, off, bs, atime):
    """out: img plus a transaction logging f1's block at off with the
    given atime (the in-place block is left as it is)."""
    debugfs_copy(img, wd("changed.img"), f"set_inode_field /f1 atime {atime}")
    with open(wd("txblock"), "wb") as f:
        f.write(read_at(wd("changed.img"), off, bs))
    debugfs_copy(img, out, "jo", f"jw -b {off // bs} {wd('txblock')}", "jc")


def journal_diff(a, b, jblocks, bs):
    """{device offset: content in b} of the journal blocks a and b
    differ in."""
    return {k * bs: read_at(b, k * bs, bs) for k in sorted(jblocks)
            if read_at(a, k * bs, bs) != read_at(b, k * bs, bs)}


def same_journal(a, b, jblocks, bs):
    return not journal_diff(a, b, jblocks, bs)


def needs_recovery(img):
    out = run("dumpe2fs", "-h", img)
    return int(re.search(r"Journal start:\s+(\d+)", out).group(1)) != 0


def guest_writes(srv, tx):
    """Write the blocks of one transaction as jbd2 does: all but the
    commit, a flush, the commit with FUA, then a flush.  The connection
    stays open (the last client leaving writes everything back)."""
    h = srv.connect()
    offs = sorted(tx)
    for o in offs[:-1]:
        h.pwrite(tx[o], o)
    h.flush()
    h.pwrite(tx[offs[-1]], offs[-1], nbd.CMD_FLAG_FUA)
    h.flush()
    return h


require_tools()
wd = Workdir()
try:
    img = wd("disk.img")
    make_image(img, opts=("-O", "has_journal"))
    bs = block_size(img)
    ino, off = imap(img, "/f1")
    jblocks = journal_blocks(img)
    check(len(jblocks) > 0, "the journal's blocks")

    # The log holds t1: the server starts on a log that needs recovery.
    log_tx(img, wd("t1.img"), off, bs, "20200101")
    shutil.copyfile(wd("t1.img"), img)
    check(needs_recovery(img), "s_start != 0")
    for n, atime in ((2, "20210101"), (3, "20220101")):
        log_tx(img, wd("next.img"), off, bs, atime)
        tx = journal_diff(img, wd("next.img"), jblocks, bs)
        check(len(tx) == 3, f"t{n}: descriptor, logged copy, commit")
        shutil.copyfile(img, wd("before.img"))
        srv = Server(wd, img, "policy=atime")
        h = guest_writes(srv, tx)
        st = fs0(srv.stats())
        print(f"t{n}: tx_absorbed={st['tx_absorbed']} "
              f"journal_held={st['journal_held']} tx_real={st['tx_real']}")
        check(st["tx_absorbed"] == 1, f"t{n} absorbed after the restart")
        check(st["journal_held"] == 3, f"t{n}: its three blocks held")
        check(same_journal(wd("before.img"), img, jblocks, bs),
              f"t{n}: the store's journal unchanged")
        check(read_at(img, off, bs) == read_at(wd("before.img"), off, bs),
              f"t{n}: the in-place block unchanged")
        h.shutdown()
        check(srv.stop() == 0, "clean shutdown")
        check(same_journal(wd("next.img"), img, jblocks, bs),
              f"t{n}: written back, the log as the guest wrote it")
        check(needs_recovery(img), "the log still needs recovery")
    subprocess.run(["e2fsck", "-fy", img], capture_output=True)
    atime = [l for l in run("debugfs", "-R", "stat /f1", img).splitlines()
             if l.lstrip().startswith("atime:")]
    check(len(atime) == 1 and "2022" in atime[0],
          "recovery replays t3's atime")
finally:
    wd.close()
