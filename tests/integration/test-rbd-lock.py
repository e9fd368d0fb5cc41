#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""rbd=POOL/IMAGE, one writer per image: a server holds the image's
exclusive lock; a second server (another client of the same cluster)
refuses at start-up with one line naming the image and the holder, and
creates no socket; once the first has stopped the second serves.  A drain hands the image
over: a server started meanwhile (lock-wait=) takes the lock the
drained one released, with no lock broken (no client blocklisted), and
reads the hold it wrote back.  An
image without the exclusive-lock feature is refused with the command
that enables it, and served with lock=off (with a warning); a
read-only server takes no lock."""
import os
import re
import subprocess

from lazylib import *
from cephlib import Cluster, require_ceph, require_rbd_backend

require_tools()
require_rbd_backend(PLUGIN)
require_ceph()


def start(wd, name, *params):
    """nbdkit --run true with the plugin: (exit status, stderr), and
    whether its socket was created."""
    sock = wd(name + ".sock")
    p = subprocess.run(["nbdkit", "-U", sock, PLUGIN, *params,
                        "--run", "true"], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    return p.returncode, p.stderr, os.path.exists(sock)


def refused(wd, name, pattern, *params):
    rc, err, sock = start(wd, name, *params, "lock-wait=1")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    check(rc != 0, f"{name}: refused (exit {rc})")
    check(len(lines) == 1, f"{name}: one line ({lines})")
    check(re.search(pattern, lines[0]) is not None,
          f"{name}: /{pattern}/ in {lines[0]!r}")
    check(not sock, f"{name}: no socket created")


servers = []
wd = Workdir()
cluster = Cluster(wd("ceph"))
try:
    img = wd("disk.img")
    make_image(img, size="32M")
    cluster.start()
    conf = "ceph-conf=" + cluster.conf
    cluster.import_image(img, "disk")
    check("exclusive-lock" in cluster.rbd("info", "rbd/disk"),
          "the imported image has exclusive-lock")

    first = Server(lambda n: wd("first-" + n), "rbd=rbd/disk", conf)
    servers.append(first)
    h = first.connect()
    check(len(h.pread(4096, 0)) == 4096, "the first server serves")
    refused(wd, "second", r"^nbdkit: error: rbd=rbd/disk: its exclusive "
            r"lock is held by client\.\d+ at \S+ .*lock=off", "rbd=rbd/disk",
            conf)
    rc, err, _ = start(wd, "reader", "-r", "rbd=rbd/disk", conf)
    check(rc == 0, f"a read-only server starts beside it ({err})")
    h.shutdown()
    check(first.stop() == 0, "the first server stops cleanly")
    rc, err, _ = start(wd, "after", "rbd=rbd/disk", conf)
    check(rc == 0, f"after the first stopped, the second serves ({err})")

    # A drain releases the lock for a server waiting for it.
    # Its start took 8.3 s with Ceph 18 (Debian 13), past the default 6.
    third = Server(lambda n: wd("third-" + n), "rbd=rbd/disk", conf,
                   start_timeout=60)
    servers.append(third)
    h3 = third.connect()
    _, off = imap(img, "f1")
    debugfs_copy(img, wd("f1.copy"), "sif /f1 atime 20300101")
    blk = read_at(wd("f1.copy"), off, 4096)
    h3.pwrite(blk, off)
    h3.flush()
    nsock = wd("next.sock")
    nlog = open(wd("next.log"), "w+")
    nxt = subprocess.Popen(["nbdkit", "-f", "-U", nsock, PLUGIN,
                            "rbd=rbd/disk", conf, "lock-wait=120"],
                           stdout=nlog, stderr=nlog, env=nbdkit_env())
    try:
        d = subprocess.run([CTL, "-s", third.ctl, "drain"],
                           capture_output=True, text=True, timeout=120)
        check(d.returncode == 0 and d.stdout == "drained\n",
              f"the server drains ({d.returncode}, {d.stderr!r})")
        check(third.proc.wait(timeout=20) == 0, "and exits 0")
        for _ in range(6000):
            if listening(nsock) or nxt.poll() is not None:
                break
            time.sleep(0.02)
        check(listening(nsock), "the waiting server serves")
        hn = connect_nbdkit(nsock, nxt)
        check(hn.pread(4096, off) == blk, "it reads the hold written back")
        bl = subprocess.run(["ceph", "osd", "blocklist", "ls"],
                            env=cluster.env, capture_output=True, text=True)
        check(not re.search(r"\d+\.\d+\.\d+\.\d+:", bl.stdout),
              f"no lock was broken, no client blocklisted ({bl.stdout!r})")
        hn.shutdown()
    finally:
        nxt.send_signal(signal.SIGTERM)
        nxt.wait(timeout=60)
    check(nxt.returncode == 0, "the next server drains on SIGTERM")

    cluster.create_image("nolock", "16M", features=["layering"])
    refused(wd, "nolock", r"rbd=rbd/nolock: .*no exclusive-lock feature.*"
            r"rbd feature enable rbd/nolock exclusive-lock",
            "rbd=rbd/nolock", conf)
    rc, err, _ = start(wd, "lockoff", "rbd=rbd/nolock", conf, "lock=off")
    check(rc == 0, f"lock=off serves it ({err})")
    check("warning: lock=off" in err, "lock=off warns")
finally:
    for s in servers:
        s.stop()
    cluster.stop()
    wd.close()
