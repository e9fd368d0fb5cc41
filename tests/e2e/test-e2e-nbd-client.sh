#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-e2e-nbd-client.sh --- the kernel's own NBD client (nbd.ko and
# nbd-client) in front of the server.  The guest's disk is a plain virtio
# disk; inside the guest, nbdkit serves it with the plugin under test on a
# Unix socket, nbd-client connects /dev/nbd0 to that (-b 4096), and the
# workload runs on /dev/nbd0.  Two guest runs:
#   count: the workload of test-e2e-count.sh run A (ext4 without a
#     journal, 2000 files, mounted strictatime, six read scans and an idle
#     spell between two markers).  The backing store is a loop device,
#     counted over the window that the guest cuts (E2E-MARK lines).  When
#     the server is ext4lazy the test asserts the bound test-e2e-count.sh
#     asserts with qemu as the client, 1.25 x B + 16 sectors, with B the
#     kernel's own lazytime floor that test measures (run B: 8 sectors for
#     this workload; E2E_NBDC_FLOOR overrides), and that the client did
#     write timestamps in the window (else nothing was tested).  After a
#     clean disconnect and the server's exit the held atimes must be on
#     the disk, and the filesystem clean.
#   crash: a journaled ext4 (made on the host) mounted strictatime,commit=1
#     under policy=atime; the guest populates a tree (made durable), runs
#     the crash workload of tests/crash (changes made durable one by one)
#     and powers off at once, with the filesystem mounted, nbd-client
#     connected and nbdkit holding what it holds.  The host then replays
#     the journal and checks the image as tests/crash does (e2fsck -fn
#     clean, every change declared durable present, the kernel's own
#     replay of a copy too), and checks the tree with the guest helper.
. "$(dirname "$0")/lib.sh"
E2E_GUEST_NBD=1
e2e_init
. "$E2E_SRCDIR/../crash/crashlib.sh"
for f in check-state.sh expect.awk; do
  [ -r "$CRASH_SRCDIR/$f" ] || e2e_skip "$CRASH_SRCDIR/$f not found"
done

plugin=$(e2e_guest_plugin)
ext4lazy=0
[ "$plugin" = ext4lazy ] && ext4lazy=1
# The guest's server parameters: E2E_PLUGIN_ARGS, comma-separated, and
# with ext4lazy its control socket (for ext4lazyctl, when the initrd has
# it).
args=$(echo ${E2E_PLUGIN_ARGS:-} | tr ' ' ',')
stats=
if [ "$ext4lazy" = 1 ] && [ -x "${EXT4LAZYCTL:-}" ]; then
  args=${args:+$args,}control=/tmp/nbd.ctl
  stats=nbdstats,
fi
# guest_stat KEY: counter KEY of the first filesystem in the guest's
# ext4lazyctl stats ("E2E-STATS:   KEY  VALUE  text"); held_now: its
# "held now: N blocks".
guest_stat ()
{
  tr -d '\r' <"$E2E_CONSOLE" | awk -v k="$1" '
    $1 != "E2E-STATS:" || v != "" { next }
    k == "held_now" && $2 == "held" && $3 == "now:" { v = $4 }
    $2 == k && $3 ~ /^[0-9]+$/ { v = $3 }
    END { print v + 0 }'
}

t0=$(date +%s)

# ---- count -------------------------------------------------------------
FS_BLOCKS=65536                             # as in test-e2e-count.sh
MSTART=$((FS_BLOCKS * 4096 + 256 * 1024))
MEND=$((MSTART + 64 * 1024))
IMG_SIZE=$((FS_BLOCKS * 4096 + 1024 * 1024))
img=$E2E_TMP/count.img
win=$E2E_TMP/count.window
e2e_image "$img" "$IMG_SIZE"
e2e_loop_attach "$img"
dev=$E2E_LOOP
e2e_console_window_watch "$E2E_TMP/count.console" "$dev" "$MSTART" "$MEND" "$win"
E2E_DISK=$dev e2e_boot count \
  workload=nbdserve,nbdconnect,mkfs,mount,populate,umount,mount,count,${stats}umount,nbddisconnect,fsck \
  nbdplugin="$plugin" ${args:+nbdargs="$args"} \
  mkfsfeat=^has_journal fsblocks=$FS_BLOCKS nfiles=2000 size=3000 seed=5 \
  settle=7 scans=6 pause=6 idle=35 mstart=$MSTART mend=$MEND \
  mountopts=strictatime || e2e_fail "count: guest run failed"
# (The watcher has seen both markers if the guest got past them.)
for ((i = 0; i < 50; i++)); do
  kill -0 "$E2E_WATCH_PID" 2>/dev/null || break
  sleep 0.1
done
kill "$E2E_WATCH_PID" 2>/dev/null
wait "$E2E_WATCH_PID" 2>/dev/null
e2e_forget_pid "$E2E_WATCH_PID"
final=$(e2e_loop_stat "$dev")
e2e_loop_detach "$dev"
e2fsck -fn "$img" >"$E2E_TMP/count.fsck" 2>&1 \
  || { cat "$E2E_TMP/count.fsck" >&2; e2e_fail "count: e2fsck -fn"; }
s=$(grep '^start ' "$win") && e=$(grep '^end ' "$win") \
  || e2e_fail "count: the markers were not seen on the console"
read -r _ sreq ssec st <<<"$s"
read -r _ ereq esec et <<<"$e"
read -r freq fsec <<<"$final"
sectors=$((esec - ssec))
after=$((fsec - esec))
client=$(e2e_result nbdwindow sectors)
echo "NBD: nbd-client $(tr -d '\r' <"$E2E_CONSOLE" | grep -a -o 'E2E-RESULT: nbd sectors=.*' | cut -d' ' -f4-)"
echo "NBD: requests the guest's server saw: $(tr -d '\r' <"$E2E_CONSOLE" | grep -a -o 'E2E-RESULT: nbdlog .*' | cut -d' ' -f3-)"
printf 'COUNT: nbd-client %s mount=strictatime window=%.1fs backing: %d ops %d sectors; client wrote %d sectors; after window to server exit: %d sectors\n' \
  "$plugin" "$(awk -v a="$st" -v b="$et" 'BEGIN { print b - a }')" \
  $((ereq - sreq)) "$sectors" "$client" "$after"
if [ "$ext4lazy" = 1 ]; then
  floor=${E2E_NBDC_FLOOR:-8}
  limit=$(( (floor * 5 + 3) / 4 + 16 ))
  [ "$client" -gt "$limit" ] \
    || e2e_fail "count: the client wrote $client sectors in the window: no timestamps to hold, nothing measured"
  [ "$sectors" -le "$limit" ] \
    || e2e_fail "count: ext4lazy sent $sectors sectors in the window; the bound is $limit (1.25 x $floor + 16)"
  [ "$after" -gt 0 ] \
    || e2e_fail "count: nothing reached the disk between the window and the server's exit"
  if [ -n "$stats" ]; then
    echo "NBD: at the end of the window: $(guest_stat held) inode-table writes held, $(guest_stat held_now) blocks held now"
  fi
  # What was held is on the disk: every file was read after the remount,
  # seconds after it was written.
  for f in /data/d000/f00000 /data/d019/f01999; do
    # debugfs: " atime: 0xSECONDS:EXTRA -- date"
    read -r at mt < <(debugfs -R "stat $f" "$img" 2>/dev/null | awk '
      $1 == "atime:" { split($2, a, ":") } $1 == "mtime:" { split($2, m, ":") }
      END { print substr(a[1], 3), substr(m[1], 3) }')
    [ -n "$at" ] && [ -n "$mt" ] || e2e_fail "count: debugfs stat $f"
    at=$((16#$at)) mt=$((16#$mt))
    [ "$at" -ge $((mt + 5)) ] \
      || e2e_fail "count: $f atime $at, mtime $mt: the atime of the scans did not reach the disk"
  done
  echo "PASS: count: ext4lazy sent $sectors sectors in the window, within 1.25 x $floor + 16 = $limit; the client wrote $client; the held atimes reached the disk at exit ($after sectors)"
fi
rm -f "$img"

# ---- crash -------------------------------------------------------------
CFS_BLOCKS=$CRASH_FS_BLOCKS
CMSTART=$((CFS_BLOCKS * 4096 + 65536))
CMARKERS=192
CIMG_SIZE=$((CMSTART + CMARKERS * 4096))
NFILES=200 SIZE=3000 SEED=31
img=$E2E_TMP/crash.img
e2e_image "$img" "$CIMG_SIZE"
mkfs.ext4 -F -q -b 4096 -E lazy_itable_init=0,lazy_journal_init=0,nodiscard \
  "$img" "$CFS_BLOCKS" || e2e_fail "crash: mkfs.ext4"
cargs=$args
[ "$ext4lazy" = 1 ] && cargs=policy=atime${args:+,$args}
E2E_DISK=$img e2e_boot crash \
  workload=nbdserve,nbdconnect,mount,populate,crash,${stats}halt \
  nbdplugin="$plugin" ${cargs:+nbdargs="$cargs"} \
  mountopts=strictatime,commit=1 nfiles=$NFILES size=$SIZE seed=$SEED \
  mstart=$CMSTART nmarkers=$CMARKERS steps=60 crashmode=fsync \
  || e2e_fail "crash: guest run failed"
grep -aq '^E2E-RESULT: crash steps=' "$E2E_CONSOLE" \
  || e2e_fail "crash: the workload did not finish"
held=
if [ -n "$stats" ]; then
  held=", $(guest_stat held_now) blocks held when it died, $(guest_stat tx_absorbed) transactions absorbed"
fi

# The durable state at the last marker (every declaration printed), as
# test-crash-kill.sh checks a killed server's store.
mkdir -p "$E2E_TMP/crash.logs" "$E2E_TMP/crash.work"
crash_expect crash "$E2E_CONSOLE"
last=$CRASH_LAST decl=$CRASH_DECL
times=0
[ "$ext4lazy" = 1 ] && times=1
CRASH_IMG=$img CRASH_ID=0 CRASH_KIND=halt CRASH_MARKER=$last CRASH_SLOT=0 \
CRASH_EXPECT=$E2E_TMP/crash.expect CRASH_WORK=$E2E_TMP/crash.work \
CRASH_LOGDIR=$E2E_TMP/crash.logs CRASH_JOURNAL=1 CRASH_TIMES=$times \
CRASH_MOUNT_EVERY=1 CRASH_FSCK_KINDS=all \
  bash "$CRASH_SRCDIR/check-state.sh"
st=$?
if [ "$st" != 0 ]; then
  cat "$E2E_TMP/crash.logs"/* 2>/dev/null | head -n 30 >&2
  e2e_fail "crash: the state after the power-off failed (status $st)"
fi
# The populated tree, from the replayed image.
mkdir -p "$E2E_TMP/out"
debugfs -R "rdump /data $E2E_TMP/out" "$img" >/dev/null 2>&1 \
  || e2e_fail "crash: debugfs rdump"
"$E2E_GUEST" verify "$E2E_TMP/out/data" $NFILES $SIZE $SEED >&2 \
  || e2e_fail "crash: the populated files differ on the host"
echo "PASS: crash: guest powered off with nbd-client connected ($decl durability declarations$held): clean, every declaration durable, $NFILES files verified"
echo "PASS: the kernel's NBD client, $(($(date +%s) - t0)) s"
