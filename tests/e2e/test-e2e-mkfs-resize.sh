#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-e2e-mkfs-resize.sh --- a guest kernel makes ext4 on a blank volume
# through the server and writes files; the volume then grows twice and the
# guest grows the filesystem, once offline and once mounted (online).  The
# data must survive and the host's e2fsck must find the image clean.
. "$(dirname "$0")/lib.sh"
e2e_init

NFILES=200
SIZE=12000
SEED=23
params=(nfiles=$NFILES size=$SIZE seed=$SEED mountopts=relatime)
img=$E2E_TMP/disk.img

block_count ()
{
  dumpe2fs -h "$img" 2>/dev/null | awk -F: '/^Block count/ { print $2 + 0 }'
}

# 1: blank 64 MiB volume, guest mkfs (journaled, default features).
e2e_image "$img" 64M
e2e_nbdkit_start mkfs default "$img"
e2e_boot mkfs workload=mkfs,mount,populate,verify,umount,fsck "${params[@]}" \
  || e2e_fail "guest mkfs run failed"
e2e_nbdkit_stop || e2e_fail "server did not exit cleanly"
[ "$(block_count)" = 16384 ] || e2e_fail "mkfs made $(block_count) blocks"

# 2: the volume grows to 128 MiB; offline resize2fs in the guest.
truncate -s 128M "$img"
e2e_nbdkit_start offline default "$img"
e2e_boot offline workload=resize,mount,verify,df,umount,fsck "${params[@]}" \
  || e2e_fail "guest offline resize run failed"
e2e_nbdkit_stop || e2e_fail "server did not exit cleanly"
[ "$(block_count)" = 32768 ] \
  || e2e_fail "offline resize left $(block_count) blocks"

# 3: the volume grows to 192 MiB; resize2fs on the mounted filesystem.
truncate -s 192M "$img"
e2e_nbdkit_start online default "$img"
e2e_boot online workload=mount,resize,df,verify,umount,fsck "${params[@]}" \
  || e2e_fail "guest online resize run failed"
e2e_nbdkit_stop || e2e_fail "server did not exit cleanly"
[ "$(block_count)" = 49152 ] \
  || e2e_fail "online resize left $(block_count) blocks"

# Host: clean, and the files are there.
e2fsck -fn "$img" >"$E2E_TMP/fsck.log" 2>&1 \
  || { cat "$E2E_TMP/fsck.log" >&2; e2e_fail "e2fsck -fn on the host"; }
mkdir -p "$E2E_TMP/out"
debugfs -R "rdump /data $E2E_TMP/out" "$img" >/dev/null 2>&1 \
  || e2e_fail "debugfs rdump"
"$E2E_GUEST" verify "$E2E_TMP/out/data" $NFILES $SIZE $SEED >&2 \
  || e2e_fail "files on the host differ from what the guest wrote"
echo "PASS: guest mkfs and resize through ${E2E_PLUGIN_SPEC}"
