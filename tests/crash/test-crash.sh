#!/bin/bash
# test-crash.sh --- crash consistency under one policy (CRASH_POLICY, default
# strict): an unmodified guest kernel mounts a journaled ext4 through the
# plugin with record=, checks, scans (atime traffic), modifies (creates,
# rewrites, deletes) and rescans files, and unmounts.  crashgen.py then
# builds crash states from the record (every flush boundary, seeded random
# subsets of the writes after a flush, the end) and checks each: journal
# replay, e2fsck -fn clean; and the durability oracle: once a flush
# boundary holds exactly the files the guest left (by content; timestamps
# exempt), every later state must, and the end state must.
#   CRASH_SUBSETS  random subset states [350]; CRASH_SEED [1]
. "$(dirname "$0")/../e2e/lib.sh"
e2e_init
policy=${CRASH_POLICY:-strict}
NFILES=120 SIZE=6000 SEED=21
params=(nfiles=$NFILES size=$SIZE seed=$SEED)

img=$E2E_TMP/disk.img
mkdir -p "$E2E_TMP/tree"
"$E2E_GUEST" populate "$E2E_TMP/tree/data" $NFILES $SIZE $SEED >/dev/null \
  || e2e_fail "populate on the host"
e2e_image "$img" 48M
mkfs.ext4 -q -F -b 4096 -d "$E2E_TMP/tree" "$img" || e2e_fail "mkfs.ext4 -d"
rm -rf "$E2E_TMP/tree"
cp "$img" "$E2E_TMP/initial.img"

ctl=$E2E_TMP/ctl.sock
E2E_PLUGIN_ARGS="policy=$policy record=$E2E_TMP/record.bin control=$ctl ${E2E_PLUGIN_ARGS:-}"
e2e_nbdkit_start crash default "$img"
e2e_boot crash workload=mount,verify,readscan,modify,sync,verify-modified,umount \
  mountopts=strictatime scans=2 pause=2 "${params[@]}" \
  || e2e_fail "guest run failed"
# What the policy did with the workload: under atime and lazy, the
# crash states must have been built with holds in play (how many
# transactions are absorbed depends on where the commits fall).
[ -x "${EXT4LAZYCTL:-}" ] || e2e_skip "EXT4LAZYCTL is not set to the built ext4lazyctl"
stats=$("$EXT4LAZYCTL" -s "$ctl" stats --json) || e2e_fail "ext4lazyctl stats"
absorbed=$(echo "$stats" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["instances"][0]["tx_absorbed"])')
held=$(echo "$stats" | /usr/bin/python3 -c 'import json,sys; i=json.load(sys.stdin)["instances"][0]; print(i["held"] + i["journal_held"])')
echo "CRASH: policy=$policy: $absorbed journal transactions absorbed, $held block writes held"
case $policy in
  atime|lazy) [ "$held" -gt 0 ] || e2e_fail "policy=$policy held nothing: the states would test nothing" ;;
esac
e2e_nbdkit_stop || e2e_fail "server did not exit cleanly"

# The oracle for the end state: the files the guest left, by content.
cat >"$E2E_TMP/oracle.sh" <<ORACLE
#!/bin/bash
d=\$(mktemp -d)
trap 'rm -rf "\$d"' EXIT
debugfs -R "rdump /data \$d" "\$1" >/dev/null 2>&1 || exit 1
"$E2E_GUEST" verify "\$d/data" $NFILES $SIZE $SEED modified >/dev/null 2>&1
ORACLE
chmod +x "$E2E_TMP/oracle.sh"

/usr/bin/python3 "$(dirname "$0")/crashgen.py" "$E2E_TMP/initial.img" \
  "$E2E_TMP/record.bin" --subsets "${CRASH_SUBSETS:-350}" \
  --seed "${CRASH_SEED:-1}" --oracle "$E2E_TMP/oracle.sh" \
  ${CRASH_EXTRA:-} | tee "$E2E_TMP/result"
st=${PIPESTATUS[0]}
echo "CRASH: policy=$policy $(cat "$E2E_TMP/result")"
[ "$st" -eq 0 ] || e2e_fail "policy=$policy: some crash states failed"
echo "PASS: policy=$policy: every crash state clean, end state holds the guest's files"
