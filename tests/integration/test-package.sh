#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The Debian package: deploy/debian/build-deb.sh builds it
# (dpkg-buildpackage -us -uc -b in a temporary copy of the tree), dpkg
# installs it, nbdkit finds the plugin by name and serves an ext4 image
# with it, the socket-activated unit's command line serves under socket
# activation, its maintainer scripts start, stop or restart no server, ext4lazyctl, the man pages, the units and the examples are
# where they belong; then the package is purged and the plugin is gone.
#
# Root only: it installs a package on this machine.  A failure leaves the
# package purged again.  It does not run (skips) when the package or a
# plugin installed by hand (meson install) is already there, which this
# test would replace and then delete.  test-install.sh installs into a
# DESTDIR only and does not collide with it.
source "$(dirname "$0")/functions.sh"
: "${tmp:?}"
requires_root
command -v dpkg-buildpackage >/dev/null ||
  skip "dpkg-buildpackage is missing (apt-get install dpkg-dev debhelper fakeroot)"
command -v dh >/dev/null || skip "debhelper is missing (apt-get install debhelper)"
requires pkg-config --exists nbdkit
requires mkfs.ext4 -V
requires_nbdsh

src=$(cd "$(dirname "$0")/../.." && pwd)
pkg=nbdkit-ext4lazy-plugin
plugindir=$(pkg-config nbdkit --variable=plugindir)
so=$plugindir/nbdkit-ext4lazy-plugin.so
units=(ext4lazy@.service ext4lazy@.socket ext4lazy-activated@.service
       ext4lazy-metrics@.service ext4lazy-metrics@.timer ext4lazy-attach@.service)

installed () {
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'
}
if installed; then
  skip "$pkg is installed on this machine: not replacing and removing it"
fi
if [ -e "$so" ]; then
  skip "$so exists (installed by hand?): the package would overwrite it and its removal delete it"
fi

# ---- build ----------------------------------------------------------
msg "building the package (log: $tmp/build.log)"
if ! bash "$src/deploy/debian/build-deb.sh" "$tmp/out" >"$tmp/build.log" 2>&1; then
  tail -n 40 "$tmp/build.log" >&2
  die "the package did not build"
fi
deb=$(ls "$tmp"/out/${pkg}_*.deb)
[ -f "$deb" ] || die "no $pkg .deb in $tmp/out"
msg "built $(basename "$deb")"
# Kept in the build tree for the end-to-end test under systemd
# (tests/e2e/test-e2e-systemd.sh), which installs it in its guest.
if [ -n "${EXT4LAZY_BUILD_ROOT:-}" ]; then
  rm -rf "$EXT4LAZY_BUILD_ROOT/deb"
  mkdir -p "$EXT4LAZY_BUILD_ROOT/deb" && cp "$deb" "$EXT4LAZY_BUILD_ROOT/deb/"
fi

# Version: the one meson.build declares.
mver=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$src/meson.build" | head -n1)
dver=$(dpkg-deb -f "$deb" Version)
[ "${dver%%-*}" = "$mver" ] || die "package version $dver, meson.build says $mver"

# Runtime libraries and nbdkit only.
deps=$(dpkg-deb -f "$deb" Depends)
msg "Depends: $deps"
grep -Eq '(^|, )nbdkit( |,|$)' <<<"$deps" || die "does not depend on nbdkit"
grep -q 'liburing' <<<"$deps" || die "does not depend on liburing (shlibs)"
grep -q 'libext2fs' <<<"$deps" || die "does not depend on libext2fs (shlibs)"
grep -q 'libnbd0' <<<"$deps" || die "does not depend on libnbd0 (shlibs, nbd= backend)"
! grep -Eq -- '-dev\b|debhelper|meson|criterion' <<<"$deps" ||
  die "depends on build-time packages"

dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$tmp/contents"
for f in "$so" /usr/bin/ext4lazyctl \
         /usr/share/man/man1/nbdkit-ext4lazy-plugin.1.gz \
         /usr/share/man/man1/ext4lazyctl.1.gz \
         /usr/libexec/ext4lazy/ext4lazy-metrics \
         /usr/share/doc/$pkg/examples/vol1.conf \
         /usr/share/doc/$pkg/examples/ext4lazy-alerts.yml; do
  grep -qx "$f" "$tmp/contents" || die "the package lacks $f"
done
for u in "${units[@]}"; do
  grep -qx "/lib/systemd/system/$u" "$tmp/contents" || die "the package lacks unit $u"
done

# A package upgrade restarts, stops or starts no server: the maintainer
# scripts touch no ext4lazy server unit (debhelper leaves templates
# alone; rules says --no-stop-on-upgrade should one ever not be).  A
# restart drains (ExecStop=), and is the operator's to choose.
mkdir "$tmp/ctl"
dpkg-deb -e "$deb" "$tmp/ctl"
for script in preinst postinst prerm postrm; do
  f=$tmp/ctl/$script
  [ -f "$f" ] || continue
  grep -v '^[[:space:]]*#' "$f" >"$tmp/ctl/$script.code"
  ! grep -E 'deb-systemd-invoke|systemctl .*(restart|start)' "$tmp/ctl/$script.code" ||
    die "$script starts or restarts units"
  ! grep -E 'systemctl .*stop .*ext4lazy(-activated)?@' "$tmp/ctl/$script.code" |
    grep -v 'echo' ||
    die "$script stops servers"
done
grep -q -- '--no-stop-on-upgrade' "$src/deploy/debian/rules" ||
  die "rules: dh_installsystemd without --no-stop-on-upgrade"

# ---- install --------------------------------------------------------
# From here on, whatever happens, purge the package on exit.
purge_pkg () {
  if dpkg-query -W "$pkg" >/dev/null 2>&1; then
    dpkg --purge "$pkg" >/dev/null 2>&1 ||
      msg "FAIL: could not purge $pkg: dpkg --purge $pkg"
  fi
}
cleanup_fn purge_pkg
dpkg -i "$deb" >"$tmp/dpkg-i.log" 2>&1 || { cat "$tmp/dpkg-i.log" >&2; die "dpkg -i failed"; }
installed || die "$pkg is not installed after dpkg -i"

[ -f "$so" ] || die "plugin not in $plugindir"
nbdkit ext4lazy --dump-plugin >"$tmp/dump" 2>&1 || { cat "$tmp/dump" >&2; die "nbdkit ext4lazy --dump-plugin failed"; }
grep -qx 'name=ext4lazy' "$tmp/dump" || die "--dump-plugin: no name=ext4lazy"
grep -qx "path=$so" "$tmp/dump" || die "--dump-plugin: not the packaged plugin: $(grep ^path= "$tmp/dump")"
grep -qx 'ext4lazy_nbd=yes' "$tmp/dump" || die "--dump-plugin: the package has no nbd= backend"
# The RBD backend is built in but librbd is not linked: loaded for rbd= only.
if ldd "$so" | grep -q 'librbd\|librados'; then
  die "the packaged plugin links librbd: $(ldd "$so" | grep 'librbd\|librados')"
fi
if ldconfig -p | grep -q 'librbd\.so\.1 '; then
  grep -qx 'ext4lazy_rbd=yes' "$tmp/dump" || die "--dump-plugin: librbd1 is installed but the package has no rbd= backend"
fi

# Serve a small ext4 image by plugin name; read the superblock magic.
mkfs.ext4 -q -F -O ^has_journal "$tmp/disk.img" 16M
cat >"$tmp/magic.py" <<'PY'
magic = h.pread(2, 1024 + 56)
assert magic == b"\x53\xef", magic
print("ext4 magic ok, size", h.get_size())
PY
nbdkit -U - ext4lazy "$tmp/disk.img" \
  --run 'nbdsh -u "$uri" -c "exec(open(\"'"$tmp"'/magic.py\").read())"' \
  </dev/null >"$tmp/serve.log" 2>&1 || { cat "$tmp/serve.log" >&2; die "serving by name failed"; }
grep -q 'ext4 magic ok' "$tmp/serve.log" || { cat "$tmp/serve.log" >&2; die "no ext4 magic"; }

[ -x /usr/bin/ext4lazyctl ] || die "/usr/bin/ext4lazyctl is not installed"
set +e
/usr/bin/ext4lazyctl bogus >/dev/null 2>"$tmp/usage"; st=$?
set -e
[ "$st" -eq 2 ] && grep -q 'usage: ext4lazyctl' "$tmp/usage" ||
  die "/usr/bin/ext4lazyctl does not run (status $st)"
# dpkg may be told to leave man pages out (path-exclude): they are in
# the .deb (checked above); on disk only where dpkg installs them.
if dpkg-query -L "$pkg" | grep -q '^/usr/share/man/'; then
  for m in nbdkit-ext4lazy-plugin ext4lazyctl; do
    [ -s "/usr/share/man/man1/$m.1.gz" ] || die "man page $m(1) not installed"
    if command -v man >/dev/null; then
      man -w "$m" >/dev/null 2>&1 || die "man -w $m finds no page"
    fi
  done
else
  msg "note: dpkg excludes /usr/share/man here; man pages checked in the .deb only"
fi
for u in "${units[@]}"; do
  [ -f "/lib/systemd/system/$u" ] || die "unit $u not installed"
done
[ -x /usr/libexec/ext4lazy/ext4lazy-metrics ] || die "ext4lazy-metrics not installed"
[ -f "/usr/share/doc/$pkg/examples/vol1.conf" ] || die "examples not installed"

# The installed units verify as they are (commands, references), as
# instances of a volume "pkgtest".
if command -v systemd-analyze >/dev/null; then
  mkdir "$tmp/units"
  for u in "${units[@]}"; do
    cp "/lib/systemd/system/$u" "$tmp/units/${u/@/@pkgtest}"
  done
  if ! systemd-analyze verify --man=no "$tmp"/units/* >"$tmp/verify.log" 2>&1 ||
     grep -q . "$tmp/verify.log"; then
    cat "$tmp/verify.log" >&2
    die "systemd-analyze verify complains about the installed units"
  fi
else
  msg "note: no systemd-analyze, installed units not verified"
fi

# ---- the socket-activated unit's command, under socket activation ----
# Its ExecStart= as systemd would run it for volume "pkgtest", with
# /run/ext4lazy moved into $tmp: systemd-socket-activate listens, and
# starts the command with LISTEN_FDS on the first connection.
if command -v systemd-socket-activate >/dev/null; then
  line=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/ext4lazy-activated@.service)
  line=${line//'%i'/pkgtest}
  line=${line//\/run\/ext4lazy\//$tmp/run/}
  mkdir "$tmp/run"
  # EnvironmentFile=: ${FILE} is one word, $PARAMS and $NBDKIT_OPTS
  # split at spaces, as bash does with these values.
  # shellcheck disable=SC2034 # used by the eval
  FILE=$tmp/disk.img STORE= PARAMS="policy=lazy max-age=1h" NBDKIT_OPTS=
  eval "set -- $line"
  msg "socket activation: $*"
  systemd-socket-activate -l "$tmp/run/pkgtest.sock" "$@" \
    </dev/null >"$tmp/activated.log" 2>&1 &
  act_pid=$!
  cleanup_fn kill "$act_pid"
  for ((i = 0; i < 100; i++)); do
    [ -S "$tmp/run/pkgtest.sock" ] && break
    sleep 0.1
  done
  [ -S "$tmp/run/pkgtest.sock" ] || { cat "$tmp/activated.log" >&2; die "no listening socket"; }
  nbdsh -u "nbd+unix:///?socket=$tmp/run/pkgtest.sock" \
    -c "exec(open('$tmp/magic.py').read())" >"$tmp/act-read.log" 2>&1 ||
    { cat "$tmp/act-read.log" "$tmp/activated.log" >&2; die "no NBD server after activation"; }
  grep -q 'ext4 magic ok' "$tmp/act-read.log" || die "socket-activated server: no ext4 magic"
  /usr/bin/ext4lazyctl -s "$tmp/run/pkgtest.ctl" stats | grep -q '^policy: lazy' ||
    die "the activated server does not answer on its control socket"

  # The packaged metrics helper, against it.
  mkdir "$tmp/textfile"
  EXT4LAZY_TEXTFILE_DIR=$tmp/textfile EXT4LAZY_CONTROL=$tmp/run/pkgtest.ctl \
  EXT4LAZYCTL=/usr/bin/ext4lazyctl \
    /usr/libexec/ext4lazy/ext4lazy-metrics pkgtest || die "ext4lazy-metrics failed"
  grep -qx 'ext4lazy_metrics_up{volume="pkgtest"} 1' "$tmp/textfile/ext4lazy-pkgtest.prom" ||
    die "ext4lazy-metrics: server not seen as up"
  grep -q '^ext4lazy_held_blocks{volume="pkgtest",instance="ext4@0"} ' \
    "$tmp/textfile/ext4lazy-pkgtest.prom" || die "ext4lazy-metrics: no held_blocks sample"

  kill "$act_pid"
  st=0; wait "$act_pid" || st=$?
  [ "$st" -eq 0 ] || { cat "$tmp/activated.log" >&2; die "activated nbdkit exited with status $st on SIGTERM"; }
else
  msg "note: no systemd-socket-activate, socket activation not tried"
fi

# ---- remove, purge --------------------------------------------------
dpkg -r "$pkg" >"$tmp/dpkg-r.log" 2>&1 || { cat "$tmp/dpkg-r.log" >&2; die "dpkg -r failed"; }
[ ! -e "$so" ] || die "plugin left in $plugindir after dpkg -r"
if nbdkit ext4lazy --dump-plugin >/dev/null 2>&1; then
  die "nbdkit still finds ext4lazy after dpkg -r"
fi
[ ! -e /usr/bin/ext4lazyctl ] || die "ext4lazyctl left after dpkg -r"
for u in "${units[@]}"; do
  [ ! -e "/lib/systemd/system/$u" ] || die "unit $u left after dpkg -r"
done
dpkg --purge "$pkg" >"$tmp/dpkg-purge.log" 2>&1 || { cat "$tmp/dpkg-purge.log" >&2; die "dpkg --purge failed"; }
! dpkg-query -W "$pkg" >/dev/null 2>&1 || die "$pkg still known to dpkg after purge"
[ ! -e "/usr/share/doc/$pkg" ] || die "/usr/share/doc/$pkg left after purge"
msg "built, installed, served, removed: $(basename "$deb")"
