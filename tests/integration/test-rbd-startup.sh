# SPDX-License-Identifier: BSD-3-Clause
# test-rbd-startup.sh --- rbd=POOL/IMAGE at start-up: a spec that is
# not one, rbd= with file= or nbd=, file-only parameters with rbd= and
# Ceph parameters without it, a missing ceph.conf, pool or image, and a
# monitor that does not answer: nbdkit exits non-zero before serving,
# with one line naming the problem, and does not crash or hang.  The
# cluster is a throwaway one from cephlib.py.

source "$(dirname "$0")/functions.sh"
requires_plugin
requires timeout --version
requires_nbdsh
if ! nbdkit "$plugin" --dump-plugin | grep -qx 'ext4lazy_rbd=yes'; then
  skip "the plugin has no rbd= backend (ext4lazy_rbd=no: built without" \
       "librbd, or librbd.so.1 cannot be loaded)"
fi
cephlib=$(dirname "$0")/cephlib.py
r=0
/usr/bin/python3 "$cephlib" check || r=$?
[ $r -eq 0 ] || exit $r

img=$tmp/disk.img
mkfs.ext4 -q -F -O ^has_journal "$img" 16M

# Errors found in the parameters alone: no cluster needed.
expect_error "rbd=disk: expected POOL/IMAGE" "$plugin" rbd=disk
expect_error "rbd=/disk: .*pool name is empty" "$plugin" rbd=/disk
expect_error "rbd=rbd/: .*image name is empty" "$plugin" rbd=rbd/
expect_error "rbd=rbd//disk: .*namespace is empty" "$plugin" rbd=rbd//disk
expect_error "rbd=rbd/disk@snap: .*snapshot" "$plugin" rbd=rbd/disk@snap
expect_error "give one of file=, nbd= and rbd=" "$plugin" "$img" \
  rbd=rbd/disk
expect_error "give one of file=, nbd= and rbd=" "$plugin" \
  "nbd=nbd+unix:///?socket=$tmp/none.sock" rbd=rbd/disk
expect_error "rbd=rbd/disk: backend= applies to file= only" "$plugin" \
  rbd=rbd/disk backend=psync
expect_error "rbd=rbd/disk: direct= applies to file= only" "$plugin" \
  rbd=rbd/disk direct=true
expect_error "ceph-conf= applies to rbd= only" "$plugin" "$img" \
  ceph-conf=/etc/ceph/ceph.conf
expect_error "ceph-id= applies to rbd= only" "$plugin" "$img" ceph-id=admin

# A ceph.conf that is not there: the error names it.
expect_error "rbd=rbd/disk: .*$tmp/no-such.conf" "$plugin" rbd=rbd/disk \
  "ceph-conf=$tmp/no-such.conf"

# A monitor that does not answer: librados gives up after the conf's
# client mount timeout (5 s), well before expect_error's 60 s.
port=$(PYTHONPATH=$(dirname "$0") /usr/bin/python3 -c \
         'import cephlib; print(cephlib.free_port())')
cat >"$tmp/dead.conf" <<EOF
[global]
fsid = $(uuidgen)
mon host = v2:127.0.0.1:$port
auth cluster required = none
auth service required = none
auth client required = none
ms bind msgr1 = false
[client]
admin socket =
log file = $tmp/dead-client.log
client mount timeout = 5
EOF
start=$SECONDS
expect_error "rbd=rbd/disk: .*(timed out|Connection)" "$plugin" \
  rbd=rbd/disk "ceph-conf=$tmp/dead.conf"
elapsed=$((SECONDS - start))
[ $elapsed -lt 30 ] || die "no monitor: the error took ${elapsed} s"
msg "ok: no monitor: failed after ${elapsed} s"

# A cluster, with one image; its daemons outlive the start command.
cleanup_fn /usr/bin/python3 "$cephlib" stop "$tmp/ceph"
eval "$(/usr/bin/python3 "$cephlib" start "$tmp/ceph")"
[ -n "${CEPH_CONF:-}" ] || die "the cluster did not start"
export CEPH_CONF
rbd import --no-progress "$img" rbd/disk

# The good command lines work, so the failures below come from the bad
# input alone.  Without ceph-conf= librados finds $CEPH_CONF.
nbdkit -U - "$plugin" rbd=rbd/disk "ceph-conf=$CEPH_CONF" ceph-id=admin \
  --run 'nbdsh -u "$uri" -c "assert h.pread(2, 1080) == b\"\\x53\\xef\""' \
  </dev/null || die "nbdkit with a good rbd= failed"
msg "ok: rbd=rbd/disk ceph-conf= ceph-id=admin serves the image"
nbdkit -U - "$plugin" rbd=rbd/disk \
  --run 'nbdsh -u "$uri" -c "assert h.get_size() == 16 << 20"' \
  </dev/null || die "nbdkit with rbd= and \$CEPH_CONF failed"
msg "ok: without ceph-conf=, \$CEPH_CONF is used"

expect_error "rbd=nopool/disk: opening pool nopool: No such file or directory" "$plugin" \
  rbd=nopool/disk "ceph-conf=$CEPH_CONF"
expect_error "rbd=rbd/nosuch: opening image nosuch: No such file or directory" "$plugin" \
  rbd=rbd/nosuch "ceph-conf=$CEPH_CONF"
expect_error "rbd=rbd/nons/disk: opening image disk in namespace nons: No such file or directory" "$plugin" \
  rbd=rbd/nons/disk "ceph-conf=$CEPH_CONF"
unreadable=$tmp/unreadable.conf
cp "$CEPH_CONF" "$unreadable"
chmod 000 "$unreadable"
if [ "$(id -u)" -ne 0 ]; then
  expect_error "rbd=rbd/disk: .*$unreadable" "$plugin" rbd=rbd/disk \
    "ceph-conf=$unreadable"
fi
expect_error "rbd=rbd/disk: .*$tmp" "$plugin" rbd=rbd/disk "ceph-conf=$tmp"

# The failures did not leave the image locked or changed.
nbdkit -U - "$plugin" rbd=rbd/disk -r \
  --run 'nbdsh -u "$uri" -c "assert h.is_read_only()"' \
  </dev/null || die "nbdkit -r with a good rbd= failed"
msg "ok: -r serves the image read-only"
rbd export --no-progress rbd/disk "$tmp/export.img"
cmp "$img" "$tmp/export.img" || die "the image changed"
msg "ok: the image is unchanged"
