# SPDX-License-Identifier: BSD-3-Clause
# crashlib.sh --- shared functions of the crash-consistency tests: run a
# guest workload against the server with record=PATH, then build crash
# states from the log (crashgen) and check each (check-state.sh).
#
# Source it after tests/e2e/lib.sh.  Environment, besides lib.sh's:
#   CRASHGEN      the crashgen binary (meson sets it; else built with cc)
#   EXT4LAZYCTL   the ext4lazyctl binary (for the server's counters)
#   CRASH_JOBS    checkers run at once (default: number of CPUs)
# Totals over every crash_check call: CRASH_T_STATES, CRASH_T_CLEAN,
# CRASH_T_ORACLE, CRASH_T_ERRORS.

CRASH_SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CRASH_FS_BLOCKS=16384                         # 64 MiB filesystem
CRASH_MSTART=$((CRASH_FS_BLOCKS * 4096 + 65536))
# crash_set_markers N: room for N marker blocks after the filesystem.
crash_set_markers ()
{
  CRASH_NMARKERS=$1
  CRASH_IMG_SIZE=$((CRASH_MSTART + CRASH_NMARKERS * 4096))
}
crash_set_markers 448
CRASH_T_STATES=0 CRASH_T_CLEAN=0 CRASH_T_ORACLE=0 CRASH_T_ERRORS=0
CRASH_T_MOUNTED=0

crash_init ()
{
  local c
  e2e_init
  for c in debugfs sha256sum awk mount umount; do
    command -v "$c" >/dev/null 2>&1 || e2e_skip "$c not found"
  done
  if [ -z "${CRASHGEN:-}" ]; then
    CRASHGEN=$E2E_CACHE_DIR/crashgen-$(cat "$CRASH_SRCDIR/crashgen.c" \
      "$CRASH_SRCDIR/../../include/record.h" | sha256sum | cut -c1-16)
    if [ ! -x "$CRASHGEN" ]; then
      "${CC:-cc}" -O2 -std=c17 -D_GNU_SOURCE -I"$CRASH_SRCDIR/../../include" \
        -o "$CRASHGEN.tmp.$$" "$CRASH_SRCDIR/crashgen.c" \
        || e2e_skip "cannot build crashgen"
      mv -f "$CRASHGEN.tmp.$$" "$CRASHGEN"
    fi
  fi
  [ -x "$CRASHGEN" ] || e2e_skip "crashgen $CRASHGEN not built"
  [ -x "${EXT4LAZYCTL:-}" ] || e2e_skip "EXT4LAZYCTL is not set to the built ext4lazyctl"
  # Crash states are built and checked in memory when /dev/shm is there.
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    CRASH_SCRATCH=$(mktemp -d /dev/shm/ext4lazy-crash.XXXXXX)
  else
    CRASH_SCRATCH=$(mktemp -d "$E2E_TMP/scratch.XXXXXX")
  fi
  trap 'rm -rf "$CRASH_SCRATCH"; e2e_cleanup' EXIT
  CRASH_JOBS=${CRASH_JOBS:-$(nproc 2>/dev/null || echo 2)}
}

# crash_run_guest NAME MKFSFEAT MOUNTOPTS CRASHMODE STEPS SEED
# The host makes the filesystem (so that the log starts at mount), the
# guest mounts it, runs the crash workload, unmounts (so that the log
# holds the first transaction after the mount and the unmount's last
# commit and checkpoint) and powers off; then the server is killed
# (SIGKILL), with whatever it still held.  Leaves $E2E_TMP/NAME.base
# (the initial image), NAME.rec (the log) and NAME.expect/ (the oracle),
# and sets CRASH_FIRST_ABSORBED and CRASH_FIRST_REAL: the server's
# transaction counters after the guest's first transaction (reads of
# /seed, crash_seed_files), before the workload's first change.
crash_run_guest ()
{
  local name=$1 feat=$2 opts=$3 mode=$4 steps=$5 seed=$6 base disk
  base=$E2E_TMP/$name.base
  disk=$E2E_TMP/$name.img
  e2e_image "$base" "$CRASH_IMG_SIZE"
  mkfs.ext4 -F -q -b 4096 ${feat:+-O "$feat"} \
    -E lazy_itable_init=0,lazy_journal_init=0,nodiscard \
    "$base" "$CRASH_FS_BLOCKS" || e2e_fail "$name: mkfs.ext4"
  crash_seed_files "$base" || e2e_fail "$name: debugfs could not add /seed"
  cp --sparse=always "$base" "$disk" || e2e_fail "$name: cp"
  local saved=${E2E_PLUGIN_ARGS:-} ctl=$E2E_TMP/$name.ctl
  local first=$E2E_TMP/$name.firsttx
  E2E_PLUGIN_ARGS="$saved record=$E2E_TMP/$name.rec control=$ctl"
  e2e_nbdkit_start "$name" default "$disk"
  E2E_PLUGIN_ARGS=$saved
  rm -f "$first"
  e2e_watch_lines "$E2E_TMP/$name.console" "$$" 'E2E-FIRSTTX:' \
    'E2E-RESULT: step crash ' "$ctl" "$first" crash_tx_counts
  e2e_boot "$name" workload=mount,crash,umount,halt mountopts="$opts" \
    mstart="$CRASH_MSTART" nmarkers="$CRASH_NMARKERS" steps="$steps" \
    seed="$seed" crashmode="$mode" || e2e_fail "$name: guest run failed"
  grep -aq 'E2E-FIRSTTX:' "$E2E_CONSOLE" \
    || e2e_fail "$name: the guest did not read /seed after the mount"
  wait "$E2E_WATCH_PID"
  e2e_forget_pid "$E2E_WATCH_PID"
  read -r _ CRASH_FIRST_ABSORBED CRASH_FIRST_REAL _ < <(grep '^start ' "$first")
  [ -n "${CRASH_FIRST_REAL:-}" ] \
    || e2e_fail "$name: no transaction counts at the first transaction"
  e2e_log "$name: first transaction after the mount: $CRASH_FIRST_ABSORBED absorbed, $CRASH_FIRST_REAL real"
  crash_stats "$ctl" || e2e_fail "$name: ext4lazyctl stats"
  crash_kill_server
  [ -s "$E2E_TMP/$name.rec" ] || e2e_fail "$name: the server wrote no record"
  crash_expect "$name" "$E2E_CONSOLE"
  CRASH_DECLARED=$CRASH_DECL
  e2e_log "$name: $CRASH_DECLARED durability declarations, log $(stat -c %s "$E2E_TMP/$name.rec") bytes"
}

# crash_seed_files IMAGE: /seed/s0../s3 in the unmounted IMAGE, for the
# guest's first reads after the mount (e2e-guest's crash_first_tx): under
# strictatime their atimes and the superblock's s_last_mounted make a
# first transaction of time-only changes, which the journal-aware
# policies absorb.
crash_seed_files ()
{
  local src=$E2E_TMP/seed.data i cmds
  head -c 6000 /dev/zero | tr '\0' s >"$src" || return 1
  cmds="mkdir seed"
  for i in 0 1 2 3; do cmds+=$'\n'"write $src seed/s$i"; done
  debugfs -w -f - "$1" <<<"$cmds" >/dev/null 2>&1 || return 1
  [ "$(debugfs -R 'ls -p /seed' "$1" 2>/dev/null | grep -c '/s[0-3]/')" = 4 ]
}

# crash_counters SOCKET NAME...: the named counters of the server's
# (first) filesystem, from `ext4lazyctl stats --json`, on one line.
crash_counters ()
{
  local sock=$1
  shift
  "$EXT4LAZYCTL" -s "$sock" stats --json | /usr/bin/python3 -c '
import json, sys
i = json.load(sys.stdin)["instances"][0]
def get(n):
    v = i
    for k in n.split("."):
        v = v[k]
    return v
print(*(get(n) for n in sys.argv[1:]))' "$@"
}

# crash_tx_counts SOCKET: "ABSORBED REAL", the server's journal
# transactions so far (the watcher's STAT in crash_run_guest).
crash_tx_counts ()
{
  crash_counters "$1" tx_absorbed tx_real
}

# crash_expect NAME CONSOLE: the oracle of a guest run from its console:
# $E2E_TMP/NAME.expect/ (expect.awk), CRASH_LAST (the highest marker
# sequence printed: every declaration was durable before it) and
# CRASH_DECL (the durability declarations).
crash_expect ()
{
  mkdir -p "$E2E_TMP/$1.expect"
  awk -v out="$E2E_TMP/$1.expect" -f "$CRASH_SRCDIR/expect.awk" "$2" \
    || e2e_fail "$1: oracle"
  CRASH_LAST=$(tr -d '\r' <"$2" | awk '/^E2E-(DURABLE|DELETED|TOUCH): / \
    && $2 + 0 > m { m = $2 + 0 } END { print m + 0 }')
  CRASH_DECL=$(grep -ac '^E2E-DURABLE:\|^E2E-DELETED:' "$2")
}

# SIGKILL the server started last and reap it: what a crash of the
# server leaves, with no write-back at exit.
crash_kill_server ()
{
  kill -9 "$E2E_NBDKIT_PID" 2>/dev/null
  wait "$E2E_NBDKIT_PID" 2>/dev/null
  e2e_forget_pid "$E2E_NBDKIT_PID"
  E2E_NBDKIT_PID=
}

# crash_stats SOCKET: what the server did with the workload, from its
# control socket: CRASH_HELD (block writes held, in place and journal),
# CRASH_ABSORBED (journal transactions absorbed), CRASH_HELD_NOW (blocks
# held at this instant), CRASH_DEADLINE_WB (blocks written back at their
# deadline), CRASH_DEADLINE_MET (absorbed journal holds met in place) and
# CRASH_DEADLINE_COPIED (blocks written in place from logged copies).
crash_stats ()
{
  local counts held jheld
  counts=$(crash_counters "$1" held journal_held tx_absorbed held_blocks \
    writeback.deadline deadline_met deadline_copied) || return 1
  read -r held jheld CRASH_ABSORBED CRASH_HELD_NOW CRASH_DEADLINE_WB \
    CRASH_DEADLINE_MET CRASH_DEADLINE_COPIED <<<"$counts"
  CRASH_HELD=$((held + jheld))
  e2e_log "server: $CRASH_HELD block writes held, $CRASH_ABSORBED journal transactions absorbed, $CRASH_HELD_NOW blocks held now, $CRASH_DEADLINE_WB written back at their deadline, $CRASH_DEADLINE_MET absorbed met in place, $CRASH_DEADLINE_COPIED written in place from logged copies"
}

# crash_check NAME JOURNAL(0|1) FSCK_KINDS MOUNT_EVERY CRASHGEN-ARGS...
# Build and check the states; adds to the totals.  Returns crashgen's
# status (0: every state passed).  The summary is in CRASH_SUMMARY.
crash_check ()
{
  local name=$1 journal=$2 kinds=$3 every=$4 out rc n c o e
  shift 4
  out=$E2E_TMP/$name.crashgen
  rm -rf "$CRASH_SCRATCH/$name" "$E2E_TMP/$name.logs"
  mkdir -p "$CRASH_SCRATCH/$name" "$E2E_TMP/$name.logs"
  CRASH_EXPECT=$E2E_TMP/$name.expect CRASH_WORK=$CRASH_SCRATCH/$name \
  CRASH_LOGDIR=$E2E_TMP/$name.logs CRASH_JOURNAL=$journal \
  CRASH_FSCK_KINDS=$kinds CRASH_MOUNT_EVERY=$every \
    "$CRASHGEN" --image "$E2E_TMP/$name.base" --record "$E2E_TMP/$name.rec" \
      --mstart "$CRASH_MSTART" --scratch "$CRASH_SCRATCH/$name" \
      --jobs "$CRASH_JOBS" --exec "$CRASH_SRCDIR/check-state.sh" "$@" \
      >"$out" 2>"$out.err" &
  wait $!
  rc=$?
  sed "s/^/[$name] /" "$out" >&2
  head -n 20 "$out.err" | sed "s/^/[$name] /" >&2
  CRASH_SUMMARY=$(grep '^crashgen: checked' "$out")
  [ -n "$CRASH_SUMMARY" ] || e2e_fail "$name: crashgen failed (status $rc)"
  read -r n c o e < <(sed -E 's/.*checked ([0-9]+) states: fsck clean ([0-9]+)\/[0-9]+, oracle pass ([0-9]+)\/[0-9]+, checker errors ([0-9]+).*/\1 \2 \3 \4/' <<<"$CRASH_SUMMARY")
  CRASH_T_STATES=$((CRASH_T_STATES + n))
  CRASH_T_CLEAN=$((CRASH_T_CLEAN + c))
  CRASH_T_ORACLE=$((CRASH_T_ORACLE + o))
  CRASH_T_ERRORS=$((CRASH_T_ERRORS + e))
  if [ -f "$CRASH_SCRATCH/$name/mounted" ]; then
    CRASH_T_MOUNTED=$((CRASH_T_MOUNTED + $(wc -l <"$CRASH_SCRATCH/$name/mounted")))
  fi
  # The first failure reports, for the log.
  for f in $(ls "$E2E_TMP/$name.logs" 2>/dev/null | head -n 3); do
    sed "s/^/[$name $f] /" "$E2E_TMP/$name.logs/$f" | head -n 15 >&2
  done
  return "$rc"
}

crash_rate ()
{
  awk -v a="$1" -v b="$2" 'BEGIN { if (b) printf "%.2f%%", 100 * a / b; else print "n/a" }'
}
