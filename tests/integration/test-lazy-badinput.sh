#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Corrupt or foreign images: nbdkit serves them as pass-through with a
# notice, never crashes, and data written reads back and lands.
source "$(dirname "$0")/functions.sh"
requires_plugin
requires_nbdsh
requires mkfs.ext4 -V
requires debugfs -V

check_case ()
{
  local name=$1 img=$2
  local log=$tmp/$name.log
  # nbdkit writes its PID file once its socket listens.
  nbdkit -f -U "$tmp/$name.sock" -P "$tmp/$name.pid" \
         "$EXT4LAZY_PLUGIN" "$img" >"$log" 2>&1 &
  local pid=$!
  for i in $(seq 100); do [ -s "$tmp/$name.pid" ] && break; sleep 0.05; done
  [ -s "$tmp/$name.pid" ] || { cat "$log"; die "$name: nbdkit did not start"; }
  nbdsh -u "nbd+unix:///?socket=$tmp/$name.sock" -c '
h.pwrite(b"Z" * 4096, 8192)
h.pwrite(b"Y" * 1024, 1024, nbd.CMD_FLAG_FUA)
assert h.pread(4096, 8192) == b"Z" * 4096
h.flush()
' || die "$name: I/O failed"
  kill "$pid"; wait "$pid" || true
  grep -q "notice: .*pass-through" "$log" ||
    { cat "$log"; die "$name: no pass-through notice"; }
  ! grep -q "notice: filesystem at offset" "$log" ||
    { cat "$log"; die "$name: served as a filesystem"; }
  cmp -n 4096 -i 8192:0 "$img" <(head -c 4096 /dev/zero | tr '\0' Z) ||
    die "$name: data did not land"
  msg "$name: pass-through with a notice"
}

base=$tmp/base.img
mkfs.ext4 -q -F -O ^has_journal "$base" 16M

# Blank.
truncate -s 16M "$tmp/blank.img"; check_case blank "$tmp/blank.img"
# Random bytes.
head -c 16M /dev/urandom > "$tmp/random.img"; check_case random "$tmp/random.img"
# Absurd log block size (s_log_block_size at 1024+24).
cp "$base" "$tmp/logbs.img"
printf '\x40\x00\x00\x00' | dd of="$tmp/logbs.img" bs=1 seek=$((1024+24)) conv=notrunc status=none
check_case logbs "$tmp/logbs.img"
# Absurd inode size 100 (s_inode_size at 1024+88).
cp "$base" "$tmp/isize.img"
printf '\x64\x00' | dd of="$tmp/isize.img" bs=1 seek=$((1024+88)) conv=notrunc status=none
check_case isize "$tmp/isize.img"
# blocks_count beyond the device (s_blocks_count_lo at 1024+4).
cp "$base" "$tmp/bcount.img"
printf '\xff\xff\xff\x0f' | dd of="$tmp/bcount.img" bs=1 seek=$((1024+4)) conv=notrunc status=none
check_case bcount "$tmp/bcount.img"
# A descriptor whose inode table points outside the device.
cp "$base" "$tmp/desc.img"
debugfs -w -R "set_bg 0 inode_table 99999999" "$tmp/desc.img" >/dev/null 2>&1 ||
  die "debugfs set_bg failed"
check_case desc "$tmp/desc.img"
