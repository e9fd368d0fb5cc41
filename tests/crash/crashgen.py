#!/usr/bin/python3
"""crashgen.py --- crash states from an ext4lazy record, checked.

Reads the initial image and the log the plugin wrote with record=PATH
(include/record.h), and checks crash states of the backing store:

  flush   every store flush boundary: all store writes that completed
          before the flush (FUA writes are durable when they complete);
  subset  for seeded random epochs (the writes between two flushes), a
          random subset of that epoch's writes on top of the boundary;
  end     every write issued, nothing more (a SIGKILL at the end).

For each state: replay the journal as mounting would (e2fsck -E
journal_only), then e2fsck -fn must exit 0.  With --oracle CMD, CMD IMAGE
says whether the state holds what the workload made durable at its end
(by content; timestamps exempt).  Durability is monotonic: from the first
flush boundary whose state passes, every later state (flush boundaries,
subsets of later epochs, and the end) must pass too; the end must pass.
--unsafe-drop-before-flush simulates a server that acknowledges a flush
without writing back: the writes just before each flush are dropped
(the detection test expects failures then).

Prints "states N clean M oracle K/L" and exits 1 if any state failed.
"""
import argparse
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

HDR = struct.Struct("<IHHQQQ")
MAGIC = 0x4C34584F
WRITE, FLUSH, ZERO, TRIM = 2, 3, 4, 5
FUA = 0x1


def read_record(path):
    """Store operations in completion order: (kind, offset, len, flags,
    file position of the data)."""
    ops = []
    with open(path, "rb") as f:
        while True:
            h = f.read(HDR.size)
            if len(h) < HDR.size:
                break
            magic, kind, flags, seq, off, ln = HDR.unpack(h)
            if magic != MAGIC:
                raise SystemExit(f"crashgen: bad record magic at {f.tell()}")
            pos = f.tell()
            if kind == WRITE:
                f.seek(ln, 1)
            if kind in (WRITE, FLUSH, ZERO, TRIM):
                ops.append((kind, off, ln, flags, pos))
    return ops


def apply(img, rec, ops):
    with open(img, "r+b") as out:
        for kind, off, ln, flags, pos in ops:
            if kind == WRITE:
                rec.seek(pos)
                out.seek(off)
                out.write(rec.read(ln))
            elif kind == ZERO:
                out.seek(off)
                out.write(bytes(ln))
            # TRIM: the old content may stay; leave it (the other
            # variant, zeros, is what ZERO covers).


def check(img, oracle_cmd=None):
    """(fsck clean, oracle ok or None, fsck output)."""
    subprocess.run(["e2fsck", "-E", "journal_only", "-fy", img],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = subprocess.run(["e2fsck", "-fn", img], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    clean = r.returncode == 0
    oracle = None
    if oracle_cmd:
        oracle = subprocess.run([oracle_cmd, img], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL).returncode == 0
    return clean, oracle, r.stdout.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("record")
    ap.add_argument("--subsets", type=int, default=200,
                    help="random subset states [200]")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--oracle", default=None,
                    help="command run with each state's image: exit 0 if "
                    "it holds what the workload made durable")
    ap.add_argument("--unsafe-drop-before-flush", type=int, default=0)
    ap.add_argument("--scratch", default="/dev/shm" if os.path.isdir(
        "/dev/shm") else "/tmp")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()

    ops = read_record(a.record)
    if a.unsafe_drop_before_flush:
        keep, pending = [], []
        for op in ops:
            if op[0] == FLUSH:
                pending = pending[:-a.unsafe_drop_before_flush] \
                    if len(pending) > a.unsafe_drop_before_flush else []
                keep += pending + [op]
                pending = []
            else:
                pending.append(op)
        ops = keep + pending
    flushes = [i for i, op in enumerate(ops) if op[0] == FLUSH]
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="ext4lazy-crash-", dir=a.scratch)
    base = os.path.join(work, "base.img")
    state = os.path.join(work, "state.img")
    shutil.copyfile(a.image, base)
    states = clean = 0
    oracle_ok = oracle_n = 0
    failures = []

    # Which epochs get subset states: seeded, spread over the log.
    epochs = list(range(len(flushes) + 1))
    subset_plan = {}
    for _ in range(a.subsets if epochs else 0):
        e = rng.choice(epochs)
        subset_plan[e] = subset_plan.get(e, 0) + 1

    durable_from = None  # first flush boundary holding the durable set

    def run_state(label, extra_ops, epoch, final=False, boundary=False):
        nonlocal states, clean, oracle_ok, oracle_n, durable_from
        shutil.copyfile(base, state)
        with open(a.record, "rb") as rec:
            apply(state, rec, extra_ops)
        ok, oracle, out = check(state, a.oracle)
        states += 1
        clean += ok
        if oracle is not None:
            if boundary and oracle and durable_from is None:
                durable_from = epoch
            # Before the workload's changes were durable, a state may
            # hold older content; after, never.
            required = final or (durable_from is not None
                                 and epoch >= durable_from)
            if required:
                oracle_n += 1
                oracle_ok += oracle
            else:
                oracle = None
        if not ok or oracle is False:
            failures.append(label)
            if a.verbose or len(failures) <= 3:
                print(f"crashgen: {label}: e2fsck {'clean' if ok else 'NOT clean'}"
                      f"{'' if oracle is None else ', oracle ' + ('ok' if oracle else 'FAILED')}",
                      file=sys.stderr)
                if not ok:
                    print("\n".join(out.splitlines()[:12]), file=sys.stderr)

    start = 0
    with open(a.record, "rb") as rec:
        for e in epochs:
            end = flushes[e] if e < len(flushes) else len(ops)
            epoch = [op for op in ops[start:end] if op[0] != FLUSH]
            for k in range(subset_plan.get(e, 0)):
                sub = [op for op in epoch if rng.random() < 0.5]
                # Subset states of epoch e sit after flush e-1.
                run_state(f"epoch {e} subset {k} ({len(sub)}/{len(epoch)})",
                          sub, e - 1)
            apply(base, rec, epoch)
            if e < len(flushes):
                run_state(f"flush {e}", [], e, boundary=True)
            start = end + 1
    run_state("end", [], len(flushes), final=True)
    shutil.rmtree(work, ignore_errors=True)
    print(f"states {states} clean {clean} oracle {oracle_ok}/{oracle_n} "
          f"failed {len(failures)} durable-from-flush {durable_from}")
    sys.exit(1 if failures else 0)


main()
