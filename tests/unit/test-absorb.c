/* SPDX-License-Identifier: BSD-3-Clause */
/* test-absorb.c --- the journal under policy=atime|lazy, over real ext4
 * images with a journal made at test time: which journal block writes
 * are held, the class a pending block arrives with and what a FLUSH
 * does with it, absorbed transactions, dead holds, the ordering rule.
 *
 * Transactions come from debugfs's journal commands (jo, jw, jc) on a
 * copy of the image; the test replays the journal blocks that differ
 * through the engine as the kernel's jbd2 would write them.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "engine.h"
#include "stats.h"
#include "testengine.h"
#include "testpoint.h"
#include "testutil.h"

/* ---- the journal under policy=atime --------------------------------- */

static struct engine *
open_engine_policy (enum policy p)
{
  return open_engine_at (img, p, 0, 0);
}

/* The journal inode's blocks of img, in logical order. */
static int
journal_blocks (const char *image, unsigned long long *jblk, int max)
{
  char cmd[512];
  int n = 0;
  FILE *p;

  snprintf (cmd, sizeof cmd,
            "debugfs -R 'blocks <8>' %s 2>/dev/null | tr ' ' '\\n'", image);
  p = popen (cmd, "r");
  cr_assert_not_null (p);
  while (n < max && fscanf (p, "%llu", &jblk[n]) == 1)
    n++;
  pclose (p);
  cr_assert_gt (n, 16, "journal blocks from debugfs");
  return n;
}

/* How many journal blocks (the superblock left out) differ; with
 * first, the device offset of the first that does (0 if none).
 */
static int
journal_diff (const char *a_img, const char *b_img, uint64_t *first)
{
  unsigned long long jblk[4096];
  int n = journal_blocks (a_img, jblk, 4096), d = 0;
  int fa = open (a_img, O_RDONLY), fb = open (b_img, O_RDONLY);

  if (first)
    *first = 0;
  for (int i = 1; i < n; i++)
    {
      char a[4096], b[4096];

      cr_assert_eq (pread (fa, a, 4096, jblk[i] * 4096), 4096);
      cr_assert_eq (pread (fb, b, 4096, jblk[i] * 4096), 4096);
      if (memcmp (a, b, 4096) == 0)
        continue;
      if (first && d == 0)
        *first = jblk[i] * 4096;
      d++;
    }
  close (fa);
  close (fb);
  return d;
}

static int
journal_diff_count (const char *a_img, const char *b_img)
{
  return journal_diff (a_img, b_img, NULL);
}

/* Journal-area writes that turn image `from` into image `to` (the jbd2
 * superblock, lblk 0, left out), in log order, through the engine: the
 * first `skip` differing blocks are left out, and at most `max` are
 * written.  Returns how many blocks were written.
 */
static int
replay_journal_diff_part (struct engine *e, const char *from, const char *to,
                          int skip, int max)
{
  unsigned long long jblk[4096];
  int n = journal_blocks (from, jblk, 4096), changed = 0, seen = 0, fa, fb;

  fa = open (from, O_RDONLY);
  fb = open (to, O_RDONLY);
  for (int i = 1; i < n; i++)
    {
      char a[4096], b[4096];

      cr_assert_eq (pread (fa, a, 4096, jblk[i] * 4096), 4096);
      cr_assert_eq (pread (fb, b, 4096, jblk[i] * 4096), 4096);
      if (memcmp (a, b, 4096) == 0 || seen++ < skip || changed >= max)
        continue;
      cr_assert_eq (engine_pwrite (e, b, 4096, jblk[i] * 4096, 0), 0);
      changed++;
    }
  close (fa);
  close (fb);
  return changed;
}

static int
replay_journal_diff (struct engine *e, const char *from, const char *to)
{
  return replay_journal_diff_part (e, from, to, 0, 1 << 30);
}

/* `to` = `from` with one journal transaction logging the inode-table
 * block at off with the content debugfs gives after field_cmd.
 */
static void
journal_tx (const char *from, const char *to, const char *field_cmd,
            uint64_t off)
{
  char blk[4096], path[128];
  int fd;

  changed_block (field_cmd, off, blk); /* from img: img must be `from` */
  snprintf (path, sizeof path, "%s/txblock", dir);
  fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert_eq (write (fd, blk, 4096), 4096);
  close (fd);
  sh_ok ("cp %s %s && printf 'jo\\njw -b %llu %s\\njc\\n' > %s/txscript && "
         "debugfs -w -f %s/txscript %s >/dev/null 2>&1",
         from, to, (unsigned long long)(off / 4096), path, dir, dir, to);
}

/* The paths, in dir, of before.img (a copy of img as it is now) and of
 * t1.img and t2.img (t2 NULL: none), each of 96 bytes, for the states
 * after one and two transactions.
 */
static void
tx_images (char *before, char *t1, char *t2)
{
  snprintf (before, 96, "%s/before.img", dir);
  snprintf (t1, 96, "%s/t1.img", dir);
  if (t2)
    snprintf (t2, 96, "%s/t2.img", dir);
  sh_ok ("cp %s %s", img, before);
}

static void
setup_journaled (void)
{
  setup ();
  sh_ok ("mkfs.ext4 -q -F -b 4096 -I 256 -O has_journal -d %s/root %s 32M", dir,
         img);
}

static bool
same_file_region (const char *a, const char *b)
{
  char cmd[256];

  snprintf (cmd, sizeof cmd, "cmp -s %s %s", a, b);
  return system (cmd) == 0;
}

Test (absorb, atime_transaction_absorbed, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  char before[96], logged[96], back[4096], want[4096];
  uint64_t off = inode_block ("f1");
  struct engine *e;
  struct fs_stats c;
  int n;

  tx_images (before, logged, NULL);
  journal_tx (img, logged, "set_inode_field /f1 atime 20200101", off);

  e = open_engine_policy (POLICY_ATIME);
  n = replay_journal_diff (e, before, logged);
  cr_assert_geq (n, 3, "descriptor, logged copy and commit");
  c = stats0 (e, NULL);
  cr_assert_eq (c.tx_absorbed, 1, "an atime-only transaction is absorbed");
  cr_assert_eq (c.journal_held, (uint64_t)n);
  cr_assert (same_file_region (img, before), "the store is unchanged");

  /* FLUSH keeps it under atime; reads see it. */
  cr_assert_eq (engine_flush (e), 0);
  cr_assert (same_file_region (img, before), "FLUSH keeps absorbed blocks");
  /* An explicit flush writes everything back: the log as the client
   * wrote it.
   */
  cr_assert_eq (engine_writeback_all (e), 0);
  store_block (off, back);
  {
    int fd = open (before, O_RDONLY);
    cr_assert_eq (pread (fd, want, 4096, off), 4096);
    close (fd);
  }
  cr_assert_eq (memcmp (back, want, 4096), 0, "in-place block untouched");
  engine_close (e);
}

/* In dir: before.img (img as it is), t1.img (before plus a transaction
 * logging an atime change of f1's block at off) and t2.img (t1 plus a
 * transaction changing f1's mode: real).  img is left as it was.
 */
static void
atime_then_mode (char *before, char *t1, char *t2, uint64_t off)
{
  tx_images (before, t1, t2);
  journal_tx (img, t1, "set_inode_field /f1 atime 20200101", off);
  sh_ok ("cp %s %s.base && cp %s %s", img, img, t1, img);
  journal_tx (t1, t2, "set_inode_field /f1 mode 0100600", off);
  sh_ok ("cp %s.base %s", img, img);
}

Test (absorb, real_transaction_writes_absorbed_first, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  char before[96], t1[96], t2[96];
  uint64_t off = inode_block ("f1");
  struct engine *e;
  struct fs_stats c;

  atime_then_mode (before, t1, t2, off);

  e = open_engine_policy (POLICY_ATIME);
  replay_journal_diff (e, before, t1);
  cr_assert_eq (stats0 (e, NULL).tx_absorbed, 1);
  replay_journal_diff (e, t1, t2);
  c = stats0 (e, NULL);
  cr_assert_geq (c.tx_real, 1, "a mode change is real");
  cr_assert_geq (c.writeback[WB_JOURNAL], 3,
                 "the absorbed transaction went first");
  engine_close (e);
  /* Everything the client wrote to the journal is in the store. */
  cr_assert_eq (journal_diff_count (img, t2), 0,
                "journal blocks equal the client's");
}

/* Store writes that start in [count_lo, count_hi), and the longest. */
static _Atomic uint64_t count_lo, count_hi;
static atomic_int counted;
static _Atomic uint64_t counted_max;

static int
count_writes (const struct bio *bio)
{
  if (bio->op == BIO_WRITE && bio->offset >= atomic_load (&count_lo)
      && bio->offset < atomic_load (&count_hi))
    {
      atomic_fetch_add (&counted, 1);
      if (bio->len > atomic_load (&counted_max))
        atomic_store (&counted_max, bio->len);
    }
  return 0;
}

/* Journal blocks that go through under policy=atime reach the store as
 * one write per run of adjacent blocks, as a plain write of the same
 * bytes would.  A partial block write to the journal (the kernel never
 * does one) makes the engine lose track of the log: what follows goes
 * through until the log is empty again.
 */
Test (absorb, journal_pass_through_merged, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  static unsigned long long jblk[4096];
  static char buf[16 * 4096], back[16 * 4096];
  struct engine *e;
  int fd;

  int n = journal_blocks (img, jblk, 4096), k = 1, run = 1;
  uint64_t off;

  /* 16 journal blocks adjacent on the device, the superblock left out. */
  for (int i = 2; i < n && run < 16; i++)
    if (jblk[i] == jblk[i - 1] + 1)
      run++;
    else
      k = i, run = 1;
  cr_assert_eq (run, 16, "16 adjacent journal blocks");
  off = jblk[k] * 4096;
  atomic_store (&count_lo, off);
  atomic_store (&count_hi, off + sizeof buf);
  fault_hook = count_writes;
  e = open_engine_policy (POLICY_ATIME);
  memset (buf, 'j', sizeof buf);
  cr_assert_eq (engine_pwrite (e, buf, 512, off, 0), 0);
  atomic_store (&counted, 0);
  atomic_store (&counted_max, 0);
  cr_assert_eq (engine_pwrite (e, buf, sizeof buf, off, 0), 0);
  cr_assert_eq (atomic_load (&counted), 1,
                "one write, not one per block: %d, longest %llu",
                atomic_load (&counted),
                (unsigned long long)atomic_load (&counted_max));
  cr_assert_eq (atomic_load (&counted_max), sizeof buf);
  fd = open (img, O_RDONLY);
  cr_assert_eq (pread (fd, back, sizeof back, off), sizeof back);
  close (fd);
  cr_assert_eq (memcmp (back, buf, sizeof buf), 0, "the store has it");
  cr_assert_eq (stats0 (e, NULL).journal_held, 0);
  engine_close (e);
}

/* Inside the store write of a journal write's last batch (pass_hook,
 * armed once pass_armed is set): another connection's time-only
 * inode-table write, which needs the hold lock, and a partial write of
 * the same journal block in another thread, which must wait for the
 * batch to arrive.
 */
static struct engine *pass_engine;
static _Atomic uint64_t pass_off, pass_itable_off;
static atomic_bool pass_armed, partial_done;
static char pass_itable[4096], partial_buf[512];
static pthread_t partial_thread;

static void *
partial_writer (void *arg)
{
  (void)arg;
  cr_assert_eq (engine_pwrite (pass_engine, partial_buf, sizeof partial_buf,
                               atomic_load (&pass_off), 0),
                0);
  atomic_store (&partial_done, true);
  return NULL;
}

static int
pass_hook (const struct bio *bio)
{
  if (bio->op != BIO_WRITE || bio->offset != atomic_load (&pass_off)
      || !atomic_exchange (&pass_armed, false))
    return 0;
  cr_assert_eq (engine_pwrite (pass_engine, pass_itable, 4096,
                               atomic_load (&pass_itable_off), 0),
                0, "an inode-table write while the batch is on its way");
  cr_assert_eq (pthread_create (&partial_thread, NULL, partial_writer, NULL),
                0);
  usleep (200 * 1000);
  cr_assert (!atomic_load (&partial_done),
             "a partial write of the block waits for the batch");
  return 0;
}

/* The last batch of a journal write goes to the store without the hold
 * lock; the engine's own reads of those blocks wait for it.
 */
Test (absorb, journal_pass_without_hold_lock, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  static unsigned long long jblk[4096];
  char blk[4096], back[4096], orig[4096];
  struct engine *e;
  int n = journal_blocks (img, jblk, 4096);
  uint64_t held;
  int fd;

  atomic_store (&pass_off, jblk[n / 2] * 4096);
  atomic_store (&pass_itable_off, inode_block ("f1"));
  store_block (atomic_load (&pass_itable_off), orig);
  changed_block ("set_inode_field /f1 atime 20200101",
                 atomic_load (&pass_itable_off), pass_itable);
  fault_hook = pass_hook;
  e = open_engine_policy (POLICY_ATIME);
  pass_engine = e;
  /* A partial write: the engine stops following the log, and what
   * comes next goes through.
   */
  memset (blk, 'j', sizeof blk);
  cr_assert_eq (engine_pwrite (e, blk, 512, atomic_load (&pass_off), 0), 0);
  memset (partial_buf, 'p', sizeof partial_buf);
  atomic_store (&pass_armed, true);
  cr_assert_eq (engine_pwrite (e, blk, sizeof blk, atomic_load (&pass_off), 0),
                0);
  cr_assert (!atomic_load (&pass_armed), "the hook ran");
  pthread_join (partial_thread, NULL);
  cr_assert (atomic_load (&partial_done));

  fd = open (img, O_RDONLY);
  cr_assert_eq (pread (fd, back, sizeof back, atomic_load (&pass_off)),
                sizeof back);
  close (fd);
  cr_assert_eq (memcmp (back, partial_buf, 512), 0, "the partial write last");
  cr_assert_eq (memcmp (back + 512, blk + 512, 4096 - 512), 0);
  stats0 (e, &held);
  cr_assert_eq (held, 1, "the inode-table write is held");
  store_block (atomic_load (&pass_itable_off), back);
  cr_assert_eq (memcmp (back, orig, 4096), 0);
  engine_close (e);
}

Test (absorb, strict_passes_journal_through, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  char before[96], logged[96];
  uint64_t off = inode_block ("f1");
  struct engine *e;

  tx_images (before, logged, NULL);
  journal_tx (img, logged, "set_inode_field /f1 atime 20200101", off);
  e = open_engine_policy (POLICY_STRICT);
  cr_assert_geq (replay_journal_diff (e, before, logged), 3);
  cr_assert_eq (stats0 (e, NULL).journal_held, 0);
  cr_assert (!same_file_region (img, before), "written through");
  engine_close (e);
}

/* The journal superblock recovery writes after replaying `from`: s_start
 * 0, s_sequence one past the last transaction.  Returns its device
 * offset; its content is in sb.
 */
static uint64_t
clean_journal_sb (const char *from, char *sb)
{
  unsigned long long jblk[4096];
  char rec[96];
  int fd;

  snprintf (rec, sizeof rec, "%s/recovered.img", dir);
  sh_ok ("cp %s %s && e2fsck -E journal_only -fy %s >/dev/null 2>&1; true",
         from, rec, rec);
  journal_blocks (rec, jblk, 4096);
  fd = open (rec, O_RDONLY);
  cr_assert_eq (pread (fd, sb, 4096, jblk[0] * 4096), 4096);
  close (fd);
  cr_assert_eq (sb[0x1c] | sb[0x1d] | sb[0x1e] | sb[0x1f], 0,
                "recovery leaves s_start = 0");
  return jblk[0] * 4096;
}

/* Under policy=atime as under lazy, absorbed blocks behind the durable
 * tail are dead and discarded at once: nothing ever writes them, and
 * reads of their positions return what the store has.
 */
Test (absorb, atime_discards_dead_absorbed_blocks, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  char before[96], t1[96], t2[96], sb[4096], a[4096], b[4096];
  uint64_t off = inode_block ("f1"), sboff, held, pos;
  struct engine *e;
  struct fs_stats c;
  int n, fb;

  atime_then_mode (before, t1, t2, off);
  sboff = clean_journal_sb (t1, sb);

  e = open_engine_policy (POLICY_ATIME);
  n = replay_journal_diff (e, before, t1);
  cr_assert_eq (stats0 (e, &held).tx_absorbed, 1);
  cr_assert_eq (held, (uint64_t)n);

  /* The kernel checkpointed and marked the log empty, with FUA: the
   * absorbed transaction is behind the durable tail, and dropped.
   */
  cr_assert_eq (engine_pwrite (e, sb, 4096, sboff, BIO_FUA), 0);
  c = stats0 (e, &held);
  cr_assert_eq (held, 0, "dead holds are discarded under atime");
  cr_assert_eq (c.discarded, (uint64_t)n);

  /* A real transaction after it writes only itself. */
  replay_journal_diff (e, t1, t2);
  c = stats0 (e, &held);
  cr_assert_geq (c.tx_real, 1, "a mode change is real");
  journal_diff (before, t1, &pos);
  cr_assert_gt (pos, 0, "the absorbed transaction's first block");
  fb = open (before, O_RDONLY);
  cr_assert_eq (pread (fb, a, 4096, pos), 4096);
  close (fb);
  store_block (pos, b);
  cr_assert_eq (memcmp (a, b, 4096), 0, "never written");
  cr_assert_eq (engine_pread (e, b, 4096, pos), 0);
  cr_assert_eq (memcmp (a, b, 4096), 0, "reads see the store's block");
  engine_close (e);
  cr_assert_eq (journal_diff_count (img, t2), n,
                "not at shutdown either: the store never got them");
}

Test (absorb, lazy_discards_dead_absorbed_after_durable_tail,
      .init = setup_journaled, .fini = teardown, .timeout = 60)
{
  char before[96], t1[96], sb[4096];
  uint64_t off = inode_block ("f1"), sboff, held;
  struct engine *e;
  struct fs_stats c;
  int n;

  tx_images (before, t1, NULL);
  journal_tx (img, t1, "set_inode_field /f1 mtime 20200101", off);
  sboff = clean_journal_sb (t1, sb);

  e = open_engine_policy (POLICY_LAZY);
  n = replay_journal_diff (e, before, t1);
  c = stats0 (e, &held);
  cr_assert_eq (c.tx_absorbed, 1, "an mtime-only transaction, under lazy");
  cr_assert_eq (held, (uint64_t)n);

  /* Without FUA the new tail is not durable yet: nothing is dropped. */
  cr_assert_eq (engine_pwrite (e, sb, 4096, sboff, 0), 0);
  stats0 (e, &held);
  cr_assert_eq (held, (uint64_t)n, "kept until the superblock is durable");

  /* After the flush it is: the dead transaction is discarded. */
  cr_assert_eq (engine_flush (e), 0);
  c = stats0 (e, &held);
  cr_assert_eq (held, 0, "discarded");
  cr_assert_eq (c.discarded, (uint64_t)n);
  cr_assert_eq (c.writeback[WB_JOURNAL] + c.writeback[WB_FLUSH], 0,
                "nothing was written back");
  engine_close (e);
  cr_assert_eq (journal_diff_count (img, before), 0,
                "the store never got the absorbed transaction");
}

/* A transaction that logs the superblock's block: absorbed when only
 * the informational fields changed (what the kernel's first file open
 * after a mount logs: s_last_mounted), real for any other field.
 */
static struct fs_stats
superblock_tx (const char *cmd, uint64_t *held, int *n)
{
  char before[96], t1[96];
  struct engine *e;
  struct fs_stats c;

  snprintf (before, sizeof before, "%s/before.img", dir);
  snprintf (t1, sizeof t1, "%s/t1.img", dir);
  /* Each time from the filesystem as made (the engine writes to img). */
  sh_ok ("test -f %s.made || cp %s %s.made; cp %s.made %s; cp %s %s", img, img,
         img, img, img, img, before);
  journal_tx (img, t1, cmd, 0);
  e = open_engine_policy (POLICY_ATIME);
  *n = replay_journal_diff (e, before, t1);
  cr_assert_gt (*n, 0);
  cr_assert_eq (engine_flush (e), 0);
  c = stats0 (e, held);
  engine_close (e);
  return c;
}

Test (absorb, superblock_informational_tx_absorbed, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  uint64_t held;
  int n;
  struct fs_stats c = superblock_tx ("ssv last_mounted /mnt/data", &held, &n);

  cr_assert_eq (c.tx_absorbed, 1, "s_last_mounted and the checksum only");
  cr_assert_eq (c.tx_real, 0);
  cr_assert_eq (held, (uint64_t)n, "held across the FLUSH");
}

Test (absorb, superblock_other_field_tx_real, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  static const char *const cmds[]
      = { "ssv mnt_count 9", "ssv state 0", "ssv free_inodes_count 5",
          "ssv volume_name other", "ssv last_orphan 12" };

  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    {
      uint64_t held;
      int n;
      struct fs_stats c = superblock_tx (cmds[i], &held, &n);

      cr_assert_eq (c.tx_absorbed, 0, "%s", cmds[i]);
      cr_assert_geq (c.tx_real, 1, "%s", cmds[i]);
      cr_assert_eq (held, 0, "%s", cmds[i]);
    }
}

Test (absorb, real_open_transaction_rides_the_flush, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  char before[96], t1[96], t2[96];
  uint64_t off = inode_block ("f1"), held;
  struct engine *e;
  struct fs_stats c;
  int n, total;

  tx_images (before, t1, t2);
  journal_tx (img, t1, "set_inode_field /f1 atime 20200101", off);
  journal_tx (img, t2, "set_inode_field /f1 mode 0100600", off);
  total = journal_diff_count (before, t1);
  cr_assert_geq (total, 3, "descriptor, logged copy and commit");

  /* An atime transaction without its commit: kept across a FLUSH. */
  e = open_engine_policy (POLICY_ATIME);
  n = replay_journal_diff_part (e, before, t1, 0, total - 1);
  cr_assert_eq (engine_flush (e), 0);
  stats0 (e, &held);
  cr_assert_eq (held, (uint64_t)n, "absorbable: still pending");
  engine_close (e);

  /* A mode change without its commit: already bound to be real, so it
   * goes at the FLUSH, and its commit needs no write-back of its own.
   */
  sh_ok ("cp %s %s", before, img);
  e = open_engine_policy (POLICY_ATIME);
  n = replay_journal_diff_part (e, before, t2, 0, total - 1);
  stats0 (e, &held);
  cr_assert_eq (held, (uint64_t)n, "pending until the flush");
  cr_assert_eq (engine_flush (e), 0);
  c = stats0 (e, &held);
  cr_assert_eq (held, 0, "written at the flush");
  cr_assert_eq (c.writeback[WB_FLUSH], (uint64_t)n);
  cr_assert_eq (replay_journal_diff_part (e, before, t2, total - 1, 1), 1);
  c = stats0 (e, NULL);
  cr_assert_eq (c.tx_real, 1);
  cr_assert_eq (c.writeback[WB_JOURNAL], 0, "nothing left for the commit");
  engine_close (e);
  cr_assert_eq (journal_diff_count (img, t2), 0, "the log as the client's");
}

/* The memory cap counts in-place and journal holds alike: when the
 * oldest holds it must write back include a journal hold (which takes
 * every journal hold with it, for the ordering rule), the in-place
 * holds it chose go too, and the cap holds afterwards.
 */
Test (absorb, memory_cap_with_journal_holds, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  char before[96], logged[96], a_nw[4096], a_orig[4096];
  char two[8192], back[8192];
  uint64_t off = inode_block ("f1"), off2 = inode_block ("f20"), held;
  struct stats_snapshot s;
  struct engine *e;

  cr_assert_eq (off2, off + 4096, "f1 and f20 in neighbouring blocks");
  tx_images (before, logged, NULL);
  journal_tx (img, logged, "set_inode_field /f1 atime 20200101", off);
  changed_block ("set_inode_field /f1 atime 20210101", off, two);
  changed_block ("set_inode_field /f20 atime 20210101", off2, two + 4096);

  /* Oldest first: an in-place hold, a pending journal block, then one
   * write of two more in-place blocks: 16K held under an 8K cap.
   */
  e = open_engine_at (img, POLICY_ATIME, 0, 8192);
  hold_atime (e, "f40", a_nw, a_orig);
  cr_assert_eq (replay_journal_diff_part (e, before, logged, 0, 1), 1);
  stats0 (e, &held);
  cr_assert_eq (held, 2);
  cr_assert_eq (engine_pwrite (e, two, 8192, off, 0), 0);
  cr_assert_eq (engine_stats (e, &s), 0);
  cr_assert_leq (s.fs[0].held_bytes, 6144,
                 "over the low-water mark: %" PRIu64 " bytes",
                 s.fs[0].held_bytes);
  cr_assert_eq (s.fs[0].c.writeback[WB_MEMORY], 3,
                "the in-place hold, the journal block, and the oldest of "
                "the two");
  engine_stats_free (&s);
  cr_assert_eq (engine_pread (e, back, 8192, off), 0);
  cr_assert_eq (memcmp (back, two, 8192), 0, "the newest blocks are held");
  engine_close (e);
}

struct extent_probe
{
  uint64_t at; /* the offset asked about */
  int found;   /* 1: data there, 0: a hole there, -1: not reported */
};

static int
probe_extent (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  struct extent_probe *p = opaque;

  if (p->at >= off && p->at - off < len)
    p->found = !hole;
  return 0;
}

/* A journal block held where the store has a hole (mkfs leaves the
 * journal sparse) is data to block status, as it is to reads.
 */
Test (absorb, extents_agree_with_held_blocks, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  char before[96], logged[96], back[8192], zero[8192] = { 0 };
  uint64_t off = inode_block ("f1"), first;
  int fd;
  struct extent_probe p;
  struct engine *e;

  tx_images (before, logged, NULL);
  journal_tx (img, logged, "set_inode_field /f1 atime 20200101", off);
  cr_assert_geq (journal_diff (before, logged, &first), 3);
  fd = open (img, O_RDONLY);
  cr_assert_eq (pread (fd, back, 8192, first), 8192);
  close (fd);
  cr_assert_eq (memcmp (back, zero, 8192), 0, "unused journal blocks");
  sh_ok ("fallocate -p -o %llu -l 8192 %s", (unsigned long long)first, img);

  e = open_engine_policy (POLICY_ATIME);
  p = (struct extent_probe){ first, -1 };
  cr_assert_eq (engine_extents (e, 1 << 20, first, probe_extent, &p), 0);
  if (p.found != 0)
    cr_skip_test ("the scratch filesystem has no holes (SEEK_HOLE)");
  cr_assert_eq (replay_journal_diff_part (e, before, logged, 0, 1), 1);
  cr_assert_eq (engine_pread (e, back, 4096, first), 0);
  cr_assert_neq (memcmp (back, zero, 4096), 0, "reads see the held block");
  p = (struct extent_probe){ first, -1 };
  cr_assert_eq (engine_extents (e, 1 << 20, first, probe_extent, &p), 0);
  cr_assert_eq (p.found, 1, "the held block is data");
  p = (struct extent_probe){ first + 4096, -1 };
  cr_assert_eq (engine_extents (e, 1 << 20, first, probe_extent, &p), 0);
  cr_assert_eq (p.found, 0, "the hole after it is still a hole");
  engine_close (e);
}

/* ---- the class a pending block arrives with --------------------------- */

struct pending_seen
{
  int copies[TCLASS_REAL + 1]; /* pending holds by class */
  int other;                   /* holds of any other kind */
};

static int
count_pending (void *opaque, const struct held_block *hb)
{
  struct pending_seen *s = opaque;

  if (hb->kind == HOLD_JPENDING && hb->cls <= TCLASS_REAL)
    s->copies[hb->cls]++;
  else
    s->other++;
  return 0;
}

static atomic_int store_reads;

static int
count_store_reads (const struct bio *bio)
{
  if (bio->op == BIO_READ)
    store_reads++;
  return 0;
}

/* A transaction changing f1's mtime, without its commit block, replayed
 * under policy p; returns the engine and the blocks held.
 */
static struct engine *
open_pending_mtime (enum policy p, int *held)
{
  char before[96], t1[96];
  uint64_t off = inode_block ("f1");
  struct engine *e;
  int total;

  tx_images (before, t1, NULL);
  journal_tx (img, t1, "set_inode_field /f1 mtime 20200101", off);
  total = journal_diff_count (before, t1);
  cr_assert_geq (total, 3, "descriptor, logged copy and commit");
  fault_hook = count_store_reads;
  e = open_engine_policy (p);
  fault_hook = NULL;
  *held = replay_journal_diff_part (e, before, t1, 0, total - 1);
  return e;
}

/* Each pending block's class is known when it arrives: the descriptor
 * as SAME, the logged copy of an mtime change as TIME; a FLUSH then
 * decides from the holds alone and reads nothing from the store.
 * Under lazy the transaction can be absorbed: it waits for its commit.
 */
Test (absorb, pending_class_at_arrival_lazy_waits, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  struct pending_seen seen = { 0 };
  struct engine *e;
  uint64_t held;
  int n;

  e = open_pending_mtime (POLICY_LAZY, &n);
  cr_assert_eq (engine_holds (e, count_pending, &seen), 0);
  cr_assert_eq (seen.other, 0, "only pending holds");
  cr_assert_eq (seen.copies[TCLASS_TIME], 1, "the logged copy: time");
  cr_assert_eq (seen.copies[TCLASS_SAME], n - 1, "the descriptor: same");
  store_reads = 0;
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (store_reads, 0, "a FLUSH reads nothing to decide");
  stats0 (e, &held);
  cr_assert_eq (held, (uint64_t)n, "absorbable under lazy: still pending");
  engine_close (e);
}

/* The same transaction under atime: an mtime change is not one it can
 * absorb, so the pending blocks ride the FLUSH (still without a read).
 */
Test (absorb, pending_class_at_arrival_atime_rides, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  struct pending_seen seen = { 0 };
  struct engine *e;
  struct fs_stats c;
  uint64_t held;
  int n;

  e = open_pending_mtime (POLICY_ATIME, &n);
  cr_assert_eq (engine_holds (e, count_pending, &seen), 0);
  cr_assert_eq (seen.copies[TCLASS_TIME], 1);
  store_reads = 0;
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (store_reads, 0, "a FLUSH reads nothing to decide");
  c = stats0 (e, &held);
  cr_assert_eq (held, 0, "written at the flush");
  cr_assert_eq (c.writeback[WB_FLUSH], (uint64_t)n);
  engine_close (e);
}

/* Store reads that cover the block at target_off. */
static atomic_int target_reads;
static _Atomic uint64_t target_off;

static int
count_target_reads (const struct bio *bio)
{
  if (bio->op == BIO_READ && bio->offset <= target_off
      && target_off < bio->offset + bio->len)
    target_reads++;
  return 0;
}

/* Two transactions logging f1's block: the copy classifier reads the
 * block in place from the store for the first only; the second finds it
 * in the reference cache.
 */
Test (absorb, copy_class_reads_the_store_once, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  char before[96], t1[96], t2[96];
  uint64_t off = inode_block ("f1");
  struct engine *e;

  tx_images (before, t1, t2);
  journal_tx (img, t1, "set_inode_field /f1 atime 20200101", off);
  journal_tx (t1, t2, "set_inode_field /f1 atime 20200202", off);
  target_off = off;
  fault_hook = count_target_reads;
  e = open_engine_policy (POLICY_ATIME);
  fault_hook = NULL;
  target_reads = 0;
  replay_journal_diff (e, before, t1);
  cr_assert_eq (target_reads, 1, "the first transaction reads the block");
  replay_journal_diff (e, t1, t2);
  cr_assert_eq (stats0 (e, NULL).tx_absorbed, 2);
  cr_assert_eq (target_reads, 1, "the second reads nothing new: %d",
                (int)target_reads);
  engine_close (e);
}

/* ---- an absorbed transaction's deadline ------------------------------- */

/* Wait until n absorbed holds are met (no timing asserted: it happens;
 * the caller checks).
 */
static void
wait_met (struct engine *e, uint64_t n)
{
  for (int i = 0; i < 200 && stats0 (e, NULL).deadline_met != n; i++)
    usleep (50000);
}

/* A transaction logging the block at off as debugfs's cmd leaves it
 * (blk, if not NULL), absorbed under policy=atime with a max-age of
 * 0.4 s, the deadline thread not started; before and t1 (len bytes
 * each) get the paths of the image before and after it.  Returns the
 * engine; *n is the journal blocks held.
 */
static struct engine *
one_absorbed (const char *cmd, uint64_t off, char *blk, char *before, char *t1,
              int *n)
{
  struct engine *e;

  tx_images (before, t1, NULL);
  journal_tx (img, t1, cmd, off);
  if (blk)
    changed_block (cmd, off, blk);
  e = open_engine_at (img, POLICY_ATIME, 400 * 1000000ull, 0);
  *n = replay_journal_diff (e, before, t1);
  cr_assert_eq (stats0 (e, NULL).tx_absorbed, 1);
  return e;
}

/* An atime transaction on f1's block absorbed (one_absorbed) and the
 * deadline thread running; with checkpoint set, the kernel's later
 * in-place write of the same block follows (held: it is atime-only
 * against the store).  Waits for the deadline write-back and returns the
 * engine; *n is the journal blocks held at first.
 */
static struct engine *
absorbed_past_deadline (bool checkpoint, char *before, char *t1, char *blk,
                        int *n)
{
  uint64_t off = inode_block ("f1");
  struct engine *e = one_absorbed ("set_inode_field /f1 atime 20200101", off,
                                   blk, before, t1, n);

  if (checkpoint)
    cr_assert_eq (engine_pwrite (e, blk, 4096, off, 0), 0);
  cr_assert_eq (engine_start (e, NULL, 0), 0);
  for (int i = 0; i < 200; i++) /* no timing asserted: it happens */
    {
      struct fs_stats c = stats0 (e, NULL);

      if (c.writeback[WB_DEADLINE] > 0 && (c.deadline_met > 0 || !checkpoint))
        break;
      usleep (50000);
    }
  return e;
}

/* The deadline of an absorbed transaction whose block has a newer
 * in-place hold is met by writing that block in place: the log is not
 * written, its blocks stay held (met) and readable, the deadline thread
 * does not come back for them.
 */
Test (absorb, deadline_met_in_place, .init = setup_journaled, .fini = teardown,
      .timeout = 60)
{
  char before[96], t1[96], blk[4096], back[4096];
  uint64_t off = inode_block ("f1"), held;
  struct engine *e;
  struct fs_stats c;
  int n;

  e = absorbed_past_deadline (true, before, t1, blk, &n);
  store_block (off, back);
  cr_assert_eq (memcmp (back, blk, 4096), 0, "the block in place");
  c = stats0 (e, &held);
  cr_assert_eq (c.writeback[WB_DEADLINE], 1, "one block: the in-place one");
  cr_assert_eq (c.deadline_met, (uint64_t)n, "every absorbed hold met");
  cr_assert_eq (held, (uint64_t)n, "the log stays held");
  cr_assert_eq (journal_diff_count (img, before), 0, "no log written");
  usleep (600000); /* past another deadline: nothing more */
  cr_assert_eq (stats0 (e, NULL).writeback[WB_DEADLINE], 1);
  /* The log as the client wrote it, from memory; at the end, in the
   * store.
   */
  cr_assert_eq (engine_writeback_all (e), 0);
  cr_assert_eq (journal_diff_count (img, t1), 0);
  cr_assert_eq (engine_stop (e), 0);
  engine_close (e);
}

/* Without a newer in-place hold, the deadline writes the logged copy in
 * place (what the kernel's checkpoint would write), not the log: the
 * log stays held, met.
 */
Test (absorb, deadline_without_checkpoint_writes_the_copy_in_place,
      .init = setup_journaled, .fini = teardown, .timeout = 60)
{
  char before[96], t1[96], blk[4096], back[4096];
  uint64_t off = inode_block ("f1"), held;
  struct engine *e;
  struct fs_stats c;
  int n;

  e = absorbed_past_deadline (false, before, t1, blk, &n);
  c = stats0 (e, &held);
  cr_assert_eq (c.writeback[WB_DEADLINE], 1, "one block, in place");
  cr_assert_eq (c.deadline_copied, 1, "from its logged copy");
  cr_assert_eq (c.deadline_met, (uint64_t)n, "every absorbed hold met");
  cr_assert_eq (held, (uint64_t)n, "the log stays held");
  store_block (off, back);
  cr_assert_eq (memcmp (back, blk, 4096), 0, "the logged copy in place");
  cr_assert_eq (journal_diff_count (img, before), 0, "no log written");
  usleep (600000); /* past another deadline: nothing more */
  cr_assert_eq (stats0 (e, NULL).writeback[WB_DEADLINE], 1);
  cr_assert_eq (engine_stop (e), 0);
  engine_close (e);
}

/* Where the kernel's own write of f1's block in place comes, in
 * two_transactions.
 */
enum in_place
{
  IN_PLACE_NONE,
  IN_PLACE_BETWEEN, /* after the first transaction, as it logged it */
  IN_PLACE_AFTER,   /* after the second, as it logged it */
};

/* Two atime transactions on f1's block, 2.4 s apart, under max-age 3 s
 * with the deadline thread running, and the kernel's in-place write of
 * the block (held) where `where` says.  Waits until every absorbed hold
 * is met and checks what every case must give: the block written once at
 * a deadline, with the second transaction's content; the log held, none
 * of it in the store.  Returns the stats.
 */
static struct fs_stats
two_transactions (enum in_place where)
{
  char before[96], t1[96], t2[96], ip[4096], blk[4096], back[4096];
  uint64_t off = inode_block ("f1"), held;
  struct engine *e;
  struct fs_stats c;
  int n1, n2;

  tx_images (before, t1, t2);
  journal_tx (img, t1, "set_inode_field /f1 atime 20200101", off);
  journal_tx (t1, t2, "set_inode_field /f1 atime 20200202", off);
  changed_block ("set_inode_field /f1 atime 20200101", off, ip);
  changed_block ("set_inode_field /f1 atime 20200202", off, blk);
  /* The first transaction falls due 0.6 s after the second arrives:
   * room for a slow (sanitised) build to check what is held before.
   */
  e = open_engine_at (img, POLICY_ATIME, 3000 * 1000000ull, 0);
  cr_assert_eq (engine_start (e, NULL, 0), 0);
  n1 = replay_journal_diff (e, before, t1);
  if (where == IN_PLACE_BETWEEN)
    cr_assert_eq (engine_pwrite (e, ip, 4096, off, 0), 0);
  usleep (2400000);
  n2 = replay_journal_diff (e, t1, t2);
  if (where == IN_PLACE_AFTER)
    cr_assert_eq (engine_pwrite (e, blk, 4096, off, 0), 0);
  c = stats0 (e, NULL);
  cr_assert_eq (c.tx_absorbed, 2);
  cr_assert_eq (c.held, where != IN_PLACE_NONE, "the in-place write held");
  wait_met (e, (uint64_t)(n1 + n2));
  c = stats0 (e, &held);
  cr_assert_eq (c.deadline_met, (uint64_t)(n1 + n2), "both met in place");
  cr_assert_eq (c.writeback[WB_DEADLINE], 1, "the block once");
  store_block (off, back);
  cr_assert_eq (memcmp (back, blk, 4096), 0, "the newest content in place");
  cr_assert_eq (held, (uint64_t)(n1 + n2), "the log stays held");
  cr_assert_eq (journal_diff_count (img, before), 0, "no log written");
  cr_assert_eq (engine_stop (e), 0);
  engine_close (e);
  return c;
}

/* No in-place write: the first deadline writes the newest logged copy
 * (the second transaction's) in place; at the second, the store already
 * has it, so nothing more is written.
 */
Test (absorb, deadline_writes_the_newest_copy_once, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  cr_assert_eq (two_transactions (IN_PLACE_NONE).deadline_copied, 1);
}

/* The kernel's in-place write between the two: the first deadline
 * writes the newest content known, the second transaction's copy, not
 * the older in-place hold.
 */
Test (absorb, deadline_writes_a_copy_newer_than_the_in_place_hold,
      .init = setup_journaled, .fini = teardown, .timeout = 60)
{
  cr_assert_eq (two_transactions (IN_PLACE_BETWEEN).deadline_copied, 1,
                "from the second copy");
}

/* The kernel's in-place write after both: the first deadline writes
 * that in-place hold; at the second, the store is already as new.
 */
Test (absorb, deadline_met_by_an_earlier_in_place_write,
      .init = setup_journaled, .fini = teardown, .timeout = 60)
{
  cr_assert_eq (two_transactions (IN_PLACE_AFTER).deadline_copied, 0,
                "the in-place hold, no copy");
}

/* A logged copy whose first word is jbd2's magic is escaped in the log
 * (debugfs escapes it as the kernel does): it goes in place as the
 * filesystem had it, magic and all.
 */
Test (absorb, deadline_copy_in_place_unescaped, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  char before[96], t1[96], blk[4096], back[4096];
  const unsigned char magic[4] = { 0xc0, 0x3b, 0x39, 0x98 };
  uint64_t off = inode_block ("."), held;
  struct engine *e;
  struct fs_stats c;
  int n;

  /* Inode 1, the first of the root inode's block, begins with the
   * magic: mode 0x3bc0, uid 0x9839, little-endian.
   */
  sh_ok ("debugfs -w -R 'set_inode_field <1> mode 0x3bc0' %s >/dev/null 2>&1 "
         "&& debugfs -w -R 'set_inode_field <1> uid 0x9839' %s "
         ">/dev/null 2>&1",
         img, img);
  store_block (off, back);
  cr_assert_eq (memcmp (back, magic, 4), 0, "the block begins with it");
  e = one_absorbed ("set_inode_field / atime 20200101", off, blk, before, t1,
                    &n);
  cr_assert_eq (engine_start (e, NULL, 0), 0);
  wait_met (e, (uint64_t)n);
  c = stats0 (e, &held);
  cr_assert_eq (c.deadline_met, (uint64_t)n);
  cr_assert_eq (c.deadline_copied, 1);
  store_block (off, back);
  cr_assert_eq (memcmp (back, blk, 4096), 0,
                "the block as the filesystem had it, magic and all");
  cr_assert_eq (journal_diff_count (img, before), 0, "no log written");
  cr_assert_eq (engine_stop (e), 0);
  engine_close (e);
}

/* How f1's block reaches the store with newer content, in
 * newer_in_store_first.
 */
enum newer
{
  NEWER_REAL,   /* a real write */
  NEWER_ZERO,   /* a zero */
  NEWER_REREAD, /* a real write, then a re-read of the layout */
};

/* A layout re-read that moves nothing: a reserved GDT block (block 2 of
 * the image) written as it is marks the layout stale, and the next
 * write, outside every metadata block, reads it again.
 */
static void
reread_moving_nothing (struct engine *e)
{
  char blk[4096], data[4096] = { 7 };
  uint64_t n = layout_rereads (e);

  store_block (2 * 4096, blk);
  cr_assert_eq (engine_pwrite (e, blk, 4096, 2 * 4096, 0), 0);
  cr_assert_eq (engine_pwrite (e, data, 4096, 30 * 1024 * 1024, 0), 0);
  cr_assert_eq (layout_rereads (e), n + 1, "the layout was read again");
}

/* After an absorbed transaction, its block reaches the store with newer
 * content: at the deadline the older logged copy must not go over it.
 * The holds are met with nothing to write.  A re-read of the layout
 * that moves nothing keeps the absorbed holds, and with them the record
 * of what reached the store in place.
 */
static void
newer_in_store_first (enum newer how)
{
  char before[96], t1[96], real[4096], back[4096];
  uint64_t off = inode_block ("f1"), held;
  struct engine *e;
  struct fs_stats c;
  int n;

  changed_block ("set_inode_field /f1 links_count 7", off, real);
  e = one_absorbed ("set_inode_field /f1 atime 20200101", off, NULL, before, t1,
                    &n);
  if (how == NEWER_ZERO)
    {
      cr_assert_eq (engine_zero (e, 4096, off, 0), 0);
      memset (real, 0, sizeof real);
    }
  else
    cr_assert_eq (engine_pwrite (e, real, 4096, off, 0), 0);
  cr_assert_eq (stats0 (e, &held).real_writes, how == NEWER_ZERO ? 0 : 1);
  if (how == NEWER_REREAD)
    {
      reread_moving_nothing (e);
      stats0 (e, &held);
      cr_assert_eq (held, (uint64_t)n, "the absorbed holds stay");
    }
  cr_assert_eq (engine_start (e, NULL, 0), 0);
  wait_met (e, (uint64_t)n);
  usleep (200000);
  c = stats0 (e, &held);
  cr_assert_eq (c.deadline_met, (uint64_t)n, "met");
  cr_assert_eq (c.deadline_copied, 0);
  cr_assert_eq (c.writeback[WB_DEADLINE], 0, "nothing written");
  store_block (off, back);
  cr_assert_eq (memcmp (back, real, 4096), 0, "the newer content stays");
  cr_assert_eq (engine_stop (e), 0);
  engine_close (e);
}

Test (absorb, deadline_after_a_real_write_writes_nothing,
      .init = setup_journaled, .fini = teardown, .timeout = 60)
{
  newer_in_store_first (NEWER_REAL);
}

Test (absorb, deadline_after_a_zero_writes_nothing, .init = setup_journaled,
      .fini = teardown, .timeout = 60)
{
  newer_in_store_first (NEWER_ZERO);
}

Test (absorb, deadline_after_a_real_write_and_a_reread_writes_nothing,
      .init = setup_journaled, .fini = teardown, .timeout = 60)
{
  newer_in_store_first (NEWER_REREAD);
}

/* A journal write-back runs under the hold lock: the store write it
 * makes first is stuck here until released.
 */
static struct gate jstuck = GATE_INIT;
static atomic_bool jstuck_armed;

static int
jstuck_hook (const struct bio *bio)
{
  if (bio->op == BIO_WRITE && atomic_exchange (&jstuck_armed, false))
    gate_pass (&jstuck);
  return 0;
}

static void *
writeback_all_thread (void *p)
{
  return (void *)(intptr_t)engine_writeback_all (p);
}

/* The offsets of the holds listed (up to 64). */
struct listed
{
  uint64_t off[64];
  int n;
};

static int
list_hold (void *opaque, const struct held_block *hb)
{
  struct listed *l = opaque;

  if (l->n < 64)
    l->off[l->n] = hb->off;
  l->n++;
  return 0;
}

/* A write-back of journal holds (here an explicit one) runs its store
 * I/O without the hold lock: while it is stuck in the store, a read of a
 * held journal block gives the held content, and the stats and the list
 * of holds are current.  Once the store answers, the log is in it.
 */
Test (absorb, a_stuck_journal_writeback_does_not_stall_reads,
      .init = setup_journaled, .fini = teardown, .timeout = 60)
{
  char before[96], logged[96], got[4096], want[4096];
  struct stats_snapshot s;
  struct listed l = { .n = 0 }, during = { .n = 0 };
  struct engine *e;
  pthread_t t;
  void *ret;
  int n, fd;

  tx_images (before, logged, NULL);
  journal_tx (img, logged, "set_inode_field /f1 atime 20200101",
              inode_block ("f1"));
  fault_hook = jstuck_hook;
  e = open_engine_policy (POLICY_ATIME);
  n = replay_journal_diff (e, before, logged);
  cr_assert_eq (engine_holds (e, list_hold, &l), 0);
  cr_assert_eq (l.n, n, "the transaction is absorbed");

  atomic_store (&jstuck_armed, true);
  cr_assert_eq (pthread_create (&t, NULL, writeback_all_thread, e), 0);
  gate_wait (&jstuck, 1);
  fd = open (logged, O_RDONLY);
  cr_assert_eq (pread (fd, want, 4096, l.off[0]), 4096);
  close (fd);
  cr_expect_eq (engine_pread (e, got, 4096, l.off[0]), 0);
  cr_expect_eq (memcmp (got, want, 4096), 0, "the read gives the hold");
  cr_expect_eq (engine_stats (e, &s), 0);
  cr_expect_eq (s.holds_stale_s, 0, "the stats are current");
  cr_expect_eq (s.fs[0].held_blocks, (uint64_t)n);
  engine_stats_free (&s);
  cr_expect_eq (engine_holds (e, list_hold, &during), 0);
  cr_expect_eq (during.n, n, "the list of holds is current");

  gate_open (&jstuck);
  pthread_join (t, &ret);
  cr_expect_eq ((intptr_t)ret, 0, "the write-back ends once the store answers");
  cr_expect_eq (journal_diff_count (img, logged), 0, "the log is in the store");
  cr_expect_eq (engine_stats (e, &s), 0);
  cr_expect_eq (s.fs[0].held_blocks, 0);
  engine_stats_free (&s);
  engine_close (e);
}

struct replay
{
  struct engine *e;
  const char *from, *to;
};

static void *
replay_thread (void *p)
{
  struct replay *rp = p;

  replay_journal_diff (rp->e, rp->from, rp->to);
  return NULL;
}

/* A client's journal write runs its store I/O without the hold lock,
 * the journal state kept its own: here a real transaction, before which
 * the absorbed one goes to the store (the ordering rule), and that
 * write-back is stuck.  Meanwhile a read of a held in-place block gives
 * the held content, and the stats and the list of holds are current.
 * Once the store answers, the journal is as the client wrote it.
 */
Test (absorb, a_stuck_journal_write_does_not_stall_reads,
      .init = setup_journaled, .fini = teardown, .timeout = 60)
{
  char before[96], t1[96], t2[96], nw[4096], orig[4096], got[4096];
  uint64_t off = inode_block ("f1"), in_place;
  struct listed l = { .n = 0 };
  struct replay rp;
  struct stats_snapshot s;
  struct engine *e;
  pthread_t t;
  uint64_t held;

  atime_then_mode (before, t1, t2, off);
  fault_hook = jstuck_hook;
  e = open_engine_policy (POLICY_ATIME);
  replay_journal_diff (e, before, t1);
  in_place = hold_atime (e, "f30", nw, orig);
  stats0 (e, &held);
  cr_assert_gt (held, 1, "the atime transaction is absorbed, f30 held");

  atomic_store (&jstuck_armed, true);
  rp = (struct replay){ e, t1, t2 };
  cr_assert_eq (pthread_create (&t, NULL, replay_thread, &rp), 0);
  gate_wait (&jstuck, 1);
  cr_expect_eq (engine_pread (e, got, 4096, in_place), 0);
  cr_expect_eq (memcmp (got, nw, 4096), 0, "the read gives the hold");
  cr_expect_eq (engine_stats (e, &s), 0);
  cr_expect_eq (s.holds_stale_s, 0, "the stats are current");
  engine_stats_free (&s);
  cr_expect_eq (engine_holds (e, list_hold, &l), 0);
  cr_expect_gt (l.n, 0, "the list of holds is current");

  gate_open (&jstuck);
  pthread_join (t, NULL);
  engine_close (e);
  cr_expect_eq (journal_diff_count (img, t2), 0,
                "journal blocks equal the client's");
}

/* ---- waiting for a journal write's last batch ------------------------ */

/* A zero waits for a journal write's last batch on its way: the test
 * hears of it (TP_PASS_WAIT).
 */
static atomic_bool pass_waited;

static void
pass_wait_hook (enum test_point p)
{
  if (p == TP_PASS_WAIT)
    atomic_store (&pass_waited, true);
}

/* Wait up to secs for *flag (a generous bound: nothing else is slow). */
static bool
flag_within (atomic_bool *flag, int secs)
{
  for (int i = 0; i < secs * 100 && !atomic_load (flag); i++)
    usleep (10000);
  return atomic_load (flag);
}

/* A zero of a journal block that a client's journal write is passing
 * through (its last batch stuck in the store) waits for that write
 * without the hold lock: meanwhile a read of a held block, the stats
 * and a FLUSH answer.  Once the store answers, the zero lands after the
 * write.
 */
Test (absorb, a_zero_behind_a_stuck_journal_write_does_not_stall_reads,
      .init = setup_journaled, .fini = teardown, .timeout = 60)
{
  unsigned long long jblk[64];
  char junk[4096], nw[4096], orig[4096], got[4096], back[4096];
  struct engine *e;
  struct call w, z, rd;
  pthread_t tw, tz, tr;
  uint64_t joff, in_place;
  bool answered = false;

  journal_blocks (img, jblk, 64);
  joff = jblk[5] * 4096;
  memset (junk, 0x5a, sizeof junk);
  fault_hook = jstuck_hook;
  e = open_engine_policy (POLICY_ATIME);
  in_place = hold_atime (e, "f30", nw, orig);
  /* A partial write: the engine stops following the log, and what
   * comes next goes through, in the write's last batch.
   */
  cr_assert_eq (engine_pwrite (e, junk, 512, joff, 0), 0);

  gate_close (&jstuck);
  atomic_store (&jstuck_armed, true);
  w = (struct call){ .e = e, .off = joff, .buf = junk };
  cr_assert_eq (pthread_create (&tw, NULL, call_write, &w), 0);
  gate_wait (&jstuck, 1);
  cr_assert_not (atomic_load (&w.done));
  test_point_hook = pass_wait_hook;
  z = (struct call){ .e = e, .off = joff };
  cr_assert_eq (pthread_create (&tz, NULL, call_zero, &z), 0);
  cr_expect (flag_within (&pass_waited, 10), "the zero waits for the write");
  rd = (struct call){ .e = e, .off = in_place, .buf = got };
  cr_assert_eq (pthread_create (&tr, NULL, call_read_stats_flush, &rd), 0);
  answered = call_done_within (&rd, 10);
  gate_open (&jstuck);
  pthread_join (tw, NULL);
  pthread_join (tz, NULL);
  pthread_join (tr, NULL);
  test_point_hook = NULL;
  cr_expect (answered, "a read, the stats and a FLUSH answer while a zero "
                       "waits for a stuck journal write");
  cr_expect_eq (rd.r, 0);
  cr_expect_eq (memcmp (got, nw, 4096), 0, "the read gives the hold");
  cr_expect_eq (w.r, 0);
  cr_expect_eq (z.r, 0);
  store_block (joff, back);
  memset (junk, 0, sizeof junk);
  cr_expect_eq (memcmp (back, junk, 4096), 0, "the zero landed last");
  engine_close (e);
}

/* ---- an allocation failure during a write-back ------------------------ */

/* calloc fails for the calling thread when its countdown reaches 0 (-1:
 * never): the test links with --wrap=calloc.
 */
void *__real_calloc (size_t n, size_t size);
void *__wrap_calloc (size_t n, size_t size);
static _Thread_local long calloc_countdown = -1;
static _Thread_local bool calloc_failed;

void *
__wrap_calloc (size_t n, size_t size)
{
  if (calloc_countdown >= 0 && calloc_countdown-- == 0)
    {
      calloc_failed = true;
      return NULL;
    }
  return __real_calloc (n, size);
}

/* The first write of block lu_off after arming waits in the store until
 * released; another write of it meanwhile is a lost update in the
 * making: an older copy that may land after the newer write.
 */
static struct gate lu_gate = GATE_INIT;
static _Atomic uint64_t lu_off = UINT64_MAX;
static atomic_bool lu_armed, lu_inflight, lu_overtaken;

static int
lost_update_hook (const struct bio *bio)
{
  if (bio->op != BIO_WRITE || atomic_load (&lu_off) < bio->offset
      || atomic_load (&lu_off) >= bio->offset + bio->len)
    return 0;
  if (atomic_load (&lu_inflight))
    atomic_store (&lu_overtaken, true);
  else if (atomic_exchange (&lu_armed, false))
    {
      atomic_store (&lu_inflight, true);
      gate_pass (&lu_gate);
      atomic_store (&lu_inflight, false);
    }
  return 0;
}

struct failing_writeback
{
  struct engine *e;
  long k;
  bool failed;
  atomic_bool done;
};

static void *
failing_writeback_thread (void *p)
{
  struct failing_writeback *f = p;

  calloc_countdown = f->k;
  calloc_failed = false;
  engine_writeback_all (f->e);
  f->failed = calloc_failed;
  calloc_countdown = -1;
  atomic_store (&f->done, true);
  return NULL;
}

/* An explicit write-back of journal holds and of the in-place hold of a
 * block whose real write is on its way (stuck in the store), with its
 * k-th allocation failing: it may fail, but it never writes the older
 * held copy while the real write is on its way.  Returns whether an
 * allocation failed.
 */
static bool
writeback_with_failure (long k, const char *pristine)
{
  char before[96], t1[96], nw[4096], orig[4096], real[4096], back[4096];
  uint64_t f1 = inode_block ("f1"), y;
  struct failing_writeback f;
  struct call w;
  struct engine *e;
  pthread_t tw, tf;
  int n;

  sh_ok ("cp %s %s", pristine, img);
  e = one_absorbed ("set_inode_field /f1 atime 20200101", f1, NULL, before, t1,
                    &n);
  y = hold_atime (e, "f30", nw, orig);
  changed_block ("set_inode_field /f30 links_count 7", y, real);
  gate_close (&lu_gate);
  atomic_store (&lu_overtaken, false);
  atomic_store (&lu_off, y);
  atomic_store (&lu_armed, true);
  w = (struct call){ .e = e, .off = y, .buf = real };
  cr_assert_eq (pthread_create (&tw, NULL, call_write, &w), 0);
  gate_wait (&lu_gate, 1);
  f = (struct failing_writeback){ .e = e, .k = k };
  cr_assert_eq (pthread_create (&tf, NULL, failing_writeback_thread, &f), 0);
  /* It ends (with an error, or having written over the stuck write), or
   * waits for the real write.
   */
  for (int i = 0; i < 300 && !atomic_load (&f.done); i++)
    usleep (10000);
  gate_open (&lu_gate);
  pthread_join (tw, NULL);
  pthread_join (tf, NULL);
  cr_expect_not (atomic_load (&lu_overtaken),
                 "allocation %ld failed: the older held copy was written "
                 "while the real write was on its way",
                 k);
  cr_expect_eq (w.r, 0);
  engine_close (e);
  store_block (y, back);
  cr_expect_eq (memcmp (back, real, 4096), 0, "the real write stays");
  atomic_store (&lu_off, UINT64_MAX);
  return f.failed;
}

Test (absorb, a_failed_allocation_is_not_read_as_nothing_on_its_way,
      .init = setup_journaled, .fini = teardown, .timeout = 60)
{
  char pristine[128];

  snprintf (pristine, sizeof pristine, "%s.pristine", img);
  sh_ok ("cp %s %s", img, pristine);
  fault_hook = lost_update_hook;
  for (long k = 0; k < 32; k++)
    if (!writeback_with_failure (k, pristine))
      return;
  cr_assert_fail ("every allocation failed");
}
