#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-e2e-migrate.sh --- a guest is live-migrated between two qemu
# processes that share one export of the server, and goes on with no
# error, reading on the destination everything written on the source,
# held timestamps included.
#
# One server (policy=atime, behind the listening socket the restart test
# uses, stopped at the end as the shipped unit stops it).  The source
# qemu boots the guest (guest/migrate-workload.sh), whose disk is qemu's
# NBD client with reconnect-delay=30; the destination, started with
# -incoming, connects to the same socket at start.  Once the guest has
# read the files of /a and unmounted and mounted again (the server then
# holds their new atimes), and while it writes files with fsync, the
# host migrates it over a Unix socket (QMP "migrate"; the source flushes
# and inactivates its disk at switchover) and reads the downtime from
# "query-migrate".  Asserted: the server held blocks before the move;
# the migration completed; no I/O error, EXT4-fs error or JBD2 line on
# either console; on the destination the atimes of /a read from the disk
# are those the source saw, and every file fsynced (on either side) reads
# back with its content; e2fsck -fn clean in the guest and on the host;
# the image has the atimes and the files.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-restart.sh"
e2e_init
rs_init

NA=64
img=$E2E_TMP/disk.img
mkdir -p "$E2E_TMP/tree/a"
for ((i = 0; i < NA; i++)); do echo "file $i" >"$E2E_TMP/tree/a/$i"; done
touch -d '2020-01-01 00:00:00' "$E2E_TMP/tree/a/"*
e2e_image "$img" 128M
mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 -d "$E2E_TMP/tree" "$img" || e2e_fail "mkfs.ext4 -d"
rm -rf "$E2E_TMP/tree"

rs_serve "$img" policy=atime
rs_extra_initrd migrate "$E2E_SRCDIR/guest/migrate-workload.sh" WORK_SECS=40
mig=$E2E_TMP/migrate.sock
rs_qemu src "$RS_INITRD" "$RS_SOCK"
src_pid=$RS_QEMU_PID
rs_qemu dst "$RS_INITRD" "$RS_SOCK" -incoming "unix:$mig"
dst_pid=$RS_QEMU_PID
qmp () { /usr/bin/python3 "$E2E_SRCDIR/qmp.py" "$E2E_TMP/$1.qmp" "${@:2}"; }

rs_wait_line "$E2E_TMP/src.console" "$src_pid" "E2E-PHASE: ready" 600 \
  || { rs_qemu_wait "$src_pid" src; e2e_fail "the guest did not get ready"; }
held=$("$EXT4LAZYCTL" -s "$RS_CTL" stats --json | grep -o '"held_blocks":[0-9]*' \
         | cut -d: -f2 | awk '{ n += $1 } END { print n + 0 }')
e2e_log "the server holds $held blocks before the move"
[ "$held" -gt 0 ] || e2e_fail "the server holds nothing before the move: nothing to test"
sleep 5
qmp src migrate "{\"uri\": \"unix:$mig\"}" >/dev/null || e2e_fail "QMP migrate"
for ((i = 0; i < 1200; i++)); do
  info=$(qmp src query-migrate) || e2e_fail "QMP query-migrate"
  status=$(sed -n 's/.*"status": "\([a-z-]*\)".*/\1/p' <<<"$info")
  case $status in
    completed|failed|cancelled) break ;;
  esac
  sleep 0.1
done
e2e_log "query-migrate: $info"
[ "$status" = completed ] || e2e_fail "the migration ended '$status'"
downtime=$(sed -n 's/.*"downtime": \([0-9]*\).*/\1/p' <<<"$info")
total=$(sed -n 's/.*"total-time": \([0-9]*\).*/\1/p' <<<"$info")
qmp src quit >/dev/null 2>&1
wait "$src_pid" 2>/dev/null
e2e_forget_pid "$src_pid"
rs_qemu_wait "$dst_pid" dst || guest_ok=no
rs_holder_end || e2e_fail "the stop had to SIGKILL the server"

cat "$E2E_TMP/src.console" "$E2E_TMP/dst.console" | tr -d '\r' >"$E2E_TMP/console"
errors=$(rs_console_errors "$E2E_TMP/console") \
  || e2e_fail "the guest saw errors:"$'\n'"$(head -n 20 <<<"$errors")"
[ "${guest_ok:-yes}" = yes ] || e2e_fail "the guest's workload failed on the destination"
grep -q 'E2E-RESULT: migrate done' "$E2E_TMP/dst.console" \
  || e2e_fail "the guest did not finish on the destination"
grep -q 'E2E-PHASE: after' "$E2E_TMP/src.console" \
  && e2e_fail "the guest finished its work before the move: nothing was tested"

# The atimes the source saw, read from the disk on the destination and
# on the image.
sed -n 's/^E2E-ATIME-BEFORE: //p' "$E2E_TMP/console" | sort >"$E2E_TMP/atime.before"
sed -n 's/^E2E-ATIME-AFTER: //p' "$E2E_TMP/console" | sort >"$E2E_TMP/atime.after"
[ "$(wc -l <"$E2E_TMP/atime.before")" = $NA ] || e2e_fail "the guest printed no atimes"
diff "$E2E_TMP/atime.before" "$E2E_TMP/atime.after" >&2 \
  || e2e_fail "the destination reads other atimes than the source saw"
rs_check_atimes "$img" "$E2E_TMP/atime.before"

# Every fsynced file, on the destination and on the image.
sed -n 's/^E2E-FSYNCED: //p' "$E2E_TMP/console" | sort >"$E2E_TMP/fsynced"
sed -n 's/^E2E-CHECK: //p' "$E2E_TMP/console" | sort >"$E2E_TMP/checked"
nsrc=$(grep -ac '^E2E-FSYNCED: ' "$E2E_TMP/src.console")
ndst=$(grep -ac '^E2E-FSYNCED: ' "$E2E_TMP/dst.console")
[ "$nsrc" -gt 0 ] && [ "$ndst" -gt 0 ] \
  || e2e_fail "files fsynced: $nsrc on the source, $ndst on the destination"
diff "$E2E_TMP/fsynced" "$E2E_TMP/checked" >&2 \
  || e2e_fail "the fsynced files read back differently on the destination"
rs_check_image "$img" "$E2E_TMP/fsynced"
echo "migration: downtime ${downtime} ms, total ${total} ms (query-migrate)" >&2
echo "PASS: live migration on one export: $NA held atimes and $((nsrc + ndst)) fsynced files ($nsrc before the move) read on the destination and on the image"
