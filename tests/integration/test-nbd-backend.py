#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""nbd=URI: the plugin serves an ext4 image that another nbdkit exports
(the file plugin, then the memory plugin), and the lazytime engine works
unchanged above it.  Reads and writes reach the remote; a time-only
write is held (the remote does not have it) until FLUSH; FUA, flush,
zero, trim, cache and block status reach the remote as NBD requests,
as its --filter=log shows."""
import errno

from lazylib import *

require_tools()


def require_nbd_backend():
    dump = run("nbdkit", PLUGIN, "--dump-plugin")
    if "ext4lazy_nbd=yes" not in dump.splitlines():
        skip("the plugin was built without libnbd (-Dnbd=disabled or no "
             "libnbd-dev), so it has no nbd= backend")


require_nbd_backend()

DATA = 24 << 20  # a free data area of the 32M image, not an inode table


def new_requests(remote, since):
    return remote.requests()[since:]


def load(remote, img):
    """Copy img into a memory remote."""
    rh = remote.connect()
    with open(img, "rb") as f:
        off = 0
        while True:
            chunk = f.read(4 << 20)
            if not chunk:
                break
            rh.pwrite(chunk, off)
            off += len(chunk)
    rh.flush()
    rh.shutdown()


def scenario(wd, kind):
    img = wd(f"{kind}.img")
    copy = wd("copy.img")
    make_image(img)
    bs = block_size(img)
    ino, off = imap(img, "/f1")
    orig = read_at(img, off, bs)
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200101")
    new = read_at(copy, off, bs)

    if kind == "file":
        remote = Remote(wd, "remote", ["file", img])
    else:
        remote = Remote(wd, "remote", ["memory", "32M"])
        load(remote, img)
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict")
    rh = remote.connect()
    h = srv.connect()
    check(h.get_size() == rh.get_size(), f"{kind}: size is the remote's")

    # --- pass-through reads and writes -----------------------------------
    check(h.pread(2, 1024 + 56) == b"\x53\xef", f"{kind}: superblock magic")
    check(h.pread(bs, off) == orig, f"{kind}: inode table read through")
    data = bytes(range(256)) * 32
    mark = len(remote.requests())
    h.pwrite(data, DATA)
    check(rh.pread(len(data), DATA) == data,
          f"{kind}: a data write is on the remote at once")
    check(any(r.startswith("Write ") and f"offset={DATA:#x}" in r
              for r in new_requests(remote, mark)),
          f"{kind}: the remote logged the write")

    # --- a time-only write is held until FLUSH ---------------------------
    mark = len(remote.requests())
    h.pwrite(new, off)
    check(rh.pread(bs, off) == orig, f"{kind}: the remote lacks the hold")
    check(h.pread(bs, off) == new, f"{kind}: the client reads the hold")
    check(fs0(srv.stats())["held_blocks"] == 1, f"{kind}: stats: one hold")
    check(not any(f"offset={off:#x}" in r
                  for r in new_requests(remote, mark)
                  if r.startswith("Write ")),
          f"{kind}: no write of the held block reached the remote")
    h.flush()
    reqs = new_requests(remote, mark)
    check(rh.pread(bs, off) == new, f"{kind}: FLUSH wrote the hold back")
    check(fs0(srv.stats())["held_blocks"] == 0, f"{kind}: nothing held")
    wr = [i for i, r in enumerate(reqs)
          if r.startswith("Write ") and f"offset={off:#x}" in r]
    fl = [i for i, r in enumerate(reqs) if r.startswith("Flush ")]
    check(wr and fl and wr[0] < fl[-1],
          f"{kind}: the write-back, then a flush, reached the remote")
    if kind == "file":
        check(read_at(img, off, bs) == new, "file: the image file has it")

    # --- FUA -------------------------------------------------------------
    mark = len(remote.requests())
    h.pwrite(data[::-1], DATA, nbd.CMD_FLAG_FUA)
    check(any(r.startswith("Write ") and f"offset={DATA:#x}" in r
              and "fua=1" in r for r in new_requests(remote, mark)),
          f"{kind}: FUA reached the remote as FUA")

    # --- zero, trim, cache, block status ---------------------------------
    mark = len(remote.requests())
    h.zero(8192, DATA, nbd.CMD_FLAG_NO_HOLE)
    check(rh.pread(8192, DATA) == bytes(8192), f"{kind}: zeroed remotely")
    h.pwrite(data, DATA)
    h.zero(4096, DATA)  # NBD lets the server trim unless NO_HOLE
    zeroes = [r for r in new_requests(remote, mark) if r.startswith("Zero ")]
    check(len(zeroes) == 2 and "trim=0" in zeroes[0]
          and "trim=1" in zeroes[1] and f"offset={DATA:#x}" in zeroes[0],
          f"{kind}: zeroes, with NO_HOLE unless may-trim: {zeroes}")
    if kind == "memory":
        h.zero(4096, DATA, nbd.CMD_FLAG_FAST_ZERO)
        check(any(r.startswith("Zero ") and "fast=1" in r
                  for r in new_requests(remote, mark)),
              "memory: a fast zero reached the remote as one")
    else:
        # nbdkit's file plugin cannot promise a fast zero.
        fails_with("file: fast zero", errno.ENOTSUP,
                   lambda: h.zero(4096, DATA, nbd.CMD_FLAG_FAST_ZERO))
    mark = len(remote.requests())
    h.pwrite(data, DATA + (1 << 20))
    h.trim(1 << 20, DATA)
    h.cache(4096, 0)
    reqs = new_requests(remote, mark)
    check(any(r.startswith("Trim ") and f"offset={DATA:#x}" in r
              for r in reqs), f"{kind}: trim reached the remote")
    check(any(r.startswith("Cache ") for r in reqs),
          f"{kind}: cache reached the remote")

    hx = nbd.NBD()
    hx.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    hx.connect_unix(srv.sock)
    check(hx.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION),
          f"{kind}: base:allocation offered")
    seen = []

    def extents(ctx, offset, entries, err):
        if ctx == nbd.CONTEXT_BASE_ALLOCATION:
            seen.append((offset, list(entries)))
        return 0

    hx.block_status(2 << 20, DATA, extents)
    check(seen and seen[0][1][0] >= 1 << 20 and seen[0][1][1] & 3 == 3,
          f"{kind}: the trimmed range is a hole: {seen[:1]}")
    seen.clear()
    hx.block_status(4096, 0, extents)
    check(seen and seen[0][1][1] & 1 == 0, f"{kind}: block 0 is data")
    hx.shutdown()

    h.shutdown()
    rh.shutdown()
    check(srv.stop() == 0, f"{kind}: the plugin exited cleanly")
    check(remote.stop() == 0, f"{kind}: the remote exited cleanly")
    if kind == "file":
        run("e2fsck", "-fn", img)
        print("ok: file: e2fsck -fn clean")


def max_overlap(remote, op):
    """The most op requests the remote had in flight at once, from its
    log: each request is logged when it arrives and when it returns."""
    most = now = 0
    with open(remote.logfile) as f:
        for line in f:
            if f" {op} id=" in line and line.rstrip().endswith("..."):
                now += 1
                most = max(most, now)
            elif f" ...{op} id=" in line:
                now -= 1
    return most


def pipelining(wd):
    """Many client writes at once are many remote writes at once: the
    threads of the plugin share the remote connections instead of taking
    one each (at most 4 would then be in flight)."""
    img = wd("pipe.img")
    make_image(img)
    remote = Remote(wd, "slow", ["file", img, "wdelay=200ms"],
                    filters=("delay",))
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict")
    h = srv.connect()
    bufs = [nbd.Buffer.from_bytearray(bytearray([i + 1]) * 4096)
            for i in range(16)]
    for i, b in enumerate(bufs):
        h.aio_pwrite(b, DATA + i * 4096)
    while h.aio_in_flight() > 0:
        h.poll(-1)
    most = max_overlap(remote, "Write")
    check(most > 4, f"16 client writes: {most} in flight at the remote at "
          "once (more than one per connection)")
    back = h.pread(16 * 4096, DATA)
    check(all(back[i * 4096:(i + 1) * 4096] == bytes([i + 1]) * 4096
              for i in range(16)), "the 16 writes read back")
    h.shutdown()
    check(srv.stop() == 0, "pipelining: the plugin exited cleanly")
    remote.stop()


def merged_writeback(wd):
    """Held time-only writes of neighbouring inode-table blocks are
    written back as one remote write, not one per block."""
    img = wd("merge.img")
    copy = wd("merge-new.img")
    make_image(img, files=80)
    bs = block_size(img)
    offs = {}
    for i in range(1, 81):
        ino, off = imap(img, f"/f{i}")
        offs.setdefault(off, f"/f{i}")
    first = min(offs)
    run_offs = []
    while first + len(run_offs) * bs in offs:
        run_offs.append(first + len(run_offs) * bs)
    check(len(run_offs) >= 4, f"{len(run_offs)} adjacent inode-table blocks "
          "hold the files")
    debugfs_copy(img, copy, *(f"set_inode_field {offs[o]} atime 20200101"
                              for o in run_offs))
    remote = Remote(wd, "merge", ["file", img])
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict")
    h = srv.connect()
    for o in reversed(run_offs):
        h.pwrite(read_at(copy, o, bs), o)
    check(fs0(srv.stats())["held_blocks"] == len(run_offs),
          f"the {len(run_offs)} time-only writes are held")
    mark = len(remote.requests())
    h.flush()
    writes = [r for r in new_requests(remote, mark) if r.startswith("Write ")]
    want = f"offset={run_offs[0]:#x} count={len(run_offs) * bs:#x}"
    check(len(writes) == 1 and want in writes[0],
          f"one remote write of {len(run_offs)} blocks ({want}): {writes}")
    check(read_at(img, run_offs[0], len(run_offs) * bs)
          == read_at(copy, run_offs[0], len(run_offs) * bs),
          "the remote has every block written back")
    h.shutdown()
    check(srv.stop() == 0, "merged write-back: the plugin exited cleanly")
    remote.stop()


def lost_remote(wd):
    """The remote goes away for good: requests fail with EIO once
    io-timeout has passed without it coming back, none hangs, and the
    plugin still exits cleanly."""
    img = wd("lost.img")
    make_image(img)
    remote = Remote(wd, "lost", ["file", img])
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict", "io-timeout=1s")
    h = srv.connect()
    h.pwrite(b"x" * 4096, DATA)
    h.flush()
    remote.proc.kill()
    remote.proc.wait()
    fails_with("a read after the remote died", errno.EIO,
               lambda: h.pread(4096, DATA + (1 << 20)))
    fails_with("a write after the remote died", errno.EIO,
               lambda: h.pwrite(b"y" * 4096, DATA))
    fails_with("a flush after the remote died", errno.EIO, h.flush)
    h.shutdown()
    check(srv.stop() == 0, "lost remote: the plugin exited cleanly")


wd = Workdir()
try:
    for kind in ("file", "memory"):
        scenario(wd, kind)
    pipelining(wd)
    merged_writeback(wd)
    lost_remote(wd)
finally:
    wd.close()
