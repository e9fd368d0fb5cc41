#!/bin/bash
# The guest side of test-e2e-systemd.sh, run once by e2e-driver.service
# after multi-user.target with its output on the console (ttyS0).  It
# installs the package from /root/deb with dpkg -i, serves two volumes
# through the shipped units (ext4lazy@vol1.service on a file,
# ext4lazy@vol2.socket socket-activated), uses them through the kernel's
# NBD client and checks what the units did: "E2E-RESULT: NAME ok ..." or
# "E2E-RESULT: NAME FAIL ..." per check, "E2E-RESULT: done ok|fail" at the
# end, then the guest powers off.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
fails=0
t_start=$(date +%s)
r () { echo "E2E-RESULT: $*"; }
ok () { r "$1 ok${2:+ $2}"; }
bad () { r "$1 FAIL ${2:-}"; fails=$((fails + 1)); }
# check NAME CMD...: ok when CMD succeeds, else FAIL with its last output.
check ()
{
  local name=$1
  shift
  if "$@" >/tmp/check.out 2>&1; then
    ok "$name"
  else
    bad "$name" "($* : $(tail -n 5 /tmp/check.out | tr '\n' '|'))"
  fi
}
phase_t=$t_start
phase ()
{
  local now
  now=$(date +%s)
  r "phase $1 $((now - phase_t)) s"
  phase_t=$now
}
finish ()
{
  r "guest-total $(( $(date +%s) - t_start )) s"
  if [ "$fails" = 0 ]; then r "done ok"; else r "done fail ($fails checks failed)"; fi
  sync
  systemctl --no-block poweroff
  exit 0
}
# atime (seconds, from the inode) of PATH in ext4 image IMG, read by
# debugfs from the image as it is on the store (no journal replay).
img_atime ()
{
  local hex
  hex=$(debugfs -c -R "stat $2" "$1" 2>/dev/null |
          sed -n 's/^ *atime: 0x\([0-9a-f]*\).*/\1/p' | head -n 1)
  [ -n "$hex" ] && echo $((16#$hex))
}
# "held now: N blocks" from ext4lazyctl stats on control socket CTL.
held_now ()
{
  ext4lazyctl -s "$1" stats 2>/dev/null |
    awk '$1 == "held" && $2 == "now:" { print $3; exit }'
}
wait_socket ()
{
  local i
  for ((i = 0; i < 300; i++)); do
    [ -S "$1" ] && return 0
    sleep 0.1
  done
  return 1
}

r "driver started, $(uname -r), systemd $(systemctl --version | head -n 1 | awk '{print $2}'), boot to driver $(awk '{printf "%d", $1}' /proc/uptime) s"

# ---- the package ----------------------------------------------------
deb=$(ls /root/deb/nbdkit-ext4lazy-plugin_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { bad install "no .deb in /root/deb"; finish; }
if dpkg -i "$deb" >/tmp/dpkg.log 2>&1; then
  ok install "$(basename "$deb")"
else
  bad install "$(tail -n 5 /tmp/dpkg.log | tr '\n' '|')"
  # Missing dependencies: apt-get -f install from what the image has.
  apt-get -f install -y --no-download >/tmp/apt.log 2>&1 ||
    { bad apt-fix "$(tail -n 5 /tmp/apt.log | tr '\n' '|')"; finish; }
fi
check nbdkit-finds-plugin nbdkit ext4lazy --dump-plugin
check units-installed test -f /lib/systemd/system/ext4lazy@.service
phase install

# ---- two volumes ----------------------------------------------------
mkdir -p /var/lib/ext4lazy /etc/ext4lazy /tmp/seed
chmod 0700 /var/lib/ext4lazy
for i in 1 2 3 4 5 6 7 8; do
  head -c $((i * 3000)) /dev/urandom >/tmp/seed/f$i
done
# An old atime, so that a read's new one is told apart.
touch -a -d '2020-01-01 00:00:00' /tmp/seed/f*
for v in vol1 vol2; do
  check mkfs-$v mkfs.ext4 -q -F -b 4096 -d /tmp/seed /var/lib/ext4lazy/$v.img 64M
done
(cd /tmp/seed && sha256sum f*) >/tmp/seed.sums
ex=/usr/share/doc/nbdkit-ext4lazy-plugin/examples/vol1.conf
if [ -f "$ex" ]; then
  cp "$ex" /etc/ext4lazy/vol1.conf
  sed 's/vol1/vol2/g' "$ex" >/etc/ext4lazy/vol2.conf
  ok config "from $ex"
else
  bad config "no $ex"
  for v in vol1 vol2; do
    printf 'STORE=file=/var/lib/ext4lazy/%s.img\nSOCKET=/run/ext4lazy/%s.sock\nPARAMS=max-age=24h max-held=64M\n' \
      $v $v >/etc/ext4lazy/$v.conf
  done
fi
r "vol1.conf: $(grep -v '^#' /etc/ext4lazy/vol1.conf | tr '\n' ';')"
mkdir -p /var/lib/prometheus/node-exporter
phase images

check enable-vol1 systemctl enable --now ext4lazy@vol1.service
check vol1-socket wait_socket /run/ext4lazy/vol1.sock
check enable-vol2-socket systemctl enable --now ext4lazy@vol2.socket
check vol2-socket-active systemctl is-active ext4lazy@vol2.socket
# Socket activation: nothing runs for vol2 until a client connects.
if systemctl is-active --quiet ext4lazy-activated@vol2.service; then
  bad vol2-not-yet-started "ext4lazy-activated@vol2 runs before any client"
else
  ok vol2-not-yet-started
fi
check enable-metrics-timer systemctl enable --now ext4lazy-metrics@vol1.timer
check modprobe-nbd modprobe nbd
phase units

# use VOL DEV [SUMS]: connect, mount strictatime, write a file, read every
# file, and check the files; sets guest_atime (f1's atime as the guest
# saw it).
use ()
{
  local v=$1 dev=$2 m=/mnt/$1
  mkdir -p "$m"
  check $v-connect nbd-client -unix /run/ext4lazy/$v.sock "$dev" -b 4096 || return 1
  check $v-mount mount -o strictatime "$dev" "$m" || return 1
  check $v-write sh -c "echo written-by-guest >$m/new && sync -f $m/new"
  sleep 1
  check $v-read sh -c "cd $m && sha256sum -c --quiet ${3:-/tmp/seed.sums}"
  check $v-read-new grep -q written-by-guest "$m/new"
  guest_atime=$(stat -c %X "$m/f1")
  r "$v: f1 atime in the guest $guest_atime"
  # Past a journal commit (5 s): the atime updates have been sent.
  sleep 7
}
done_with ()
{
  local v=$1 dev=$2
  check $v-umount umount /mnt/$v
  check $v-disconnect nbd-client -d "$dev"
}

# ---- vol1: ext4lazy@vol1.service ------------------------------------
use vol1 /dev/nbd0
v1_atime=$guest_atime
h=$(held_now /run/ext4lazy/vol1.ctl)
r "vol1: held now after reads: ${h:-?} blocks"
before=$(img_atime /var/lib/ext4lazy/vol1.img /f1)
r "vol1: f1 atime on the image while the server holds blocks: ${before:-?}"
check metrics-run systemctl start ext4lazy-metrics@vol1.service
prom=/var/lib/prometheus/node-exporter/ext4lazy-vol1.prom
check metrics-up grep -q '^ext4lazy_metrics_up{volume="vol1"} 1' "$prom"
check metrics-held grep -q '^ext4lazy_held_blocks{volume="vol1"' "$prom"
r "metrics: $(grep -c '^ext4lazy_' "$prom" 2>/dev/null) samples; $(grep '^ext4lazy_held_blocks' "$prom" 2>/dev/null | tr '\n' ';')"
check metrics-timer-active systemctl is-active ext4lazy-metrics@vol1.timer
done_with vol1 /dev/nbd0
h2=$(held_now /run/ext4lazy/vol1.ctl)
r "vol1: held now after umount: ${h2:-?} blocks"
if [ "${h:-0}" -gt 0 ] || [ "${h2:-0}" -gt 0 ]; then
  ok vol1-held "after reads ${h:-?}, after umount ${h2:-?}"
else
  bad vol1-held "nothing held (after reads ${h:-?}, after umount ${h2:-?})"
fi
check vol1-stop systemctl stop ext4lazy@vol1.service
after=$(img_atime /var/lib/ext4lazy/vol1.img /f1)
r "vol1: f1 atime on the image after stop: ${after:-?}"
if [ -n "$after" ] && [ "$after" = "$v1_atime" ]; then
  ok vol1-written-back "atime $after"
else
  bad vol1-written-back "image has ${after:-?}, the guest saw $v1_atime"
fi
# (The last client's disconnect writes the holds back already: after
# the unmount nothing is held.  While the reads' atimes were held the
# image had the old one.)
if [ "${before:-x}" != "$v1_atime" ]; then
  ok vol1-was-held "image had ${before:-?} while held"
else
  bad vol1-was-held "the image had the new atime while blocks were held"
fi
check vol1-fsck e2fsck -fn /var/lib/ext4lazy/vol1.img
phase vol1

# ---- vol2: ext4lazy@vol2.socket -------------------------------------
use vol2 /dev/nbd1
v2_atime=$guest_atime
check vol2-activated systemctl is-active ext4lazy-activated@vol2.service
h=$(held_now /run/ext4lazy/vol2.ctl)
# Stopped with the client still connected: nbdkit waits for its
# clients on SIGTERM, so systemd kills it after TimeoutStopSec (20 s
# here, by a drop-in); the unit's ExecStop flush has written the holds
# back before the signal.
check vol2-umount umount /mnt/vol2
h2=$(held_now /run/ext4lazy/vol2.ctl)
r "vol2: held now after reads ${h:-?}, after umount (still connected) ${h2:-?} blocks"
if [ "${h2:-0}" -gt 0 ]; then ok vol2-held-at-stop; else bad vol2-held-at-stop "${h2:-?}"; fi
mkdir -p /etc/systemd/system/ext4lazy-activated@vol2.service.d
printf '[Service]\nTimeoutStopSec=20\n' \
  >/etc/systemd/system/ext4lazy-activated@vol2.service.d/stop.conf
systemctl daemon-reload
t0=$(date +%s)
check vol2-stop systemctl stop ext4lazy@vol2.socket ext4lazy-activated@vol2.service
r "vol2: stop with a client connected took $(($(date +%s) - t0)) s, result $(systemctl show -p Result --value ext4lazy-activated@vol2.service)"
nbd-client -d /dev/nbd1 >/dev/null 2>&1
systemctl reset-failed ext4lazy-activated@vol2.service 2>/dev/null
after=$(img_atime /var/lib/ext4lazy/vol2.img /f1)
if [ -n "$after" ] && [ "$after" = "$v2_atime" ]; then
  ok vol2-written-back "atime $after, the client still connected at the stop"
else
  bad vol2-written-back "image has ${after:-?}, the guest saw $v2_atime (client connected at the stop)"
fi
check vol2-fsck e2fsck -fn /var/lib/ext4lazy/vol2.img
phase vol2

# ---- vol5: TCP with TLS and X.509 certificates, nbd-client ----------
# ext4lazy@vol5.socket with examples/vol5-tcp-x509.conf and
# examples/tcp-tls.socket.conf (on the guest's 127.0.0.1:10809, the
# certificates the host made in /root/vol5).  The kernel's client with a
# certificate of the CA is served; without TLS, without a certificate
# and with one of another CA it is refused.
if [ -d /root/vol5 ]; then
  exd=/usr/share/doc/nbdkit-ext4lazy-plugin/examples
  x5=/root/vol5
  cp $exd/vol5-tcp-x509.conf /etc/ext4lazy/vol5.conf
  r "vol5.conf: $(grep -v '^#' /etc/ext4lazy/vol5.conf | tr '\n' ';')"
  install -d -m 0700 /etc/ext4lazy/vol5-tls
  install -m 0644 $x5/ca-cert.pem $x5/server-cert.pem /etc/ext4lazy/vol5-tls/
  install -m 0600 $x5/server-key.pem /etc/ext4lazy/vol5-tls/
  check mkfs-vol5 mkfs.ext4 -q -F -b 4096 -d /tmp/seed /var/lib/ext4lazy/vol5.img 64M
  mkdir -p /etc/systemd/system/ext4lazy@vol5.socket.d \
           /etc/systemd/system/ext4lazy-activated@vol5.service.d
  sed 's/^ListenStream=0\.0\.0\.0:10809$/ListenStream=127.0.0.1:10809/' \
    $exd/tcp-tls.socket.conf >/etc/systemd/system/ext4lazy@vol5.socket.d/tcp-tls.socket.conf
  # A stop that waits for a client still connected fails here (20 s).
  printf '[Service]\nTimeoutStopSec=20\n' \
    >/etc/systemd/system/ext4lazy-activated@vol5.service.d/stop.conf
  systemctl daemon-reload
  check vol5-socket systemctl start ext4lazy@vol5.socket
  r "vol5: listening on $(systemctl show -p Listen --value ext4lazy@vol5.socket)"
  # refused NAME ARGS...: nbd-client to 127.0.0.1:10809 must fail.
  refused ()
  {
    local name=$1
    shift
    if timeout 60 nbd-client 127.0.0.1 /dev/nbd3 -N vol5 -b 4096 "$@" >/tmp/vol5.out 2>&1; then
      bad vol5-refused-$name "connected: $(tail -n 2 /tmp/vol5.out | tr '\n' '|')"
      nbd-client -d /dev/nbd3 >/dev/null 2>&1
    else
      ok vol5-refused-$name "($(grep -E 'Error|E:' /tmp/vol5.out | tail -n 1 | tr -d '\n'))"
    fi
  }
  refused plain
  refused no-cert -cacertfile $x5/ca-cert.pem
  refused other-ca -cacertfile $x5/ca-cert.pem -certfile $x5/other-cert.pem \
    -keyfile $x5/other-key.pem
  mkdir -p /mnt/vol5
  if check vol5-connect timeout 60 nbd-client 127.0.0.1 /dev/nbd3 -N vol5 -b 4096 \
       -cacertfile $x5/ca-cert.pem -certfile $x5/client-cert.pem -keyfile $x5/client-key.pem &&
     check vol5-mount mount /dev/nbd3 /mnt/vol5; then
    check vol5-read sh -c "cd /mnt/vol5 && sha256sum -c --quiet /tmp/seed.sums"
    check vol5-write sh -c "echo written-over-tls >/mnt/vol5/new && sync -f /mnt/vol5/new"
    check vol5-umount umount /mnt/vol5
  fi
  check vol5-disconnect nbd-client -d /dev/nbd3
  t0=$(date +%s)
  check vol5-stop systemctl stop ext4lazy@vol5.socket ext4lazy-activated@vol5.service
  r "vol5: stop took $(($(date +%s) - t0)) s"
  if systemctl is-failed --quiet ext4lazy-activated@vol5.service; then
    bad not-failed-vol5 "$(systemctl show -p Result --value ext4lazy-activated@vol5.service)"
  else
    ok not-failed-vol5
  fi
  if debugfs -c -R 'cat /new' /var/lib/ext4lazy/vol5.img 2>/dev/null | grep -q written-over-tls; then
    ok vol5-written "the file written over TLS is on the image"
  else
    bad vol5-written "no /new on the image"
  fi
  check vol5-fsck e2fsck -fn /var/lib/ext4lazy/vol5.img
  journalctl -q -o cat -u ext4lazy-activated@vol5.service 2>&1 | tail -n 8 | sed 's/^/E2E-JOURNAL: /'
  phase vol5
fi

# net_up: qemu's user network (10.0.2.15, the host as 10.0.2.2 and,
# through the gateway, the host's own addresses), once.
net_up ()
{
  [ -n "${net_is_up:-}" ] && return 0
  net_is_up=1
  mkdir -p /etc/systemd/network
  printf '[Match]\nName=en* eth*\n[Network]\nAddress=10.0.2.15/24\nGateway=10.0.2.2\n' \
    >/etc/systemd/network/10-e2e.network
  check networkd systemctl start systemd-networkd
}

# ---- vol3: a store on the host's nbdkit, over TCP with TLS-PSK ------
# The host serves it on 10.0.2.2:$VOL3_PORT (qemu's user network) with
# --tls=require and the key in /root/vol3/vol3-remote.psk.
if [ -f /root/vol3/vol3.env ]; then
  . /root/vol3/vol3.env
  exd=/usr/share/doc/nbdkit-ext4lazy-plugin/examples
  install -m 0600 /root/vol3/vol3-remote.psk /etc/ext4lazy/vol3-remote.psk
  sed "s|storage\.example\.net|10.0.2.2:$VOL3_PORT|" $exd/vol3-nbd.conf >/etc/ext4lazy/vol3.conf
  r "vol3.conf: $(grep -v '^#' /etc/ext4lazy/vol3.conf | tr '\n' ';')"
  mkdir -p /etc/systemd/system/ext4lazy@vol3.service.d
  cp $exd/remote-store.conf /etc/systemd/system/ext4lazy@vol3.service.d/
  systemctl daemon-reload
  net_up
  up=
  for ((i = 0; i < 60; i++)); do
    if timeout 2 bash -c "exec 3<>/dev/tcp/10.0.2.2/$VOL3_PORT" 2>/dev/null; then
      up=1; break
    fi
    sleep 0.5
  done
  [ -n "$up" ] && ok vol3-host-reachable || bad vol3-host-reachable "10.0.2.2:$VOL3_PORT"
  check enable-vol3 systemctl start ext4lazy@vol3.service
  check vol3-socket wait_socket /run/ext4lazy/vol3.sock
  use vol3 /dev/nbd2 /root/vol3/seed.sums
  r "vol3-atime $guest_atime"
  h=$(held_now /run/ext4lazy/vol3.ctl)
  done_with vol3 /dev/nbd2
  h2=$(held_now /run/ext4lazy/vol3.ctl)
  r "vol3: held now after reads ${h:-?}, after umount ${h2:-?} blocks"
  if [ "${h:-0}" -gt 0 ] || [ "${h2:-0}" -gt 0 ]; then ok vol3-held; else bad vol3-held; fi
  check vol3-stop systemctl stop ext4lazy@vol3.service
  if systemctl is-failed --quiet ext4lazy@vol3.service; then
    bad not-failed-vol3 "$(systemctl show -p Result --value ext4lazy@vol3.service)"
  else
    ok not-failed-vol3
  fi
  journalctl -q -o cat -u ext4lazy@vol3.service >/tmp/journal3.txt 2>&1
  sed 's/^/E2E-JOURNAL: /' /tmp/journal3.txt | tail -n 20
  if grep -qi error /tmp/journal3.txt; then
    bad vol3-journal-no-error "$(grep -i error /tmp/journal3.txt | head -n 3 | tr '\n' '|')"
  else
    ok vol3-journal-no-error
  fi
  phase vol3
fi

# ---- vol6: a Ceph RBD image on the host's cluster -------------------
# The host runs a single-node cluster bound to its own address (not
# 127.0.0.1: the guest reaches the host's other addresses through qemu's
# user network, not its loopback) and gives /root/vol6/ceph.conf.  The
# guest serves rbd/vol6 through ext4lazy@vol6.service, configured from
# examples/vol2-rbd.conf with the drop-in examples/remote-store.conf
# (librbd1 is in the image: the plugin loads it for rbd=).
if [ -f /root/vol6/ceph.conf ]; then
  exd=/usr/share/doc/nbdkit-ext4lazy-plugin/examples
  net_up
  check vol6-librbd sh -c 'nbdkit ext4lazy --dump-plugin | grep -qx ext4lazy_rbd=yes'
  install -D -m 0644 /root/vol6/ceph.conf /etc/ceph/ceph.conf
  sed 's/vol2/vol6/g' $exd/vol2-rbd.conf >/etc/ext4lazy/vol6.conf
  r "vol6.conf: $(grep -v '^#' /etc/ext4lazy/vol6.conf | tr '\n' ';')"
  mkdir -p /etc/systemd/system/ext4lazy@vol6.service.d
  cp $exd/remote-store.conf /etc/systemd/system/ext4lazy@vol6.service.d/
  systemctl daemon-reload
  check enable-vol6 systemctl start ext4lazy@vol6.service
  check vol6-socket wait_socket /run/ext4lazy/vol6.sock
  mkdir -p /mnt/vol6
  if check vol6-connect nbd-client -unix /run/ext4lazy/vol6.sock /dev/nbd4 -b 4096 &&
     check vol6-mount mount -o strictatime /dev/nbd4 /mnt/vol6; then
    check vol6-write sh -c "echo written-to-rbd >/mnt/vol6/new && sync -f /mnt/vol6/new"
    check vol6-read sh -c "cd /mnt/vol6 && sha256sum -c --quiet /root/vol6/seed.sums"
    check vol6-read-new grep -q written-to-rbd /mnt/vol6/new
    # The reads' atimes go out with the journal commit that sync forces.
    sync -f /mnt/vol6/f1
    r "vol6-atime $(stat -c %X /mnt/vol6/f1)"
    r "vol6: held now after reads: $(held_now /run/ext4lazy/vol6.ctl) blocks"
    check vol6-umount umount /mnt/vol6
  fi
  check vol6-disconnect nbd-client -d /dev/nbd4
  check vol6-stop systemctl stop ext4lazy@vol6.service
  if systemctl is-failed --quiet ext4lazy@vol6.service; then
    bad not-failed-vol6 "$(systemctl show -p Result --value ext4lazy@vol6.service)"
  else
    ok not-failed-vol6
  fi
  journalctl -q -o cat -u ext4lazy@vol6.service 2>&1 | tail -n 12 | sed 's/^/E2E-JOURNAL: /'
  phase vol6
fi

# ---- what systemd says ----------------------------------------------
for u in ext4lazy@vol1.service ext4lazy@vol2.socket \
         ext4lazy-activated@vol2.service ext4lazy-metrics@vol1.service; do
  if systemctl is-failed --quiet "$u"; then
    bad "not-failed-$u" "$(systemctl show -p Result --value "$u")"
  else
    ok "not-failed-$u"
  fi
done
st=$(systemctl show -p ExecMainStatus --value ext4lazy@vol1.service)
[ "$st" = 0 ] && ok vol1-exit-status || bad vol1-exit-status "$st"
journalctl -q -o cat -u ext4lazy@vol1.service -u ext4lazy-activated@vol2.service \
  -u ext4lazy@vol2.socket -u ext4lazy-metrics@vol1.service >/tmp/journal.txt 2>&1
r "journal of the units: $(wc -l </tmp/journal.txt) lines"
sed 's/^/E2E-JOURNAL: /' /tmp/journal.txt | tail -n 40
if grep -qi error /tmp/journal.txt; then
  bad journal-no-error "$(grep -i error /tmp/journal.txt | head -n 3 | tr '\n' '|')"
else
  ok journal-no-error
fi
phase checks
finish
