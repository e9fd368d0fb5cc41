#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""rbd=POOL/IMAGE, one writer per image: a server holds the image's
exclusive lock; a second server (another client of the same cluster)
refuses at start-up with one line naming the image and the holder, and
creates no socket; once the first has stopped the second serves.  An
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
    rc, err, sock = start(wd, name, *params)
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
