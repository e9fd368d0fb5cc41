#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# build-deb.sh [OUTDIR] --- build the Debian package nbdkit-ext4lazy-plugin.
#
# The packaging is kept in deploy/debian so that the top of the tree
# stays free of it.  This script copies the tree (the files git knows,
# plus untracked ones it does not ignore; without git, everything but
# build directories) into a temporary directory, puts deploy/debian
# there as debian/, runs "dpkg-buildpackage -us -uc -b" in it, and moves
# the .deb (with the .buildinfo and .changes) to OUTDIR, by default the
# current directory.  The work tree itself is left untouched.
#
# Needs dpkg-dev, debhelper and fakeroot (fakeroot only when not root)
# and the Build-Depends of deploy/debian/control; dpkg-buildpackage
# names any that are missing.  As root on Debian 12 or 13:
#   apt-get install dpkg-dev debhelper fakeroot meson ninja-build \
#     pkg-config nbdkit-plugin-dev libext2fs-dev liburing-dev libnbd-dev \
#     zlib1g-dev libnl-genl-3-dev perl
#   deploy/debian/build-deb.sh /tmp
#   apt-get install /tmp/nbdkit-ext4lazy-plugin_*.deb
#
# DEB_BUILD_OPTIONS defaults to "nocheck parallel=$(nproc)" (the package
# build configures with -Dtests=disabled anyway).
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-.}
mkdir -p "$out"
out=$(cd "$out" && pwd)

for tool in dpkg-buildpackage dh; do
  if ! command -v "$tool" >/dev/null; then
    echo "build-deb: $tool is missing (apt-get install dpkg-dev debhelper fakeroot)" >&2
    exit 1
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/ext4lazy-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/ext4lazy
mkdir "$tree"

if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Files deleted in the work tree but not yet in git are left out.
  (cd "$src" &&
     git ls-files -z --cached --others --exclude-standard |
     while IFS= read -r -d '' f; do
       if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
     done |
     tar --null -T - -cf -) | tar -C "$tree" -xf -
else
  tar -C "$src" --exclude='./build*' --exclude='./obj-*' --exclude=./.git \
      --exclude=./debian -cf - . | tar -C "$tree" -xf -
fi
rm -rf "$tree/debian"
cp -a "$tree/deploy/debian" "$tree/debian"
rm -f "$tree/debian/build-deb.sh"

export DEB_BUILD_OPTIONS=${DEB_BUILD_OPTIONS:-nocheck parallel=$(nproc)}
(cd "$tree" && dpkg-buildpackage -us -uc -b)

shopt -s nullglob
debs=("$work"/*.deb)
if [ ${#debs[@]} -eq 0 ]; then
  echo "build-deb: dpkg-buildpackage made no .deb" >&2
  exit 1
fi
mv -f "$work"/*.deb "$work"/*.buildinfo "$work"/*.changes "$out"/
for d in "${debs[@]}"; do
  echo "build-deb: $out/$(basename "$d")"
done
