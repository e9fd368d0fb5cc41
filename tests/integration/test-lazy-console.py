#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""ext4lazyctl as a console: `holds` names the held inode and what
differs, `watch` draws frames without a terminal and quits on q or
Ctrl-C on one, --version, exit statuses; and the plugin's start-up
notice names the filesystem.

Usage: test-lazy-console.py VERSION (the project's, from meson)."""
import json
import os
import pty
import re
import select
import subprocess
import termios

from lazylib import *

require_tools()
version = sys.argv[1] if len(sys.argv) > 1 else None


def ctl(*args):
    """(exit status, stdout, stderr) of ext4lazyctl."""
    p = subprocess.run([CTL, *args], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    return p.returncode, p.stdout, p.stderr


def watch_on_a_terminal(sock, key):
    """Run watch on a pseudo-terminal, press key once a frame is drawn:
    (exit status, output, the terminal's lflag during and after); a new
    pseudo-terminal starts in canonical mode with echo."""
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm"
        os.execv(CTL, [CTL, "-s", sock, "watch", "--interval", "0.2"])
    out = b""
    deadline = time.time() + 20
    while b"(q quits)" not in out and time.time() < deadline:
        if select.select([fd], [], [], 0.1)[0]:
            out += os.read(fd, 65536)
    during = termios.tcgetattr(fd)[3]
    os.write(fd, key)
    for _ in range(200):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = -1
    after = termios.tcgetattr(fd)[3]
    os.close(fd)
    return (os.waitstatus_to_exitcode(status) if status != -1 else None,
            out.decode(errors="replace"), during, after)


wd = Workdir()
try:
    # --- no server needed ---------------------------------------------
    st, out, _ = ctl("--version")
    check(st == 0 and re.fullmatch(r"ext4lazyctl \S+\n", out),
          f"--version: {out.strip()}")
    if version:
        check(out == f"ext4lazyctl {version}\n", "--version is meson's")
    st, out, _ = ctl("--help")
    check(st == 0 and "Exit status" in out, "--help gives the exit codes")
    none = wd("none.sock")
    st, _, err = ctl("-s", none, "holds")
    check(st == 1 and none in err, f"missing socket: 1, named: {err.strip()}")
    for bad in (["holds", "--prometheus"], ["watch", "--json"],
                ["stats", "-n", "2"], ["watch", "-n", "0"],
                ["watch", "--interval", "0"], ["holds", "extra"]):
        st, _, _ = ctl("-s", none, *bad)
        check(st == 2, f"usage error {bad}: 2")

    # --- a held atime change ------------------------------------------
    img, copy = wd("disk.img"), wd("copy.img")
    make_image(img)
    bs = block_size(img)
    ino, off = imap(img, "/f1")
    debugfs_copy(img, copy, "set_inode_field /f1 atime 20200101")
    new = read_at(copy, off, bs)

    srv = Server(wd, img, "max-age=2h")
    h = srv.connect()
    h.pwrite(new, off)
    check(read_at(img, off, bs) != new, "the atime change is held")

    notices = [l for l in srv.output().splitlines()
               if "filesystem at offset" in l]
    check(len(notices) == 1, f"one start-up notice: {notices}")
    check(re.search(r"notice: filesystem at offset 0: 32M, 4096-byte blocks,"
                    r" no journal; policy=atime \(the default: [^)]*\)"
                    r" max-age=2h max-held=64M$",
                    notices[0]), "it gives the layout and the policy")
    errors = [l for l in srv.output().splitlines() if "error" in l]
    check(not errors, f"a normal start says nothing that reads as an error: {errors}")

    held = json.loads(srv.ctl_cmd("holds", "--json"))
    check(held["held_blocks"] == 1 and len(held["holds"]) == 1,
          "holds --json: one block")
    hb = held["holds"][0]
    check(hb["kind"] == "inplace" and hb["fs"] == "ext4@0"
          and hb["offset"] == off and hb["length"] == bs,
          "kind inplace, ext4@0, at the inode's block")
    check(hb["age_s"] >= 0 and 0 < hb["deadline_in_s"] <= 7200,
          f"age {hb['age_s']} >= 0, deadline in {hb['deadline_in_s']}s")
    check(hb["inodes"] == [{"ino": ino, "fields": ["atime"]}],
          f"inode {ino} differs in atime only: {hb['inodes']}")
    text = srv.ctl_cmd("holds")
    check(re.search(rf"^inplace +atime +ext4@0 +{off} .* ino {ino} atime$",
                    text, re.M), "holds: the same as a table")

    names = [i["name"] for i in srv.stats()["instances"]]
    check(names == ["ext4@0"], f"no empty 'other' instance: {names}")

    # --- watch without a terminal --------------------------------------
    st, out, err = ctl("-s", srv.ctl, "watch", "-n", "2", "--interval",
                       "0.2")
    check(st == 0, f"watch -n 2 exits 0 {err}")
    frames = re.findall(r"^ext4lazy on ", out, re.M)
    check(len(frames) == 2, f"two frames: {len(frames)}")
    check("\033" not in out, "no escape sequences without a terminal")
    check(re.search(r"^  ext4@0 +1 +4096 ", out, re.M),
          "the frame shows the hold")
    check(re.search(r"^  write +1 ", out, re.M), "and the write")

    # --- watch on a terminal: q and Ctrl-C quit, the terminal is restored
    cooked = termios.ICANON | termios.ECHO
    for key, name in ((b"q", "q"), (b"\x03", "Ctrl-C")):
        st, out, during, after = watch_on_a_terminal(srv.ctl, key)
        check(out.startswith("\033[H\033[2J"), f"{name}: clear and home")
        check(during & cooked == 0,
              f"{name}: keys unechoed while watching")
        check(st == 0, f"{name}: exits 0 ({st})")
        check(after & cooked == cooked, f"{name}: terminal restored")

    # --- flushed: nothing held ------------------------------------------
    srv.ctl_cmd("flush")
    held = json.loads(srv.ctl_cmd("holds", "--json"))
    check(held == {"holds": [], "held_blocks": 0, "held_bytes": 0},
          "nothing held after flush")
    h.shutdown()
    srv.stop()
    st, _, err = ctl("-s", srv.ctl, "watch", "-n", "1")
    check(st == 1 and srv.ctl in err, "server gone: watch exits 1")
finally:
    wd.close()
