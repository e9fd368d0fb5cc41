#!/usr/bin/python3
"""rbd=POOL/IMAGE io-timeout=5s when the cluster stops answering (its
only OSD SIGSTOPped): a FLUSH over a held block fails within io-timeout
and some slack; the control socket answers stats and holds meanwhile
in under a second; the held block stays readable, at once; once the
OSD is continued a FLUSH lands the block (rbd export sees it).  SIGINT (nbdkit's own stop) while the OSD is
stopped: the server exits within io-timeout + 5 s and says how many
held blocks it could not write back."""
import errno
import threading

from lazylib import *
from cephlib import Cluster, require_ceph, require_rbd_backend

require_tools()
require_rbd_backend(PLUGIN)
require_ceph()

IO_TIMEOUT = 5
# What a FLUSH may take past io-timeout: a write-back and its flush
# are two requests, each bounded by io-timeout, plus scheduling on a
# loaded machine.
SLACK = IO_TIMEOUT + 10


def timed(call):
    """(seconds call() took, its result or the nbd.Error it raised)."""
    t0 = time.monotonic()
    try:
        r = call()
    except nbd.Error as e:
        r = e
    return time.monotonic() - t0, r


def watch(call, stop, took):
    """call() again and again until stop is set: how long each took."""
    while not stop.is_set():
        t, _ = timed(call)
        took.append(t)
        time.sleep(0.2)


def flush_until_it_lands(h, what, tries=60):
    """After SIGCONT the first FLUSH may still fail (the failure is
    reported once); one must succeed within about half a minute."""
    for _ in range(tries):
        try:
            h.flush()
            return
        except nbd.Error:
            time.sleep(0.5)
    check(False, f"{what}: no FLUSH succeeded after SIGCONT")


servers = []
wd = Workdir()
cluster = Cluster(wd("ceph"))
osd = None
try:
    img = wd("disk.img")
    exp = wd("export.img")
    copy = wd("copy.img")
    make_image(img, size="64M")
    bs = block_size(img)
    ino, off = imap(img, "/f1")
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200101")
    new = read_at(copy, off, bs)
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20210101")
    new2 = read_at(copy, off, bs)

    cluster.start()
    osd = cluster.pids["osd"]
    cluster.import_image(img, "disk")
    conf = f"ceph-conf={cluster.conf}"
    srv = Server(wd, "rbd=rbd/disk", conf, "policy=strict",
                 f"io-timeout={IO_TIMEOUT}s", verbose=True)
    servers.append(srv)
    h = srv.connect()
    reader = srv.connect()

    # --- a FLUSH over a held block, the OSD stopped ------------------------
    h.pwrite(new, off)
    check(fs0(srv.stats())["held_blocks"] == 1, "the block is held")
    sigstop(osd)
    stop = threading.Event()
    took, took_holds = [], []
    watchers = [threading.Thread(target=watch, args=(srv.stats, stop, took)),
                threading.Thread(target=watch,
                                 args=(lambda: srv.ctl_cmd("holds"), stop,
                                       took_holds))]
    flushed = []
    flusher = threading.Thread(target=lambda: flushed.append(timed(h.flush)))
    flusher.start()
    # Once the FLUSH's write-back is on its way: holds then lists the
    # holds without reading the store.  (Before, it would read it, and
    # wait for it as any request does.)
    time.sleep(1)
    for w in watchers:
        w.start()
    t_read, data = timed(lambda: reader.pread(bs, off))
    flusher.join()
    t_flush, r = flushed[0]
    stop.set()
    for w in watchers:
        w.join()
    print(f"FLUSH failed after {t_flush:.2f}s; stats took at most "
          f"{max(took):.3f}s over {len(took)} calls, holds at most "
          f"{max(took_holds):.3f}s; the read took {t_read:.3f}s")
    check(isinstance(r, nbd.Error) and r.errno == "EIO",
          f"the FLUSH with the OSD stopped fails with EIO: {r!r}")
    check(t_flush <= IO_TIMEOUT + SLACK,
          f"within io-timeout + {SLACK}s: {t_flush:.2f}s")
    check(len(took) >= 3 and max(took) < 1.0,
          f"stats answered in under a second meanwhile: {took}")
    check(len(took_holds) >= 3 and max(took_holds) < 1.0,
          f"and holds (which then does not read the store): {took_holds}")
    check(data == new, "the held block reads as written, OSD stopped")
    check(t_read < 1.0, f"and at once: {t_read:.3f}s")
    st = srv.stats()
    check(fs0(st)["held_blocks"] == 1, "the block is still held")
    check(st["store_errors"] >= 1 and st["last_error_time"] > 0,
          f"the failed request is counted: {st['store_errors']}")

    # --- continued: a FLUSH lands it ---------------------------------------
    os.kill(osd, signal.SIGCONT)
    flush_until_it_lands(h, "after SIGCONT")
    check(fs0(srv.stats())["held_blocks"] == 0, "nothing held after it")
    cluster.export_image("disk", exp)
    check(read_at(exp, off, bs) == new, "rbd export has the held block")

    # --- SIGINT with the OSD stopped -----------------------------------------
    # The clients leave once the OSD is stopped (nbdkit waits for its
    # connections to end before it stops): the write-back as the last
    # leaves fails after io-timeout, and the one at shutdown does not
    # wait for the store again.  SIGINT is nbdkit's own stop, which gives
    # the hold up; SIGTERM drains, which fails here and serves on.
    h.pwrite(new2, off)
    check(fs0(srv.stats())["held_blocks"] == 1, "held again")
    sigstop(osd)
    t0 = time.monotonic()
    h.shutdown()
    reader.shutdown()
    exited, t_exit = srv.terminate_within(IO_TIMEOUT + 5, t0, signal.SIGINT)
    os.kill(osd, signal.SIGCONT)
    print(f"SIGINT: exited after {t_exit:.2f}s")
    check(exited, f"SIGINT, OSD stopped: exited within io-timeout + 5 s "
          f"({t_exit:.2f}s)")
    check("1 held block could not be written back" in srv.output(),
          "the log says how many held blocks were not written back")
    cluster.export_image("disk", exp)
    check(read_at(exp, off, bs) == new,
          "the image has the last block that was flushed")
    run("e2fsck", "-fn", exp)
    check(True, "e2fsck -fn clean on the exported image")
finally:
    if osd:
        try:
            os.kill(osd, signal.SIGCONT)
        except ProcessLookupError:
            pass
    for s in servers:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
    cluster.stop()
    wd.close()
