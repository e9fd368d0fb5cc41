/* SPDX-License-Identifier: BSD-3-Clause */
/* refs.c --- the engine's reference cache (refcache.h): what the store
 * has in the inode-table and superblock blocks, kept while it is known
 * to be true, read through it from the store, and told of what the
 * engine's writes did.  Locks: engine-impl.h (hold_lock).
 */
#include <errno.h>
#include <stdlib.h>

#include "engine-impl.h"

/* Is the cache still true?  Not after a failed sync (what the store
 * holds is then uncertain): empty it.
 */
static bool
refs_valid_locked (struct engine *e)
{
  uint64_t seq = backend_errseq (e->store);

  ASSERT_HOLD_LOCKED (e);
  if (seq == e->refs_errseq)
    return true;
  refcache_clear (e->refs);
  e->refs_errseq = seq;
  return false;
}

int
refs_read_unlocking (struct engine *e, char *ref, uint64_t off, uint64_t n,
                     uint32_t bs)
{
  struct refread rr = { .off = off, .end = off + n * bs };
  uint64_t i = 0;
  int r;

  ASSERT_HOLD_LOCKED (e);
  assert (n > 0 && engine_ref_block (e, off));
  assert (engine_ref_block (e, off + (n - 1) * bs));
  if (refs_valid_locked (e))
    while (i < n && refcache_get (e->refs, off + i * bs, bs, ref + i * bs))
      i++;
  if (i == n)
    return 0;
  /* A store that stopped answering stalls this write, not the hold
   * table.  What was read is the store's content unless a write of
   * these blocks began meanwhile: then it is neither used nor cached.
   * Only such a write spoils it, so that more blocks than the cache has
   * slots, or writes of other blocks meanwhile, do not make it again
   * and again.
   */
  LIST_INSERT_HEAD (&e->refreads, &rr, link);
  pthread_mutex_unlock (&e->hold_lock);
  r = backend_pread (e->store, ref, n * bs, off);
  pthread_mutex_lock (&e->hold_lock);
  LIST_REMOVE (&rr, link);
  if (r < 0)
    return r;
  if (rr.spoiled)
    return 1;
  if (refs_valid_locked (e))
    for (i = 0; i < n; i++)
      refcache_put (e->refs, off + i * bs, bs, ref + i * bs);
  return 0;
}

void
refs_forget_locked (struct engine *e, uint64_t off, uint64_t len)
{
  struct refread *rr;

  ASSERT_HOLD_LOCKED (e);
  refcache_forget (e->refs, off, len);
  LIST_FOREACH (rr, &e->refreads, link)
    if (rr->off < off + len && off < rr->end)
      rr->spoiled = true;
}

void
refs_written_locked (struct engine *e, const struct bio *v, size_t n, int r)
{
  ASSERT_HOLD_LOCKED (e);
  for (size_t i = 0; i < n; i++)
    if (v[i].op == BIO_WRITE)
      {
        assert (engine_ref_block (e, v[i].offset));
        if (r == 0 && v[i].result == 0)
          refcache_put (e->refs, v[i].offset, v[i].len, v[i].buf);
        else
          refs_forget_locked (e, v[i].offset, v[i].len);
      }
}

bool
refs_get_locked (struct engine *e, char *buf, uint64_t off, uint32_t bs)
{
  ASSERT_HOLD_LOCKED (e);
  assert (engine_ref_block (e, off));
  return refs_valid_locked (e) && refcache_get (e->refs, off, bs, buf);
}

void
refs_put_locked (struct engine *e, const char *buf, uint64_t off, uint32_t bs)
{
  ASSERT_HOLD_LOCKED (e);
  assert (engine_ref_block (e, off));
  if (refs_valid_locked (e))
    refcache_put (e->refs, off, bs, buf);
}
