#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A volume served over TCP with TLS, as deploy/examples/vol4-tcp-tls.conf
# and tcp-tls.socket.conf configure it: the socket-activated unit's
# ExecStart= with that configuration (paths moved into $tmp, the plugin
# from the build), started by systemd-socket-activate on a TCP port of
# 127.0.0.1 as systemd would.  A client without TLS, or with another key,
# is refused; nbdinfo and qemu (tls-creds-psk) with the key read the
# volume.  The key file is made private (umask 077) as the example's
# recipe makes it.  Then that volume is the remote of a second server,
# nbd=nbds://...?tls-psk-file= as vol3-nbd.conf configures it: with the
# key file readable by every user or by its group a notice at start
# says so, with a private one nothing; each serves.
source "$(dirname "$0")/functions.sh"
: "${tmp:?}"
requires_plugin
requires nbdinfo --version
requires qemu-io --version
requires systemd-socket-activate --version
requires mkfs.ext4 -V

src=$(cd "$(dirname "$0")/../.." && pwd)
conf=$src/deploy/examples/vol4-tcp-tls.conf
unit=$src/deploy/ext4lazy-activated@.service
sockconf=$src/deploy/examples/tcp-tls.socket.conf
grep -qx 'ListenStream=0.0.0.0:10809' "$sockconf" || die "tcp-tls.socket.conf: no TCP ListenStream"

# The configuration, as systemd reads it (VAR=value lines), with /etc
# and /var/lib paths moved into $tmp.
conf_value () {
  sed -n "s/^$1=//p" "$conf" | tail -n 1 |
    sed "s|/etc/ext4lazy/|$tmp/|g; s|/var/lib/ext4lazy/|$tmp/|g"
}
STORE=$(conf_value STORE)
NBDKIT_OPTS=$(conf_value NBDKIT_OPTS)
PARAMS=$(conf_value PARAMS)
grep -q -- '--tls=require' <<<"$NBDKIT_OPTS" || die "vol4-tcp-tls.conf does not require TLS"
psk=$(sed -n 's/.*--tls-psk=\([^ ]*\).*/\1/p' <<<"$NBDKIT_OPTS")
[ -n "$psk" ] || die "vol4-tcp-tls.conf: no --tls-psk"

mkfs.ext4 -q -F "${STORE#file=}" 32M || die "mkfs.ext4"
key=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
# Made as the recipe in vol4-tcp-tls.conf makes it: private from the start.
[ "$(grep -c '^#   (umask 077; ' "$conf")" = 2 ] ||
  die "vol4-tcp-tls.conf: the key file is not made under umask 077"
(umask 077 && echo "client1:$key" >"$psk")
[ "$(stat -c %a "$psk")" = 600 ] || die "the key file is mode $(stat -c %a "$psk"), not 600"
mkdir "$tmp/qemu" "$tmp/wrong"
cp "$psk" "$tmp/qemu/keys.psk"
echo "client1:$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >"$tmp/wrong/keys.psk"
mkdir -p "$tmp/run"

port=$((20000 + RANDOM % 20000))
serve () { # serve PARAMS: start the activated server on $port
  local line
  line=$(sed -n 's/^ExecStart=//p' "$unit")
  line=${line//'%i'/vol4}
  line=${line//\/run\/ext4lazy\//$tmp/run/}
  line=${line/\/usr\/bin\/nbdkit/nbdkit}
  line=${line/ ext4lazy / $EXT4LAZY_PLUGIN }
  # EnvironmentFile=: unbraced $VARs split at spaces, as bash does here.
  # shellcheck disable=SC2034 # used by the eval
  local FILE= PARAMS=$1
  eval "set -- $line"
  msg "serving: $*"
  systemd-socket-activate -l "127.0.0.1:$port" "$@" </dev/null >"$tmp/server.log" 2>&1 &
  pid=$!
  cleanup_fn kill "$pid"
  for ((i = 0; i < 100; i++)); do
    ss -ltn 2>/dev/null | grep -q "127.0.0.1:$port " && return 0
    sleep 0.1
  done
  cat "$tmp/server.log" >&2
  die "nothing listens on 127.0.0.1:$port"
}
stop () {
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}
size=$((32 * 1024 * 1024))

serve "$PARAMS"
# Plain NBD: refused (--tls=require).
if nbdinfo --size "nbd://127.0.0.1:$port" >"$tmp/plain.log" 2>&1; then
  die "a client without TLS was served"
fi
msg "without TLS: $(tail -n 1 "$tmp/plain.log")"
# TLS with another key: refused.
if nbdinfo --size "nbds://client1@127.0.0.1:$port/?tls-psk-file=$tmp/wrong/keys.psk" \
     >"$tmp/wrong.log" 2>&1; then
  die "a client with another key was served"
fi
msg "another key: $(tail -n 1 "$tmp/wrong.log")"
# TLS with the key: served, whole.
got=$(nbdinfo --size "nbds://client1@127.0.0.1:$port/?tls-psk-file=$psk") ||
  { cat "$tmp/server.log" >&2; die "nbdinfo with the key failed"; }
[ "$got" = "$size" ] || die "nbdinfo with the key: size $got, not $size"
# qemu's client with tls-creds-psk: reads the ext4 magic (0xEF53 at 1080).
out=$(qemu-io -r --object "tls-creds-psk,id=tls0,endpoint=client,dir=$tmp/qemu,username=client1" \
        --image-opts "driver=nbd,host=127.0.0.1,port=$port,tls-creds=tls0" \
        -c 'read -v 1080 2' 2>&1) || { echo "$out" >&2; die "qemu-io with tls-creds-psk failed"; }
grep -q '^00000438:  53 ef' <<<"$out" || { echo "$out" >&2; die "qemu-io: no ext4 magic"; }
if qemu-io -r --object "tls-creds-psk,id=tls0,endpoint=client,dir=$tmp/wrong,username=client1" \
     --image-opts "driver=nbd,host=127.0.0.1,port=$port,tls-creds=tls0" \
     -c 'read 0 512' >/dev/null 2>&1; then
  die "qemu with another key was served"
fi
msg "with the key: nbdinfo and qemu (tls-creds-psk) read the volume"

# ---- nbd= over TLS, with the key in a file -----------------------------
# The volume above as the remote of a second server, as
# examples/vol3-nbd.conf configures one (nbds://USER@HOST/?tls-psk-file=):
# a key file that others may read gets a notice at start; a private one
# none.  Both serve.
if ! nbdkit "$plugin" --dump-plugin | grep -qx 'ext4lazy_nbd=yes'; then
  msg "note: the plugin has no nbd= backend (built without libnbd): nbd= with TLS not checked"
  exit 0
fi
grep -q '^STORE=nbd=nbds://[^?]*?tls-psk-file=/etc/ext4lazy/' "$src/deploy/examples/vol3-nbd.conf" ||
  die "vol3-nbd.conf: no nbds:// URI with tls-psk-file="
cp "$psk" "$tmp/remote.psk"
remote="nbds://client1@127.0.0.1:$port/?tls-psk-file=$tmp/remote.psk"
for mode in 644 640 600; do
  chmod "$mode" "$tmp/remote.psk"
  start_nbdkit "remote$mode" -- nbd="$remote"
  got=$(nbdinfo --size "$uri") || die "nbd= over TLS (key file mode $mode): nbdinfo failed"
  [ "$got" = "$size" ] || die "nbd= over TLS: size $got, not $size"
  stop_nbdkit "$nbdkit_pid"
  notice=$(grep 'notice: warning: tls-psk-file=' "$log" || true)
  case $mode in
    644) who="every user" ;;
    640) who="its group" ;;
    600) who= ;;
  esac
  if [ -n "$who" ]; then
    grep -qF "tls-psk-file=$tmp/remote.psk is readable by $who (mode 0$mode)" <<<"$notice" ||
      die "key file mode $mode: no notice that $who can read it: ${notice:-none}"
  elif [ -n "$notice" ]; then
    die "a private key file (mode 600) gets a notice: $notice"
  fi
  msg "key file mode $mode: served; ${notice:-no notice}"
done
