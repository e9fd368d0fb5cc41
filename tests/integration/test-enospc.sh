#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A backing file on a full filesystem: the client gets ENOSPC (not EIO or
# EINVAL), from both backends, and the server keeps serving.
source "$(dirname "$0")/functions.sh"
: "${tmp:?}"
requires_root
requires_plugin
mkdir "$tmp/mnt"
mount -t tmpfs -o size=2m tmpfs "$tmp/mnt" 2>/dev/null ||
  skip "cannot mount a tmpfs here"
cleanup_fn umount "$tmp/mnt"
truncate -s 64M "$tmp/mnt/sparse.img"

for backend in uring psync; do
  nbdkit -U - "$EXT4LAZY_PLUGIN" "$tmp/mnt/sparse.img" backend=$backend \
    --run 'nbdsh -u "$uri" -c "
import errno
try:
    for i in range(16):
        h.pwrite(b\"x\" * (1 << 20), i << 20)
    raise SystemExit(\"no error writing 16 MiB into 2 MiB\")
except nbd.Error as e:
    assert e.errnum == errno.ENOSPC, \"got %r\" % e
assert h.pread(4, 0) == b\"xxxx\", \"the server stops serving after ENOSPC\"
"' </dev/null || die "backend=$backend: ENOSPC not reported as ENOSPC"
  rm -f "$tmp/mnt/sparse.img"; truncate -s 64M "$tmp/mnt/sparse.img"
  msg "backend=$backend: ENOSPC reaches the client"
done
