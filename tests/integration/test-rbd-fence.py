#!/usr/bin/python3
"""rbd=POOL/IMAGE when the image's exclusive lock is lost or its owner
dies, against one throwaway Ceph cluster.

Fencing: a server holds an atime change in an inode-table block; "rbd
lock rm" breaks its lock, which blocklists its client; a second server
(another client id) takes the image and writes a real change to the
same block.  The first is fenced: its client's writes and FLUSH fail,
it holds nothing, its stats say "fenced", and at SIGTERM it writes
nothing (the image has the second server's bytes) and exits with status
3, not 0.  Once with the
first's client writing after the break, once with the first left idle
(its watch finds the lock lost, then SIGTERM), and once
with the first stopped (SIGSTOP) until the second took the lock over as from a
dead owner, then continued.

Takeover: a server with flushed real changes and held atime changes is
killed (SIGKILL); a new server (another client id) starts at once and
waits in rbd_lock_acquire until librbd breaks the dead owner's lock,
once the OSD has dropped the dead client's watch
(osd_client_watch_timeout, 30 s by default; a start refused meanwhile
is tried again each second); the time that takes is printed.  Again
with osd_client_watch_timeout 10 s.  The image is then e2fsck-clean,
has every block a FLUSH acknowledged and differs from the last state
written only in atime fields of blocks that were held."""
import errno
import signal

from lazylib import *
from cephlib import Cluster, require_ceph, require_rbd_backend

require_tools()
require_rbd_backend(PLUGIN)
require_ceph()

# Bytes of an inode a held atime change may leave different (as in
# test-rbd-crash.py): i_atime, i_atime_extra and the checksum.
ATIME_BYTES = set()
for a, n in ((0x08, 4), (0x8C, 4), (0x7C, 2), (0x82, 2)):
    ATIME_BYTES.update(range(a, a + n))
ISIZE = 256

# The exit status of a fenced server (plugin/ext4lazy.c).
EXIT_FENCED = 3


def lockers(cluster, name):
    """The image's lockers: [(lock id, locker, address)]."""
    out = json.loads(cluster.rbd("lock", "ls", "--format", "json",
                                 cluster.spec(name)))
    if isinstance(out, dict):  # older rbd: {id: {locker, address}}
        out = [dict(v, id=k) for k, v in out.items()]
    return [(lk["id"], lk["locker"], lk["address"]) for lk in out]


def blocklist(cluster):
    p = subprocess.run(["ceph", "osd", "blocklist", "ls"], env=cluster.env,
                       capture_output=True, text=True, timeout=60)
    return p.stdout


def blocks_of(path, bs):
    with open(path, "rb") as f:
        data = f.read()
    return [data[i:i + bs] for i in range(0, len(data), bs)]


def data_block(img, name):
    out = run("debugfs", "-R", f"bmap {name} 0", img)
    return int(out.strip().splitlines()[-1])


def same_block(img):
    """Two files whose inodes share an inode-table block, and its
    offset."""
    seen = {}
    for i in range(1, 41):
        _, off = imap(img, f"/f{i}")
        if off in seen:
            return seen[off], f"/f{i}", off
        seen[off] = f"/f{i}"
    raise RuntimeError("no two inodes in one block")


def fence(wd, cluster, conf, base, name, client_after_break, stall=False):
    """The first server's lock broken with "rbd lock rm", or (stall)
    taken over while the first is stopped (SIGSTOP) and its watch
    lapses; the first continued (SIGCONT) once the second serves."""
    bs = block_size(base)
    cluster.import_image(base, name)
    fa, fb, off = same_block(base)
    debugfs_copy(base, wd("atime.img"),
                 f"set_inode_field {fa} atime @1700000000")
    debugfs_copy(base, wd("real.img"), f"set_inode_field {fb} mode 0100600")
    held = read_at(wd("atime.img"), off, bs)
    real = read_at(wd("real.img"), off, bs)
    orig = read_at(base, off, bs)
    check(len({held, real, orig}) == 3, f"{name}: three different blocks")
    dblk = data_block(base, "/f3") * bs
    dorig = read_at(base, dblk, bs)

    spec = f"rbd=rbd/{name}"
    first = Server(lambda n: wd("first-" + n), spec, conf, "policy=atime")
    second = None
    try:
        ha = first.connect()
        ha.pwrite(held, off)
        ha.flush()
        st = fs0(first.stats())
        check(st["held_blocks"] == 1,
              f"{name}: the first server holds the atime change past a "
              f"FLUSH ({st['held_blocks']} held)")

        lk = lockers(cluster, name)
        check(len(lk) == 1, f"{name}: one locker: {lk}")
        lock_id, locker, addr = lk[0]
        if stall:
            sigstop(first.proc.pid)
            stopped = time.monotonic()
        else:
            cluster.rbd("lock", "rm", cluster.spec(name), lock_id, locker)
            check(lockers(cluster, name) == [], f"{name}: rbd lock rm "
                  f"broke {locker}'s lock")

        second = Server(lambda n: wd("second-" + n), spec, conf,
                        "ceph-id=second", "policy=atime", start_timeout=120)
        if stall:
            print(f"{name}: the second server took the lock "
                  f"{time.monotonic() - stopped:.1f} s after the first "
                  f"was stopped")
            first.proc.send_signal(signal.SIGCONT)
        check(addr in blocklist(cluster),
              f"{name}: {locker} at {addr} is blocklisted")
        hb = second.connect()
        check(hb.pread(bs, off) == orig,
              f"{name}: the second server reads the block without the "
              f"first's hold")
        hb.pwrite(real, off)
        hb.flush()
        st = fs0(second.stats())
        check(st["held_blocks"] == 0 and st["real_writes"] == 1,
              f"{name}: the second server wrote a real change "
              f"({st['real_writes']} real, {st['held_blocks']} held)")
        check(lockers(cluster, name)[0][1] != locker,
              f"{name}: the second server has the lock")
        check(second.stats()["fenced"] is None,
              f"{name}: the second is not fenced")

        if client_after_break:
            new = bytes(b ^ 0xFF for b in dorig)
            fails_with(f"{name}: the first's client writes a data block "
                       f"after the break", errno.EIO,
                       lambda: ha.pwrite(new, dblk))
            fails_with(f"{name}: the first's client flushes",
                       errno.EIO, ha.flush)
            fails_with(f"{name}: the first's client writes an atime "
                       f"change", errno.EIO, lambda: ha.pwrite(held, off))
            text = first.ctl_cmd("stats")
            check(re.search(r"^fenced: ", text, re.M),
                  f"{name}: stats say fenced")
            js = first.stats()
            check(js["fenced"] and ("blocklisted" in js["fenced"]
                                    or stall),
                  f"{name}: stats --json: fenced: {js['fenced']!r}")
            st = fs0(js)
            check(st["held_blocks"] == 0,
                  f"{name}: the first holds nothing ({st['held_blocks']})")
            prom = first.ctl_cmd("stats", "--prometheus")
            check("\next4lazy_fenced 1\n" in prom,
                  f"{name}: ext4lazy_fenced is 1")
        else:
            # Nothing asked of the store since the break: the deadline
            # thread's watch (every 5 s) finds the lock lost.
            t0 = time.monotonic()
            while (first.stats()["fenced"] is None
                   and time.monotonic() - t0 < 30):
                time.sleep(0.2)
            js = first.stats()
            print(f"{name}: the idle first server knew it was fenced "
                  f"{time.monotonic() - t0:.1f} s after the second "
                  f"wrote: {js['fenced']!r}")
            check(js["fenced"] is not None,
                  f"{name}: an idle server learns it was fenced")
            check(fs0(js)["held_blocks"] == 0,
                  f"{name}: and holds nothing any more")
        ha.shutdown()
        rc = first.stop()
        out = first.output()
        print(f"{name}: the first server exited with {rc}")
        check(rc == EXIT_FENCED,
              f"{name}: the fenced server exits with status {EXIT_FENCED} "
              f"({rc})")
        check(re.search(f"exiting with status {EXIT_FENCED}: the store was "
                        "fenced", out),
              f"{name}: and says why")
        check(re.search(r"fenced: .*1 held blocks discarded", out),
              f"{name}: the first logs that it was fenced and discarded "
              f"its hold")

        exp = wd("export")
        cluster.export_image(name, exp)
        check(read_at(exp, off, bs) == real,
              f"{name}: the image has the second server's block")
        check(read_at(exp, dblk, bs) == dorig,
              f"{name}: the first's data write is not in the image")
        hb.shutdown()
        check(second.stop() == 0, f"{name}: the second server stops")
        cluster.export_image(name, exp)
        run("e2fsck", "-fn", exp)
        check(read_at(exp, off, bs) == real,
              f"{name}: the image is e2fsck-clean with the second's block")
        os.unlink(exp)
    finally:
        if first.proc.poll() is None:
            first.proc.send_signal(signal.SIGCONT)
        first.stop()
        if second:
            second.stop()


def takeover(wd, cluster, conf, base, name, watch_timeout):
    """SIGKILL with holds, then a new server on another client id."""
    bs = block_size(base)
    cluster._run("ceph", "tell", "osd.0", "config", "set",
                 "osd_client_watch_timeout", str(watch_timeout))
    cluster.import_image(base, name)
    itables = itable_ranges(base)

    def in_itable(b):
        return any(a <= b * bs < e for a, e in itables)

    payload = wd("payload")
    with open(payload, "wb") as f:
        f.write(os.urandom(24 * 1024))
    debugfs_copy(base, wd("round.img"), f"write {payload} new1",
                 "mkdir dir1", "set_inode_field /f4 mode 0100600",
                 "set_inode_field /f5 mtime @1650000000")
    cmds = [f"set_inode_field /f{i} atime @{1700000000 + i}"
            for i in range(6, 40, 3)]
    debugfs_copy(wd("round.img"), wd("atime.img"), *cmds)
    states = [blocks_of(base, bs), blocks_of(wd("round.img"), bs),
              blocks_of(wd("atime.img"), bs)]

    srv = Server(lambda n: wd("dead-" + n), f"rbd=rbd/{name}",
                 f"ceph-conf={conf}", "policy=atime")
    new = None
    try:
        h = srv.connect()
        for s in (1, 2):
            for b, blk in enumerate(states[s]):
                if blk != states[s - 1][b]:
                    h.pwrite(blk, b * bs)
            h.flush()
        holds = json.loads(srv.ctl_cmd("holds", "--json"))["holds"]
        held = {hb["offset"] // bs for hb in holds}
        check(len(held) > 0, f"{name}: {len(held)} blocks held past the "
              f"FLUSH at the kill")
        (_, dead, addr), = lockers(cluster, name)
        srv.stop(signal.SIGKILL)
        killed = time.monotonic()
        del h

        refusals = 0
        while True:
            try:
                new = Server(lambda n: wd(f"new{refusals}-" + n),
                             f"rbd=rbd/{name}", f"ceph-conf={conf}",
                             "ceph-id=takeover", start_timeout=120)
                break
            except RuntimeError as e:
                check("exclusive lock is held by" in str(e),
                      f"{name}: refused while the dead owner holds the "
                      f"lock ({str(e).strip()})")
                refusals += 1
            check(time.monotonic() - killed < 90,
                  f"{name}: the lock is taken over within 90 s")
            time.sleep(1)
        took = time.monotonic() - killed
        print(f"{name}: a new server took the lock {took:.1f} s after the "
              f"SIGKILL ({refusals} refused starts before), "
              f"osd_client_watch_timeout {watch_timeout} s")
        # The dead owner's watch lapses at most the timeout after its
        # last ping (every few seconds); the lock is broken after that.
        check(watch_timeout - 6 < took < watch_timeout + 30,
              f"{name}: the takeover waited for the dead owner's watch "
              f"to lapse")
        check(addr in blocklist(cluster),
              f"{name}: the dead owner {dead} at {addr} was blocklisted")
        check(re.search(rf"notice: rbd=rbd/{name}: took the exclusive "
                        rf"lock, which {dead} at {re.escape(addr)} held at "
                        rf"start-up, after [0-9.]+ s", new.output()),
              f"{name}: the new server says whose lock it took, and when")
        hn = new.connect()
        check(hn.pread(bs, 0) == states[1][0], f"{name}: the new server "
              f"serves")

        exp = wd("export")
        cluster.export_image(name, exp)
        try:
            run("e2fsck", "-fn", exp)
        except subprocess.CalledProcessError as e:
            check(False, f"{name}: e2fsck -fn: {e.stdout}{e.stderr}")
        check(True, f"{name}: e2fsck -fn clean after the takeover")
        got = blocks_of(exp, bs)
        last = states[2]
        diff = set()
        for b, g in enumerate(got):
            if g == last[b]:
                continue
            bad = [i for i in range(bs) if g[i] != last[b][i]
                   and i % ISIZE not in ATIME_BYTES]
            check(not bad and in_itable(b) and g == states[1][b],
                  f"{name}: block {b} differs from what FLUSH acknowledged "
                  f"beyond a held atime change")
            diff.add(b)
        check(diff <= held, f"{name}: {len(diff)} blocks differ, atime "
              f"fields only, all held at the kill ({len(held)})")
        check(read_at(payload, 0, 1 << 20)
              == run_bytes("debugfs", "-R", "cat /new1", exp),
              f"{name}: the flushed file is there")
        hn.shutdown()
        check(new.stop() == 0, f"{name}: the new server stops")
        os.unlink(exp)
    finally:
        srv.stop(signal.SIGKILL)
        if new:
            new.stop()


def run_bytes(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True).stdout


wd = Workdir()
cluster = Cluster(wd("ceph"))
try:
    base = wd("base.img")
    make_image(base, size="32M")
    cluster.start()
    conf = "ceph-conf=" + cluster.conf
    for name, after in (("fence-client", True), ("fence-stop", False)):
        os.makedirs(wd(name))
        fence(lambda n, d=name: wd(f"{d}/{n}"), cluster, conf, base, name,
              after)
    # librbd's cache in writeback mode, as in test-rbd-crash.py: what
    # the dead server did not flush dies with it.
    wconf = cluster.client_conf(
        "writeback.conf", rbd_cache_policy="writeback",
        rbd_cache_writethrough_until_flush="false")
    # With the default watch timeout, then with 10 s: the OSD's
    # setting, taken by each watch when it is registered.
    for wt in (30, 10):
        name = f"takeover{wt}"
        os.makedirs(wd(name))
        takeover(lambda n, d=name: wd(f"{d}/{n}"), cluster, wconf, base,
                 name, wt)
    # A server stopped, not dead, is taken over as a dead one (with the
    # 10 s watch timeout still set), and fenced when it runs again.
    os.makedirs(wd("fence-stall"))
    fence(lambda n: wd(f"fence-stall/{n}"), cluster, conf, base,
          "fence-stall", True, stall=True)
finally:
    cluster.stop()
    wd.close()
