/* SPDX-License-Identifier: BSD-3-Clause */
/* test-vector.c --- DEFINE_VECTOR: append, reserve and reset, growth from
 * 16 by doubling with the content kept, and an impossible reserve that
 * fails with -ENOMEM and leaves the vector as it was.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "vector.h"

DEFINE_VECTOR (ints, int)

struct rec
{
  uint64_t off;
  char tag[24];
};

DEFINE_VECTOR (recs, struct rec)

/* The compiler would otherwise follow a constant huge extra into
 * realloc and warn about the allocation that the check prevents.
 */
static size_t
opaque (size_t x)
{
  volatile size_t v = x;

  return v;
}

Test (vector, zero_is_empty)
{
  struct ints a = { 0 };

  cr_assert_null (a.v);
  cr_assert_eq (a.n, 0);
  cr_assert_eq (a.cap, 0);
  /* Nothing to make room for: no storage is allocated. */
  cr_assert_eq (ints_reserve (&a, 0), 0);
  cr_assert_null (a.v);
  cr_assert_eq (a.cap, 0);
  ints_reset (&a);
  cr_assert_null (a.v);
}

Test (vector, append_grows_from_16_by_doubling)
{
  struct ints a = { 0 };
  size_t want_cap = 16;

  for (int i = 0; i < 1000; i++)
    {
      cr_assert_eq (ints_append (&a, i * 7 + 1), 0);
      cr_assert_eq (a.n, (size_t)i + 1);
      if (a.n > want_cap)
        want_cap *= 2;
      cr_assert_eq (a.cap, want_cap, "after %zu appends cap is %zu, not %zu",
                    a.n, a.cap, want_cap);
    }
  cr_assert_eq (a.cap, 1024);
  /* Every reallocation kept what was there before it. */
  for (int i = 0; i < 1000; i++)
    cr_assert_eq (a.v[i], i * 7 + 1, "element %d", i);
  ints_reset (&a);
  cr_assert_null (a.v);
  cr_assert_eq (a.n, 0);
  cr_assert_eq (a.cap, 0);
}

Test (vector, append_copies_the_element)
{
  struct recs a = { 0 };
  struct rec r = { .off = 4096 };

  strcpy (r.tag, "first");
  cr_assert_eq (recs_append (&a, r), 0);
  r.off = 8192;
  strcpy (r.tag, "second");
  cr_assert_eq (recs_append (&a, r), 0);
  strcpy (r.tag, "changed");
  cr_assert_eq (a.n, 2);
  cr_assert_eq (a.v[0].off, 4096);
  cr_assert_str_eq (a.v[0].tag, "first");
  cr_assert_eq (a.v[1].off, 8192);
  cr_assert_str_eq (a.v[1].tag, "second");
  recs_reset (&a);
}

Test (vector, reserve_makes_room_without_adding)
{
  struct ints a = { 0 };
  int *before;

  cr_assert_eq (ints_reserve (&a, 5), 0);
  cr_assert_not_null (a.v);
  cr_assert_eq (a.n, 0);
  cr_assert_eq (a.cap, 16);

  /* Room for more than double: the capacity doubles until it fits. */
  cr_assert_eq (ints_reserve (&a, 100), 0);
  cr_assert_eq (a.n, 0);
  cr_assert_eq (a.cap, 128);

  for (int i = 0; i < 100; i++)
    cr_assert_eq (ints_append (&a, -i), 0);
  cr_assert_eq (a.cap, 128);

  /* Room that is already there: no reallocation. */
  before = a.v;
  cr_assert_eq (ints_reserve (&a, 28), 0);
  cr_assert_eq (a.v, before);
  cr_assert_eq (a.cap, 128);

  /* One more than there is room for: doubles, content kept. */
  cr_assert_eq (ints_reserve (&a, 29), 0);
  cr_assert_eq (a.cap, 256);
  cr_assert_eq (a.n, 100);
  for (int i = 0; i < 100; i++)
    cr_assert_eq (a.v[i], -i, "element %d", i);
  ints_reset (&a);
}

Test (vector, reserve_overflow_is_enomem_and_changes_nothing)
{
  struct recs a = { 0 };
  struct rec r = { .off = 1 };
  struct rec *v;
  size_t cap, max = SIZE_MAX / sizeof (struct rec);

  /* Empty vector: more elements than size_t can count in bytes. */
  cr_assert_eq (recs_reserve (&a, opaque (SIZE_MAX)), -ENOMEM);
  cr_assert_eq (recs_reserve (&a, opaque (max + 1)), -ENOMEM);
  cr_assert_null (a.v);
  cr_assert_eq (a.n, 0);
  cr_assert_eq (a.cap, 0);

  for (int i = 0; i < 20; i++)
    {
      r.off = i;
      cr_assert_eq (recs_append (&a, r), 0);
    }
  v = a.v;
  cap = a.cap;
  /* n + extra elements would not fit in size_t bytes. */
  cr_assert_eq (recs_reserve (&a, opaque (max - a.n + 1)), -ENOMEM);
  cr_assert_eq (recs_reserve (&a, opaque (SIZE_MAX - 5)), -ENOMEM);
  cr_assert_eq (recs_reserve (&a, opaque (SIZE_MAX)), -ENOMEM);
  cr_assert_eq (a.v, v);
  cr_assert_eq (a.n, 20);
  cr_assert_eq (a.cap, cap);
  for (int i = 0; i < 20; i++)
    cr_assert_eq (a.v[i].off, (uint64_t)i);

  /* The vector still works after the refusals. */
  cr_assert_eq (recs_append (&a, r), 0);
  cr_assert_eq (a.n, 21);
  recs_reset (&a);
}

Test (vector, reset_then_reuse_and_take_ownership)
{
  struct ints a = { 0 };
  int *taken;

  for (int i = 0; i < 40; i++)
    cr_assert_eq (ints_append (&a, i), 0);
  ints_reset (&a);
  cr_assert_eq (a.n, 0);
  cr_assert_eq (a.cap, 0);
  cr_assert_null (a.v);

  cr_assert_eq (ints_append (&a, 42), 0);
  cr_assert_eq (a.n, 1);
  cr_assert_eq (a.cap, 16);
  cr_assert_eq (a.v[0], 42);

  /* The caller may take v and zero the struct. */
  taken = a.v;
  memset (&a, 0, sizeof a);
  cr_assert_eq (taken[0], 42);
  cr_assert_eq (ints_append (&a, 7), 0);
  cr_assert_neq (a.v, taken);
  free (taken);
  ints_reset (&a);
}
