# SPDX-License-Identifier: BSD-3-Clause
"""test-drain.py --- a planned restart that no client sees as an error.

- drain under load: a client has writes in flight in the plugin (the
  store, a remote nbdkit, delays each write) and sends more while
  `ext4lazyctl drain` runs.  No request is ever answered with an error;
  the connection drops with the rest unanswered; every acknowledged
  write and the held timestamp are on the store.  The listening socket
  is held by this script and handed to each server with LISTEN_FDS, as
  systemd's ext4lazy@.socket does: the next server, on the same socket,
  serves the re-sent requests and the same export (nbdinfo --json).
- SIGTERM with one idle client: the server ends (bounded generously),
  with status 0, the hold on the store and the lock released; a
  read-only server drains too.
- a drain while the store fails, or does not answer (io-timeout=):
  `ext4lazyctl drain` exits 1 with the reason, the server serves on
  and counts it, and a later drain works.
- lock-wait=: a server started while the first one serves waits for
  the store and takes it once the first drained, with the hold written
  back and the same export; a real second writer is refused, named.
- a stop that is no drain (nbdkit's own, its --run command done):
  .cleanup ends the drain thread (its debug message), status 0.
"""
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time

from lazylib import (CTL, PLUGIN, Remote, Workdir, check, debugfs_copy,
                     imap, listening, make_image, nbd, nbdkit_env, read_at,
                     require_tools, run, skip)

EXIT_BOUND = 20  # seconds: a generous bound, not a timing claim


def server_cmd(*params, ctl):
    opts = [p for p in params if p.startswith("-")]
    params = [p for p in params if not p.startswith("-")]
    return ["nbdkit", "-f", *opts, PLUGIN, *params, f"control={ctl}"]


def ops(remote):
    """(writes, flushes) the remote has received."""
    reqs = remote.requests()
    return (sum(r.startswith("Write") for r in reqs),
            sum(r.startswith("Flush") for r in reqs))


def output(log):
    log.flush()
    with open(log.name) as f:
        return f.read()


def wait_for(cond, what, secs=60, proc=None):
    t0 = time.monotonic()
    while time.monotonic() - t0 < secs:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: nbdkit exited ({proc.returncode})")
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


class Holder:
    """The listening socket, held across servers as systemd holds it;
    each server gets it as fd 3 with LISTEN_FDS=1 and its own
    LISTEN_PID."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(16)

    def start(self, cmd, log):
        fd = self.sock.fileno()
        env = nbdkit_env()
        env["LISTEN_FDS"] = "1"
        wrapped = ["sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh", *cmd]
        return subprocess.Popen(
            wrapped, stdout=log, stderr=log, env=env, pass_fds=(3,),
            preexec_fn=lambda: os.dup2(fd, 3) if fd != 3 else None)


def start(wd, name, *params, opts=()):
    """nbdkit with the plugin in the foreground on its own socket, with
    control=: (process, socket, control socket); not waited for."""
    sock, ctl = wd(f"{name}-server.sock"), wd(f"{name}.ctl")
    log = open(wd(f"{name}.log"), "w+")
    proc = subprocess.Popen(["nbdkit", "-f", *opts, "-U", sock, PLUGIN,
                             *params, f"control={ctl}"],
                            stdout=log, stderr=log, env=nbdkit_env())
    return proc, sock, ctl


def serve(wd, name, *params, opts=()):
    """start, once it serves: (process, a client connected, control
    socket)."""
    proc, sock, ctl = start(wd, name, *params, opts=opts)
    wait_for(lambda: listening(ctl) and listening(sock), f"server {name}",
             proc=proc)
    h = nbd.NBD()
    h.connect_unix(sock)
    return proc, h, ctl


def pause_remote(sock, cmd):
    """nbdkit-pause-filter's control: b"p" pauses, b"r" resumes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.connect(sock)
        c.sendall(cmd)
        check(c.recv(1) == cmd.upper(), f"remote: {cmd!r}")


def held_block(wd, img, name="f1", field="atime"):
    """(offset, content) of name's inode block with a time changed."""
    _, off = imap(img, name)
    copy = wd(f"{name}.copy")
    debugfs_copy(img, copy, f"sif /{name} {field} 20300101")
    return off, read_at(copy, off, 4096)


def nbdinfo(uri):
    """What nbdinfo --json says of the export, but its URI and the file(1)
    description of its content: size, flags, block sizes, contexts."""
    info = json.loads(run("nbdinfo", "--json", uri))
    for e in info["exports"]:
        e.pop("uri", None)
        e.pop("content", None)
    return info


def drain(ctl, *args):
    return subprocess.run([CTL, "-s", ctl, "drain", *args],
                          capture_output=True, text=True, timeout=120)


def under_load(wd):
    """Writes in flight in the plugin and more sent during the drain; the
    next server on the same listening socket."""
    img = wd("load.img")
    make_image(img, size="64M")
    hold_off, hold = held_block(wd, img)
    # The remote can be paused: what reaches it then stays in the plugin.
    pause = wd("pause.sock")
    remote = Remote(wd, "remote", ["file", img, f"pause-control={pause}"],
                    filters=("pause",))
    holder = Holder(wd("load.sock"))
    uri = f"nbd+unix:///?socket={holder.path}"
    ctl = wd("load.ctl")
    log1 = open(wd("load1.log"), "w+")
    s1 = holder.start(server_cmd("-v", f"nbd={remote.uri}", ctl=ctl), log1)
    wait_for(lambda: listening(ctl), "the first server", proc=s1)
    info1 = nbdinfo(uri)

    h = nbd.NBD()
    h.connect_uri(uri)
    h.pwrite(hold, hold_off)
    h.flush()
    check(read_at(img, hold_off, 4096) != hold, "the atime change is held")
    # Data writes far from the metadata and a FLUSH in the plugin when
    # the drain begins; 4 more writes and 4 reads sent during it.
    base = 40 << 20
    data = {}
    results = {}  # cookie -> errno (0: answered ok)

    def done(cookie):
        def cb(err):
            results[cookie[0]] = err.value
            return 0
        return cb

    def send_write(i):
        buf = bytes([0x40 + i]) * 4096
        box = [None]
        box[0] = h.aio_pwrite(buf, base + i * 65536,
                              completion=done(box))
        data[box[0]] = (base + i * 65536, buf)

    def send_read(i):
        box = [None]
        box[0] = h.aio_pread(nbd.Buffer(4096), base + i * 65536,
                             completion=done(box))

    # f30's mtime changed (held until the next FLUSH: policy=atime), so
    # that the FLUSH writes in the remote, and stays in the plugin.
    m_off, m_blk = held_block(wd, img, "f30", "mtime")
    check(m_off != hold_off, "f1 and f30 are in different blocks")
    h.pwrite(m_blk, m_off)
    pause_remote(pause, b"p")
    writes0, flushes0 = ops(remote)
    for i in range(4):
        send_write(i)
    box = [None]
    box[0] = h.aio_flush(completion=done(box))
    flush_cookie = box[0]
    wait_for(lambda: ops(remote)[0] == writes0 + 5,
             "the writes and the FLUSH's write-back in the remote", proc=s1)
    dr = subprocess.Popen([CTL, "-s", ctl, "drain"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    # Once the gate is closed (said with -v), more requests: they wait in
    # the plugin, unanswered, until the server ends.
    wait_for(lambda: "the gate is closed" in output(log1),
             "the drain to begin", proc=s1)
    closed = [ln for ln in output(log1).splitlines()
              if "the gate is closed" in ln]
    check(closed[0].endswith("the gate is closed, 5 requests in flight"),
          f"the 4 writes and the FLUSH are in flight ({closed[0]})")
    r = drain(ctl)
    check(r.returncode == 1 and "a drain is already under way" in r.stderr,
          f"a second drain meanwhile is refused ({r.returncode}, "
          f"{r.stderr!r})")
    for i in range(4, 8):
        send_write(i)
        send_read(i - 4)
    pause_remote(pause, b"r")
    # Until the connection drops: replies the server sent before it
    # ended may still be in the socket, to be read after its exit.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            h.poll(100)
        except nbd.Error:
            break  # the connection dropped: what is left is unanswered
        if s1.poll() is not None and h.aio_in_flight() == 0:
            break
    out, err = dr.communicate(timeout=120)
    check(dr.returncode == 0 and out == "drained\n",
          f"drain under load: exit {dr.returncode}, {out!r} {err!r}")
    s1.wait(timeout=EXIT_BOUND)
    check(s1.returncode == 0, f"the drained server exits 0 ({s1.returncode})")

    answered = {c for c, e in results.items() if e == 0}
    errors = {c: e for c, e in results.items()
              if e not in (0, errno.ENOTCONN)}
    check(not errors, "no request answered with an error "
          f"({ {c: errno.errorcode.get(e, e) for c, e in errors.items()} })")
    first = list(data)[:4]
    check(all(c in answered for c in first + [flush_cookie]),
          "the writes and the FLUSH in flight were answered")
    check(not any(c in answered for c in list(data)[4:]),
          "the writes sent during the drain were not answered")
    acked = [data[c] for c in first]
    for off, buf in acked:
        check(read_at(img, off, 4096) == buf,
              f"acknowledged write at {off} is on the store")
    check(read_at(img, hold_off, 4096) == hold, "the hold is on the store")
    check(read_at(img, m_off, 4096) == m_blk, "and what the FLUSH wrote back")

    # The next server, on the same listening socket: the client connects
    # again and re-sends what was not answered.
    log2 = open(wd("load2.log"), "w+")
    s2 = holder.start(server_cmd(f"nbd={remote.uri}", ctl=ctl), log2)
    h2 = nbd.NBD()
    h2.connect_uri(uri)  # waits in the backlog until s2 serves
    for c, (off, buf) in data.items():
        if c not in answered:
            h2.pwrite(buf, off)
    h2.flush()
    for off, buf in data.values():
        check(h2.pread(4096, off) == buf, f"write at {off} reads back")
    check(h2.pread(4096, hold_off) == hold, "the hold reads back")
    del h2
    info2 = nbdinfo(uri)
    check(info1 == info2, "the next server serves the same export "
          f"(nbdinfo --json: {info1} / {info2})")
    r = drain(ctl)
    check(r.returncode == 0, f"the second server drains ({r.stderr})")
    s2.wait(timeout=EXIT_BOUND)
    remote.stop()


def sigterm_idle(wd):
    """SIGTERM with one idle client: ends, the hold on the store."""
    img = wd("idle.img")
    make_image(img)
    hold_off, hold = held_block(wd, img)
    s, h, ctl = serve(wd, "idle", img)
    h.pwrite(hold, hold_off)
    h.flush()
    check(read_at(img, hold_off, 4096) != hold, "the atime change is held")
    s.send_signal(signal.SIGTERM)
    try:
        s.wait(timeout=EXIT_BOUND)
    except subprocess.TimeoutExpired:
        s.kill()
        s.wait()
        check(False, f"SIGTERM with an idle client: still running after "
              f"{EXIT_BOUND} s")
    check(s.returncode == 0, f"SIGTERM: the server exits 0 ({s.returncode})")
    check(read_at(img, hold_off, 4096) == hold, "SIGTERM: the hold is on "
          "the store")
    check(not os.path.exists(ctl), "SIGTERM: the control socket is removed")
    # The lock went with it: a writer takes the store without waiting.
    r = subprocess.run(["nbdkit", "-U", "-", PLUGIN, img, "lock-wait=0",
                        "--run", "true"], capture_output=True, text=True,
                       env=nbdkit_env(), timeout=60)
    check(r.returncode == 0, f"SIGTERM: the store is released ({r.stderr})")
    try:
        h.pread(512, 0)
        check(False, "SIGTERM: the idle connection still answers")
    except nbd.Error as e:
        check(e.errno != "ESHUTDOWN", f"the idle connection dropped ({e})")


def stop(wd):
    """A stop that is no drain (SIGINT: nbdkit's own quit, which waits
    for its clients) ends the drain thread in .cleanup, and the server
    exits 0.  (Not nbdkit --run: it ends the server with SIGTERM, a
    drain, once the plugin's handler is in place.)"""
    img = wd("stop.img")
    make_image(img)
    proc, h, _ = serve(wd, "stop", img, opts=("-v",))
    h.shutdown()
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=60)
    log = output(open(wd("stop.log")))
    check(rc == 0, f"the stop exits 0 ({rc})")
    check("the drain thread has ended" in log,
          f"the drain thread ends in .cleanup ({log[-400:]!r})")
    check("drained:" not in log, "the stop was not a drain")


def readonly(wd):
    """A read-only server drains too (it holds nothing), with a client."""
    img = wd("ro.img")
    make_image(img)
    s, h, ctl = serve(wd, "ro", img, opts=("-r",))
    h.pread(4096, 0)
    r = drain(ctl)
    check(r.returncode == 0 and r.stdout == "drained\n",
          f"a read-only server drains ({r.returncode}, {r.stderr!r})")
    s.wait(timeout=EXIT_BOUND)
    check(s.returncode == 0, f"and exits 0 ({s.returncode})")


def usage(wd):
    """drain's option, and no other command's."""
    for args in (["drain", "--json"], ["drain", "--timeout=0"],
                 ["drain", "--timeout=x"], ["stats", "--timeout=5"],
                 ["flush", "--timeout=5"]):
        r = subprocess.run([CTL, "-s", wd("none.ctl"), *args],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2, f"ext4lazyctl {' '.join(args)}: usage "
              f"error ({r.returncode})")
    r = subprocess.run([CTL, "-s", wd("none.ctl"), "drain",
                        "--timeout=5"], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 1 and "no such socket" in r.stderr,
          f"drain --timeout=5 without a server: exit 1 ({r.stderr!r})")


def serves_on(s, h, ctl, answer, img, held):
    """After a drain that failed on the store: the server serves on and
    has counted the failure; once the store answers again (answer()),
    the connection answers with the hold still held, and a drain works
    and writes the hold back.  held: (offset, content) of the hold."""
    hold_off, hold = held
    check(s.poll() is None, "the server serves on")
    answer()
    check(h.pread(4096, hold_off) == hold, "the connection still answers, "
          "the hold still held")
    stats = json.loads(run(CTL, "-s", ctl, "stats", "--json"))
    check(stats["drain_failures"] == 1, "the failed drain is counted")
    r = drain(ctl)
    check(r.returncode == 0, f"a drain once the store answers ({r.stderr!r})")
    s.wait(timeout=EXIT_BOUND)
    check(read_at(img, hold_off, 4096) == hold, "the hold is on the store")


def failing_store(wd):
    """A drain while the store fails writes: it fails, with the reason,
    and the server serves on."""
    img = wd("fail.img")
    make_image(img)
    hold_off, hold = held_block(wd, img)
    remote = Remote(wd, "faulty", ["file", img], inject=True)
    s, h, ctl = serve(wd, "fail", f"nbd={remote.uri}", "io-timeout=5s")
    h.pwrite(hold, hold_off)
    h.flush()
    remote.set_faulty(True)
    r = drain(ctl)
    check(r.returncode == 1, f"drain on a failing store exits 1 "
          f"({r.returncode})")
    check("not drained: writing back held blocks and flushing: "
          "Input/output error" in r.stderr, f"and says why ({r.stderr!r})")
    serves_on(s, h, ctl, lambda: remote.set_faulty(False), img,
              (hold_off, hold))
    remote.stop()


def stuck_store(wd):
    """A drain while the store does not answer: bounded by io-timeout,
    then it fails and the server serves on."""
    img = wd("stuck.img")
    make_image(img)
    hold_off, hold = held_block(wd, img)
    pause = wd("stuck-pause.sock")
    remote = Remote(wd, "stuck", ["file", img, f"pause-control={pause}"],
                    filters=("pause",))
    s, h, ctl = serve(wd, "stuck", f"nbd={remote.uri}", "io-timeout=2s")
    h.pwrite(hold, hold_off)
    h.flush()
    pause_remote(pause, b"p")
    r = drain(ctl)
    check(r.returncode == 1 and "not drained: writing back" in r.stderr,
          f"a drain on a store that does not answer fails ({r.stderr!r})")
    serves_on(s, h, ctl, lambda: pause_remote(pause, b"r"), img,
              (hold_off, hold))
    remote.stop()


def lock_wait(wd):
    """A second server waits for the store of one that drains; a real
    second writer is refused."""
    img = wd("lock.img")
    make_image(img)
    hold_off, hold = held_block(wd, img)
    s1, h, ctl1 = serve(wd, "lock1", img)
    info1 = nbdinfo(f"nbd+unix:///?socket={wd('lock1-server.sock')}")
    h.pwrite(hold, hold_off)
    h.flush()

    r = subprocess.run(["nbdkit", "-U", "-", PLUGIN, img, "lock-wait=1",
                        "--run", "true"], capture_output=True, text=True,
                       env=nbdkit_env(), timeout=60)
    check(r.returncode != 0 and "in use by another process" in r.stderr,
          f"a second writer is refused, the holder named ({r.stderr!r})")

    s2, sock2, ctl2 = start(wd, "lock2", img, "lock-wait=120")
    time.sleep(0.5)
    check(s2.poll() is None and not listening(sock2),
          "the next server waits for the store")
    r = drain(ctl1)
    check(r.returncode == 0, f"the first server drains ({r.stderr})")
    s1.wait(timeout=EXIT_BOUND)
    wait_for(lambda: listening(sock2), "the next server", proc=s2)
    h2 = nbd.NBD()
    h2.connect_unix(sock2)
    check(h2.pread(4096, hold_off) == hold,
          "the next server reads the hold the first wrote back")
    del h2
    info2 = nbdinfo(f"nbd+unix:///?socket={sock2}")
    check(info1 == info2, "the same export (nbdinfo --json)")
    check(listening(ctl2), "the next server has the control socket")
    s2.send_signal(signal.SIGTERM)
    s2.wait(timeout=EXIT_BOUND)
    check(s2.returncode == 0, "the next server drains on SIGTERM")


def main():
    require_tools()
    if not subprocess.run(["which", "nbdinfo"],
                          capture_output=True).returncode == 0:
        skip("nbdinfo not installed")
    wd = Workdir()
    try:
        which = sys.argv[1:] or ["usage", "sigterm", "stop", "readonly",
                                 "failing", "stuck", "lock", "load"]
        for name in which:
            print(f"--- {name}")
            {"load": under_load, "sigterm": sigterm_idle, "stop": stop,
             "readonly": readonly, "usage": usage, "stuck": stuck_store,
             "failing": failing_store, "lock": lock_wait}[name](wd)
    finally:
        wd.close()


main()
