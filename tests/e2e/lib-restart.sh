# SPDX-License-Identifier: BSD-3-Clause
# lib-restart.sh --- what the restart and migration tests share, on top of
# lib.sh: a server behind a listening socket held across its restarts
# (listen-hold.py, as ext4lazy@.socket does), stopped the way the shipped
# unit stops it, and qemu guests in the background whose disk is qemu's
# NBD client with reconnect-delay.
#
# Source it after lib.sh and call rs_init after e2e_init.  Environment:
#   EXT4LAZYCTL        the built ext4lazyctl (meson sets it)
#   E2E_STOP_TIMEOUT   seconds the stop waits after the kill signal before
#                      SIGKILL (the unit's TimeoutStopSec=, at most 20 by
#                      default, to keep a failing run short)
#   E2E_KILLSIG        overrides the unit's KillSignal= (e.g. KILL after
#                      an ExecStop= that only flushes: a stand-in for a
#                      drain when working on the harness itself)

RS_UNIT=$E2E_SRCDIR/../../deploy/ext4lazy-activated@.service
RS_EXECSTOP=()        # the unit's ExecStop= command, for this test's paths
RS_KILLSIG=TERM
RS_STOP_TIMEOUT=20
RS_RUN=               # stands for /run/ext4lazy
RS_SOCK= RS_CTL= RS_EVENTS= RS_HOLDER_PID= RS_SERVER_LOG=
RS_QEMU_PID=

rs_init ()
{
  local line timeout
  [ -x "${EXT4LAZYCTL:-}" ] || e2e_skip "set EXT4LAZYCTL to the built ext4lazyctl"
  [ -n "${EXT4LAZY_PLUGIN:-}" ] && [ -z "${E2E_PLUGIN:-}" ] \
    || e2e_skip "the plugin under test only (EXT4LAZY_PLUGIN, not E2E_PLUGIN)"
  /usr/bin/python3 -c 'import socket, json' 2>/dev/null || e2e_skip "python3 not found"
  [ -r "$RS_UNIT" ] || e2e_fail "no $RS_UNIT"
  RS_RUN=$E2E_TMP/run
  mkdir -p "$RS_RUN"
  # The stop as the shipped socket-activated unit does it: ExecStop=,
  # then KillSignal= to what still runs, SIGKILL after TimeoutStopSec=.
  line=$(sed -n 's/^ExecStop=-\{0,1\}//p' "$RS_UNIT" | tail -n 1)
  [ -n "$line" ] || e2e_fail "$RS_UNIT has no ExecStop="
  line=${line//\/usr\/bin\/ext4lazyctl/$EXT4LAZYCTL}
  line=${line//\/run\/ext4lazy\//$RS_RUN\/}
  line=${line//%i/vol}
  read -r -a RS_EXECSTOP <<<"$line"
  RS_KILLSIG=$(sed -n 's/^KillSignal=\(SIG\)\{0,1\}//p' "$RS_UNIT" | tail -n 1)
  RS_KILLSIG=${E2E_KILLSIG:-${RS_KILLSIG:-TERM}}
  timeout=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$RS_UNIT" | tail -n 1)
  RS_STOP_TIMEOUT=${E2E_STOP_TIMEOUT:-$(( ${timeout:-90} < 20 ? ${timeout:-90} : 20 ))}
  e2e_log "stop as the unit does: ExecStop=${RS_EXECSTOP[*]}; SIG$RS_KILLSIG; SIGKILL after ${RS_STOP_TIMEOUT}s"
}

# rs_serve IMAGE PARAM...: serve IMAGE with the plugin under test behind
# the log filter (one log per run: $E2E_TMP/server.N.log), its control
# socket at $RS_RUN/vol.ctl, on $RS_RUN/vol.sock held by listen-hold.py,
# which starts the next server whenever one exits.  Waits for the first.
rs_serve ()
{
  local img=$1
  shift
  RS_SOCK=$RS_RUN/vol.sock RS_CTL=$RS_RUN/vol.ctl
  RS_EVENTS=$E2E_TMP/server.events RS_SERVER_LOG=$E2E_TMP/server.err
  : >"$RS_EVENTS"
  /usr/bin/python3 "$E2E_SRCDIR/listen-hold.py" "$RS_SOCK" "$RS_EVENTS" -- \
    nbdkit -f --exit-with-parent --filter=log "$EXT4LAZY_PLUGIN" "$img" \
      control="$RS_CTL" "$@" logfile="$E2E_TMP/server.{n}.log" \
    </dev/null 2>>"$RS_SERVER_LOG" &
  RS_HOLDER_PID=$!
  E2E_PIDS+=("$RS_HOLDER_PID")
  rs_wait_server 1
}

# The number and pid of the server running now ("N PID"), if any.
rs_server ()
{
  awk '$1 == "start" { n = $2; pid = $3 } $1 == "exit" && $2 == n { n = "" }
       END { if (n != "") print n, pid }' "$RS_EVENTS"
}

# rs_wait_server N: wait (30 s) for server run N to answer on its
# control socket.
rs_wait_server ()
{
  local i cur
  for ((i = 0; i < 300; i++)); do
    cur=$(rs_server)
    if [ "${cur%% *}" = "$1" ] && "$EXT4LAZYCTL" -s "$RS_CTL" stats >/dev/null 2>&1; then
      return 0
    fi
    kill -0 "$RS_HOLDER_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 30 "$RS_SERVER_LOG" >&2
  e2e_fail "server run $1 did not start"
}

# The log of the server running now.
rs_server_log ()
{
  local cur
  cur=$(rs_server)
  echo "$E2E_TMP/server.${cur%% *}.log"
}

# rs_stop: stop the server running now as systemd stops the unit:
# ExecStop=, then the kill signal if it still runs, then SIGKILL after
# RS_STOP_TIMEOUT seconds.  Prints "execstop=RC signalled=yes|no
# killed=yes|no seconds=S from=T0" (S from the start of ExecStop= at T0,
# seconds since the epoch, to the exit) and returns 1 if it had to be
# killed.
rs_stop ()
{
  local cur pid t0 t1 rc sig=no killed=no i
  cur=$(rs_server)
  [ -n "$cur" ] || e2e_fail "no server runs"
  pid=${cur#* }
  t0=$(date +%s.%N)
  "${RS_EXECSTOP[@]}" >>"$E2E_TMP/execstop.log" 2>&1
  rc=$?
  if kill -0 "$pid" 2>/dev/null; then
    sig=yes
    kill -s "$RS_KILLSIG" "$pid" 2>/dev/null
    for ((i = 0; i < RS_STOP_TIMEOUT * 10; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      killed=yes
      kill -9 "$pid"
    fi
  fi
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  t1=$(date +%s.%N)
  echo "execstop=$rc signalled=$sig killed=$killed" \
    "seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') from=$t0"
  [ $killed = no ]
}

# rs_inflight LOG T0: from a server's log filter LOG, the requests in
# flight when its stop began at T0 (seconds since the epoch): "answered=N
# unanswered=M waited=W", those that got their reply after T0, those that
# never got one (for the client to send again), and those that came
# after T0 and got none either (held back while the server stopped).
rs_inflight ()
{
  awk -v t0="$(date -d "@$2" '+%F %T.%6N')" '
    /(Read|Write|Flush|Trim|Zero|Cache) id=[0-9]+ / {
      for (i = 3; i <= NF; i++) if ($i ~ /^id=/) break
      name = $(i - 1); sub(/^\.\.\./, "", name)
      k = $3 " " name " " $i
      if ($(i - 1) ~ /^\.\.\./) { done[k] = $1 " " $2 }
      else if ($1 " " $2 < t0) start[k] = 1
      else late[k] = 1
    }
    END {
      for (k in start) {
        if (!(k in done)) u++
        else if (done[k] >= t0) a++
      }
      for (k in late) if (!(k in done)) w++
      printf "answered=%d unanswered=%d waited=%d\n", a, u, w
    }' "$1"
}

# rs_holder_end: the last stop: tell the holder not to start another
# server, stop the running one as the unit does, wait for the holder.
rs_holder_end ()
{
  local out rc=0
  kill -TERM "$RS_HOLDER_PID"
  out=$(rs_stop) || rc=1
  e2e_log "last stop: $out"
  wait "$RS_HOLDER_PID"
  e2e_forget_pid "$RS_HOLDER_PID"
  return $rc
}

# rs_extra_initrd NAME SCRIPT [VAR=VALUE...]: an initrd that also holds
# /e2e-script: the VAR=VALUE lines, then SCRIPT (run by init.sh's
# "script" step).  Sets RS_INITRD.
rs_extra_initrd ()
{
  local name=$1 script=$2 root=$E2E_TMP/$1.extra kv
  shift 2
  rm -rf "$root"
  mkdir -p "$root"
  for kv in "$@"; do echo "$kv"; done >"$root/e2e-script"
  cat "$script" >>"$root/e2e-script"
  (cd "$root" && find . | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null) \
    | gzip -1 >"$E2E_TMP/$name.extra.cpio.gz" || e2e_fail "$name: cpio"
  RS_INITRD=$E2E_TMP/$name.initrd
  cat "$E2E_INITRD" "$E2E_TMP/$name.extra.cpio.gz" >"$RS_INITRD"
}

# rs_qemu NAME INITRD SOCK [QEMU-ARG...]: start a guest in the background
# (console in $E2E_TMP/NAME.console, QMP on $E2E_TMP/NAME.qmp, a second
# serial port, the guest's /dev/ttyS1, on $E2E_TMP/NAME.tty: rs_tell) running
# init.sh's "script" step, whose disk is qemu's NBD client on SOCK with
# reconnect-delay=30.  Sets RS_QEMU_PID.
rs_qemu ()
{
  local name=$1 initrd=$2 sock=$3
  shift 3
  timeout -k 10 "${E2E_BOOT_TIMEOUT:-900}" \
    qemu-system-x86_64 -accel tcg -cpu "${E2E_QEMU_CPU:-max}" -m 512 -smp 1 \
      -nographic -no-reboot -nodefaults -serial stdio -monitor none \
      -qmp "unix:$E2E_TMP/$name.qmp,server=on,wait=off" \
      -chardev "socket,id=tty1,path=$E2E_TMP/$name.tty,server=on,wait=off" \
      -device isa-serial,chardev=tty1 \
      -kernel "$E2E_KERNEL" -initrd "$initrd" \
      -append "console=ttyS0 panic=-1 quiet e2e.workload=script" \
      -blockdev "driver=nbd,node-name=disk0,server.type=unix,server.path=$sock,reconnect-delay=30" \
      -device virtio-blk-pci,drive=disk0,write-cache=on \
      "$@" </dev/null >"$E2E_TMP/$name.console" 2>&1 &
  RS_QEMU_PID=$!
  E2E_PIDS+=("$RS_QEMU_PID")
}

# rs_tell NAME LINE: send LINE to the guest NAME's /dev/ttyS1.
rs_tell ()
{
  /usr/bin/python3 - "$E2E_TMP/$1.tty" "$2" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
time.sleep(0.2)
s.close()
PY
}

# rs_qemu_wait PID NAME: wait for the guest to power off; 0 if its
# console says "done ok".
rs_qemu_wait ()
{
  local rc
  wait "$1"
  rc=$?
  e2e_forget_pid "$1"
  E2E_CONSOLE=$E2E_TMP/$2.console
  grep -ao 'E2E-RESULT:.*' "$E2E_CONSOLE" | tr -d '\r' | sed "s/^/[$2] /" >&2
  [ "$rc" = 124 ] && e2e_log "$2: guest timed out"
  if ! grep -aq 'E2E-RESULT: done ok' "$E2E_CONSOLE"; then
    e2e_log "$2: console tail (qemu status $rc):"
    tail -n 40 "$E2E_CONSOLE" | tr -d '\r' >&2
    return 1
  fi
}

# rs_wait_line FILE PID REGEX SECONDS: wait for a line matching REGEX in
# FILE (from its start), while PID lives; 1 (and a message) if PID exits
# first or SECONDS pass.
rs_wait_line ()
{
  timeout "$4" bash -c 'tail -n +1 -F --pid="$1" "$2" 2>/dev/null | grep -a -m 1 -q -e "$3"' \
    _ "$2" "$1" "$3" && return 0
  e2e_log "no line '$3' in $(basename "$1") within $4 s"
  return 1
}

# rs_wait_new_line FILE REGEX SECONDS: wait for a line matching REGEX
# written to FILE from now on; 1 if none comes within SECONDS.
rs_wait_new_line ()
{
  timeout "$3" bash -c 'tail -n 0 -F "$1" 2>/dev/null | grep -a -m 1 -q -e "$2"' _ "$1" "$2"
}

# rs_console_errors CONSOLE: print the guest kernel's error lines (I/O
# errors, EXT4-fs errors, JBD2) from a console log; 1 if there are any.
rs_console_errors ()
{
  ! tr -d '\r' <"$1" | grep -a -E \
    'I/O error|EXT4-fs error|EXT4-fs warning|JBD2|jbd2_journal_abort|[Aa]borted journal|Remounting filesystem read-only|E2E-PROBE-FAIL'
}

# rs_check_image IMAGE FSYNCED: e2fsck -fn IMAGE is clean, and every
# file of FSYNCED (lines "PATH SHA256", PATH under /w) is on it with
# that content.
rs_check_image ()
{
  local path sum
  e2fsck -fn "$1" >"$E2E_TMP/fsck.log" 2>&1 \
    || { cat "$E2E_TMP/fsck.log" >&2; e2e_fail "e2fsck -fn on the host"; }
  rm -rf "$E2E_TMP/out"
  mkdir -p "$E2E_TMP/out"
  debugfs -R "rdump /w $E2E_TMP/out" "$1" >/dev/null 2>&1 || e2e_fail "debugfs rdump"
  while read -r path sum; do
    [ "$(sha256sum <"$E2E_TMP/out/$path" 2>/dev/null | cut -c1-64)" = "$sum" ] \
      || e2e_fail "fsynced $path missing or different on the image"
  done <"$2"
}

# rs_check_atimes IMAGE ATIMES: each line "PATH SECONDS" of ATIMES is an
# atime the guest saw after reading PATH (so past 2021) and the atime
# of /PATH on IMAGE.
rs_check_atimes ()
{
  local path t got
  while read -r path t; do
    [ "$t" -gt "$(date -d 2021-01-01 +%s)" ] || e2e_fail "/$path: never read (atime $t)"
    got=$(rs_atime "$1" "/$path")
    [ "$got" = "$t" ] || e2e_fail "/$path: atime $got on the image, the guest saw $t"
  done <"$2"
}

# rs_atime IMAGE PATH: the atime (seconds) debugfs reads for PATH.
rs_atime ()
{
  debugfs -R "stat $2" "$1" 2>/dev/null \
    | sed -n 's/^ *atime: *0x\([0-9a-f]*\):.*/\1/p' | head -n 1 \
    | { read -r h && echo $((16#$h)); }
}
