/* SPDX-License-Identifier: BSD-3-Clause */
/* test-refcache.c --- the reference cache: hits, misses, replacement in
 * a slot, forgetting a range, emptying.
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "refcache.h"

Test (refcache, put_get_forget_clear)
{
  struct refcache *c;
  char a[4096], b[4096], got[4096];
  uint64_t hits, misses;

  memset (a, 'a', sizeof a);
  memset (b, 'b', sizeof b);
  cr_assert_eq (refcache_new (3, &c), -EINVAL, "slots: a power of two");
  cr_assert_eq (refcache_new (4, &c), 0);
  cr_assert_not (refcache_get (c, 8192, 4096, got), "empty");

  refcache_put (c, 8192, 4096, a);
  cr_assert (refcache_get (c, 8192, 4096, got));
  cr_assert_eq (memcmp (got, a, 4096), 0);
  cr_assert_not (refcache_get (c, 8192, 1024, got), "another length");
  cr_assert_not (refcache_get (c, 12288, 4096, got), "another block");

  /* Block 2 + 4 shares block 2's slot and replaces it. */
  refcache_put (c, (2 + 4) * 4096, 4096, b);
  cr_assert_not (refcache_get (c, 8192, 4096, got));
  cr_assert (refcache_get (c, 6 * 4096, 4096, got));
  cr_assert_eq (memcmp (got, b, 4096), 0);

  /* A put of new content replaces the old. */
  refcache_put (c, 6 * 4096, 4096, a);
  cr_assert (refcache_get (c, 6 * 4096, 4096, got));
  cr_assert_eq (memcmp (got, a, 4096), 0);

  /* forget: any overlap, even one byte. */
  refcache_put (c, 0, 4096, a);
  refcache_forget (c, 4095, 1);
  cr_assert_not (refcache_get (c, 0, 4096, got));
  cr_assert (refcache_get (c, 6 * 4096, 4096, got), "outside the range");
  refcache_forget (c, 7 * 4096, 4096);
  cr_assert (refcache_get (c, 6 * 4096, 4096, got), "just after the block");

  refcache_put (c, 4096, 4096, b);
  refcache_clear (c);
  cr_assert_not (refcache_get (c, 4096, 4096, got));
  cr_assert_not (refcache_get (c, 6 * 4096, 4096, got));

  refcache_counts (c, &hits, &misses);
  cr_assert_eq (hits, 5);
  cr_assert_eq (misses, 7);
  refcache_free (c);
}

/* A slot's buffer grows when a longer block takes it. */
Test (refcache, lengths)
{
  struct refcache *c;
  char small[1024], big[8192], got[8192];

  memset (small, 's', sizeof small);
  memset (big, 'B', sizeof big);
  cr_assert_eq (refcache_new (1, &c), 0);
  refcache_put (c, 0, 1024, small);
  refcache_put (c, 8192, 8192, big);
  cr_assert (refcache_get (c, 8192, 8192, got));
  cr_assert_eq (memcmp (got, big, 8192), 0);
  cr_assert_not (refcache_get (c, 0, 1024, got));
  refcache_put (c, 0, 1024, small);
  cr_assert (refcache_get (c, 0, 1024, got));
  cr_assert_eq (memcmp (got, small, 1024), 0);
  refcache_free (c);
}

/* A forget looks only at the slots a block overlapping the range can
 * be in, for each block size cached: blocks not aligned to their size
 * (a filesystem at an odd offset) and two sizes at once are forgotten
 * exactly when they overlap the range.
 */
Test (refcache, forget_unaligned_sizes)
{
  struct refcache *c;
  char a[4096], got[4096];
  const uint64_t base = 32256; /* a partition at sector 63 */

  memset (a, 'a', sizeof a);
  cr_assert_eq (refcache_new (1024, &c), 0);
  for (uint64_t i = 0; i < 8; i++)
    refcache_put (c, base + i * 4096, 4096, a);
  refcache_put (c, 1024 * 1024 + 1024, 1024, a);
  refcache_put (c, 1024 * 1024 + 2048, 1024, a);

  /* The last byte of block 2 and the first of block 3. */
  refcache_forget (c, base + 3 * 4096 - 1, 2);
  for (uint64_t i = 0; i < 8; i++)
    cr_assert_eq (refcache_get (c, base + i * 4096, 4096, got),
                  i != 2 && i != 3, "block %llu", (unsigned long long)i);
  /* A range inside the first 1 KiB block. */
  refcache_forget (c, 1024 * 1024 + 1500, 10);
  cr_assert_not (refcache_get (c, 1024 * 1024 + 1024, 1024, got));
  cr_assert (refcache_get (c, 1024 * 1024 + 2048, 1024, got));
  /* A range larger than the cache looks at every slot. */
  refcache_forget (c, 0, 1ull << 40);
  cr_assert_not (refcache_get (c, base, 4096, got));
  cr_assert_not (refcache_get (c, 1024 * 1024 + 2048, 1024, got));
  refcache_free (c);
}
