/* SPDX-License-Identifier: BSD-3-Clause */
/* test-engine.c --- the engine over real ext4 images made at test time:
 * time-only inode-table writes are held and read back, and every
 * trigger of semantics.md writes back exactly what it says.
 *
 * Time-only and real block contents come from debugfs: it changes one
 * inode field on a copy of the image and updates the checksum as the
 * kernel would; the test takes the changed inode-table block.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <fcntl.h>
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
#include "testimg.h"
#include "testutil.h"

static struct stats_snapshot snapshot (struct engine *e);

TestSuite (engine, .init = setup, .fini = teardown, .timeout = 60);

Test (engine, time_only_is_held_until_flush)
{
  struct engine *e = open_engine (0, 0);
  char nw[4096], orig[4096], back[4096];
  uint64_t held, off = hold_atime (e, "f1", nw, orig);
  struct fs_stats c = stats0 (e, &held);

  cr_assert_eq (c.held, 1);
  cr_assert_eq (held, 1);

  /* Unaligned and partial reads overlay too. */
  cr_assert_eq (engine_pread (e, back, 1000, off + 77), 0);
  cr_assert_eq (memcmp (back, nw + 77, 1000), 0);
  cr_assert_eq (engine_pread (e, back, 4096, off - 2048), 0);
  cr_assert_eq (memcmp (back + 2048, nw, 2048), 0);

  cr_assert_eq (engine_flush (e), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "flush writes the hold back");
  c = stats0 (e, &held);
  cr_assert_eq (held, 0);
  cr_assert_eq (c.writeback[WB_FLUSH], 1);
  engine_close (e);
}

Test (engine, superseded_hold_keeps_newest)
{
  struct engine *e = open_engine (0, 0);
  char nw[4096], orig[4096], nw2[4096], back[4096];
  uint64_t off = hold_atime (e, "f1", nw, orig);

  /* A second time-only change to the same block (mtime of f1) replaces
   * the first in memory.
   */
  changed_block ("set_inode_field /f1 mtime 20210101", off, nw2);
  cr_assert_eq (engine_pwrite (e, nw2, 4096, off, 0), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, orig, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).superseded, 1);
  cr_assert_eq (engine_writeback_all (e), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw2, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).writeback[WB_EXPLICIT], 1);
  engine_close (e);
}

Test (engine, partial_time_only_write_is_held)
{
  struct engine *e = open_engine (0, 0);
  char nw[4096], orig[4096], back[4096];
  uint64_t off = inode_block ("f2");
  size_t lo = 0, hi = 4096;

  store_block (off, orig);
  changed_block ("set_inode_field /f2 atime 20200101", off, nw);
  while (nw[lo] == orig[lo])
    lo++;
  while (nw[hi - 1] == orig[hi - 1])
    hi--;
  /* Only the changed bytes, at an unaligned offset. */
  cr_assert_eq (engine_pwrite (e, nw + lo, hi - lo, off + lo, 0), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, orig, 4096), 0);
  cr_assert_eq (engine_pread (e, back, 4096, off), 0);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).held, 1);
  engine_close (e);
}

Test (engine, real_change_writes_back_newest)
{
  struct engine *e = open_engine (0, 0);
  char nw[4096], orig[4096], real[4096], back[4096];
  uint64_t off = hold_atime (e, "f1", nw, orig);

  /* The neighbour's real change: the mode of the inode next to f1's,
   * in the same block, on top of the held atime (debugfs works on the
   * image with the atime).
   */
  char cmd[96];

  snprintf (cmd, sizeof cmd, "set_inode_field <%u> mode 0100600",
            inode_number ("f1") ^ 1);
  sh_ok ("cp %s %s.orig", img, img);
  {
    int fd = open (img, O_WRONLY);
    cr_assert_eq (pwrite (fd, nw, 4096, off), 4096);
    close (fd);
  }
  changed_block (cmd, off, real);
  sh_ok ("cp %s.orig %s", img, img);
  cr_assert_eq (engine_pwrite (e, real, 4096, off, 0), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, real, 4096), 0, "real change goes through");
  cr_assert_eq (stats0 (e, NULL).writeback[WB_REAL], 1);
  cr_assert_eq (stats0 (e, NULL).real_writes, 1);
  engine_close (e);
}

Test (engine, fua_writes_through)
{
  struct engine *e = open_engine (0, 0);
  char nw[4096], orig[4096], back[4096];
  uint64_t off = inode_block ("f3");

  store_block (off, orig);
  changed_block ("set_inode_field /f3 atime 20200101", off, nw);
  cr_assert_eq (engine_pwrite (e, nw, 4096, off, BIO_FUA), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).held, 0);

  /* FUA on a held block: written back merged. */
  off = hold_atime (e, "f20", nw, orig);
  cr_assert_eq (engine_pwrite (e, nw + 10, 20, off + 10, BIO_FUA), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).writeback[WB_FUA], 1);
  engine_close (e);
}

Test (engine, deadline_writes_back)
{
  struct engine *e = open_engine (200 * 1000000ull, 0); /* 0.2 s */
  char nw[4096], orig[4096], back[4096];
  uint64_t off;

  cr_assert_eq (engine_start (e, NULL, 0), 0);
  off = hold_atime (e, "f1", nw, orig);
  /* Poll (no timing asserted: only that it happens). */
  for (int i = 0; i < 200; i++)
    {
      store_block (off, back);
      if (memcmp (back, nw, 4096) == 0
          && stats0 (e, NULL).writeback[WB_DEADLINE] == 1)
        break;
      usleep (50000);
    }
  cr_assert_eq (memcmp (back, nw, 4096), 0, "deadline write-back");
  cr_assert_eq (stats0 (e, NULL).writeback[WB_DEADLINE], 1);
  cr_assert_eq (engine_stop (e), 0);
  engine_close (e);
}

Test (engine, last_client_and_shutdown_write_back)
{
  struct engine *e = open_engine (0, 0);
  char nw[4096], orig[4096], back[4096];
  uint64_t off;

  cr_assert_eq (engine_start (e, NULL, 0), 0);
  engine_client_open (e);
  engine_client_open (e);
  off = hold_atime (e, "f1", nw, orig);
  cr_assert_eq (engine_client_close (e), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, orig, 4096), 0, "a client is still there");
  cr_assert_eq (engine_client_close (e), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).writeback[WB_DISCONNECT], 1);

  off = hold_atime (e, "f30", nw, orig);
  cr_assert_eq (engine_stop (e), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).writeback[WB_SHUTDOWN], 1);
  engine_close (e);
}

Test (engine, memory_cap)
{
  /* Room for two blocks: the third hold pushes out the oldest down to
   * the low-water mark (three quarters of the cap, 1.5 blocks): the two
   * oldest, in one batch.
   */
  struct engine *e = open_engine (0, 8192);
  char nw[3][4096], orig[3][4096], back[4096];
  const char *files[] = { "f1", "f20", "f40" };
  uint64_t off[3], held;

  for (int i = 0; i < 3; i++)
    {
      off[i] = inode_block (files[i]);
      for (int j = 0; j < i; j++)
        cr_assert_neq (off[i], off[j], "files share an inode block");
    }
  for (int i = 0; i < 3; i++)
    off[i] = hold_atime (e, files[i], nw[i], orig[i]);
  stats0 (e, &held);
  cr_assert_eq (held, 1);
  store_block (off[0], back);
  cr_assert_eq (memcmp (back, nw[0], 4096), 0, "oldest written back");
  store_block (off[1], back);
  cr_assert_eq (memcmp (back, nw[1], 4096), 0, "down to the low mark");
  store_block (off[2], back);
  cr_assert_eq (memcmp (back, orig[2], 4096), 0, "newest still held");
  cr_assert_eq (stats0 (e, NULL).writeback[WB_MEMORY], 2);
  cr_assert_eq (snapshot (e).store_flushes[WB_MEMORY], 1, "one batch");
  engine_close (e);
}

/* A read of a held block reads the store without the hold lock.  Here
 * the hold is written back and dropped just after that read: from the
 * store's trace of it, before the reader takes the lock to overlay.
 * The reader must not return the store's old block.
 */
static struct engine *race_engine;
static _Atomic uint64_t race_off = UINT64_MAX;
static atomic_int race_fired;

static void
flush_after_read (const struct bio *bio)
{
  uint64_t off = atomic_load (&race_off);

  if (bio->op == BIO_READ && bio->offset <= off && off < bio->offset + bio->len
      && !atomic_exchange (&race_fired, 1))
    cr_assert_eq (engine_flush (race_engine), 0);
}

Test (engine, read_meets_writeback)
{
  struct engine_config cfg = {
    .store = { .path = img, .kind = BACKEND_PSYNC, .trace = flush_after_read },
    .policy = POLICY_STRICT,
    .max_age_ns = ENGINE_DEFAULT_MAX_AGE_NS,
    .max_held = ENGINE_DEFAULT_MAX_HELD,
  };
  char nw[4096], orig[4096], got[8192], back[4096];
  uint64_t off;

  cr_assert_eq (engine_open (&cfg, &race_engine), 0);
  off = hold_atime (race_engine, "f1", nw, orig);
  atomic_store (&race_off, off);
  /* With the next block, which is not held: a read of held blocks
   * alone does not go to the store.
   */
  cr_assert_eq (engine_pread (race_engine, got, 8192, off), 0);
  cr_assert_eq (atomic_load (&race_fired), 1, "the write-back ran");
  cr_assert_eq (stats0 (race_engine, NULL).writeback[WB_FLUSH], 1);
  cr_assert_eq (memcmp (got, nw, 4096), 0, "the read sees the hold's bytes");
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "the store has them");
  engine_close (race_engine);
}

/* A read that held blocks cover whole is answered from them: the
 * store, which may be slow or not answering, is not read.
 */
static _Atomic uint64_t count_off = UINT64_MAX;
static atomic_int count_reads;

static void
count_reads_at (const struct bio *bio)
{
  uint64_t off = atomic_load (&count_off);

  if (bio->op == BIO_READ && bio->offset <= off && off < bio->offset + bio->len)
    atomic_fetch_add (&count_reads, 1);
}

Test (engine, held_read_needs_no_store)
{
  struct engine_config cfg = {
    .store = { .path = img, .kind = BACKEND_PSYNC, .trace = count_reads_at },
    .policy = POLICY_STRICT,
    .max_age_ns = ENGINE_DEFAULT_MAX_AGE_NS,
    .max_held = ENGINE_DEFAULT_MAX_HELD,
  };
  char nw[4096], orig[4096], got[8192];
  struct engine *e;
  uint64_t off;

  cr_assert_eq (engine_open (&cfg, &e), 0);
  off = hold_atime (e, "f1", nw, orig);
  atomic_store (&count_off, off);
  atomic_store (&count_reads, 0);
  cr_assert_eq (engine_pread (e, got, 4096, off), 0);
  cr_expect_eq (memcmp (got, nw, 4096), 0, "the hold's bytes");
  cr_expect_eq (engine_pread (e, got, 1000, off + 100), 0);
  cr_expect_eq (memcmp (got, nw + 100, 1000), 0, "part of them");
  cr_expect_eq (atomic_load (&count_reads), 0, "no store read");
  cr_expect_eq (engine_pread (e, got, 8192, off), 0);
  cr_expect_eq (memcmp (got, nw, 4096), 0, "the hold's bytes, overlaid");
  cr_expect_eq (atomic_load (&count_reads), 1,
                "a read beyond the hold reads the store");
  engine_close (e);
}

Test (engine, zero_drops_hold)
{
  struct engine *e = open_engine (0, 0);
  char nw[4096], orig[4096], back[4096], zero[4096] = { 0 };
  uint64_t off = hold_atime (e, "f1", nw, orig);

  cr_assert_eq (engine_zero (e, 4096, off, 0), 0);
  cr_assert_eq (engine_pread (e, back, 4096, off), 0);
  cr_assert_eq (memcmp (back, zero, 4096), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, zero, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).dropped, 1);
  cr_assert_eq (engine_flush (e), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, zero, 4096), 0, "the dropped hold stays gone");
  engine_close (e);
}

/* A zero that fails leaves the hold: the client still reads what it
 * wrote.  FAST_ZERO on a block device always fails (BLKZEROOUT may be
 * emulated), so a loop device gives a zero that fails for sure.
 */
Test (engine, failed_zero_keeps_hold)
{
  char nw[4096], orig[4096], back[4096];
  struct engine *e;
  uint64_t off, held;
  FILE *p;

  if (geteuid () != 0)
    cr_skip_test ("a loop device needs root");
  snprintf (back, sizeof back, "losetup -f --show %s 2>/dev/null", img);
  p = popen (back, "r");
  cr_assert_not_null (p);
  if (!fgets (loop, sizeof loop, p) || loop[0] != '/')
    {
      pclose (p);
      cr_skip_test ("no loop device could be set up");
    }
  pclose (p);
  loop[strcspn (loop, "\n")] = '\0';
  e = open_engine_at (loop, POLICY_STRICT, 0, 0);
  off = hold_atime (e, "f1", nw, orig);
  cr_assert_eq (engine_zero (e, 4096, off, BIO_FAST), -ENOTSUP);
  cr_assert_eq (engine_pread (e, back, 4096, off), 0);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "the hold survives the failure");
  stats0 (e, &held);
  cr_assert_eq (held, 1);
  cr_assert_eq (stats0 (e, NULL).dropped, 0);
  cr_assert_eq (engine_flush (e), 0);
  engine_close (e);
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "and is written back at FLUSH");
}

Test (engine, write_spanning_regions_is_split)
{
  struct engine *e = open_engine (0, 0);
  char nw[4096], orig[4096], back[4096];
  /* f1 is inode 12: the first block of group 0's inode table, so the
   * two blocks before it are not inode table.
   */
  uint64_t off = inode_block ("f1");
  uint64_t start = off - 8192;
  char *big = malloc (8192 * 4);
  int fd;

  cr_assert_not_null (big);
  changed_block ("set_inode_field /f1 atime 20200101", off, nw);
  store_block (off, orig);
  fd = open (img, O_RDONLY);
  cr_assert_eq (pread (fd, big, 8192 * 4, start), 8192 * 4);
  close (fd);
  memcpy (big + 8192, nw, 4096);
  big[100] ^= 0x5a; /* a change outside the inode table */
  cr_assert_eq (engine_pwrite (e, big, 8192 * 4, start, 0), 0);
  store_block (start, back);
  cr_assert_eq (back[100], big[100], "the other part went through");
  store_block (off, back);
  cr_assert_eq (memcmp (back, orig, 4096), 0, "inode-table part held");
  cr_assert_eq (engine_pread (e, back, 4096, off), 0);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).held, 1);
  free (big);
  engine_close (e);
}

/* A blank device is pass-through; once the client writes a filesystem
 * (as mkfs would), time-only writes are held.
 */
Test (engine, blank_then_mkfs)
{
  char fresh[96], nw[4096], orig[4096], back[4096];
  struct engine *e;
  uint64_t off;
  char *all;
  int fd;

  snprintf (fresh, sizeof fresh, "%s/fresh.img", dir);
  sh_ok ("mv %s %s && truncate -s 32M %s", img, fresh, img);
  e = open_engine (0, 0);
  {
    struct stats_snapshot s;
    cr_assert_eq (engine_stats (e, &s), 0);
    cr_assert_eq (s.n, 1, "no filesystem on a blank device");
    engine_stats_free (&s);
  }

  /* "mkfs": write the whole made image through the engine. */
  all = malloc (32 << 20);
  fd = open (fresh, O_RDONLY);
  cr_assert_eq (pread (fd, all, 32 << 20, 0), 32 << 20);
  close (fd);
  cr_assert_eq (engine_pwrite (e, all, 32 << 20, 0, 0), 0);
  free (all);

  off = inode_block ("f1");
  store_block (off, orig);
  changed_block ("set_inode_field /f1 atime 20200101", off, nw);
  cr_assert_eq (engine_pwrite (e, nw, 4096, off, 0), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, orig, 4096), 0, "held after re-discovery");
  cr_assert_eq (engine_pread (e, back, 4096, off), 0);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  engine_close (e);
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "written back at close");
}

/* The engine's layout counters: watched writes checked, re-reads. */
static void
layout_counters (struct engine *e, uint64_t *checks, uint64_t *rereads)
{
  struct stats_snapshot s;

  cr_assert_eq (engine_stats (e, &s), 0);
  *checks = s.layout_checks;
  *rereads = s.layout_rereads;
  engine_stats_free (&s);
}

/* A descriptor write that changes counts and the checksum is checked
 * against the layout and costs no re-read: the hold stays.  One that
 * moves the inode table makes the next write re-read the layout, and
 * the hold, no longer in an inode table where it was, is written back.
 */
Test (engine, descriptor_writes_and_the_layout)
{
  struct engine *e = open_engine (0, 0);
  char nw[4096], orig[4096], back[4096], desc[4096], blk[4096];
  uint64_t checks, rereads, held, off = hold_atime (e, "f1", nw, orig);
  /* Group 0's descriptors; a free block that nothing watches. */
  const uint64_t desc_off = 4096, last = (32 << 20) - 8192;

  changed_block ("set_bg 0 free_blocks_count 123", desc_off, desc);
  store_block (desc_off, back);
  cr_assert_neq (memcmp (desc, back, 4096), 0, "debugfs changed the block");
  cr_assert_eq (engine_pwrite (e, desc, 4096, desc_off, 0), 0);
  store_block (last, blk);
  cr_assert_eq (engine_pwrite (e, blk, 4096, last, 0), 0);
  layout_counters (e, &checks, &rereads);
  cr_assert_eq (checks, 1);
  cr_assert_eq (rereads, 0, "counts alone re-read nothing");
  cr_assert_eq (stats0 (e, &held).writeback[WB_LAYOUT], 0);
  cr_assert_eq (held, 1, "the hold stays");
  store_block (off, back);
  cr_assert_eq (memcmp (back, orig, 4096), 0);

  changed_block ("set_bg 0 inode_table 5000", desc_off, desc);
  cr_assert_eq (engine_pwrite (e, desc, 4096, desc_off, 0), 0);
  cr_assert_eq (engine_pwrite (e, blk, 4096, last, 0), 0);
  layout_counters (e, &checks, &rereads);
  cr_assert_eq (checks, 2);
  cr_assert_eq (rereads, 1, "a moved inode table is a re-read");
  cr_assert_eq (stats0 (e, &held).writeback[WB_LAYOUT], 1);
  cr_assert_eq (held, 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "written back for the layout");
  engine_close (e);
}

/* The engine and the block a write made from inside the store's sync. */
static struct engine *sync_engine;
static uint64_t sync_off;
static char sync_block[4096];
static atomic_int sync_writes;

/* Before the sync of a FLUSH: another connection's time-only write to
 * the block being flushed.  It would never return if the hold lock were
 * held across the sync.
 */
static int
write_during_sync (const struct bio *bio)
{
  if (bio->op == BIO_FLUSH && atomic_fetch_add (&sync_writes, 1) == 0)
    cr_assert_eq (engine_pwrite (sync_engine, sync_block, 4096, sync_off, 0),
                  0);
  return 0;
}

/* A FLUSH's sync runs without the hold lock: a newer time-only write to
 * the block it wrote gets through meanwhile and stays held (the FLUSH
 * drops only what it wrote); the next FLUSH writes it.
 */
Test (engine, flush_sync_without_hold_lock)
{
  char nw[4096], orig[4096], back[4096];
  struct engine *e;
  uint64_t held;

  fault_hook = write_during_sync;
  e = open_engine (0, 0);
  sync_engine = e;
  sync_off = hold_atime (e, "f1", nw, orig);
  changed_block ("set_inode_field /f1 atime 20220202", sync_off, sync_block);
  cr_assert_neq (memcmp (sync_block, nw, 4096), 0);

  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (atomic_load (&sync_writes), 1, "one sync, one write in it");
  store_block (sync_off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "the flushed hold is durable");
  cr_assert_eq (stats0 (e, &held).writeback[WB_FLUSH], 0);
  cr_assert_eq (held, 1, "the newer hold stays");
  cr_assert_eq (engine_pread (e, back, 4096, sync_off), 0);
  cr_assert_eq (memcmp (back, sync_block, 4096), 0);

  cr_assert_eq (engine_flush (e), 0);
  store_block (sync_off, back);
  cr_assert_eq (memcmp (back, sync_block, 4096), 0);
  cr_assert_eq (stats0 (e, &held).writeback[WB_FLUSH], 1);
  cr_assert_eq (held, 0);
  engine_close (e);
}

/* Two FLUSHes in flight at once (overlapping_flush): the first's sync
 * starts a second FLUSH in another thread and lets its own sync go on
 * (failing with EIO when overlap_fail is set) only once the second's
 * sync has begun.  The hook counts the writes of the held block.
 */
static void still_held (struct engine *e, uint64_t off, const char *nw);

static struct engine *overlap_engine;
static uint64_t overlap_off;
static atomic_int overlap_flushes, overlap_writes, overlap_result = 1;
static atomic_bool overlap_fail, overlap_second_synced;

static void *
second_flush (void *arg)
{
  (void)arg;
  atomic_store (&overlap_result, engine_flush (overlap_engine));
  return NULL;
}

static int
overlapping_flush (const struct bio *bio)
{
  pthread_t t;

  if (bio->op == BIO_WRITE && bio->offset <= overlap_off
      && bio->offset + bio->len > overlap_off)
    atomic_fetch_add (&overlap_writes, 1);
  if (bio->op != BIO_FLUSH)
    return 0;
  switch (atomic_fetch_add (&overlap_flushes, 1))
    {
    case 0:
      cr_assert_eq (pthread_create (&t, NULL, second_flush, NULL), 0);
      pthread_detach (t);
      while (!atomic_load (&overlap_second_synced))
        usleep (1000);
      return atomic_load (&overlap_fail) ? -EIO : 0;
    case 1:
      atomic_store (&overlap_second_synced, true);
      return 0;
    default:
      return 0;
    }
}

static struct engine *
open_overlapping (bool fail, char *nw)
{
  char orig[4096];
  struct engine *e;

  atomic_store (&overlap_fail, fail);
  fault_hook = overlapping_flush;
  e = open_engine (0, 0);
  overlap_engine = e;
  overlap_off = hold_atime (e, "f1", nw, orig);
  atomic_store (&overlap_writes, 0);
  return e;
}

/* The second FLUSH's result, once it has one. */
static int
second_result (void)
{
  while (atomic_load (&overlap_result) == 1)
    usleep (1000);
  return atomic_load (&overlap_result);
}

/* The hold went to the store by one FLUSH, and is held no more; closes
 * the engine.
 */
static void
flushed_once (struct engine *e, const char *nw)
{
  char back[4096];
  uint64_t held;

  cr_assert_eq (stats0 (e, &held).writeback[WB_FLUSH], 1);
  cr_assert_eq (held, 0);
  store_block (overlap_off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  engine_close (e);
}

/* A FLUSH does not write again what a FLUSH still in flight wrote: its
 * own sync makes it durable, and the hold goes once both have ended.
 */
Test (engine, overlapping_flushes_write_once)
{
  char nw[4096];
  struct engine *e = open_overlapping (false, nw);

  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (second_result (), 0);
  cr_assert_eq (atomic_load (&overlap_flushes), 2, "two syncs overlapped");
  cr_assert_eq (atomic_load (&overlap_writes), 1, "the hold written once");
  flushed_once (e, nw);
}

/* The first FLUSH's sync fails after the second's succeeded: the second
 * counted on the first's write, so it waits for the first's end and
 * fails too.  The hold stays, and the next FLUSH writes it again.
 */
Test (engine, overlapping_flush_fails_with_the_first)
{
  char nw[4096];
  struct engine *e = open_overlapping (true, nw);

  cr_assert_eq (engine_flush (e), -EIO);
  cr_assert_eq (second_result (), -EIO, "the second FLUSH fails too");
  still_held (e, overlap_off, nw);
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (atomic_load (&overlap_writes), 2, "written again");
  flushed_once (e, nw);
}

/* ---- sync errors ---------------------------------------------------- */

/* Faults: the next fail_flushes FLUSHes fail with EIO, and so does
 * every FUA write while fail_fua is set.  With fua_armed, the next
 * FLUSH first waits for another client's FUA write (fua_client).
 */
static atomic_int fail_flushes;
static atomic_bool fail_fua, fua_armed;
static struct engine *fua_engine;
static int fua_result = 1;

/* Another client: a FUA write of the device's last block, outside
 * every inode table and journal.
 */
static void *
fua_client (void *arg)
{
  char buf[4096];

  (void)arg;
  memset (buf, 0, sizeof buf);
  fua_result = engine_pwrite (fua_engine, buf, sizeof buf,
                              engine_size (fua_engine) - 4096, BIO_FUA);
  return NULL;
}

static int
faults (const struct bio *bio)
{
  if (bio->op == BIO_WRITE && (bio->flags & BIO_FUA) && atomic_load (&fail_fua))
    return -EIO;
  if (bio->op != BIO_FLUSH)
    return 0;
  if (atomic_exchange (&fua_armed, false))
    {
      pthread_t t;

      if (pthread_create (&t, NULL, fua_client, NULL) == 0)
        pthread_join (t, NULL);
    }
  if (atomic_load (&fail_flushes) > 0)
    {
      atomic_fetch_sub (&fail_flushes, 1);
      return -EIO;
    }
  return 0;
}

static struct engine *
open_faulty (uint64_t max_age_ns)
{
  fault_hook = faults;
  return open_engine (max_age_ns, 0);
}

/* The hold is still there: in the table, and what reads see. */
static void
still_held (struct engine *e, uint64_t off, const char *nw)
{
  char back[4096];
  uint64_t held;

  stats0 (e, &held);
  cr_assert_eq (held, 1, "the hold is kept");
  cr_assert_eq (engine_pread (e, back, 4096, off), 0);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "reads still see it");
}

/* The deadline thread's flush fails once and its retry succeeds: the
 * client's next FLUSH gets the error, the one after does not.
 */
Test (engine, deadline_sync_error_fails_next_flush)
{
  struct engine *e = open_faulty (200 * 1000000ull); /* 0.2 s */
  char nw[4096], orig[4096], back[4096];
  uint64_t off;

  cr_assert_eq (engine_start (e, NULL, 0), 0);
  atomic_store (&fail_flushes, 1);
  off = hold_atime (e, "f1", nw, orig);
  for (int i = 0; i < 200; i++)
    {
      if (stats0 (e, NULL).writeback[WB_DEADLINE] == 1)
        break;
      usleep (50000);
    }
  cr_assert_eq (stats0 (e, NULL).writeback[WB_DEADLINE], 1, "retried");
  cr_assert_eq (atomic_load (&fail_flushes), 0, "the fault was met");
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  cr_assert_eq (engine_flush (e), -EIO, "the deadline's error");
  cr_assert_eq (engine_flush (e), 0, "reported once");
  cr_assert_eq (engine_stop (e), 0);
  engine_close (e);
}

/* The same through an explicit write-back (the control socket's flush):
 * it fails and keeps the hold; the retry drops it; then the client's
 * FLUSH fails once.
 */
Test (engine, writeback_all_sync_error_fails_next_flush)
{
  struct engine *e = open_faulty (0);
  char nw[4096], orig[4096], back[4096];
  uint64_t off = hold_atime (e, "f1", nw, orig);

  atomic_store (&fail_flushes, 1);
  cr_assert_eq (engine_writeback_all (e), -EIO);
  still_held (e, off, nw);
  cr_assert_eq (engine_writeback_all (e), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).writeback[WB_EXPLICIT], 1);
  cr_assert_eq (engine_flush (e), -EIO, "the explicit flush's error");
  cr_assert_eq (engine_flush (e), 0, "reported once");
  engine_close (e);
}

/* A client FLUSH that meets the error itself reports it, and only
 * there; its holds stay until a write-back succeeds.
 */
Test (engine, own_flush_error_reported_once)
{
  struct engine *e = open_faulty (0);
  char nw[4096], orig[4096], back[4096];
  uint64_t off = hold_atime (e, "f1", nw, orig);

  atomic_store (&fail_flushes, 1);
  cr_assert_eq (engine_flush (e), -EIO);
  still_held (e, off, nw);
  cr_assert_eq (engine_flush (e), 0, "written again, reported once");
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).writeback[WB_FLUSH], 1);
  engine_close (e);
}

/* Another client's FUA write fails between a write-back's writes and
 * its flush: the flush succeeds, but that FUA write may have taken the
 * write-back's error, so the batch is not known good and keeps its
 * hold.
 */
Test (engine, sync_error_during_writeback_keeps_holds)
{
  struct engine *e = open_faulty (0);
  char nw[4096], orig[4096], back[4096];
  uint64_t off = hold_atime (e, "f1", nw, orig);

  fua_engine = e;
  atomic_store (&fail_fua, true);
  atomic_store (&fua_armed, true);
  cr_assert_eq (engine_writeback_all (e), -EIO);
  cr_assert_eq (fua_result, -EIO, "the other client's own error");
  still_held (e, off, nw);
  cr_assert_eq (stats0 (e, NULL).writeback[WB_EXPLICIT], 0);
  atomic_store (&fail_fua, false);
  cr_assert_eq (engine_writeback_all (e), 0, "written again");
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0);
  cr_assert_eq (stats0 (e, NULL).writeback[WB_EXPLICIT], 1);
  cr_assert_eq (engine_flush (e), -EIO, "the FUA write's error");
  cr_assert_eq (engine_flush (e), 0, "reported once");
  engine_close (e);
}

/* A failed FUA write returns its error to its client, and fails the
 * next FLUSH too (once): it may have taken the error of any write.
 */
Test (engine, fua_error_fails_next_flush)
{
  struct engine *e = open_faulty (0);

  fua_engine = e;
  atomic_store (&fail_fua, true);
  fua_client (NULL);
  cr_assert_eq (fua_result, -EIO);
  atomic_store (&fail_fua, false);
  cr_assert_eq (engine_flush (e), -EIO);
  cr_assert_eq (engine_flush (e), 0);
  engine_close (e);
}

/* The fault matrix: the next fault_left operations of kind fault_op
 * (at fault_off, or anywhere with UINT64_MAX) fail with -fault_err.
 */
static atomic_int fault_op = -1, fault_err, fault_left;
static _Atomic uint64_t fault_off = UINT64_MAX;

static int
op_faults (const struct bio *bio)
{
  if ((int)bio->op != atomic_load (&fault_op))
    return 0;
  if (atomic_load (&fault_off) != UINT64_MAX
      && (bio->offset > atomic_load (&fault_off)
          || bio->offset + bio->len <= atomic_load (&fault_off)))
    return 0;
  if (atomic_fetch_sub (&fault_left, 1) <= 0)
    return 0;
  return -atomic_load (&fault_err);
}

static struct engine *
open_op_faults (enum bio_op op, int err, uint64_t off)
{
  atomic_store (&fault_op, (int)op);
  atomic_store (&fault_err, err);
  atomic_store (&fault_off, off);
  atomic_store (&fault_left, 0);
  fault_hook = op_faults;
  return open_engine (0, 0);
}

/* A client read or write the store fails gets the store's error; the
 * next one is served.
 */
static void
client_io_error (enum bio_op op, int err)
{
  struct engine *e = open_op_faults (op, err, UINT64_MAX);
  uint64_t off = engine_size (e) - 4096;
  char buf[4096], back[4096];

  memset (buf, 'z', sizeof buf);
  atomic_store (&fault_left, 1);
  if (op == BIO_READ)
    cr_assert_eq (engine_pread (e, back, 4096, off), -err);
  else
    cr_assert_eq (engine_pwrite (e, buf, 4096, off, 0), -err);
  cr_assert_eq (atomic_load (&fault_left), 0, "the fault was met");
  cr_assert_eq (engine_pwrite (e, buf, 4096, off, 0), 0, "still serving");
  cr_assert_eq (engine_pread (e, back, 4096, off), 0);
  cr_assert_eq (memcmp (back, buf, 4096), 0);
  cr_assert_eq (engine_flush (e), 0, "a client's own error is not kept");
  engine_close (e);
}

Test (engine, read_eio)
{
  client_io_error (BIO_READ, EIO);
}
Test (engine, write_eio)
{
  client_io_error (BIO_WRITE, EIO);
}
Test (engine, write_enospc)
{
  client_io_error (BIO_WRITE, ENOSPC);
}

/* A FLUSH whose write-back meets a store error (the write of the held
 * block, or the fdatasync after it) fails with that error, keeps the
 * hold for the next FLUSH, which writes it and succeeds.
 */
static void
writeback_error (enum bio_op op, int err)
{
  char nw[4096], orig[4096], back[4096];
  struct engine *e = open_op_faults (op, err, UINT64_MAX);
  uint64_t off = hold_atime (e, "f1", nw, orig);

  if (op == BIO_WRITE)
    atomic_store (&fault_off, off);
  atomic_store (&fault_left, 1);
  cr_assert_eq (engine_flush (e), -err, "no FLUSH over a failed write-back");
  cr_assert_eq (atomic_load (&fault_left), 0, "the fault was met");
  still_held (e, off, nw);
  cr_assert_eq (stats0 (e, NULL).writeback[WB_FLUSH], 0);
  cr_assert_eq (engine_flush (e), 0, "retried, and the error told once");
  store_block (off, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "the retry wrote it");
  cr_assert_eq (stats0 (e, NULL).writeback[WB_FLUSH], 1);
  engine_close (e);
}

Test (engine, writeback_write_eio)
{
  writeback_error (BIO_WRITE, EIO);
}
Test (engine, writeback_write_enospc)
{
  writeback_error (BIO_WRITE, ENOSPC);
}
Test (engine, writeback_flush_enospc)
{
  writeback_error (BIO_FLUSH, ENOSPC);
}

/* ---- the reference cache --------------------------------------------- */

/* Store reads of the block at ref_off, counted by the fault hook; with
 * ref_fail_flush set, the next flush fails with EIO.
 */
static _Atomic uint64_t ref_off = UINT64_MAX;
static atomic_int ref_reads, ref_fail_flush;

static int
count_ref_reads (const struct bio *bio)
{
  if (bio->op == BIO_READ && bio->offset <= atomic_load (&ref_off)
      && atomic_load (&ref_off) < bio->offset + bio->len)
    atomic_fetch_add (&ref_reads, 1);
  if (bio->op == BIO_FLUSH && atomic_exchange (&ref_fail_flush, 0))
    return -EIO;
  return 0;
}

/* Write blk at off and return how many store reads of it that took. */
static int
reads_of_write (struct engine *e, const char *blk, uint64_t off)
{
  atomic_store (&ref_reads, 0);
  cr_assert_eq (engine_pwrite (e, blk, 4096, off, 0), 0);
  return atomic_load (&ref_reads);
}

/* A write to an inode-table block is classified against the store's
 * content; once the engine has read or written the block, it knows that
 * content without reading it again, until the store changes in a way
 * it cannot follow.
 */
Test (engine, reference_cache)
{
  char orig[4096], t1[4096], t2[4096], t3[4096], back[4096];
  struct engine *e;
  uint64_t off = inode_block ("f1");
  struct fs_stats c;

  fault_hook = count_ref_reads;
  atomic_store (&ref_off, off);
  e = open_engine (0, 0);
  store_block (off, orig);
  changed_block ("set_inode_field /f1 atime 20200101", off, t1);
  changed_block ("set_inode_field /f1 atime 20200202", off, t2);
  changed_block ("set_inode_field /f1 atime 20200303", off, t3);

  cr_assert_eq (reads_of_write (e, t1, off), 1, "the first write reads it");
  cr_assert_eq (reads_of_write (e, t2, off), 0, "held: the store is known");
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (reads_of_write (e, t3, off), 0, "written back: known");
  c = stats0 (e, NULL);
  cr_assert_eq (c.held, 3, "each was classified time-only");

  /* The store's block is zeroed: the cache must not still say t2. */
  cr_assert_eq (engine_zero (e, 4096, off, 0), 0);
  cr_assert_eq (reads_of_write (e, t1, off), 1, "after a zero: read again");
  c = stats0 (e, NULL);
  cr_assert_eq (c.real_writes, 1, "t1 over zeroes is a real change");
  store_block (off, back);
  cr_assert_eq (memcmp (back, t1, 4096), 0, "and went to the store");

  /* A failed sync leaves the store's content in doubt. */
  cr_assert_eq (reads_of_write (e, t2, off), 0);
  atomic_store (&ref_fail_flush, 1);
  cr_assert_eq (engine_flush (e), -EIO);
  cr_assert_eq (reads_of_write (e, t3, off), 1, "after a failed sync: read");
  cr_assert_eq (engine_flush (e), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, t3, 4096), 0);
  engine_close (e);
}

/* A descriptor block written whole is checked against the layout from
 * the client's buffer; written in part, from the store, which then has
 * the rest of the block.
 */
Test (engine, descriptor_checked_from_the_write)
{
  const uint64_t desc_off = 4096; /* group 0's descriptors */
  char desc[4096];
  uint64_t checks, rereads;
  struct engine *e;

  fault_hook = count_ref_reads;
  atomic_store (&ref_off, desc_off);
  e = open_engine (0, 0);
  changed_block ("set_bg 0 free_blocks_count 123", desc_off, desc);
  atomic_store (&ref_reads, 0);
  cr_assert_eq (engine_pwrite (e, desc, 4096, desc_off, 0), 0);
  cr_assert_eq (atomic_load (&ref_reads), 0, "no store read");
  changed_block ("set_bg 0 free_blocks_count 124", desc_off, desc);
  cr_assert_eq (engine_pwrite (e, desc, 512, desc_off, 0), 0);
  cr_assert_eq (atomic_load (&ref_reads), 1, "one store read");
  layout_counters (e, &checks, &rereads);
  cr_assert_eq (checks, 2);
  cr_assert_eq (rereads, 0, "counts alone re-read nothing");
  engine_close (e);
}

/* ---- store flushes with nothing to flush ----------------------------- */

static atomic_int store_flushes;

static int
count_flushes (const struct bio *bio)
{
  if (bio->op == BIO_FLUSH)
    atomic_fetch_add (&store_flushes, 1);
  return 0;
}

static struct stats_snapshot
snapshot (struct engine *e)
{
  struct stats_snapshot s;

  cr_assert_eq (engine_stats (e, &s), 0);
  engine_stats_free (&s);
  return s;
}

/* A FLUSH reaches the store only when something was written since the
 * last one: the first always (an earlier server may have written), one
 * after a plain write, a zero or a write-back, none after nothing or
 * after a FUA write alone.
 */
Test (engine, empty_flush_skipped)
{
  struct engine *e;
  char blk[4096], nw[4096], orig[4096];
  const uint64_t data = (32 << 20) - 4096; /* a free block near the end */
  struct stats_snapshot s;

  fault_hook = count_flushes;
  atomic_store (&store_flushes, 0);
  e = open_engine (0, 0);
  memset (blk, 'x', sizeof blk);
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (atomic_load (&store_flushes), 1, "the first flush goes");
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (atomic_load (&store_flushes), 1, "nothing to flush");
  cr_assert_eq (engine_pwrite (e, blk, 4096, data, 0), 0);
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (atomic_load (&store_flushes), 2, "a write to flush");
  cr_assert_eq (engine_pwrite (e, blk, 4096, data, BIO_FUA), 0);
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (atomic_load (&store_flushes), 2, "a FUA write is durable");
  cr_assert_eq (engine_zero (e, 4096, data, 0), 0);
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (atomic_load (&store_flushes), 3, "a zero to flush");
  hold_atime (e, "f1", nw, orig);
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (atomic_load (&store_flushes), 4, "the write-back's flush");
  cr_assert_eq (engine_flush (e), 0);
  cr_assert_eq (engine_writeback_all (e), 0);
  cr_assert_eq (atomic_load (&store_flushes), 4, "nothing since");

  s = snapshot (e);
  cr_assert_eq (s.store_flushes_skipped, 4);
  cr_assert_eq (s.store_flushes[WB_FLUSH], 4);
  cr_assert_eq (s.store_writes[ST_PASS], 3, "write, FUA write, zero");
  cr_assert_eq (s.store_writes[WB_FLUSH], 1, "the held block");
  engine_close (e);
}

/* A failed FUA write leaves the store uncertain: the next FLUSH goes,
 * and reports the error.
 */
Test (engine, failed_fua_write_is_flushed)
{
  struct engine *e = open_faulty (0);
  int before;

  fua_engine = e;
  cr_assert_eq (engine_flush (e), 0);
  atomic_store (&fail_fua, true);
  fua_client (NULL);
  cr_assert_eq (fua_result, -EIO);
  atomic_store (&fail_fua, false);
  before = (int)snapshot (e).store_flushes[WB_FLUSH];
  cr_assert_eq (engine_flush (e), -EIO);
  cr_assert_eq ((int)snapshot (e).store_flushes[WB_FLUSH], before + 1);
  engine_close (e);
}

/* ---- the superblock's informational fields --------------------------- */

/* An in-place write of the superblock's block that changes only s_wtime
 * and s_kbytes_written is held like a time-only inode-table write (reads
 * see it, the layout is not read again, a FLUSH under strict writes it
 * back); one that changes s_free_inodes_count goes through.
 */
Test (engine, superblock_informational_write_held)
{
  struct engine *e = open_engine (0, 0);
  char orig[4096], nw[4096], back[4096];
  struct stats_snapshot s;
  uint64_t held;

  store_block (0, orig);
  memcpy (nw, orig, sizeof nw);
  nw[1024 + 0x30] ^= 0x5a; /* s_wtime */
  nw[1024 + 0x178] += 8;   /* s_kbytes_written */
  cr_assert_eq (engine_pwrite (e, nw, 4096, 0, 0), 0);
  store_block (0, back);
  cr_assert_eq (memcmp (back, orig, 4096), 0, "the store must not change");
  cr_assert_eq (engine_pread (e, back, 512, 1024 + 0x20), 0);
  cr_assert_eq (memcmp (back, nw + 1024 + 0x20, 512), 0, "reads see it");
  stats0 (e, &held);
  cr_assert_eq (held, 1);
  s = snapshot (e);
  cr_assert_eq (s.layout_rereads, 0, "the layout is what it was");
  cr_assert_eq (s.store_writes[ST_PASS], 0);

  cr_assert_eq (engine_flush (e), 0);
  store_block (0, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "the FLUSH wrote it back");
  stats0 (e, &held);
  cr_assert_eq (held, 0);

  nw[1024 + 0x10] ^= 1; /* s_free_inodes_count */
  cr_assert_eq (engine_pwrite (e, nw, 4096, 0, 0), 0);
  store_block (0, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "a real change goes through");
  /* (Its checksum is now wrong: the layout drops the filesystem.) */
  cr_assert_eq (snapshot (e).store_writes[ST_PASS], 1);
  engine_close (e);
}

/* Under policy=atime the informational fields outlive a FLUSH, and a
 * FUA write of them goes through.
 */
Test (engine, superblock_informational_outlives_flush_under_atime)
{
  struct engine *e = open_engine_at (img, POLICY_ATIME, 0, 0);
  char orig[4096], nw[4096], back[4096];
  uint64_t held;

  store_block (0, orig);
  memcpy (nw, orig, sizeof nw);
  nw[1024 + 0x30] ^= 0x5a; /* s_wtime */
  cr_assert_eq (engine_pwrite (e, nw, 4096, 0, 0), 0);
  cr_assert_eq (engine_flush (e), 0);
  store_block (0, back);
  cr_assert_eq (memcmp (back, orig, 4096), 0, "held through the FLUSH");
  stats0 (e, &held);
  cr_assert_eq (held, 1);
  nw[1024 + 0x2C] ^= 0x11; /* s_mtime */
  cr_assert_eq (engine_pwrite (e, nw, 4096, 0, BIO_FUA), 0);
  store_block (0, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "FUA writes it");
  stats0 (e, &held);
  cr_assert_eq (held, 0);
  engine_close (e);
}

/* Holds due within a sweep (a quarter of max-age) of the first expire
 * with it, in one batch: one store flush.
 */
Test (engine, deadline_sweep_one_batch)
{
  struct engine *e = open_engine (4000 * 1000000ull, 0); /* 4 s */
  char nw[2][4096], orig[2][4096];
  struct stats_snapshot s;

  cr_assert_eq (engine_start (e, NULL, 0), 0);
  hold_atime (e, "f1", nw[0], orig[0]);
  usleep (200000); /* 0.2 s later: well within the 1 s sweep */
  hold_atime (e, "f40", nw[1], orig[1]);
  for (int i = 0; i < 200; i++)
    {
      if (stats0 (e, NULL).writeback[WB_DEADLINE] == 2)
        break;
      usleep (50000);
    }
  cr_assert_eq (stats0 (e, NULL).writeback[WB_DEADLINE], 2);
  s = snapshot (e);
  cr_assert_eq (s.store_flushes[WB_DEADLINE], 1, "one batch");
  cr_assert_eq (engine_stop (e), 0);
  engine_close (e);
}

/* A held neighbour of a block written for a real change rides along:
 * one store request for both, and the hold is gone.
 */
Test (engine, held_neighbour_rides_along)
{
  struct engine *e = open_engine (0, 0);
  char nw[4096], orig[4096], real[4096], back[4096];
  uint64_t off = inode_block ("f1"), off2, held;
  struct stats_snapshot s;

  off2 = hold_atime (e, "f20", nw, orig);
  cr_assert_eq (off2, off + 4096, "f1 and f20 in neighbouring blocks");
  changed_block ("set_inode_field /f1 mode 0100600", off, real);
  cr_assert_eq (engine_pwrite (e, real, 4096, off, 0), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, real, 4096), 0, "the real change");
  store_block (off2, back);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "the neighbour rode along");
  stats0 (e, &held);
  cr_assert_eq (held, 0);
  cr_assert_eq (stats0 (e, NULL).writeback[WB_REAL], 1);
  s = snapshot (e);
  cr_assert_eq (s.store_writes[ST_PASS], 1, "one request for both");
  engine_close (e);
}

/* ---- writes over many inode-table blocks ----------------------------- */

/* Device offset of the first inode-table block of the image at path. */
static uint64_t
itable_start (const char *path)
{
  char *out = capture ("debugfs -R 'imap <1>' %s 2>/dev/null", path);
  const char *at = out ? strstr (out, "located at block ") : NULL;
  unsigned long long blk;

  cr_assert_not_null (at, "debugfs imap: %s", out ? out : "");
  cr_assert_eq (sscanf (at, "located at block %llu", &blk), 1);
  free (out);
  return blk * 4096;
}

/* A write over more inode-table blocks than the reference cache has
 * slots completes (the engine once waited for all of them to come from
 * the cache, where they evicted each other: it never did), and is
 * classified block by block against what the store has.
 */
Test (engine, write_over_more_blocks_than_the_cache)
{
  const uint64_t n = 1025, len = n * 4096;
  char path[128], *buf = malloc (len), *back = malloc (len);
  struct engine *e;
  uint64_t off, held;
  struct fs_stats c;

  cr_assert (buf && back);
  /* 20000 inodes of 256 bytes: one inode table of 1250 blocks. */
  snprintf (path, sizeof path, "%s/big.img", dir);
  sh_ok ("mkfs.ext4 -q -F -b 4096 -I 256 -N 20000 -O ^has_journal %s 64M "
         ">/dev/null 2>&1",
         path);
  off = itable_start (path);
  e = open_engine_at (path, POLICY_STRICT, 0, 0);
  cr_assert_eq (engine_pread (e, buf, len, off), 0);
  cr_assert_eq (engine_pwrite (e, buf, len, off, 0), 0);
  c = stats0 (e, &held);
  cr_assert_eq (c.unchanged, n, "every block unchanged");
  cr_assert_eq (held, 0);
  /* The root directory's atime (its inode is in the first block). */
  sh_ok ("cp %s %s && debugfs -w -R 'sif <2> atime 20200101' %s "
         ">/dev/null 2>&1",
         path, copy, copy);
  file_block (copy, off, buf);
  cr_assert_eq (engine_pwrite (e, buf, len, off, 0), 0);
  c = stats0 (e, &held);
  cr_assert_eq (c.unchanged, 2 * n - 1);
  cr_assert_eq (held, 1, "the changed block held");
  cr_assert_eq (engine_pread (e, back, len, off), 0);
  cr_assert_eq (memcmp (back, buf, len), 0, "read back");
  engine_close (e);
  free (buf);
  free (back);
}

/* The reference read of one block, stalled by the fault hook the first
 * rr_stall times while the test writes other blocks.
 */
static pthread_mutex_t rr_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rr_cond = PTHREAD_COND_INITIALIZER;
static _Atomic uint64_t rr_off = UINT64_MAX;
static int rr_reads, rr_go, rr_stall = 3;
static bool rr_done;

static int
stall_ref_reads (const struct bio *bio)
{
  if (bio->op != BIO_READ || bio->offset > atomic_load (&rr_off)
      || atomic_load (&rr_off) >= bio->offset + bio->len)
    return 0;
  pthread_mutex_lock (&rr_lock);
  rr_reads++;
  pthread_cond_broadcast (&rr_cond);
  while (rr_reads <= rr_stall && rr_go < rr_reads)
    pthread_cond_wait (&rr_cond, &rr_lock);
  pthread_mutex_unlock (&rr_lock);
  return 0;
}

struct rr_write
{
  struct engine *e;
  const char *blk;
  uint64_t off;
  int r;
};

static void *
rr_writer (void *p)
{
  struct rr_write *w = p;

  w->r = engine_pwrite (w->e, w->blk, 4096, w->off, 0);
  pthread_mutex_lock (&rr_lock);
  rr_done = true;
  pthread_cond_broadcast (&rr_cond);
  pthread_mutex_unlock (&rr_lock);
  return NULL;
}

/* Writes of other inode-table blocks while a write's reference read is
 * on its way do not make it read again: many inode-table writes at once
 * cannot keep one from completing.
 */
Test (engine, other_blocks_written_do_not_redo_a_reference_read)
{
  char nw[4096], orig[4096], other[4096];
  uint64_t off = inode_block ("f1"), off2 = off + 64 * 4096, held;
  struct rr_write w;
  struct engine *e;
  pthread_t t;

  fault_hook = stall_ref_reads;
  atomic_store (&rr_off, off);
  e = open_engine (0, 0);
  store_block (off2, other);
  changed_block ("set_inode_field /f1 atime 20200101", off, nw);
  w = (struct rr_write){ e, nw, off, 0 };
  cr_assert_eq (pthread_create (&t, NULL, rr_writer, &w), 0);
  for (int round = 1; round <= rr_stall; round++)
    {
      pthread_mutex_lock (&rr_lock);
      while (rr_reads < round && !rr_done)
        pthread_cond_wait (&rr_cond, &rr_lock);
      pthread_mutex_unlock (&rr_lock);
      /* Another block written through (FUA) while it reads. */
      cr_assert_eq (engine_pwrite (e, other, 4096, off2, BIO_FUA), 0);
      pthread_mutex_lock (&rr_lock);
      rr_go = round;
      pthread_cond_broadcast (&rr_cond);
      pthread_mutex_unlock (&rr_lock);
    }
  pthread_join (t, NULL);
  cr_assert_eq (w.r, 0);
  cr_assert_eq (rr_reads, 1, "one reference read (%d)", rr_reads);
  stats0 (e, &held);
  cr_assert_eq (held, 1, "the atime held");
  store_block (off, orig);
  cr_assert_eq (engine_pread (e, orig, 4096, off), 0);
  cr_assert_eq (memcmp (orig, nw, 4096), 0);
  engine_close (e);
}
