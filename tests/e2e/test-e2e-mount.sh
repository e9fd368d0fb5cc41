#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-e2e-mount.sh --- a guest kernel mounts a journaled ext4 image through
# the server, checks, modifies and rereads files, and the host then finds
# the image clean and holding exactly the expected files.
. "$(dirname "$0")/lib.sh"
e2e_init

NFILES=300
SIZE=20000
SEED=11
params=(nfiles=$NFILES size=$SIZE seed=$SEED)
# After "modify": one in seven deleted (i % 7 == 3), a quarter as many new.
EXPECT=$((NFILES - (NFILES + 3) / 7 + NFILES / 4))

# Host: a journaled ext4 image holding the file set under /data.
img=$E2E_TMP/disk.img
mkdir -p "$E2E_TMP/tree"
"$E2E_GUEST" populate "$E2E_TMP/tree/data" $NFILES $SIZE $SEED >/dev/null \
  || e2e_fail "populate on the host"
e2e_image "$img" 64M
mkfs.ext4 -q -F -b 4096 -d "$E2E_TMP/tree" "$img" \
  || e2e_fail "mkfs.ext4 -d"
rm -rf "$E2E_TMP/tree"

# Guest, first server: check, scan (atime traffic), modify, check again.
e2e_nbdkit_start mount1 default "$img"
e2e_boot mount1 workload=mount,verify,readscan,modify,verify-modified,umount,fsck \
  mountopts=strictatime scans=2 pause=1 "${params[@]}" \
  || e2e_fail "guest run 1 failed"
[ "$(e2e_result verify files)" = $EXPECT ] \
  || e2e_fail "guest counted $(e2e_result verify files) files after modify"
e2e_nbdkit_stop || e2e_fail "server did not exit cleanly"

# Guest, a new server on the same image: what was written must be there.
e2e_nbdkit_start mount2 default "$img"
e2e_boot mount2 workload=mount,verify-modified,umount,fsck \
  mountopts=relatime "${params[@]}" || e2e_fail "guest run 2 failed"
e2e_nbdkit_stop || e2e_fail "server did not exit cleanly"

# Host: the image is clean and libext2fs reads the expected files.
e2fsck -fn "$img" >"$E2E_TMP/fsck.log" 2>&1 \
  || { cat "$E2E_TMP/fsck.log" >&2; e2e_fail "e2fsck -fn on the host"; }
mkdir -p "$E2E_TMP/out"
debugfs -R "rdump /data $E2E_TMP/out" "$img" >/dev/null 2>&1 \
  || e2e_fail "debugfs rdump"
"$E2E_GUEST" verify "$E2E_TMP/out/data" $NFILES $SIZE $SEED modified >&2 \
  || e2e_fail "files on the host differ from what the guest wrote"
nfound=$(find "$E2E_TMP/out/data" -type f | wc -l)
[ "$nfound" = $EXPECT ] \
  || e2e_fail "host sees $nfound files, expected $EXPECT"
echo "PASS: guest mount, modify and host check through ${E2E_PLUGIN_SPEC}"
