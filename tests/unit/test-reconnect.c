/* SPDX-License-Identifier: BSD-3-Clause */
/* test-reconnect.c --- the NBD reconnect rules: the check of a new
 * connection, the backoff, and the replay log with a fake transport
 * that stands for the remote (what it holds, and whether it takes
 * writes).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "reconnect.h"

static const struct remote_caps base = {
  .size = 1 << 20,
  .writable = true,
  .can_flush = true,
  .can_fua = true,
  .can_zero = true,
  .can_trim = true,
  .can_multi_conn = true,
  .min_block = 1,
  .max_block = 32 << 20,
};

Test (reconnect, same_caps_or_more_is_accepted)
{
  struct remote_caps now = base;
  char buf[128];

  cr_expect_null (reconnect_caps_check (&base, &now, buf, sizeof buf));
  now.can_cache = true;
  now.can_fast_zero = true;
  now.max_block = 64 << 20;
  cr_expect_null (reconnect_caps_check (&base, &now, buf, sizeof buf));
}

Test (reconnect, a_smaller_size_is_refused_a_larger_one_is_not)
{
  struct remote_caps now = base;
  char buf[128];
  const char *why;

  now.size = base.size - 512;
  why = reconnect_caps_check (&base, &now, buf, sizeof buf);
  cr_assert_not_null (why);
  cr_expect (strstr (why, "size is 1048064 bytes, was 1048576"), "%s", why);
  now.size = 2 << 20;
  cr_expect_null (reconnect_caps_check (&base, &now, buf, sizeof buf));
}

Test (reconnect, a_lost_flag_is_refused)
{
  static const size_t flags[] = {
    offsetof (struct remote_caps, writable),
    offsetof (struct remote_caps, can_flush),
    offsetof (struct remote_caps, can_fua),
    offsetof (struct remote_caps, can_zero),
    offsetof (struct remote_caps, can_trim),
    offsetof (struct remote_caps, can_multi_conn),
  };
  char buf[128];

  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    {
      struct remote_caps now = base;

      *(bool *)((char *)&now + flags[i]) = false;
      cr_expect_not_null (reconnect_caps_check (&base, &now, buf, sizeof buf),
                          "flag %zu", i);
    }
}

Test (reconnect, block_size_limits_must_not_shrink)
{
  struct remote_caps now = base;
  char buf[128];

  now.min_block = 4096;
  cr_expect_not_null (reconnect_caps_check (&base, &now, buf, sizeof buf));
  now = base;
  now.max_block = 1 << 20;
  cr_expect_not_null (reconnect_caps_check (&base, &now, buf, sizeof buf));
}

Test (reconnect, backoff_doubles_and_is_bounded)
{
  cr_expect_eq (reconnect_backoff_ms (0), 100);
  cr_expect_eq (reconnect_backoff_ms (1), 200);
  cr_expect_eq (reconnect_backoff_ms (3), 800);
  cr_expect_eq (reconnect_backoff_ms (6), 5000);
  cr_expect_eq (reconnect_backoff_ms (1000), 5000);
}

/* The fake remote: a small disk, what it was asked, and failures to
 * inject.  Its trim zeroes (a remote that gives the same content for
 * the same commands).
 */
#define DISK 4096

struct fake
{
  unsigned char disk[DISK];
  int fail_at; /* refuse the command with this index (-1: none) */
  int gone_at; /* lose the connection at this command (-1: none) */
  int calls;
  struct replay_cmd cmd[16]; /* the first commands */
};

static void
fake_init (struct fake *f)
{
  memset (f, 0, sizeof *f);
  f->fail_at = f->gone_at = -1;
}

static int
fake_apply (void *opaque, const struct replay_cmd *c)
{
  struct fake *f = opaque;
  const int i = f->calls++;

  if (i < 16)
    f->cmd[i] = *c;
  if (i == f->gone_at)
    return REPLAY_GONE;
  if (i == f->fail_at)
    return -5;
  if (c->off + c->len > DISK)
    return 0; /* only counted */
  if (c->op == REPLAY_WRITE)
    memcpy (f->disk + c->off, c->data, c->len);
  else
    memset (f->disk + c->off, 0, c->len);
  return 0;
}

static struct replay_log tlog; /* the tests' log, and their remote */
static struct fake tf;

static void
log_setup (void)
{
  fake_init (&tf);
  replay_init (&tlog, 1 << 20);
}

static void
log_teardown (void)
{
  replay_destroy (&tlog);
}

static int
run (struct replay_log *log, struct fake *f, bool *lost)
{
  return replay_run (log, 1 << 20, 1 << 20, fake_apply, f, lost);
}

Test (reconnect, replay_restores_acknowledged_writes_in_order,
      .init = log_setup, .fini = log_teardown)
{
  bool lost = true;

  replay_note_write (&tlog, 0, 4, "aaaa", 0);
  replay_note_write (&tlog, 2, 4, "bbbb", 0);
  replay_note_other (&tlog, REPLAY_ZERO, 5, 1, 0);
  cr_assert_eq (run (&tlog, &tf, &lost), 0);
  cr_expect_not (lost);
  cr_expect_eq (memcmp (tf.disk, "aabbb\0", 6), 0);
  /* Replaying again (a second reconnect) gives the same. */
  cr_assert_eq (run (&tlog, &tf, NULL), 0);
  cr_expect_eq (memcmp (tf.disk, "aabbb\0", 6), 0);
}

Test (reconnect, a_successful_flush_drops_what_it_covers, .init = log_setup,
      .fini = log_teardown)
{
  uint64_t mark;

  replay_note_write (&tlog, 0, 4, "aaaa", 0);
  mark = replay_mark (&tlog);
  replay_note_write (&tlog, 8, 4, "cccc",
                     0); /* acknowledged during the flush */
  replay_flushed (&tlog, mark);
  cr_expect_eq (tlog.count, 1);
  cr_expect_eq (tlog.bytes, 4);
  cr_assert_eq (run (&tlog, &tf, NULL), 0);
  cr_expect_eq (tf.calls, 1);
  cr_expect_eq (memcmp (tf.disk + 8, "cccc", 4), 0);
  cr_expect_eq (tf.disk[0], 0, "the flushed write is not replayed");
  replay_flushed (&tlog, replay_mark (&tlog));
  cr_expect_eq (tlog.count, 0);
  cr_expect_eq (tlog.used, 0, "an empty log gives its ring back");
}

Test (reconnect, a_lost_connection_stops_the_replay_and_keeps_the_log,
      .init = log_setup, .fini = log_teardown)
{
  tf.gone_at = 1;
  replay_note_write (&tlog, 0, 1, "a", 0);
  replay_note_write (&tlog, 1, 1, "b", 0);
  replay_note_write (&tlog, 2, 1, "c", 0);
  cr_expect_eq (run (&tlog, &tf, NULL), -ENOTCONN);
  cr_expect_eq (tf.calls, 2);
  cr_expect_eq (tlog.count, 3);
}

/* A refusal is not a lost connection: retrying it on a new connection
 * for ever would fail every request; it is a loss, the replay goes on.
 */
Test (reconnect, a_refused_command_is_a_loss_and_the_replay_goes_on,
      .init = log_setup, .fini = log_teardown)
{
  bool lost = false;

  tf.fail_at = 1;
  replay_note_write (&tlog, 0, 1, "a", 0);
  replay_note_write (&tlog, 1, 1, "b", 0);
  replay_note_write (&tlog, 2, 1, "c", 0);
  cr_expect_eq (run (&tlog, &tf, &lost), 0);
  cr_expect (lost, "the next FLUSH must fail");
  cr_expect_eq (tf.calls, 3);
  cr_expect_eq (memcmp (tf.disk, "a\0c", 3), 0);
}

Test (reconnect, a_fua_write_over_an_older_entry_is_replayed_after_it,
      .init = log_setup, .fini = log_teardown)
{
  replay_note_write (&tlog, 0, 4, "aaaa", 0);
  replay_note_write (&tlog, 2, 4, "BBBB", REPLAY_DURABLE);
  cr_expect_eq (tlog.count, 2, "the FUA write is logged: it covers an older");
  replay_note_write (&tlog, 100, 4, "CCCC", REPLAY_DURABLE);
  cr_expect_eq (tlog.count, 2, "a FUA write over nothing older is not");
  cr_assert_eq (run (&tlog, &tf, NULL), 0);
  cr_expect_eq (memcmp (tf.disk, "aaBBBB", 6), 0, "%.6s", tf.disk);
}

Test (reconnect, a_fua_zero_over_an_older_write_is_replayed_after_it,
      .init = log_setup, .fini = log_teardown)
{
  replay_note_write (&tlog, 0, 4, "aaaa", 0);
  replay_note_other (&tlog, REPLAY_ZERO, 0, 4, REPLAY_DURABLE);
  cr_assert_eq (run (&tlog, &tf, NULL), 0);
  cr_expect_eq (memcmp (tf.disk, "\0\0\0\0", 4), 0);
}

/* The engine's case: a write-back flight writes a held copy of an
 * inode-table block (logged, its flush not yet done), then a client's
 * FUA write of the same block is acknowledged.  A reconnect before the
 * flight's flush must leave the FUA write on the remote.
 */
Test (reconnect, a_held_copy_then_a_fua_write_of_the_block_leaves_the_fua_write,
      .init = log_setup, .fini = log_teardown)
{
  static unsigned char held[1024], fua[1024];

  memset (held, 'h', sizeof held);
  memset (fua, 'F', sizeof fua);
  replay_note_write (&tlog, 1024, 1024, held, 0);
  replay_note_write (&tlog, 1024, 1024, fua, REPLAY_DURABLE);
  cr_assert_eq (run (&tlog, &tf, NULL), 0);
  cr_expect_eq (memcmp (tf.disk + 1024, fua, 1024), 0);
}

Test (reconnect, a_trim_is_replayed_in_its_place, .init = log_setup,
      .fini = log_teardown)
{
  replay_note_other (&tlog, REPLAY_TRIM, 200, 4, 0);
  cr_expect_eq (tlog.count, 1, "a trim over nothing is logged: it may be lost");
  replay_note_write (&tlog, 0, 4, "aaaa", 0);
  replay_note_other (&tlog, REPLAY_TRIM, 0, 4, 0);
  memset (tf.disk + 200, 'x', 4);
  cr_assert_eq (run (&tlog, &tf, NULL), 0);
  cr_expect_eq (tf.calls, 3);
  cr_expect_eq (tf.cmd[2].op, REPLAY_TRIM);
  cr_expect_eq (memcmp (tf.disk, "\0\0\0\0", 4), 0, "not the older write");
  cr_expect_eq (memcmp (tf.disk + 200, "\0\0\0\0", 4), 0);
  replay_note_write (&tlog, 0, 4, "bbbb", 0);
  replay_note_other (&tlog, REPLAY_TRIM, 0, 4, REPLAY_DURABLE);
  cr_expect_eq (tlog.count, 5, "a FUA trim over an older entry is logged");
}

Test (reconnect, a_replayed_zero_has_no_fast_zero_and_is_split,
      .init = log_setup, .fini = log_teardown)
{
  const uint64_t G = 1ull << 30;

  replay_note_other (&tlog, REPLAY_ZERO, 0, 2 * G + G / 2,
                     REPLAY_MAY_TRIM | 0x80);
  replay_note_other (&tlog, REPLAY_ZERO, 0, 4096, 0);
  replay_note_write (&tlog, 0, 10, "0123456789", 0);
  cr_assert_eq (replay_run (&tlog, 4, G, fake_apply, &tf, NULL), 0);
  cr_assert_eq (tf.calls, 3 + 1 + 3);
  for (int i = 0; i < 3; i++)
    {
      cr_expect_eq (tf.cmd[i].op, REPLAY_ZERO);
      cr_expect_eq (tf.cmd[i].off, i * G);
      cr_expect_eq (tf.cmd[i].len, i < 2 ? G : G / 2);
      cr_expect_eq (tf.cmd[i].flags, REPLAY_MAY_TRIM, "only may-trim");
    }
  cr_expect_eq (tf.cmd[3].flags, 0, "no hole when the zero had none");
  cr_expect_eq (tf.cmd[6].len, 2);
  cr_expect_eq (memcmp (tf.disk, "0123456789", 10), 0);
}

Test (reconnect, past_the_bound_the_loss_is_reported_once)
{
  static unsigned char big[100];
  struct replay_log log;
  struct fake f;
  bool lost = false;

  fake_init (&f);
  replay_init (&log, 128); /* two entries of 4 bytes */
  replay_note_write (&log, 0, 4, "aaaa", 0);
  replay_note_write (&log, 4, sizeof big, big, 0); /* over the bound */
  cr_expect (replay_lost (&log));
  cr_expect_eq (log.count, 0);
  /* Until a flush covers the loss nothing more is copied. */
  replay_note_write (&log, 16, 4, "dddd", 0);
  cr_expect_eq (log.count, 0, "no copy while something is lost");
  cr_expect_eq (log.bytes, 0);
  cr_assert_eq (run (&log, &f, &lost), 0);
  cr_expect (lost, "the reconnect must fail the next FLUSH");
  cr_expect_eq (f.calls, 0);
  cr_expect_eq (replay_forget_lost (&log), 4 + sizeof big + 4);
  cr_expect_not (replay_lost (&log));
  /* Once the loss is reported, writes are copied again. */
  replay_note_write (&log, 16, 4, "eeee", 0);
  cr_expect_eq (log.count, 1);
  cr_assert_eq (run (&log, &f, &lost), 0);
  cr_expect_not (lost);
  cr_expect_eq (memcmp (f.disk + 16, "eeee", 4), 0, "what is kept is replayed");
  replay_destroy (&log);
}

Test (reconnect, a_flush_after_the_loss_covers_it)
{
  struct replay_log log;
  uint64_t mark;
  static unsigned char big[64];

  replay_init (&log, 64); /* one entry of up to 32 bytes */
  mark = replay_mark (&log);
  replay_note_write (&log, 0, sizeof big, big, 0); /* lost, after the mark */
  replay_flushed (&log, mark);
  cr_expect (replay_lost (&log), "a flush issued before does not cover it");
  mark = replay_mark (&log);
  replay_flushed (&log, mark);
  cr_expect_not (replay_lost (&log), "a flush issued after does");
  replay_note_write (&log, 0, 4, "bbbb", 0);
  cr_expect_eq (log.count, 1, "and writes are copied again");
  replay_destroy (&log);
}

/* nbd-replay=off: a log of no bytes keeps nothing, so every write
 * acknowledged since the last flush counts as lost, and a FUA write
 * over nothing older as nothing.
 */
Test (reconnect, a_log_of_no_bytes_loses_every_unflushed_write)
{
  struct replay_log log;
  struct fake f;
  bool lost = false;

  fake_init (&f);
  replay_init (&log, 0);
  replay_note_write (&log, 0, 4, "aaaa", REPLAY_DURABLE);
  cr_expect_not (replay_lost (&log), "a FUA write loses nothing");
  replay_note_write (&log, 8, 4, "bbbb", 0);
  replay_note_other (&log, REPLAY_ZERO, 16, 4, 0);
  cr_expect (replay_lost (&log), "an unflushed write is lost");
  cr_expect_eq (log.count, 0, "and nothing is kept");
  cr_assert_eq (run (&log, &f, &lost), 0);
  cr_expect (lost, "the replay reports the loss");
  cr_expect_eq (f.calls, 0, "and replays nothing");
  replay_flushed (&log, replay_mark (&log));
  cr_expect_not (replay_lost (&log), "a flush after them covers them");
  replay_destroy (&log);
}

Test (reconnect, the_ring_wraps_and_keeps_the_order)
{
  struct replay_log log;
  struct fake f;
  uint64_t mark;
  bool lost = true;

  fake_init (&f);
  replay_init (&log, 4 * 64); /* four entries of up to 16 bytes */
  for (int i = 0; i < 4; i++)
    replay_note_write (&log, 10 * i, 1, &"abcd"[i], 0);
  mark = replay_mark (&log) - 2;
  replay_flushed (&log, mark); /* the first two */
  replay_note_write (&log, 40, 1, "e", 0);
  replay_note_write (&log, 50, 1, "f", 0);
  cr_expect_eq (log.count, 4);
  cr_expect_not (replay_lost (&log));
  cr_assert_eq (run (&log, &f, &lost), 0);
  cr_expect_not (lost);
  cr_assert_eq (f.calls, 4);
  for (int i = 0; i < 4; i++)
    cr_expect_eq (f.cmd[i].off, (uint64_t)(20 + 10 * i), "command %d", i);
  replay_destroy (&log);
}

/* A write's entry is reserved and copied while the write is on its way
 * (pending), and takes its place in the order at its acknowledgement.
 */
Test (reconnect, a_pending_entry_is_ordered_by_its_acknowledgement,
      .init = log_setup, .fini = log_teardown)
{
  struct replay_entry *a, *c;
  uint64_t mark;

  a = replay_reserve (&tlog, REPLAY_WRITE, 0, 4);
  cr_assert_not_null (a);
  memcpy (a->data, "aaaa", 4);
  replay_note_write (&tlog, 8, 4, "bbbb", 0); /* acknowledged first */
  cr_expect_eq (tlog.count, 1, "a pending entry is not in the log yet");
  cr_assert_eq (run (&tlog, &tf, NULL), 0);
  cr_expect_eq (tf.calls, 1, "nor replayed");
  mark = replay_mark (&tlog);
  replay_acked (&tlog, a, REPLAY_WRITE, 0, 4, 0);
  replay_flushed (&tlog, mark); /* issued before a's acknowledgement */
  cr_expect_eq (tlog.count, 1, "the flush dropped b, not a");
  cr_expect_gt (tlog.used, 0);
  memset (tf.disk, 0, 16);
  cr_assert_eq (run (&tlog, &tf, NULL), 0);
  cr_expect_eq (memcmp (tf.disk, "aaaa\0\0\0\0\0", 9), 0);
  /* A failed write leaves nothing; its room comes back. */
  c = replay_reserve (&tlog, REPLAY_WRITE, 100, 4);
  cr_assert_not_null (c);
  replay_cancel (&tlog, c);
  cr_expect_eq (tlog.count, 1);
  replay_flushed (&tlog, replay_mark (&tlog));
  cr_expect_eq (tlog.used, 0, "an empty log gives its ring back");
}

Test (reconnect, a_pending_entry_keeps_its_room_past_a_flush, .init = log_setup,
      .fini = log_teardown)
{
  struct replay_entry *e = replay_reserve (&tlog, REPLAY_WRITE, 0, 4);
  struct replay_entry *f;

  cr_assert_not_null (e);
  replay_note_write (&tlog, 8, 4, "bbbb", 0);
  replay_flushed (&tlog, replay_mark (&tlog));
  cr_expect_eq (tlog.count, 0);
  cr_expect_gt (tlog.used, 0, "its room is not given back while pending");
  f = replay_reserve (&tlog, REPLAY_WRITE, 16, 4);
  cr_expect (f > e, "the next entry does not take its room");
  memcpy (e->data, "aaaa", 4);
  replay_acked (&tlog, e, REPLAY_WRITE, 0, 4, 0);
  replay_cancel (&tlog, f);
  cr_expect_eq (tlog.count, 1);
  replay_flushed (&tlog, replay_mark (&tlog));
  cr_expect_eq (tlog.used, 0);
}

/* The rule, at random: a remote with a volatile cache that keeps a
 * random part of what it was not asked to flush when it dies.  After
 * every replay each byte holds the newest content acknowledged for it,
 * or the log says something was lost (the next FLUSH fails).
 */
#define RDISK 256

struct vremote
{
  unsigned char cur[RDISK], durable[RDISK];
};

static int
vremote_apply (void *opaque, const struct replay_cmd *c)
{
  struct vremote *v = opaque;

  if (c->op == REPLAY_WRITE)
    memcpy (v->cur + c->off, c->data, c->len);
  else
    memset (v->cur + c->off, 0, c->len);
  return 0;
}

static void
rule_run (unsigned seed, uint64_t bound, int *losses)
{
  struct replay_log log;
  struct vremote v = { 0 };
  unsigned char model[RDISK] = { 0 }, buf[64];

  srand (seed);
  replay_init (&log, bound);
  for (int step = 0; step < 2000; step++)
    {
      const int what = rand () % 10;
      const uint64_t off = (uint64_t)(rand () % (RDISK - 1));
      uint64_t len = 1 + (uint64_t)(rand () % 48);
      const bool fua = rand () % 4 == 0;

      if (off + len > RDISK)
        len = RDISK - off;
      if (what < 5)
        {
          for (uint64_t i = 0; i < len; i++)
            buf[i] = (unsigned char)(1 + rand () % 255);
          memcpy (v.cur + off, buf, len);
          memcpy (model + off, buf, len);
          replay_note_write (&log, off, len, buf, fua ? REPLAY_DURABLE : 0);
        }
      else if (what < 7)
        {
          memset (v.cur + off, 0, len);
          memset (model + off, 0, len);
          replay_note_other (&log, what == 5 ? REPLAY_ZERO : REPLAY_TRIM, off,
                             len, fua ? REPLAY_DURABLE : 0);
        }
      else if (what < 9)
        {
          const uint64_t mark = replay_mark (&log);

          memcpy (v.durable, v.cur, RDISK);
          replay_flushed (&log, mark);
          continue;
        }
      else
        {
          bool lost = false;

          /* It dies: each byte not made durable is kept or not. */
          for (int i = 0; i < RDISK; i++)
            if (rand () % 2)
              v.cur[i] = v.durable[i];
          cr_assert_eq (replay_run (&log, 16, 16, vremote_apply, &v, &lost), 0);
          memcpy (v.durable, v.cur, RDISK);
          if (lost)
            {
              (*losses)++;
              replay_forget_lost (&log);
              memcpy (model, v.cur, RDISK); /* the FLUSH failed for it */
            }
          else
            cr_assert_eq (memcmp (v.cur, model, RDISK), 0,
                          "seed %u step %d: a replay undid an acknowledged "
                          "write",
                          seed, step);
          replay_flushed (&log, replay_mark (&log));
          continue;
        }
      if (fua)
        memcpy (v.durable + off, v.cur + off, len);
    }
  replay_destroy (&log);
}

Test (reconnect, every_range_holds_the_newest_or_the_loss_is_reported)
{
  int losses = 0;

  for (unsigned seed = 1; seed <= 200; seed++)
    rule_run (seed, 1 << 20, &losses);
  cr_expect_eq (losses, 0, "nothing is lost within the bound");
  for (unsigned seed = 1; seed <= 200; seed++)
    rule_run (seed, 8 * 64, &losses);
  cr_expect_gt (losses, 0, "a small bound loses, and says so");
}

/* Threads noting writes at once into a small ring while another flushes:
 * every entry left holds its own data (no reservation overlapped
 * another, none was given back while being copied), and the counts add
 * up.
 */
struct stress
{
  struct replay_log *log;
  unsigned seed;
};

static void
pattern (unsigned char *p, uint64_t off, uint64_t len)
{
  for (uint64_t i = 0; i < len; i++)
    p[i] = (unsigned char)((off * 31 + i * 7) ^ (len >> 3));
}

static void *
stress_writer (void *arg)
{
  struct stress *s = arg;
  unsigned char buf[3000];

  for (int i = 0; i < 20000; i++)
    {
      const uint64_t len = 1 + rand_r (&s->seed) % sizeof buf;
      const uint64_t off = rand_r (&s->seed) % 100000;

      struct replay_entry *e;

      pattern (buf, off, len);
      if (i % 2)
        {
          replay_note_write (s->log, off, len, buf, 0);
          continue;
        }
      /* Copied while "on its way", then acknowledged or failed. */
      e = replay_reserve (s->log, REPLAY_WRITE, off, len);
      if (e)
        memcpy (e->data, buf, len);
      if (e && i % 8 == 0)
        replay_cancel (s->log, e);
      else
        replay_acked (s->log, e, REPLAY_WRITE, off, len, 0);
    }
  return NULL;
}

static void *
stress_flusher (void *arg)
{
  struct stress *s = arg;

  for (int i = 0; i < 20000; i++)
    {
      const uint64_t mark = replay_mark (s->log);

      sched_yield ();
      replay_flushed (s->log, mark);
      if (replay_lost (s->log))
        replay_forget_lost (s->log);
    }
  return NULL;
}

struct check
{
  size_t n;
  uint64_t bytes;
  bool bad;
};

static int
check_cmd (void *opaque, const struct replay_cmd *c)
{
  struct check *k = opaque;
  unsigned char want[3000];

  pattern (want, c->off, c->len);
  k->n++;
  k->bytes += c->len;
  if (c->len > sizeof want || memcmp (want, c->data, c->len) != 0)
    k->bad = true;
  return 0;
}

Test (reconnect, concurrent_notes_and_flushes_keep_every_entry_whole)
{
  struct replay_log log;
  struct stress w[3], f;
  pthread_t t[4];
  struct check k = { 0 };

  replay_init (&log, 64 << 10);
  for (int i = 0; i < 3; i++)
    {
      w[i] = (struct stress){ &log, 1 + (unsigned)i };
      pthread_create (&t[i], NULL, stress_writer, &w[i]);
    }
  f = (struct stress){ &log, 9 };
  pthread_create (&t[3], NULL, stress_flusher, &f);
  for (int i = 0; i < 4; i++)
    pthread_join (t[i], NULL);
  cr_expect_eq (log.pending, 0);
  cr_assert_eq (replay_run (&log, 1 << 20, 1 << 20, check_cmd, &k, NULL), 0);
  cr_expect_not (k.bad, "an entry's data was overwritten");
  cr_expect_eq (k.n, log.count);
  cr_expect_eq (k.bytes, log.bytes);
  cr_expect_leq (log.used, log.max_bytes);
  replay_flushed (&log, replay_mark (&log));
  cr_expect_eq (log.used, 0);
  replay_destroy (&log);
}
