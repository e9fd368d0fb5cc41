# SPDX-License-Identifier: BSD-3-Clause
# lib.sh --- shared functions of the end-to-end tests: an unmodified Linux
# kernel in qemu (TCG) mounts ext4 from nbdkit over a Unix socket.
#
# Source it from a test-e2e-*.sh script (bash).  Environment:
#   EXT4LAZY_PLUGIN   path to nbdkit-ext4lazy-plugin.so: the server under test
#   E2E_PLUGIN        overrides it with any nbdkit plugin name or path (e.g.
#                     "file"), for developing the harness itself
#   E2E_PLUGIN_ARGS   extra key=value parameters for that plugin
#   E2E_GUEST         prebuilt static guest helper (else built with cc -static)
#   E2E_CACHE_DIR     where the initrd (and helper, fetched kernels) are cached
#   E2E_KERNEL_SUITE  boot the newest cloud kernel of this Debian suite
#                     (e.g. bookworm-backports), fetched into the cache,
#                     instead of the installed one (skips if it cannot)
#   E2E_QEMU_CPU      qemu's -cpu for the guest (default max)
#   E2E_BOOT_TIMEOUT  seconds a guest may run (default 900)
#   E2E_KEEP=1        keep the scratch directory (console logs, nbdkit logs)
#   E2E_GUEST_NBD=1   (set by a test before e2e_init) the guest runs nbdkit,
#                     the plugin and nbd-client itself: the initrd gets them
#                     and nbd.ko, and e2e_init checks that they exist
# Tests exit 0 (pass), 1 (fail) or 77 (a prerequisite is missing).

set -u

E2E_SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
E2E_TMP=
E2E_PIDS=()   # processes to end at exit
E2E_LOOPS=()  # loop devices to detach at exit
E2E_PLUGIN_SPEC=
E2E_PLUGIN_FILE=      # the plugin's .so, for the guest (E2E_GUEST_NBD=1)
E2E_NBDKIT_PLUGINDIR=
E2E_SOCK=
E2E_NBDLOG=
E2E_NBDKIT_PID=
E2E_CONSOLE=
E2E_LOOP=
E2E_WATCH_PID=
E2E_QSD_SOCK=
E2E_QSD_PID=
E2E_MODROOT=/lib/modules  # where the guest kernel's modules are

e2e_log () { echo "e2e: $*" >&2; }

e2e_skip ()
{
  echo "SKIP: $*" >&2
  exit 77
}

e2e_fail ()
{
  echo "FAIL: $*" >&2
  exit 1
}

e2e_cleanup ()
{
  local pid dev i
  for ((i = ${#E2E_PIDS[@]} - 1; i >= 0; i--)); do
    pid=${E2E_PIDS[i]}
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null
      # Give a server the chance to write back what it holds.
      for _ in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
      done
      kill -9 "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
  done
  E2E_PIDS=()
  for dev in "${E2E_LOOPS[@]}"; do
    losetup -d "$dev" 2>/dev/null
  done
  E2E_LOOPS=()
  if [ -n "$E2E_TMP" ] && [ -d "$E2E_TMP" ]; then
    if [ "${E2E_KEEP:-0}" = 1 ]; then
      e2e_log "kept $E2E_TMP"
    else
      rm -rf "$E2E_TMP"
    fi
  fi
}

e2e_forget_pid ()
{
  local keep=() p
  for p in "${E2E_PIDS[@]}"; do
    [ "$p" = "$1" ] || keep+=("$p")
  done
  E2E_PIDS=("${keep[@]}")
}

# E2E_KERNEL_SUITE=SUITE (e.g. bookworm-backports): the guest kernel is
# the newest linux-image-cloud-amd64 of that Debian suite, fetched with
# apt-get download into $E2E_CACHE_DIR/kernels/SUITE (with a private
# package list: the host's apt state and kernel are never touched) and
# unpacked there.  Sets E2E_KERNEL, E2E_KVER and E2E_MODROOT; returns 1
# when it cannot be fetched.
e2e_fetch_kernel ()
{
  local suite=$1 dir=$E2E_CACHE_DIR/kernels/$1 pkg deb k
  local -a apt
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/debs" || return 1
  echo "deb ${E2E_DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite main" >"$dir/sources.list"
  : >"$dir/status"
  apt=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o Dir::Etc::sourceparts=-
       -o "Dir::State::Lists=$dir/lists" -o "Dir::State::status=$dir/status"
       -o "Dir::Cache=$dir/cache" -o APT::Get::List-Cleanup=0)
  apt-get -q "${apt[@]}" update >"$dir/update.log" 2>&1 || { cat "$dir/update.log" >&2; return 1; }
  pkg=$(apt-cache "${apt[@]}" show linux-image-cloud-amd64 2>/dev/null |
          sed -n 's/^Depends: .*\(linux-image-[0-9][^ ,]*\).*/\1/p' | sort -V | tail -n 1)
  [ -n "$pkg" ] || return 1
  if [ ! -d "$dir/root-$pkg" ]; then
    # Newer kernels (trixie-backports' 7.x) split the image package into
    # linux-binary-VER (the kernel) and linux-modules-VER.
    local -a debs=("$pkg")
    debs+=($(apt-cache "${apt[@]}" show "$pkg" 2>/dev/null |
               grep -o "linux-\(binary\|modules\)-${pkg#linux-image-}\b" | sort -u))
    (cd "$dir/debs" && rm -f ./*.deb && apt-get -q "${apt[@]}" download "${debs[@]}") \
      >"$dir/download.log" 2>&1 || { cat "$dir/download.log" >&2; return 1; }
    rm -rf "$dir"/root-*
    for deb in "$dir/debs/"*.deb; do
      [ -f "$deb" ] && dpkg-deb -x "$deb" "$dir/root-$pkg.tmp" || return 1
      rm -f "$deb"
    done
    mv "$dir/root-$pkg.tmp" "$dir/root-$pkg" || return 1
  fi
  k=$(ls -1 "$dir/root-$pkg"/boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$k" ]; then
    E2E_KERNEL=$k E2E_KVER=${k##*/vmlinuz-} E2E_MODROOT=$dir/root-$pkg/lib/modules
  else
    # The 7.x packages put the kernel and modules in /usr/lib/modules/VER.
    k=$(ls -1 "$dir/root-$pkg"/usr/lib/modules/*/vmlinuz 2>/dev/null | sort -V | tail -n 1)
    [ -n "$k" ] || return 1
    E2E_KERNEL=$k E2E_MODROOT=$dir/root-$pkg/usr/lib/modules
    E2E_KVER=${k%/vmlinuz} E2E_KVER=${E2E_KVER##*/}
  fi
  [ -d "$E2E_MODROOT/$E2E_KVER/kernel" ]
}

# Find the guest kernel: the newest installed cloud kernel whose modules
# are present (or, with E2E_KERNEL_SUITE, the one fetched from that
# suite).
e2e_find_kernel ()
{
  local k ver
  E2E_KERNEL= E2E_KVER= E2E_MODROOT=/lib/modules
  if [ -n "${E2E_KERNEL_SUITE:-}" ]; then
    e2e_fetch_kernel "$E2E_KERNEL_SUITE"
    return
  fi
  for k in $(ls -1 /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V); do
    ver=${k#/boot/vmlinuz-}
    if [ -r "$k" ] && [ -d "/lib/modules/$ver/kernel" ]; then
      E2E_KERNEL=$k E2E_KVER=$ver
    fi
  done
  [ -n "$E2E_KERNEL" ]
}

# What every guest needs: a static busybox, the cache directory and the
# guest kernel (E2E_KERNEL, E2E_KVER).  Exits 77 with the reason when
# something is missing.
e2e_init_kernel ()
{
  [ -x /bin/busybox ] && file_is_static /bin/busybox \
    || e2e_skip "static /bin/busybox not found (package busybox-static)"
  E2E_CACHE_DIR=${E2E_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ext4lazy-e2e}
  mkdir -p "$E2E_CACHE_DIR" || e2e_skip "cannot create $E2E_CACHE_DIR"
  if [ -n "${E2E_KERNEL_SUITE:-}" ]; then
    e2e_find_kernel \
      || e2e_skip "cannot fetch linux-image-cloud-amd64 from Debian's $E2E_KERNEL_SUITE"
    e2e_log "guest kernel $E2E_KVER, fetched from $E2E_KERNEL_SUITE"
  else
    e2e_find_kernel \
      || e2e_skip "no /boot/vmlinuz-*-cloud-amd64 with modules (package linux-image-cloud-amd64)"
  fi
}

# Check every prerequisite, choose the server, create the scratch directory
# and the exit trap.  Exits 77 with the reason when something is missing.
e2e_init ()
{
  local c
  [ "$(id -u)" = 0 ] || e2e_skip "needs root (loop devices)"
  for c in qemu-system-x86_64 nbdkit losetup mke2fs e2fsck resize2fs \
           debugfs ldd gzip timeout flock sha256sum; do
    command -v "$c" >/dev/null 2>&1 || e2e_skip "$c not found"
  done
  e2e_init_kernel
  nbdkit --dump-plugin file >/dev/null 2>&1 || e2e_skip "nbdkit file plugin missing"
  if [ "${E2E_GUEST_NBD:-0}" = 1 ]; then
    command -v nbd-client >/dev/null 2>&1 \
      || e2e_skip "nbd-client not found (package nbd-client)"
    [ -n "$(e2e_find_module nbd)" ] \
      || e2e_skip "module nbd not found for $E2E_KVER"
  fi
  nbdkit --filter=log null --dump-plugin >/dev/null 2>&1 \
    || e2e_skip "nbdkit log filter missing"

  if [ -n "${E2E_PLUGIN:-}" ]; then
    E2E_PLUGIN_SPEC=$E2E_PLUGIN
  elif [ -n "${EXT4LAZY_PLUGIN:-}" ]; then
    [ -f "$EXT4LAZY_PLUGIN" ] \
      || e2e_skip "plugin $EXT4LAZY_PLUGIN not built"
    E2E_PLUGIN_SPEC=$EXT4LAZY_PLUGIN
  else
    e2e_skip "set EXT4LAZY_PLUGIN (or E2E_PLUGIN=file to test the harness)"
  fi
  if [ "${E2E_GUEST_NBD:-0}" = 1 ]; then
    E2E_PLUGIN_FILE=$(e2e_plugin_file "$E2E_PLUGIN_SPEC")
    [ -f "$E2E_PLUGIN_FILE" ] \
      || e2e_skip "no plugin file for $E2E_PLUGIN_SPEC to run in the guest"
  fi

  E2E_TMP=$(mktemp -d "${TMPDIR:-/tmp}/ext4lazy-e2e.XXXXXX") \
    || e2e_fail "mktemp"
  trap e2e_cleanup EXIT
  trap 'exit 1' INT TERM HUP
  e2e_build_guest
  e2e_build_initrd
}

file_is_static ()
{
  ! ldd "$1" >/dev/null 2>&1
}

# The static guest helper: $E2E_GUEST if given, else compiled into the
# cache from tests/e2e/guest/e2e-guest.c.
e2e_build_guest ()
{
  local src=$E2E_SRCDIR/guest/e2e-guest.c out
  if [ -n "${E2E_GUEST:-}" ]; then
    [ -x "$E2E_GUEST" ] || e2e_skip "E2E_GUEST=$E2E_GUEST is not executable"
    file_is_static "$E2E_GUEST" || e2e_skip "E2E_GUEST is not static"
    return
  fi
  out=$E2E_CACHE_DIR/e2e-guest-$(sha256sum "$src" | cut -c1-16)
  if [ ! -x "$out" ]; then
    "${CC:-cc}" -static -O2 -std=c17 -D_GNU_SOURCE -Wall -o "$out.tmp.$$" \
      "$src" 2>"$E2E_TMP/cc.log" \
      || e2e_skip "cannot build a static guest helper (static libc, package libc6-dev): $(head -n 3 "$E2E_TMP/cc.log")"
    mv -f "$out.tmp.$$" "$out"
  fi
  E2E_GUEST=$out
}

# Copy the libraries ldd names for FILE (a program or a shared object)
# into ROOT, at the paths ldd gives.
e2e_copy_libs ()
{
  local root=$1 file=$2 lib
  for lib in $(ldd "$file" | grep -o '/[^ ]*'); do
    [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
}

# Copy a dynamic program and the libraries ldd names for it into ROOT.
e2e_copy_with_libs ()
{
  local root=$1 prog=$2 dest=$3
  install -D -m 0755 "$(command -v "$prog")" "$root$dest/$prog"
  e2e_copy_libs "$root" "$(command -v "$prog")"
}

# The file of module NAME for the guest kernel (empty if there is none).
e2e_find_module ()
{
  find "$E2E_MODROOT/$E2E_KVER/kernel" -name "$1.ko*" | head -n 1
}

# The shared object of nbdkit plugin SPEC: SPEC itself when it is a path,
# else nbdkit-SPEC-plugin.so in nbdkit's plugin directory.
e2e_plugin_file ()
{
  case $1 in
    */*) echo "$1" ;;
    *) echo "$(nbdkit --dump-config | sed -n 's/^plugindir=//p')/nbdkit-$1-plugin.so" ;;
  esac
}

# How the guest's nbdkit names the plugin under test (the initrd holds it
# in nbdkit's plugin directory): NAME for nbdkit-NAME-plugin.so, else its
# path.
e2e_guest_plugin ()
{
  local b
  b=$(basename "$E2E_PLUGIN_FILE")
  case $b in
    nbdkit-*-plugin.so) b=${b#nbdkit-}; echo "${b%-plugin.so}" ;;
    *) echo "$E2E_NBDKIT_PLUGINDIR/$b" ;;
  esac
}

# Build the initrd (busybox, modules, e2fsprogs, the helper, init.sh) once
# per set of inputs, into the cache; sets E2E_INITRD.  With
# E2E_GUEST_NBD=1 it also holds nbdkit, its log and truncate filters, the plugin under
# test (in nbdkit's plugin directory), nbd-client, nbd.ko and, when
# EXT4LAZYCTL names it, ext4lazyctl, with the libraries ldd lists for each.
e2e_build_initrd ()
{
  local key root m f applet kind=initrd filterdir
  local mods="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev
              virtio_pci virtio_blk libcrc32c crc32c-intel"
  local -a inputs=("$E2E_SRCDIR/init.sh" "$E2E_GUEST" /bin/busybox
                   "$(command -v mke2fs)" "$(command -v resize2fs)"
                   "$(command -v e2fsck)")
  if [ "${E2E_GUEST_NBD:-0}" = 1 ]; then
    kind=initrd-nbd
    mods+=" nbd"
    E2E_NBDKIT_PLUGINDIR=$(nbdkit --dump-config | sed -n 's/^plugindir=//p')
    filterdir=$(nbdkit --dump-config | sed -n 's/^filterdir=//p')
    inputs+=("$(command -v nbdkit)" "$filterdir/nbdkit-log-filter.so"
             "$filterdir/nbdkit-truncate-filter.so"
             "$E2E_PLUGIN_FILE" "$(command -v nbd-client)")
    [ -x "${EXT4LAZYCTL:-}" ] && inputs+=("$EXT4LAZYCTL")
  fi
  key=$( { echo "$E2E_KVER $kind $(basename "${E2E_PLUGIN_FILE:-}")"
           cat "${inputs[@]}"; } | sha256sum | cut -c1-16)
  E2E_INITRD=$E2E_CACHE_DIR/$kind-$key.cpio.gz
  exec 9>"$E2E_CACHE_DIR/lock"
  flock 9
  if [ ! -s "$E2E_INITRD" ]; then
    e2e_log "building $kind for $E2E_KVER"
    root=$E2E_TMP/initrd
    mkdir -p "$root"/{bin,usr/sbin,lib/modules,etc,proc,sys,dev,tmp,mnt}
    install -m 0755 /bin/busybox "$root/bin/busybox"
    for applet in $(/bin/busybox --list); do
      case $applet in
        busybox|mke2fs|mkfs.ext2|e2fsck|fsck|resize2fs|nbd-client) ;;
        *) ln -sf busybox "$root/bin/$applet" ;;
      esac
    done
    for m in $mods; do
      f=$(e2e_find_module "$m")
      if [ -z "$f" ]; then
        # Built into this kernel (newer ones build virtio in), or only
        # an accelerated checksum that newer kernels renamed or merged.
        grep -q "/${m//-/[-_]}\.ko\$" "$E2E_MODROOT/$E2E_KVER/modules.builtin" 2>/dev/null &&
          continue
        # The 7.x packages ship no modules.builtin: no file is built in.
        [ -e "$E2E_MODROOT/$E2E_KVER/modules.builtin" ] || continue
        case $m in libcrc32c|crc32c-intel) continue ;; esac
        e2e_skip "module $m not found for $E2E_KVER"
      fi
      case $f in
        *.ko) cp "$f" "$root/lib/modules/$m.ko" ;;
        *.ko.xz) xz -dc "$f" >"$root/lib/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$f" >"$root/lib/modules/$m.ko" ;;
        *.ko.gz) gzip -dc "$f" >"$root/lib/modules/$m.ko" ;;
        *) e2e_skip "cannot unpack $f" ;;
      esac || e2e_skip "cannot unpack $f"
    done
    for f in mke2fs e2fsck resize2fs; do
      e2e_copy_with_libs "$root" "$f" /usr/sbin
    done
    if [ "${E2E_GUEST_NBD:-0}" = 1 ]; then
      # nbdkit finds plugins and filters by name in the directories it was
      # built with: the same paths in the guest.
      e2e_copy_with_libs "$root" nbdkit "$(dirname "$(command -v nbdkit)")"
      e2e_copy_with_libs "$root" nbd-client /usr/sbin
      for f in "$filterdir"/nbdkit-{log,truncate}-filter.so; do
        install -D -m 0755 "$f" "$root$f"
        e2e_copy_libs "$root" "$f"
      done
      f=$E2E_NBDKIT_PLUGINDIR/$(basename "$E2E_PLUGIN_FILE")
      install -D -m 0755 "$E2E_PLUGIN_FILE" "$root$f"
      e2e_copy_libs "$root" "$E2E_PLUGIN_FILE"
      if [ -x "${EXT4LAZYCTL:-}" ]; then
        install -D -m 0755 "$EXT4LAZYCTL" "$root/usr/bin/ext4lazyctl"
        e2e_copy_libs "$root" "$EXT4LAZYCTL"
      fi
    fi
    [ -f /etc/mke2fs.conf ] && cp /etc/mke2fs.conf "$root/etc/"
    install -m 0755 "$E2E_GUEST" "$root/bin/e2e-guest"
    install -m 0755 "$E2E_SRCDIR/init.sh" "$root/init"
    (cd "$root" && find . | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null) \
      | gzip -1 >"$E2E_INITRD.tmp.$$" || e2e_fail "cannot build initrd"
    mv -f "$E2E_INITRD.tmp.$$" "$E2E_INITRD"
    rm -rf "$root"
    # Every build of the plugin makes a new one: keep the newest only.
    if [ "$kind" = initrd-nbd ]; then
      for f in "$E2E_CACHE_DIR"/initrd-nbd-*.cpio.gz; do
        [ "$f" = "$E2E_INITRD" ] || rm -f "$f"
      done
    fi
  fi
  exec 9>&-
}

# Make a sparse file of SIZE (e.g. 300M).
e2e_image ()
{
  rm -f "$1"
  truncate -s "$2" "$1" || e2e_fail "truncate $1"
}

# Attach IMG to a loop device with direct I/O; sets E2E_LOOP to it.  (Not
# meant for $(...): the device must be recorded for the exit trap.)
e2e_loop_attach ()
{
  E2E_LOOP=$(losetup -f --show --direct-io=on "$1") \
    || e2e_skip "losetup failed on $1"
  E2E_LOOPS+=("$E2E_LOOP")
}

e2e_loop_detach ()
{
  local keep=() d
  losetup -d "$1" || e2e_fail "losetup -d $1"
  for d in "${E2E_LOOPS[@]}"; do [ "$d" = "$1" ] || keep+=("$d"); done
  E2E_LOOPS=("${keep[@]}")
}

# Store operations and sectors written so far on loop device DEV:
# "OPS SECTORS", where OPS counts write requests and flush requests
# (fields 5 and 16 of /sys/block/loopN/stat: the kernel counts a flush
# apart from the writes) and SECTORS is field 7.  Dirty page cache of the
# device is pushed to it first, so that what the server has written is
# counted when it wrote it, not when the host's writeback gets to it.
e2e_loop_stat ()
{
  blockdev --flushbufs "$1" 2>/dev/null
  awk '{ print $5 + (NF >= 16 ? $16 : 0), $7 }' "/sys/block/$(basename "$1")/stat"
}

# Start nbdkit serving BACKING (a file or a loop device) with the chosen
# plugin (or PLUGIN given as $2: "default" for the one under test), behind
# the log filter, on a Unix socket.  Sets E2E_SOCK, E2E_NBDLOG,
# E2E_NBDKIT_PID.  NAME labels the files in the scratch directory.
e2e_nbdkit_start ()
{
  local name=$1 plugin=$2 backing=$3
  local -a extra=()
  [ "$plugin" = default ] && plugin=$E2E_PLUGIN_SPEC
  if [ "$plugin" = "$E2E_PLUGIN_SPEC" ] && [ -n "${E2E_PLUGIN_ARGS:-}" ]; then
    read -r -a extra <<<"$E2E_PLUGIN_ARGS"
  fi
  E2E_SOCK=$E2E_TMP/$name.sock
  E2E_NBDLOG=$E2E_TMP/$name.nbdlog
  rm -f "$E2E_SOCK" "$E2E_NBDLOG"
  nbdkit -f --exit-with-parent -U "$E2E_SOCK" --filter=log \
    "$plugin" "$backing" "${extra[@]}" logfile="$E2E_NBDLOG" \
    2>"$E2E_TMP/$name.nbdkit.err" &
  E2E_NBDKIT_PID=$!
  E2E_PIDS+=("$E2E_NBDKIT_PID")
  e2e_wait_socket "$E2E_SOCK" "$E2E_NBDKIT_PID" "$E2E_TMP/$name.nbdkit.err" \
    "nbdkit ($plugin $backing)"
}

# e2e_listening SOCK: does a process listen on the Unix socket SOCK?  A
# server binds it (the file appears) a moment before it listens, and a
# connection in between is refused.
e2e_listening ()
{
  local _num _ref _proto flags _rest path
  while read -r _num _ref _proto flags _rest _rest _rest path; do
    # Flags 00010000: __SO_ACCEPTCON, a listening socket.
    [ "$path" = "$1" ] && (( 16#$flags & 0x10000 )) && return 0
  done < /proc/net/unix
  return 1
}

# e2e_wait_socket SOCK PID LOG WHAT: wait (30 s at most) for the server
# PID to listen on its socket SOCK; if it exits or never does, print its
# LOG and fail, saying WHAT did not start.
e2e_wait_socket ()
{
  local sock=$1 pid=$2 log=$3 what=$4 i
  for ((i = 0; i < 300; i++)); do
    [ -S "$sock" ] && e2e_listening "$sock" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$log" >&2
  e2e_fail "$what did not start"
}

# A Ceph RBD image served over NBD by qemu-storage-daemon's rbd driver
# (librbd with its cache off: cache.direct=on), on a Unix socket, for
# tests that put an NBD server in front of it.  e2e_qsd_start NAME
# POOL/IMAGE CEPH_CONF sets E2E_QSD_SOCK and E2E_QSD_PID; e2e_qsd_stop
# ends it (SIGTERM: it flushes and closes the image) and waits.
e2e_qsd_start ()
{
  local name=$1 spec=$2 conf=$3
  E2E_QSD_SOCK=$E2E_TMP/$name.qsd.sock
  rm -f "$E2E_QSD_SOCK"
  qemu-storage-daemon \
    --blockdev "driver=rbd,node-name=rbd0,pool=${spec%%/*},image=${spec#*/},conf=$conf,cache.direct=on" \
    --nbd-server "addr.type=unix,addr.path=$E2E_QSD_SOCK" \
    --export type=nbd,id=exp0,node-name=rbd0,name=,writable=on \
    </dev/null >"$E2E_TMP/$name.qsd.log" 2>&1 &
  E2E_QSD_PID=$!
  E2E_PIDS+=("$E2E_QSD_PID")
  e2e_wait_socket "$E2E_QSD_SOCK" "$E2E_QSD_PID" "$E2E_TMP/$name.qsd.log" \
    "qemu-storage-daemon ($spec)"
}

e2e_qsd_stop ()
{
  local rc=0
  [ -n "$E2E_QSD_PID" ] || return 0
  e2e_term "$E2E_QSD_PID" || rc=$?
  E2E_QSD_PID=
  [ "$rc" = 0 ] || { e2e_log "qemu-storage-daemon exited with status $rc"; return 1; }
}

# e2e_rbd_import NAME CEPH_CONF FILE POOL/IMAGE: a new RBD image holding
# FILE.  e2e_rbd_take NAME CEPH_CONF POOL/IMAGE FILE: the image's content
# into FILE, then the image removed.  rbd's output goes to
# $E2E_TMP/NAME.rbd, shown when it fails.
e2e_rbd_import ()
{
  rbd --conf "$2" import --no-progress "$3" "$4" >>"$E2E_TMP/$1.rbd" 2>&1 \
    || { cat "$E2E_TMP/$1.rbd" >&2; e2e_fail "$1: rbd import"; }
}

e2e_rbd_take ()
{
  rm -f "$4"
  rbd --conf "$2" export --no-progress "$3" "$4" >>"$E2E_TMP/$1.rbd" 2>&1 \
    && rbd --conf "$2" rm --no-progress "$3" >>"$E2E_TMP/$1.rbd" 2>&1 \
    || { cat "$E2E_TMP/$1.rbd" >&2; e2e_fail "$1: rbd export, rm"; }
}

# e2e_term PID: SIGTERM a server this script started, wait for it to
# exit and forget it; returns its exit status.
e2e_term ()
{
  local pid=$1 rc
  kill "$pid" 2>/dev/null
  wait "$pid"
  rc=$?
  e2e_forget_pid "$pid"
  return "$rc"
}

# What the OSD behind admin socket ASOK has been asked to write so far:
# "OP_W OP_IN_BYTES OP_RW" (its perf counters osd.op_w, osd.op_in_bytes,
# osd.op_rw), read from the socket itself: a sample takes tens of
# milliseconds, where "ceph daemon osd.N perf dump" starts the ceph CLI.
e2e_osd_stat ()
{
  /usr/bin/python3 - "$1" <<'PY'
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"prefix": "perf dump"}\0')
def take(n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            sys.exit("e2e_osd_stat: short answer from " + sys.argv[1])
        buf += chunk
    return buf
osd = json.loads(take(struct.unpack(">I", take(4))[0]))["osd"]
print(osd["op_w"], osd["op_in_bytes"], osd["op_rw"])
PY
}

# Stop the server started last and wait for it to exit (a server writes
# back whatever it holds before it exits).
e2e_nbdkit_stop ()
{
  local rc=0
  [ -n "$E2E_NBDKIT_PID" ] || return 0
  e2e_term "$E2E_NBDKIT_PID" || rc=$?
  E2E_NBDKIT_PID=
  # SIGTERM ends nbdkit with status 0 (or 143 if it was killed before
  # installing its handler); anything else is a crash.
  case $rc in
    0|143) return 0 ;;
    *) e2e_log "nbdkit exited with status $rc"; return 1 ;;
  esac
}

# Boot the guest against the current server.  NAME labels the console log
# ($E2E_TMP/NAME.console, in E2E_CONSOLE); the rest are e2e.KEY=VALUE
# kernel parameters (workload=..., mountopts=..., ...).  With E2E_DISK set
# to a file or block device, the guest's disk is that, a plain virtio disk,
# instead of qemu's NBD client on $E2E_SOCK.  Returns 0 when the guest
# reported "done ok".
e2e_boot ()
{
  local name=$1 kv append pid rc t0 t1 drive
  shift
  append="console=ttyS0 panic=-1 quiet"
  for kv in "$@"; do append+=" e2e.$kv"; done
  drive="file=nbd+unix:///?socket=$E2E_SOCK,format=raw,if=virtio,cache=none"
  [ -n "${E2E_DISK:-}" ] && drive="file=$E2E_DISK,format=raw,if=virtio,cache=none"
  E2E_CONSOLE=$E2E_TMP/$name.console
  t0=$(date +%s)
  timeout -k 10 "${E2E_BOOT_TIMEOUT:-900}" \
    qemu-system-x86_64 -accel tcg -cpu "${E2E_QEMU_CPU:-max}" -m 512 -smp 1 \
      -nographic -no-reboot -nodefaults -serial stdio -monitor none \
      -kernel "$E2E_KERNEL" -initrd "$E2E_INITRD" -append "$append" \
      -drive "$drive" \
      </dev/null >"$E2E_CONSOLE" 2>&1 &
  pid=$!
  E2E_PIDS+=("$pid")
  wait "$pid"
  rc=$?
  e2e_forget_pid "$pid"
  t1=$(date +%s)
  grep -ao 'E2E-RESULT:.*' "$E2E_CONSOLE" | tr -d '\r' | sed "s/^/[$name] /" >&2
  e2e_log "$name: guest ran $((t1 - t0)) s (qemu status $rc)"
  [ "$rc" = 124 ] && e2e_log "$name: guest timed out"
  if ! grep -aq 'E2E-RESULT: done ok' "$E2E_CONSOLE"; then
    e2e_log "$name: console tail:"
    tail -n 30 "$E2E_CONSOLE" | tr -d '\r' >&2
    return 1
  fi
  return 0
}

# Value of KEY= in the last E2E-RESULT line starting with WHAT (e.g.
# "verify", "files") in the last console.
e2e_result ()
{
  grep -a "E2E-RESULT: $1 " "$E2E_CONSOLE" | tail -n 1 | tr -d '\r' \
    | grep -o "$2=[^ ]*" | cut -d= -f2
}

# Measurement window.  In the background, follow the nbdkit log LOG for the
# guest's reads of the marker blocks at byte offsets START and END and, as
# soon as each appears, record the loop device's write counters into OUT
# ("start REQS SECTORS" / "end REQS SECTORS").  Precision: the log line is
# written when the request reaches the filter, tail follows it by inotify,
# and the guest idles for a second after each marker, so the cut lands
# within tens of milliseconds of the marker; writes the host has buffered
# for the device are pushed to it at each cut (e2e_loop_stat, or the
# function named by a sixth argument, which may print more counters).
e2e_window_watch ()
{
  e2e_watch_lines "$1" "$E2E_NBDKIT_PID" \
    "$(printf ' Read id=[0-9]* offset=0x%x count=' "$3")" \
    "$(printf ' Read id=[0-9]* offset=0x%x count=' "$4")" \
    "$2" "$5" "${6:-e2e_loop_stat}"
}

# The same window when the server runs in the guest (E2E_GUEST_NBD=1):
# the guest prints "E2E-MARK: OFFSET" on its console after each marker
# read, once it has pushed the writes its server buffered to the virtio
# disk.  CONSOLE is the console log of the boot to come
# ($E2E_TMP/NAME.console); the other arguments are e2e_window_watch's.  The
# watcher ends with the test if a marker never comes.
e2e_console_window_watch ()
{
  e2e_watch_lines "$1" "$$" "E2E-MARK: $3\\>" "E2E-MARK: $4\\>" \
    "$2" "$5" "${6:-e2e_loop_stat}"
}

# e2e_watch_lines FILE PID START-RE END-RE DEV OUT STAT: the watcher behind
# both: follow FILE (until PID exits) for a line matching START-RE, then
# END-RE, and append "start|end $(STAT DEV) TIME" to OUT at each.
e2e_watch_lines ()
{
  local log=$1 pid=$2 pstart=$3 pend=$4 dev=$5 out=$6 stat=$7
  (
    set +e
    wait_line () {
      local tailpid
      exec 3< <(exec tail -n +1 -F --pid="$pid" "$log" 2>/dev/null)
      tailpid=$!
      grep -m 1 -q -a -e "$1" <&3 || exit 1
      kill "$tailpid" 2>/dev/null
      exec 3<&-
    }
    wait_line "$pstart"
    echo "start $("$stat" "$dev") $(date +%s.%N)" >>"$out"
    wait_line "$pend"
    echo "end $("$stat" "$dev") $(date +%s.%N)" >>"$out"
  ) &
  E2E_PIDS+=("$!")
  E2E_WATCH_PID=$!
}

# An awk function for nbdkit's log filter lines: hex("0x1f") is 31.
E2E_AWK_HEX='
    function hex(x,   i, v) {
      x = tolower(substr(x, 3)); v = 0
      for (i = 1; i <= length(x); i++)
        v = v * 16 + index("0123456789abcdef", substr(x, i, 1)) - 1
      return v
    }'

# Sum of sectors the client wrote (NBD Write requests seen by the log
# filter) between the marker reads at START and END, from nbdkit log LOG.
e2e_log_write_sectors ()
{
  local s e
  s=$(printf 'offset=0x%x' "$1")
  e=$(printf 'offset=0x%x' "$2")
  awk -v s="$s" -v e="$e" "$E2E_AWK_HEX"'
    / Read id=/ && index($0, s " ") { on = 1; next }
    / Read id=/ && index($0, e " ") { on = 0; exit }
    on && / Write id=/ {
      for (i = 1; i <= NF; i++)
        if ($i ~ /^count=0x/) n += hex(substr($i, 7))
    }
    END { printf "%d\n", n / 512 }' "$3"
}
