/* SPDX-License-Identifier: BSD-3-Clause */
/* test-hold.c --- the hold table: lookup, replacement keeps the first
 * hold time, age order, byte accounting, growth and removal.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "hold.h"

Test (hold, put_find_replace_drop)
{
  struct hold_table t;
  unsigned char a[1024], b[1024];
  struct hold *h;
  int err = 0;

  memset (a, 'a', sizeof a);
  memset (b, 'b', sizeof b);
  cr_assert_eq (hold_init (&t), 0);
  cr_assert_null (hold_find (&t, 4096));
  cr_assert_null (hold_oldest (&t));

  h = hold_put (&t, 4096, 1024, &(struct hold_info){ .fs = 0, .cls = 1 }, a,
                100, &err);
  cr_assert_not_null (h);
  cr_assert_eq (hold_find (&t, 4096), h);
  cr_assert_null (hold_find (&t, 5120));
  cr_assert_eq (t.count, 1);
  cr_assert_eq (t.bytes, 1024);

  /* Replacing keeps the entry and its first-hold time. */
  h = hold_put (&t, 4096, 1024,
                &(struct hold_info){
                    .fs = 3, .kind = HOLD_JABSORBED, .cls = 2, .seq = 7 },
                b, 999, &err);
  cr_assert_eq (h->first_ns, 100);
  cr_assert_eq (h->cls, 2);
  cr_assert_eq (h->fs, 3);
  cr_assert_eq (h->kind, HOLD_JABSORBED);
  cr_assert_eq (h->seq, 7);
  cr_assert_eq (memcmp (h->data, b, 1024), 0);
  cr_assert_eq (t.count, 1);
  cr_assert_eq (t.bytes, 1024);

  hold_drop (&t, h);
  cr_assert_null (hold_find (&t, 4096));
  cr_assert_eq (t.count, 0);
  cr_assert_eq (t.bytes, 0);
  hold_fini (&t);
}

Test (hold, age_order_and_growth)
{
  enum
  {
    N = 5000
  };
  struct hold_table t;
  unsigned char blk[512] = { 0 };
  struct hold *h;
  uint64_t expect = 0;
  size_t n = 0;
  int err = 0;

  cr_assert_eq (hold_init (&t), 0);
  /* Insert in a scrambled offset order; age order is insertion order. */
  for (uint64_t i = 0; i < N; i++)
    {
      uint64_t off = ((i * 7919) % N) * 512;

      memcpy (blk, &off, sizeof off);
      cr_assert_not_null (hold_put (&t, off, 512,
                                    &(struct hold_info){ .fs = 0, .cls = 1 },
                                    blk, i, &err));
    }
  cr_assert_eq (t.count, N);
  cr_assert_eq (t.bytes, (uint64_t)N * 512);
  cr_assert_geq (t.nbuckets, N);
  for (h = hold_oldest (&t); h; h = hold_next (&t, h), n++)
    {
      uint64_t off;

      cr_assert_eq (h->first_ns, expect++);
      memcpy (&off, h->data, sizeof off);
      cr_assert_eq (off, h->off);
      cr_assert_eq (hold_find (&t, h->off), h);
    }
  cr_assert_eq (n, N);

  /* Drop every other one, from the middle of chains and the list. */
  for (uint64_t i = 0; i < N; i += 2)
    hold_drop (&t, hold_find (&t, ((i * 7919) % N) * 512));
  cr_assert_eq (t.count, N / 2);
  for (uint64_t i = 0; i < N; i++)
    {
      struct hold *f = hold_find (&t, ((i * 7919) % N) * 512);

      if (i % 2)
        cr_assert_not_null (f);
      else
        cr_assert_null (f);
    }
  cr_assert_eq (hold_oldest (&t)->first_ns, 1);
  hold_fini (&t);
}

Test (hold, block_size_change_starts_afresh)
{
  struct hold_table t;
  unsigned char blk[4096] = { 0 };
  struct hold *h;
  int err = 0;

  cr_assert_eq (hold_init (&t), 0);
  hold_put (&t, 0, 1024, &(struct hold_info){ .fs = 0, .cls = 1 }, blk, 5,
            &err);
  h = hold_put (&t, 0, 4096, &(struct hold_info){ .fs = 1, .cls = 1 }, blk, 9,
                &err);
  cr_assert_eq (h->len, 4096);
  cr_assert_eq (h->first_ns, 9);
  cr_assert_eq (t.count, 1);
  cr_assert_eq (t.bytes, 4096);
  hold_fini (&t);
}

/* journal_count follows the kind through put, replacement and drop. */
Test (hold, journal_count)
{
  struct hold_table t;
  unsigned char a[1024] = { 0 };
  struct hold *h2;
  int err = 0;

  cr_assert_eq (hold_init (&t), 0);
  hold_put (&t, 0, 512, &(struct hold_info){ .kind = HOLD_INPLACE }, a, 1,
            &err);
  cr_assert_eq (t.journal_count, 0);
  h2 = hold_put (&t, 512, 512, &(struct hold_info){ .kind = HOLD_JPENDING }, a,
                 1, &err);
  cr_assert_eq (t.journal_count, 1);
  hold_put (&t, 0, 512, &(struct hold_info){ .kind = HOLD_JCOMMIT }, a, 2,
            &err);
  cr_assert_eq (t.journal_count, 2, "an in-place hold became a journal one");
  hold_put (&t, 512, 512, &(struct hold_info){ .kind = HOLD_INPLACE }, a, 2,
            &err);
  cr_assert_eq (t.journal_count, 1, "a journal hold became an in-place one");
  hold_put (&t, 0, 1024, &(struct hold_info){ .kind = HOLD_JABSORBED }, a, 3,
            &err);
  cr_assert_eq (t.journal_count, 1, "a new block size starts afresh");
  hold_drop (&t, hold_find (&t, 0));
  cr_assert_eq (t.journal_count, 0);
  hold_drop (&t, h2);
  cr_assert_eq (t.count, 0);
  hold_fini (&t);
}

/* hold_maybe_in: true wherever an entry covers a byte, false where none
 * can (the granules are 4 KiB, hashed: a false true is allowed, a false
 * false is not).
 */
Test (hold, maybe_in)
{
  struct hold_table t;
  unsigned char a[8192] = { 0 };
  int err = 0;

  cr_assert_eq (hold_init (&t), 0);
  cr_assert_not (hold_maybe_in (&t, 0, 1 << 30), "empty");
  hold_put (&t, 1 << 20, 1024, &(struct hold_info){ 0 }, a, 1, &err);
  cr_assert (hold_maybe_in (&t, (1 << 20) + 1023, 1), "its last byte");
  cr_assert (hold_maybe_in (&t, 0, 2 << 20), "a range around it");
  cr_assert_not (hold_maybe_in (&t, (1 << 20) + 4096, 4096), "next 4K");
  cr_assert_not (hold_maybe_in (&t, (1 << 20) - 4096, 4096), "4K before");
  cr_assert_not (hold_maybe_in (&t, 1 << 20, 0), "no bytes");
  hold_put (&t, 1 << 20, 8192, &(struct hold_info){ 0 }, a, 2, &err);
  cr_assert (hold_maybe_in (&t, (1 << 20) + 4096, 1), "grown to 8 KiB");
  hold_drop (&t, hold_find (&t, 1 << 20));
  cr_assert_not (hold_maybe_in (&t, 0, 1 << 30), "dropped");
  hold_fini (&t);
}

/* Does every count by kind and class match a walk of the table? */
static void
assert_counts_walked (const struct hold_table *t)
{
  size_t walked[HOLD_KINDS][HOLD_CLASSES] = { { 0 } }, journal = 0;

  for (const struct hold *h = hold_oldest (t); h; h = hold_next (t, h))
    {
      walked[h->kind][h->cls]++;
      journal += h->kind != HOLD_INPLACE;
    }
  for (int k = 0; k < HOLD_KINDS; k++)
    for (int c = 0; c < HOLD_CLASSES; c++)
      cr_assert_eq (hold_count_of (t, (enum hold_kind)k, (enum tclass)c),
                    walked[k][c], "kind %d, class %d: counted %zu, held %zu", k,
                    c, t->by_kind[k][c], walked[k][c]);
  cr_assert_eq (t->journal_count, journal);
}

static void
assert_counts_zero (const struct hold_table *t)
{
  for (int k = 0; k < HOLD_KINDS; k++)
    for (int c = 0; c < HOLD_CLASSES; c++)
      cr_assert_eq (t->by_kind[k][c], 0, "kind %d, class %d", k, c);
  cr_assert_eq (t->journal_count, 0);
}

/* The counts by kind and class follow every entry through put,
 * replacement, a new block size, hold_redescribe, drop and fini.
 */
Test (hold, counts_by_kind_and_class)
{
  struct hold_table t;
  unsigned char a[4096] = { 0 };
  struct hold *h;
  int err = 0;

  cr_assert_eq (hold_init (&t), 0);
  assert_counts_zero (&t);
  /* One hold of each kind and class. */
  for (int k = 0; k < HOLD_KINDS; k++)
    for (int c = 0; c < HOLD_CLASSES; c++)
      cr_assert_not_null (
          hold_put (&t, (uint64_t)(k * HOLD_CLASSES + c) * 4096, 4096,
                    &(struct hold_info){ .kind = (enum hold_kind)k,
                                         .cls = (enum tclass)c },
                    a, 1, &err));
  for (int k = 0; k < HOLD_KINDS; k++)
    for (int c = 0; c < HOLD_CLASSES; c++)
      cr_assert_eq (hold_count_of (&t, (enum hold_kind)k, (enum tclass)c), 1);
  cr_assert_eq (t.journal_count, 12);

  /* New content of another kind and class moves the entry's count. */
  hold_put (&t, 0, 4096,
            &(struct hold_info){ .kind = HOLD_JPENDING, .cls = TCLASS_REAL }, a,
            2, &err);
  cr_assert_eq (hold_count_of (&t, HOLD_INPLACE, TCLASS_SAME), 0);
  cr_assert_eq (hold_count_of (&t, HOLD_JPENDING, TCLASS_REAL), 2);
  assert_counts_walked (&t);

  /* A pending block absorbed in place. */
  h = hold_find (&t, (uint64_t)(HOLD_JPENDING * HOLD_CLASSES) * 4096);
  hold_redescribe (&t, h, HOLD_JABSORBED, TCLASS_ATIME, 9);
  cr_assert_eq (h->kind, HOLD_JABSORBED);
  cr_assert_eq (h->cls, TCLASS_ATIME);
  cr_assert_eq (h->seq, 9);
  cr_assert_eq (hold_count_of (&t, HOLD_JPENDING, TCLASS_SAME), 0);
  cr_assert_eq (hold_count_of (&t, HOLD_JABSORBED, TCLASS_ATIME), 2);
  assert_counts_walked (&t);

  /* A new block size: the old entry is counted out, the new one in. */
  hold_put (&t, 4096, 1024,
            &(struct hold_info){ .kind = HOLD_JCOMMIT, .cls = TCLASS_TIME }, a,
            3, &err);
  cr_assert_eq (hold_count_of (&t, HOLD_INPLACE, TCLASS_ATIME), 0);
  cr_assert_eq (hold_count_of (&t, HOLD_JCOMMIT, TCLASS_TIME), 2);
  assert_counts_walked (&t);

  /* Drops, from the oldest on, to half; fini the rest. */
  for (int i = 0; i < 8; i++)
    {
      hold_drop (&t, hold_oldest (&t));
      assert_counts_walked (&t);
    }
  cr_assert_eq (t.count, 8);
  hold_fini (&t);
  assert_counts_zero (&t);
}

/* Many puts, replacements, redescriptions and drops in a pseudo-random
 * order: the counts match a walk after each.
 */
Test (hold, counts_survive_a_random_mix)
{
  struct hold_table t;
  unsigned char a[4096] = { 0 };
  uint64_t x = 88172645463325252ull;
  int err = 0;

  cr_assert_eq (hold_init (&t), 0);
  for (int i = 0; i < 3000; i++)
    {
      uint64_t off, r;
      struct hold *h;

      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      r = x;
      off = (r % 97) * 4096;
      h = hold_find (&t, off);
      if (h && (r >> 8) % 4 == 0)
        hold_drop (&t, h);
      else if (h && h->kind != HOLD_INPLACE && (r >> 8) % 4 == 1)
        hold_redescribe (&t, h, HOLD_JABSORBED + (r >> 12) % 2,
                         (enum tclass) ((r >> 16) % HOLD_CLASSES), 1);
      else
        cr_assert_not_null (
            hold_put (&t, off, (r >> 20) % 8 == 0 ? 1024 : 4096,
                      &(struct hold_info){
                          .kind = (enum hold_kind) ((r >> 24) % HOLD_KINDS),
                          .cls = (enum tclass) ((r >> 28) % HOLD_CLASSES) },
                      a, (uint64_t)i, &err));
      assert_counts_walked (&t);
    }
  cr_assert_gt (t.count, 0);
  hold_fini (&t);
  assert_counts_zero (&t);
}
