# SPDX-License-Identifier: BSD-3-Clause
# test-nbd-startup.sh --- nbd=URI at start-up: a URI that is not one, no
# server behind it, file= and nbd= together or neither: nbdkit exits
# non-zero before serving, with one line naming the problem, and does
# not crash.  A read-only remote makes the plugin read-only.

source "$(dirname "$0")/functions.sh"
requires_plugin
requires timeout --version
requires_nbdsh
if ! nbdkit "$plugin" --dump-plugin | grep -qx 'ext4lazy_nbd=yes'; then
  skip "the plugin was built without libnbd (-Dnbd=disabled or no" \
       "libnbd-dev), so it has no nbd= backend"
fi

img=$tmp/disk.img
mkfs.ext4 -q -F -O ^has_journal "$img" 16M

# A remote to serve from: the good command line must work, so that the
# failures below come from the bad input alone.
remote_sock=$tmp/remote.sock
nbdkit -f --exit-with-parent -U "$remote_sock" -P "$tmp/remote.pid" \
  file "$img" </dev/null >"$tmp/remote.log" 2>&1 &
remote_pid=$!
cleanup_fn stop_nbdkit "$remote_pid"
for ((i = 0; i < 300; i++)); do
  [ -s "$tmp/remote.pid" ] && break
  sleep 0.1
done
[ -s "$tmp/remote.pid" ] || die "the remote nbdkit did not start"
good="nbd+unix:///?socket=$remote_sock"
nbdkit -U - "$plugin" nbd="$good" \
  --run 'nbdsh -u "$uri" -c "assert h.pread(2, 1080) == b\"\\x53\\xef\""' \
  </dev/null || die "nbdkit with a good nbd= URI failed"
msg "ok: a good nbd= URI serves the remote's ext4"

# URIs that are not NBD URIs: refused at configuration.
expect_error "nbd=/var/tmp/disk.img: not an NBD URI" "$plugin" \
  nbd=/var/tmp/disk.img
expect_error "nbd=http://example.com/: not an NBD URI: unknown scheme" \
  "$plugin" nbd=http://example.com/
expect_error "needs \?socket=PATH" "$plugin" nbd=nbd+unix:///
expect_error "socket= is only for" "$plugin" "nbd=nbd://localhost/?socket=/x"

# file= and nbd= together, or neither; file-only parameters with nbd=.
expect_error "give one of file=, nbd= and rbd=" "$plugin" "$img" \
  nbd="$good"
expect_error "file=.*nbd=" "$plugin" policy=strict
expect_error "nbd-replay= applies to nbd= only" "$plugin" "$img" \
  nbd-replay=off
expect_error "nbd-replay=maybe: expected on or off" "$plugin" \
  nbd="$good" nbd-replay=maybe
expect_error "backend= applies to file= only" "$plugin" nbd="$good" \
  backend=psync
expect_error "direct= applies to file= only" "$plugin" nbd="$good" \
  direct=true

# No server behind the URI: libnbd's message, naming the failed step.
expect_error "nbd=nbd\+unix:///\?socket=$tmp/no-such.sock: .*connect.*(No such file|not found)" \
  "$plugin" "nbd=nbd+unix:///?socket=$tmp/no-such.sock"
expect_error "nbd=nbd\+unix:///\?socket=$img: .*connect" \
  "$plugin" "nbd=nbd+unix:///?socket=$img"
expect_error "nbd=nbd://127.0.0.1:1/: .*(refused|connect)" \
  "$plugin" "nbd=nbd://127.0.0.1:1/"

# A read-only remote: the plugin is read-only too, and still serves.
ro_sock=$tmp/ro.sock
nbdkit -f --exit-with-parent -r -U "$ro_sock" -P "$tmp/ro.pid" \
  file "$img" </dev/null >"$tmp/ro.log" 2>&1 &
ro_pid=$!
cleanup_fn stop_nbdkit "$ro_pid"
for ((i = 0; i < 300; i++)); do
  [ -s "$tmp/ro.pid" ] && break
  sleep 0.1
done
[ -s "$tmp/ro.pid" ] || die "the read-only remote nbdkit did not start"
start_nbdkit plugin -- nbd="nbd+unix:///?socket=$ro_sock"
nbdsh -u "$uri" -c '
assert h.is_read_only(), "the plugin should be read-only"
assert h.pread(2, 1080) == b"\x53\xef"
h.set_strict_mode(0)
try:
    h.pwrite(b"x" * 512, 0)
    assert False, "a write to a read-only remote succeeded"
except nbd.Error as e:
    assert e.errno == "EPERM", e.errno
' || die "read-only remote: the plugin is not read-only"
msg "ok: a read-only remote makes the plugin read-only"
grep -q 'read-only' "$log" || die "the debug log does not say read-only"
