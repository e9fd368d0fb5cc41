#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Parameters of the lazytime engine, the journal notice, the stats debug
# flag and ext4lazyctl's errors.
source "$(dirname "$0")/functions.sh"
requires_plugin
requires_nbdsh
requires test -x "${EXT4LAZYCTL:-}"
requires mkfs.ext4 -V
P=$EXT4LAZY_PLUGIN

mkfs.ext4 -q -F "$tmp/j.img" 32M
mkfs.ext4 -q -F -O ^has_journal "$tmp/nj.img" 32M

# The journal notice: once for a journaled filesystem under
# policy=strict, never without a journal.
nbdkit -U - "$P" "$tmp/j.img" policy=strict --run true 2>"$tmp/j.err" </dev/null
[ "$(grep -c 'has a journal' "$tmp/j.err")" -eq 1 ] ||
  { cat "$tmp/j.err"; die "journal notice not printed exactly once"; }
grep -q 'policy=atime or policy=lazy' "$tmp/j.err" || die "notice lacks the advice"
grep -q 'policy=strict max-age' "$tmp/j.err" ||
  die "the start-up line lacks the policy named on the command line"
! grep -q '(the default' "$tmp/j.err" || die "a named policy called the default"
nbdkit -U - "$P" "$tmp/nj.img" policy=strict --run true 2>"$tmp/nj.err" </dev/null
! grep -q 'has a journal' "$tmp/nj.err" || die "journal notice without a journal"
# The default is policy=atime, which follows the journal: no such
# notice, and the start-up line says the policy is the default.
nbdkit -U - "$P" "$tmp/j.img" --run true 2>"$tmp/ja.err" </dev/null
! grep -q 'has a journal' "$tmp/ja.err" || die "journal notice under the default"
grep -q 'journal; policy=atime (the default' "$tmp/ja.err" ||
  { cat "$tmp/ja.err"; die "the default is not policy=atime, or not said"; }
# A normal start says nothing that reads as an error (the notices do
# not go through nbdkit_error), and --log=null silences them.
! grep -qi 'error' "$tmp/ja.err" ||
  { cat "$tmp/ja.err"; die "a normal start printed an error"; }
nbdkit -U - --log=null "$P" "$tmp/j.img" --run true 2>"$tmp/jn.err" </dev/null
! grep -q 'notice' "$tmp/jn.err" ||
  { cat "$tmp/jn.err"; die "--log=null: a notice reached stderr"; }

# Good values are taken, bad ones refused with one clear line.
for good in policy=strict policy=atime policy=lazy max-age=90m max-age=2d max-age=30 max-held=1G \
            max-held=64K; do
  nbdkit -U - "$P" "$tmp/nj.img" "$good" --run true </dev/null ||
    die "$good refused"
done
for bad in policy=bogus policy= max-age=0 max-age=5x \
           max-age=-1 max-age= max-held=1K max-held=lots; do
  if nbdkit -U - "$P" "$tmp/nj.img" "$bad" --run true </dev/null \
       2>"$tmp/bad.err"; then
    die "$bad accepted"
  fi
  key=${bad%%=*}
  grep -q "$key" "$tmp/bad.err" || { cat "$tmp/bad.err"; die "$bad: error does not name $key"; }
  msg "$bad refused: $(grep -m1 error "$tmp/bad.err")"
done

# --dump-plugin lists the features.
nbdkit "$P" --dump-plugin | grep -q '^ext4lazy_policies=strict,atime,lazy$' ||
  die "--dump-plugin lacks ext4lazy_policies"

# -D ext4lazy.stats=1 prints the counters at shutdown.
nbdkit -U - -D ext4lazy.stats=1 "$P" "$tmp/nj.img" \
  --run 'nbdsh -u "$uri" -c "h.pwrite(b\"x\" * 512, 8 << 20)"' \
  </dev/null 2>"$tmp/stats.err"
grep -q 'ext4lazy stats:' "$tmp/stats.err" || die "no stats at shutdown"
grep -q 'client requests: 1 writes' "$tmp/stats.err" ||
  { cat "$tmp/stats.err"; die "stats do not count the write"; }

# ext4lazyctl: usage, missing socket, stale socket, access denied.
set +e
"$EXT4LAZYCTL" bogus >/dev/null 2>&1; [ $? -eq 2 ] || die "usage error must exit 2"
"$EXT4LAZYCTL" -s "$tmp/none.sock" stats 2>"$tmp/ctl.err"; st=$?
set -e
[ "$st" -eq 1 ] || die "missing socket must exit 1"
grep -q 'no such socket' "$tmp/ctl.err" || die "missing socket: $(cat "$tmp/ctl.err")"

nbdkit -f -U "$tmp/nbd.sock" "$P" "$tmp/nj.img" control="$tmp/ctl.sock" &
pid=$!
cleanup_fn kill "$pid"
for i in $(seq 100); do [ -S "$tmp/ctl.sock" ] && break; sleep 0.05; done
[ "$(stat -c %a "$tmp/ctl.sock")" = 600 ] || die "control socket is not mode 0600"
"$EXT4LAZYCTL" -s "$tmp/ctl.sock" stats | grep -q '^policy: atime' ||
  die "stats over the socket (the default policy is atime)"
"$EXT4LAZYCTL" -s "$tmp/ctl.sock" stats --prometheus |
  grep -q '^ext4lazy_held_blocks{instance="ext4@0"} 0$' || die "prometheus stats"
"$EXT4LAZYCTL" -s "$tmp/ctl.sock" flush || die "flush over the socket"
# A second server may not take over a live control socket (lock=off: the
# image is the first one's, and it is the socket that is checked).
if nbdkit -U - "$P" "$tmp/nj.img" control="$tmp/ctl.sock" lock=off --run true \
     </dev/null 2>"$tmp/dup.err"; then
  die "a live control socket was taken over"
fi
grep -q 'another server is listening' "$tmp/dup.err" || die "$(cat "$tmp/dup.err")"
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
  chmod 755 "$tmp"
  set +e
  setpriv --reuid=nobody --regid=nogroup --clear-groups \
    "$EXT4LAZYCTL" -s "$tmp/ctl.sock" stats 2>"$tmp/deny.err"; st=$?
  set -e
  [ "$st" -eq 1 ] || die "access as another user must fail"
  grep -q 'permission denied' "$tmp/deny.err" || die "$(cat "$tmp/deny.err")"
else
  msg "not root: access-denied case not checked"
fi
kill "$pid"; wait "$pid" || true
set +e
"$EXT4LAZYCTL" -s "$tmp/ctl.sock" stats 2>"$tmp/gone.err"; st=$?
set -e
[ "$st" -eq 1 ] || die "stats after exit must fail"
msg "all parameter and control checks passed"
