#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The systemd units in deploy/ and what goes with them:
#  - systemd-analyze verify passes every unit, as instances of a volume
#    "vol1", with nothing printed about them;
#  - the two server units share one sandbox, and the example
#    configuration puts the image and sockets where that sandbox lets
#    the server write;
#  - a stop is a drain (ExecStop=, SIGTERM), killed only after its
#    bounds;
#  - systemd-analyze security rates the units' exposure at most 3.5;
#  - the network drop-in starts a server after network-online.target and
#    again while its remote does not answer, and not one that was fenced;
#  - deploy/ext4lazy-metrics, against a running server: the counters
#    with a volume label, ext4lazy_metrics_up, the file renamed into
#    place readable by node_exporter; up 0 once the server is gone;
#  - the example alert rules parse and use only metric names that the
#    helper writes (or node_exporter's own); promtool checks and
#    unit-tests them where it is installed.
source "$(dirname "$0")/functions.sh"
: "${tmp:?}"
requires systemd-analyze --version

src=$(cd "$(dirname "$0")/../.." && pwd)
deploy=$src/deploy
units=(ext4lazy@.service ext4lazy@.socket ext4lazy-activated@.service
       ext4lazy-metrics@.service ext4lazy-metrics@.timer ext4lazy-attach@.service)
helper_path=/usr/libexec/ext4lazy/ext4lazy-metrics

# ---- systemd-analyze verify -----------------------------------------
# A template cannot be verified: copies named as instances are.  The
# metrics helper is where the package installs it; here the source copy
# stands in for it, and true for ext4lazyctl, which ext4lazy-attach@
# runs (test-package.sh verifies the installed units as they are).
mkdir "$tmp/units"
for u in "${units[@]}"; do
  [ -f "$deploy/$u" ] || die "missing unit $u"
  sed -e "s|$helper_path|$deploy/ext4lazy-metrics|" \
      -e "s|^ExecStart=/usr/bin/ext4lazyctl |ExecStart=$(command -v true) |" \
      "$deploy/$u" >"$tmp/units/${u/@/@vol1}"
done
grep -q "^ExecStart=$helper_path " "$deploy/ext4lazy-metrics@.service" ||
  die "ext4lazy-metrics@.service does not run $helper_path"
grep -q "ext4lazy-metrics usr/libexec/ext4lazy/" "$deploy/debian/install" ||
  die "the package does not install the helper where the unit runs it"
[ -x "$deploy/ext4lazy-metrics" ] || die "deploy/ext4lazy-metrics is not executable"

set +e
systemd-analyze verify --man=no "$tmp"/units/* >"$tmp/verify.log" 2>&1
st=$?
set -e
if [ "$st" -ne 0 ] || grep -q -e ext4lazy -e "$tmp" "$tmp/verify.log"; then
  cat "$tmp/verify.log" >&2
  die "systemd-analyze verify: status $st, or warnings about our units"
fi
if grep -q . "$tmp/verify.log"; then
  msg "note: systemd-analyze printed, about other units:"
  sed 's/^/    /' "$tmp/verify.log" >&2
fi
msg "systemd-analyze verify: ${#units[@]} units clean"

# A broken unit must be caught (the check above is not vacuous).
mkdir "$tmp/bad"
sed 's/^Service=ext4lazy-activated@/Service=nosuch@/' "$tmp/units/ext4lazy@vol1.socket" \
  >"$tmp/bad/ext4lazy@vol1.socket"
if systemd-analyze verify --man=no "$tmp/bad/ext4lazy@vol1.socket" >/dev/null 2>&1; then
  die "systemd-analyze verify passed a socket whose service does not exist"
fi

# The man pages the units cite exist: ours are in docs/, the others
# must be known to man where man pages are installed.
for page in $(sed -n 's/^Documentation=//p' "$deploy"/*.service "$deploy"/*.socket \
                "$deploy"/*.timer | tr ' ' '\n' | sed -n 's/^man:\([^(]*\)(1)$/\1/p' |
                sort -u); do
  if [ -f "$src/docs/$page.pod" ]; then
    continue
  elif command -v man >/dev/null && man -w nbdkit >/dev/null 2>&1; then
    man -w "$page" >/dev/null 2>&1 || die "Documentation=man:$page(1): no such page"
  else
    msg "note: man pages not installed here, $page(1) not checked"
  fi
done

# ---- one sandbox for both servers -----------------------------------
sandbox () { sed -n '/^ProtectSystem=/,/^\[/p' "$1" | grep -v -e '^\[' -e '^$'; }
sandbox "$deploy/ext4lazy@.service" >"$tmp/sb1"
sandbox "$deploy/ext4lazy-activated@.service" >"$tmp/sb2"
[ -s "$tmp/sb1" ] || die "ext4lazy@.service has no sandbox"
diff -u "$tmp/sb1" "$tmp/sb2" >&2 ||
  die "ext4lazy@.service and ext4lazy-activated@.service differ in their sandbox"
for opt in ProtectSystem=strict ProtectHome=yes PrivateTmp=yes NoNewPrivileges=yes \
           DevicePolicy=closed; do
  grep -qx "$opt" "$tmp/sb1" || die "the server sandbox lacks $opt"
done
grep -q '^DeviceAllow=block-' "$tmp/sb1" || die "no block device class allowed"
for u in ext4lazy@.service ext4lazy-activated@.service; do
  grep -qx 'RuntimeDirectory=ext4lazy' "$deploy/$u" || die "$u: no RuntimeDirectory"
  grep -qx 'RuntimeDirectoryPreserve=yes' "$deploy/$u" ||
    die "$u: RuntimeDirectory not preserved (it holds the .socket's socket)"
  grep -qx 'StateDirectory=ext4lazy' "$deploy/$u" || die "$u: no StateDirectory"
  grep -q '^ExecStart=.* control=/run/ext4lazy/%i.ctl' "$deploy/$u" ||
    die "$u: control socket not at /run/ext4lazy/%i.ctl"
  # A stop is a drain (test-drain.py shows what it does), SIGTERM after
  # it is one too, and the kill comes only after a drain's own bounds.
  grep -qx 'ExecStop=-/usr/bin/ext4lazyctl -s /run/ext4lazy/%i.ctl drain' "$deploy/$u" ||
    die "$u: ExecStop= is not the drain"
  grep -qx 'KillSignal=SIGTERM' "$deploy/$u" || die "$u: KillSignal= is not SIGTERM"
  t=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$deploy/$u")
  [ -n "$t" ] && [ "$t" -ge 100 ] && [ "$t" -le 300 ] ||
    die "$u: TimeoutStopSec=$t, not between 100 and 300 s"
done
grep -q -- '--unix \${SOCKET}' "$deploy/ext4lazy@.service" || die "ext4lazy@.service: no --unix"
! grep -q -e '--unix' -e ' -U ' "$deploy/ext4lazy-activated@.service" ||
  die "ext4lazy-activated@.service listens itself (nbdkit refuses -U with LISTEN_FDS)"
grep -qx 'ListenStream=/run/ext4lazy/%i.sock' "$deploy/ext4lazy@.socket" ||
  die "the socket does not listen in /run/ext4lazy"
# The example configuration fits the sandbox.
conf=$deploy/examples/vol1.conf
grep -qx 'STORE=file=/var/lib/ext4lazy/[^/]*' "$conf" || die "vol1.conf: STORE not a file in /var/lib/ext4lazy"
grep -qx 'SOCKET=/run/ext4lazy/vol1.sock' "$conf" || die "vol1.conf: SOCKET not /run/ext4lazy/vol1.sock"
grep -q '^PARAMS=' "$conf" || die "vol1.conf: no PARAMS"

# ---- exposure -------------------------------------------------------
for u in ext4lazy@vol1.service ext4lazy-activated@vol1.service ext4lazy-metrics@vol1.service; do
  if systemd-analyze security --offline=true --threshold=35 "$tmp/units/$u" \
       >"$tmp/security.log" 2>&1; then
    msg "$u: $(grep -o 'Overall exposure level.*' "$tmp/security.log")"
  elif grep -q 'Overall exposure level' "$tmp/security.log"; then
    grep '✗' "$tmp/security.log" >&2 || true
    die "$u: $(grep -o 'Overall exposure level.*' "$tmp/security.log"), more than 3.5"
  else
    msg "note: systemd-analyze security --offline not supported here"
    break
  fi
done

# ---- the drop-ins of deploy/examples -----------------------------------
# remote-store.conf on a server unit (rbd=, nbd= over TCP) and
# tcp-tls.socket.conf on the socket: both verify, the drop-in is applied
# (the network opens, the exposure grows) and stays within 3.5.
mkdir -p "$tmp/dropin/ext4lazy@vol2.service.d" "$tmp/dropin/ext4lazy@vol4.socket.d"
cp "$deploy/ext4lazy@.service" "$deploy/ext4lazy@.socket" \
   "$deploy/ext4lazy-activated@.service" "$tmp/dropin/"
cp "$deploy/examples/remote-store.conf" "$tmp/dropin/ext4lazy@vol2.service.d/"
cp "$deploy/examples/tcp-tls.socket.conf" "$tmp/dropin/ext4lazy@vol4.socket.d/"
set +e
SYSTEMD_UNIT_PATH=$tmp/dropin: systemd-analyze verify --man=no \
  ext4lazy@vol2.service ext4lazy@vol4.socket >"$tmp/dropin.log" 2>&1
st=$?
set -e
if [ "$st" -ne 0 ] || grep -q ext4lazy "$tmp/dropin.log"; then
  cat "$tmp/dropin.log" >&2
  die "systemd-analyze verify: the example drop-ins (status $st)"
fi
if SYSTEMD_UNIT_PATH=$tmp/dropin: systemd-analyze security --offline=true \
     ext4lazy@vol2.service >"$tmp/remote.log" 2>&1; then
  grep -q "PrivateNetwork=.*has access to the host's network" "$tmp/remote.log" ||
    die "remote-store.conf: not applied (PrivateNetwork= still set)"
  grep -q 'AF_NETLINK.*cannot allocate netlink' "$tmp/remote.log" ||
    die "remote-store.conf: opens more than AF_INET/AF_INET6"
  level=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$tmp/remote.log")
  awk -v l="$level" 'BEGIN { exit !(l <= 3.5) }' ||
    die "ext4lazy@vol2.service with remote-store.conf: exposure $level, more than 3.5"
  msg "ext4lazy@vol2.service with remote-store.conf: exposure $level"
fi

# remote-store.conf orders the server after the network and starts it
# again while the remote does not answer yet (at boot), never reaching
# the start limit; a fenced server's exit status (the plugin's) is not
# restarted.
rs=$deploy/examples/remote-store.conf
section () { sed -n "/^\[$1\]/,/^\[/p" "$rs" | grep -v -e '^\[' -e '^#' -e '^$' || true; }
for opt in Wants=network-online.target After=network-online.target; do
  section Unit | grep -qx "$opt" || die "remote-store.conf: no $opt in [Unit]"
done
restart_s=$(section Service | sed -n 's/^RestartSec=\([0-9][0-9]*\)s\{0,1\}$/\1/p')
[ -n "$restart_s" ] && [ "$restart_s" -ge 5 ] ||
  die "remote-store.conf: RestartSec= not 5 s or more (systemd's 100 ms reaches the start limit at once)"
# systemd's defaults: at most 5 starts (StartLimitBurst) in 10 s
# (StartLimitIntervalSec); 0 means no limit.
interval=$(section Unit | sed -n 's/^StartLimitIntervalSec=\([0-9][0-9]*\)s\{0,1\}$/\1/p')
burst=$(section Unit | sed -n 's/^StartLimitBurst=//p')
interval=${interval:-10} burst=${burst:-5}
[ "$interval" -eq 0 ] || [ $((burst * restart_s)) -gt "$interval" ] ||
  die "remote-store.conf: $burst starts every $restart_s s reach the limit of $interval s"
fenced=$(sed -n 's/^#define EXT4LAZY_EXIT_FENCED \([0-9][0-9]*\)$/\1/p' "$src/plugin/ext4lazy.c")
[ -n "$fenced" ] || die "plugin/ext4lazy.c: no EXT4LAZY_EXIT_FENCED"
section Service | grep -qx "RestartPreventExitStatus=$fenced" ||
  die "remote-store.conf: a fenced server (status $fenced) would be restarted"
msg "remote-store.conf: after network-online.target, restarted every ${restart_s} s," \
    "start limit ${interval} s, status $fenced (fenced) not restarted"

# ---- the metrics helper against a server ----------------------------
requires_plugin
requires test -x "${EXT4LAZYCTL:-}"
requires mkfs.ext4 -V
mkfs.ext4 -q -F -O ^has_journal "$tmp/vol1.img" 16M
mkdir "$tmp/run" "$tmp/textfile"
start_nbdkit vol1 -- "$tmp/vol1.img" control="$tmp/run/vol1.ctl" policy=lazy
metrics () {
  EXT4LAZY_TEXTFILE_DIR=${textfile_dir:-$tmp/textfile} EXT4LAZY_CONTROL=$tmp/run/vol1.ctl \
  EXT4LAZYCTL=$EXT4LAZYCTL "$deploy/ext4lazy-metrics" "$@"
}
prom=$tmp/textfile/ext4lazy-vol1.prom
metrics vol1 || die "ext4lazy-metrics failed"
[ -f "$prom" ] || die "no $prom"
[ "$(stat -c %a "$prom")" = 644 ] || die "$prom is mode $(stat -c %a "$prom"), node_exporter cannot read it"
[ "$(ls -A "$tmp/textfile")" = ext4lazy-vol1.prom ] ||
  die "temporary files left: $(ls -A "$tmp/textfile")"
grep -qx 'ext4lazy_metrics_up{volume="vol1"} 1' "$prom" || die "up is not 1"
grep -q '^ext4lazy_oldest_hold_seconds{volume="vol1",instance="ext4@0"} ' "$prom" ||
  die "no oldest_hold_seconds sample with the volume label"
# Every sample carries the label, and nothing else was changed.
if grep -v '^#' "$prom" | grep -v 'volume="vol1"' | grep -q .; then
  die "samples without volume=\"vol1\": $(grep -v '^#' "$prom" | grep -v 'volume="vol1"' | head -n3)"
fi
"$EXT4LAZYCTL" -s "$tmp/run/vol1.ctl" stats --prometheus >"$tmp/raw.prom"
diff <(grep -v '^#' "$tmp/raw.prom" | sed 's/ .*//; s/{.*//' | sort -u) \
     <(grep -v '^#' "$prom" | grep -v '^ext4lazy_metrics_up' | sed 's/ .*//; s/{.*//' | sort -u) >&2 ||
  die "the helper changed the set of metric names"
if /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
  /usr/bin/python3 - "$prom" <<'PY' || die "$prom is not valid exposition text"
import sys
from prometheus_client.parser import text_string_to_metric_families
n = 0
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    for s in fam.samples:
        assert s.labels.get("volume") == "vol1", s
        n += 1
print(f"{n} samples parse")
PY
else
  msg "note: python3-prometheus-client missing, exposition text not parsed"
fi
cp "$prom" "$tmp/up.prom"

# A name that cannot be a label value or a file name is refused.
set +e
metrics 'a"b' 2>/dev/null; st=$?
set -e
[ "$st" -eq 2 ] || die "a bad volume name must exit 2, not $st"
set +e
textfile_dir=$tmp/nosuch metrics vol1 2>"$tmp/nodir.err"; st=$?
set -e
[ "$st" -eq 1 ] && grep -q 'no textfile directory' "$tmp/nodir.err" ||
  die "a missing textfile directory must exit 1 and say so (status $st)"

# Once the server is gone: up 0, the file still replaced.
stop_nbdkit "$nbdkit_pid"
metrics vol1 2>"$tmp/down.err" || die "ext4lazy-metrics must succeed with the server down"
grep -qx 'ext4lazy_metrics_up{volume="vol1"} 0' "$prom" || die "up is not 0 with the server down"
grep -q 'cannot read the counters' "$tmp/down.err" || die "no message with the server down"
[ "$(ls -A "$tmp/textfile")" = ext4lazy-vol1.prom ] || die "temporary files left after a failure"

# ---- the alert rules ------------------------------------------------
rules=$deploy/examples/ext4lazy-alerts.yml
if /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
  /usr/bin/python3 - "$rules" "$tmp/up.prom" <<'PY' || die "the alert rules do not fit the metrics"
import re, sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))
have = set()
for line in open(sys.argv[2]):
    if not line.startswith("#"):
        have.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
names = []
for g in rules["groups"]:
    for r in g["rules"]:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r
        assert r["alert"] and r["expr"], r
        for m in re.findall(r"\b(ext4lazy_[a-z_]+|node_[a-z_]+)\b", r["expr"]):
            assert m in have or m.startswith("node_textfile_"), \
                f"{r['alert']}: {m} is not a metric ext4lazy-metrics writes"
        assert "volume" in r["expr"] or "node_textfile" in r["expr"], r["alert"]
        names.append(r["alert"])
print("alerts:", ", ".join(names))
PY
else
  msg "note: python3-yaml missing, alert rules not parsed"
fi
if command -v promtool >/dev/null; then
  cp "$rules" "$tmp/ext4lazy-alerts.yml"
  promtool check rules "$tmp/ext4lazy-alerts.yml" >&2 || die "promtool check rules"
  # Scraped through node_exporter: ext4lazy's instance label becomes
  # exported_instance, instance is the host.
  cat >"$tmp/alerts-test.yml" <<'EOF'
rule_files: [ext4lazy-alerts.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'ext4lazy_oldest_hold_seconds{instance="h:9100",job="node",volume="vol1",exported_instance="ext4@0"}'
        values: '90000+60x20'
      - series: 'ext4lazy_oldest_hold_seconds{instance="h:9100",job="node",volume="vol2",exported_instance="ext4@0"}'
        values: '3600+60x20'
      - series: 'ext4lazy_metrics_up{instance="h:9100",job="node",volume="vol2"}'
        values: '1 1 0x10'
      - series: 'node_textfile_mtime_seconds{instance="h:9100",job="node",file="ext4lazy-vol1.prom"}'
        values: '0x20'
      - series: 'ext4lazy_writeback_blocks_total{instance="h:9100",job="node",volume="vol1",exported_instance="ext4@0",trigger="memory"}'
        values: '0x10 5+5x100'
      - series: 'ext4lazy_writeback_blocks_total{instance="h:9100",job="node",volume="vol2",exported_instance="ext4@0",trigger="memory"}'
        values: '7x110'
    alert_rule_test:
      - eval_time: 10m
        alertname: Ext4lazyHoldOverdue
        exp_alerts:
          - exp_labels: {severity: critical, instance: "h:9100", volume: vol1}
            exp_annotations:
              summary: 'ext4lazy vol1 on h:9100: holds past max-age'
              description: 'The oldest held block of volume vol1 is 1d 1h 10m 0s old, past max-age: writing it back fails (see journalctl -u ''ext4lazy*@vol1*'' for "writing back expired holds").  A crash of the server now loses those timestamps.'
      - eval_time: 10m
        alertname: Ext4lazyDown
        exp_alerts:
          - exp_labels: {severity: critical, instance: "h:9100", volume: vol2}
            exp_annotations:
              summary: 'ext4lazy vol2 on h:9100 does not answer'
              description: 'ext4lazyctl cannot read the counters of volume vol2 from /run/ext4lazy/vol2.ctl: check systemctl status ''ext4lazy*@vol2*''.'
      - eval_time: 15m
        alertname: Ext4lazyMetricsStale
        exp_alerts:
          - exp_labels: {severity: warning, instance: "h:9100", job: node, file: ext4lazy-vol1.prom}
            exp_annotations:
              summary: 'ext4lazy counters on h:9100 not updated for 5 minutes'
              description: 'ext4lazy-vol1.prom is 15m 0s old: check systemctl list-timers ''ext4lazy-metrics@*''.'
      - eval_time: 30m
        alertname: Ext4lazyMemoryCapReached
        exp_alerts: []
      - eval_time: 100m
        alertname: Ext4lazyMemoryCapReached
        exp_alerts:
          - exp_labels: {severity: info, instance: "h:9100", volume: vol1}
            exp_annotations:
              summary: 'ext4lazy vol1 on h:9100 writes back early: max-held reached'
              description: '300 blocks were written back in the last hour because held blocks exceeded max-held; raise max-held= in PARAMS.'
EOF
  (cd "$tmp" && promtool test rules alerts-test.yml) >"$tmp/promtool.log" 2>&1 ||
    { cat "$tmp/promtool.log" >&2; die "promtool test rules"; }
  msg "promtool: rules check and alert tests pass"
else
  msg "note: promtool not installed, alert rules not checked by Prometheus"
fi
msg "units, metrics helper and alert rules checked"
