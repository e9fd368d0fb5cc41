#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# check-state.sh --- check one crash state (run by crashgen --exec).
#
# From crashgen: CRASH_IMG (a scratch image this script may change),
# CRASH_ID, CRASH_KIND, CRASH_MARKER (the last durability marker before the
# crash point, -1 if none), CRASH_SLOT.  From the driver:
#   CRASH_EXPECT   directory of expect.N files (durable state at marker N:
#                  "present PATH SIZE SHA256 MTIME CTIME" / "absent PATH"
#                  lines; see expect.awk)
#   CRASH_WORK     scratch directory;  CRASH_LOGDIR: failure reports
#   CRASH_JOURNAL  1 if the filesystem has a journal
#   CRASH_FSCK_KINDS  state kinds that must pass e2fsck (default: all)
#   CRASH_TIMES    1: also compare the mtime and ctime of every declaration
#                  that promised them (policy strict and atime; under
#                  policy=lazy timestamps are exempt from the promise)
#   CRASH_MOUNT_EVERY  every Nth state is also replayed by the kernel (a
#                  read-only mount of a loop device) and checked the same
#                  way: the e2fsck replay and the kernel replay must agree
#                  (0: never)
#
# Replay.  A journaled image is replayed as e2fsck does it at boot:
# "e2fsck -E journal_only -y" (recover the journal, nothing else), then
# "e2fsck -fn" must exit 0.  The kernel replays the same journal when it
# mounts; the sampled mount replay checks that both give a state that
# passes.  The durability oracle reads the replayed image with debugfs:
# every path declared durable (and not changed since) must exist with its
# size and SHA-256, every path whose deletion was made durable must be
# absent.  With CRASH_TIMES=1 the mtime and ctime of files whose times
# were made durable (fsync of the file, or sync) are compared too; atime
# never is (the workload's reads move it after every declaration).
#
# Exit status: 0 pass; bit 0: e2fsck not clean; bit 1: oracle failed;
# 8: the check itself could not run.
set -u

img=$CRASH_IMG
id=$CRASH_ID
work=$CRASH_WORK/slot.$CRASH_SLOT
log=$CRASH_LOGDIR/state-$id-$CRASH_KIND.txt
mkdir -p "$work" || exit 8

note () { echo "$*" >>"$log"; }

# fsck IMAGE LABEL: replay (journaled), then e2fsck -fn; 0 when clean.
fsck_image ()
{
  local out=$work/fsck.out rc
  if [ "${CRASH_JOURNAL:-1}" = 1 ]; then
    e2fsck -E journal_only -y "$1" >"$out" 2>&1
    rc=$?
    if [ "$rc" -ge 4 ]; then
      note "$2: journal replay: e2fsck exit $rc"
      sed 's/^/  /' "$out" | head -n 20 >>"$log"
      return 1
    fi
  fi
  case " ${CRASH_FSCK_KINDS:-all} " in
    *" all "*|*" ${CRASH_KIND%-notrim} "*) ;;
    *) return 0 ;;
  esac
  e2fsck -fn "$1" >"$out" 2>&1
  rc=$?
  [ "$rc" = 0 ] && return 0
  note "$2: e2fsck -fn exit $rc"
  sed 's/^/  /' "$out" | head -n 30 >>"$log"
  return 1
}

# oracle IMAGE LABEL: 0 when every durable declaration holds: each path
# present with its size and SHA-256 (and, with CRASH_TIMES=1, the mtime and
# ctime it was declared with, where the declaration promised them), each
# deleted path absent.
oracle_image ()
{
  local exp=$CRASH_EXPECT/expect.$CRASH_MARKER dump=$work/dump
  local times=${CRASH_TIMES:-0} p mh mx ch cx
  [ -s "$exp" ] || return 0
  rm -rf "$dump" && mkdir "$dump" || return 8
  awk -v d="$dump" -v times="$times" '
    { print "dump " $2 " " d "/" NR }
    times == 1 && $1 == "present" && $5 != "-" { print "stat " $2 }' \
    "$exp" >"$work/cmds"
  # -c: bitmaps are not read (not needed to read files; without a journal
  # a crash can leave a bitmap and its checksum apart, which e2fsck and
  # the kernel repair).
  debugfs -c -f "$work/cmds" "$1" >"$work/stat.out" 2>"$work/debugfs.err"
  grep -v -e '^debugfs [0-9]' -e 'File not found by ext2_lookup' \
    -e 'catastrophic mode' "$work/debugfs.err" | head -n 3 | sed "s/^/$2: debugfs: /" >>"$log"
  # "N SIZE SHA256" for every file dumped (one stat and one sha256sum
  # for all of them: this runs for every state).
  (cd "$dump" && set -- * && [ -f "$1" ] || exit 0
   paste -d ' ' <(stat -c '%n %s' -- "$@") <(sha256sum -- "$@" | cut -c1-64)) \
    >"$work/found"
  # The times debugfs read, as "PATH MTIME CTIME" (SEC.NSEC; the extra
  # word holds the nanoseconds above two epoch bits).
  : >"$work/times"
  if [ "$times" = 1 ]; then
    awk '/^debugfs: stat / { p = $3; next }
         p != "" && $1 == "mtime:" { split($2, m, ":") }
         p != "" && $1 == "ctime:" { split($2, c, ":") }
         p != "" && /^crtime:|^Size of extra/ && m[1] != "" {
           print p, substr(m[1], 3), m[2], substr(c[1], 3), c[2]; p = ""
           delete m; delete c }' "$work/stat.out" |
      while read -r p mh mx ch cx; do
        printf '%s %d.%09d %d.%09d\n' "$p" \
          $(( 16#$mh + ((16#$mx & 3) << 32) )) $(( 16#$mx >> 2 )) \
          $(( 16#$ch + ((16#$cx & 3) << 32) )) $(( 16#$cx >> 2 ))
      done >"$work/times"
  fi
  awk -v label="$2" -v times="$times" '
    FILENAME == ARGV[1] { size[$1] = $2; sha[$1] = $3; next }
    FILENAME == ARGV[2] { mt[$1] = $2; ct[$1] = $3; next }
    {
      n = FNR
      if ($1 == "present") {
        if (!(n in size)) { print label ": missing " $2; bad++ }
        else if (size[n] != $3) {
          print label ": " $2 " size " size[n] ", durable size " $3; bad++
        } else if (sha[n] != $4) {
          print label ": " $2 " content differs from the durable one"; bad++
        } else if (times == 1 && $5 != "-") {
          if (!($2 in mt)) { print label ": " $2 ": no times read"; bad++ }
          else if (mt[$2] != $5 || ct[$2] != $6) {
            print label ": " $2 " mtime " mt[$2] " ctime " ct[$2] \
              ", durable mtime " $5 " ctime " $6; bad++
          }
        }
      } else if ($1 == "absent" && (n in size)) {
        print label ": " $2 " deleted durably, but present"; bad++
      }
    }
    END { exit bad ? 1 : 0 }' "$work/found" "$work/times" "$exp" >>"$log"
}

every=${CRASH_MOUNT_EVERY:-0}
sample=0
if [ "$every" -gt 0 ] && [ $((id % every)) = 0 ] \
   && [ "${CRASH_JOURNAL:-1}" = 1 ]; then
  # The same state for the kernel to replay: e2fsck changes $img.
  sample=1
  cp "$img" "$img.orig" || exit 8
fi

status=0
fsck_image "$img" e2fsck-replay || status=$((status | 1))
oracle_image "$img" e2fsck-replay || status=$((status | 2))

if [ "$sample" = 1 ]; then
  m=$work/mnt
  mkdir -p "$m"
  dev=$(losetup -f --show "$img.orig") || exit 8
  if mount -t ext4 -o ro "$dev" "$m" 2>>"$log"; then
    umount "$m" || status=$((status | 8))
    losetup -d "$dev"
    CRASH_JOURNAL=0 fsck_image "$img.orig" mount-replay \
      || status=$((status | 1))
    oracle_image "$img.orig" mount-replay || status=$((status | 2))
  else
    losetup -d "$dev"
    note "mount-replay: the kernel could not mount the state"
    status=$((status | 1))
  fi
  rm -f "$img.orig"
  echo "$id" >>"$CRASH_WORK/mounted"
fi
[ "$status" = 0 ] && rm -f "$log"
exit "$status"
