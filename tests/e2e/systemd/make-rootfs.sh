#!/usr/bin/env bash
# make-rootfs.sh OUT.img KVER MODROOT [SUITE] --- a Debian root file
# system for the systemd end-to-end test, as an ext4 image file, of SUITE
# (default: the host's release, VERSION_CODENAME of /etc/os-release).
#
# mmdebstrap (variant minbase) installs systemd as init, udev, nbdkit,
# nbd-client, e2fsprogs, kmod, the run-time dependencies of the
# nbdkit-ext4lazy-plugin package and librbd1 (which it loads for rbd=), so that the guest installs the .deb
# with dpkg -i and no network; documentation, man pages and locales are
# left out.  The guest kernel's modules (MODROOT/KVER) are copied in.
# The root password is empty, the serial getty is masked (the test's
# driver owns the console), and the image is 1 GiB, sparse.
#
# test-e2e-systemd.sh caches the result under a key made of this script
# and the kernel version: change the package list here and a new image
# is built.
set -euo pipefail

out=$1 kver=$2 modroot=$3
suite=${4:-$(. /etc/os-release && echo "$VERSION_CODENAME")}
mirror=${E2E_DEBIAN_MIRROR:-http://deb.debian.org/debian}
pkgs=systemd,systemd-sysv,udev,dbus,kmod,e2fsprogs,nbdkit,nbd-client
# nbdkit-ext4lazy-plugin's Depends (shlibs) besides nbdkit and libc6.
pkgs+=,libext2fs2,libcom-err2,liburing2,libnbd0
# The plugin loads librbd for rbd= (Suggests): the RBD volume needs it.
pkgs+=,librbd1

work=$(mktemp -d "${TMPDIR:-/tmp}/ext4lazy-rootfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root

mmdebstrap --quiet --variant=minbase --mode=root --include="$pkgs" \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/nbdkit-ext4lazy-plugin/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  "$suite" "$root" "$mirror"

rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
mkdir -p "$root/lib/modules"
cp -a "$modroot/$kver" "$root/lib/modules/"
echo ext4lazy-e2e >"$root/etc/hostname"
printf '/dev/vda / ext4 rw,errors=remount-ro 0 1\n' >"$root/etc/fstab"
# No password for root (the guest has no network; a console log in is
# for debugging a failed run by hand).
sed -i 's/^root:[^:]*:/root::/' "$root/etc/shadow"
ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"
ln -sf /dev/null "$root/etc/systemd/system/getty@tty1.service"
# Nothing to wait for in the guest: no network, no clock to sync.
ln -sf /dev/null "$root/etc/systemd/system/systemd-timesyncd.service"
ln -sf /dev/null "$root/etc/systemd/system/apt-daily.timer"
ln -sf /dev/null "$root/etc/systemd/system/apt-daily-upgrade.timer"
ln -sf /dev/null "$root/etc/systemd/system/e2scrub_all.timer"
ln -sf /dev/null "$root/etc/systemd/system/fstrim.timer"

truncate -s 1G "$work/root.img"
mkfs.ext4 -q -b 4096 -L ext4lazy-e2e -d "$root" "$work/root.img"
mv -f "$work/root.img" "$out"
