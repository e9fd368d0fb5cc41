#!/usr/bin/python3
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


wd = Workdir()
try:
    for kind in ("file", "memory"):
        scenario(wd, kind)
finally:
    wd.close()
