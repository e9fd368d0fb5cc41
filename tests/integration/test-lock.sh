# SPDX-License-Identifier: BSD-3-Clause
# test-lock.sh --- one writer per volume, for files and block devices.
# A second server on a served file refuses at start-up with one line
# naming the file and the lock, before its socket exists, and starts
# once the first has stopped; read-only servers share; qemu-io cannot
# open a served image for writing, and a server refuses an image
# qemu-io holds open; lock=off serves anyway, with a warning.  A loop
# device: a second server refuses, and so does a mounted device.

source "$(dirname "$0")/functions.sh"
requires_plugin
requires mkfs.ext4 -V

img=$tmp/disk.img
truncate -s 64M "$img"
mkfs.ext4 -q -F "$img"

# refuses PATTERN ARGS...: nbdkit with the plugin refuses to start, with
# one line matching PATTERN, and creates no socket.
refuses ()
{
  local pattern=$1 r=0
  shift
  rm -f "$tmp/x.sock"
  timeout 60 nbdkit -U "$tmp/x.sock" "$plugin" "$@" lock-wait=1 --run true \
    >/dev/null 2>"$tmp/err" </dev/null || r=$?
  [ $r -ne 0 ] || die "nbdkit $*: started"
  [ $r -lt 124 ] || die "nbdkit $*: exit status $r"
  [ "$(grep -c . "$tmp/err")" -eq 1 ] ||
    { cat "$tmp/err" >&2; die "nbdkit $*: not one line"; }
  grep -Eq -- "$pattern" "$tmp/err" ||
    { cat "$tmp/err" >&2; die "nbdkit $*: not /$pattern/"; }
  [ ! -e "$tmp/x.sock" ] || die "nbdkit $*: created its socket"
  msg "ok: refused: $(cat "$tmp/err")"
}

# starts ARGS...: nbdkit with the plugin serves and exits cleanly.
starts ()
{
  timeout 60 nbdkit -U - "$plugin" "$@" --run true \
    >"$tmp/out" 2>"$tmp/err" </dev/null ||
    { cat "$tmp/err" >&2; die "nbdkit $*: did not start"; }
}

locked="file=$img: in use by another process .*image lock.*lock=off"

msg "two servers on one file"
start_nbdkit first -- "$img"
refuses "$locked" "$img"
refuses "file=$img: .*another process" -r "$img"
msg "lock=off serves anyway, with a warning"
starts "$img" lock=off
grep -q "warning: lock=off: $img is not locked" "$tmp/err" ||
  die "lock=off: no warning"
expect_error "lock=maybe: expected on or off" "$plugin" "$img" lock=maybe

if command -v qemu-io >/dev/null; then
  msg "qemu-io cannot write an image a server serves"
  if qemu-io -f raw -c 'write 0 512' "$img" >"$tmp/q.out" 2>&1; then
    die "qemu-io wrote to a served image"
  fi
  grep -q 'Failed to get "write" lock' "$tmp/q.out" ||
    { cat "$tmp/q.out" >&2; die "qemu-io failed for another reason"; }
fi
stop_nbdkit "$nbdkit_pid"
msg "after the first stops, the second starts"
starts "$img"

msg "read-only servers share the image, and keep writers out"
start_nbdkit reader -r -- "$img"
starts -r "$img"
refuses "$locked" "$img"
stop_nbdkit "$nbdkit_pid"

if command -v qemu-io >/dev/null; then
  msg "a server refuses an image qemu-io holds open for writing"
  fifo=$tmp/qemu.fifo
  mkfifo "$fifo"
  qemu-io -f raw "$img" <"$fifo" >"$tmp/qio.out" 2>&1 &
  qpid=$!
  exec 4>"$fifo"
  cleanup_fn kill "$qpid"
  # qemu-io has the image open once it answers a command.
  echo 'read 0 512' >&4
  for ((i = 0; i < 300; i++)); do
    grep -q "read 512/512" "$tmp/qio.out" && break
    sleep 0.1
  done
  grep -q "read 512/512" "$tmp/qio.out" || die "qemu-io did not start"
  refuses "$locked" "$img"
  refuses "file=$img: .*another process" -r "$img"
  echo quit >&4
  exec 4>&-
  wait "$qpid" || true
  starts "$img"
fi

if [ "$(id -u)" -eq 0 ] && losetup --version >/dev/null 2>&1 &&
     dev=$(losetup -f --show "$img" 2>/dev/null); then
  cleanup_fn losetup -d "$dev"
  msg "two servers on one block device ($dev)"
  start_nbdkit dev -- "$dev"
  refuses "file=$dev: (device busy|in use by another process)" "$dev"
  stop_nbdkit "$nbdkit_pid"
  starts "$dev"
  mnt=$tmp/mnt
  mkdir "$mnt"
  if mount "$dev" "$mnt" 2>/dev/null; then
    cleanup_fn umount "$mnt"
    msg "a mounted device is refused"
    refuses "file=$dev: device busy: mounted" "$dev"
    umount "$mnt"
  else
    msg "note: cannot mount $dev here, not testing a mounted device"
  fi
else
  msg "note: no loop device (needs root and losetup), devices not tested"
fi
msg "ok"
