#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-e2e-restart.sh --- the server is restarted under a live guest, the
# way the shipped socket unit restarts it, and the guest never sees it
# but as a pause.
#
# The guest's disk is qemu's NBD client with reconnect-delay=30 on a
# listening socket held across restarts and handed to each server with
# LISTEN_FDS (listen-hold.py, as ext4lazy@.socket).  The guest
# (guest/restart-workload.sh) reads files (atime updates, held by
# policy=atime), writes files with fsync and appends with fsync, round
# after round, each round ending with a wait for the host's word on a
# second serial port (the rounds keep in step with the restarts however
# slow either side is).  In round K the host stops the server as the shipped
# ext4lazy-activated@.service does (its ExecStop=, then its KillSignal=,
# SIGKILL after a bound) at the point POINTS names for K, and the holder
# starts the next one:
#   idle       the guest sleeps, once the journal commit of its reads'
#              atimes is held by the server
#   write      a write request just reached the server (log filter)
#   flush      a FLUSH just reached the server
#   writeback  right after the server's deadline write-back of the
#              round's atime holds (max-age=10s) began
#   read       a read just reached the server
# Asserted: every stop ended without SIGKILL; no I/O error, EXT4-fs error
# or JBD2 line on the guest's console, no failed probe read; every file
# the guest fsynced is there with its content (in the guest, from the
# disk, and on the image); e2fsck -fn is clean in the guest and on the
# host; the atimes the guest last saw for the files it read are on the
# image.  Printed: the pause each restart cost the guest's probe.
#
# E2E_RESTARTS=N (default 5) restarts, one per round; the longer run of
# docs/benchmarks.md is E2E_RESTARTS=50.  E2E_RESTART_REMOTE_DELAY=D
# (e.g. 300ms) puts the image behind a remote nbdkit whose writes take D
# (file plugin, delay filter) and serves it with nbd=: a write is then
# still in the server when the stop begins, and the write restarts must
# find requests in flight (answered, or left for qemu to send again).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-restart.sh"
e2e_init
rs_init

RESTARTS=${E2E_RESTARTS:-5}
POINTS="idle write flush writeback read"
NREAD=4
read -r -a points <<<"$POINTS"

# The image: a journaled ext4 with NREAD small files per round under /r.
img=$E2E_TMP/disk.img
mkdir -p "$E2E_TMP/tree/r"
for ((k = 1; k <= RESTARTS; k++)); do
  for ((i = 0; i < NREAD; i++)); do
    echo "round $k file $i" >"$E2E_TMP/tree/r/$k.$i"
  done
done
touch -d '2020-01-01 00:00:00' "$E2E_TMP/tree/r/"*
e2e_image "$img" $((128 + RESTARTS * 3))M
mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 -d "$E2E_TMP/tree" "$img" || e2e_fail "mkfs.ext4 -d"
rm -rf "$E2E_TMP/tree"

store=$img
if [ -n "${E2E_RESTART_REMOTE_DELAY:-}" ]; then
  nbdkit -f --exit-with-parent -U "$E2E_TMP/remote.sock" --filter=delay file "$img" \
    delay-write="$E2E_RESTART_REMOTE_DELAY" 2>"$E2E_TMP/remote.err" &
  remote_pid=$!
  E2E_PIDS+=("$remote_pid")
  e2e_wait_socket "$E2E_TMP/remote.sock" "$remote_pid" "$E2E_TMP/remote.err" "the remote nbdkit"
  store=nbd=nbd+unix:///?socket=$E2E_TMP/remote.sock
fi
rs_serve "$store" policy=atime max-age=10s
rs_extra_initrd restart "$E2E_SRCDIR/guest/restart-workload.sh" \
  ROUNDS=$RESTARTS "POINTS='$POINTS'" IDLE=8 QUIET=2 WB_QUIET=15 WBLOCKS=32
rs_qemu restart "$RS_INITRD" "$RS_SOCK"
qemu_pid=$RS_QEMU_PID
console=$E2E_TMP/restart.console

# stats_deadline: the server's store writes made by the deadline so far.
stats_deadline ()
{
  "$EXT4LAZYCTL" -s "$RS_CTL" stats --json 2>/dev/null \
    | grep -o '"store_writes":{[^}]*}' | grep -o '"deadline":[0-9]*' | cut -d: -f2
}

# stats_held: the blocks the server holds now.
stats_held ()
{
  "$EXT4LAZYCTL" -s "$RS_CTL" stats --json 2>/dev/null | grep -o '"held_blocks":[0-9]*' \
    | cut -d: -f2 | awk '{ n += $1 } END { print n + 0 }'
}

report=$E2E_TMP/restarts
: >"$report"
aborted=
for ((k = 1; k <= RESTARTS; k++)); do
  point=${points[(k - 1) % ${#points[@]}]}
  case $point in
    idle)
      # Once the journal commit of the reads' atimes is held (5 s).
      rs_wait_line "$console" "$qemu_pid" "E2E-PHASE: $k idle " 600 || break
      for ((i = 0; i < 70; i++)); do
        [ "$(stats_held)" -gt 0 ] && break
        sleep 0.1
      done ;;
    write|flush|read)
      rs_wait_line "$console" "$qemu_pid" "E2E-PHASE: $k $point " 600 || break
      req=${point^}
      rs_wait_new_line "$(rs_server_log)" " $req id=" 60 \
        || e2e_fail "round $k: no $req request reached the server" ;;
    writeback)
      rs_wait_line "$console" "$qemu_pid" "E2E-PHASE: $k read " 600 || break
      d0=$(stats_deadline)
      for ((i = 0; i < 600; i++)); do
        d=$(stats_deadline)
        [ -n "$d" ] && [ -n "$d0" ] && [ "$d" -gt "$d0" ] && break
        sleep 0.1
      done
      [ "$i" -lt 600 ] || e2e_fail "round $k: no deadline write-back within 60 s" ;;
  esac
  cur=$(rs_server)
  # The phase the guest is in (its marker's uptime).
  at=$(tr -d '\r' <"$console" | sed -n "s/^E2E-PHASE: $k \([a-z]* [0-9.]*\)$/\1/p" | tail -n 1)
  out=$(rs_stop) || e2e_fail "restart $k ($point): the stop had to SIGKILL the server: $out"
  fl=$(rs_inflight "$E2E_TMP/server.${cur%% *}.log" "${out##*from=}")
  echo "$k $point ${cur%% *} ${at#* } ${at% *} $out $fl" >>"$report"
  e2e_log "restart $k at $point (in the guest's ${at% *} phase at uptime ${at#* }): $out; in flight: $fl"
  rs_wait_server $((${cur%% *} + 1))
  rs_tell restart go
done
[ "$k" -gt "$RESTARTS" ] || kill "$qemu_pid" 2>/dev/null
[ "$k" -gt "$RESTARTS" ] || aborted="the guest stopped before restart $k"

rs_qemu_wait "$qemu_pid" restart || guest_ok=no
rs_holder_end || e2e_fail "the last stop had to SIGKILL the server"
[ "$store" = "$img" ] || e2e_term "$remote_pid" || e2e_fail "the remote nbdkit failed"
cat "$RS_SERVER_LOG" >&2
sed 's/^/e2e: server runs: /' "$RS_EVENTS" >&2

errors=$(rs_console_errors "$console") \
  || e2e_fail "the guest saw errors:"$'\n'"$(head -n 20 <<<"$errors")"
[ -z "$aborted" ] || e2e_fail "$aborted"
if [ "$store" != "$img" ]; then
  # Each write restart met a request in the server.
  awk '$2 == "write" {
         split($11, a, "="); split($12, u, "=")
         if (a[2] + u[2] == 0) { print "restart " $1 " (write) met no request in flight"; bad = 1 }
       } END { exit bad }' "$report" >&2 \
    || e2e_fail "a write restart did not catch a write in the server"
fi
[ "${guest_ok:-yes}" = yes ] || e2e_fail "the guest's workload failed"
grep -aq 'E2E-RESULT: restart done' "$console" || e2e_fail "the guest's workload did not finish"

# Every fsynced file, as the guest read it back from the disk at the end
# and as the image has it.
tr -d '\r' <"$console" | sed -n 's/^E2E-FSYNCED: //p' | sort >"$E2E_TMP/fsynced"
tr -d '\r' <"$console" | sed -n 's/^E2E-CHECK: //p' | sort >"$E2E_TMP/checked"
[ "$(wc -l <"$E2E_TMP/fsynced")" = $((2 * RESTARTS)) ] \
  || e2e_fail "the guest fsynced $(wc -l <"$E2E_TMP/fsynced") files, not $((2 * RESTARTS))"
diff "$E2E_TMP/fsynced" "$E2E_TMP/checked" >&2 \
  || e2e_fail "the fsynced files read back differently in the guest"
rs_check_image "$img" "$E2E_TMP/fsynced"

# The atimes the guest saw last (held by the servers, written back by
# the stops) are on the image.
tr -d '\r' <"$console" | sed -n 's/^E2E-ATIME: //p' >"$E2E_TMP/atimes"
rs_check_atimes "$img" "$E2E_TMP/atimes"
natime=$(wc -l <"$E2E_TMP/atimes")
[ "$natime" = $((NREAD * RESTARTS)) ] || e2e_fail "$natime atimes checked, not $((NREAD * RESTARTS))"

# The pause of each restart: the longest probe read that began in the
# phase the restart was made in (from its marker to the next).  The
# phases without a restart give the probe's own noise (TCG, the guest's
# work): the longest read in each.
tr -d '\r' <"$console" | sed -n 's/^E2E-PHASE: //p' >"$E2E_TMP/phases"
tr -d '\r' <"$console" | sed -n 's/^E2E-LAT: //p' >"$E2E_TMP/lats"
awk 'BEGIN { nw = nl = nr = 0 }
  FILENAME == ARGV[1] { wk[nw] = $1; wn[nw] = $2; ws[nw] = $3; nw++; next }
  FILENAME == ARGV[2] { lt[nl] = $1; ld[nl] = $2; nl++; next }
  { rk[nr] = $1; rp[nr] = $2; ru[nr] = $4
    rl[nr] = " in its " $5 " phase, " $6 " " $7 " " $8 " stop " $9 ", in flight " $11 " " $12 " " $13; nr++ }
  END {
    for (w = 0; w < nw; w++) {
      e = w + 1 < nw ? ws[w + 1] + 0 : 1e9
      m = 0
      for (i = 0; i < nl; i++)
        if (lt[i] + 0 >= ws[w] + 0 && lt[i] + 0 < e && ld[i] + 0 > m) m = ld[i] + 0
      wm[w] = m
    }
    for (r = 0; r < nr; r++)
      for (w = 0; w < nw; w++)
        if (wk[w] == rk[r] && ws[w] == ru[r]) { hit[w] = 1; rw[r] = w }
    for (r = 0; r < nr; r++) {
      m = wm[rw[r]]
      printf "restart %d (%s): the guest paused %s%s\n", rk[r], rp[r], m ? m / 100 " s" : "< 0.15 s", rl[r]
      print "PAUSE " m / 100
    }
    for (w = 0; w < nw; w++) if (!hit[w] && wn[w] != "end") print "BASE " wm[w] / 100
  }' "$E2E_TMP/phases" "$E2E_TMP/lats" "$report" >"$E2E_TMP/pauses"
grep -v '^PAUSE \|^BASE ' "$E2E_TMP/pauses" >&2
summary ()
{
  grep "^$1 " "$E2E_TMP/pauses" | sort -n -k2 | awk -v what="$2" '{ v[n++] = $2 }
    function s(x) { return x ? sprintf("%.2f s", x) : "< 0.15 s" }
    END { if (n) printf "%s over %d: median %s, worst %s\n", what, n,
          s(n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2), s(v[n - 1]) }' >&2
}
summary PAUSE "pause per restart (the longest probe read in its phase)"
summary BASE "the longest probe read in each phase without a restart"
echo "PASS: $RESTARTS restarts through the unit's stop (${RS_EXECSTOP[*]##*/}), no guest-visible error, $((2 * RESTARTS)) fsynced files and $natime held atimes on the image"
