#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
# listen-hold.py --- hold a listening Unix socket across server restarts,
# as systemd's socket unit (ext4lazy@.socket) with a restarted service.
#
#   listen-hold.py SOCK EVENTS -- COMMAND [ARG...]
#
# Binds and listens on SOCK once, then runs COMMAND with the socket as
# file descriptor 3 and LISTEN_FDS=1, LISTEN_PID=its pid (sd_listen_fds),
# and again each time it exits, until this process gets SIGTERM or
# SIGINT: then it lets the running server end on its own and exits with
# it.  "{n}" in an argument becomes the run's number (1, 2, ...).  Each
# start and exit is appended to EVENTS: "start N PID TIME" and
# "exit N PID STATUS TIME" (STATUS as the shell gives it: 128+SIG for a
# signal), TIME in seconds since the epoch.  Clients that connect while
# no server runs wait in the socket's backlog.  Like systemd's start
# limit, five runs in a row that fail within a second end it.
import os
import signal
import socket
import sys
import time

if len(sys.argv) < 5 or sys.argv[3] != "--":
    sys.exit("usage: listen-hold.py SOCK EVENTS -- COMMAND [ARG...]")
path, events, argv = sys.argv[1], sys.argv[2], sys.argv[4:]

stopping = False


def stop(_sig, _frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)

try:
    os.unlink(path)
except FileNotFoundError:
    pass
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.bind(path)
sock.listen(128)


def note(line):
    with open(events, "a") as f:
        f.write(line + " %.6f\n" % time.time())


n = 0
quick_failures = 0
while not stopping and quick_failures < 5:
    n += 1
    args = [a.replace("{n}", str(n)) for a in argv]
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if sock.fileno() != 3:
            os.dup2(sock.fileno(), 3)
        os.set_inheritable(3, True)
        os.environ["LISTEN_FDS"] = "1"
        os.environ["LISTEN_PID"] = str(os.getpid())
        try:
            os.execvp(args[0], args)
        finally:
            os._exit(127)
    started = time.monotonic()
    note("start %d %d" % (n, pid))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        code = 128 + os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)
    note("exit %d %d %d" % (n, pid, code))
    if code != 0 and time.monotonic() - started < 1:
        quick_failures += 1
        time.sleep(0.2)
    else:
        quick_failures = 0
sock.close()
os.unlink(path)
