# SPDX-License-Identifier: BSD-3-Clause
# test-readonly.sh --- read-only service: with nbdkit -r, and with a
# backing file the server cannot open for writing.  The export is
# read-only, reads, flush and cache work, and write, write-zeroes and
# trim fail: refused by libnbd itself in strict mode, and with EPERM
# from the server when libnbd's checks are turned off.

source "$(dirname "$0")/functions.sh"
requires_plugin
requires_nbdsh

img=$tmp/disk.img
truncate -s 4M "$img"
dd if=/dev/urandom of="$img" bs=64K count=8 conv=notrunc status=none
cp "$img" "$tmp/orig.img"

check_readonly ()
{
  local what=$1
  IMG=$img SOCK=$sock nbdsh -n -c - <<'PY' || die "$what: checks failed"
import errno
import os
import nbd

with open(os.environ["IMG"], "rb") as f:
    orig = f.read(1 << 20)

for strict in (True, False):
    h = nbd.NBD()
    if not strict:
        # Send the requests even though the export is read-only, so the
        # server's answer is what is checked.
        h.set_strict_mode(0)
    h.connect_unix(os.environ["SOCK"])
    assert h.is_read_only(), "export is not read-only"
    assert h.pread(1 << 20, 0) == orig, "read returned wrong data"
    assert h.pread(1, 12345) == orig[12345:12346]
    h.flush()
    h.cache(4096, 0)
    attempts = (
        ("write", lambda: h.pwrite(b"x" * 4096, 0)),
        ("write fua", lambda: h.pwrite(b"x", 1, nbd.CMD_FLAG_FUA)),
        ("zero", lambda: h.zero(4096, 0)),
        ("zero no-hole", lambda: h.zero(4096, 4096, nbd.CMD_FLAG_NO_HOLE)),
        ("trim", lambda: h.trim(4096, 8192)),
    )
    for name, fn in attempts:
        try:
            fn()
        except nbd.Error as e:
            # In strict mode libnbd refuses on its own (EPERM for writes,
            # EINVAL for commands the server does not advertise); without
            # it the error is the server's, and it must be EPERM.
            if not strict:
                assert e.errnum == errno.EPERM, \
                    "%s: server said %s, expected EPERM" % (name, e)
        else:
            raise AssertionError("%s (strict=%s) succeeded" % (name, strict))
    # The connection is still usable after the failures.
    assert h.pread(4096, 0) == orig[:4096]
    h.shutdown()
    del h
PY
  cmp "$img" "$tmp/orig.img" || die "$what: the backing file changed"
}

while read -r params <&3; do
  msg "checking -r $params"
  # shellcheck disable=SC2086
  start_nbdkit "ro-${params// /-}" -r -- "$img" $params
  check_readonly "-r $params"
  stop_nbdkit "$nbdkit_pid"
done 3< <(for_combos)

# A file that cannot be opened for writing.  Root bypasses permission
# bits, so as root make the file immutable instead; if that is not
# possible, run nbdkit as an unprivileged user.
runas=()
if [ "$(id -u)" -ne 0 ]; then
  chmod 0444 "$img"
  how="mode 0444"
elif chattr +i "$img" 2>/dev/null; then
  cleanup_fn chattr -i "$img"
  how="immutable file"
elif id -u nobody >/dev/null 2>&1 && command -v setpriv >/dev/null; then
  chmod 0444 "$img"
  chmod 0755 "$tmp"
  runas=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
  if ! "${runas[@]}" nbdkit "$plugin" --dump-plugin >/dev/null 2>&1; then
    skip "cannot make an unwritable file (no chattr, plugin not loadable as nobody)"
  fi
  how="mode 0444 as nobody"
else
  skip "cannot make an unwritable file as root here"
fi
if [ "$(id -u)" -ne 0 ] || [ ${#runas[@]} -gt 0 ]; then
  : # permission bits apply
elif { : >>"$img"; } 2>/dev/null; then
  die "could not make $img unwritable"
fi

while read -r params <&3; do
  msg "checking unwritable file ($how) $params"
  if [ ${#runas[@]} -gt 0 ]; then
    # start_nbdkit runs "nbdkit" from PATH: put a wrapper first.
    mkdir -p "$tmp/bin"
    printf '#!/bin/sh\nexec %s %s "$@"\n' "$(printf '%q ' "${runas[@]}")" \
           "$(command -v nbdkit)" >"$tmp/bin/nbdkit"
    chmod +x "$tmp/bin/nbdkit"
    PATH=$tmp/bin:$PATH
  fi
  # shellcheck disable=SC2086
  start_nbdkit "rofile-${params// /-}" -- "$img" $params
  check_readonly "unwritable file $params"
  stop_nbdkit "$nbdkit_pid"
done 3< <(for_combos)
