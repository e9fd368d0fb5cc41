#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-e2e-nbd-restart.sh --- the kernel's NBD client survives server
# restarts.  In the guest (as test-e2e-nbd-client.sh: the disk is a plain
# virtio disk, nbdkit serves it with the plugin under test on a Unix
# socket) the socket is held across restarts and handed to each server
# with LISTEN_FDS, as ext4lazy@.socket does; /dev/nbd0 is attached by
# ext4lazyctl attach (or, with E2E_RESTART_CLIENT=nbd-client, by
# nbd-client, which has no dead-connection timeout: the test must fail
# then; before the third restart the attach process is stopped and a new
# one takes the device over).  A journaled ext4 (made on the host) is
# mounted strictatime;
# the workload reads a tree (atime updates, held by ext4lazy) and writes
# files one by one with fsync.  The server is stopped and a new one
# started E2E_RESTARTS times (default 6) at chosen points: idle (the
# workload paused, nothing in flight) and mid-write (a 10 MiB write with
# fsync in flight too), by ext4lazyctl drain (E2E_RESTART_HOW=drain, the
# default with the ext4lazy plugin) or SIGKILL (E2E_RESTART_HOW=kill).  Asserted: no I/O error, JBD2 or EXT4-fs message in
# the guest's kernel log, the workload saw no error, every file declared
# durable is on the disk with its contents, the superblock records no
# error, e2fsck -fn clean (in the guest and on the host).  Printed: the
# pause the guest saw at each restart (the longest write+fsync around
# it), median and worst.  E2E_ATTACH_OPTS adds options to ext4lazyctl
# attach (e.g. --timeout=3: a request caught on the wire by a restart is
# sent again after the I/O timeout, which bounds a mid-write pause).
# A grown store: with ext4lazyctl attach and 5 restarts or more, the
# disk is 64 MiB larger than the filesystem and the servers serve its
# first part (nbdkit's truncate filter) until the fifth restart (one
# with a write in flight), which serves all of it: the device must grow
# (attach hands the kernel the new size) and resize2fs grows the mounted
# filesystem online (E2E_RESTART_GROW=0: not done).
. "$(dirname "$0")/lib.sh"
E2E_GUEST_NBD=1
e2e_init
[ -x "${EXT4LAZYCTL:-}" ] || e2e_skip "EXT4LAZYCTL (the built ext4lazyctl) not given"
"$EXT4LAZYCTL" attach --help >/dev/null 2>&1 \
  || e2e_skip "ext4lazyctl was built without attach (libnl-genl-3)"

client=${E2E_RESTART_CLIENT:-ext4lazyctl}
how=${E2E_RESTART_HOW:-}
if [ -z "$how" ]; then
  # ext4lazy's own way to restart (ext4lazyctl drain); SIGKILL for any
  # other plugin, or an ext4lazyctl without drain.
  how=kill
  [ "$(e2e_guest_plugin)" = ext4lazy ] && "$EXT4LAZYCTL" --help 2>&1 | grep -q ' drain' && how=drain
fi
restarts=${E2E_RESTARTS:-6}
grow_at=0
[ "${E2E_RESTART_GROW:-1}" = 1 ] && [ "$client" = ext4lazyctl ] && [ "$restarts" -ge 5 ] && grow_at=5
case $client in ext4lazyctl|nbd-client) ;; *) e2e_fail "E2E_RESTART_CLIENT: ext4lazyctl or nbd-client" ;; esac
case $how in kill|drain) ;; *) e2e_fail "E2E_RESTART_HOW: kill or drain" ;; esac
plugin=$(e2e_guest_plugin)
args=${E2E_PLUGIN_ARGS:-}
if [ "$plugin" = ext4lazy ]; then
  args="$args control=/tmp/nbd.ctl"
elif [ "$how" = drain ]; then
  e2e_skip "E2E_RESTART_HOW=drain needs the ext4lazy plugin"
fi
t0=$(date +%s)

FS_BLOCKS=65536
GROW_BYTES=$((64 << 20))
img=$E2E_TMP/restart.img
small=$((FS_BLOCKS * 4096)) big=$((FS_BLOCKS * 4096))
[ "$grow_at" = 0 ] || big=$((small + GROW_BYTES))
e2e_image "$img" "$big"
mkfs.ext4 -F -q -b 4096 -E lazy_itable_init=0,lazy_journal_init=0,nodiscard \
  "$img" "$FS_BLOCKS" || e2e_fail "mkfs.ext4"

# The guest's part: /e2e-script holds the socket and runs /e2e-restart.
root=$E2E_TMP/extra
mkdir -p "$root"
cat >"$root/e2e-script" <<'SCRIPT'
exec e2e-guest listen /tmp/nbd.sock sh /e2e-restart
SCRIPT
{
  echo "CLIENT=$client HOW=$how RESTARTS=$restarts PLUGIN=$plugin"
  echo "GROW_AT=$grow_at SMALL=$small BIG=$big"
  echo "ARGS='$args' ATTACH_OPTS='${E2E_ATTACH_OPTS:-}'"
  cat <<'SCRIPT'
r () { echo "E2E-RESULT: $*"; }
SOCK=/tmp/nbd.sock CTL=/tmp/nbd.ctl NBD=/dev/nbd0 M=/mnt
insmod /lib/modules/nbd.ko
i=0
while [ ! -b $NBD ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
nsrv=0 pid= SIZE=$SMALL
serve () {
    nsrv=$((nsrv + 1))
    rm -f $CTL
    # (fd 3 is the held socket: nbdkit takes it with LISTEN_FDS.)
    sh -c "export LISTEN_PID=\$\$ LISTEN_FDS=1; exec nbdkit -f --filter=truncate $PLUGIN /dev/vda $ARGS truncate=$SIZE" \
        2>/tmp/nbdkit.$nsrv.err &
    pid=$!
    [ -n "$ARGS" ] || return 0
    i=0
    while [ ! -S $CTL ] && [ $i -lt 600 ]; do
        kill -0 $pid 2>/dev/null || break
        sleep 0.05; i=$((i + 1))
    done
    [ -S $CTL ]
}
stop_server () {
    if [ "$HOW" = drain ]; then
        ext4lazyctl -s $CTL drain >/tmp/drain.out 2>&1 ||
            { r "drain FAIL $(tr '\n' ' ' </tmp/drain.out)"; return 1; }
        wait $pid
    else
        kill -9 $pid
        wait $pid
        [ $? = 137 ]
    fi
}
fail () { r "restart FAIL $*"; dmesg | tail -n 40 | sed 's/^/E2E-DMESG: /'; exit 1; }

serve || fail "the first server did not start"
if [ "$CLIENT" = ext4lazyctl ]; then
    attach () {
        ext4lazyctl attach $NBD $SOCK --dead-timeout=120 $ATTACH_OPTS 2>>/tmp/attach.err &
        apid=$!
    }
    attach
else
    # By full path: busybox 1.37 has an applet of that name, run first.
    /usr/sbin/nbd-client -unix $SOCK $NBD -b 4096 || fail "nbd-client"
fi
i=0
while [ "$(cat /sys/block/nbd0/size)" = 0 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
[ "$(cat /sys/block/nbd0/size)" != 0 ] || fail "the device was not attached"
mount -t ext4 -o strictatime $NBD $M || fail "mount"
mkdir -p $M/w
e2e-guest populate $M/data 200 3000 7 >/dev/null || fail "populate"
sync
# The readers update atimes; the writer makes files durable one by one.
( while [ ! -f /tmp/stop ]; do
      [ -f /tmp/pause ] || cat $M/data/*/* >/dev/null || { r "read FAIL"; exit 1; }
      sleep 0.2
  done ) &
rpid=$!
e2e-guest durable $M/w /tmp/durable.log /tmp/stop /tmp/pause >/tmp/writer.out &
wpid=$!
k=0
while [ $k -lt $RESTARTS ]; do
    k=$((k + 1))
    case $((k % 3)) in 1) kind=idle ;; *) kind=write ;; esac
    sleep 2
    if [ $k = 3 ] && [ "$CLIENT" = ext4lazyctl ]; then
        # The attach process restarted (its unit restarted): the new one
        # takes the device over and follows the next restarts.
        kill $apid
        wait $apid || fail "the attach process exited with status $? on SIGTERM"
        attach
        sleep 1
    fi
    if [ $kind = idle ]; then
        touch /tmp/pause; sleep 0.5; sync; sleep 1
    else
        dd if=/dev/zero of=$M/big$k bs=64k count=160 conv=fsync 2>/tmp/dd.err &
        ddpid=$!
        sleep 0.5
    fi
    ts=$(e2e-guest now)
    [ $k = "$GROW_AT" ] && SIZE=$BIG
    stop_server || fail "stopping server $nsrv"
    serve || { sed 's/^/E2E-NBDKIT: /' /tmp/nbdkit.$nsrv.err; fail "server $nsrv did not start"; }
    tu=$(e2e-guest now)
    [ $kind = idle ] && rm -f /tmp/pause
    if [ $kind = write ]; then
        wait $ddpid || fail "dd during restart $k: $(cat /tmp/dd.err)"
        rm -f $M/big$k
    fi
    echo "$k $kind $ts $tu" >>/tmp/restarts
    if [ $k = "$GROW_AT" ]; then
        i=0
        while [ "$(cat /sys/block/nbd0/size)" != $((BIG / 512)) ] && [ $i -lt 300 ]; do
            sleep 0.1; i=$((i + 1))
        done
        [ "$(cat /sys/block/nbd0/size)" = $((BIG / 512)) ] ||
            fail "the device did not grow: $(cat /sys/block/nbd0/size) sectors"
        /usr/sbin/resize2fs $NBD >/tmp/resize.out 2>&1 ||
            fail "resize2fs: $(tr '\n' ' ' </tmp/resize.out)"
        r "grew at restart $k to $BIG bytes"
    fi
    # The writer flows again (a write begun after the new server was up
    # is durable) before the next restart, which then has a pause of
    # its own.
    i=0
    until awk -v t=$tu '$2 > t { ok = 1 } END { exit !ok }' /tmp/durable.log; do
        ! grep -q FAIL /tmp/writer.out || fail "after restart $k: $(cat /tmp/writer.out)"
        [ $i -lt 1200 ] || fail "the writer did not go on after restart $k"
        sleep 0.1; i=$((i + 1))
    done
    r "restart $k $kind server-down=$(awk -v a=$ts -v b=$tu 'BEGIN { printf "%.3f", b - a }')"
done
sleep 3
touch /tmp/stop
wait $wpid || fail "the writer: $(cat /tmp/writer.out)"
cat /tmp/writer.out
wait $rpid || fail "the readers"
# The pause of each restart: the longest write+fsync that ended after the
# server stopped and began before the first one begun after the new
# server was up (that one included); and the median outside restarts.
awk 'NR == FNR { n++; kind[n] = $2; ts[n] = $3; tu[n] = $4; next }
     { st[FNR] = $2; en[FNR] = $3; m = FNR }
     END {
       for (i = 1; i <= n; i++) {
         p = 0; after = 0
         for (j = 1; j <= m; j++) {
           if (en[j] <= ts[i]) continue
           if (st[j] >= tu[i]) { if (after) break; after = 1 }
           if (en[j] - st[j] > p) p = en[j] - st[j]
           busy[j] = 1
         }
         printf "E2E-RESULT: pause %d %s %.3f\n", i, kind[i], p
       }
       c = 0
       for (j = 1; j <= m; j++) if (!busy[j]) l[++c] = en[j] - st[j]
       # (insertion sort: a few hundred values)
       for (a = 2; a <= c; a++) { v = l[a]; for (b = a - 1; b >= 1 && l[b] > v; b--) l[b + 1] = l[b]; l[b + 1] = v }
       printf "E2E-RESULT: quiet-latency median=%.3f ops=%d\n", c ? l[int((c + 1) / 2)] : 0, c
     }' /tmp/restarts /tmp/durable.log
r "durable last=$(tail -n 1 /tmp/durable.log | cut -d' ' -f1)"
umount $M || fail "umount"
if [ "$CLIENT" = ext4lazyctl ]; then
    ext4lazyctl detach $NBD || fail "detach"
    wait $apid || fail "the attach process exited with status $?"
    sed 's/^/E2E-ATTACH: /' /tmp/attach.err
else
    /usr/sbin/nbd-client -d $NBD
fi
kill $pid
wait $pid
for f in /tmp/nbdkit.*.err; do sed 's/^/E2E-NBDKIT: /' $f; done
dmesg | grep -E 'I/O error|JBD2|EXT4-fs (error|warning)|Aborting journal|Dead connection|nbd' |
    sed 's/^/E2E-DMESG: /'
r "restart done servers=$nsrv"
SCRIPT
} >"$root/e2e-restart"
(cd "$root" && find . | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null) \
  | gzip -1 >"$E2E_TMP/extra.cpio.gz" || e2e_fail "cpio"
cat "$E2E_INITRD" "$E2E_TMP/extra.cpio.gz" >"$E2E_TMP/restart.initrd"

E2E_INITRD=$E2E_TMP/restart.initrd E2E_DISK=$img e2e_boot restart \
  workload=script,fsck
booted=$?
con=$E2E_TMP/restart.console
tr -d '\r' <"$con" | grep -a -E '^E2E-(ATTACH|DMESG|NBDKIT|RESULT: (restart|grew|pause|quiet|durable))' >&2

errors=$(tr -d '\r' <"$con" | grep -a -E 'I/O error|JBD2|EXT4-fs (error|warning)|Aborting journal' | sort -u)
[ -z "$errors" ] || e2e_fail "$client: the guest's kernel reported errors:
$errors"
[ "$booted" = 0 ] || e2e_fail "$client: the guest's run failed"
tr -d '\r' <"$con" | grep -aq "^E2E-RESULT: restart done servers=$((restarts + 1))" \
  || e2e_fail "$client: the restarts did not all happen"
if [ "$client" = ext4lazyctl ] && [ "$restarts" -ge 3 ]; then
  tr -d '\r' <"$con" | grep -aq '^E2E-ATTACH: .*: taking over the device' \
    || e2e_fail "the second attach process did not take the device over"
fi
if [ "$grow_at" != 0 ]; then
  tr -d '\r' <"$con" | grep -aq "^E2E-RESULT: grew at restart $grow_at" \
    || e2e_fail "the device did not grow with the store"
fi
last=$(e2e_result durable last)
[ -n "$last" ] && [ "$last" -ge "$restarts" ] \
  || e2e_fail "$client: the writer made ${last:-no} files durable"

# On the host: clean, no error recorded, every durable file there.
e2fsck -fn "$img" >"$E2E_TMP/fsck.out" 2>&1 \
  || { cat "$E2E_TMP/fsck.out" >&2; e2e_fail "$client: e2fsck -fn on the host"; }
count=$(dumpe2fs -h "$img" 2>/dev/null | sed -n 's/^FS Error count: *//p')
[ -z "$count" ] || [ "$count" = 0 ] || e2e_fail "$client: the superblock records $count errors"
blocks=$(dumpe2fs -h "$img" 2>/dev/null | sed -n 's/^Block count: *//p')
[ "$blocks" = $((big / 4096)) ] || e2e_fail "$client: the filesystem has $blocks blocks, not $((big / 4096))"
mkdir -p "$E2E_TMP/out"
debugfs -R "rdump /w $E2E_TMP/out" "$img" >/dev/null 2>&1 || e2e_fail "debugfs rdump /w"
for ((n = 0; n <= last; n++)); do
  name=$(printf 'd%06d' "$n")
  f=$E2E_TMP/out/w/$name
  [ -f "$f" ] || e2e_fail "$client: $name was declared durable and is missing"
  [ "$(tr -d '\n' <"$f")" = "$(printf "$name%.0s" $(seq 512))" ] \
    || e2e_fail "$client: $name was declared durable and holds something else"
done

# The pauses, write-time restarts and all.
read -r wmed wmax < <(tr -d '\r' <"$con" | awk '$1 == "E2E-RESULT:" && $2 == "pause" && $4 == "write" { print $5 }' |
  sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)], v[NR] }')
read -r amed amax < <(tr -d '\r' <"$con" | awk '$1 == "E2E-RESULT:" && $2 == "pause" { print $5 }' |
  sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)], v[NR] }')
echo "PAUSE: $client, $how, $restarts restarts: mid-write median ${wmed}s worst ${wmax}s; all median ${amed}s worst ${amax}s; $(e2e_result quiet-latency median)s median write+fsync otherwise"
echo "PASS: $client through $restarts server restarts ($how): no error, $((last + 1)) durable files present, e2fsck clean, $(($(date +%s) - t0)) s"
