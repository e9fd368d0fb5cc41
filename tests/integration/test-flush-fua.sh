# SPDX-License-Identifier: BSD-3-Clause
# test-flush-fua.sh --- FLUSH and FUA reach the backing store before the
# reply, on every connection, and are advertised.
#
# The plugin's trace (-D ext4lazy.trace=1) logs each backing-store
# operation when it is issued.  nbdkit writes the log line before it
# replies, so once a request has returned its effect must be in the log:
#  - after NBD FLUSH: a "flush" after the writes that preceded it, also
#    when the writes came in on another connection;
#  - after a FUA write: the writes covering it carry " fua", or a
#    "flush" follows them;
#  - after FUA write-zeroes / trim: a "flush" follows them, or (zero
#    done by writing) the writes carry " fua";
#  - a FLUSH with nothing written since the last one issues no "flush".

source "$(dirname "$0")/functions.sh"
requires_plugin
requires_nbdsh
requires nbdinfo --version

img=$tmp/disk.img

while read -r params <&3; do
  msg "checking $params"
  rm -f "$img"
  truncate -s 16M "$img"
  # shellcheck disable=SC2086
  start_nbdkit "flush-${params// /-}" -- "$img" $params

  # Advertised flags.
  nbdinfo --json "$uri" >"$tmp/info.json"
  for flag in can_flush can_fua can_multi_conn; do
    grep -q "\"$flag\": true" "$tmp/info.json" ||
      die "$params: nbdinfo does not show $flag: $(cat "$tmp/info.json")"
  done

  LOG=$log SOCK=$sock nbdsh -c - <<'PY'
import os
import re
import nbd

log = os.environ["LOG"]

LINE = re.compile(r"debug: trace: (.*)$")
OP = re.compile(r"^(write|read|zero|trim) (\d+) (\d+)( fua)?$")


def ops():
    """Parsed trace lines: (kind, offset, length, fua) or ("flush",)."""
    out = []
    with open(log) as f:
        for line in f:
            m = LINE.search(line.rstrip("\n"))
            if not m:
                continue
            t = m.group(1)
            if t == "flush":
                out.append(("flush",))
                continue
            o = OP.match(t)
            assert o, "malformed trace line: %r" % line
            out.append((o.group(1), int(o.group(2)), int(o.group(3)),
                        o.group(4) is not None))
    return out


def overlapping(trace, kinds, off, length):
    """Indexes of trace entries of the given kinds that touch the range."""
    return [i for i, e in enumerate(trace)
            if e[0] in kinds and e[1] < off + length and off < e[1] + e[2]]


def covers(trace, idx, off, length):
    """True if the union of the entries idx covers [off, off+length)."""
    pos = off
    for s, l in sorted((trace[i][1], trace[i][2]) for i in idx):
        if s > pos:
            break
        pos = max(pos, s + l)
    return pos >= off + length


def check_durable(trace, off, length, what):
    """The operations covering the range were made durable."""
    idx = overlapping(trace, ("write", "zero", "trim"), off, length)
    assert idx and covers(trace, idx, off, length), \
        "%s: no backing-store operation covers %d+%d: %r" % \
        (what, off, length, trace)
    last = max(idx)
    if any(e[0] == "flush" for e in trace[last + 1:]):
        return
    assert all(trace[i][3] for i in idx), \
        "%s: %d+%d is neither written with fua nor flushed afterwards: %r" % \
        (what, off, length, trace)


sock = os.environ["SOCK"]
h1 = nbd.NBD()
h1.connect_unix(sock)
h2 = nbd.NBD()
h2.connect_unix(sock)
for h in (h1, h2):
    assert h.can_flush(), "can_flush is false"
    assert h.can_fua(), "can_fua is false"
    assert h.can_multi_conn(), "can_multi_conn is false"

blk = b"\xa5" * 4096

# Writes, then FLUSH on the same connection.
n0 = len(ops())
h1.pwrite(blk, 0)
h1.pwrite(blk, 8192)
h1.pwrite(b"x", 12345)
h1.pwrite(blk * 3, 20000)
h1.flush()
t = ops()[n0:]
for off, length in ((0, 4096), (8192, 4096), (12345, 1), (20000, 12288)):
    idx = overlapping(t, ("write",), off, length)
    assert idx and covers(t, idx, off, length), \
        "write %d+%d not in trace: %r" % (off, length, t)
    assert any(e[0] == "flush" for e in t[max(idx) + 1:]), \
        "no flush after write %d+%d before FLUSH returned: %r" % \
        (off, length, t)

# Writes on one connection, FLUSH on the other (multi-conn).
n0 = len(ops())
h1.pwrite(blk, 1 << 20)
h2.flush()
t = ops()[n0:]
idx = overlapping(t, ("write",), 1 << 20, 4096)
assert idx, "write on connection 1 not in trace: %r" % t
assert any(e[0] == "flush" for e in t[max(idx) + 1:]), \
    "FLUSH on connection 2 did not flush connection 1's write: %r" % t

# FUA writes, aligned and not.
for off, length in ((2 << 20, 4096), (3 << 20, 65536), ((4 << 20) + 17, 5000)):
    n0 = len(ops())
    h1.pwrite(b"\x5a" * length, off, nbd.CMD_FLAG_FUA)
    check_durable(ops()[n0:], off, length, "FUA write")

# FUA on write-zeroes, with and without may-trim, and on trim.
for flags in (nbd.CMD_FLAG_FUA, nbd.CMD_FLAG_FUA | nbd.CMD_FLAG_NO_HOLE):
    off = 5 << 20
    h1.pwrite(b"\x77" * 65536, off)
    n0 = len(ops())
    h1.zero(65536, off, flags)
    check_durable(ops()[n0:], off, 65536, "FUA zero flags=%d" % flags)
    assert h1.pread(65536, off) == bytes(65536)

off = 6 << 20
h1.pwrite(b"\x66" * 65536, off)
n0 = len(ops())
h1.trim(65536, off, nbd.CMD_FLAG_FUA)
t = ops()[n0:]
idx = overlapping(t, ("trim",), off, 65536)
assert idx, "trim not in trace: %r" % t
assert all(t[i][3] for i in idx) or \
    any(e[0] == "flush" for e in t[max(idx) + 1:]), \
    "FUA trim neither made durable itself nor followed by flush: %r" % t

# Reads are traced too, and the data written above reads back.
n0 = len(ops())
assert h2.pread(4096, 0) == blk
assert h2.pread(1, 12345) == b"x"
t = ops()[n0:]
idx = overlapping(t, ("read",), 0, 4096)
assert idx and covers(t, idx, 0, 4096), "read not in trace: %r" % t

# CACHE is accepted (advisory prefetch).
assert h1.can_cache(), "can_cache is false"
h1.cache(65536, 0)

# A FLUSH with nothing written since the last successful one does not
# reach the store; after a write, or a zero, it does; a FUA write alone
# leaves nothing to flush.
def flushes(since):
    return sum(1 for e in ops()[since:] if e[0] == "flush")


h1.flush()
n0 = len(ops())
h1.flush()
h2.flush()
assert flushes(n0) == 0, "empty FLUSHes reached the store: %r" % ops()[n0:]
h1.pwrite(blk, 7 << 20)
h2.flush()
assert flushes(n0) == 1, "FLUSH after a write: %r" % ops()[n0:]
h1.pwrite(blk, 7 << 20, nbd.CMD_FLAG_FUA)
h1.flush()
assert flushes(n0) == 1, "FLUSH after a FUA write alone: %r" % ops()[n0:]
h1.zero(4096, 7 << 20)
h1.flush()
assert flushes(n0) == 2, "FLUSH after a zero: %r" % ops()[n0:]

for h in (h1, h2):
    h.shutdown()
PY
  stop_nbdkit "$nbdkit_pid"

  # The data is in the file.
  cmp -n 4096 "$img" <(head -c 4096 /dev/zero | tr '\0' '\245') ||
    die "$params: block 0 not written to the file"
done 3< <(for_combos)
