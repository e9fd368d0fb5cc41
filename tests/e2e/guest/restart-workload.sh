# SPDX-License-Identifier: BSD-3-Clause
# restart-workload.sh --- the guest's side of test-e2e-restart.sh (busybox
# sh, run as /e2e-script after lines setting ROUNDS, POINTS, IDLE, QUIET,
# WB_QUIET, WBLOCKS).
#
# Mounts /dev/vda strictatime and runs ROUNDS rounds of phases, each
# announced on the console ("E2E-PHASE: ROUND PHASE UPTIME") for the host
# to restart the server in: read (the files /mnt/r/ROUND.*, read nowhere
# else: their atime updates are what the server holds), idle (IDLE s,
# longer than a journal commit interval, so that the atimes commit on
# their own and the server absorbs the transaction),
# write (WBLOCKS x 64 KiB with fsync), flush (ten appends, each fsynced),
# quiet (QUIET s; WB_QUIET in the rounds whose restart point is
# "writeback"), then wait: for the host's "go" line on /dev/ttyS1, sent
# once it has made the round's restart (so that the rounds and the
# restarts keep in step however slow either side is).  Each fsynced file is printed with its SHA-256
# ("E2E-FSYNCED: PATH SUM").  Meanwhile a probe reads one 4 KiB block
# with O_DIRECT every 0.1 s and prints each read that took 0.15 s or more
# ("E2E-LAT: UPTIME CENTISECONDS").  At the end: every fsynced file
# checked from the disk (page cache dropped), the atimes of /mnt/r
# ("E2E-ATIME: PATH SECONDS"), unmount, e2fsck -fn, the kernel's error
# lines (E2E-DMESG).

r () { echo "E2E-RESULT: $*"; }
phase () { echo "E2E-PHASE: $1 $2 $(cut -d' ' -f1 /proc/uptime)"; }
fail () { r "restart $* FAIL"; exit 1; }
cs () { t=$(cut -d' ' -f1 /proc/uptime); echo "${t%.*}${t#*.}"; }

probe () {
    n=0 max=0
    while [ ! -e /tmp/probe.stop ]; do
        t0=$(cut -d' ' -f1 /proc/uptime)
        a=$(cs)
        dd if=/dev/vda of=/dev/null bs=4096 count=1 skip=1 iflag=direct \
            2>/dev/null || echo "E2E-PROBE-FAIL: $t0"
        d=$(($(cs) - a))
        [ $d -ge 15 ] && echo "E2E-LAT: $t0 $d"
        [ $d -gt $max ] && max=$d
        n=$((n + 1))
        sleep 0.1
    done
    r "probe reads=$n max_cs=$max"
}

exec 3</dev/ttyS1 || fail "open /dev/ttyS1"
stty -echo <&3 2>/dev/null
mount -t ext4 -o strictatime /dev/vda /mnt || fail mount
mkdir -p /mnt/w || fail mkdir
sync
probe &
probe_pid=$!

set -- $POINTS
npoints=$#
k=1
while [ $k -le "$ROUNDS" ]; do
    i=$(( (k - 1) % npoints + 1 ))
    eval "point=\${$i}"
    phase $k read
    for f in /mnt/r/$k.*; do
        cat "$f" >/dev/null || fail "read $f"
    done
    phase $k idle
    sleep "$IDLE"
    phase $k write
    dd if=/dev/urandom of=/mnt/w/$k bs=65536 count="$WBLOCKS" conv=fsync \
        2>/dev/null || fail "write w/$k"
    echo "E2E-FSYNCED: w/$k $(sha256sum </mnt/w/$k | cut -c1-64)"
    phase $k flush
    j=0
    while [ $j -lt 10 ]; do
        echo "round $k append $j" >>/mnt/w/log.$k || fail "append w/log.$k"
        sync /mnt/w/log.$k || fail "fsync w/log.$k"
        j=$((j + 1))
    done
    echo "E2E-FSYNCED: w/log.$k $(sha256sum </mnt/w/log.$k | cut -c1-64)"
    phase $k quiet
    if [ "$point" = writeback ]; then sleep "$WB_QUIET"; else sleep "$QUIET"; fi
    phase $k wait
    read -r go <&3 || fail "read /dev/ttyS1"
    k=$((k + 1))
done
phase end end

touch /tmp/probe.stop
wait $probe_pid
sync
echo 3 >/proc/sys/vm/drop_caches
n=0
for f in /mnt/w/*; do
    [ -f "$f" ] || continue
    echo "E2E-CHECK: w/${f##*/} $(sha256sum <"$f" | cut -c1-64)" || fail "read $f"
    n=$((n + 1))
done
r "restart files=$n"
for f in /mnt/r/*; do
    echo "E2E-ATIME: r/${f##*/} $(stat -c %X "$f")"
done
umount /mnt || fail umount
/usr/sbin/e2fsck -fn /dev/vda >/tmp/fsck.log 2>&1 ||
    { sed 's/^/E2E-FSCK: /' /tmp/fsck.log; fail "e2fsck -fn"; }
dmesg | grep -E 'I/O error|EXT4-fs|JBD2|jbd2' | sed 's/^/E2E-DMESG: /'
r "restart done"
