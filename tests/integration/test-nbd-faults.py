#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""nbd=URI when the remote fails or lacks something: EIO from the remote
reaches the client on pass-through reads, writes and zeroes; EIO while
holds are written back fails the FLUSH, keeps the hold and the next
FLUSH writes it; ENOSPC and EPERM do the same and reach the client as
they are; so does EIO from the remote's own flush (a remote made
with the eval plugin, since the error filter cannot fail flushes); a
remote without FUA gets the write and then a flush; a remote without
multi-conn gets one connection, with it several."""
import errno

from lazylib import *

require_tools()
if "ext4lazy_nbd=yes" not in run("nbdkit", PLUGIN, "--dump-plugin").split():
    skip("the plugin was built without libnbd (-Dnbd=disabled or no "
         "libnbd-dev), so it has no nbd= backend")

DATA = 24 << 20  # a free data area of the 32M image


def connects(remote):
    with open(remote.logfile) as f:
        return sum(" Connect export=" in line for line in f)


wd = Workdir()
try:
    img = wd("disk.img")
    copy = wd("copy.img")
    make_image(img)
    bs = block_size(img)
    ino, off = imap(img, "/f1")
    orig = read_at(img, off, bs)

    def atime_block(value):
        debugfs_copy(img, copy, f"set_inode_field /f1 atime {value}")
        return read_at(copy, off, bs)

    # --- EIO from the remote --------------------------------------------
    remote = Remote(wd, "remote", ["file", img], inject=True)
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict")
    h = srv.connect()
    rh = remote.connect()
    data = b"\xa5" * 8192
    h.pwrite(data, DATA)

    remote.set_faulty(True)
    fails_with("pass-through read", errno.EIO, lambda: h.pread(4096, DATA))
    fails_with("pass-through write", errno.EIO,
               lambda: h.pwrite(b"x" * 4096, DATA))
    fails_with("FUA write", errno.EIO,
               lambda: h.pwrite(b"x" * 4096, DATA, nbd.CMD_FLAG_FUA))
    fails_with("zero", errno.EIO,
               lambda: h.zero(4096, DATA, nbd.CMD_FLAG_NO_HOLE))
    remote.set_faulty(False)
    # A failed FUA write counts as a failed sync: the next FLUSH says so
    # once, as fdatasync would after a failed write-back.
    fails_with("the FLUSH after a failed FUA write", errno.EIO, h.flush)
    h.flush()
    print("ok: the FLUSH after that succeeds")
    check(h.pread(8192, DATA) == data, "the store still has the old data")

    # --- EIO while holds are written back ------------------------------
    new = atime_block("20200101")
    h.pwrite(new, off)
    check(fs0(srv.stats())["held_blocks"] == 1, "one hold")
    remote.set_faulty(True)
    fails_with("FLUSH over a failed write-back", errno.EIO, h.flush)
    remote.set_faulty(False)
    check(fs0(srv.stats())["held_blocks"] == 1, "the hold is kept")
    check(rh.pread(bs, off) == orig, "the remote does not have it")
    check(h.pread(bs, off) == new, "the client still reads the hold")
    h.flush()
    print("ok: the next FLUSH succeeds")
    check(rh.pread(bs, off) == new, "and the remote has the hold")
    check(read_at(img, off, bs) == new, "the image file too")
    check(fs0(srv.stats())["held_blocks"] == 0, "nothing held")
    h.shutdown()
    rh.shutdown()
    check(srv.stop() == 0, "the plugin exited cleanly")
    remote.stop()

    # --- ENOSPC and EPERM from the remote -------------------------------
    # The remote's errno reaches the client, on pass-through and through
    # a write-back.
    for err, want, day in (("ENOSPC", errno.ENOSPC, "20200103"),
                           ("EPERM", errno.EPERM, "20200104")):
        remote = Remote(wd, f"remote-{err}", ["file", img], inject=True,
                        error=err)
        srv = Server(wd, f"nbd={remote.uri}", "policy=strict")
        h = srv.connect()
        new = atime_block(day)
        h.pwrite(new, off)
        check(fs0(srv.stats())["held_blocks"] == 1, f"{err}: one hold")
        remote.set_faulty(True)
        fails_with(f"{err}: pass-through write", want,
                   lambda: h.pwrite(b"y" * 4096, DATA))
        fails_with(f"{err}: FLUSH over a failed write-back", want, h.flush)
        remote.set_faulty(False)
        check(fs0(srv.stats())["held_blocks"] == 1,
              f"{err}: the hold is kept")
        h.flush()
        check(read_at(img, off, bs) == new,
              f"{err}: once the remote takes writes, the hold reaches it")
        h.shutdown()
        check(srv.stop() == 0, f"{err}: the plugin exited cleanly")
        remote.stop()

    # --- EIO from the remote's flush ------------------------------------
    # The eval plugin over a copy of the image, whose flush fails while
    # the file flag exists (nbdkit 1.32's error filter cannot fail one).
    flag = wd("flush.fail")
    rimg = wd("eval.img")
    shutil.copyfile(img, rimg)
    remote = Remote(wd, "evalremote", [
        "eval",
        f"get_size=stat -L -c %s {rimg}",
        f"pread=dd if={rimg} skip=$4 count=$3 iflag=skip_bytes,count_bytes "
        "status=none",
        f"pwrite=dd of={rimg} seek=$4 conv=notrunc oflag=seek_bytes "
        "status=none",
        f"flush=if [ -e {flag} ]; then echo 'EIO flush failed' >&2; exit 1;"
        f" fi; sync {rimg}",
    ])
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict")
    h = srv.connect()
    h.pwrite(data, DATA)
    h.flush()
    print("ok: FLUSH through a working flush")
    new = atime_block("20200102")
    h.pwrite(new, off)
    check(fs0(srv.stats())["held_blocks"] == 1, "flush faults: one hold")
    open(flag, "w").close()
    fails_with("FLUSH over a failed remote flush", errno.EIO, h.flush)
    check(fs0(srv.stats())["held_blocks"] == 1,
          "the hold is kept when the remote's flush failed")
    check(h.pread(bs, off) == new, "the client still reads the hold")
    fails_with("FLUSH while the remote's flush still fails", errno.EIO,
               h.flush)
    fails_with("FUA write while the remote's flush fails", errno.EIO,
               lambda: h.pwrite(data, DATA, nbd.CMD_FLAG_FUA))
    os.unlink(flag)
    fails_with("the FLUSH after a failed FUA write, once", errno.EIO, h.flush)
    h.flush()
    print("ok: the next FLUSH succeeds once the remote recovers")
    check(fs0(srv.stats())["held_blocks"] == 0, "flush faults: nothing held")
    check(read_at(rimg, off, bs) == new, "the remote's file has the hold")
    check(read_at(rimg, DATA, len(data)) == data, "and the data")
    h.shutdown()
    check(srv.stop() == 0, "the plugin exited cleanly")
    remote.stop()

    # --- a remote without FUA: the write, then a flush ------------------
    # fuamode=none is the fua filter's default (1.32 refuses to be told).
    remote = Remote(wd, "nofua", ["file", img],
                    filters=("fua",))
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict")
    h = srv.connect()
    mark = len(remote.requests())
    h.pwrite(data, DATA, nbd.CMD_FLAG_FUA)
    reqs = remote.requests()[mark:]
    wr = [i for i, r in enumerate(reqs)
          if r.startswith("Write ") and f"offset={DATA:#x}" in r]
    fl = [i for i, r in enumerate(reqs) if r.startswith("Flush ")]
    check(wr and "fua=0" in reqs[wr[0]], f"the write without FUA: {reqs}")
    check(fl and fl[0] > wr[0], "then a flush")
    mark = len(remote.requests())
    h.zero(4096, DATA, nbd.CMD_FLAG_FUA | nbd.CMD_FLAG_NO_HOLE)
    reqs = remote.requests()[mark:]
    # (reads aside: the probe of an idle remote is one)
    check([r.split()[0] for r in reqs if not r.startswith("Read ")]
          == ["Zero", "Flush"]
          and "fua=0" in reqs[0], f"a FUA zero: zero, then flush: {reqs}")
    h.shutdown()
    check(srv.stop() == 0, "the plugin exited cleanly")
    remote.stop()

    # --- a remote that refuses unaligned requests ----------------------
    remote = Remote(wd, "aligned",
                    ["memory", "32M", "blocksize-minimum=4096",
                     "blocksize-error-policy=error"],
                    filters=("blocksize-policy",))
    rh = remote.connect()
    with open(img, "rb") as f:
        rh.pwrite(f.read(), 0)
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict")
    h = srv.connect()
    odd = bytes(range(251)) * 12
    h.pwrite(odd, DATA + 123)
    check(h.pread(len(odd), DATA + 123) == odd, "aligned remote: odd write")
    check(rh.pread(8192, DATA)[123:123 + len(odd)] == odd,
          "aligned remote: it has it")
    h.zero(1000, DATA + 500, nbd.CMD_FLAG_NO_HOLE)
    want = odd[:377] + bytes(1000) + odd[1377:]
    check(h.pread(len(odd), DATA + 123) == want, "aligned remote: odd zero")
    h.trim(10000, DATA + 100)
    h.cache(100, 7)
    h.flush()
    ok = all(not r.startswith(("Read ", "Write ", "Zero ", "Trim ", "Cache "))
             or ("offset=0x" in r and int(r.split("offset=")[1].split()[0],
                                          16) % 4096 == 0)
             for r in remote.requests())
    check(ok, "aligned remote: every request it got was aligned")
    h.shutdown()
    rh.shutdown()
    check(srv.stop() == 0, "the plugin exited cleanly")
    remote.stop()

    # --- multi-conn: several connections, or exactly one ----------------
    for mode, want in (("plugin", 4), ("disable", 1)):
        remote = Remote(wd, f"mc-{mode}",
                        ["memory", "32M", f"multi-conn-mode={mode}"],
                        filters=("multi-conn",))
        srv = Server(wd, f"nbd={remote.uri}", "policy=strict")
        got = connects(remote)
        check(got == want, f"multi-conn-mode={mode}: {want} connection(s) "
              f"(got {got})")
        h = srv.connect()
        h.pwrite(data, DATA)
        h.flush()
        check(h.pread(8192, DATA) == data, f"multi-conn-mode={mode}: works")
        h.shutdown()
        check(srv.stop() == 0, "the plugin exited cleanly")
        remote.stop()
finally:
    wd.close()
