# SPDX-License-Identifier: BSD-3-Clause
# test-uring-fallback.sh --- when io_uring cannot be set up, backend=uring
# falls back to psync: the server starts, prints exactly one notice about
# it (however many connections are made), says it serves with
# backend=psync, and serves data correctly.  Without the fallback the
# same command prints no such notice and serves with backend=uring.
#
# The plugin's debug flag -D ext4lazy.no_uring=1 makes the backend act
# as if io_uring could not be set up, so nothing outside the server
# changes and the test can run alongside others.

source "$(dirname "$0")/functions.sh"
requires_plugin
requires_nbdsh

img=$tmp/disk.img
truncate -s 8M "$img"

# Lines in the log that speak of the fallback: mention io_uring and
# psync or falling back, leaving out the trace, nbdkit's echo of the
# command line parameters and the names of the test's own files.
fallback_notices ()
{
  grep -v -e 'debug: trace: ' -e 'config key=' "$1" |
    sed "s|${tmp}[^ ]*||g" |
    grep -i 'uring' | grep -Ei 'psync|fall' || true
}

# served_with LOG BACKEND: the server said it serves with BACKEND.
served_with ()
{
  grep -q "debug: serving .*, backend=$2\b" "$1"
}

exercise ()
{
  SOCK=$sock nbdsh -n -c - <<'PY'
import os
import nbd

hs = []
for i in range(3):
    h = nbd.NBD()
    h.connect_unix(os.environ["SOCK"])
    hs.append(h)
for i, h in enumerate(hs):
    h.pwrite(bytes([65 + i]) * 5000, i * 70000 + 3)
    h.pwrite(bytes([97 + i]) * 4096, (i + 100) * 4096, nbd.CMD_FLAG_FUA)
for h in hs:
    h.flush()
for i, h in enumerate(hs):
    other = hs[(i + 1) % len(hs)]
    assert other.pread(5000, i * 70000 + 3) == bytes([65 + i]) * 5000
    assert other.pread(4096, (i + 100) * 4096) == bytes([97 + i]) * 4096
    other.zero(4096, (i + 100) * 4096)
    assert h.pread(4096, (i + 100) * 4096) == bytes(4096)
for h in hs:
    h.shutdown()
PY
}

for direct in false true; do
  if [ $direct = true ] && ! direct_ok "$tmp"; then
    continue
  fi

  # Control: io_uring works, no fallback.
  start_nbdkit "enabled-$direct" -- "$img" backend=uring direct=$direct
  exercise
  stop_nbdkit "$nbdkit_pid"
  if [ -n "$(fallback_notices "$log")" ]; then
    fallback_notices "$log" >&2
    die "direct=$direct: fallback notice although io_uring is available"
  fi
  served_with "$log" uring ||
    die "direct=$direct: not serving with backend=uring"

  # io_uring cannot be set up: one notice, same service, through psync.
  start_nbdkit "disabled-$direct" -D ext4lazy.no_uring=1 -- \
    "$img" backend=uring direct=$direct
  exercise
  stop_nbdkit "$nbdkit_pid"
  n=$(fallback_notices "$log" | wc -l)
  if [ "$n" -ne 1 ]; then
    fallback_notices "$log" >&2
    die "direct=$direct: expected one fallback notice, found $n"
  fi
  served_with "$log" psync ||
    die "direct=$direct: not serving with backend=psync after the notice"
  msg "direct=$direct: notice: $(fallback_notices "$log")"
done
