#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""nbd=URI against a model, at random: sequences of write, zero, trim
and flush, with and without FUA, through the plugin in front of a real
nbdkit remote that is killed (SIGKILL) and restarted at random points.
Two remotes: the file plugin (what it acknowledged survives its death)
and the file plugin behind the cache filter in writeback mode (what it
acknowledged and did not flush dies with it).

The model keeps, per 512-byte sector of a data area, the newest content
acknowledged for it (a trim's: what a read returned right after it,
what the engine believes) and what it may still hold (its durable
content, then every later acknowledged one).  Checked: after a restart
the next FLUSH either succeeds, and then every sector reads, through
the plugin and on the remote, the newest acknowledged content; or fails
(the plugin says it could not restore everything), and then every
sector still holds one of the contents it may hold: no acknowledged FUA
write or successful FLUSH is ever undone.  A successful FLUSH covers
everything acknowledged before it.

First a directed case: a remote back that refuses the replayed writes.

Seeded and bounded for meson; --long N runs N seeds of longer sequences
(docs/design.md reports such a run), --seed S one seed.
"""
import argparse
import errno
import random
import struct

from lazylib import *

require_tools()
if "ext4lazy_nbd=yes" not in run("nbdkit", PLUGIN, "--dump-plugin").split():
    skip("the plugin was built without libnbd (-Dnbd=disabled or no "
         "libnbd-dev), so it has no nbd= backend")

ap = argparse.ArgumentParser()
ap.add_argument("--long", type=int, default=0, metavar="SEEDS")
ap.add_argument("--seed", type=int, default=None)
args = ap.parse_args()

DATA = 24 << 20  # a free data area of the 32M image
SECT = 512
NSECT = 64       # the area the operations hit: 32 KiB
FUA = nbd.CMD_FLAG_FUA
ZERO = bytes(SECT)


class Model:
    """Per sector: newest, the newest content acknowledged (None: any,
    a trim's behind a remote that may change it); allowed, what it may
    hold (None: anything)."""

    def __init__(self, content):
        self.newest = list(content)
        self.flushed()

    def acked(self, s, data, durable):
        self.newest[s] = data
        if durable or data is None:
            self.allowed[s] = None if data is None else {data}
        elif self.allowed[s] is not None:
            self.allowed[s].add(data)

    def flushed(self):
        self.allowed = [None if c is None else {c} for c in self.newest]


def sectors(data):
    return [bytes(data[i:i + SECT]) for i in range(0, len(data), SECT)]


def read_area(h):
    return sectors(h.pread(NSECT * SECT, DATA))


def start_remote(wd, img, cached):
    if cached:
        return Remote(wd, "remote", ["file", img, "cache=writeback"],
                      filters=("cache",))
    return Remote(wd, "remote", ["file", img])


def fail(seed, step, what, trace):
    print("\n".join(trace[-30:]), file=sys.stderr)
    check(False, f"seed {seed} step {step}: {what}")


def run_seed(wd, seed, steps, cached):
    rng = random.Random(seed)
    img = wd(f"disk-{seed}-{int(cached)}.img")
    make_image(img)
    remote = start_remote(wd, img, cached)
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict", "io-timeout=10s")
    h = srv.connect()
    h.pwrite(bytes(NSECT * SECT), DATA)
    h.flush()
    m = Model(read_area(h))
    trace = []
    restarted = kills = fails = 0

    def compare(where, got, exact):
        for s in range(NSECT):
            if m.newest[s] is None or m.allowed[s] is None:
                continue
            if exact and got[s] != m.newest[s]:
                fail(seed, step, f"{where}: sector {s} is not the newest "
                     f"acknowledged content ({got[s][:8].hex()} != "
                     f"{m.newest[s][:8].hex()})", trace)
            if got[s] not in m.allowed[s]:
                fail(seed, step, f"{where}: sector {s} holds content "
                     f"undone or never acknowledged "
                     f"({got[s][:8].hex()})", trace)

    for step in range(steps):
        what = rng.choices(["write", "zero", "trim", "flush", "kill"],
                           [50, 12, 12, 8, 6 if restarted == 0 else 4])[0]
        s0 = rng.randrange(NSECT)
        n = rng.randint(1, min(16, NSECT - s0))
        fua = rng.random() < 0.35
        flags = FUA if fua else 0
        if what == "write":
            data = b"".join(struct.pack("<IIII", seed, step, s0 + i, flags)
                            * (SECT // 16) for i in range(n))
            trace.append(f"{step}: write {s0}+{n} fua={fua}")
            h.pwrite(data, DATA + s0 * SECT, flags)
            for i, c in enumerate(sectors(data)):
                m.acked(s0 + i, c, fua)
        elif what == "zero":
            trace.append(f"{step}: zero {s0}+{n} fua={fua}")
            h.zero(n * SECT, DATA + s0 * SECT, flags)
            for i in range(n):
                m.acked(s0 + i, ZERO, fua)
        elif what == "trim":
            trace.append(f"{step}: trim {s0}+{n} fua={fua}")
            h.trim(n * SECT, DATA + s0 * SECT, flags)
            # What the engine now believes is what a read returns.  The
            # file plugin punches a hole: zeroes, and again when
            # replayed.  The cache filter keeps the old data until it
            # flushes, then the hole: a trim's content is the remote's
            # to choose (NBD), so any.
            got = sectors(h.pread(n * SECT, DATA + s0 * SECT))
            for i, c in enumerate(got):
                m.acked(s0 + i, None if cached else c, fua)
        elif what == "flush" and restarted:
            pass  # the check's FLUSH below
        elif what == "flush":
            trace.append(f"{step}: flush")
            try:
                h.flush()
            except nbd.Error as e:
                fail(seed, step, f"a FLUSH failed with no restart since "
                     f"the last check: {e}", trace)
            m.flushed()
        else:
            trace.append(f"{step}: kill the remote")
            kills += 1
            remote.proc.kill()
            remote.proc.wait()
            remote = start_remote(wd, img, cached)
            restarted += 1
            if rng.random() < 0.5:
                continue  # the reconnect meets the next operation
        if restarted == 0:
            continue
        # After a restart: the next FLUSH, and what every sector holds.
        restarted = 0
        try:
            h.flush()
            ok = True
        except nbd.Error as e:
            ok = False
            fails += 1
            trace.append(f"{step}: the FLUSH after the restart failed: {e}")
            check(e.errno == "EIO", f"seed {seed} step {step}: EIO")
        got = read_area(h)
        r = remote.connect()
        on_remote = read_area(r)
        r.shutdown()
        if got != on_remote:
            fail(seed, step, "a read through the plugin disagrees with "
                 "the remote", trace)
        compare("after the restart", got, ok)
        if not ok:
            # Reported: from now on what the remote holds is the truth
            # (a trimmed sector's is still any).
            h.flush()
            m = Model([None if m.newest[s] is None else got[s]
                       for s in range(NSECT)])
        else:
            m.flushed()
    h.shutdown()
    check(srv.stop() == 0, "the plugin exited cleanly")
    remote.stop()
    os.unlink(img)
    return kills, fails


def refused_replay(wd):
    """A remote back that refuses what is replayed (its writes fail): the
    reconnect completes, the next FLUSH fails once, and requests go on;
    not a reconnect retried for ever with every request failing."""
    img = wd("refused.img")
    make_image(img)
    remote = Remote(wd, "faulty", ["file", img, "cache=writeback"],
                    filters=("cache",), inject=True)
    srv = Server(wd, f"nbd={remote.uri}", "policy=strict", "io-timeout=3s")
    h = srv.connect()
    h.pwrite(b"\x5a" * 4096, DATA)
    remote.proc.kill()
    remote.proc.wait()
    remote = Remote(wd, "faulty", ["file", img, "cache=writeback"],
                    filters=("cache",), inject=True)
    remote.set_faulty(True)
    fails_with("the FLUSH after a refused replay", errno.EIO, h.flush)
    try:
        h.flush()
        ok = True
    except nbd.Error as e:
        ok = False
        print(e)
    check(ok, "the FLUSH after it succeeds: the loss is reported once, "
          "the reconnect is not retried")
    check("refused" in srv.output(), "the log says the remote refused")
    remote.set_faulty(False)
    h.pwrite(b"\x6b" * 4096, DATA)
    h.flush()
    check(h.pread(4096, DATA) == b"\x6b" * 4096, "and requests go on")
    h.shutdown()
    check(srv.stop() == 0, "the plugin exited cleanly")
    remote.stop()


wd = Workdir()
try:
    if args.seed is None:
        refused_replay(wd)
    if args.seed is not None:
        seeds, steps = [args.seed], 300
    elif args.long:
        seeds, steps = range(1, args.long + 1), 600
    else:
        seeds, steps = [1, 2], 150
    total_kills = total_fails = 0
    for seed in seeds:
        for cached in (False, True):
            k, f = run_seed(wd, seed, steps, cached)
            total_kills += k
            total_fails += f
            print(f"seed {seed} {'cache' if cached else 'file'}: "
                  f"{steps} steps, {k} restarts, {f} FLUSH failures")
    check(total_kills > 0, f"the remote was killed {total_kills} times")
    print(f"all: {len(seeds)} seeds x 2 remotes x {steps} steps, "
          f"{total_kills} restarts, {total_fails} FLUSH failures")
finally:
    wd.close()
