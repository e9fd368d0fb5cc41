#!/bin/sh
# init.sh --- /init of the end-to-end test guest (busybox sh).
#
# Brings up virtio-blk, then runs the steps named by e2e.workload= on the
# kernel command line against /dev/vda, printing "E2E-RESULT: ..." lines on
# the serial console, and powers off.  Parameters (all e2e.KEY=VALUE):
#   workload   comma-separated steps, run in order (see run_step below)
#   mountopts  mount options (default: defaults)
#   mkfsfeat   mke2fs -O value, e.g. ^has_journal     fsblocks  mkfs size in 4 KiB blocks
#   nfiles size seed      the file set (see e2e-guest)
#   scans pause settle idle   readscan/count timing, seconds
#   mstart mend           byte offsets of the window marker blocks
#   steps nmarkers crashmode   the crash workload (crashmode fsync|sync)
#   dbsize dbsecs dbsync  the database workload: file size in MiB, seconds
#                         of random 4 KiB overwrites, writes per fdatasync

export PATH=/usr/sbin:/bin
# busybox runs its own applets before PATH: call e2fsprogs by full path.
E2FS=/usr/sbin
DEV=/dev/vda
MNT=/mnt
DATA=$MNT/data

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /tmp $MNT

result () { echo "E2E-RESULT: $*"; }

# Kernel command line parameters.
workload= mountopts=defaults mkfsfeat= fsblocks=
nfiles=100 size=3000 seed=1 scans=6 pause=6 settle=7 idle=35
mstart= mend=
steps=40 nmarkers=256 crashmode=fsync
dbsize=64 dbsecs=30 dbsync=8
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        e2e.*=*)
            key=${arg%%=*}; key=${key#e2e.}; val=${arg#*=}
            case "$key" in
                workload|mountopts|mkfsfeat|fsblocks|nfiles|size|seed|\
                scans|pause|settle|idle|mstart|mend|steps|nmarkers|\
                crashmode|dbsize|dbsecs|dbsync)
                    eval "$key=\$val" ;;
                *) result "warning unknown parameter $key" ;;
            esac ;;
    esac
done

# Modules in dependency order; crc32c-intel speeds up metadata_csum (the
# generic crc32c is built in).  A missing module is reported, not fatal:
# the wait for the disk below decides.
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev \
         virtio_pci virtio_blk libcrc32c crc32c-intel; do
    insmod /lib/modules/$m.ko 2>/dev/null || result "warning insmod $m failed"
done

i=0
while [ ! -b $DEV ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if [ ! -b $DEV ]; then
    result "error no $DEV"
    result "done FAIL"
    poweroff -f
fi
result "boot ok uptime=$(cut -d' ' -f1 /proc/uptime)"

mounted=no

do_mount () {
    mount -t ext4 -o "$mountopts" $DEV $MNT && mounted=yes
}

do_umount () {
    umount $MNT && mounted=no
}

marker () {
    [ -n "$1" ] || { result "error no marker offset given"; return 1; }
    e2e-guest marker $DEV "$1"
}

run_step () {
    case "$1" in
        mkfs)
            # Inode tables and journal written now, so that no lazy-init
            # thread writes behind a later measurement.
            $E2FS/mke2fs -F -q -t ext4 -b 4096 ${mkfsfeat:+-O "$mkfsfeat"} \
                -E lazy_itable_init=0,lazy_journal_init=0,nodiscard \
                $DEV $fsblocks ;;
        mount) do_mount ;;
        umount) do_umount ;;
        populate) e2e-guest populate $DATA "$nfiles" "$size" "$seed" ;;
        modify) e2e-guest modify $DATA "$nfiles" "$size" "$seed" ;;
        verify) e2e-guest verify $DATA "$nfiles" "$size" "$seed" ;;
        verify-modified)
            e2e-guest verify $DATA "$nfiles" "$size" "$seed" modified ;;
        readscan) e2e-guest readscan $DATA "$nfiles" "$scans" "$pause" ;;
        sync) sync ;;
        resize)
            # Grow to the whole device: online when mounted, else offline
            # after a read-only check.
            if [ $mounted = yes ]; then
                $E2FS/resize2fs $DEV
            else
                $E2FS/e2fsck -fn $DEV && $E2FS/resize2fs -f $DEV
            fi ;;
        fsck) $E2FS/e2fsck -fn $DEV ;;
        df) df -k $MNT | tail -n 1 | { read -r _ blocks used _; \
                result "df blocks=$blocks used=$used"; } ;;
        count)
            # The measurement window: first open a file (the first commit
            # after mount carries the superblock) and wait past a journal
            # commit, then scans between the two markers, then idle long
            # enough for inode writeback (about 30 s) to fall inside it.
            e2e-guest readscan $DATA 1 1 0 >/dev/null &&
            sleep "$settle" &&
            marker "$mstart" && sleep 1 &&
            e2e-guest readscan $DATA "$nfiles" "$scans" "$pause" &&
            sleep "$idle" &&
            marker "$mend" && sleep 1 ;;
        db)
            # The database case: a preallocated file made durable and
            # past a journal commit, then, between the two markers,
            # random 4 KiB overwrites with an fdatasync every dbsync
            # writes, then idle long enough for inode writeback.
            e2e-guest dbfill $MNT/db "$dbsize" &&
            sync &&
            sleep "$settle" &&
            marker "$mstart" && sleep 1 &&
            e2e-guest db $MNT/db "$dbsize" "$dbsecs" "$dbsync" "$seed" &&
            sleep "$idle" &&
            marker "$mend" && sleep 1 ;;
        crash)
            # The crash-test workload: changes made durable one by one,
            # each followed by a marker read at mstart + 4096 * seq.
            [ -n "$mstart" ] || { result "error no mstart"; return 1; }
            e2e-guest crash $DATA $DEV "$mstart" "$nmarkers" "$steps" \
                "$seed" $([ "$crashmode" = sync ] && echo sync) ;;
        halt)
            # Power off with the filesystem still mounted: the server
            # sees no unmount, as after a guest crash.
            result "step halt ok"
            result "done ok"
            poweroff -f ;;
        *) result "error unknown step $1"; return 1 ;;
    esac
}

status=ok
for step in $(echo "$workload" | tr ',' ' '); do
    start=$(cut -d' ' -f1 /proc/uptime)
    if run_step "$step"; then
        result "step $step ok start=$start end=$(cut -d' ' -f1 /proc/uptime)"
    else
        result "step $step FAIL rc=$?"
        status=FAIL
        break
    fi
done
[ $mounted = yes ] && { umount $MNT || status=FAIL; }
result "done $status"
poweroff -f
