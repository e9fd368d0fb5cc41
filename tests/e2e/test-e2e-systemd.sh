#!/usr/bin/env bash
# The package under a real systemd: a guest of the host's Debian release
# (its root file system; qemu TCG, the host's cloud kernel that the other
# end-to-end tests boot) with systemd as PID 1
# installs the .deb built from this tree and serves two volumes through
# the shipped units: ext4lazy@vol1.service on a file and
# ext4lazy@vol2.socket (socket-activated).  The guest's driver
# (systemd/driver.sh, run by systemd/e2e-driver.service after
# multi-user.target) connects the kernel's NBD client to each unit's
# socket, mounts, writes and reads, reads ext4lazyctl stats through the
# unit's control socket, runs ext4lazy-metrics@vol1 and checks its
# file, stops the units and checks with debugfs that the held atimes
# reached the images, that no unit failed and that the units' journal
# has no error.  A third volume, ext4lazy@vol3.service, has its store on
# the host: nbdkit with --tls=require and a PSK on 127.0.0.1, reached
# from the guest as 10.0.2.2 through STORE=nbd=nbds://...  (the packaged
# examples vol3-nbd.conf and remote-store.conf); the host checks that it
# refuses clients without the key and that the guest's atime reached its
# file.  A fourth, ext4lazy@vol5.socket, is served on the guest's
# 127.0.0.1:10809 with TLS and X.509 certificates (the packaged examples
# vol5-tcp-x509.conf and tcp-tls.socket.conf; the CA, server and client
# certificates are made on the host with certtool): the kernel's
# nbd-client with the client certificate mounts it, reads and writes,
# and is refused without TLS, without a certificate and with another
# CA's.  A fifth, ext4lazy@vol6.service, serves an RBD image of a
# single-node Ceph cluster the host starts (tests/integration/cephlib.py)
# on its own IPv4 address, which the guest reaches through qemu's user
# network (the packaged examples vol2-rbd.conf and remote-store.conf;
# librbd1 is in the guest's root): the guest writes a file and reads,
# and the host exports the image and finds the file and the atime the
# guest saw.  Without the Ceph packages vol6 is left out with a message.
# The host then checks the volume images once more, and the vol5
# results.
#
# The root file system is built with mmdebstrap (systemd/make-rootfs.sh)
# the first time and cached in $E2E_CACHE_DIR under a key of that script
# and the kernel version; every run boots a copy of it.  The test prints
# how long each phase took.  Root only (loop mount).  Exits 77 when
# mmdebstrap, dpkg-buildpackage or the kernel is missing, or when the
# root file system must be built and the Debian mirror cannot be
# reached.  E2E_SYSTEMD_DEB=PATH boots a package built before instead of
# building one from the tree.
set -u
source "$(dirname "$0")/lib.sh"
sd=$E2E_SRCDIR/systemd
src=$(cd "$E2E_SRCDIR/../.." && pwd)

now () { date +%s; }
t_all=$(now)
t_phase=$t_all
phase ()
{
  local t
  t=$(now)
  e2e_log "phase $1: $((t - t_phase)) s"
  t_phase=$t
}

[ "$(id -u)" = 0 ] || e2e_skip "needs root (loop mount of the root image)"
for c in mmdebstrap qemu-system-x86_64 mkfs.ext4 debugfs e2fsck flock \
         sha256sum timeout gzip; do
  command -v "$c" >/dev/null 2>&1 || e2e_skip "$c not found"
done
command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null ||
  e2e_skip "dpkg-buildpackage or dh missing (apt-get install dpkg-dev debhelper fakeroot)"
e2e_init_kernel
e2e_log "guest kernel $E2E_KVER"

E2E_TMP=$(mktemp -d "${TMPDIR:-/tmp}/ext4lazy-e2e-systemd.XXXXXX") \
  || e2e_fail "mktemp"
MNT= CEPHDIR=
cephlib=$src/tests/integration/cephlib.py
sd_cleanup ()
{
  if [ -n "$MNT" ] && mountpoint -q "$MNT"; then umount "$MNT"; fi
  [ -z "$CEPHDIR" ] || python3 "$cephlib" stop "$CEPHDIR"
  e2e_cleanup
}
trap sd_cleanup EXIT
trap 'exit 1' INT TERM HUP

# ---- the root file system (cached) ----------------------------------
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
key=$( { echo "$E2E_KVER $suite"; cat "$sd/make-rootfs.sh"; } | sha256sum | cut -c1-16)
rootimg=$E2E_CACHE_DIR/rootfs-$suite-$key.img
exec 9>"$E2E_CACHE_DIR/rootfs.lock"
flock 9
if [ ! -s "$rootimg" ]; then
  mirror=${E2E_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  host=${mirror#*://}; host=${host%%/*}
  timeout 20 bash -c "exec 3<>/dev/tcp/$host/80" 2>/dev/null ||
    e2e_skip "no root file system cached and $host cannot be reached to build one"
  e2e_log "building the Debian $suite root file system with mmdebstrap (log: $E2E_TMP/rootfs.log)"
  t0=$(now)
  if ! bash "$sd/make-rootfs.sh" "$rootimg.tmp.$$" "$E2E_KVER" "$E2E_MODROOT" "$suite" \
         >"$E2E_TMP/rootfs.log" 2>&1; then
    tail -n 30 "$E2E_TMP/rootfs.log" >&2
    rm -f "$rootimg.tmp.$$"
    e2e_fail "mmdebstrap could not build the root file system"
  fi
  mv -f "$rootimg.tmp.$$" "$rootimg"
  for f in "$E2E_CACHE_DIR"/rootfs-"$suite"-*.img; do
    [ "$f" = "$rootimg" ] || rm -f "$f"
  done
  e2e_log "root file system built in $(( $(now) - t0 )) s: $(du -h "$rootimg" | cut -f1) used of $(du -h --apparent-size "$rootimg" | cut -f1)"
else
  e2e_log "root file system cached: $rootimg"
fi
exec 9>&-
phase rootfs

# ---- the package ----------------------------------------------------
mkdir -p "$E2E_TMP/deb"
# The package the integration test (test-package.sh) built and left in
# the build tree serves when no file of the tree is newer than it.
if [ -z "${E2E_SYSTEMD_DEB:-}" ] && [ -n "${EXT4LAZY_BUILD_ROOT:-}" ]; then
  kept=$(ls "$EXT4LAZY_BUILD_ROOT"/deb/nbdkit-ext4lazy-plugin_*.deb 2>/dev/null | head -n 1)
  if [ -f "$kept" ] &&
     [ -z "$(cd "$src" && git ls-files -z 2>/dev/null | xargs -0 -r find 2>/dev/null -newer "$kept" -print -quit)" ] &&
     (cd "$src" && git rev-parse --git-dir >/dev/null 2>&1); then
    e2e_log "package: $kept (built by the package test, newer than the tree)"
    E2E_SYSTEMD_DEB=$kept
  fi
fi
if [ -n "${E2E_SYSTEMD_DEB:-}" ]; then
  # A package built before (for work on the test itself).
  cp "$E2E_SYSTEMD_DEB" "$E2E_TMP/deb/" || e2e_fail "cannot copy $E2E_SYSTEMD_DEB"
elif ! bash "$src/deploy/debian/build-deb.sh" "$E2E_TMP/deb" >"$E2E_TMP/deb.log" 2>&1; then
  tail -n 30 "$E2E_TMP/deb.log" >&2
  e2e_fail "the package did not build (deploy/debian/build-deb.sh)"
fi
deb=$(ls "$E2E_TMP"/deb/nbdkit-ext4lazy-plugin_*.deb 2>/dev/null | head -n 1)
[ -f "$deb" ] || e2e_fail "no nbdkit-ext4lazy-plugin .deb built"
e2e_log "package $(basename "$deb") (Depends: $(dpkg-deb -f "$deb" Depends))"
phase package

# ---- vol5's certificates: TLS with X.509 for the kernel's client -----
# The guest serves vol5 through ext4lazy@vol5.socket on its own
# 127.0.0.1:10809 with examples/vol5-tcp-x509.conf (--tls=require
# --tls-certificates --tls-verify-peer) and examples/tcp-tls.socket.conf;
# nbd-client connects with a client certificate of the same CA, and is
# refused without TLS, without a certificate and with one of another CA.
# ECDSA keys: quicker than RSA in the guest's TCG.
vol5=0
if [ "${E2E_SYSTEMD_VOL5:-1}" = 0 ]; then
  e2e_log "vol5: off (E2E_SYSTEMD_VOL5=0)"
elif ! command -v certtool >/dev/null; then
  e2e_log "vol5: not run: certtool missing (apt-get install gnutls-bin)"
else
  x5=$E2E_TMP/x509
  mkdir -p "$x5"
  # cert NAME TEMPLATE [CA]: NAME-key.pem and NAME-cert.pem, signed by
  # CA-cert.pem/CA-key.pem, or self-signed without CA.
  cert ()
  {
    certtool --generate-privkey --key-type=ecdsa --outfile "$x5/$1-key.pem" \
      >/dev/null 2>&1 || return 1
    printf %b "$2" >"$x5/$1.info"
    if [ -z "${3:-}" ]; then
      certtool --generate-self-signed --load-privkey "$x5/$1-key.pem" \
        --template "$x5/$1.info" --outfile "$x5/$1-cert.pem" >/dev/null 2>&1
    else
      certtool --generate-certificate --load-ca-certificate "$x5/$3-cert.pem" \
        --load-ca-privkey "$x5/$3-key.pem" --load-privkey "$x5/$1-key.pem" \
        --template "$x5/$1.info" --outfile "$x5/$1-cert.pem" >/dev/null 2>&1
    fi
  }
  ca='cn = ext4lazy e2e CA\nca\ncert_signing_key\nexpiration_days = 2\n'
  if cert ca "$ca" &&
     cert server 'cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 2\n' ca &&
     cert client 'cn = client1\ntls_www_client\nsigning_key\nexpiration_days = 2\n' ca &&
     cert otherca "${ca/e2e CA/other CA}" &&
     cert other 'cn = client1\ntls_www_client\nsigning_key\nexpiration_days = 2\n' otherca
  then
    vol5=1
    e2e_log "vol5: CA, server (localhost, 127.0.0.1) and client certificates made; another CA's client"
  else
    e2e_fail "vol5: certtool could not make the certificates"
  fi
fi

# ---- the guest's disk and initrd ------------------------------------
img=$E2E_TMP/root.img
cp --sparse=always "$rootimg" "$img" || e2e_fail "cannot copy $rootimg"
MNT=$E2E_TMP/mnt
mkdir -p "$MNT"
mount -o loop "$img" "$MNT" || e2e_fail "cannot loop-mount $img"
mkdir -p "$MNT/root/deb"
cp "$deb" "$MNT/root/deb/"
install -D -m 0755 "$sd/driver.sh" "$MNT/usr/local/sbin/e2e-systemd-driver"
install -D -m 0644 "$sd/e2e-driver.service" "$MNT/etc/systemd/system/e2e-driver.service"
mkdir -p "$MNT/etc/systemd/system/multi-user.target.wants"
ln -sf ../e2e-driver.service "$MNT/etc/systemd/system/multi-user.target.wants/e2e-driver.service"
if [ "$vol5" = 1 ]; then
  mkdir -p -m 0700 "$MNT/root/vol5"
  for f in ca-cert server-cert server-key client-cert client-key other-cert other-key; do
    install -m 0600 "$x5/$f.pem" "$MNT/root/vol5/$f.pem"
  done
fi
umount "$MNT" || e2e_fail "cannot unmount $MNT"
MNT=

# The initrd: busybox, the virtio disk modules and systemd/init-root.sh,
# which mounts /dev/vda and starts systemd from it.
ird=$E2E_TMP/initrd
mkdir -p "$ird"/{bin,lib/modules,proc,sys,dev,newroot}
install -m 0755 /bin/busybox "$ird/bin/busybox"
for a in sh mount umount insmod sleep mkdir switch_root poweroff; do
  ln -sf busybox "$ird/bin/$a"
done
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev \
         virtio_pci virtio_blk libcrc32c crc32c-intel; do
  f=$(e2e_find_module "$m")
  [ -n "$f" ] || continue   # built in
  case $f in
    *.ko) cp "$f" "$ird/lib/modules/$m.ko" ;;
    *.ko.xz) xz -dc "$f" >"$ird/lib/modules/$m.ko" ;;
    *.ko.zst) zstd -qdc "$f" >"$ird/lib/modules/$m.ko" ;;
    *) e2e_skip "cannot unpack $f" ;;
  esac
done
install -m 0755 "$sd/init-root.sh" "$ird/init"
(cd "$ird" && find . | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null) | gzip -1 >"$E2E_TMP/initrd.gz" \
  || e2e_fail "cannot build the initrd"
phase prepare

# ---- vol3's store: nbdkit on the host, TCP with TLS-PSK --------------
# The guest reaches the host's 127.0.0.1 as 10.0.2.2 (qemu's user
# network).  A client without the key must be refused, one with it
# served (nbdinfo); the guest serves the export through ext4lazy@vol3
# (STORE=nbd=nbds://..., examples/vol3-nbd.conf, with the drop-in
# examples/remote-store.conf).
vol3=0 v3pid=
if [ "${E2E_SYSTEMD_VOL3:-1}" = 0 ]; then
  e2e_log "vol3: off (E2E_SYSTEMD_VOL3=0)"
elif ! nbdkit --dump-config | grep -q '^tls=yes'; then
  e2e_log "vol3: not run: this nbdkit has no TLS"
else
  vol3=1
  v3port=$((20000 + RANDOM % 20000))
  v3psk=$E2E_TMP/vol3.psk
  (umask 077; echo "ext4lazy:$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >"$v3psk")
  mkdir -p "$E2E_TMP/seed3"
  for i in 1 2 3 4 5 6; do
    head -c $((i * 5000)) /dev/urandom >"$E2E_TMP/seed3/f$i"
  done
  touch -a -d '2020-01-01 00:00:00' "$E2E_TMP"/seed3/f*
  mkfs.ext4 -q -F -b 4096 -d "$E2E_TMP/seed3" "$E2E_TMP/vol3.img" 64M >/dev/null \
    || e2e_fail "mkfs.ext4 vol3.img"
  v3old=$(debugfs -R 'stat /f1' "$E2E_TMP/vol3.img" 2>/dev/null |
            sed -n 's/^ *atime: 0x\([0-9a-f]*\).*/\1/p' | head -n 1)
  nbdkit -f --exit-with-parent -i 127.0.0.1 -p "$v3port" --tls=require \
    --tls-psk="$v3psk" file "$E2E_TMP/vol3.img" 2>"$E2E_TMP/vol3.nbdkit.err" &
  v3pid=$!
  E2E_PIDS+=("$v3pid")
  for ((i = 0; i < 100; i++)); do
    timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$v3port" 2>/dev/null && break
    kill -0 "$v3pid" 2>/dev/null || { cat "$E2E_TMP/vol3.nbdkit.err" >&2; e2e_fail "vol3: host nbdkit did not start"; }
    sleep 0.1
  done
  if command -v nbdinfo >/dev/null; then
    if nbdinfo --size "nbd://127.0.0.1:$v3port" >/dev/null 2>&1; then
      e2e_fail "vol3: the host's TLS server served a client without TLS"
    fi
    echo "ext4lazy:$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >"$E2E_TMP/wrong.psk"
    if nbdinfo --size "nbds://ext4lazy@127.0.0.1:$v3port/?tls-psk-file=$E2E_TMP/wrong.psk" >/dev/null 2>&1; then
      e2e_fail "vol3: the host's TLS server served a client with a wrong key"
    fi
    nbdinfo --size "nbds://ext4lazy@127.0.0.1:$v3port/?tls-psk-file=$v3psk" >/dev/null 2>"$E2E_TMP/nbdinfo.err" \
      || { cat "$E2E_TMP/nbdinfo.err" >&2; e2e_fail "vol3: the host's TLS server refused the key"; }
    e2e_log "vol3: host nbdkit on 127.0.0.1:$v3port refuses plain NBD and a wrong key, serves the key"
  fi
  MNT=$E2E_TMP/mnt
  mount -o loop "$img" "$MNT" || e2e_fail "cannot loop-mount $img"
  mkdir -p "$MNT/root/vol3"
  install -m 0600 "$v3psk" "$MNT/root/vol3/vol3-remote.psk"
  (cd "$E2E_TMP/seed3" && sha256sum f*) >"$MNT/root/vol3/seed.sums"
  echo "VOL3_PORT=$v3port" >"$MNT/root/vol3/vol3.env"
  umount "$MNT" || e2e_fail "cannot unmount $MNT"
  MNT=
fi
phase vol3-host

# ---- vol6's store: Ceph RBD on the host's own address ----------------
# A single-node cluster (tests/integration/cephlib.py: one mon, one OSD,
# memstore, auth none) bound to the host's first non-loopback IPv4
# address, which the guest reaches through qemu's user network (it does
# not reach the host's 127.0.0.1 but as 10.0.2.2, and the cluster's maps
# name the address it is bound to).  The guest serves rbd/vol6 through
# ext4lazy@vol6.service (examples/vol2-rbd.conf, remote-store.conf);
# afterwards the host exports the image and checks the guest's file and
# atime on it.  Without the Ceph packages this part is left out.
vol6=0
if [ "${E2E_SYSTEMD_RBD:-1}" = 0 ]; then
  e2e_log "vol6 (rbd): off (E2E_SYSTEMD_RBD=0)"
elif ! python3 "$cephlib" check >"$E2E_TMP/ceph-check.err" 2>&1; then
  e2e_log "vol6 (rbd): not run: $(tail -n 1 "$E2E_TMP/ceph-check.err")"
else
  hostip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  case $hostip in
    '' | 127.*)
      e2e_log "vol6 (rbd): not run: the host has no IPv4 address but loopback for the guest to reach" ;;
    *)
      CEPHDIR=$E2E_TMP/ceph
      mkdir -p "$CEPHDIR"
      if ! out=$(python3 "$cephlib" start "$CEPHDIR" "$hostip" 2>"$E2E_TMP/ceph.err"); then
        cat "$E2E_TMP/ceph.err" >&2
        e2e_fail "vol6 (rbd): the Ceph cluster did not start on $hostip"
      fi
      eval "$out"
      export CEPH_CONF
      mkdir -p "$E2E_TMP/seed6"
      for i in 1 2 3 4 5 6; do
        head -c $((i * 7000)) /dev/urandom >"$E2E_TMP/seed6/f$i"
      done
      touch -a -d '2020-01-01 00:00:00' "$E2E_TMP"/seed6/f*
      mkfs.ext4 -q -F -b 4096 -d "$E2E_TMP/seed6" "$E2E_TMP/vol6.img" 64M >/dev/null \
        || e2e_fail "mkfs.ext4 vol6.img"
      rbd import --no-progress "$E2E_TMP/vol6.img" rbd/vol6 >"$E2E_TMP/rbd.log" 2>&1 \
        || { cat "$E2E_TMP/rbd.log" >&2; e2e_fail "vol6 (rbd): rbd import"; }
      vol6=1
      e2e_log "vol6 (rbd): Ceph on $CEPH_MON_HOST, image rbd/vol6 imported"
      ;;
  esac
fi
phase vol6-host
if [ "$vol6" = 1 ]; then
  MNT=$E2E_TMP/mnt
  mount -o loop "$img" "$MNT" || e2e_fail "cannot loop-mount $img"
  mkdir -p "$MNT/root/vol6"
  # The client's view of the cluster: its monitor, no keys (auth none),
  # no admin socket or log file (the unit's file system is read-only).
  printf '[global]\nfsid = %s\nmon host = %s\nauth cluster required = none\nauth service required = none\nauth client required = none\n[client]\nadmin socket =\nlog file =\n' \
    "$CEPH_FSID" "$CEPH_MON_HOST" >"$MNT/root/vol6/ceph.conf"
  (cd "$E2E_TMP/seed6" && sha256sum f*) >"$MNT/root/vol6/seed.sums"
  umount "$MNT" || e2e_fail "cannot unmount $MNT"
  MNT=
fi

# ---- boot -----------------------------------------------------------
E2E_CONSOLE=$E2E_TMP/systemd.console
e2e_log "booting the guest (systemd as init; console: $E2E_CONSOLE)"
t0=$(now)
timeout -k 10 "${E2E_BOOT_TIMEOUT:-900}" \
  qemu-system-x86_64 -accel tcg -cpu "${E2E_QEMU_CPU:-max}" -m 1024 -smp 1 \
    -nographic -no-reboot -nodefaults -serial stdio -monitor none \
    -kernel "$E2E_KERNEL" -initrd "$E2E_TMP/initrd.gz" \
    -append "root=/dev/vda rw console=ttyS0 panic=-1 quiet loglevel=3 systemd.show_status=error" \
    -drive "file=$img,format=raw,if=virtio,cache=unsafe" \
    -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
    </dev/null >"$E2E_CONSOLE" 2>&1 &
qpid=$!
E2E_PIDS+=("$qpid")
wait "$qpid"
rc=$?
e2e_forget_pid "$qpid"
grep -ao 'E2E-\(RESULT\|JOURNAL\):.*' "$E2E_CONSOLE" | tr -d '\r' >&2
e2e_log "guest ran $(( $(now) - t0 )) s (qemu status $rc)"
[ "$rc" = 124 ] && e2e_log "the guest timed out"
phase guest
status=0
if ! grep -aq 'E2E-RESULT: done ok' "$E2E_CONSOLE"; then
  e2e_log "console tail:"
  tail -n 40 "$E2E_CONSOLE" | tr -d '\r' >&2
  status=1
fi

# ---- the host's look at the volumes ---------------------------------
# The images as the guest left them, out of the root image: both clean.
for v in vol1 vol2; do
  rm -f "$E2E_TMP/$v.img"
  debugfs -R "dump /var/lib/ext4lazy/$v.img $E2E_TMP/$v.img" "$img" >/dev/null 2>&1
  if [ ! -s "$E2E_TMP/$v.img" ]; then
    e2e_log "$v: no image in the guest's root file system"; status=1
  elif e2fsck -fn "$E2E_TMP/$v.img" >"$E2E_TMP/$v.fsck" 2>&1; then
    e2e_log "$v: e2fsck clean on the host"
  else
    cat "$E2E_TMP/$v.fsck" >&2; e2e_log "$v: e2fsck found problems"; status=1
  fi
done
if [ "$vol3" = 1 ]; then
  e2e_term "$v3pid" || e2e_log "vol3: host nbdkit exited with status $?"
  v3new=$(debugfs -R 'stat /f1' "$E2E_TMP/vol3.img" 2>/dev/null |
            sed -n 's/^ *atime: 0x\([0-9a-f]*\).*/\1/p' | head -n 1)
  v3guest=$(grep -a 'E2E-RESULT: vol3-atime ' "$E2E_CONSOLE" | tail -n 1 | tr -d '\r' | awk '{print $3}')
  if [ -z "$v3guest" ]; then
    e2e_log "vol3: the guest did not report an atime"; status=1
  elif [ -n "$v3new" ] && [ $((16#$v3new)) = "$v3guest" ] && [ "$v3new" != "$v3old" ]; then
    e2e_log "vol3: f1's atime the guest saw ($v3guest) reached the host's file"
  else
    e2e_log "vol3: f1's atime on the host's file is 0x${v3new:-?} (was 0x${v3old:-?}), the guest saw $v3guest"
    status=1
  fi
  e2fsck -fn "$E2E_TMP/vol3.img" >"$E2E_TMP/vol3.fsck" 2>&1 \
    || { cat "$E2E_TMP/vol3.fsck" >&2; e2e_log "vol3: e2fsck found problems"; status=1; }
fi
# vol6: the image as the guest left it in the cluster.
if [ "$vol6" = 1 ]; then
  v6guest=$(grep -a 'E2E-RESULT: vol6-atime ' "$E2E_CONSOLE" | tail -n 1 | tr -d '\r' | awk '{print $3}')
  rm -f "$E2E_TMP/vol6.img"
  if ! rbd export --no-progress rbd/vol6 "$E2E_TMP/vol6.img" >"$E2E_TMP/rbd.log" 2>&1; then
    cat "$E2E_TMP/rbd.log" >&2; e2e_log "vol6 (rbd): rbd export failed"; status=1
  else
    v6new=$(debugfs -R 'cat /new' "$E2E_TMP/vol6.img" 2>/dev/null)
    v6atime=$(debugfs -R 'stat /f1' "$E2E_TMP/vol6.img" 2>/dev/null |
                sed -n 's/^ *atime: 0x\([0-9a-f]*\).*/\1/p' | head -n 1)
    if [ "$v6new" = written-to-rbd ]; then
      e2e_log "vol6 (rbd): the guest's file is in the exported image"
    else
      e2e_log "vol6 (rbd): no /new with the guest's text in the exported image"; status=1
    fi
    if [ -n "$v6guest" ] && [ -n "$v6atime" ] && [ $((16#$v6atime)) = "$v6guest" ]; then
      e2e_log "vol6 (rbd): f1's atime the guest saw ($v6guest) is in the image"
    else
      e2e_log "vol6 (rbd): f1's atime in the image is 0x${v6atime:-?}, the guest saw ${v6guest:-?}"; status=1
    fi
    e2fsck -fn "$E2E_TMP/vol6.img" >"$E2E_TMP/vol6.fsck" 2>&1 \
      || { cat "$E2E_TMP/vol6.fsck" >&2; e2e_log "vol6 (rbd): e2fsck found problems"; status=1; }
  fi
  grep -aq 'E2E-RESULT: not-failed-vol6 ok' "$E2E_CONSOLE" ||
    { e2e_log "vol6 (rbd): ext4lazy@vol6 failed or did not run"; status=1; }
  python3 "$cephlib" stop "$CEPHDIR"
  CEPHDIR=
fi
# vol5: what the guest's nbd-client got from the x509 server.
if [ "$vol5" = 1 ]; then
  for k in vol5-refused-plain vol5-refused-no-cert vol5-refused-other-ca \
           vol5-connect vol5-read vol5-written not-failed-vol5; do
    if ! grep -aq "E2E-RESULT: $k ok" "$E2E_CONSOLE"; then
      e2e_log "vol5: no \"$k ok\" from the guest"; status=1; v5bad=1
    fi
  done
  [ -z "${v5bad:-}" ] &&
    e2e_log "vol5: nbd-client with the client certificate was served over TLS (mount, read, write); without TLS, without a certificate and with another CA's it was refused"
fi
phase host-check
e2e_log "whole test: $(( $(now) - t_all )) s"
[ "$status" = 0 ] || e2e_fail "see the E2E-RESULT lines above"
echo "PASS: the package under systemd: a file volume, a socket-activated one$([ "$vol5" = 1 ] && echo ", one served over TCP with TLS and X.509 certificates to nbd-client")$([ "$vol3" = 1 ] && echo ", one on the host over TCP with TLS-PSK")$([ "$vol6" = 1 ] && echo ", one on Ceph RBD")"
