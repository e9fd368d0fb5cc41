#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# quickstart.sh --- install what is missing, build, then serve or test.
#
#   deploy/quickstart.sh serve [IMAGE|DEVICE] [nbdkit plugin params...]
#       Serve IMAGE (default: a small demo ext4 image made on the spot)
#       on the Unix socket ext4lazy.sock in a directory of its own, mode
#       0700 ($XDG_RUNTIME_DIR/ext4lazy-quickstart, or without it
#       /run/ext4lazy-quickstart; the paths are printed), or, with
#       EXT4LAZY_TCP=1, on TCP port 10809 of localhost.  The demo image is
#       build/demo.img, or EXT4LAZY_DEMO_IMG; it has 4 KiB blocks and 100
#       small files.
#   deploy/quickstart.sh test
#       Run every test: unit, integration and end-to-end, then the unit
#       and integration suites again under ASan+UBSan, and the fuzzers
#       for a few seconds each; then the build and the unit and
#       integration suites in a root of the other Debian release.
#   deploy/quickstart.sh test-release [MESON-TEST-ARGS...]
#       The end-to-end suite (or the tests named, e.g. e2e-mount) in a
#       root of the other Debian release with its qemu, kernel and
#       nbd-client, as if the host ran that release (docs/debian.md).
#
# Run as root on Debian 12 or 13 (packages are installed with apt-get).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
# Debian's python3 has the libnbd bindings that nbdsh needs.
export PATH=/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin:$PATH

build_pkgs=(gcc pkg-config meson ninja-build nbdkit nbdkit-plugin-dev
            libext2fs-dev liburing-dev libnbd-dev librbd-dev zlib1g-dev
            e2fsprogs libnl-genl-3-dev)
# Names that exist on Debian 12 and 13 alike (nbdfuse is a name that
# libnbd-bin provides on both).
test_pkgs=(libnbd-dev libnbd-bin python3 python3-libnbd libcriterion-dev
           libc6-dev fio qemu-utils nbdfuse fdisk dosfstools valgrind
           util-linux qemu-system-x86 linux-image-cloud-amd64
           busybox-static clang-format-19 debhelper dpkg-dev fakeroot systemd
           python3-yaml python3-prometheus-client clang libclang-rt-dev
           nbd-client ceph-mon ceph-osd ceph-common uuid-runtime xz-utils
           mmdebstrap gnutls-bin build-essential iproute2)

# The names installed: each installed package's own and those it
# provides (a name only provided, such as nbdfuse on Debian 12, is
# installed when its provider is).
installed_names () {
  dpkg-query -W -f='${db:Status-Status} ${Package},${Provides}\n' 2>/dev/null |
    awk '$1 == "installed" { sub(/^[^ ]* /, ""); gsub(/\([^)]*\)/, "")
                             gsub(/[ ]/, ""); n = split($0, a, ",")
                             for (i = 1; i <= n; i++) if (a[i] != "") print a[i] }'
}

install_missing () {
  local missing=() p
  local -A have=()
  for p in $(installed_names); do have[${p%%:*}]=1; done
  for p in "$@"; do
    [ -n "${have[$p]:-}" ] || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "quickstart: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "quickstart: missing packages and not root: run as root" >&2
    exit 1
  fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# What "serve" builds and serves: build, or the build directory
# EXT4LAZY_BUILD_ROOT names (the tree's tests set it to theirs).
serve_build=${EXT4LAZY_BUILD_ROOT:-$here/build}

build () { # build DIR [meson options...]
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@"
  fi
  meson compile -C "$dir"
}

# Make the demo image: 256 MiB of ext4 with 4 KiB blocks (the block
# size the plugin is tuned for, and the one nbd-client -b 4096 can mount)
# and a few files to read.
demo_image () { # demo_image PATH
  local img=$1 d i
  echo "quickstart: creating a 256 MiB demo ext4 image at $img"
  d=$(mktemp -d)
  for i in $(seq 1 100); do echo "demo file $i" >"$d/file$i.txt"; done
  rm -f "$img"
  truncate -s 256M "$img"
  mkfs.ext4 -q -F -b 4096 -L ext4lazy-demo -d "$d" "$img"
  rm -rf "$d"
}

# The block size for nbd-client -b: the smallest block size of the ext4
# filesystems the plugin finds in IMG (its start-up notices say), capped
# at 4096 (the page size: the kernel mounts nothing larger); 512 when it
# finds none.  Prints "SIZE WHY".
client_block_size () { # client_block_size IMG [PARAM...]
  local img=$1 out bs p
  local -a params=()
  shift
  for p in "$@"; do
    case $p in control=*) ;; *) params+=("$p") ;; esac
  done
  out=$(nbdkit -U - --log=stderr "$serve_build/plugin/nbdkit-ext4lazy-plugin.so" \
          "$img" ${params[@]+"${params[@]}"} --run true 2>&1 </dev/null) || {
    echo "$out" >&2
    echo "quickstart: the plugin cannot serve $img" >&2
    exit 1
  }
  bs=$(sed -n 's/.*notice: filesystem at offset [0-9]*: [^,]*, \([0-9]*\)-byte blocks.*/\1/p' \
         <<<"$out" | sort -n | head -n 1)
  if [ -z "$bs" ]; then
    echo "512 no ext4 filesystem found: the smallest logical block size"
  elif [ "$bs" -gt 4096 ]; then
    echo "4096 $bs-byte ext4 blocks are larger than this kernel's page size: it cannot mount them"
  else
    echo "$bs the filesystem's $bs-byte blocks"
  fi
}

serve () {
  install_missing "${build_pkgs[@]}"
  build "$serve_build" -Dtests=disabled
  # The sockets go in a directory of our own (0700), not in /tmp, where
  # another user could take their names first.
  local dir=${XDG_RUNTIME_DIR:-/run}/ext4lazy-quickstart
  mkdir -m 0700 "$dir" 2>/dev/null || true
  [ -d "$dir" ] && [ ! -L "$dir" ] && [ -O "$dir" ] && chmod 0700 "$dir" ||
    dir=$(mktemp -d)
  local img=${1:-} p ctl=$dir/ext4lazy.ctl ctlcmd bs why
  [ $# -gt 0 ] && shift
  if [ -z "$img" ]; then
    img=${EXT4LAZY_DEMO_IMG:-$serve_build/demo.img}
    [ -f "$img" ] || demo_image "$img"
  fi
  # The control socket, for ext4lazyctl (unless the caller names one).
  for p in "$@"; do
    case $p in control=*) ctl=${p#control=} ;; esac
  done
  read -r bs why < <(client_block_size "$img" "$@")
  set -- control="$ctl" "$@"
  [ "${ctl:0:1}" = / ] || ctl=$PWD/$ctl
  if command -v ext4lazyctl >/dev/null 2>&1; then
    ctlcmd=ext4lazyctl
  else
    ctlcmd=$serve_build/daemon/ext4lazyctl
  fi
  local sock=$dir/ext4lazy.sock
  local -a listen=(-U "$sock")
  local uri="nbd+unix:///?socket=$sock" nbdc="-unix $sock"
  local fuse="--unix $sock" qemu="nbd+unix:///?socket=$sock"
  if [ "${EXT4LAZY_TCP:-0}" = 1 ]; then
    listen=(-i 127.0.0.1 -p 10809)
    uri=nbd://127.0.0.1:10809 nbdc="127.0.0.1 10809"
    fuse="--tcp 127.0.0.1 10809" qemu="nbd://127.0.0.1:10809"
  fi
  cat <<MSG
quickstart: serving $img with ext4lazy on $uri
  nbd-client:  modprobe nbd && nbd-client $nbdc /dev/nbd0 -b $bs
               mount /dev/nbd0 /mnt
               (-b $bs: $why)
  nbdfuse:     mkdir -p $dir/fuse && nbdfuse $dir/fuse/disk $fuse &
               mount -o loop $dir/fuse/disk /mnt
  qemu:        qemu-system-x86_64 ... -drive file=$qemu,format=raw,if=virtio
  inspect:     nbdinfo '$uri'
  watch it:    read a file on /mnt (cat /mnt/file1.txt on the demo), wait
               for the guest's journal commit (5 s), then see the atime held:
               $ctlcmd -s $ctl holds
               $ctlcmd -s $ctl stats
  stop:        umount /mnt && nbd-client -d /dev/nbd0, then Ctrl-C here
               (the held timestamps are written back then)
Stop with Ctrl-C.
MSG
  rm -f "$sock"
  exec nbdkit -f "${listen[@]}" \
    "$serve_build/plugin/nbdkit-ext4lazy-plugin.so" "$img" "$@"
}

# Sum meson's results into one closing line.
summarise () {
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
counts = {}
failed = []
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            for line in f:
                t = json.loads(line)
                r = t.get("result", "")
                counts[r] = counts.get(r, 0) + 1
                if r not in ("OK", "EXPECTEDFAIL", "SKIP"):
                    failed.append(f"{path.split('/')[0]}: {t.get('name', '?')} ({r})")
    except FileNotFoundError:
        pass
ok = counts.get("OK", 0) + counts.get("EXPECTEDFAIL", 0)
for f in failed:
    print(f"failed: {f}")
print(f"{ok} passed, {len(failed)} failed, {counts.get('SKIP', 0)} skipped")
PY
}

# run_tsan DIR: integration tests against DIR's plugin, built with
# -Db_sanitize=thread; nbdkit (not instrumented) gets the TSan runtime
# by LD_PRELOAD (EXT4LAZY_NBDKIT_PRELOAD).  Any report fails the run
# (tests/tsan.supp names a library's own false positives).  The unit
# tests run under TSan in run_tests, not here.
run_tsan () { # run_tsan DIR
  local dir=$1 reports=$here/$1/tsan-reports t st=0 libtsan
  libtsan=$(gcc -print-file-name=libtsan.so)
  rm -rf "$reports"
  mkdir -p "$reports"
  for t in random-io random-io-ext4 flush-fua zero-trim-extents lazy-triggers.py \
           lazy-protocol.py lazy-memory.py lazy-restart.py; do
    echo "tsan: $t"
    (
      export EXT4LAZY_BUILD_ROOT="$here/build"
      export EXT4LAZY_PLUGIN="$here/$dir/plugin/nbdkit-ext4lazy-plugin.so"
      export EXT4LAZYCTL="$here/build/daemon/ext4lazyctl"
      export PYTHONPATH="$here/tests/integration"
      export EXT4LAZY_NBDKIT_PRELOAD="$libtsan"
      export TSAN_OPTIONS="log_path=$reports/tsan exitcode=66 suppressions=$here/tests/tsan.supp"
      case $t in
        random-io) LD_PRELOAD=$libtsan build/tests/integration/test-random-io uring false ;;
        random-io-ext4) LD_PRELOAD=$libtsan build/tests/integration/test-random-io uring false ext4 ;;
        *.py) /usr/bin/python3 "tests/integration/test-$t" ;;
        *) bash "tests/integration/test-$t.sh" ;;
      esac
    ) >"$reports/$t.log" 2>&1 ||
      { echo "tsan: $t failed (see $reports/$t.log)" >&2; st=1; }
  done
  if compgen -G "$reports/tsan.*" >/dev/null; then
    cat "$reports"/tsan.* >&2
    echo "tsan: ThreadSanitizer reports above" >&2
    st=1
  fi
  return $st
}

# Debian 13 (trixie) on a Debian 12 host, or the other way round: the
# other release's root, made with mmdebstrap (variant apt) from the
# mirror the host uses and cached under a key made of its package list
# in the end-to-end tests' default cache (E2E_CACHE_DIR, else
# ~/.cache/ext4lazy-e2e: it outlives a fresh clone of the tree, as each
# CI run is); inside it the tree is built with warnings as errors and
# the unit and integration suites run.
other_release () {
  case $(. /etc/os-release && echo "${VERSION_CODENAME:-}") in
    trixie) echo bookworm ;;
    *) echo trixie ;;
  esac
}

# The Debian mirror of the host's apt sources (deb.debian.org if none).
debian_mirror () {
  local m
  m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
        sed -n 's|^URIs:[[:space:]]*\([^[:space:]]*/debian/\?\)$|\1|p' | head -n 1)
  [ -n "$m" ] ||
    m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
          sed -n 's|^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*/debian/\?\)[[:space:]].*|\2|p' |
          head -n 1)
  echo "${E2E_DEBIAN_MIRROR:-${m:-http://deb.debian.org/debian}}"
}

# What only the end-to-end suite needs: its guests' qemu, kernel and
# busybox, the kernel's NBD client, and mmdebstrap for e2e-systemd's
# guest root.
e2e_pkgs=(qemu-system-x86 linux-image-cloud-amd64 busybox-static nbd-client
          mmdebstrap)

# The packages of that root: the lists above less what only the host's
# end-to-end, fuzzing, valgrind and style runs use.  With FLAVOUR e2e,
# also the end-to-end suite's (a root of its own: see make_release_root).
release_root_pkgs () { # release_root_pkgs [FLAVOUR]
  local p
  for p in "${build_pkgs[@]}" "${test_pkgs[@]}"; do
    case " ${e2e_pkgs[*]} clang libclang-rt-dev valgrind fio clang-format-19 " in
      *" $p "*) ;;
      *) echo "$p" ;;
    esac
  done | sort -u
  [ "${1:-}" != e2e ] || printf '%s\n' "${e2e_pkgs[@]}"
}

# make_release_root SUITE [FLAVOUR]: the cached root of SUITE; prints its
# path, root-SUITE-KEY (or, with FLAVOUR e2e, root-SUITE-e2e-KEY), KEY
# being 16 hex digits of a hash of its package list.  A new root removes
# the older ones of its own name only, so that the two flavours, each
# made once, both stay.
make_release_root () {
  local suite=$1 flavour=${2:-} cache pkgs key name root mirror f
  cache=${E2E_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ext4lazy-e2e}
  mkdir -p "$cache"
  pkgs=$(release_root_pkgs "$flavour" | sort -u | paste -sd, -)
  key=$(echo "$suite $pkgs" | sha256sum | cut -c1-16)
  name=root-$suite${flavour:+-$flavour}
  root=$cache/$name-$key
  exec 8>"$cache/$name.lock"
  flock 8
  if [ ! -x "$root/usr/bin/meson" ]; then
    mirror=$(debian_mirror)
    echo "quickstart: making a Debian $suite root with mmdebstrap from $mirror" >&2
    rm -rf "$root.tmp"
    # In a mount namespace of its own: nothing it mounts outlives it.
    unshare --mount --propagation private -- \
    mmdebstrap --quiet --variant=apt --mode=root --include="$pkgs" \
      "$suite" "$root.tmp" "$mirror" >&2 || { rm -rf "$root.tmp"; return 1; }
    rm -rf "$root.tmp"/var/cache/apt/archives/*.deb "$root.tmp"/var/lib/apt/lists/*
    mv "$root.tmp" "$root"
    for f in "$cache/$name"-????????????????; do
      [ "$f" = "$root" ] || rm -rf "$f"
    done
  fi
  exec 8>&-
  echo "$root"
}

# run_in_release_root SUITE DIR [FLAVOUR [MESON-TEST-ARGS...]]: build DIR
# in SUITE's root (-Dwerror=true) and run the unit and integration suites
# there, or, with FLAVOUR e2e, in the root that also has the end-to-end
# suite's packages, the end-to-end suite (or what MESON-TEST-ARGS name);
# the log is DIR/meson-logs/SUITE.json (SUITE-e2e.json).  The root is the
# lower layer of an overlay, so that it stays as made; /tmp and /var/tmp
# are fresh directories, /etc/resolv.conf the host's (e2e-systemd makes
# its guest root from the mirror).  The run has its own mount and PID
# namespaces: when it ends, its mounts go and any process it left is
# killed.
run_in_release_root () {
  local suite=$1 dir=$2 flavour=${3:-} root scratch st=0 logbase=$1
  local -a targs=(--suite unit --suite integration)
  shift $(($# < 3 ? $# : 3))
  if [ "$flavour" = e2e ]; then
    logbase=$suite-e2e targs=(--suite e2e)
    [ $# -eq 0 ] || targs=("$@")
  fi
  root=$(make_release_root "$suite" "$flavour") || {
    echo "quickstart: no Debian $suite root" >&2
    return 1
  }
  # A build dir configured in another root starts again.
  [ "$(cat "$dir/.root" 2>/dev/null)" = "$root" ] || rm -rf "$dir"
  mkdir -p "$dir"
  echo "$root" >"$dir/.root"
  scratch=$(mktemp -d /var/tmp/ext4lazy-"$suite".XXXXXX)
  mkdir -p "$scratch"/{upper,work,merged,tmp,vartmp}
  chmod 1777 "$scratch"/tmp "$scratch"/vartmp
  unshare --mount --propagation private --pid --fork -- /bin/bash -euc '
    root=$1 s=$2 src=$3 m=$2/merged
    shift 3
    mount -t overlay overlay \
      -o "lowerdir=$root,upperdir=$s/upper,workdir=$s/work" "$m"
    mount -t proc proc "$m/proc"
    mount --rbind /dev "$m/dev"
    mount --rbind /sys "$m/sys"
    mount --bind "$s/tmp" "$m/tmp"
    mount --bind "$s/vartmp" "$m/var/tmp"
    rm -f "$m/etc/resolv.conf"
    cp -L /etc/resolv.conf "$m/etc/resolv.conf" 2>/dev/null || true
    mkdir -p "$m$src"
    mount --bind "$src" "$m$src"
    exec chroot "$m" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin /bin/bash -euc "
        src=\$1 dir=\$2 logbase=\$3
        shift 3
        cd \$src
        echo \"quickstart: in Debian \$(cat /etc/debian_version): \$(gcc --version | head -n 1)\"
        [ -f \$dir/build.ninja ] || meson setup \$dir -Dtests=enabled -Dwerror=true
        meson compile -C \$dir
        meson test -C \$dir --print-errorlogs --num-processes 2 \
          --logbase \$logbase \"\$@\"" bash "$src" "$@"
  ' bash "$root" "$scratch" "$here" "$here/$dir" "$logbase" "${targs[@]}" || st=1
  rm -rf "$scratch"
  return $st
}

# test-release [MESON-TEST-ARGS...]: the end-to-end suite (or the tests
# named) in a root of the other Debian release that also has its qemu,
# cloud kernel, busybox-static, nbd-client and mmdebstrap (a root of its
# own, root-SUITE-e2e-KEY), built in build-SUITE-e2e: as if the host ran
# that release.  Not part of "test": its guests take about 20 minutes.
run_release_e2e () {
  local other st=0
  install_missing mmdebstrap
  other=$(other_release)
  run_in_release_root "$other" "build-$other-e2e" e2e "$@" || st=1
  summarise "build-$other-e2e/meson-logs/$other-e2e.json" || st=1
  return $st
}

run_tests () {
  install_missing "${build_pkgs[@]}" "${test_pkgs[@]}"
  local status=0
  build build -Dtests=enabled -Dwerror=true
  meson test -C build --print-errorlogs --num-processes 2 || status=1

  # The plugin builds, and says what it lacks, without libnbd and librbd.
  build build-min -Dtests=disabled -Dnbd=disabled -Drbd=disabled -Dwerror=true
  local min=build-min/plugin/nbdkit-ext4lazy-plugin.so out
  out=$(nbdkit "$min" --dump-plugin 2>&1 || true)
  grep -qx 'ext4lazy_rbd=no' <<<"$out" || { echo "build-min: rbd= not reported absent" >&2; status=1; }
  out=$(nbdkit "$min" rbd=rbd/x 2>&1 || true)
  grep -q 'built without librbd' <<<"$out" || { echo "build-min: rbd= not refused" >&2; status=1; }

  # Unit tests under valgrind (leaks and memory errors).  classify,
  # layout, journal and jbd2 run millions of synthetic cases or many
  # debugfs images: LSan covers them below.
  meson test -C build --setup valgrind --print-errorlogs --num-processes 2 \
    backend control engine engine-fence engine-flight ext2io hold jlog log nbdremote partition \
    rbdlib reconnect record storelock \
    relayout stats vector writeback || status=1

  # The unit tests again, sanitised (ASan+UBSan+LSan).  (Integration
  # tests cannot run the plugin under ASan: see tests/meson.build.)
  build build-asan -Dtests=enabled -Dwerror=true -Db_sanitize=address,undefined \
    -Dbuildtype=debug -Db_lundef=false
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  LSAN_OPTIONS=suppressions=$here/tests/lsan.supp \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    meson test -C build-asan --print-errorlogs --num-processes 2 \
      --logbase unit --suite unit || status=1

  # ThreadSanitizer: the unit tests built with it, then the plugin driven
  # by the integration tests that run requests on many threads (run_tsan).
  # Criterion's runner cannot start under TSan (its BoxFort arena lies in
  # the range TSan keeps for its shadow, Snaipe/Criterion#274), so this
  # build runs the unit tests through a small stand-in runner
  # (tests/unit/crlite.h); any report fails the test.
  build build-tsan -Dtests=enabled -Dwerror=true -Db_sanitize=thread \
    -Dbuildtype=debug -Db_lundef=false
  TSAN_OPTIONS="halt_on_error=1 suppressions=$here/tests/tsan.supp" \
    meson test -C build-tsan --print-errorlogs --num-processes 2 \
      --logbase unit --suite unit || status=1
  run_tsan build-tsan || status=1

  # The libFuzzer targets (docs/fuzz.md), built with clang in their own
  # directory and run 12 s each from seeds made on the spot: a crash,
  # leak or timeout fails the run.
  if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang meson setup build-fuzz -Dfuzz=enabled -Dtests=disabled
  fi
  { meson compile -C build-fuzz fuzz && tests/fuzz/run.sh -t 12 build-fuzz; } ||
    status=1

  # The other Debian release (13 on a Debian 12 host, 12 on 13): the
  # build with warnings as errors, the unit and integration suites.
  local other
  other=$(other_release)
  run_in_release_root "$other" "build-$other" || status=1

  summarise build/meson-logs/testlog.json \
    build/meson-logs/testlog-valgrind.json \
    build-asan/meson-logs/unit.json build-tsan/meson-logs/unit.json \
    "build-$other/meson-logs/$other.json"
  return $status
}

case "${1:-}" in
  serve) shift; serve "$@" ;;
  test) run_tests ;;
  test-release) shift; run_release_e2e "$@" ;;
  *) echo "usage: $0 serve [IMAGE] [PARAM=VALUE...] | $0 test | $0 test-release [TEST...]" >&2; exit 2 ;;
esac
