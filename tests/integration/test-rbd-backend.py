#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""rbd=POOL/IMAGE: the plugin serves an ext4 image kept in a Ceph RBD
image (a throwaway one-OSD cluster, cephlib.py), and the lazytime
engine works unchanged above it.  Reads are the image's; a data write
is in RADOS after FLUSH (rbd export sees it); a time-only write is held
by the engine (stats and holds say so, RADOS lacks it) until FLUSH; FUA
reaches RADOS without a FLUSH (librbd's cache is in writeback mode, so
neither would without a librbd flush); zero and trim reach it; block
status follows the image's object map (fast-diff), or is all data
without it; a new connection sees a resize; -r refuses writes; SIGTERM
writes holds back; POOL/NAMESPACE/IMAGE is served too."""
import errno
import re

from lazylib import *
from cephlib import Cluster, require_ceph, require_rbd_backend

require_tools()
require_rbd_backend(PLUGIN)
require_ceph()

OBJ = 4 << 20  # RBD's default object size: the unit of its object map


def zero_objects(img):
    """Offsets of the object-sized chunks of img that are all zeroes:
    rbd import does not write them, so they are holes in RADOS."""
    found = []
    with open(img, "rb") as f:
        off = 0
        while True:
            chunk = f.read(OBJ)
            if not chunk:
                break
            if chunk.count(0) == len(chunk):
                found.append(off)
            off += len(chunk)
    return found


def status(srv, off, length):
    """base:allocation over [off, off+length): [(offset, length, flags)]."""
    hx = nbd.NBD()
    hx.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    hx.connect_unix(srv.sock)
    if not hx.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION):
        check(False, "base:allocation offered")
    seen = []

    def extents(ctx, offset, entries, err):
        if ctx == nbd.CONTEXT_BASE_ALLOCATION:
            pos = offset
            for i in range(0, len(entries), 2):
                seen.append((pos, entries[i], entries[i + 1]))
                pos += entries[i]
        return 0

    pos = off
    while pos < off + length:
        seen.clear()
        hx.block_status(off + length - pos, pos, extents)
        if not seen:
            break
        done = list(seen)
        pos = done[-1][0] + done[-1][1]
        yield from done
    hx.shutdown()


def covered(srv, off, length, hole):
    """Is [off, off+length) all hole (hole=True) or all data?"""
    ext = [e for e in status(srv, off, length) if e[0] < off + length]
    return bool(ext) and all(bool(flags & 1) == hole
                             for _, _, flags in ext)


def refuses(what, call):
    """A write to a read-only export fails as nbdkit fails it."""
    try:
        call()
    except nbd.Error as e:
        check(e.errno in ("EPERM", "EROFS"), f"{what}: {e.errno}")
        return
    check(False, f"{what}: succeeded on a read-only export")


def serve(wd, *params):
    """A Server that the finally clause below kills if the test fails."""
    srv = Server(wd, *params)
    servers.append(srv)
    return srv


def sub(wd, prefix):
    """A Workdir-like namer, so a second Server gets its own sockets."""
    return lambda name: wd(f"{prefix}-{name}")


servers = []
wd = Workdir()
cluster = Cluster(wd("ceph"))
try:
    img = wd("disk.img")
    exp = wd("export.img")
    copy = wd("copy.img")
    make_image(img, size="64M")
    size = os.path.getsize(img)
    bs = block_size(img)
    ino, off = imap(img, "/f1")
    orig = read_at(img, off, bs)
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200101")
    new = read_at(copy, off, bs)
    zeros = zero_objects(img)
    check(len(zeros) >= 3, f"the image has {len(zeros)} all-zero objects")
    HOLE, TRIM, DATA = zeros[-1], zeros[-2], zeros[-3]

    cluster.start()
    # librbd's cache in writeback mode, so that a write nbdkit does not
    # flush stays in its memory (the default, writearound, sends every
    # write at once): FLUSH and FUA must make it a librbd flush.
    conf = "ceph-conf=" + cluster.client_conf(
        "writeback.conf", rbd_cache_policy="writeback",
        rbd_cache_writethrough_until_flush="false",
        rbd_cache_max_dirty_age=30)
    cluster.import_image(img, "disk")
    check("fast-diff" in cluster.rbd("info", "rbd/disk"),
          "the imported image has fast-diff")
    srv = serve(wd, "rbd=rbd/disk", conf, "policy=strict")
    h = srv.connect()
    check(h.get_size() == size, "size is the image's")

    # --- reads ------------------------------------------------------------
    with open(img, "rb") as f:
        same = all(h.pread(OBJ, o) == f.read(OBJ)
                   for o in range(0, size, OBJ))
    check(same, "every byte read equals the image")
    check(h.pread(2, 1024 + 56) == b"\x53\xef", "superblock magic")

    # --- a data write, a hold, FLUSH ---------------------------------------
    data = bytes(range(256)) * 32
    h.pwrite(data, DATA)
    check(h.pread(len(data), DATA) == data, "a data write reads back")
    h.pwrite(new, off)
    check(h.pread(bs, off) == new, "the client reads the hold")
    st = fs0(srv.stats())
    held = json.loads(srv.ctl_cmd("holds", "--json"))
    check(st["held_blocks"] == 1
          and [(b["offset"], b["kind"]) for b in held["holds"]]
          == [(off, "inplace")],
          f"the engine holds the inode-table block: {held['holds']}")
    # Held in the engine, so librbd never had it (its own cache is not
    # in question): RADOS must lack it.
    cluster.export_image("disk", exp)
    check(read_at(exp, off, bs) == orig, "RADOS lacks the held block")
    check(read_at(exp, DATA, len(data)) != data,
          "librbd's cache holds the unflushed data write")
    h.flush()
    check(fs0(srv.stats())["held_blocks"] == 0, "nothing held after FLUSH")
    cluster.export_image("disk", exp)
    check(read_at(exp, DATA, len(data)) == data,
          "after FLUSH, RADOS has the data write")
    check(read_at(exp, off, bs) == new,
          "after FLUSH, RADOS has the written-back hold")
    check(fs0(srv.stats())["writeback"]["flush"] == 1, "stats: flush=1")

    # --- FUA -------------------------------------------------------------
    h.pwrite(data[::-1], DATA + bs, nbd.CMD_FLAG_FUA)
    cluster.export_image("disk", exp)
    check(read_at(exp, DATA + bs, len(data)) == data[::-1],
          "a FUA write is in RADOS without a FLUSH")

    # --- zero, trim --------------------------------------------------------
    h.zero(8192, DATA, nbd.CMD_FLAG_NO_HOLE)
    check(h.pread(8192, DATA) == bytes(8192), "zero (no hole) reads zero")
    h.pwrite(data, DATA + 3 * bs)
    h.zero(len(data), DATA + 3 * bs)  # may trim
    check(h.pread(len(data), DATA + 3 * bs) == bytes(len(data)),
          "zero (may trim) reads zero")
    h.flush()
    cluster.export_image("disk", exp)
    check(read_at(exp, DATA, 8192) == bytes(8192)
          and read_at(exp, DATA + 3 * bs, len(data)) == bytes(len(data)),
          "both zeroes are in RADOS")

    h.trim(1 << 20, DATA + (1 << 20))
    check(True, "a trim inside an object is accepted")
    h.pwrite(b"\xa5" * OBJ, TRIM)
    h.flush()
    check(covered(srv, TRIM, OBJ, hole=False), "a written object is data")
    h.trim(OBJ, TRIM)
    h.flush()
    check(h.pread(OBJ, TRIM) == bytes(OBJ), "a trimmed object reads zero")
    check(covered(srv, TRIM, OBJ, hole=True), "a trimmed object is a hole")

    # --- block status ------------------------------------------------------
    check(covered(srv, HOLE, OBJ, hole=True),
          f"a never-written object ({HOLE}) is a hole")
    check(covered(srv, 0, bs, hole=False), "block 0 is data")
    check(covered(srv, DATA, bs, hole=False), "the written object is data")

    # --- resize ------------------------------------------------------------
    cluster.rbd("resize", "--size", f"{2 * size}B", "rbd/disk")
    check(cluster.image_size("disk") == 2 * size, "rbd resize grew it")
    h2 = srv.connect()
    check(h2.get_size() == 2 * size, "a new connection sees the new size")
    check(h2.pread(bs, 2 * size - bs) == bytes(bs), "the new end reads zero")
    h.set_strict_mode(0)
    fails_with("the old connection, past its own size", errno.EINVAL,
               lambda: h.pread(bs, size))
    h2.shutdown()

    # --- SIGTERM with a hold -----------------------------------------------
    cluster.export_image("disk", exp)
    debugfs_copy(exp, copy, f"set_inode_field <{ino ^ 1}> atime 20210101")
    new2 = read_at(copy, off, bs)
    check(new2 != read_at(exp, off, bs), "debugfs made another change")
    h.pwrite(new2, off)
    check(fs0(srv.stats())["held_blocks"] == 1, "held again")
    h.shutdown()
    check(srv.stop() == 0, "SIGTERM: the plugin exited cleanly")
    cluster.export_image("disk", exp)
    check(read_at(exp, off, bs) == new2, "SIGTERM wrote the hold back")
    run("e2fsck", "-fn", exp)
    check(True, "e2fsck -fn clean on the exported image")

    # --- read-only -----------------------------------------------------------
    ro = serve(sub(wd, "ro"), "rbd=rbd/disk", conf, "-r")
    h = ro.connect()
    check(h.is_read_only(), "-r: the export is read-only")
    check(h.pread(bs, off) == new2, "-r: reads the image")
    h.set_strict_mode(0)
    refuses("-r: write", lambda: h.pwrite(data, DATA))
    refuses("-r: zero", lambda: h.zero(4096, DATA))
    h.shutdown()
    check(ro.stop() == 0, "-r: the plugin exited cleanly")

    # --- without fast-diff: all data; in a namespace -------------------------
    cluster.create_image("plain", 16 << 20,
                         features=["layering", "exclusive-lock"])
    cluster.rbd("namespace", "create", "rbd/ns")
    cluster.create_image("rbd/ns/small", 8 << 20)
    for spec, what in (("rbd/plain", "no fast-diff"),
                       ("rbd/ns/small", "a namespace")):
        s = serve(sub(wd, spec.replace("/", "-")), f"rbd={spec}", conf)
        h = s.connect()
        check(h.get_size() == cluster.image_size(spec),
              f"{what}: {spec} is served at its size")
        if spec == "rbd/plain":
            check(covered(s, 0, h.get_size(), hole=False),
                  "no fast-diff: a never-written image is all data")
        else:
            check(covered(s, OBJ, OBJ, hole=True),
                  "a namespace: its never-written object is a hole")
        h.pwrite(b"x" * 512, 0, nbd.CMD_FLAG_FUA)
        h.shutdown()
        check(s.stop() == 0, f"{what}: the plugin exited cleanly")
        cluster.export_image(spec, exp)
        check(read_at(exp, 0, 512) == b"x" * 512, f"{what}: FUA reached it")

    # --- a write-back of neighbouring holds is one OSD write -----------------
    # librbd's default cache policy (writearound) sends each write to the
    # OSD as it comes: only the backend's merging of adjacent writes
    # makes the write-back of 8 neighbouring held blocks one operation.
    mimg = wd("merge.img")
    make_image(mimg, size="64M", files=140)  # inodes over 9 itable blocks
    cluster.import_image(mimg, "merge")
    first = imap(mimg, "/f1")[1]
    debugfs_copy(mimg, copy, *[f"set_inode_field /f{i} atime 20200303"
                               for i in range(1, 141)])
    blocks = [b for b in range(first, first + 8 * bs, bs)
              if read_at(copy, b, bs) != read_at(mimg, b, bs)]
    check(len(blocks) == 8, f"8 neighbouring inode-table blocks changed "
          f"({len(blocks)})")
    s = serve(sub(wd, "merge"), "rbd=rbd/merge", f"ceph-conf={cluster.conf}",
              "policy=strict")
    h = s.connect()
    for b in blocks:
        h.pwrite(read_at(copy, b, bs), b)
    check(fs0(s.stats())["held_blocks"] == 8, "the 8 blocks are held")
    before = cluster.osd_perf()["osd"]["op_w"]
    h.flush()
    writes = cluster.osd_perf()["osd"]["op_w"] - before
    check(fs0(s.stats())["held_blocks"] == 0, "FLUSH wrote them back")
    check(writes == 1, f"as one OSD write (op_w +{writes})")
    h.shutdown()
    check(s.stop() == 0, "merge: the plugin exited cleanly")
    cluster.export_image("merge", exp)
    check(all(read_at(exp, b, bs) == read_at(copy, b, bs) for b in blocks),
          "RADOS has the 8 blocks")

    # --- journal blocks passed through are one batch, one OSD write ----------
    # Under policy=atime every journal block goes through the follower;
    # those that pass are gathered and written together, so 8 of them in
    # one client write are one OSD write here (one per block otherwise).
    # A partial journal block write first makes the engine lose track of
    # the log: until the log is empty again, every journal block passes.
    jimg = wd("journal.img")
    make_image(jimg, size="64M", opts=())
    out = run("debugfs", "-R", "stat <8>", jimg)
    # The journal's longest extent (mkfs may split a small one).
    jstart, jend = max(((int(a), int(b)) for a, b in
                        re.findall(r"\(\d+-\d+\):(\d+)-(\d+)", out)),
                       key=lambda x: x[1] - x[0])
    check(jend - jstart > 208, f"a journal extent of {jend - jstart + 1} "
          "blocks")
    cluster.import_image(jimg, "journal")
    s = serve(sub(wd, "journal"), "rbd=rbd/journal",
              f"ceph-conf={cluster.conf}", "policy=atime")
    h = s.connect()
    jbytes = bytes(range(256)) * (8 * bs // 256)
    joff = (jstart + 200) * bs  # far past the log's head: no transaction
    h.pwrite(b"\x5a" * 512, joff - bs)
    before = cluster.osd_perf()["osd"]["op_w"]
    h.pwrite(jbytes, joff)
    writes = cluster.osd_perf()["osd"]["op_w"] - before
    st = fs0(s.stats())
    check(st["journal_writes"] == 9 and st["held_blocks"] == 0,
          f"journal: 9 journal block writes, none held ({st})")
    check(writes == 1, f"8 journal blocks passed through as one OSD write "
          f"(op_w +{writes})")
    h.flush()
    h.shutdown()
    check(s.stop() == 0, "journal: the plugin exited cleanly")
    cluster.export_image("journal", exp)
    check(read_at(exp, joff, len(jbytes)) == jbytes, "RADOS has them")
finally:
    # Before the cluster: librbd would wait for it for ever.
    for srv in servers:
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()
    cluster.stop()
    wd.close()
