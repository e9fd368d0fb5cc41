#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
# qmp.py --- one QMP command to a qemu monitor on a Unix socket.
#
#   qmp.py SOCK COMMAND [JSON-ARGUMENTS]
#
# Prints the command's "return" value as JSON on stdout; a QMP error is
# printed on stderr and exits 1.  Events met on the way are skipped.
import json
import socket
import sys

if len(sys.argv) not in (3, 4):
    sys.exit("usage: qmp.py SOCK COMMAND [JSON-ARGUMENTS]")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
f = sock.makefile("rw")


def reply():
    while True:
        line = f.readline()
        if not line:
            sys.exit("qmp.py: the monitor closed the connection")
        msg = json.loads(line)
        if "return" in msg or "error" in msg:
            return msg


def call(cmd, args=None):
    req = {"execute": cmd}
    if args is not None:
        req["arguments"] = args
    f.write(json.dumps(req) + "\n")
    f.flush()
    return reply()


json.loads(f.readline())  # the greeting
call("qmp_capabilities")
msg = call(sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) == 4 else None)
if "error" in msg:
    sys.exit("qmp.py: %s: %s" % (sys.argv[2], msg["error"].get("desc", msg)))
print(json.dumps(msg["return"]))
