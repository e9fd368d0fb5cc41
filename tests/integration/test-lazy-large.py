#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The hold rules on a multi-TiB filesystem (a sparse image, as a cloud
volume or an appliance LUN would be): a time-only write is held, a real
one goes through, descriptor and superblock writes of counters and times
are checked without re-reading the layout, the server's memory stays
small, and a FLUSH writes the hold back.

EXT4LAZY_LARGE_SIZE sets the size (default 4T).  Skipped where the
host filesystem cannot hold a sparse file that large."""
from lazylib import *

SIZE = os.environ.get("EXT4LAZY_LARGE_SIZE", "4T")


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


require_tools()
wd = Workdir()
try:
    img = wd("big.img")
    copy = wd("copy.img")
    try:
        with open(img, "wb") as f:
            f.truncate(int(run("numfmt", "--from=iec", SIZE)))
    except OSError as e:
        skip(f"the host filesystem cannot hold a sparse {SIZE} file "
             f"under {wd.path}: {e.strerror}")
    root = img + ".root"
    os.makedirs(root)
    for i in range(1, 41):
        with open(os.path.join(root, f"f{i}"), "w") as f:
            f.write(f"file {i}\n")
    run("mkfs.ext4", "-q", "-F", "-b", "4096", "-I", "256",
        "-E", "lazy_itable_init=1,lazy_journal_init=1", "-d", root, img)
    shutil.rmtree(root)
    bs = 4096
    groups = int(re.search(r"Inode count:\s+(\d+)", run("dumpe2fs", "-h", img))
                 .group(1)) // int(re.search(r"Inodes per group:\s+(\d+)",
                                             run("dumpe2fs", "-h", img))
                                   .group(1))
    check(groups >= 8192, f"{groups} block groups")

    _, t_blk = imap(img, "/f1")   # time-only change
    _, r_blk = imap(img, "/f30")  # real change
    check(t_blk != r_blk, "the two files' inodes are in different blocks")
    # Every change made at once on a sparse copy; each block is taken
    # from it as the kernel would write it.
    run("cp", "--sparse=always", img, copy)
    script = copy + ".cmds"
    with open(script, "w") as f:
        f.write("set_inode_field /f1 atime 20200101\n"
                "set_inode_field /f30 mode 0100600\n"
                f"set_bg {groups - 3} free_blocks_count 7\n"
                "ssv wtime 20260101\n"
                "ssv kbytes_written 4242\n")
    run("debugfs", "-w", "-f", script, copy)
    desc_blk = (groups - 3) * 64 // bs * bs + bs  # 64-byte descriptors
    blocks = {name: (off, read_at(copy, off, bs))
              for name, off in (("time", t_blk), ("real", r_blk),
                                ("desc", desc_blk), ("sb", 0))}
    os.unlink(copy)
    for name, (off, data) in blocks.items():
        check(data != read_at(img, off, bs), f"the {name} block changed")

    srv = Server(wd, img, "policy=strict")
    h = srv.connect()
    base = srv.stats()

    off, data = blocks["time"]
    h.pwrite(data, off)
    st = srv.stats()
    check(fs0(st)["held"] == 1 and fs0(st)["held_blocks"] == 1,
          "the time-only write is held")
    check(read_at(img, off, bs) != data, "the store does not have it")
    check(h.pread(bs, off) == data, "reads see it")

    off, data = blocks["real"]
    h.pwrite(data, off)
    check(read_at(img, off, bs) == data, "the real change went through")

    quiet = int(run("numfmt", "--from=iec", SIZE)) // 2 // bs * bs
    for name in ("desc", "sb"):
        off, data = blocks[name]
        h.pwrite(data, off)
        if name == "sb":  # only informational fields: held
            check(read_at(img, off, bs) != data and h.pread(bs, off) == data,
                  "the sb write is held, and read")
        else:
            check(read_at(img, off, bs) == data,
                  f"the {name} write went through")
        h.pwrite(b"\0" * bs, quiet)  # the next write: a re-read would be here
    st = srv.stats()
    check(st["layout_checks"] == base["layout_checks"] + 2,
          f"both checked against the layout ({st['layout_checks']})")
    check(st["layout_rereads"] == base["layout_rereads"],
          "counters and times re-read nothing")
    check(fs0(st)["held_blocks"] == 2 and fs0(st)["writeback"]["layout"] == 0,
          "the holds stay")

    rss = vm_rss_kib(srv.proc.pid)
    limit = 16 * 1024 + fs0(st)["held_bytes"] // 1024
    check(rss <= limit, f"server RSS {rss} KiB <= {limit} KiB")

    h.flush()
    off, data = blocks["time"]
    check(read_at(img, off, bs) == data, "FLUSH wrote the hold back")
    off, data = blocks["sb"]
    check(read_at(img, off, bs) == data, "FLUSH wrote the sb back")
    check(fs0(srv.stats())["held_blocks"] == 0, "nothing held after FLUSH")
    h.shutdown()
    check(srv.stop() == 0, "nbdkit exits cleanly")
finally:
    wd.close()
