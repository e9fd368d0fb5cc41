# SPDX-License-Identifier: BSD-3-Clause
# test-interop.sh --- other NBD clients against the plugin: nbdinfo
# shows the advertised capabilities and block sizes, nbdcopy copies an
# image in and out, qemu-img reads the size and converts in both
# directions.  Every copy is compared byte for byte.

source "$(dirname "$0")/functions.sh"
requires_plugin
requires nbdinfo --version
requires nbdcopy --version
requires qemu-img --version

size=$((24 * 1024 * 1024))
src=$tmp/src.img
# Source: random data with a hole in the middle and an odd-sized tail
# block, so sparse copying is exercised too.
truncate -s $size "$src"
dd if=/dev/urandom of="$src" bs=1M count=5 conv=notrunc status=none
dd if=/dev/urandom of="$src" bs=1M count=3 seek=17 conv=notrunc status=none
printf 'end of image' | dd of="$src" bs=1 seek=$((size - 12)) conv=notrunc \
                           status=none

img=$tmp/disk.img

while read -r params <&3; do
  msg "checking $params"
  name=interop-${params// /-}
  rm -f "$img" "$tmp/out.img" "$tmp/out-qemu.img"
  truncate -s $size "$img"
  # shellcheck disable=SC2086
  start_nbdkit "$name" -- "$img" $params

  # nbdinfo: size, capabilities, block sizes.
  nbdinfo "$uri" >"$tmp/info.txt"
  grep -q "export-size: $size " "$tmp/info.txt" ||
    die "$params: nbdinfo shows the wrong size: $(cat "$tmp/info.txt")"
  for cap in can_cache can_fast_zero can_flush can_fua can_multi_conn \
             can_trim can_zero; do
    grep -q "^[[:space:]]*$cap: true\$" "$tmp/info.txt" ||
      die "$params: nbdinfo does not show $cap: true"
  done
  grep -q '^[[:space:]]*is_read_only: false$' "$tmp/info.txt" ||
    die "$params: export is read-only"
  grep -q '^[[:space:]]*base:allocation$' "$tmp/info.txt" ||
    die "$params: base:allocation (extents) not offered"
  # libnbd 1.22 (Debian 13) adds the size in words: "4096 (4K)".
  grep -Eq '^[[:space:]]*block_size_minimum: 1( \(1\))?$' "$tmp/info.txt" ||
    die "$params: block_size_minimum is not 1"
  grep -Eq '^[[:space:]]*block_size_preferred: 4096( \(4K\))?$' "$tmp/info.txt" ||
    die "$params: block_size_preferred is not 4096"
  [ "$(nbdinfo --size "$uri")" = "$size" ] || die "$params: nbdinfo --size"
  nbdinfo --can flush "$uri" || die "$params: nbdinfo --can flush"
  nbdinfo --can fua "$uri" || die "$params: nbdinfo --can fua"
  nbdinfo --can multi-conn "$uri" || die "$params: nbdinfo --can multi-conn"

  # nbdcopy in (several connections, since multi-conn is advertised)
  # and out again.
  nbdcopy --flush "$src" "$uri"
  cmp "$src" "$img" || die "$params: nbdcopy into the export differs"
  nbdcopy "$uri" "$tmp/out.img"
  cmp "$src" "$tmp/out.img" || die "$params: nbdcopy out of the export differs"

  # qemu-img.
  qemu-img info --output=json "$uri" >"$tmp/qinfo.json"
  grep -q "\"virtual-size\": $size," "$tmp/qinfo.json" ||
    die "$params: qemu-img info: $(cat "$tmp/qinfo.json")"
  qemu-img convert -f raw -O raw "$uri" "$tmp/out-qemu.img"
  cmp "$src" "$tmp/out-qemu.img" || die "$params: qemu-img convert out differs"
  # ... and into the export, over different data.
  dd if=/dev/urandom of="$tmp/out-qemu.img" bs=1M count=2 seek=3 \
     conv=notrunc status=none
  qemu-img convert -n -f raw -O raw "$tmp/out-qemu.img" "$uri"
  nbdcopy "$uri" "$tmp/out.img"
  cmp "$tmp/out-qemu.img" "$tmp/out.img" ||
    die "$params: qemu-img convert into the export differs"
  stop_nbdkit "$nbdkit_pid"
  cmp "$tmp/out-qemu.img" "$img" || die "$params: backing file differs"
done 3< <(for_combos)
