#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-e2e-count.sh --- measurement skeleton: how many sectors reach the
# backing store while an unmodified guest kernel reads a tree of small files
# on ext4 (without a journal unless E2E_COUNT_FEAT says).  A first guest
# makes and populates the filesystem through nbdkit's file plugin; then the
# same workload (mount, read scans, idle, unmount) runs on two copies:
#   A: the server under test, guest mount "strictatime"
#   B: nbdkit's file plugin, guest mount "lazytime,strictatime" (the kernel's
#      own lazytime: the floor a block-level lazytime can hope for)
# Each backing store is a loop device with direct I/O, counted from
# /sys/block/loopN/stat over a window that the guest cuts with O_DIRECT reads
# of two marker blocks past the end of the filesystem (after a first file
# open and a journal commit: the steady state), and over the whole run,
# from server start to server exit.  The test asserts that each guest
# finished, that the filesystem is clean and, when A is ext4lazy, the
# acceptance bound: in the window A sends the backing store no more than
# 1.25 x what B sends, plus two 4 KiB blocks (16 sectors) of slack; with
# E2E_COUNT_WHOLE_BOUND=R, over the whole run no more than R x B's whole
# run + 16.  With E2E_COUNT_OPS_BOUND=R, the store operations (write
# requests and flushes) too: in the window and over the whole run, no
# more than R x B's + 1.  These are counts, not timings.
#
# E2E_COUNT_NO_BOUNDS=1: the counts and ratios only, no bound asserted
# (tests/bench/bench-lazytime.sh measures cases outside the bounds).
# E2E_COUNT_BASE_ALSO=MOUNTOPTS: a last run, C, of B's server with those
# mount options; its ratios to B are printed, nothing is asserted.
# E2E_COUNT_TEMPLATE=PATH: the populated template is PATH when it exists
# (its features must be E2E_COUNT_FEAT's), else it is made there and kept.
# E2E_COUNT_RBD=CEPH_CONF (tests/bench/bench-lazytime-rbd.sh): each run's
# copy is an RBD image instead of a loop device: the template "rbd
# import"ed into a fresh image in pool rbd of that cluster, A the plugin
# under test with rbd=rbd/IMAGE ceph-conf=CEPH_CONF, B (and C)
# qemu-storage-daemon's rbd driver behind nbdkit's nbd plugin with the
# same log filter.  What is counted is what reaches the cluster: the perf
# counters of its OSD (osd.0, read through its admin socket): write ops,
# bytes in and read-modify-write ops (librbd's object map and lock
# updates), cut at the marker reads as the front server's log shows them,
# and from server start (for B and C, before qemu-storage-daemon starts)
# to server exit.  After each run the image is exported for e2fsck and
# removed.  The ratios are printed and nothing is asserted; the cluster
# must have one OSD and no other client meanwhile.
# E2E_COUNT_NBD_REMOTE=1 (tests/bench/bench-lazytime-nbd.sh): each run's
# copy is served by a remote nbdkit (file plugin behind the log filter,
# and behind E2E_COUNT_REMOTE_FILTERS, e.g. "--filter=delay
# delay-write=1ms": words starting with "--" go before the plugin, the
# rest after it) on a Unix socket; A is the plugin under test with
# nbd=nbd+unix:///?socket=REMOTE, B (and C) nbdkit's nbd plugin in front
# of the same kind of remote.  What is counted is what the remote's log
# shows: Write commands and their bytes, Flush commands, Zero and Trim
# commands, between the guest's marker reads as they reach the remote,
# and over the whole run (remote start to exit, the front server started
# after the remote and stopped before it).  The ratios are printed and
# nothing is asserted.
. "$(dirname "$0")/lib.sh"
e2e_init
rbdconf=${E2E_COUNT_RBD:-} rbdpool=rbd asok=
nbdremote=${E2E_COUNT_NBD_REMOTE:-}
[ -n "$rbdconf" ] && [ -n "$nbdremote" ] && e2e_fail "E2E_COUNT_RBD and E2E_COUNT_NBD_REMOTE exclude each other"
if [ -n "$nbdremote" ]; then
  nbdkit "$E2E_PLUGIN_SPEC" --dump-plugin 2>/dev/null | grep -qx ext4lazy_nbd=yes \
    || e2e_skip "$E2E_PLUGIN_SPEC cannot serve nbd= (E2E_COUNT_NBD_REMOTE)"
  nbdkit --dump-plugin nbd >/dev/null 2>&1 || e2e_skip "nbdkit nbd plugin missing"
fi
if [ -n "$rbdconf" ]; then
  for c in rbd ceph-conf qemu-storage-daemon; do
    command -v "$c" >/dev/null 2>&1 || e2e_skip "$c not found (E2E_COUNT_RBD)"
  done
  nbdkit "$E2E_PLUGIN_SPEC" --dump-plugin 2>/dev/null | grep -qx ext4lazy_rbd=yes \
    || e2e_skip "$E2E_PLUGIN_SPEC cannot serve rbd= (E2E_COUNT_RBD)"
  nbdkit --dump-plugin nbd >/dev/null 2>&1 || e2e_skip "nbdkit nbd plugin missing"
  asok=$(ceph-conf -c "$rbdconf" --name osd.0 --show-config-value admin_socket) \
    && [ -S "$asok" ] || e2e_skip "no admin socket of osd.0 for $rbdconf"
fi

FS_BLOCKS=65536                             # 256 MiB of 4 KiB blocks
MSTART=$((FS_BLOCKS * 4096 + 256 * 1024))   # marker blocks outside the fs
MEND=$((MSTART + 64 * 1024))
IMG_SIZE=$((FS_BLOCKS * 4096 + 1024 * 1024))
# E2E_COUNT_FEAT: mkfs features (default: no journal); E2E_COUNT_MOUNT: the
# mount options of run A (default strictatime); E2E_PLUGIN_ARGS: run A's
# plugin parameters (default policy=strict: without a journal it gives
# the full effect and keeps every FLUSH).
export E2E_PLUGIN_ARGS=${E2E_PLUGIN_ARGS:-policy=strict}
# E2E_COUNT_WHOLE_BOUND: if set (e.g. 0.6), A's whole run must also stay
# within that many times B's whole run.  E2E_COUNT_ALSO: see the end.
# E2E_COUNT_SCANS / _PAUSE / _IDLE: the window's read scans, the seconds
# between them and the idle time after them (default 6, 6, 35).
# E2E_COUNT_DIRTYTIME=S: the guest's vm.dirtytime_expire_seconds (the
# deadline scenario of tests/bench/bench-lazytime.sh).
common=(mkfsfeat=${E2E_COUNT_FEAT:-^has_journal} fsblocks=$FS_BLOCKS
        nfiles=2000 size=3000 seed=5 settle=7
        scans=${E2E_COUNT_SCANS:-6} pause=${E2E_COUNT_PAUSE:-6}
        idle=${E2E_COUNT_IDLE:-35} mstart=$MSTART mend=$MEND)
[ -n "${E2E_COUNT_DIRTYTIME:-}" ] && common+=(dirtytime=$E2E_COUNT_DIRTYTIME)

# The filesystem both runs start from: made and populated once, by the
# guest through nbdkit's file plugin, and unmounted.
template=${E2E_COUNT_TEMPLATE:-$E2E_TMP/populated.img}
if [ -n "${E2E_COUNT_TEMPLATE:-}" ] && [ -s "$template" ]; then
  e2e_log "populated template: $template"
else
  e2e_image "$template.part" "$IMG_SIZE"
  e2e_nbdkit_start populate file "$template.part"
  e2e_boot populate workload=mkfs,mount,populate,umount "${common[@]}" \
    mountopts=strictatime || e2e_fail "populate: guest run failed"
  e2e_nbdkit_stop || e2e_fail "populate: server did not exit cleanly"
  mv -f "$template.part" "$template"
fi

# run NAME PLUGIN MOUNTOPTS: one guest run on a copy of the template,
# from server start to server exit: mount, the measurement window
# (init.sh's count step), unmount.  Sets SECTORS (in the window) and
# WHOLE (server start to exit).
run ()
{
  local name=$1 plugin=$2 opts=$3 img dev win s e first final client pname
  [ -n "$rbdconf" ] && { run_rbd "$@"; return; }
  [ -n "$nbdremote" ] && { run_nbd "$@"; return; }
  pname=$plugin
  [ "$pname" = default ] && pname=$E2E_PLUGIN_SPEC
  img=$E2E_TMP/$name.img
  win=$E2E_TMP/$name.window
  cp --sparse=always "$template" "$img" || e2e_fail "copy the template"
  e2e_loop_attach "$img"
  dev=$E2E_LOOP
  first=$(e2e_loop_stat "$dev")
  e2e_nbdkit_start "$name" "$plugin" "$dev"
  e2e_window_watch "$E2E_NBDLOG" "$dev" "$MSTART" "$MEND" "$win"
  e2e_boot "$name" workload=mount,count,umount,fsck "${common[@]}" \
    mountopts="$opts" || e2e_fail "$name: guest run failed"
  wait "$E2E_WATCH_PID"
  e2e_forget_pid "$E2E_WATCH_PID"
  e2e_nbdkit_stop || e2e_fail "$name: server did not exit cleanly"
  final=$(e2e_loop_stat "$dev")
  e2e_loop_detach "$dev"
  e2fsck -fn "$img" >"$E2E_TMP/$name.fsck" 2>&1 \
    || { cat "$E2E_TMP/$name.fsck" >&2; e2e_fail "$name: e2fsck -fn"; }
  s=$(grep '^start ' "$win") && e=$(grep '^end ' "$win") \
    || e2e_fail "$name: the markers were not seen in the server log"
  read -r _ sreq ssec st <<<"$s"
  read -r _ ereq esec et <<<"$e"
  read -r freq0 fsec0 <<<"$first"
  read -r freq fsec <<<"$final"
  client=$(e2e_log_write_sectors "$MSTART" "$MEND" "$E2E_NBDLOG")
  SECTORS=$((esec - ssec))
  WHOLE=$((fsec - fsec0))
  OPS=$((ereq - sreq))
  WHOLEOPS=$((freq - freq0))
  printf 'COUNT: %-4s %-24s mount=%-22s window=%5.1fs backing: %d ops %d sectors; client wrote %d sectors; after window to server exit: %d sectors; whole run: %d sectors %d ops\n' \
    "$name" "$(basename "$pname")" "$opts" "$(awk -v a="$st" -v b="$et" 'BEGIN { print b - a }')" \
    "$OPS" "$SECTORS" "$client" $((fsec - esec)) "$WHOLE" "$WHOLEOPS"
  rm -f "$img"
}

# run_rbd NAME SERVER MOUNTOPTS: run's counterpart with E2E_COUNT_RBD;
# SERVER is "default" (the plugin under test with rbd=) or "qsd".  Sets
# COUNTS[NAME] to "OPS BYTES RW WHOLE_OPS WHOLE_BYTES WHOLE_RW" (write
# ops, bytes in and read-modify-write ops in the window, then server start
# to exit), SECTORS and WHOLE to the window's and the whole run's bytes,
# OPS and WHOLEOPS to its write ops.
declare -A COUNTS
run_rbd ()
{
  local name=$1 server=$2 opts=$3 img image win s e first final client pname
  local E2E_PLUGIN_ARGS="${E2E_PLUGIN_ARGS:-} ceph-conf=$rbdconf"
  local sw sb srw st ew eb erw et fw fb frw lw lb lrw
  img=$E2E_TMP/$name.img
  win=$E2E_TMP/$name.window
  image=$rbdpool/e2e-count-$$-$name
  e2e_rbd_import "$name" "$rbdconf" "$template" "$image"
  first=$(e2e_osd_stat "$asok") || e2e_fail "$name: the OSD's counters"
  if [ "$server" = qsd ]; then
    pname=qemu-storage-daemon
    e2e_qsd_start "$name" "$image" "$rbdconf"
    e2e_nbdkit_start "$name" nbd "socket=$E2E_QSD_SOCK"
  else
    pname=$(basename "$E2E_PLUGIN_SPEC")
    e2e_nbdkit_start "$name" default "rbd=$image"
  fi
  e2e_window_watch "$E2E_NBDLOG" "$asok" "$MSTART" "$MEND" "$win" e2e_osd_stat
  e2e_boot "$name" workload=mount,count,umount,fsck "${common[@]}" \
    mountopts="$opts" || e2e_fail "$name: guest run failed"
  wait "$E2E_WATCH_PID"
  e2e_forget_pid "$E2E_WATCH_PID"
  e2e_nbdkit_stop || e2e_fail "$name: server did not exit cleanly"
  e2e_qsd_stop || e2e_fail "$name: qemu-storage-daemon did not exit cleanly"
  final=$(e2e_osd_stat "$asok") || e2e_fail "$name: the OSD's counters"
  e2e_rbd_take "$name" "$rbdconf" "$image" "$img"
  e2fsck -fn "$img" >"$E2E_TMP/$name.fsck" 2>&1 \
    || { cat "$E2E_TMP/$name.fsck" >&2; e2e_fail "$name: e2fsck -fn"; }
  s=$(grep '^start [0-9]* [0-9]* [0-9]* ' "$win") \
    && e=$(grep '^end [0-9]* [0-9]* [0-9]* ' "$win") \
    || e2e_fail "$name: the markers were not seen in the server log"
  read -r _ sw sb srw st <<<"$s"
  read -r _ ew eb erw et <<<"$e"
  read -r fw fb frw <<<"$first"
  read -r lw lb lrw <<<"$final"
  client=$(e2e_log_write_sectors "$MSTART" "$MEND" "$E2E_NBDLOG")
  COUNTS[$name]="$((ew - sw)) $((eb - sb)) $((erw - srw)) $((lw - fw)) $((lb - fb)) $((lrw - frw))"
  SECTORS=$((eb - sb))
  WHOLE=$((lb - fb))
  OPS=$((ew - sw))
  WHOLEOPS=$((lw - fw))
  printf 'COUNT: %-4s %-24s mount=%-22s window=%5.1fs cluster: %d write ops %d bytes %d rw ops; client wrote %d sectors; after window to server exit: %d write ops %d bytes %d rw ops; whole run: %d write ops %d bytes %d rw ops\n' \
    "$name" "$pname" "$opts" "$(awk -v a="$st" -v b="$et" 'BEGIN { print b - a }')" \
    $((ew - sw)) $((eb - sb)) $((erw - srw)) "$client" \
    $((lw - ew)) $((lb - eb)) $((lrw - erw)) \
    $((lw - fw)) $((lb - fb)) $((lrw - frw))
  rm -f "$img"
}

# e2e_remote_count LOG START END: what the remote's log LOG shows:
# "W F Z BYTES  SW SF SZ SB ST  EW EF EZ EB ET": Write, Flush and
# Zero+Trim commands and bytes written in the whole log, then the same
# counts so far at the first request-line of the marker read at byte
# offset START and at END, with the seconds of the day of each.
e2e_remote_count ()
{
  local s e
  s=$(printf 'offset=0x%x' "$2")
  e=$(printf 'offset=0x%x' "$3")
  awk -v s="$s" -v e="$e" "$E2E_AWK_HEX"'
    function secs(t,   a) { split(t, a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
    / Write id=/ {
      w++
      for (i = 1; i <= NF; i++) if ($i ~ /^count=0x/) b += hex(substr($i, 7))
    }
    / Flush id=/ { f++ }
    / (Zero|Trim) id=/ { z++ }
    function now() { return sprintf("%d %d %d %d %.3f", w, f, z, b, secs($2)) }
    / Read id=/ && !ss && index($0, s " ") { ss = 1; st = now() }
    / Read id=/ && ss && !ee && index($0, e " ") { ee = 1; et = now() }
    END {
      if (!ss || !ee) exit 1
      printf "%d %d %d %d %s %s\n", w, f, z, b, st, et
    }' "$1"
}

# run_nbd NAME SERVER MOUNTOPTS: run's counterpart with
# E2E_COUNT_NBD_REMOTE; SERVER is "default" (the plugin under test with
# nbd=) or "nbd" (nbdkit's nbd plugin).  Sets COUNTS[NAME] to "W F Z
# BYTES WHOLE_W WHOLE_F WHOLE_Z WHOLE_BYTES" (the window, then the whole
# run), SECTORS and WHOLE to the window's and the whole run's bytes / 512,
# OPS and WHOLEOPS to its Write + Flush commands.
run_nbd ()
{
  local name=$1 server=$2 opts=$3 img rsock rlog pname client c w
  local -a rpre=() rpost=() words=()
  local tw tf tz tb sw sf sz sb st ew ef ez eb et
  img=$E2E_TMP/$name.img
  rsock=$E2E_TMP/$name.remote.sock
  rlog=$E2E_TMP/$name.remote.log
  cp --sparse=always "$template" "$img" || e2e_fail "copy the template"
  read -r -a words <<<"${E2E_COUNT_REMOTE_FILTERS:-}"
  for w in "${words[@]}"; do
    case $w in --*) rpre+=("$w") ;; *) rpost+=("$w") ;; esac
  done
  rm -f "$rsock" "$rlog"
  nbdkit -f --exit-with-parent -U "$rsock" --filter=log "${rpre[@]}" \
    file "$img" logfile="$rlog" "${rpost[@]}" \
    2>"$E2E_TMP/$name.remote.err" &
  local rpid=$!
  E2E_PIDS+=("$rpid")
  e2e_wait_socket "$rsock" "$rpid" "$E2E_TMP/$name.remote.err" "remote nbdkit ($img)"
  if [ "$server" = nbd ]; then
    pname=nbdkit-nbd-plugin
    e2e_nbdkit_start "$name" nbd "socket=$rsock"
  else
    pname=$(basename "$E2E_PLUGIN_SPEC")
    e2e_nbdkit_start "$name" default "nbd=nbd+unix:///?socket=$rsock"
  fi
  e2e_boot "$name" workload=mount,count,umount,fsck "${common[@]}" \
    mountopts="$opts" || e2e_fail "$name: guest run failed"
  e2e_nbdkit_stop || e2e_fail "$name: server did not exit cleanly"
  e2e_term "$rpid"; c=$?
  case $c in 0|143) ;; *) e2e_fail "$name: the remote nbdkit exited with status $c" ;; esac
  e2fsck -fn "$img" >"$E2E_TMP/$name.fsck" 2>&1 \
    || { cat "$E2E_TMP/$name.fsck" >&2; e2e_fail "$name: e2fsck -fn"; }
  c=$(e2e_remote_count "$rlog" "$MSTART" "$MEND") \
    || e2e_fail "$name: the markers were not seen in the remote's log"
  read -r tw tf tz tb sw sf sz sb st ew ef ez eb et <<<"$c"
  client=$(e2e_log_write_sectors "$MSTART" "$MEND" "$E2E_NBDLOG")
  COUNTS[$name]="$((ew - sw)) $((ef - sf)) $((ez - sz)) $((eb - sb)) $tw $tf $tz $tb"
  SECTORS=$(( (eb - sb) / 512 ))
  WHOLE=$((tb / 512))
  OPS=$((ew - sw + ef - sf))
  WHOLEOPS=$((tw + tf))
  printf 'COUNT: %-4s %-24s mount=%-22s window=%5.1fs remote: %d writes %d flushes %d zero+trim %d bytes; client wrote %d sectors; after window to server exit: %d writes %d flushes %d zero+trim %d bytes; whole run: %d writes %d flushes %d zero+trim %d bytes\n' \
    "$name" "$pname" "$opts" "$(awk -v a="$st" -v b="$et" 'BEGIN { d = b - a; if (d < 0) d += 86400; print d }')" \
    $((ew - sw)) $((ef - sf)) $((ez - sz)) $((eb - sb)) "$client" \
    $((tw - ew)) $((tf - ef)) $((tz - ez)) $((tb - eb)) \
    "$tw" "$tf" "$tz" "$tb"
  rm -f "$img"
}

# ratio_nbd NAME: NAME's counts over B's (E2E_COUNT_NBD_REMOTE).
ratio_nbd ()
{
  awk -v n="$1" -v a="${COUNTS[$1]}" -v b="${COUNTS[B]}" 'BEGIN {
    split(a, x, " "); split(b, y, " ")
    x[9] = x[1] + x[2]; y[9] = y[1] + y[2]; x[10] = x[5] + x[6]; y[10] = y[5] + y[6]
    split("window writes,window flushes,,window bytes,whole run writes,whole run flushes,,whole run bytes,window writes+flushes,whole run writes+flushes", k, ",")
    for (i = 1; i <= 10; i++) if (k[i] != "")
      printf "COUNT: %s %s/B = %s (%d / %d)\n", k[i], n,
        y[i] ? sprintf("%.2f", x[i] / y[i]) : "undefined", x[i], y[i] }'
}

# ratio_rbd NAME: NAME's counts over B's (E2E_COUNT_RBD).
ratio_rbd ()
{
  awk -v n="$1" -v a="${COUNTS[$1]}" -v b="${COUNTS[B]}" 'BEGIN {
    split(a, x, " "); split(b, y, " ")
    split("window write ops,window bytes,,whole run write ops,whole run bytes", k, ",")
    for (i = 1; i <= 5; i++) if (k[i] != "")
      printf "COUNT: %s %s/B = %s (%d / %d)\n", k[i], n,
        y[i] ? sprintf("%.2f", x[i] / y[i]) : "undefined", x[i], y[i] }'
}

# ratios NAME A AWHOLE: run NAME's window and whole run against run B's.
ratios ()
{
  local name=$1 a=$2 awhole=$3
  [ -n "$rbdconf" ] && { ratio_rbd "$name"; return; }
  [ -n "$nbdremote" ] && { ratio_nbd "$name"; return; }
  echo "COUNT: whole run $name/B = $(awk -v a="$awhole" -v b="$bwhole" \
    'BEGIN { printf "%.2f", b ? a / b : 0 }') ($awhole / $bwhole sectors)"
  if [ "$b" -gt 0 ]; then
    echo "COUNT: ratio $name/B = $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }') ($a / $b sectors)"
  else
    echo "COUNT: ratio $name/B undefined (B wrote 0 sectors; $name wrote $a)"
  fi
}

# check NAME A AWHOLE BOUND: the window bound and, with BOUND, the
# whole-run bound of server-under-test run NAME against run B (none with
# E2E_COUNT_RBD: the ratios only).
check ()
{
  local name=$1 a=$2 awhole=$3 bound=$4 limit wlimit
  ratios "$name" "$a" "$awhole"
  [ -z "$rbdconf$nbdremote" ] || return 0
  [ -z "${E2E_COUNT_NO_BOUNDS:-}" ] || return 0
  [ "$(basename "$E2E_PLUGIN_SPEC")" = nbdkit-ext4lazy-plugin.so ] || return 0
  limit=$(( (a > 0 || b > 0) ? (b * 5 + 3) / 4 + 16 : 16 ))
  [ "$a" -le "$limit" ] ||
    e2e_fail "$name: ext4lazy sent $a sectors in the window; the bound is $limit (1.25 x $b + 16)"
  echo "PASS: $name: ext4lazy sent $a sectors, within 1.25 x $b + 16 = $limit"
  [ -n "$bound" ] || return 0
  wlimit=$(awk -v r="$bound" -v b="$bwhole" 'BEGIN { printf "%d", r * b + 16 }')
  [ "$awhole" -le "$wlimit" ] ||
    e2e_fail "$name: ext4lazy sent $awhole sectors over the whole run; the bound is $wlimit ($bound x $bwhole + 16)"
  echo "PASS: $name: over the whole run ext4lazy sent $awhole sectors, within $bound x $bwhole + 16 = $wlimit"
}

# check_ops NAME: the last run's store operations (OPS, WHOLEOPS)
# against run B's, in the window and over the whole run: the ratios,
# and with E2E_COUNT_OPS_BOUND=R (loop devices only) no more than
# R x B's + 1 each.
check_ops ()
{
  local name=$1 bound=${E2E_COUNT_OPS_BOUND:-} what a bb limit
  [ -z "$rbdconf$nbdremote" ] || return 0
  for what in window whole; do
    if [ $what = window ]; then a=$OPS bb=$bops; else a=$WHOLEOPS bb=$bwholeops; fi
    echo "COUNT: $what operations $name/B = $(awk -v a="$a" -v b="$bb" \
      'BEGIN { printf "%.2f", b ? a / b : 0 }') ($a / $bb writes+flushes)"
    [ -n "$bound" ] || continue
    [ "$(basename "$E2E_PLUGIN_SPEC")" = nbdkit-ext4lazy-plugin.so ] || continue
    limit=$(awk -v r="$bound" -v b="$bb" 'BEGIN { printf "%d", r * b + 1 }')
    [ "$a" -le "$limit" ] ||
      e2e_fail "$name: ext4lazy cost the store $a operations ($what); the bound is $limit ($bound x $bb + 1)"
    echo "PASS: $name: $a store operations ($what), within $bound x $bb + 1 = $limit"
  done
}

base=file
[ -n "$rbdconf" ] && base=qsd
[ -n "$nbdremote" ] && base=nbd
run B $base lazytime,strictatime
b=$SECTORS bwhole=$WHOLE bops=$OPS bwholeops=$WHOLEOPS
run A default "${E2E_COUNT_MOUNT:-strictatime}"
check A "$SECTORS" "$WHOLE" "${E2E_COUNT_WHOLE_BOUND:-}"
check_ops A
# E2E_COUNT_ALSO="PARAMS|BOUND": a second run of the server under test,
# A2, with those plugin parameters (space-separated) and whole-run bound,
# against the same B.
if [ -n "${E2E_COUNT_ALSO:-}" ]; then
  E2E_PLUGIN_ARGS=${E2E_COUNT_ALSO%%|*}
  run A2 default "${E2E_COUNT_MOUNT:-strictatime}"
  check A2 "$SECTORS" "$WHOLE" "${E2E_COUNT_ALSO#*|}"
  check_ops A2
fi
if [ -n "${E2E_COUNT_BASE_ALSO:-}" ]; then
  run C $base "$E2E_COUNT_BASE_ALSO"
  ratios C "$SECTORS" "$WHOLE"
fi
echo "PASS: every guest run finished and left a clean filesystem"
