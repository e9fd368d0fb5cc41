# SPDX-License-Identifier: BSD-3-Clause
"""lazylib.py --- helpers for the lazytime integration tests, the
Python counterpart of functions.sh (same environment: EXT4LAZY_PLUGIN,
EXT4LAZYCTL, EXT4LAZY_TEST_TMPDIR).

Images are made at test time with mkfs.ext4; realistic inode-table
writes come from debugfs changing one field on a copy (it updates the
checksum as the kernel does).  nbdkit is started with the built plugin
on a private Unix socket and driven with libnbd's Python bindings.
"""
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77

try:
    import nbd
except ImportError:
    print("SKIP: libnbd's Python bindings (module nbd) are not installed",
          file=sys.stderr)
    sys.exit(SKIP)

# As in functions.sh: the system directories first (mkfs.ext4, debugfs
# and dumpe2fs live in sbin), and the C locale for parsed output.
os.environ["PATH"] = ("/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin:"
                      + os.environ.get("PATH", ""))
os.environ["LC_ALL"] = "C"

PROGNAME = os.path.splitext(os.path.basename(sys.argv[0]))[0]

PLUGIN = os.environ.get("EXT4LAZY_PLUGIN", "")

CTL = os.environ.get("EXT4LAZYCTL", "")


def skip(why):
    print(f"SKIP: {why}", file=sys.stderr)
    sys.exit(SKIP)


def require_tools():
    if not PLUGIN or not os.path.exists(PLUGIN):
        skip(f"plugin not built: {PLUGIN!r}")
    if not CTL or not os.access(CTL, os.X_OK):
        skip(f"ext4lazyctl not built: {CTL!r}")
    for tool in ("nbdkit", "mkfs.ext4", "debugfs", "e2fsck", "dumpe2fs"):
        if not shutil.which(tool):
            skip(f"{tool} not installed")


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True,
                          **kw).stdout


class Workdir:
    def __init__(self):
        # A disk-backed directory, as functions.sh's $tmp.
        self.path = tempfile.mkdtemp(
            prefix=f"ext4lazy-{PROGNAME}.",
            dir=os.environ.get("EXT4LAZY_TEST_TMPDIR", "/var/tmp"))

    def __call__(self, name):
        return os.path.join(self.path, name)

    def close(self):
        shutil.rmtree(self.path, ignore_errors=True)


def make_image(path, size="32M", files=40, opts=("-O", "^has_journal"),
               block_size=4096):
    root = path + ".root"
    os.makedirs(root, exist_ok=True)
    for i in range(1, files + 1):
        with open(os.path.join(root, f"f{i}"), "w") as f:
            f.write(f"file {i}\n")
    run("mkfs.ext4", "-q", "-F", "-b", str(block_size), "-I", "256",
        *opts, "-d", root, path, size)
    shutil.rmtree(root)


def block_size(img):
    out = run("dumpe2fs", "-h", img)
    return int(re.search(r"Block size:\s+(\d+)", out).group(1))


def imap(img, name):
    """(inode number, device offset of its inode-table block)."""
    out = run("debugfs", "-R", f"imap {name}", img)
    ino = int(re.search(r"Inode (\d+) is part", out).group(1))
    blk = int(re.search(r"located at block (\d+),", out).group(1))
    return ino, blk * block_size(img)


def debugfs_copy(img, copy, *cmds):
    """A copy of img with the debugfs commands applied."""
    shutil.copyfile(img, copy)
    script = copy + ".cmds"
    with open(script, "w") as f:
        f.write("\n".join(cmds) + "\n")
    run("debugfs", "-w", "-f", script, copy)
    os.unlink(script)


def read_at(path, off, length):
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(length)


def itable_ranges(img):
    """Device byte ranges of every inode table, from dumpe2fs."""
    bs = block_size(img)
    out = run("dumpe2fs", img)
    ranges = []
    for a, b in re.findall(r"Inode table at (\d+)-(\d+)", out):
        ranges.append((int(a) * bs, (int(b) + 1) * bs))
    return ranges


def listening(sock):
    """Does a process listen on the Unix socket sock yet?  (nbdkit binds
    it, and the file appears, a moment before it listens.)"""
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            # Flags 00010000: __SO_ACCEPTCON, a listening socket.
            if (len(fields) >= 8 and fields[-1] == sock
                    and int(fields[3], 16) & 0x10000):
                return True
    return False


def sigstop(pid):
    """SIGSTOP pid and wait until every thread of it has stopped.  kill()
    returns once the signal is queued; the process stops when one of its
    threads takes the signal and the others follow, and on a busy machine
    another thread can still answer a request in between."""
    os.kill(pid, signal.SIGSTOP)
    for _ in range(500):
        try:
            states = []
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    # The state follows the parenthesised name.
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            continue  # a thread left while we looked: look again
        if all(st in ("T", "t") for st in states):
            return
        time.sleep(0.01)
    raise RuntimeError(f"process {pid} did not stop")


def connect_nbdkit(sock, proc):
    """A libnbd handle connected to the nbdkit proc listening on sock.
    nbdkit binds its socket (the file appears) a moment before it
    listens: a connection in between is refused.  Retry that."""
    for _ in range(250):
        h = nbd.NBD()
        try:
            h.connect_unix(sock)
            return h
        except nbd.Error as e:
            if (e.errno not in (errno.ECONNREFUSED, "ECONNREFUSED")
                    or proc.poll() is not None):
                raise
        del h
        time.sleep(0.02)
    raise RuntimeError("nbdkit never accepted a connection")


def nbdkit_env():
    """The environment for nbdkit with the plugin: with
    $EXT4LAZY_NBDKIT_PRELOAD as LD_PRELOAD when it is set (a sanitizer's
    runtime, for a plugin built with it)."""
    env = dict(os.environ)
    preload = env.get("EXT4LAZY_NBDKIT_PRELOAD")
    if preload:
        env["LD_PRELOAD"] = preload
    return env


class Server:
    """nbdkit with the plugin, in the foreground, on a Unix socket."""

    def __init__(self, wd, img, *params, verbose=False, start_timeout=6):
        self.sock = wd("nbd.sock")
        self.ctl = wd("ctl.sock")
        for stale in (self.sock, self.ctl):
            if os.path.exists(stale):
                os.unlink(stale)
        self.log = open(wd("nbdkit.log"), "w+")
        cmd = ["nbdkit", "-f", "-U", self.sock]
        if verbose:
            cmd.append("-v")
        cmd += [PLUGIN, img, f"control={self.ctl}", *params]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log,
                                     env=nbdkit_env())
        for _ in range(int(start_timeout * 50)):
            if os.path.exists(self.sock) and os.path.exists(self.ctl):
                break
            if self.proc.poll() is not None:
                raise RuntimeError("nbdkit exited: " + self.output())
            time.sleep(0.02)
        else:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("nbdkit did not start")

    def connect(self):
        return connect_nbdkit(self.sock, self.proc)

    def ctl_cmd(self, *args):
        return run(CTL, "-s", self.ctl, *args)

    def stats(self):
        s = json.loads(self.ctl_cmd("stats", "--json"))
        return s

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)
        return self.proc.returncode

    def terminate_within(self, secs, t0=None, sig=signal.SIGTERM):
        """sig, and wait up to secs for the exit (killed after that).
        Returns (exited in time, seconds since t0 or the signal)."""
        t0 = time.monotonic() if t0 is None else t0
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=secs)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - t0
        exited = self.proc.poll() is not None
        if not exited:
            self.proc.kill()
            self.proc.wait()
        return exited, took


def fs0(stats):
    """Counters of the first filesystem instance."""
    return stats["instances"][0]


def fails_with(what, want, call):
    """call() must fail with errno want (an errno module constant)."""
    try:
        call()
    except nbd.Error as e:
        check(e.errno == errno.errorcode[want],
              f"{what}: {errno.errorcode[want]} (got {e.errno})")
        return
    check(False, f"{what}: succeeded, expected {errno.errorcode[want]}")


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


class Remote:
    """A plain nbdkit (file or memory plugin) on its own Unix socket: the
    NBD export the plugin's nbd= backend serves from.  Every request it
    gets is logged (--filter=log); with inject=True, every read, write,
    zero and trim fails with error (EIO unless given) while the file
    self.inject exists (--filter=error; nbdkit 1.32's error filter
    cannot fail a flush).
    """

    def __init__(self, wd, name, plugin_args, filters=(), inject=False,
                 readonly=False, error="EIO"):
        self.sock = wd(f"{name}.sock")
        self.logfile = wd(f"{name}.requests")
        self.inject = wd(f"{name}.inject")
        self.uri = f"nbd+unix:///?socket={self.sock}"
        for stale in (self.sock, self.logfile, self.inject):
            if os.path.exists(stale):
                os.unlink(stale)
        self.out = open(wd(f"{name}.log"), "w+")
        cmd = ["nbdkit", "-f", "-U", self.sock, "--filter=log"]
        if inject:
            cmd += ["--filter=error"]
        cmd += [f"--filter={f}" for f in filters]
        if readonly:
            cmd.append("-r")
        cmd += list(plugin_args) + [f"logfile={self.logfile}"]
        if inject:
            cmd += [f"error={error}", "error-rate=100%",
                    f"error-file={self.inject}"]
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.out)
        for _ in range(300):
            if listening(self.sock):
                break
            if self.proc.poll() is not None:
                raise RuntimeError("remote nbdkit exited: " + self.output())
            time.sleep(0.02)
        else:
            raise RuntimeError("remote nbdkit did not start")

    def connect(self):
        """A client of the remote itself, to see what it holds."""
        return connect_nbdkit(self.sock, self.proc)

    def requests(self):
        """The request lines logged so far ("Write id=.. offset=..")."""
        with open(self.logfile) as f:
            return [line.split(" ", 3)[3].strip() for line in f
                    if " connection=" in line and " ..." in line
                    and not line.split(" ", 3)[3].startswith("...")]

    def set_faulty(self, on):
        if on:
            open(self.inject, "w").close()
        elif os.path.exists(self.inject):
            os.unlink(self.inject)

    def output(self):
        self.out.flush()
        self.out.seek(0)
        return self.out.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        return self.proc.returncode
