/* SPDX-License-Identifier: BSD-3-Clause */
/* test-engine-fence.c --- a fenced engine (engine_fence): every hold is
 * discarded, every entry point fails with EIO, nothing reaches the
 * store any more (not even at shutdown), and the counters say so.
 *
 * The image is a 16 MiB ext4 (4 KiB blocks, no journal); a time-only
 * block comes from debugfs changing f1's atime on a copy (testutil.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "engine.h"
#include "stats.h"
#include "testimg.h"
#include "testutil.h"

#define MiB (1024 * 1024)

static struct img im;
static int store_ios; /* operations issued to the store (fault hook) */

static void
setup (void)
{
  img_fs_new (&im, "ext4lazy-fence", 16 * MiB, 1);
}

static void
teardown (void)
{
  img_fs_del (&im);
}

TestSuite (engine_fence, .init = setup, .fini = teardown, .timeout = 60);

static int
count_io (const struct bio *bio)
{
  (void)bio;
  __atomic_add_fetch (&store_ios, 1, __ATOMIC_SEQ_CST);
  return 0;
}

/* Hold a time-only change of f1's inode block: its offset. */
static uint64_t
hold_atime (struct engine *e, char *blk)
{
  uint64_t off;

  img_fs_imap (&im, "f1", &off);
  img_fs_changed (&im, "set_inode_field /f1 atime 20200101\\n", off, blk);
  cr_assert_eq (engine_pwrite (e, blk, 4096, off, 0), 0);
  return off;
}

static int
count_hold (void *opaque, const struct held_block *hb)
{
  (void)hb;
  (*(size_t *)opaque)++;
  return 0;
}

static size_t
holds (struct engine *e)
{
  size_t n = 0;

  cr_assert_eq (engine_holds (e, count_hold, &n), 0);
  return n;
}

static int
no_extent (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  (void)opaque;
  (void)off;
  (void)len;
  (void)hole;
  cr_assert_fail ("an extent of a fenced store");
  return 0;
}

Test (engine_fence, every_entry_point_fails_and_nothing_is_written)
{
  struct engine *e = img_fs_engine (&im, count_io);
  char orig[4096], held[4096], buf[4096];
  uint64_t off;

  memset (buf, 0, sizeof buf);
  off = hold_atime (e, held);
  file_block (im.path, off, orig);
  cr_assert_neq (memcmp (orig, held, 4096), 0);
  cr_assert_eq (holds (e), 1, "the atime change is held");

  engine_fence (e, "lost to another writer");
  store_ios = 0;
  cr_assert_eq (holds (e), 0, "the holds are discarded");
  cr_assert_eq (engine_pread (e, buf, 4096, off), -EIO);
  cr_assert_eq (engine_pread (e, buf, 4096, 0), -EIO);
  cr_assert_eq (engine_pwrite (e, held, 4096, off, 0), -EIO);
  cr_assert_eq (engine_pwrite (e, buf, 4096, 8 * MiB, BIO_FUA), -EIO);
  cr_assert_eq (engine_flush (e), -EIO);
  cr_assert_eq (engine_zero (e, 4096, 8 * MiB, 0), -EIO);
  cr_assert_eq (engine_trim (e, 4096, 8 * MiB, 0), -EIO);
  cr_assert_eq (engine_cache (e, 4096, 0), -EIO);
  cr_assert_eq (engine_extents (e, 4096, 0, no_extent, NULL), -EIO);
  cr_assert_lt (engine_writeback_all (e), 0);
  cr_assert_eq (holds (e), 0, "a write while fenced is not held either");
  cr_assert_eq (engine_stop (e), -EIO, "nothing to write back at shutdown");
  engine_close (e);

  cr_assert_eq (store_ios, 0, "no store I/O once fenced");
  file_block (im.path, off, buf);
  cr_assert_eq (memcmp (buf, orig, 4096), 0,
                "the held block never reached "
                "the store");
}

Test (engine_fence, counters_say_fenced)
{
  struct engine *e = img_fs_engine (&im, count_io);
  struct stats_snapshot s;
  char *text = NULL;
  size_t size = 0;
  FILE *f;

  cr_assert_eq (engine_stats (e, &s), 0);
  cr_assert_null (s.fenced);
  engine_stats_free (&s);
  engine_fence (e, "blocklisted");
  engine_fence (e, "a second reason is not kept");
  cr_assert_eq (engine_stats (e, &s), 0);
  cr_assert_str_eq (s.fenced, "blocklisted");
  f = open_memstream (&text, &size);
  cr_assert_not_null (f);
  stats_print_text (f, &s);
  stats_print_prometheus (f, &s);
  fclose (f);
  cr_assert_not_null (strstr (text, "fenced: blocklisted\n"), "%s", text);
  cr_assert_not_null (strstr (text, "\next4lazy_fenced 1\n"), "%s", text);
  free (text);
  engine_stats_free (&s);
  engine_close (e);
}
