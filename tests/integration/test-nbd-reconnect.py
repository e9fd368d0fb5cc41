#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""nbd=URI when the remote goes away and comes back: the client's
connection through the plugin goes on working once the remote is back;
writes the remote acknowledged but lost with its cache (nbdkit's cache
filter, cache=writeback) are written again before anything else, or,
past what the plugin keeps of them, the next FLUSH fails once -- never
a successful FLUSH with one missing; a remote that stops answering
fails requests with EIO after io-timeout and serves them again once it
answers; a remote back smaller is not used, one back larger is, at the
size it had."""
import errno
import subprocess
import threading

from lazylib import *

require_tools()
if "ext4lazy_nbd=yes" not in run("nbdkit", PLUGIN, "--dump-plugin").split():
    skip("the plugin was built without libnbd (-Dnbd=disabled or no "
         "libnbd-dev), so it has no nbd= backend")

DATA = 24 << 20  # a free data area of the 32M image
MIB = 1 << 20


def cached_remote(wd, img):
    """The file plugin behind a writeback cache: what it acknowledged
    reaches img only on a flush, and dies with the process."""
    return Remote(wd, "remote", ["file", img, "cache=writeback"],
                  filters=("cache",))


def restart(wd, remote, img):
    remote.proc.kill()
    remote.proc.wait()
    return cached_remote(wd, img)


def resized(wd, remote, img, name, size):
    """Kill remote; a new one on a copy of img of another size, and the
    copy's path."""
    remote.proc.kill()
    remote.proc.wait()
    copy = wd(name)
    shutil.copyfile(img, copy)
    os.truncate(copy, size)
    return cached_remote(wd, copy), copy


def retry(what, call, tries=60):
    """call() once the remote is back (the plugin reconnects with a
    backoff): the first success, or fail."""
    for _ in range(tries):
        try:
            return call()
        except nbd.Error:
            time.sleep(0.5)
    check(False, f"{what}: never succeeded")


wd = Workdir()
try:
    img = wd("disk.img")
    make_image(img)
    a = b"\x11" * MIB
    b = b"\x22" * MIB

    # --- killed and restarted: re-sent, replayed ------------------------
    remote = cached_remote(wd, img)
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict", "io-timeout=10s")
    h = srv.connect()
    h.pwrite(a, DATA)
    h.flush()
    h.pwrite(b, DATA + MIB)
    check(read_at(img, DATA + MIB, MIB) != b,
          "the acknowledged write is only in the remote's cache")
    remote = restart(wd, remote, img)
    check(h.pread(MIB, DATA) == a, "a read through the same connection "
          "works once the remote is back")
    check(h.pread(MIB, DATA + MIB) == b, "and reads the acknowledged write")
    h.flush()
    check(read_at(img, DATA + MIB, MIB) == b,
          "the FLUSH succeeded, and the remote has the lost write")
    check("reconnected" in srv.output(), "the log says it reconnected")

    # --- more lost than is kept: the next FLUSH fails once --------------
    # 9 writes of 8M, 72M unflushed: more than the 64M kept.
    for i in range(9):
        h.pwrite(bytes([0x30 + i]) * (8 * MIB), DATA)
    remote = restart(wd, remote, img)
    retry("a read after the restart", lambda: h.pread(4096, 0))
    fails_with("the FLUSH after writes too many to replay were lost",
               errno.EIO, h.flush)
    check("too many to keep" in srv.output(), "the log says why")
    h.pwrite(b"\x44" * MIB, DATA)
    h.flush()
    check(read_at(img, DATA, MIB) == b"\x44" * MIB,
          "the FLUSH after that succeeds and lands the next write")

    # --- nbd-replay=off: nothing replayed, the next FLUSH fails ---------
    h.shutdown()
    check(srv.stop() == 0, "the plugin exited cleanly")
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict", "io-timeout=10s",
                 "nbd-replay=off")
    h = srv.connect()
    h.pwrite(a, DATA)
    h.flush()
    h.pwrite(b, DATA)
    remote = restart(wd, remote, img)
    retry("a read after the restart", lambda: h.pread(4096, 0))
    check(read_at(img, DATA, MIB) == a,
          "with nbd-replay=off the lost write is not written again")
    fails_with("the FLUSH after a reconnect lost an unflushed write",
               errno.EIO, h.flush)
    check("not kept (nbd-replay=off)" in srv.output(), "the log says why")
    h.pwrite(b, DATA)
    h.flush()
    check(read_at(img, DATA, MIB) == b,
          "the FLUSH after that succeeds and lands the write")

    # --- a remote that stops answering ----------------------------------
    h.shutdown()
    check(srv.stop() == 0, "the plugin exited cleanly")
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict", "io-timeout=2s")
    h = srv.connect()
    h.pwrite(a, DATA)
    h.flush()
    sigstop(remote.proc.pid)
    t0 = time.monotonic()
    fails_with("a read while the remote is stopped", errno.EIO,
               lambda: h.pread(4096, DATA + 2 * MIB))
    took = time.monotonic() - t0
    print(f"the read failed after {took:.2f}s")
    check(took < 2 + 3, f"within io-timeout + 3 s ({took:.2f}s)")
    t0 = time.monotonic()
    st = srv.stats()
    took = time.monotonic() - t0
    check("held_blocks" in fs0(st) and took < 1,
          f"stats answer meanwhile, in under a second ({took:.2f}s)")
    check(st["store_errors"] >= 1 and st["last_error_time"] > 0,
          f"and count the failed read: {st['store_errors']}")
    remote.proc.send_signal(signal.SIGCONT)
    check(retry("a read after SIGCONT",
                lambda: h.pread(MIB, DATA)) == a,
          "after SIGCONT requests succeed again")
    h.flush()
    h.shutdown()
    check(srv.stop() == 0, "the plugin exited cleanly")

    # --- the remote stopped with SIGTERM, and a successor -------------
    # nbdkit after SIGTERM answers every request it reads ESHUTDOWN and
    # exits only once its clients have left.  The plugin takes that as
    # a lost connection: it leaves, so the remote exits, and the request
    # waits for the successor.  The remote's cache dies with it: the
    # unflushed write is replayed.
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict", "io-timeout=10s")
    h = srv.connect()
    c = b"\x33" * MIB
    h.pwrite(a, DATA)
    h.flush()
    h.pwrite(b, DATA + MIB)
    old = remote
    old.proc.send_signal(signal.SIGTERM)
    box = {}

    def write_and_flush():
        try:
            h.pwrite(c, DATA + 2 * MIB)
            h.flush()
            box["ok"] = True
        except nbd.Error as e:
            box["error"] = str(e)

    # The successor is started by this thread: nbdkit -f asks for
    # SIGTERM when its parent thread ends (PR_SET_PDEATHSIG).
    writer = threading.Thread(target=write_and_flush)
    writer.start()
    try:
        old.proc.wait(20)
    except subprocess.TimeoutExpired:
        old.proc.kill()
        old.proc.wait()
        check(False, "the remote exited within 20 s of SIGTERM")
    remote = cached_remote(wd, img)
    writer.join(30)
    check(box.get("ok"), f"the write and FLUSH succeeded: {box}")
    check(read_at(img, DATA + MIB, MIB) == b,
          "the write the stopped remote had not flushed is on the store")
    check(read_at(img, DATA + 2 * MIB, MIB) == c,
          "and the write made meanwhile")
    check("the remote is shutting down (ESHUTDOWN)" in srv.output(),
          "the log says why it reconnected")
    # No request at all: the plugin's probe of an idle remote lets it go.
    h.pwrite(a, DATA + MIB)
    old = remote
    old.proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    try:
        old.proc.wait(20)
    except subprocess.TimeoutExpired:
        old.proc.kill()
        old.proc.wait()
    took = time.monotonic() - t0
    check(old.proc.returncode == 0,
          f"an idle remote exited by itself after SIGTERM ({took:.2f}s)")
    remote = cached_remote(wd, img)
    check(retry("a read from the successor",
                lambda: h.pread(MIB, DATA + MIB)) == a,
          "the successor serves the write the old one had not flushed")
    h.flush()
    check(read_at(img, DATA + MIB, MIB) == a, "and the FLUSH lands it")
    h.shutdown()
    check(srv.stop() == 0, "the plugin exited cleanly")

    # --- SIGINT with the remote stopped and a block held ---------------
    # The client leaves once the remote is stopped (nbdkit waits for its
    # connections to end before it stops): the write-back as the last
    # leaves fails after io-timeout, and the one at shutdown does not
    # wait for the remote again.  SIGINT is nbdkit's own stop, which
    # gives the hold up; SIGTERM drains, which fails here and serves on
    # (test-drain.py).
    bs = block_size(img)
    copy = wd("copy.img")
    ino, off = imap(img, "/f1")
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200101")
    new = read_at(copy, off, bs)
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict", "io-timeout=2s")
    h = srv.connect()
    h.pwrite(new, off)
    check(fs0(srv.stats())["held_blocks"] == 1, "a block held")
    sigstop(remote.proc.pid)
    t0 = time.monotonic()
    h.shutdown()
    exited, took = srv.terminate_within(2 + 20, t0, signal.SIGINT)
    remote.proc.send_signal(signal.SIGCONT)
    print(f"SIGINT, remote stopped: exited after {took:.2f}s")
    check(exited, f"exited within io-timeout + 20 s ({took:.2f}s)")
    check("1 held block could not be written back" in srv.output(),
          "the log says how many held blocks were not written back")

    # --- back larger: used at its old size; back smaller: not used ------
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict", "io-timeout=2s")
    h = srv.connect()
    h.pwrite(a, DATA)
    h.flush()
    remote, big = resized(wd, remote, img, "big.img", 64 * MIB)
    check(retry("a read from a remote back larger",
                lambda: h.pread(MIB, DATA)) == a,
          "a remote back larger is used")
    check(h.get_size() == 32 * MIB, "the export keeps its size")
    h.pwrite(b, DATA)
    h.flush()
    check(read_at(big, DATA, MIB) == b, "and writes reach it")
    check("the remote is back with 67108864 bytes, was 33554432" in
          srv.output(), "the log says it grew")
    remote, _ = resized(wd, remote, img, "small.img", 16 * MIB)
    fails_with("a read from a remote back smaller", errno.EIO,
               lambda: h.pread(4096, 0))
    for _ in range(100):
        if "its size is" in srv.output():
            break
        time.sleep(0.1)
    check("its size is 16777216 bytes, was 33554432" in srv.output(),
          "the log says why it is not used")
    fails_with("and later requests fail too", errno.EIO,
               lambda: h.pread(4096, 0))
    h.shutdown()
    srv.stop()
    remote.stop()
finally:
    wd.close()
