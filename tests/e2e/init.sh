#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# init.sh --- /init of the end-to-end test guest (busybox sh).
#
# Brings up virtio-blk, then runs the steps named by e2e.workload= on the
# kernel command line against /dev/vda (or, after nbdconnect, /dev/nbd0:
# the kernel's NBD client talking to an nbdkit that runs in this guest and
# serves /dev/vda), printing "E2E-RESULT: ..." lines on the serial console,
# and powers off.  Parameters (all e2e.KEY=VALUE):
#   workload   comma-separated steps, run in order (see run_step below)
#   mountopts  mount options (default: defaults)
#   mkfsfeat   mke2fs -O value, e.g. ^has_journal     fsblocks  mkfs size in 4 KiB blocks
#   nfiles size seed      the file set (see e2e-guest)
#   scans pause settle idle   readscan/count timing, seconds
#   mstart mend           byte offsets of the window marker blocks
#   steps nmarkers crashmode   the crash workload (crashmode fsync|sync)
#   dbsize dbsecs dbsync  the database workload: file size in MiB, seconds
#                         of random 4 KiB overwrites, writes per fdatasync
#   nbdplugin  the plugin the guest's nbdkit serves /dev/vda with (ext4lazy)
#   nbdargs    its parameters, comma-separated (policy=atime,max-age=1h)
#   nbdopts    nbd-client options, comma-separated (default -b,4096)
#   dirtytime  vm.dirtytime_expire_seconds (default: the kernel's, 12 h)

export PATH=/usr/sbin:/usr/bin:/bin
# busybox runs its own applets before PATH: call e2fsprogs by full path.
E2FS=/usr/sbin
# The same for nbd-client (busybox 1.37, Debian 13, has an applet of that
# name, which knows no -unix): an alias (busybox 1.35 takes no function
# of that name), and the script step (below) sources its script in a
# subshell, so that the lines it runs as a user would type them get the
# real one too.
alias nbd-client=/usr/sbin/nbd-client
DISK=/dev/vda          # the virtio disk
DEV=$DISK              # the device the steps use
NBD=/dev/nbd0
NBDSOCK=/tmp/nbd.sock
NBDLOG=/tmp/nbd.log
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
nbdplugin=ext4lazy nbdargs= nbdopts=-b,4096 dirtytime=
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        e2e.*=*)
            key=${arg%%=*}; key=${key#e2e.}; val=${arg#*=}
            case "$key" in
                workload|mountopts|mkfsfeat|fsblocks|nfiles|size|seed|\
                scans|pause|settle|idle|mstart|mend|steps|nmarkers|\
                crashmode|dbsize|dbsecs|dbsync|nbdplugin|nbdargs|nbdopts|\
                dirtytime)
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
    # (Absent when built into the kernel.)
    [ -f /lib/modules/$m.ko ] || continue
    insmod /lib/modules/$m.ko 2>/dev/null || result "warning insmod $m failed"
done

i=0
while [ ! -b $DISK ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if [ ! -b $DISK ]; then
    result "error no $DISK"
    result "done FAIL"
    poweroff -f
fi
result "boot ok uptime=$(cut -d' ' -f1 /proc/uptime)"
if [ -n "$dirtytime" ]; then
    echo "$dirtytime" >/proc/sys/vm/dirtytime_expire_seconds ||
        result "warning vm.dirtytime_expire_seconds=$dirtytime refused"
fi

mounted=no
nbdkit_pid= connected=no

do_mount () {
    mount -t ext4 -o "$mountopts" $DEV $MNT && mounted=yes
}

do_umount () {
    umount $MNT && mounted=no
}

marker () {
    [ -n "$1" ] || { result "error no marker offset given"; return 1; }
    e2e-guest marker $DEV "$1" || return 1
    # Served from this guest: push what the server has written but the
    # page cache still holds to the virtio disk, where the host counts it,
    # and tell the host to cut its window now (E2E-MARK).
    if [ $DEV = $NBD ]; then
        blockdev --flushbufs $DISK && echo "E2E-MARK: $1"
    fi
}

# The guest's server: nbdkit with the plugin under test serving /dev/vda
# on a Unix socket, behind the log filter.
nbd_serve () {
    rm -f $NBDSOCK $NBDLOG
    nbdkit -f -U $NBDSOCK --filter=log "$nbdplugin" $DISK \
        $(echo "$nbdargs" | tr ',' ' ') logfile=$NBDLOG 2>/tmp/nbdkit.err &
    nbdkit_pid=$!
    i=0
    while [ ! -S $NBDSOCK ] && [ $i -lt 600 ]; do
        kill -0 $nbdkit_pid 2>/dev/null || break
        sleep 0.1; i=$((i + 1))
    done
    [ -S $NBDSOCK ] && return 0
    kill $nbdkit_pid 2>/dev/null
    wait $nbdkit_pid
    nbdkit_pid=
    sed 's/^/E2E-NBDKIT: /' /tmp/nbdkit.err
    return 1
}

# The kernel's NBD client on that socket; later steps use /dev/nbd0.
nbd_connect () {
    [ -n "$nbdkit_pid" ] || { result "error nbdconnect before nbdserve"; return 1; }
    [ -b $NBD ] || insmod /lib/modules/nbd.ko || return 1
    i=0
    while [ ! -b $NBD ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    nbd-client -unix $NBDSOCK $NBD $(echo "$nbdopts" | tr ',' ' ') || return 1
    connected=yes
    i=0
    while [ "$(cat /sys/block/nbd0/size)" = 0 ] && [ $i -lt 100 ]; do
        sleep 0.1; i=$((i + 1))
    done
    DEV=$NBD
    q=/sys/block/nbd0/queue
    result "nbd sectors=$(cat /sys/block/nbd0/size)" \
        "logical_block_size=$(cat $q/logical_block_size)" \
        "max_sectors_kb=$(cat $q/max_sectors_kb)" \
        "write_cache=$(cat $q/write_cache | tr ' ' _) fua=$(cat $q/fua)"
}

# Clean end: disconnect the client, stop the server (it writes back what
# it holds), push its writes to the disk; then report the requests the
# server saw: all of them, and those between the marker reads at mstart
# and mend.  Later steps use /dev/vda again.
nbd_disconnect () {
    if [ $connected = no ] && [ -z "$nbdkit_pid" ]; then
        result "error nbddisconnect: no client, no server"
        return 1
    fi
    rc=0
    if [ $connected = yes ]; then
        nbd-client -d $NBD || rc=1
        connected=no
    fi
    DEV=$DISK
    if [ -n "$nbdkit_pid" ]; then
        kill $nbdkit_pid
        wait $nbdkit_pid || { result "error nbdkit exit status $?"; rc=1; }
        nbdkit_pid=
    fi
    sync
    sed 's/^/E2E-NBDKIT: /' /tmp/nbdkit.err
    [ -f $NBDLOG ] || return 1
    awk -v s="$(printf 'offset=0x%x' "${mstart:-0}")" \
        -v e="$(printf 'offset=0x%x' "${mend:-0}")" '
        function hex(x,   i, v) {
            x = tolower(substr(x, 3)); v = 0
            for (i = 1; i <= length(x); i++)
                v = v * 16 + index("0123456789abcdef", substr(x, i, 1)) - 1
            return v
        }
        $4 == "Read" && $6 == s { on = 1 }
        $4 == "Read" && $6 == e { on = 0 }
        $4 == "Write" {
            n = hex(substr($7, 7)); w++; ws += n
            if (n > wmax) wmax = n
            if ($8 == "fua=1") fua++
            if (on) { ww++; wws += n }
        }
        $4 == "Flush" { f++; if (on) wf++ }
        $4 == "Zero" { z++ }
        $4 == "Trim" { t++ }
        END {
            printf "E2E-RESULT: nbdlog writes=%d sectors=%d max=%d fua=%d" \
                " flushes=%d zeroes=%d trims=%d\n", w, ws / 512, wmax, fua, \
                f, z, t
            printf "E2E-RESULT: nbdwindow writes=%d sectors=%d flushes=%d\n", \
                ww, wws / 512, wf
        }' $NBDLOG
    return $rc
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
        nbdserve) nbd_serve ;;
        nbdconnect) nbd_connect ;;
        nbddisconnect) nbd_disconnect ;;
        nbdstats)
            # The counters of the guest's server (nbdargs with
            # control=/tmp/nbd.ctl, and ext4lazyctl in the initrd).
            out=$(ext4lazyctl -s /tmp/nbd.ctl stats) &&
            echo "$out" | sed 's/^/E2E-STATS: /' ;;
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
        script)
            # A script the host put into the initrd (/e2e-script): it
            # prints its own E2E-RESULT lines.
            [ -r /e2e-script ] || { result "error no /e2e-script"; return 1; }
            (. /e2e-script) ;;
        halt)
            # Power off with the filesystem still mounted: the server
            # sees no unmount, as after a guest crash.  (A server in this
            # guest dies with it, and what it holds is lost.)
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
if [ $connected = yes ] || [ -n "$nbdkit_pid" ]; then
    nbd_disconnect || status=FAIL
fi
result "done $status"
poweroff -f
