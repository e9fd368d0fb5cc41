#!/bin/busybox sh
# The initrd of the systemd end-to-end test: load the virtio disk driver
# (a module in Debian's cloud kernel), mount /dev/vda and hand over to
# its /sbin/init (systemd).
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev \
         virtio_pci virtio_blk libcrc32c crc32c-intel; do
  [ -f /lib/modules/$m.ko ] && insmod /lib/modules/$m.ko 2>/dev/null
done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
mkdir -p /newroot
if ! mount -t ext4 -o rw /dev/vda /newroot; then
  echo "E2E-RESULT: done fail (cannot mount /dev/vda)"
  poweroff -f
fi
umount /proc /sys
mount --move /dev /newroot/dev 2>/dev/null || umount /dev
exec switch_root /newroot /sbin/init
