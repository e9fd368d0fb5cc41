/* SPDX-License-Identifier: BSD-3-Clause */
/* test-engine-holds.c --- engine_holds lists what is held, record by
 * record against the store; engine_stats shows "other" only when
 * something happened outside every filesystem; while the hold lock is
 * busy, neither waits for it.
 *
 * The image is a 16 MiB ext4 (4 KiB blocks, 256-byte inodes, no
 * journal) at the start of a 32 MiB file: the last 16 MiB are outside
 * every filesystem.  Time-only blocks come from debugfs changing
 * fields on a copy, as in test-engine.c.
 */
#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "control.h"
#include "engine-impl.h"
#include "engine.h"
#include "stats.h"
#include "testimg.h"
#include "testutil.h"

#define MiB (1024 * 1024)

static struct img im;

static void
setup (void)
{
  img_fs_new (&im, "ext4lazy-holds", 32 * MiB, 3);
}

static void
teardown (void)
{
  img_fs_del (&im);
}

TestSuite (engine_holds, .init = setup, .fini = teardown, .timeout = 60);

/* What the callback saw. */
struct seen
{
  size_t n;
  struct held_block hb;
  struct held_inode ino[16];
  int stop_with; /* returned from the callback */
};

static int
collect (void *opaque, const struct held_block *hb)
{
  struct seen *s = opaque;

  s->n++;
  s->hb = *hb;
  cr_assert_leq (hb->n_inodes, 16);
  memcpy (s->ino, hb->inodes, hb->n_inodes * sizeof *s->ino);
  s->hb.inodes = s->ino;
  return s->stop_with;
}

/* f1's atime and f2's mtime and crtime change in one block; f3, in
 * the same block, does not.
 */
static uint64_t
hold_two_inodes (struct engine *e, uint32_t *ino1, uint32_t *ino2)
{
  char blk[4096];
  uint64_t off, off2, off3;

  *ino1 = img_fs_imap (&im, "f1", &off);
  *ino2 = img_fs_imap (&im, "f2", &off2);
  img_fs_imap (&im, "f3", &off3);
  cr_assert (off == off2 && off == off3, "f1, f2, f3 in one block");
  img_fs_changed (&im,
                  "set_inode_field /f1 atime 20200101\\n"
                  "set_inode_field /f2 mtime 20200202\\n"
                  "set_inode_field /f2 crtime 20200303\\n",
                  off, blk);
  cr_assert_eq (engine_pwrite (e, blk, 4096, off, 0), 0);
  return off;
}

Test (engine_holds, lists_inodes_that_differ)
{
  struct engine *e = img_fs_engine (&im, NULL);
  struct seen s = { 0 };
  uint32_t ino1, ino2;
  uint64_t off = hold_two_inodes (e, &ino1, &ino2);

  cr_assert_eq (engine_holds (e, collect, &s), 0);
  cr_assert_eq (s.n, 1);
  cr_assert_str_eq (s.hb.fs, "ext4@0");
  cr_assert_eq (s.hb.off, off);
  cr_assert_eq (s.hb.len, 4096);
  cr_assert_eq (s.hb.kind, HOLD_INPLACE);
  cr_assert_eq (s.hb.cls, TCLASS_TIME);
  cr_assert_eq (s.hb.store_err, 0);
  cr_assert (s.hb.age_s >= 0 && s.hb.age_s < 30, "age %f", s.hb.age_s);
  cr_assert_float_eq (s.hb.age_s + s.hb.deadline_in_s, 3600, 0.001);
  cr_assert_geq (s.hb.deadline_unix, (int64_t)time (NULL) + 3500);
  cr_assert_eq (s.hb.n_inodes, 2);
  cr_assert_eq (s.ino[0].ino, ino1);
  cr_assert_eq (s.ino[0].fields, TFIELD_ATIME);
  cr_assert_eq (s.ino[1].ino, ino2);
  cr_assert_eq (s.ino[1].fields, TFIELD_MTIME | TFIELD_CRTIME);

  /* Written back: nothing more to list. */
  cr_assert_eq (engine_flush (e), 0);
  s.n = 0;
  cr_assert_eq (engine_holds (e, collect, &s), 0);
  cr_assert_eq (s.n, 0);
  engine_close (e);
}

Test (engine_holds, callback_stops_the_list)
{
  struct engine *e = img_fs_engine (&im, NULL);
  struct seen s = { .stop_with = 7 };
  uint32_t ino1, ino2;

  hold_two_inodes (e, &ino1, &ino2);
  cr_assert_eq (engine_holds (e, collect, &s), 7);
  cr_assert_eq (s.n, 1);
  engine_close (e);
}

/* The control command prints the same, as JSON and as a table. */
Test (engine_holds, control_command)
{
  struct engine *e = img_fs_engine (&im, NULL);
  char *buf = NULL, want[64];
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  uint32_t ino1, ino2;

  hold_two_inodes (e, &ino1, &ino2);
  cr_assert_eq (control_engine_cmd (e, "holds json", f), 0);
  cr_assert_eq (control_engine_cmd (e, "holds", f), 0);
  cr_assert_eq (control_engine_cmd (e, "holds yaml", f), -EINVAL);
  fclose (f);
  snprintf (want, sizeof want, "{\"ino\":%" PRIu32 ",\"fields\":[\"atime\"]}",
            ino1);
  cr_assert_not_null (strstr (buf, want), "%s", buf);
  cr_assert_not_null (strstr (buf, "\"kind\":\"inplace\""), "%s", buf);
  snprintf (want, sizeof want, "ino %" PRIu32 " mtime,crtime\n", ino2);
  cr_assert_not_null (strstr (buf, want), "%s", buf);
  cr_assert_not_null (strstr (buf, "\n1 blocks held, 4096 bytes\n"), "%s", buf);
  free (buf);
  engine_close (e);
}

/* The instances of a snapshot, by name, separated by spaces. */
static void
instances (struct engine *e, char *out, size_t size)
{
  struct stats_snapshot s;

  cr_assert_eq (engine_stats (e, &s), 0);
  out[0] = '\0';
  for (size_t i = 0; i < s.n; i++)
    snprintf (out + strlen (out), size - strlen (out), "%s%s", i ? " " : "",
              s.fs[i].name);
  engine_stats_free (&s);
}

Test (engine_holds, other_only_when_used)
{
  struct engine *e = img_fs_engine (&im, NULL);
  char names[128], blk[4096] = { 1 };

  instances (e, names, sizeof names);
  cr_assert_str_eq (names, "ext4@0", "no empty \"other\"");
  /* Inside the filesystem: still none. */
  cr_assert_eq (engine_pwrite (e, blk, 4096, 12 * MiB, 0), 0);
  instances (e, names, sizeof names);
  cr_assert_str_eq (names, "ext4@0");
  /* Past its end. */
  cr_assert_eq (engine_pwrite (e, blk, 4096, 24 * MiB, 0), 0);
  instances (e, names, sizeof names);
  cr_assert_str_eq (names, "ext4@0 other");
  engine_close (e);
}

/* Store I/O under the hold lock that waits on a store that stopped
 * answering, played by a thread that takes the lock and keeps it until
 * the gate opens.
 */
static struct gate busy = GATE_INIT;

static void *
hold_lock_thread (void *p)
{
  struct engine *e = p;

  pthread_mutex_lock (&e->hold_lock);
  gate_pass (&busy);
  pthread_mutex_unlock (&e->hold_lock);
  return NULL;
}

static int
count_one (void *opaque, const struct held_block *hb)
{
  (void)hb;
  ++*(int *)opaque;
  return 0;
}

/* While the hold lock is busy, the stats give the hold figures of the
 * last stats that got it and say how old they are, and the list of
 * holds fails with EBUSY, rather than wait; once it is free, both are
 * current again.
 */
Test (engine_holds, busy_hold_lock)
{
  struct engine *e = img_fs_engine (&im, NULL);
  struct stats_snapshot st;
  uint32_t ino1, ino2;
  pthread_t t;
  int n = 0;

  hold_two_inodes (e, &ino1, &ino2);
  cr_assert_eq (engine_stats (e, &st), 0);
  cr_assert_eq (st.holds_stale_s, 0);
  cr_assert_eq (st.fs[0].held_blocks, 1);
  engine_stats_free (&st);

  cr_assert_eq (pthread_create (&t, NULL, hold_lock_thread, e), 0);
  gate_wait (&busy, 1);
  usleep (300 * 1000);
  cr_expect_eq (engine_stats (e, &st), 0);
  cr_expect_geq (st.holds_stale_s, 0.3, "the figures are %.3fs old",
                 st.holds_stale_s);
  cr_expect_eq (st.fs[0].held_blocks, 1, "as the last stats had them");
  engine_stats_free (&st);
  cr_expect_eq (engine_holds (e, count_one, &n), -EBUSY);
  cr_expect_eq (n, 0);
  gate_open (&busy);
  pthread_join (t, NULL);

  cr_assert_eq (engine_stats (e, &st), 0);
  cr_expect_eq (st.holds_stale_s, 0, "current again");
  engine_stats_free (&st);
  cr_expect_eq (engine_holds (e, count_one, &n), 0);
  cr_expect_eq (n, 1);
  engine_close (e);
}
