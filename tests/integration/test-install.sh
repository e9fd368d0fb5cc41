#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# meson install puts the plugin in nbdkit's plugin directory (so that
# "nbdkit ext4lazy" finds it by name), ext4lazyctl in bindir and the man
# pages in section 1.  Checked in a DESTDIR, leaving the machine alone.
source "$(dirname "$0")/functions.sh"
: "${tmp:?}"
requires test -d "${EXT4LAZY_BUILD_ROOT:-}"
requires meson --version
plugindir=$(pkg-config nbdkit --variable=plugindir)
[ -n "$plugindir" ] || skip "pkg-config does not know nbdkit's plugindir"

meson install -C "$EXT4LAZY_BUILD_ROOT" --destdir "$tmp/dest" --no-rebuild \
  >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; die "meson install failed"; }
so=$tmp/dest$plugindir/nbdkit-ext4lazy-plugin.so
[ -f "$so" ] || die "plugin not installed in $plugindir"
find "$tmp/dest" -name ext4lazyctl -type f -perm -u+x | grep -q . ||
  die "ext4lazyctl not installed"
find "$tmp/dest" -path '*man1/nbdkit-ext4lazy-plugin.1' | grep -q . ||
  die "man page not installed"
find "$tmp/dest" -path '*man1/ext4lazyctl.1' | grep -q . ||
  die "ext4lazyctl man page not installed"
nbdkit "$so" --dump-plugin | grep -q '^name=ext4lazy$' ||
  die "the installed plugin does not load"
msg "installed into $plugindir"
