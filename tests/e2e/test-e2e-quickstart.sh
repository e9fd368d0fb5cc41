#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# test-e2e-quickstart.sh --- the quick start, followed as a newcomer
# would.  deploy/quickstart.sh serve makes its demo image and serves it,
# printing how to connect; this test takes the printed nbd-client, mount
# and ext4lazyctl lines from that output (it never spells them itself)
# and runs them, word for word, in a guest whose disk is the demo image,
# with nbdkit and the plugin serving it inside the guest on the socket
# and control socket the lines name (as test-e2e-nbd-client.sh does),
# which must be in a private directory (0700) under $XDG_RUNTIME_DIR.
# The guest reads a file back, waits for its journal commit and runs the
# printed "ext4lazyctl ... holds": the read's atime must be held.  Then
# the same for an image the user names, with 1 KiB blocks: the printed
# -b must be one that mounts it.
. "$(dirname "$0")/lib.sh"
E2E_GUEST_NBD=1
e2e_init
[ -x "${EXT4LAZYCTL:-}" ] || e2e_skip "EXT4LAZYCTL not set (meson sets it)"
QUICKSTART=$E2E_SRCDIR/../../deploy/quickstart.sh
[ -x "$QUICKSTART" ] || e2e_skip "$QUICKSTART not found"
plugin=$(e2e_guest_plugin)
[ "$plugin" = ext4lazy ] || e2e_skip "the guest's plugin is $plugin, not ext4lazy"
t0=$(date +%s)

# Run "quickstart.sh serve ARGS..." until it says it serves, check that it
# does (nbdinfo on its URI), stop it, and leave its output in $1.
quickstart_output ()
{
  local out=$1 pid i uri
  shift
  "$QUICKSTART" serve "$@" >"$out" 2>&1 </dev/null &
  pid=$!
  E2E_PIDS+=("$pid")
  for ((i = 0; i < 3000; i++)); do
    grep -q '^Stop with Ctrl-C' "$out" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q '^Stop with Ctrl-C' "$out" || { cat "$out" >&2; e2e_fail "quickstart.sh serve $*: did not start"; }
  uri=$(sed -n 's/^quickstart: serving .* on \([^ ]*\)$/\1/p' "$out")
  for ((i = 0; i < 100; i++)); do
    nbdinfo --size "$uri" >/dev/null 2>&1 && break
    sleep 0.1
  done
  nbdinfo --size "$uri" >/dev/null 2>&1 || { cat "$out" >&2; e2e_fail "nothing serves $uri"; }
  kill "$pid"
  wait "$pid" 2>/dev/null
  e2e_forget_pid "$pid"
  cat "$out" >&2
}

# The printed lines: "  LABEL:  FIRST" and the lines under it.
printed_line () { sed -n "s/^  $2: *//p" "$1" | head -n 1; }
printed_after () { grep -A1 "^  $2: " "$1" | tail -n 1 | sed 's/^ *//'; }
printed_ctl () { sed -n "s/^ *\([^ ]*ext4lazyctl -s [^ ]* $2\)\$/\1/p" "$1" | head -n 1; }

# Boot a guest on IMG that follows the lines printed in OUT and reads
# FILE (a path under /mnt), expecting TEXT.
follow ()
{
  local name=$1 out=$2 img=$3 file=$4 text=$5 nbdc mnt holds stats sock ctl
  local root=$E2E_TMP/$name.extra ko ctlpath got held
  nbdc=$(printed_line "$out" nbd-client)
  mnt=$(printed_after "$out" nbd-client)
  holds=$(printed_ctl "$out" holds)
  stats=$(printed_ctl "$out" stats)
  [ -n "$nbdc" ] && [ -n "$mnt" ] && [ -n "$holds" ] && [ -n "$stats" ] ||
    e2e_fail "$name: the printed nbd-client, mount or ext4lazyctl lines are missing"
  case $mnt in mount\ *) ;; *) e2e_fail "$name: no mount line under nbd-client: $mnt" ;; esac
  sock=$(sed -n 's/.* -unix \([^ ]*\) .*/\1/p' <<<"$nbdc")
  ctl=$(sed -n 's/.* -s \([^ ]*\) .*/\1/p' <<<"$holds")
  [ -n "$sock" ] && [ -n "$ctl" ] || e2e_fail "$name: no socket in the printed lines"
  # In a directory of the server's own (mode 0700), that no other user
  # can take first: $XDG_RUNTIME_DIR/ext4lazy-quickstart, not /tmp.
  [ "${sock%/*}" = "$XDG_RUNTIME_DIR/ext4lazy-quickstart" ] && [ "${ctl%/*}" = "${sock%/*}" ] ||
    e2e_fail "$name: the sockets $sock and $ctl are not in $XDG_RUNTIME_DIR/ext4lazy-quickstart"
  [ "$(stat -c %a "${sock%/*}")" = 700 ] ||
    e2e_fail "$name: ${sock%/*} is mode $(stat -c %a "${sock%/*}"), not 700"
  echo "$name: following: $nbdc / $mnt / $holds / $stats"

  # The second archive of the guest's initrd: the script, nbd.ko where
  # modprobe finds it, and ext4lazyctl where the printed line runs it.
  rm -rf "$root"
  mkdir -p "$root/lib/modules/$E2E_KVER/kernel/drivers/block"
  ko=$(e2e_find_module nbd)
  case $ko in
    *.ko) cp "$ko" "$root/lib/modules/$E2E_KVER/kernel/drivers/block/nbd.ko" ;;
    *.ko.xz) xz -dc "$ko" >"$root/lib/modules/$E2E_KVER/kernel/drivers/block/nbd.ko" ;;
    *.ko.zst) zstd -qdc "$ko" >"$root/lib/modules/$E2E_KVER/kernel/drivers/block/nbd.ko" ;;
    *) e2e_skip "cannot unpack $ko" ;;
  esac
  ctlpath=${holds%% *}
  if [ "${ctlpath:0:1}" = / ]; then
    install -D -m 0755 "$EXT4LAZYCTL" "$root$ctlpath"
  fi
  cat >"$root/e2e-script" <<SCRIPT
r () { echo "E2E-RESULT: \$*"; }
depmod
mkdir -p -m 0700 ${sock%/*} ${ctl%/*}
rm -f $sock $ctl
nbdkit -f -U $sock $plugin $DISK_IN_GUEST control=$ctl 2>/tmp/qs.err &
pid=\$!
i=0
while [ ! -S $sock ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done
[ -S $sock ] || { sed 's/^/E2E-NBDKIT: /' /tmp/qs.err; r "qs server FAIL"; exit 1; }
$nbdc || { r "qs nbd-client FAIL"; exit 1; }
i=0
while [ "\$(cat /sys/block/nbd0/size)" = 0 ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done
$mnt || { r "qs mount FAIL"; exit 1; }
r "qs mounted"
r "qs read \$(cat /mnt/$file | tr ' ' _)"
sleep 8
$holds >/tmp/holds || { r "qs holds FAIL"; exit 1; }
sed 's/^/E2E-HOLDS: /' /tmp/holds
$stats | sed 's/^/E2E-STATS: /'
umount /mnt && nbd-client -d /dev/nbd0 || { r "qs stop FAIL"; exit 1; }
kill \$pid
wait \$pid
sed 's/^/E2E-NBDKIT: /' /tmp/qs.err
r "qs done"
SCRIPT
  (cd "$root" && find . | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null) \
    | gzip -1 >"$E2E_TMP/$name.extra.cpio.gz" || e2e_fail "$name: cpio"
  cat "$base_initrd" "$E2E_TMP/$name.extra.cpio.gz" >"$E2E_TMP/$name.initrd"
  E2E_INITRD=$E2E_TMP/$name.initrd E2E_DISK=$img e2e_boot "$name" workload=script \
    || e2e_fail "$name: the guest did not follow the printed lines"
  grep -aq 'E2E-RESULT: qs done' "$E2E_CONSOLE" || e2e_fail "$name: the guest's script did not finish"
  got=$(grep -a 'E2E-RESULT: qs read ' "$E2E_CONSOLE" | tail -n 1 | tr -d '\r' | cut -d' ' -f4-)
  [ "$got" = "$(tr ' ' _ <<<"$text")" ] ||
    e2e_fail "$name: /mnt/$file read back as '$got', not '$text'"
  held=$(tr -d '\r' <"$E2E_CONSOLE" | sed -n 's/^E2E-HOLDS: \([0-9]*\) blocks held.*/\1/p' | tail -n 1)
  [ -n "$held" ] || e2e_fail "$name: the printed holds command printed no count"
  [ "$held" -ge 1 ] || e2e_fail "$name: ext4lazyctl holds shows nothing held after the read"
  echo "PASS: $name: the printed lines attach, mount and read back; $held blocks held after the read"
}

DISK_IN_GUEST=/dev/vda
base_initrd=$E2E_INITRD

# quickstart.sh puts its sockets in $XDG_RUNTIME_DIR: a private one here.
export XDG_RUNTIME_DIR=$E2E_TMP/run
mkdir -m 0700 "$XDG_RUNTIME_DIR"

# ---- the demo ------------------------------------------------------------
export EXT4LAZY_DEMO_IMG=$E2E_TMP/demo.img
quickstart_output "$E2E_TMP/demo.out"
[ -f "$EXT4LAZY_DEMO_IMG" ] || e2e_fail "quickstart.sh serve made no demo image"
bs=$(dumpe2fs -h "$EXT4LAZY_DEMO_IMG" 2>/dev/null | sed -n 's/^Block size: *//p')
[ "$bs" = 4096 ] || e2e_fail "the demo image has $bs-byte blocks, not 4096"
follow demo "$E2E_TMP/demo.out" "$EXT4LAZY_DEMO_IMG" file1.txt "demo file 1"
unset EXT4LAZY_DEMO_IMG

# ---- a user's image with 1 KiB blocks ------------------------------------
mkdir -p "$E2E_TMP/k1"
echo "one kilobyte blocks" >"$E2E_TMP/k1/hello.txt"
img=$E2E_TMP/k1.img
truncate -s 64M "$img"
mkfs.ext4 -q -F -b 1024 -d "$E2E_TMP/k1" "$img" || e2e_fail "mkfs.ext4 -b 1024"
quickstart_output "$E2E_TMP/k1.out" "$img"
grep -q -- '-b 1024$' "$E2E_TMP/k1.out" ||
  e2e_fail "a 1 KiB-block image: the printed nbd-client line does not say -b 1024"
follow k1 "$E2E_TMP/k1.out" "$img" hello.txt "one kilobyte blocks"
echo "PASS: the quick start, followed literally, $(($(date +%s) - t0)) s"
