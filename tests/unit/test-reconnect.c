/* SPDX-License-Identifier: BSD-3-Clause */
/* test-reconnect.c --- the NBD reconnect rules: the check of a new
 * connection, the backoff, and the replay log with a fake transport
 * that stands for the remote (what it holds, and whether it takes
 * writes).
 */
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

Test (reconnect, a_different_size_is_refused)
{
  struct remote_caps now = base;
  char buf[128];
  const char *why;

  now.size = 2 << 20;
  why = reconnect_caps_check (&base, &now, buf, sizeof buf);
  cr_assert_not_null (why);
  cr_expect (strstr (why, "size is 2097152 bytes, was 1048576"), "%s", why);
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

/* The fake remote: a small disk, and a failure to inject. */
struct fake
{
  unsigned char disk[4096];
  int fail_at; /* fail the entry with this index (-1: none) */
  int calls;
};

static int
fake_apply (void *opaque, const struct replay_entry *e)
{
  struct fake *f = opaque;

  if (f->calls++ == f->fail_at)
    return -5;
  if (e->op == REPLAY_WRITE)
    memcpy (f->disk + e->off, e->data, e->len);
  else
    memset (f->disk + e->off, 0, e->len);
  return 0;
}

Test (reconnect, replay_restores_acknowledged_writes_in_order)
{
  struct replay_log log;
  struct fake f = { .fail_at = -1 };
  bool lost = true;

  replay_init (&log, 1 << 20);
  replay_note_write (&log, 0, 4, "aaaa");
  replay_note_write (&log, 2, 4, "bbbb");
  replay_note_zero (&log, 5, 1, 0);
  cr_assert_eq (replay_run (&log, fake_apply, &f, &lost), 0);
  cr_expect_not (lost);
  cr_expect_eq (memcmp (f.disk, "aabbb\0", 6), 0);
  /* Replaying again (a second reconnect) gives the same. */
  cr_assert_eq (replay_run (&log, fake_apply, &f, NULL), 0);
  cr_expect_eq (memcmp (f.disk, "aabbb\0", 6), 0);
  replay_destroy (&log);
}

Test (reconnect, a_successful_flush_drops_what_it_covers)
{
  struct replay_log log;
  struct fake f = { .fail_at = -1 };
  uint64_t mark;

  replay_init (&log, 1 << 20);
  replay_note_write (&log, 0, 4, "aaaa");
  mark = replay_mark (&log);
  replay_note_write (&log, 8, 4, "cccc"); /* acknowledged during the flush */
  replay_flushed (&log, mark);
  cr_expect_eq (log.count, 1);
  cr_expect_eq (log.bytes, 4);
  cr_assert_eq (replay_run (&log, fake_apply, &f, NULL), 0);
  cr_expect_eq (f.calls, 1);
  cr_expect_eq (memcmp (f.disk + 8, "cccc", 4), 0);
  cr_expect_eq (f.disk[0], 0, "the flushed write is not replayed");
  replay_destroy (&log);
}

Test (reconnect, a_failed_replay_stops_and_keeps_the_log)
{
  struct replay_log log;
  struct fake f = { .fail_at = 1 };

  replay_init (&log, 1 << 20);
  replay_note_write (&log, 0, 1, "a");
  replay_note_write (&log, 1, 1, "b");
  replay_note_write (&log, 2, 1, "c");
  cr_expect_eq (replay_run (&log, fake_apply, &f, NULL), -5);
  cr_expect_eq (f.calls, 2);
  cr_expect_eq (log.count, 3);
  replay_destroy (&log);
}

Test (reconnect, past_the_bound_the_loss_is_reported_once)
{
  struct replay_log log;
  struct fake f = { .fail_at = -1 };
  bool lost = false;

  replay_init (&log, 8);
  replay_note_write (&log, 0, 4, "aaaa");
  replay_note_write (&log, 4, 8, "bbbbbbbb"); /* over the bound */
  cr_expect (replay_lost (&log));
  cr_expect_eq (log.count, 0);
  /* Until a flush covers the loss nothing more is copied. */
  replay_note_write (&log, 16, 4, "dddd");
  cr_expect_eq (log.count, 0, "no copy while something is lost");
  cr_expect_eq (log.bytes, 0);
  cr_assert_eq (replay_run (&log, fake_apply, &f, &lost), 0);
  cr_expect (lost, "the reconnect must fail the next FLUSH");
  cr_expect_eq (f.calls, 0);
  cr_expect_eq (replay_forget_lost (&log), 16);
  cr_expect_not (replay_lost (&log));
  /* Once the loss is reported, writes are copied again. */
  replay_note_write (&log, 16, 4, "eeee");
  cr_expect_eq (log.count, 1);
  cr_assert_eq (replay_run (&log, fake_apply, &f, &lost), 0);
  cr_expect_not (lost);
  cr_expect_eq (memcmp (f.disk + 16, "eeee", 4), 0, "what is kept is replayed");
  replay_destroy (&log);
}

Test (reconnect, a_flush_after_the_loss_covers_it)
{
  struct replay_log log;
  uint64_t mark;

  replay_init (&log, 4);
  mark = replay_mark (&log);
  replay_note_write (&log, 0, 8, "aaaaaaaa"); /* lost, after the mark */
  replay_flushed (&log, mark);
  cr_expect (replay_lost (&log), "a flush issued before does not cover it");
  mark = replay_mark (&log);
  replay_flushed (&log, mark);
  cr_expect_not (replay_lost (&log), "a flush issued after does");
  replay_note_write (&log, 0, 4, "bbbb");
  cr_expect_eq (log.count, 1, "and writes are copied again");
  replay_destroy (&log);
}
