# test-uring-fallback.sh --- when io_uring cannot be set up, backend=uring
# falls back to psync: the server starts, prints exactly one notice about
# it (however many connections are made), and serves data correctly.
# With io_uring available the same command prints no such notice.
#
# io_uring is switched off for the whole machine with the sysctl
# kernel.io_uring_disabled=2 and switched back on afterwards, so this
# test must not run in parallel with others.

source "$(dirname "$0")/functions.sh"
requires_plugin
requires_nbdsh
requires_root
sysctl=/proc/sys/kernel/io_uring_disabled
[ -e $sysctl ] || skip "kernel has no $sysctl"
old=$(cat $sysctl)
echo 0 >$sysctl 2>/dev/null || skip "cannot write $sysctl"
cleanup_fn sh -c "echo $old >$sysctl"

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
  echo 0 >$sysctl
  start_nbdkit "enabled-$direct" -- "$img" backend=uring direct=$direct
  exercise
  stop_nbdkit "$nbdkit_pid"
  if [ -n "$(fallback_notices "$log")" ]; then
    fallback_notices "$log" >&2
    die "direct=$direct: fallback notice although io_uring is available"
  fi

  # io_uring disabled: one notice, same service.
  echo 2 >$sysctl
  start_nbdkit "disabled-$direct" -- "$img" backend=uring direct=$direct
  exercise
  stop_nbdkit "$nbdkit_pid"
  echo 0 >$sysctl
  n=$(fallback_notices "$log" | wc -l)
  if [ "$n" -ne 1 ]; then
    fallback_notices "$log" >&2
    die "direct=$direct: expected one fallback notice, found $n"
  fi
  msg "direct=$direct: notice: $(fallback_notices "$log")"
done
