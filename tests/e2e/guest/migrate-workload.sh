# SPDX-License-Identifier: BSD-3-Clause
# migrate-workload.sh --- the guest's side of test-e2e-migrate.sh (busybox
# sh, run as /e2e-script after lines setting WORK_SECS).
#
# Mounts /dev/vda strictatime and reads every file of /mnt/a (their atime
# updates), prints the atimes it sees ("E2E-ATIME-BEFORE: PATH SECONDS"),
# then unmounts and mounts again: the unmount writes the inode tables in
# place, which the server holds (atime-only changes), and the guest keeps
# none of it cached.  "E2E-PHASE: ready", then for WORK_SECS seconds it
# writes 64 KiB files with fsync ("E2E-FSYNCED: PATH SUM"), while the host
# moves it to another qemu process.  Then, page cache dropped, it stats
# /mnt/a again ("E2E-ATIME-AFTER: ..."): the inode tables are read from
# the disk, through the destination's connection; reads back every
# fsynced file ("E2E-CHECK: PATH SUM"); unmounts; e2fsck -fn; prints the
# kernel's error lines (E2E-DMESG).

r () { echo "E2E-RESULT: $*"; }
fail () { r "migrate $* FAIL"; exit 1; }
secs () { t=$(cut -d' ' -f1 /proc/uptime); echo "${t%.*}"; }

mount -t ext4 -o strictatime /dev/vda /mnt || fail mount
for f in /mnt/a/*; do cat "$f" >/dev/null || fail "read $f"; done
for f in /mnt/a/*; do echo "E2E-ATIME-BEFORE: a/${f##*/} $(stat -c %X "$f")"; done
umount /mnt || fail umount
mount -t ext4 -o strictatime /dev/vda /mnt || fail "mount again"
mkdir -p /mnt/w || fail mkdir
echo "E2E-PHASE: ready"

end=$(($(secs) + WORK_SECS))
i=0
while [ "$(secs)" -lt $end ]; do
    dd if=/dev/urandom of=/mnt/w/$i bs=4096 count=16 conv=fsync 2>/dev/null ||
        fail "write w/$i"
    echo "E2E-FSYNCED: w/$i $(sha256sum </mnt/w/$i | cut -c1-64)"
    i=$((i + 1))
    sleep 0.2
done
echo "E2E-PHASE: after"

sync
echo 3 >/proc/sys/vm/drop_caches
for f in /mnt/a/*; do echo "E2E-ATIME-AFTER: a/${f##*/} $(stat -c %X "$f")"; done
n=0
for f in /mnt/w/*; do
    echo "E2E-CHECK: w/${f##*/} $(sha256sum <"$f" | cut -c1-64)" || fail "read $f"
    n=$((n + 1))
done
r "migrate files=$n"
umount /mnt || fail umount
/usr/sbin/e2fsck -fn /dev/vda >/tmp/fsck.log 2>&1 ||
    { sed 's/^/E2E-FSCK: /' /tmp/fsck.log; fail "e2fsck -fn"; }
dmesg | grep -E 'I/O error|EXT4-fs|JBD2|jbd2' | sed 's/^/E2E-DMESG: /'
r "migrate done"
