#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-e2e-stop-idle.sh --- SIGTERM (what systemd sends after ExecStop=,
# or an operator's kill) to a server with one idle client connected ends
# it within seconds, and what it held is on the store.
#
# The guest (qemu's NBD client, reconnect-delay=30, on the listening
# socket of listen-hold.py) mounts a journaled ext4 strictatime, reads
# every file, syncs, waits past a journal commit and then stays idle with
# the filesystem mounted.  The host checks that the server holds blocks,
# copies the export as the server serves it (nbdcopy, a second client
# that leaves again), tells the holder to start no other server and
# sends the server SIGTERM.  Asserted: the server exits within
# E2E_STOP_BOUND seconds (default 30: a generous bound, not a timing
# claim; nbdkit 1.32 alone never exits while a client stays connected),
# and the image is then byte for byte the export it served (the holds
# were written back).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-restart.sh"
e2e_init
rs_init
command -v nbdcopy >/dev/null 2>&1 || e2e_skip "nbdcopy not found (package libnbd-bin)"
BOUND=${E2E_STOP_BOUND:-30}

img=$E2E_TMP/disk.img
mkdir -p "$E2E_TMP/tree/a"
for ((i = 0; i < 64; i++)); do echo "file $i" >"$E2E_TMP/tree/a/$i"; done
touch -d '2020-01-01 00:00:00' "$E2E_TMP/tree/a/"*
e2e_image "$img" 64M
mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 -d "$E2E_TMP/tree" "$img" || e2e_fail "mkfs.ext4 -d"
rm -rf "$E2E_TMP/tree"

cat >"$E2E_TMP/idle.sh" <<'EOF'
mount -t ext4 -o strictatime /dev/vda /mnt || { echo "E2E-RESULT: idle mount FAIL"; exit 1; }
for f in /mnt/a/*; do cat "$f" >/dev/null; done
sync
sleep 7
echo "E2E-PHASE: idle"
sleep 600
EOF
rs_serve "$img" policy=atime
rs_extra_initrd idle "$E2E_TMP/idle.sh"
rs_qemu idle "$RS_INITRD" "$RS_SOCK"
rs_wait_line "$E2E_TMP/idle.console" "$RS_QEMU_PID" "E2E-PHASE: idle" 600 \
  || { tail -n 30 "$E2E_TMP/idle.console" >&2; e2e_fail "the guest did not get idle"; }
sleep 2

held=$("$EXT4LAZYCTL" -s "$RS_CTL" stats --json | grep -o '"held_blocks":[0-9]*' \
         | cut -d: -f2 | awk '{ n += $1 } END { print n + 0 }')
e2e_log "the server holds $held blocks with the guest idle"
[ "$held" -gt 0 ] || e2e_fail "the server holds nothing: nothing to test"
nbdcopy "nbd+unix:///?socket=$RS_SOCK" "$E2E_TMP/served.img" \
  || e2e_fail "nbdcopy from the server"
cmp -s "$img" "$E2E_TMP/served.img" \
  && e2e_fail "the image already has what the server serves: nothing held"

kill -TERM "$RS_HOLDER_PID"
cur=$(rs_server)
pid=${cur#* }
t0=$(date +%s.%N)
kill -TERM "$pid"
for ((i = 0; i < BOUND * 10; i++)); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
if kill -0 "$pid" 2>/dev/null; then
  kill -9 "$pid"
  e2e_fail "the server still ran ${BOUND} s after SIGTERM with an idle client connected"
fi
e2e_log "the server exited ${secs} s after SIGTERM"
wait "$RS_HOLDER_PID"
e2e_forget_pid "$RS_HOLDER_PID"
grep '^exit ' "$RS_EVENTS" | sed 's/^/e2e: /' >&2
kill -9 "$RS_QEMU_PID" 2>/dev/null
wait "$RS_QEMU_PID" 2>/dev/null
e2e_forget_pid "$RS_QEMU_PID"
errors=$(rs_console_errors "$E2E_TMP/idle.console") \
  || e2e_fail "the guest saw errors:"$'\n'"$(head -n 20 <<<"$errors")"
cmp "$img" "$E2E_TMP/served.img" >&2 \
  || e2e_fail "the image differs from what the server served: holds lost"
echo "PASS: SIGTERM with an idle client: the server exited in ${secs} s (bound ${BOUND} s), its $held held blocks on the image"
