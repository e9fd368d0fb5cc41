#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""cephlib.py --- a throwaway single-node Ceph cluster for the rbd=
tests: one monitor and one OSD (memstore, so the data lives in the
OSD's memory), auth none, msgr v2 on 127.0.0.1 only (or on another
address of the host: "start DIR ADDR", Cluster(dir, addr)), everything under
one directory and nothing under /etc/ceph or /var/lib/ceph.  The
daemons run in the foreground of their own sessions and are stopped by
PID.  Start-up takes about 2.5 s; "paxos propose interval = 0.1" is
most of that (the default of 1 s makes it about 8 s).

There is no mgr: the commands that need one (ceph pg stat, rbd perf,
rbd task) hang without it, and nothing here uses them.  Clients get no
admin socket (librbd in nbdkit and the rbd CLI would otherwise share
client.admin.asok); the OSD has one, for osd_perf().

From Python:
    with Cluster(wd("ceph")) as c:
        c.import_image(img, "disk")
        ... nbdkit ... rbd=rbd/disk ceph-conf=c.conf ...
From a shell script or a benchmark:
    eval "$(python3 cephlib.py start DIR)"   # sets CEPH_CONF (and
    ...                                      # CEPH_MON_HOST, CEPH_FSID)
    python3 cephlib.py stop DIR
"check" exits 77 (skip) if a Ceph program is missing.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid

SKIP = 77

POOL = "rbd"

# The programs a cluster needs, and the package each comes in.
PROGRAMS = (("ceph-mon", "ceph-mon"), ("ceph-osd", "ceph-osd"),
            ("monmaptool", "ceph-base"), ("ceph", "ceph-common"),
            ("rbd", "ceph-common"))

# Where the daemons' PIDs are kept, for "stop DIR" from another process.
STATE = "cluster.json"

CONF = """\
[global]
fsid = {fsid}
mon host = v2:{addr}:{port}
public addr = {addr}
cluster addr = {addr}
public network = {network}
ms bind ipv4 = true
ms bind ipv6 = false
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
run dir = {d}/run
admin socket = {d}/run/$name.asok
pid file = {d}/run/$name.pid
log file = {d}/log/$name.log
crash dir = {d}/crash
keyring = {d}/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
mon mgr mkfs grace = 86400
mon data avail warn = 1
mon data avail crit = 0
[client]
admin socket =
log file = {d}/log/client.log
[mon]
mon data = {d}/mon/$name
paxos propose interval = 0.1
mon cluster log file = {d}/log/cluster.log
mgr initial modules = iostat
[osd]
osd data = {d}/osd/$id
keyring = {d}/osd/$id/keyring
osd memory target = 939524096
osd objectstore = memstore
memstore device bytes = 1073741824
osd class dir = {classdir}
"""


def class_dir():
    """The directory of the OSD's object classes (libcls_rbd.so, which
    rbd needs): Ceph 18 (Debian 13) defaults osd class dir to a
    relative path, from which the OSD loads none."""
    dirs = [f"/usr/lib/{sysconfig.get_config_var('MULTIARCH') or ''}/"
            "rados-classes", "/usr/lib64/rados-classes",
            "/usr/lib/rados-classes"]
    for d in dirs:
        if os.path.exists(os.path.join(d, "libcls_rbd.so")):
            return d
    return dirs[0]


def missing_programs():
    """The Ceph programs not installed, as "program (package)"."""
    return [f"{prog} ({pkg})" for prog, pkg in PROGRAMS
            if not shutil.which(prog)]


def require_ceph():
    """Skip the test (exit 77) unless a cluster can be started here."""
    missing = missing_programs()
    if missing:
        print("SKIP: Ceph is not installed: no " + ", ".join(missing),
              file=sys.stderr)
        sys.exit(SKIP)


def require_rbd_backend(plugin):
    """Skip the test (exit 77) unless the plugin can serve rbd=."""
    dump = subprocess.run(["nbdkit", plugin, "--dump-plugin"],
                          capture_output=True, text=True).stdout
    if "ext4lazy_rbd=yes" not in dump.splitlines():
        print("SKIP: the plugin has no rbd= backend (ext4lazy_rbd=no: "
              "built without librbd, or librbd.so.1 cannot be loaded)",
              file=sys.stderr)
        sys.exit(SKIP)


def free_port(addr="127.0.0.1"):
    # A small race remains: another process may take it before the mon.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def _is_ceph(pid, prog):
    """True while pid runs prog: false once it has exited, even as a
    zombie its parent (init, after "cephlib.py start") has not reaped."""
    try:
        os.waitpid(pid, os.WNOHANG)  # our child: reap it if it exited
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0")[0]
    except OSError:
        return False
    return os.path.basename(argv0).decode(errors="replace") == prog


def _stop_pid(pid, prog):
    """SIGTERM, then SIGKILL after 5 s; only if pid is still prog."""
    if not pid or not _is_ceph(pid, prog):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while _is_ceph(pid, prog):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.02)


class Cluster:
    def __init__(self, dirpath, addr="127.0.0.1"):
        """addr: the IPv4 address the mon and the OSD bind to and
        advertise (another than 127.0.0.1 for clients elsewhere, such as
        a qemu guest on user networking, which reaches the host's own
        addresses but not its loopback)."""
        self.dir = os.path.abspath(dirpath)
        self.addr = addr
        self.port = None
        self.conf = os.path.join(self.dir, "ceph.conf")
        self.env = dict(os.environ, CEPH_CONF=self.conf)
        self.pids = {}

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def _run(self, *cmd, timeout=60, check=True):
        p = subprocess.run(cmd, env=self.env, capture_output=True,
                           text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: "
                               + (p.stderr.strip() or p.stdout.strip()))
        return p.stdout

    def _daemon(self, name, *cmd):
        # Output to files, never to our pipes: a daemon holding a pipe
        # open would keep the caller's reader waiting forever.  Its own
        # session, so that it outlives "cephlib.py start".
        with open(self.path("log", f"{name}.stderr"), "w") as log:
            p = subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=log,
                                 start_new_session=True)
        self.pids[name] = p.pid
        self._save()
        return p

    def _save(self):
        with open(self.path(STATE), "w") as f:
            json.dump({"pids": self.pids, "conf": self.conf}, f)

    def _fail(self, what):
        logs = []
        for name in ("mon.a.log", "osd.0.log", "mon.stderr", "osd.stderr"):
            p = self.path("log", name)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    tail = f.readlines()[-15:]
                logs.append(f"---- {name} ----\n" + "".join(tail))
        self.stop()
        raise RuntimeError(f"ceph: {what}\n" + "\n".join(logs))

    def start(self):
        for sub in ("mon", "osd/0", "run", "log", "crash"):
            os.makedirs(self.path(sub), exist_ok=True)
        fsid = str(uuid.uuid4())
        port = free_port(self.addr)
        self.fsid, self.port = fsid, port
        network = ("127.0.0.0/8" if self.addr == "127.0.0.1"
                   else f"{self.addr}/32")
        with open(self.conf, "w") as f:
            f.write(CONF.format(fsid=fsid, port=port, d=self.dir,
                                addr=self.addr, network=network,
                                classdir=class_dir()))
        monmap = self.path("monmap")
        self._run("monmaptool", "--create", "--fsid", fsid, "--addv", "a",
                  f"[v2:{self.addr}:{port}]", monmap)
        self._run("ceph-mon", "--mkfs", "-i", "a", "--monmap", monmap)
        mon = self._daemon("mon", "ceph-mon", "-i", "a", "-f")
        try:
            self._run("ceph", "-s", "--connect-timeout", "30", timeout=40)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            self._fail(f"the monitor did not answer: {e}")

        osd_uuid = str(uuid.uuid4())
        osd_id = self._run("ceph", "osd", "new", osd_uuid).strip()
        if osd_id != "0":
            self._fail(f"ceph osd new gave id {osd_id!r}, not 0")
        self._run("ceph-osd", "-i", "0", "--mkfs", "--osd-uuid", osd_uuid)
        self._daemon("osd", "ceph-osd", "-i", "0", "-f")
        deadline = time.monotonic() + 60
        while True:
            try:
                out = self._run("ceph", "osd", "stat", "-f", "json",
                                timeout=10)
                if json.loads(out)["num_up_osds"] == 1:
                    break
            except (RuntimeError, subprocess.TimeoutExpired, ValueError):
                pass
            if mon.poll() is not None:
                self._fail("ceph-mon exited")
            if time.monotonic() > deadline:
                self._fail("the OSD was not up within 60 s")
            time.sleep(0.1)
        self._run("ceph", "osd", "pool", "create", POOL, "8", "8")
        self._run("rbd", "pool", "init", POOL)
        return self

    def stop(self):
        """Stop the daemons (the OSD first: it waits for the mon to see
        it go) and empty the directory."""
        if not self.pids and os.path.exists(self.path(STATE)):
            with open(self.path(STATE)) as f:
                self.pids = json.load(f)["pids"]
        for name, prog in (("osd", "ceph-osd"), ("mon", "ceph-mon")):
            _stop_pid(self.pids.pop(name, None), prog)
        if os.path.isdir(self.dir):
            for name in os.listdir(self.dir):
                p = self.path(name)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    os.unlink(p)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- clients --------------------------------------------------------

    def client_conf(self, name, **options):
        """Another ceph.conf for this cluster, with options for its
        clients (rbd_cache_policy="writeback", say); its path."""
        path = self.path(name)
        with open(self.conf) as f:
            text = f.read()
        extra = "".join(f"{k} = {v}\n" for k, v in options.items())
        text = text.replace("[client]\n", "[client]\n" + extra, 1)
        with open(path, "w") as f:
            f.write(text)
        return path

    def rbd(self, *args, timeout=120):
        """Run the rbd CLI against the cluster; its standard output."""
        return self._run("rbd", *args, timeout=timeout)

    def spec(self, name):
        return name if "/" in name else f"{POOL}/{name}"

    def create_image(self, name, size, features=None):
        """size in bytes, or with rbd's units ("64M"); features a list
        (only those), or None for rbd's defaults (layering,
        exclusive-lock, object-map, fast-diff, deep-flatten)."""
        args = ["create", "--size",
                f"{size}B" if isinstance(size, int) else size]
        if features is not None:
            for feat in features:
                args += ["--image-feature", feat]
        self.rbd(*args, self.spec(name))

    def import_image(self, path, name):
        """rbd import, with the default features (zero runs are not
        written: they stay holes)."""
        self.rbd("import", "--no-progress", path, self.spec(name))

    def export_image(self, name, path):
        if os.path.exists(path):
            os.unlink(path)
        self.rbd("export", "--no-progress", self.spec(name), path)

    def image_size(self, name):
        return json.loads(self.rbd("info", "--format", "json",
                                   self.spec(name)))["size"]

    def osd_perf(self):
        """The OSD's perf counters (ceph daemon osd.0 perf dump)."""
        return json.loads(self._run("ceph", "daemon", "osd.0", "perf",
                                    "dump", timeout=30))


def main(argv):
    usage = "usage: cephlib.py start DIR [ADDR] | stop DIR | check"
    if len(argv) == 2 and argv[1] == "check":
        require_ceph()
        return 0
    if not (len(argv) == 3 and argv[1] in ("start", "stop")
            or len(argv) == 4 and argv[1] == "start"):
        print(usage, file=sys.stderr)
        return 2
    c = Cluster(argv[2], *argv[3:])
    if argv[1] == "start":
        require_ceph()
        os.makedirs(c.dir, exist_ok=True)
        try:
            c.start()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            print(f"cephlib.py: {e}", file=sys.stderr)
            return 1
        print(f"CEPH_CONF={c.conf}")
        print(f"CEPH_MON_HOST=v2:{c.addr}:{c.port}")
        print(f"CEPH_FSID={c.fsid}")
    else:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
