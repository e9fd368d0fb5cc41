# SPDX-License-Identifier: BSD-3-Clause
# test-zero-trim-extents.sh --- WRITE_ZEROES (with and without may-trim,
# fast-zero), TRIM and extents on a sparse file, in every backend/direct
# combination.
#
# - extents of a sparse file (truncate + a few written blocks) are
#   reported exactly by "nbdinfo --map": holes as hole,zero (3), data
#   as data (0);
# - zero with NO_HOLE reads back zero and keeps the blocks allocated;
# - zero with may-trim reads back zero and punches a hole (fewer
#   allocated blocks, hole in the extents);
# - fast zero either succeeds and reads back zero, or fails with ENOTSUP
#   and leaves the data alone;
# - trim punches a hole and the trimmed range reads back zero;
# - unaligned zeroes leave the bytes around them intact;
# - at the end the extents the server reports match SEEK_DATA/SEEK_HOLE
#   on the backing file.

source "$(dirname "$0")/functions.sh"
requires_plugin
requires_nbdsh
requires nbdinfo --version
requires python3 -c 'import os; os.SEEK_DATA'

img=$tmp/disk.img
size=$((16 * 1024 * 1024))

# nbdinfo --map output as "offset length type" lines, adjacent extents
# of the same type merged.
map ()
{
  nbdinfo --map "$1" |
    awk '{ off = $1; len = $2; type = $3;
           if (n > 0 && type == t && off == o + l) { l += len; next }
           if (n > 0) print o, l, t;
           o = off; l = len; t = type; n++ }
         END { if (n > 0) print o, l, t }'
}

# The extents the backing file has, from SEEK_DATA/SEEK_HOLE, in the
# same form (3 = hole,zero, 0 = data).
file_map ()
{
  python3 - "$1" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
off = 0
out = []
while off < size:
    try:
        d = os.lseek(fd, off, os.SEEK_DATA)
    except OSError:
        d = size
    if d > off:
        out.append((off, d - off, 3))
        off = d
        continue
    e = min(os.lseek(fd, off, os.SEEK_HOLE), size)
    out.append((off, e - off, 0))
    off = e
for o, l, t in out:
    print(o, l, t)
PY
}

while read -r params <&3; do
  msg "checking $params"
  name=zte-${params// /-}
  rm -f "$img"
  truncate -s $size "$img"
  # A sparse file with data at 1 MiB (64 KiB), 8 MiB (4 KiB) and the
  # last 4 KiB.
  dd if=/dev/urandom of="$img" bs=64K count=1 seek=16 conv=notrunc status=none
  dd if=/dev/urandom of="$img" bs=4K count=1 seek=2048 conv=notrunc status=none
  dd if=/dev/urandom of="$img" bs=4K count=1 seek=$((size / 4096 - 1)) \
     conv=notrunc status=none
  sync "$img"
  # shellcheck disable=SC2086
  start_nbdkit "$name" -- "$img" $params

  map "$uri" >"$tmp/map"
  cat >"$tmp/map.expected" <<EOM
0 1048576 3
1048576 65536 0
1114112 7274496 3
8388608 4096 0
8392704 $((size - 4096 - 8392704)) 3
$((size - 4096)) 4096 0
EOM
  if ! diff -u "$tmp/map.expected" "$tmp/map"; then
    die "$params: extents of the sparse file are wrong"
  fi

  IMG=$img SOCK=$sock nbdsh -c - <<'PY'
import errno
import os
import nbd

img = os.environ["IMG"]
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_unix(os.environ["SOCK"])
assert h.can_zero(), "can_zero is false"
assert h.can_trim(), "can_trim is false"
assert h.can_fast_zero(), "can_fast_zero is false"
assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION)

KIB = 1024
MIB = 1024 * KIB


def pattern(n, seed):
    return bytes((i * 7 + seed) % 251 + 1 for i in range(n))


def blocks():
    return os.stat(img).st_blocks


def extents(off, length):
    """[(offset, length, flags)] from NBD block status."""
    out = []

    def cb(meta, o, entries, err):
        if meta != nbd.CONTEXT_BASE_ALLOCATION:
            return 0
        pos = o
        for i in range(0, len(entries), 2):
            out.append((pos, entries[i], entries[i + 1]))
            pos += entries[i]
        return 0

    pos = off
    while pos < off + length:
        n = len(out)
        h.block_status(off + length - pos, pos, cb)
        assert len(out) > n, "block status returned nothing at %d" % pos
        pos = out[-1][0] + out[-1][1]
    return out


def is_hole(off, length):
    for o, l, fl in extents(off, length):
        if o < off + length and off < o + l:
            if fl != nbd.STATE_HOLE | nbd.STATE_ZERO:
                return False
    return True


def write_flush(off, data):
    h.pwrite(data, off)
    h.flush()


# Zero without may-trim: reads back zero, blocks stay allocated.
off = 2 * MIB
data = pattern(128 * KIB, 1)
write_flush(off, data)
b0 = blocks()
h.zero(64 * KIB, off, nbd.CMD_FLAG_NO_HOLE)
got = h.pread(128 * KIB, off)
assert got[:64 * KIB] == bytes(64 * KIB), "NO_HOLE zero: not zero"
assert got[64 * KIB:] == data[64 * KIB:], "NO_HOLE zero: neighbour damaged"
assert blocks() >= b0, \
    "NO_HOLE zero deallocated blocks (%d -> %d)" % (b0, blocks())

# Zero with may-trim: reads back zero and the file becomes sparse there.
b1 = blocks()
h.zero(64 * KIB, off + 64 * KIB, 0)
assert h.pread(128 * KIB, off) == bytes(128 * KIB), "may-trim zero: not zero"
assert blocks() <= b1 - 64 * KIB // 512, \
    "may-trim zero did not punch a hole (%d -> %d blocks)" % (b1, blocks())
assert is_hole(off + 64 * KIB, 64 * KIB), \
    "may-trim zero: extents do not show a hole: %r" % \
    extents(off + 64 * KIB, 64 * KIB)

# Fast zero: fast success, or ENOTSUP with the data untouched.
for flags in (nbd.CMD_FLAG_FAST_ZERO,
              nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE):
    off = 3 * MIB
    data = pattern(64 * KIB, flags & 0xff)
    write_flush(off, data)
    try:
        h.zero(64 * KIB, off, flags)
    except nbd.Error as e:
        assert e.errnum == errno.ENOTSUP, \
            "fast zero failed with %s, not ENOTSUP" % e
        assert h.pread(64 * KIB, off) == data, \
            "failed fast zero changed the data"
    else:
        assert h.pread(64 * KIB, off) == bytes(64 * KIB), \
            "fast zero: not zero"

# Trim punches a hole in a file; the range then reads back zero.
off = 4 * MIB
data = pattern(128 * KIB, 3)
write_flush(off, data)
b2 = blocks()
h.trim(64 * KIB, off)
h.flush()
assert blocks() <= b2 - 64 * KIB // 512, \
    "trim did not punch a hole (%d -> %d blocks)" % (b2, blocks())
got = h.pread(128 * KIB, off)
assert got[:64 * KIB] == bytes(64 * KIB), "trimmed range does not read zero"
assert got[64 * KIB:] == data[64 * KIB:], "trim damaged its neighbour"
assert is_hole(off, 64 * KIB), "trim: extents do not show a hole"
assert not is_hole(off + 64 * KIB, 64 * KIB), "trim: data shown as a hole"

# Unaligned zeroes (also across 4 KiB boundaries) keep their neighbours.
off = 5 * MIB
expect = bytearray(pattern(16 * KIB, 4))
write_flush(off, bytes(expect))
for o, l, fl in ((4097, 5000, 0), (12000, 3000, nbd.CMD_FLAG_NO_HOLE),
                 (1, 1, 0), (8191, 2, nbd.CMD_FLAG_NO_HOLE),
                 (16 * KIB - 1, 1, 0)):
    h.zero(l, off + o, fl)
    expect[o:o + l] = bytes(l)
    got = h.pread(16 * KIB, off)
    assert got == bytes(expect), "unaligned zero %d+%d (flags %d) wrong" % \
        (o, l, fl)

# Zero and trim at the very end of the export.
size = h.get_size()
h.zero(4096, size - 4096, 0)
assert h.pread(4096, size - 4096) == bytes(4096)
h.pwrite(b"\x01" * 4096, size - 4096)
h.trim(4096, size - 4096)
h.flush()
assert h.pread(4096, size - 4096) == bytes(4096), "trim at end not zero"

# Data written to a hole becomes data in the extents.
off = 10 * MIB
assert is_hole(off, 64 * KIB)
write_flush(off, pattern(64 * KIB, 5))
assert not is_hole(off, 64 * KIB), "written data reported as a hole"
h.shutdown()
PY

  # What the server reports now is what the file holds.
  map "$uri" >"$tmp/map"
  file_map "$img" >"$tmp/map.file"
  if ! diff -u "$tmp/map.file" "$tmp/map"; then
    die "$params: extents differ from SEEK_DATA/SEEK_HOLE on the file"
  fi
  stop_nbdkit "$nbdkit_pid"
done 3< <(for_combos)
