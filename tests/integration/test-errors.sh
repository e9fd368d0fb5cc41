# SPDX-License-Identifier: BSD-3-Clause
# test-errors.sh --- bad input at start-up: nbdkit must exit non-zero
# before serving anything, and print exactly one line that names the
# problem (the parameter, its value or the path).
#
# nbdkit is run with --run true: if the plugin wrongly accepts the
# input, nbdkit serves, runs "true" and exits 0, and the test fails.

source "$(dirname "$0")/functions.sh"
requires_plugin
requires timeout --version

img=$tmp/disk.img
truncate -s 1M "$img"
mkdir "$tmp/dir"

runas=()

# Sanity check: the good command line works, so the failures below are
# caused by the bad input alone.
nbdkit -U - "$plugin" "$img" --run true </dev/null ||
  die "nbdkit with a valid file failed"

expect_error "$tmp/no-such-file" "$plugin" "$tmp/no-such-file"
expect_error "$tmp/no-such-file" "$plugin" file="$tmp/no-such-file"
expect_error "$tmp/dir" "$plugin" "$tmp/dir"
expect_error "foo" "$plugin" "$img" foo=bar
expect_error "backend|foo" "$plugin" "$img" backend=foo
expect_error "direct|maybe" "$plugin" "$img" direct=maybe
expect_error "file" "$plugin"
expect_error "file" "$plugin" backend=psync

# An unreadable file.  Root can read anything, so as root run nbdkit as
# an unprivileged user.
unreadable=$tmp/unreadable.img
truncate -s 1M "$unreadable"
chmod 0000 "$unreadable"
if [ "$(id -u)" -eq 0 ]; then
  if ! id -u nobody >/dev/null 2>&1 || ! command -v setpriv >/dev/null; then
    skip "cannot test an unreadable file as root without user nobody and setpriv"
  fi
  runas=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --)
  chmod 0755 "$tmp"
  # That user may not reach the build tree (a clone in a private
  # directory): it runs a copy of the plugin.
  cp "$plugin" "$tmp/plugin.so"
  chmod 0755 "$tmp/plugin.so"
  plugin=$tmp/plugin.so
  # The plugin and a readable file must work as that user, otherwise
  # the test cannot tell anything.
  chmod 0644 "$img"
  if ! "${runas[@]}" nbdkit -U - "$plugin" "$img" --run true \
       </dev/null >/dev/null 2>&1; then
    skip "cannot run nbdkit with the plugin as user nobody"
  fi
fi
expect_error "$unreadable" "$plugin" "$unreadable"
