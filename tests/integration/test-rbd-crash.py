#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""SIGKILL of nbdkit serving an RBD image, with holds and requests
outstanding, under each policy: what RADOS keeps (rbd export) is clean
for e2fsck -fn, has every block a FLUSH acknowledged or a FUA wrote,
and differs from that only where the policy lets a hold outlive a
FLUSH (atime: atime fields; lazy: time fields), in blocks the engine
said it held.

The workload replays states of an ext4 without a journal made with
debugfs: rounds of real changes (new files, a mode, a removal), time
changes and file data rewrites, each round ended by a FLUSH; then
steps of time changes and data rewrites only, a FLUSH every few steps,
killed in the middle of a step with its writes and a FLUSH in flight.
Without a journal only FLUSH boundaries are consistent, and librbd's
cache dies with the process: so nothing after the last FLUSH may be a
real metadata change, or e2fsck could rightly complain."""
import random
import signal

from lazylib import *
from cephlib import Cluster, require_ceph, require_rbd_backend

# Bytes of an inode record a held time-only change may leave different
# (as in test-lazy-crash.py): i_atime, i_ctime, i_mtime, l_i_version,
# l_i_checksum_lo, i_checksum_hi, the *_extra words, i_crtime(_extra),
# i_version_hi.
TIME_BYTES = set()
for a, n in ((0x08, 12), (0x24, 4), (0x7C, 2), (0x82, 2), (0x84, 24)):
    TIME_BYTES.update(range(a, a + n))
# Under policy=atime: i_atime, i_atime_extra and the checksum only.
ATIME_BYTES = set()
for a, n in ((0x08, 4), (0x8C, 4), (0x7C, 2), (0x82, 2)):
    ATIME_BYTES.update(range(a, a + n))
MAY_DIFFER = {"strict": set(), "atime": ATIME_BYTES, "lazy": TIME_BYTES}

ISIZE = 256
FILES = 120
ROUNDS = 4
STEPS = 12
PACE = 0.1  # seconds between steps: the workload lasts a few seconds

require_tools()
require_rbd_backend(PLUGIN)
require_ceph()

seed = int(os.environ.get("EXT4LAZY_TEST_SEED", random.randrange(1 << 30)))
print(f"seed {seed} (EXT4LAZY_TEST_SEED={seed} repeats this run)")
rng = random.Random(seed)


def blocks_of(path, bs):
    with open(path, "rb") as f:
        data = f.read()
    return [data[i:i + bs] for i in range(0, len(data), bs)]


def data_blocks(img, names):
    """The physical block of each file's first block (debugfs bmap)."""
    script = img + ".bmap"
    with open(script, "w") as f:
        f.write("".join(f"bmap {n} 0\n" for n in names))
    out = run("debugfs", "-f", script, img)
    os.unlink(script)
    return [int(x) for x in re.findall(r"^(\d+)$", out, re.M)]


def make_states(wd, base, bs):
    """The workload: [(kind, image path)], kind "round" (a FLUSH after
    it) or "step" (time changes and data rewrites only)."""
    keep = [f"/f{i}" for i in range(1, FILES // 2)]  # never removed
    blk = dict(zip(keep, data_blocks(base, keep)))
    states, prev = [], base
    stamp = 1600000000

    def rewrite(path, n):
        with open(path, "r+b") as f:
            for name in rng.sample(keep, n):
                f.seek(blk[name] * bs)
                f.write(rng.randbytes(bs))

    def times(n, fields):
        nonlocal stamp
        cmds = []
        for name in rng.sample(keep, n):
            stamp += 1
            cmds.append(f"set_inode_field {name} {rng.choice(fields)} "
                        f"@{stamp}")
        return cmds

    for r in range(1, ROUNDS + 1):
        payload = wd(f"payload{r}")
        with open(payload, "wb") as f:
            f.write(rng.randbytes(rng.randrange(8, 40) * 1024))
        victim = FILES // 2 + r
        cmds = [f"write {payload} new{r}", f"mkdir dir{r}",
                f"set_inode_field {rng.choice(keep)} mode 0100600",
                f"rm /f{victim}"]
        cmds += times(8, ("atime", "mtime", "ctime"))
        path = wd(f"round{r}.img")
        debugfs_copy(prev, path, *cmds)
        rewrite(path, 4)
        states.append(("round", path))
        prev = path
    for s in range(1, STEPS + 1):
        path = wd(f"step{s}.img")
        debugfs_copy(prev, path, *times(10, ("atime", "atime", "mtime")))
        rewrite(path, 3)
        states.append(("step", path))
        prev = path
    return states


def crash(wd, cluster, conf, policy, base, states, bs):
    name = f"crash-{policy}"
    cluster.import_image(base, name)
    itables = itable_ranges(base)

    def in_itable(b):
        return any(a <= b * bs < e for a, e in itables)

    srv = Server(wd, f"rbd=rbd/{name}", f"ceph-conf={conf}",
                 f"policy={policy}")
    h = srv.connect()
    cur = blocks_of(base, bs)
    durable = list(cur)  # what a FLUSH acknowledged, or a FUA wrote
    pending = {}  # block: contents written since, not yet durable
    held_after_flush = []
    steps = [i for i, (kind, _) in enumerate(states) if kind == "step"]
    kill_at = rng.choice(steps[len(steps) // 2:])

    def flush():
        h.flush()
        for b, contents in pending.items():
            durable[b] = contents[-1]
        pending.clear()

    def write(b, content, flags=0):
        h.pwrite(content, b * bs, flags)
        if flags & nbd.CMD_FLAG_FUA:
            durable[b] = content
            pending.pop(b, None)
        else:
            pending.setdefault(b, []).append(content)

    for i, (kind, path) in enumerate(states):
        new = blocks_of(path, bs)
        changed = [b for b in range(len(new)) if new[b] != cur[b]]
        if i == kill_at:
            break
        for b in changed:
            write(b, new[b], nbd.CMD_FLAG_FUA if rng.random() < 0.1 else 0)
        cur = new
        if kind == "round" or i % 3 == 2:
            flush()
            held_after_flush.append(fs0(srv.stats())["held_blocks"])
        time.sleep(PACE)

    # The kill step: most of its inode-table writes and half its data
    # writes answered; the rest, and a FLUSH, sent but not answered.
    itab = [b for b in changed if in_itable(b)]
    other = [b for b in changed if not in_itable(b)]
    check(len(itab) >= 2 and other, f"{policy}: the kill step writes "
          f"{len(itab)} inode-table and {len(other)} data blocks")
    for b in itab[:-1] + other[::2]:
        write(b, new[b])
    st = fs0(srv.stats())
    holds = json.loads(srv.ctl_cmd("holds", "--json"))["holds"]
    held = {hb["offset"] // bs for hb in holds}
    check(st["held_blocks"] > 0 and len(held) == st["held_blocks"],
          f"{policy}: {st['held_blocks']} blocks held at the kill")
    check(st["real_writes"] > 0, f"{policy}: some inode-table writes "
          f"were real ({st['real_writes']})")
    flying = itab[-1:] + other[1::2]
    for b in flying:
        h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(new[b])), b * bs)
        pending.setdefault(b, []).append(new[b])
    h.aio_flush()
    srv.stop(signal.SIGKILL)
    del h
    print(f"{policy}: killed in step {kill_at - ROUNDS + 1} of {STEPS} "
          f"with {len(flying)} writes and a FLUSH in flight")

    if policy == "strict":
        check(all(n == 0 for n in held_after_flush),
              "strict: nothing held after any FLUSH")
    else:
        check(any(n > 0 for n in held_after_flush),
              f"{policy}: holds outlived FLUSH: {held_after_flush}")

    exp = wd(f"{name}.export")
    cluster.export_image(name, exp)
    try:
        run("e2fsck", "-fn", exp)
    except subprocess.CalledProcessError as e:
        check(False, f"{policy}: e2fsck -fn: {e.stdout}{e.stderr}")
    check(True, f"{policy}: e2fsck -fn clean after SIGKILL")

    got = blocks_of(exp, bs)
    check(len(got) == len(durable), f"{policy}: the image kept its size")
    timediff = set()
    lost = landed = 0
    for b, (g, want) in enumerate(zip(got, durable)):
        if b in pending and b not in held:
            if g in pending[b]:
                landed += 1
            elif g == want:
                lost += 1
        if g == want or g in pending.get(b, ()):
            continue
        bad = [i for i in range(bs)
               if g[i] != want[i] and i % ISIZE not in MAY_DIFFER[policy]]
        if bad or not in_itable(b):
            check(False, f"{policy}: block {b} is neither what FLUSH/FUA "
                  f"made durable nor a later write (first differing byte "
                  f"{bad[0] if bad else '?'}, inode offset "
                  f"{bad[0] % ISIZE if bad else 0:#x})")
        timediff.add(b)
    check(timediff <= held, f"{policy}: {len(timediff)} blocks differ, in "
          f"{'atime' if policy == 'atime' else 'time'} fields only, all "
          f"held ({len(held)}) at the kill")
    check(True, f"{policy}: every block a FLUSH or FUA acknowledged is in "
          f"RADOS")
    print(f"{policy}: of the writes after the last FLUSH, {landed} blocks "
          f"reached RADOS, {lost} died with nbdkit")
    out = run("debugfs", "-R", "ls -l /", exp)
    check(all(f"new{r}" in out and f"dir{r}" in out
              for r in range(1, ROUNDS + 1)),
          f"{policy}: the flushed real changes (write, mkdir) are there")
    os.unlink(exp)


wd = Workdir()
cluster = Cluster(wd("ceph"))
try:
    base = wd("base.img")
    make_image(base, size="32M", files=FILES)
    bs = block_size(base)
    states = make_states(wd, base, bs)
    for _, path in states:
        run("e2fsck", "-fn", path)  # every state the client writes is clean
    cluster.start()
    # librbd's cache in writeback mode (not the default writearound,
    # which sends every write at once): what nbdkit does not flush dies
    # with it, so the image shows what FLUSH and FUA made durable.
    conf = cluster.client_conf(
        "writeback.conf", rbd_cache_policy="writeback",
        rbd_cache_writethrough_until_flush="false",
        rbd_cache_max_dirty_age=30)
    for policy in ("strict", "atime", "lazy"):
        crash(lambda n, p=policy: wd(f"{p}-{n}"), cluster, conf, policy,
              base, states, bs)
finally:
    cluster.stop()
    wd.close()
