# SPDX-License-Identifier: BSD-3-Clause
# test-blockdev.sh --- serve a block device (a loop device): data
# written in aligned and unaligned pieces reads back, write-zeroes (with
# and without may-trim, aligned and not) reads back zero, trim is
# accepted, and aligned zero and trim reach the device as zero and trim
# operations (BLKZEROOUT / BLKDISCARD), not as writes.  At the end the
# device holds exactly what was written.

source "$(dirname "$0")/functions.sh"
requires_plugin
requires_nbdsh
requires_root
requires losetup --version

size=$((32 * 1024 * 1024))
backing=$tmp/loop.img
truncate -s $size "$backing"
if ! dev=$(losetup -f --show "$backing" 2>"$tmp/losetup.err"); then
  skip "losetup failed: $(cat "$tmp/losetup.err")"
fi
cleanup_fn losetup -d "$dev"
[ -b "$dev" ] || die "$dev is not a block device"
msg "using $dev"

while read -r params <&3; do
  msg "checking $params"
  # shellcheck disable=SC2086
  start_nbdkit "blk-${params// /-}" -- "$dev" $params

  DEV=$dev LOG=$log SOCK=$sock SEED=$RANDOM nbdsh -c - <<'PY'
import os
import random
import re
import nbd

dev = os.environ["DEV"]
log = os.environ["LOG"]
rng = random.Random(int(os.environ["SEED"]))
KIB = 1024
MIB = 1024 * KIB

h.connect_unix(os.environ["SOCK"])
size = h.get_size()
with open(dev, "rb") as f:
    devsize = f.seek(0, os.SEEK_END)
assert size == devsize, "export size %d, device size %d" % (size, devsize)
assert not h.is_read_only()
assert h.can_zero() and h.can_trim() and h.can_flush() and h.can_fua()

LINE = re.compile(r"debug: trace: (\w+) (\d+) (\d+)")


def traced(kind, off, length):
    """True if trace lines of this kind cover [off, off+length)."""
    spans = []
    with open(log) as f:
        for line in f:
            m = LINE.search(line)
            if m and m.group(1) == kind:
                spans.append((int(m.group(2)), int(m.group(3))))
    pos = off
    for s, l in sorted(spans):
        if s <= pos < s + l:
            pos = s + l
    return pos >= off + length



def read_device():
    data = bytearray()
    with open(dev, "rb", buffering=0) as f:
        while len(data) < size:
            chunk = f.read(size - len(data))
            assert chunk, "short read from %s" % dev
            data += chunk
    return data


# What the device holds now (left over from the previous run).
expect = read_device()


def write(off, data, flags=0):
    h.pwrite(data, off, flags)
    expect[off:off + len(data)] = data


def check(off, length, what):
    got = h.pread(length, off)
    assert got == bytes(expect[off:off + length]), \
        "%s: wrong data at %d+%d" % (what, off, length)


# Aligned, unaligned, 1-byte, 4 KiB-crossing, FUA, up to 1 MiB.
check(0, size, "initial contents")
for off, length in ((0, 4096), (8192, 512), (12345, 1), (4095, 2),
                    (65536 - 100, 8000), (3 * MIB + 7, 300 * KIB),
                    (size - 4096, 4096), (size - 1, 1), (5 * MIB, MIB)):
    write(off, rng.randbytes(length))
    check(off, length, "write")
write(6 * MIB + 3, rng.randbytes(5000), nbd.CMD_FLAG_FUA)
h.flush()
for _ in range(200):
    length = rng.choice((1, 511, 512, 4096, 4097, 65536, rng.randrange(1, MIB)))
    off = rng.randrange(0, size - length + 1)
    write(off, rng.randbytes(length))
check(0, size, "random writes")

# Zero: aligned with and without may-trim, and unaligned.
for off, length, flags in ((8 * MIB, 64 * KIB, nbd.CMD_FLAG_NO_HOLE),
                           (9 * MIB, 128 * KIB, 0),
                           (10 * MIB, MIB, nbd.CMD_FLAG_FUA)):
    write(off - 4096, rng.randbytes(length + 8192))
    h.zero(length, off, flags)
    expect[off:off + length] = bytes(length)
    check(off - 4096, length + 8192, "zero %d+%d" % (off, length))
    assert traced("zero", off, length), \
        "aligned zero %d+%d not issued as a zero operation" % (off, length)
for off, length, flags in ((12 * MIB + 4097, 5000, 0),
                           (12 * MIB + 20000, 3, nbd.CMD_FLAG_NO_HOLE)):
    h.zero(length, off, flags)
    expect[off:off + length] = bytes(length)
    check(12 * MIB, 64 * KIB, "unaligned zero %d+%d" % (off, length))

# Trim is advisory: it must succeed and reach the device, after which
# the range is written again so its contents are known.
off = 14 * MIB
h.trim(MIB, off)
h.flush()
assert traced("trim", off, MIB), "trim not issued to the device"
write(off, rng.randbytes(MIB))
check(off, MIB, "write after trim")

h.flush()
check(0, size, "whole device")
h.shutdown()

# Read the device directly.
assert read_device() == expect, "device contents differ from what was written"
PY
  stop_nbdkit "$nbdkit_pid"
done 3< <(for_combos)
