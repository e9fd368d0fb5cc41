#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-crash-kill.sh --- SIGKILL of the server at a random instant during a
# live workload, under each policy.  The guest runs the crash workload
# (test-crash.sh) on a journaled ext4; once it has declared a seeded random
# number of changes durable, and after a further random pause, the server
# is killed with SIGKILL while the guest is still writing.  What the
# backing file then holds is the crash state (the host's page cache
# survives a process kill, so every write the server completed is in it):
# the journal replay (e2fsck's and, on a copy, the kernel's) must leave a
# clean filesystem, and every change the guest declared durable before the
# kill must be there, timestamps exempt as the policy says.  A last run
# does the same on ext4 without a journal (policy=lazy, sync(): the oracle
# only, as such a filesystem is consistent only where a sync ended).
#
#
# With --rbd the volume is an RBD image on a throwaway single-node Ceph
# cluster (tests/integration/cephlib.py) served with rbd=: the image is
# imported from the fresh filesystem, and after the kill what RADOS
# holds (rbd export) is the crash state.  librbd's cache dies with the
# server, so only what a FLUSH made durable is sure to be there, which is
# all the checks rely on.  Journaled runs only.
#
#   CRASH_SEED               seed of the kill points [7]
#   CRASH_KILL_POLICIES      policies with a journal ["strict atime lazy";
#                            with --rbd "atime lazy"]
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/crashlib.sh"

rbd=0
case ${1:-} in
  --rbd) rbd=1 ;;
  '') ;;
  *) echo "usage: $0 [--rbd]" >&2; exit 2 ;;
esac
crash_init
RANDOM=${CRASH_SEED:-7}
steps=150
runs=()
if [ "$rbd" = 1 ]; then
  cephlib=$CRASH_SRCDIR/../integration/cephlib.py
  /usr/bin/python3 "$cephlib" check || e2e_skip "Ceph is not installed"
  command -v rbd >/dev/null 2>&1 || e2e_skip "rbd not found (ceph-common)"
  nbdkit "$E2E_PLUGIN_SPEC" --dump-plugin 2>/dev/null | grep -qx ext4lazy_rbd=yes \
    || e2e_skip "$E2E_PLUGIN_SPEC has no rbd= backend (built without librbd?)"
  cluster=$E2E_TMP/ceph
  trap '/usr/bin/python3 "$cephlib" stop "$cluster"; rm -rf "$CRASH_SCRATCH"; e2e_cleanup' EXIT
  eval "$(env -u CEPH_CONF /usr/bin/python3 "$cephlib" start "$cluster")"
  [ -n "${CEPH_CONF:-}" ] || e2e_fail "the Ceph cluster did not start"
  for p in ${CRASH_KILL_POLICIES:-atime lazy}; do runs+=("$p|1|fsync"); done
else
  for p in ${CRASH_KILL_POLICIES:-strict atime lazy}; do runs+=("$p|1|fsync"); done
  runs+=("lazy|0|sync")
fi
fail=0 n=0

for r in "${runs[@]}"; do
  IFS='|' read -r policy journal mode <<<"$r"
  n=$((n + 1))
  name=kill$n-$policy$([ "$journal" = 0 ] && echo -nojournal)$([ "$rbd" = 1 ] && echo -rbd)
  disk=$E2E_TMP/$name.img
  e2e_image "$disk" "$CRASH_IMG_SIZE"
  mkfs.ext4 -F -q -b 4096 $([ "$journal" = 0 ] && echo -O ^has_journal) \
    -E lazy_itable_init=0,lazy_journal_init=0,nodiscard \
    "$disk" "$CRASH_FS_BLOCKS" || e2e_fail "$name: mkfs.ext4"
  ctl=$E2E_TMP/$name.ctl
  saved=${E2E_PLUGIN_ARGS:-}
  E2E_PLUGIN_ARGS="policy=$policy control=$ctl $saved"
  if [ "$rbd" = 1 ]; then
    e2e_rbd_import "$name" "$CEPH_CONF" "$disk" "rbd/$name"
    E2E_PLUGIN_ARGS="$E2E_PLUGIN_ARGS ceph-conf=$CEPH_CONF"
    e2e_nbdkit_start "$name" default "rbd=rbd/$name"
  else
    e2e_nbdkit_start "$name" default "$disk"
  fi
  E2E_PLUGIN_ARGS=$saved
  console=$E2E_TMP/$name.console

  # Kill after K declarations (of about 1.4 per step) and a pause of up
  # to a second.
  want=$((10 + RANDOM % (steps * 2 / 3)))
  pause=0.$((RANDOM % 10))
  E2E_BOOT_TIMEOUT=600 e2e_boot "$name" workload=mount,crash,halt \
    mountopts=strictatime$([ "$journal" = 1 ] && echo ,commit=1) mstart="$CRASH_MSTART" \
    nmarkers="$CRASH_NMARKERS" steps="$steps" seed=$((RANDOM % 1000)) \
    crashmode="$mode" >/dev/null 2>&1 &
  boot=$!
  for ((t = 0; t < 3000; t++)); do
    have=$(grep -ac '^E2E-DURABLE:' "$console" 2>/dev/null)
    [ "${have:-0}" -ge "$want" ] && break
    kill -0 "$boot" 2>/dev/null || break
    sleep 0.2
  done
  sleep "$pause"
  crash_stats "$ctl" || e2e_fail "$name: ext4lazyctl stats"
  crash_kill_server
  # The guest sees I/O errors, gives up and powers off; do not wait on
  # it longer than needed.
  for ((t = 0; t < 600; t++)); do
    kill -0 "$boot" 2>/dev/null || break
    grep -aq 'E2E-RESULT: done' "$console" && sleep 2 && break
    sleep 0.2
  done
  pkill -9 -f "socket=$E2E_TMP/$name.sock" 2>/dev/null
  wait "$boot" 2>/dev/null
  if grep -aq '^E2E-RESULT: crash steps=' "$console"; then
    e2e_fail "$name: the workload ended before the kill; nothing was tested"
  fi

  # Every declaration printed was made durable before it was printed;
  # L, the highest sequence number printed, covers them all, and every
  # path touched up to it is not checked.
  mkdir -p "$E2E_TMP/$name.logs" "$CRASH_SCRATCH/$name"
  crash_expect "$name" "$console"
  last=$CRASH_LAST decl=$CRASH_DECL
  if [ "$rbd" = 1 ]; then
    e2e_rbd_take "$name" "$CEPH_CONF" "rbd/$name" "$disk"
  fi
  cp --sparse=always "$disk" "$CRASH_SCRATCH/$name/state.img"
  times=0
  case $policy in strict|atime) times=1 ;; esac
  CRASH_IMG=$CRASH_SCRATCH/$name/state.img CRASH_ID=0 CRASH_KIND=kill \
  CRASH_MARKER=$last CRASH_SLOT=0 CRASH_EXPECT=$E2E_TMP/$name.expect \
  CRASH_WORK=$CRASH_SCRATCH/$name CRASH_LOGDIR=$E2E_TMP/$name.logs \
  CRASH_JOURNAL=$journal CRASH_TIMES=$times CRASH_MOUNT_EVERY=1 \
  CRASH_FSCK_KINDS=$([ "$journal" = 1 ] && echo all || echo none) \
    bash "$CRASH_SRCDIR/check-state.sh"
  st=$?
  rm -rf "$CRASH_SCRATCH/$name"
  line="$name: killed after $decl declarations (marker $last), $CRASH_HELD_NOW blocks held at the kill, $CRASH_ABSORBED transactions absorbed"
  if [ "$st" = 0 ]; then
    echo "CRASH: $line: clean, durable"
  else
    echo "CRASH: $line: FAILED (status $st)"
    cat "$E2E_TMP/$name.logs"/* 2>/dev/null | head -n 30 >&2
    fail=1
  fi
  rm -f "$disk"
done

[ "$fail" = 0 ] || e2e_fail "a killed server left a state that failed"
echo "PASS: $n servers killed during the workload, every state clean and durable"
