#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""SIGKILL of nbdkit with holds: the backing image is clean for
e2fsck -fn and differs from what the client wrote only in inode
timestamp fields (and the checksum and version that move with them),
and in the superblock's informational fields and checksum."""
import signal

from lazylib import *

# Byte ranges of an inode record that a lost time-only hold may leave
# different: i_atime, i_ctime, i_mtime, l_i_version, l_i_checksum_lo,
# i_checksum_hi, the *_extra words, i_crtime(_extra), i_version_hi.
TIME_BYTES = set()
for a, n in ((0x08, 12), (0x24, 4), (0x7C, 2), (0x82, 2), (0x84, 24)):
    TIME_BYTES.update(range(a, a + n))

# Device bytes of the superblock a lost hold may leave different:
# s_mtime, s_wtime, s_last_mounted, s_kbytes_written, s_wtime_hi,
# s_mtime_hi, s_checksum.
SB_INFO_BYTES = set()
for a, n in ((0x2C, 8), (0x88, 64), (0x178, 8), (0x274, 2), (0x3FC, 4)):
    SB_INFO_BYTES.update(range(1024 + a, 1024 + a + n))

require_tools()
wd = Workdir()
try:
    img = wd("disk.img")
    want = wd("want.img")
    make_image(img, size="64M", files=300)
    bs = block_size(img)
    isize = 256
    shutil.copyfile(img, wd("hostname"))
    cmds = [f"set_inode_field /f{i} atime 2021030{i % 9 + 1}"
            for i in range(1, 301)]
    cmds += [f"set_inode_field /f{i} mtime 20220101" for i in range(1, 301, 7)]
    cmds += ["mkdir /newdir", "rm /f5", "set_inode_field /f9 mode 0100600",
             "set_inode_field /f200 size 3"]
    debugfs_copy(img, want, *cmds)
    run("e2fsck", "-fn", want)  # the image the client writes is clean
    itables = itable_ranges(img)

    def in_itable(off):
        return any(a <= off < e for a, e in itables)

    srv = Server(wd, img, "policy=strict")
    h = srv.connect()
    size = os.path.getsize(img)
    changed = 0
    with open(img, "rb") as fa, open(want, "rb") as fb:
        for off in range(0, size, bs):
            fa.seek(off)
            fb.seek(off)
            a, b = fa.read(bs), fb.read(bs)
            if a != b:
                h.pwrite(b, off)
                changed += 1
    st = fs0(srv.stats())
    check(st["held_blocks"] > 0, f"{st['held_blocks']} blocks held "
          f"of {changed} changed")
    check(st["real_writes"] > 0, "some inode-table writes were real")
    srv.stop(signal.SIGKILL)

    run("e2fsck", "-fn", img)
    check(True, "e2fsck -fn clean after SIGKILL")
    diff_blocks = 0
    with open(img, "rb") as fa, open(want, "rb") as fb:
        for off in range(0, size, bs):
            fa.seek(off)
            fb.seek(off)
            a, b = fa.read(bs), fb.read(bs)
            if a == b:
                continue
            diff_blocks += 1
            if off <= 1024 < off + bs:  # the superblock's block
                for i in range(bs):
                    if a[i] != b[i] and off + i not in SB_INFO_BYTES:
                        check(False, f"superblock byte {off + i} differs")
                continue
            if not in_itable(off):
                check(False, f"block at {off} outside inode tables differs")
            for i in range(bs):
                if a[i] != b[i] and (i % isize) not in TIME_BYTES:
                    check(False, f"byte {off + i} (inode offset "
                          f"{i % isize:#x}) is not a time field")
    check(diff_blocks == st["held_blocks"],
          f"only the {diff_blocks} held blocks differ, in time fields only")
    out = run("debugfs", "-R", "ls -l /", img)
    check("newdir" in out and " f5 " not in out + " ",
          "real changes (mkdir, rm) are in the store")
finally:
    wd.close()
