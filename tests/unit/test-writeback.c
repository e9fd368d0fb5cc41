/* SPDX-License-Identifier: BSD-3-Clause */
/* test-writeback.c --- the write-back's decisions: every predicate,
 * for every policy, hold kind and class, as a function of the hold, the
 * configuration and its argument alone (no store, no journal state).
 */
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "engine-impl.h"

#define SEC 1000000000ull

static struct engine eng;

static struct hold
hold_of (enum hold_kind kind, enum tclass cls)
{
  return (struct hold){ .off = 1 << 20, .len = 4096, .kind = kind, .cls = cls };
}

/* Does a FLUSH under policy p write back a hold of kind k and class c?
 * Rows: kind (in place, pending, absorbed, commit); columns: class
 * (same, atime, time, real).  From the contract (semantics.md, "What
 * ends a hold"): strict keeps nothing; atime keeps atime-only holds,
 * lazy time-only ones; absorbed journal holds outlive a FLUSH; a
 * pending journal block waits for its commit when its class is one the
 * policy absorbs, else it rides the FLUSH.
 */
static const char *const flush_table[] = {
  [POLICY_STRICT] = "1111",
  [POLICY_ATIME] = "1011"
                   "0011"
                   "0000"
                   "0000",
  [POLICY_LAZY] = "1001"
                  "0001"
                  "0000"
                  "0000",
};

Test (writeback, flush_by_policy_kind_and_class)
{
  static const enum policy policies[]
      = { POLICY_STRICT, POLICY_ATIME, POLICY_LAZY };
  size_t checked = 0;

  for (size_t i = 0; i < sizeof policies / sizeof *policies; i++)
    {
      enum policy p = policies[i];
      const char *row = flush_table[p];
      /* Journal holds exist only under atime and lazy. */
      int kinds = p == POLICY_STRICT ? 1 : 4;

      eng.cfg.policy = p;
      for (int k = 0; k < kinds; k++)
        for (int c = TCLASS_SAME; c <= TCLASS_REAL; c++)
          {
            struct hold h = hold_of ((enum hold_kind)k, (enum tclass)c);
            bool want = row[k * 4 + c] == '1';

            cr_assert_eq (writeback_pred_flush (&eng, &h, NULL), want,
                          "policy %s, kind %d, class %s: FLUSH %s it",
                          policy_name (p), k, tclass_name (c),
                          want ? "writes" : "keeps");
            checked++;
          }
    }
  cr_assert_eq (checked, 4 + 16 + 16);
}

Test (writeback, pending_may_wait_is_the_policy_on_its_class)
{
  struct hold h = hold_of (HOLD_JPENDING, TCLASS_ATIME);

  cr_assert (jstate_pending_may_wait (POLICY_ATIME, &h));
  cr_assert (jstate_pending_may_wait (POLICY_LAZY, &h));
  cr_assert_not (jstate_pending_may_wait (POLICY_STRICT, &h));
  h.cls = TCLASS_TIME;
  cr_assert_not (jstate_pending_may_wait (POLICY_ATIME, &h));
  cr_assert (jstate_pending_may_wait (POLICY_LAZY, &h));
  h.cls = TCLASS_REAL; /* a revoke block arrives as REAL */
  cr_assert_not (jstate_pending_may_wait (POLICY_LAZY, &h));
}

Test (writeback, ordered_is_every_journal_hold)
{
  for (int k = HOLD_INPLACE; k <= HOLD_JCOMMIT; k++)
    for (int c = TCLASS_SAME; c <= TCLASS_REAL; c++)
      {
        struct hold h = hold_of ((enum hold_kind)k, (enum tclass)c);

        cr_assert_eq (writeback_pred_ordered (&eng, &h, NULL),
                      k != HOLD_INPLACE, "kind %d", k);
      }
}

Test (writeback, all_is_all)
{
  for (int k = HOLD_INPLACE; k <= HOLD_JCOMMIT; k++)
    {
      struct hold h = hold_of ((enum hold_kind)k, TCLASS_ATIME);

      cr_assert (writeback_pred_all (&eng, &h, NULL));
    }
}

/* Due within the sweep interval (a quarter of max-age, at most a
 * minute) of now, whatever the hold is, unless it is met.
 */
Test (writeback, expired_within_the_sweep)
{
  struct hold h = hold_of (HOLD_INPLACE, TCLASS_ATIME);
  struct wb_sweep d = { 0 };

  h.first_ns = 1000 * SEC;
  eng.cfg.max_age_ns = 100 * SEC; /* due at 1100 s, sweep 25 s */
  d.now = 1075 * SEC - 1;
  cr_assert_not (writeback_pred_expired (&eng, &h, &d));
  d.now = 1075 * SEC;
  cr_assert (writeback_pred_expired (&eng, &h, &d));
  h.kind = HOLD_JABSORBED;
  cr_assert (writeback_pred_expired (&eng, &h, &d));
  h.met = true;
  cr_assert_not (writeback_pred_expired (&eng, &h, &d), "met: not again");
  h.met = false;

  eng.cfg.max_age_ns = 86400 * SEC; /* sweep capped at 60 s */
  d.now = (1000 + 86400 - 60) * SEC - 1;
  cr_assert_not (writeback_pred_expired (&eng, &h, &d));
  d.now = (1000 + 86400 - 60) * SEC;
  cr_assert (writeback_pred_expired (&eng, &h, &d));
  d.now = (1000 + 86400 + 5) * SEC;
  cr_assert (writeback_pred_expired (&eng, &h, &d));
}

/* A sweep that meets absorbed holds in place: they are not selected,
 * the in-place holds of their targets are, due or not.
 */
Test (writeback, expired_meeting_in_place)
{
  const uint64_t also[] = { 4096, 1 << 20, 3 << 20 };
  struct wb_sweep d = { .now = 2000 * SEC, .meet = true, .also = also, .n = 3 };
  struct hold ab = hold_of (HOLD_JABSORBED, TCLASS_ATIME);
  struct hold cm = hold_of (HOLD_JCOMMIT, TCLASS_ATIME);
  struct hold ip = hold_of (HOLD_INPLACE, TCLASS_ATIME);
  struct hold pe = hold_of (HOLD_JPENDING, TCLASS_ATIME);

  eng.cfg.max_age_ns = 100 * SEC;
  ab.first_ns = cm.first_ns = pe.first_ns = 1 * SEC; /* long due */
  cr_assert_not (writeback_pred_expired (&eng, &ab, &d));
  cr_assert_not (writeback_pred_expired (&eng, &cm, &d));
  cr_assert (writeback_pred_expired (&eng, &pe, &d), "pending: as ever");
  ip.first_ns = 1990 * SEC; /* not due */
  ip.off = 1 << 20;
  cr_assert (writeback_pred_expired (&eng, &ip, &d), "a target");
  ip.off = 2 << 20;
  cr_assert_not (writeback_pred_expired (&eng, &ip, &d), "not a target");
  ab.off = 1 << 20; /* only in-place holds are targets */
  d.meet = false;
  ab.first_ns = 1990 * SEC;
  cr_assert_not (writeback_pred_expired (&eng, &ab, &d));
}

/* The memory cap's oldest: first held no later than the cutoff. */
Test (writeback, over_cap_by_first_hold)
{
  struct hold h = hold_of (HOLD_INPLACE, TCLASS_ATIME);
  uint64_t cutoff = 500 * SEC;

  h.first_ns = 499 * SEC;
  cr_assert (writeback_pred_over_cap (&eng, &h, &cutoff));
  h.first_ns = 500 * SEC;
  cr_assert (writeback_pred_over_cap (&eng, &h, &cutoff));
  h.first_ns = 500 * SEC + 1;
  cr_assert_not (writeback_pred_over_cap (&eng, &h, &cutoff));
  h.kind = HOLD_JABSORBED;
  h.first_ns = 1;
  cr_assert (writeback_pred_over_cap (&eng, &h, &cutoff));
}

/* A zero or trim: in-place holds it covers only partly, and journal
 * holds under it, go back; wholly covered in-place holds do not (the
 * new request wins), nor anything outside it.
 */
Test (writeback, range_of_a_zero_or_trim)
{
  struct hold in = hold_of (HOLD_INPLACE, TCLASS_ATIME);
  struct hold j = hold_of (HOLD_JABSORBED, TCLASS_ATIME);
  const uint64_t o = in.off;
  struct wb_range whole = { o, 4096 }, wider = { o - 4096, 3 * 4096 },
                  part = { o + 512, 1024 }, head = { o - 4096, 4096 + 512 },
                  before = { o - 4096, 4096 }, after = { o + 4096, 4096 };

  cr_assert_not (writeback_pred_range (&eng, &in, &whole));
  cr_assert_not (writeback_pred_range (&eng, &in, &wider));
  cr_assert (writeback_pred_range (&eng, &in, &part));
  cr_assert (writeback_pred_range (&eng, &in, &head));
  cr_assert_not (writeback_pred_range (&eng, &in, &before));
  cr_assert_not (writeback_pred_range (&eng, &in, &after));
  cr_assert (writeback_pred_range (&eng, &j, &whole));
  cr_assert (writeback_pred_range (&eng, &j, &wider));
  cr_assert_not (writeback_pred_range (&eng, &j, &before));
  cr_assert_not (writeback_pred_range (&eng, &j, &after));
}

/* The holds of table t that a FLUSH selects, by a walk. */
static size_t
flush_walked (struct hold_table *t)
{
  size_t n = 0;

  for (struct hold *h = hold_oldest (t); h; h = hold_next (t, h))
    n += writeback_pred_flush (&eng, h, NULL);
  return n;
}

/* What a FLUSH takes, counted by kind and class without a walk, is what
 * a walk selects: for every policy, with two holds of each kind and
 * class (one of each under strict), as they come and go.  None left of
 * what it takes, the count is 0 with the kept holds still there.
 */
Test (writeback, flush_takes_what_the_walk_selects)
{
  static const enum policy policies[]
      = { POLICY_STRICT, POLICY_ATIME, POLICY_LAZY };
  static unsigned char blk[4096];

  pthread_mutex_init (&eng.hold_lock, NULL);
  for (size_t i = 0; i < sizeof policies / sizeof *policies; i++)
    {
      enum policy p = policies[i];
      int kinds = p == POLICY_STRICT ? 1 : HOLD_KINDS, copies = 2, want = 0;
      struct hold *h, *next;
      int err = 0;

      eng.cfg.policy = p;
      cr_assert_eq (hold_init (&eng.holds), 0);
      pthread_mutex_lock (&eng.hold_lock);
      cr_assert_eq (writeback_flush_takes_locked (&eng), 0, "no holds");
      for (int j = 0; j < copies; j++)
        for (int k = 0; k < kinds; k++)
          for (int c = 0; c < HOLD_CLASSES; c++)
            {
              struct hold_info what
                  = { .kind = (enum hold_kind)k, .cls = (enum tclass)c };
              uint64_t off = (uint64_t)((j * kinds + k) * HOLD_CLASSES + c);

              cr_assert_not_null (
                  hold_put (&eng.holds, off * 4096, 4096, &what, blk, 1, &err));
              want += flush_table[p][k * 4 + c] == '1';
              cr_assert_eq (writeback_flush_takes_locked (&eng), (size_t)want,
                            "policy %s, kind %d, class %s", policy_name (p), k,
                            tclass_name ((enum tclass)c));
            }
      cr_assert_eq (flush_walked (&eng.holds), (size_t)want);
      cr_assert_gt (want, 0);
      /* Drop what a FLUSH takes: nothing to take, the rest kept. */
      for (h = hold_oldest (&eng.holds); h; h = next)
        {
          next = hold_next (&eng.holds, h);
          if (writeback_pred_flush (&eng, h, NULL))
            hold_drop (&eng.holds, h);
        }
      cr_assert_eq (writeback_flush_takes_locked (&eng), 0);
      cr_assert_eq (eng.holds.count,
                    (size_t)(copies * kinds * HOLD_CLASSES - want));
      /* A kept pending block that becomes real is taken again. */
      if (p != POLICY_STRICT)
        {
          h = hold_find (&eng.holds,
                         (uint64_t)(HOLD_JPENDING * HOLD_CLASSES) * 4096);
          cr_assert_not_null (h, "the pending class-same hold is kept");
          hold_put (
              &eng.holds, h->off, 4096,
              &(struct hold_info){ .kind = HOLD_JPENDING, .cls = TCLASS_REAL },
              blk, 2, &err);
          cr_assert_eq (writeback_flush_takes_locked (&eng), 1);
        }
      pthread_mutex_unlock (&eng.hold_lock);
      hold_fini (&eng.holds);
      for (int k = 0; k < HOLD_KINDS; k++)
        for (int c = 0; c < HOLD_CLASSES; c++)
          cr_assert_eq (
              hold_count_of (&eng.holds, (enum hold_kind)k, (enum tclass)c), 0);
    }
}
