# SPDX-License-Identifier: BSD-3-Clause
# functions.sh --- shared helpers for the ext4lazy integration tests.
#
# Source it first thing from a test script:
#   source "$(dirname "$0")/functions.sh"
# It sets -e/-u, makes a private temporary directory $tmp (removed on
# exit), and provides helpers to skip (exit 77), register clean-up
# hooks, and start and stop nbdkit with the ext4lazy plugin on a Unix
# socket, its trace (-D ext4lazy.trace=1) going to a log file.

set -eu
set -o pipefail

# nbdsh needs the distribution's python3 (the one with the nbd module),
# so put the system directories first.
PATH=/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
export PATH
export LC_ALL=C

progname=$(basename "$0" .sh)

# Print a message to stderr.
msg ()
{
  echo "$progname: $*" >&2
}

# Fail the test.
die ()
{
  msg "FAIL: $*"
  exit 1
}

# Skip the whole test.
skip ()
{
  msg "SKIP: $*"
  exit 77
}

# Clean-up hooks, run in reverse order of registration when the script
# exits for any reason.  Each hook is a command with its arguments.
_cleanup_hooks=()

cleanup_fn ()
{
  local q
  q=$(printf '%q ' "$@")
  _cleanup_hooks+=("$q")
}

_run_cleanup ()
{
  local status=$? i
  _exit_status=$status
  set +e
  trap '' INT TERM
  for ((i = ${#_cleanup_hooks[@]} - 1; i >= 0; i--)); do
    eval "${_cleanup_hooks[i]}"
  done
  exit $status
}
trap _run_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# requires CMD [ARGS...]: skip the test unless CMD runs successfully.
requires ()
{
  if ! "$@" >/dev/null 2>&1; then
    skip "prerequisite missing or not working: $*"
  fi
}

requires_root ()
{
  [ "$(id -u)" -eq 0 ] || skip "this test must run as root"
}

# The plugin under test.  Its path is passed by meson in
# EXT4LAZY_PLUGIN; before the plugin is built the tests skip.
requires_plugin ()
{
  if [ -z "${EXT4LAZY_PLUGIN:-}" ]; then
    skip "EXT4LAZY_PLUGIN is not set"
  fi
  if [ ! -f "$EXT4LAZY_PLUGIN" ]; then
    skip "plugin not built: $EXT4LAZY_PLUGIN"
  fi
  requires nbdkit --version
  plugin=$EXT4LAZY_PLUGIN
}

requires_nbdsh ()
{
  requires nbdsh -c 'import nbd'
}

# Private temporary directory.  Image files go on a disk-backed
# filesystem (O_DIRECT, SEEK_HOLE and hole punching are tested), so the
# default is /var/tmp rather than /tmp.
tmp=$(mktemp -d "${EXT4LAZY_TEST_TMPDIR:-/var/tmp}/ext4lazy-$progname.XXXXXX")
cleanup_fn rm -rf "$tmp"

# All backend/direct combinations the data tests must pass in.
combos="backend=uring,direct=false backend=psync,direct=false
backend=uring,direct=true backend=psync,direct=true"

# direct_ok DIR: true if files in DIR can be opened with O_DIRECT.
direct_ok ()
{
  local r=0
  dd if=/dev/zero of="$1/.direct-probe" bs=4096 count=1 oflag=direct \
     status=none 2>/dev/null || r=1
  rm -f "$1/.direct-probe"
  return $r
}

# for_combos: print the combinations to run, one a line, as nbdkit
# parameters separated by spaces.  direct=true is left out (with a
# message) only if the filesystem under $tmp cannot do O_DIRECT.
for_combos ()
{
  local c
  for c in $combos; do
    case $c in
      *direct=true)
        if ! direct_ok "$tmp"; then
          msg "note: $tmp does not support O_DIRECT, not testing $c"
          continue
        fi ;;
    esac
    echo "${c//,/ }"
  done
}

# start_nbdkit NAME [NBDKIT-ARGS...] -- [PLUGIN-ARGS...]
#
# Start nbdkit in the foreground (as a background job of this shell)
# on the Unix socket $tmp/NAME.sock with the plugin under test, with
# trace debugging on.  Everything nbdkit prints goes to $tmp/NAME.log.
# Waits until the socket is listening.  Sets $sock, $uri, $log and
# $nbdkit_pid, and registers a hook that stops nbdkit.
start_nbdkit ()
{
  local name=$1 i
  shift
  local nbdkit_args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    nbdkit_args+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  sock=$tmp/$name.sock
  log=$tmp/$name.log
  # shellcheck disable=SC2034 # used by the tests
  uri="nbd+unix:///?socket=$sock"
  local pidfile=$tmp/$name.pid
  rm -f "$sock" "$pidfile"
  # $EXT4LAZY_NBDKIT_PRELOAD: a sanitizer's runtime for a plugin built
  # with it (env execs nbdkit: the pid stays nbdkit's).
  ${EXT4LAZY_NBDKIT_PRELOAD:+env LD_PRELOAD="$EXT4LAZY_NBDKIT_PRELOAD"} \
    nbdkit -f --exit-with-parent -U "$sock" -P "$pidfile" \
    -v -D ext4lazy.trace=1 "${nbdkit_args[@]}" \
    "$plugin" "$@" </dev/null >"$log" 2>&1 3<&- &
  nbdkit_pid=$!
  cleanup_fn _dump_log_if_failed "$log"
  cleanup_fn stop_nbdkit "$nbdkit_pid"
  for ((i = 0; i < 300; i++)); do
    if [ -s "$pidfile" ]; then
      return 0
    fi
    if ! kill -0 "$nbdkit_pid" 2>/dev/null; then
      cat "$log" >&2
      die "nbdkit exited during start-up: $*"
    fi
    sleep 0.1
  done
  cat "$log" >&2
  die "nbdkit did not start within 30 s"
}

# stop_nbdkit PID: SIGTERM, then wait.  Returns non-zero (and says
# why) if nbdkit hangs or does not exit with status 0, so that under
# set -e a crash at shut-down fails the test.
stop_nbdkit ()
{
  local pid=$1 i st=0
  kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null || st=$?
      if [ $st -ne 0 ]; then
        msg "FAIL: nbdkit (pid $pid) exited with status $st"
        return 1
      fi
      return 0
    fi
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  msg "FAIL: nbdkit (pid $pid) did not exit on SIGTERM"
  return 1
}

_dump_log_if_failed ()
{
  # Show the end of an nbdkit log if the test failed.
  if [ "${_exit_status:-0}" -ne 0 ] && [ "${_exit_status:-0}" -ne 77 ] \
       && [ -f "$1" ]; then
    msg "---- last lines of $1 ----"
    tail -n 60 "$1" >&2
  fi
}

# expect_error PATTERN [NBDKIT-ARGS...]: nbdkit fails at start-up with
# a single line on stderr matching the extended regexp PATTERN.  It is
# run with --run true: if it wrongly accepts the input, it serves, runs
# "true" and exits 0, and the test fails.  A test may set the array
# runas to a command prefix (e.g. another user).
expect_error ()
{
  local pattern=$1 r=0
  shift
  ${runas[@]+"${runas[@]}"} timeout 60 nbdkit -U - "$@" --run true \
    >"$tmp/out" 2>"$tmp/err" </dev/null || r=$?
  local what="nbdkit $*"
  if [ $r -eq 0 ]; then
    die "$what: accepted (exit 0), expected a start-up error"
  fi
  if [ $r -ge 124 ]; then
    cat "$tmp/err" >&2
    die "$what: exit status $r (timeout, crash or exec failure)"
  fi
  local lines
  lines=$(grep -c . "$tmp/err" || true)
  if [ "$lines" -ne 1 ]; then
    cat "$tmp/err" >&2
    die "$what: expected one line on stderr, got $lines"
  fi
  if ! grep -Eq -- "$pattern" "$tmp/err"; then
    cat "$tmp/err" >&2
    die "$what: the error does not name the problem (/$pattern/)"
  fi
  msg "ok: $what: $(cat "$tmp/err")"
}
