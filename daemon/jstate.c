/* SPDX-License-Identifier: BSD-3-Clause */
/* jstate.c --- the state of the journals the engine follows, as the
 * write-back sees it: which pending journal holds may wait for their
 * commit (a function of the hold and the policy), the journal writes on
 * their way to the store without the hold lock, and the holds that
 * become dead when a journal tail is durable.  absorb.c records this
 * state, writeback.c reads it; this file calls neither.  Locks:
 * engine-impl.h.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "engine-impl.h"
#include "log.h"
#include "testpoint.h"

bool
jstate_policy_absorbs (enum policy policy, enum tclass cls)
{
  switch (policy)
    {
    case POLICY_ATIME:
      return cls <= TCLASS_ATIME;
    case POLICY_LAZY:
      return cls <= TCLASS_TIME;
    default:
      return false;
    }
}

/* h->cls of a pending hold is the class its block had when it arrived
 * (absorb.c): REAL for a revoke block or a logged copy the policy cannot
 * absorb, SAME for a block that is not a logged copy (a descriptor).
 * The transaction's class is decided again at its commit, against the
 * store as it is then: letting a block wait that the commit then finds
 * real costs nothing but its write before the commit block.
 */
bool
jstate_pending_may_wait (enum policy policy, const struct hold *h)
{
  assert (h->kind == HOLD_JPENDING);
  return jstate_policy_absorbs (policy, h->cls);
}

/* What absorbed journal hold h is in its transaction (seq): 1, a logged
 * copy, with *target the device offset of the block it logs and
 * *escaped whether its first word was escaped (escaped may be NULL); 0,
 * its descriptor; -1, unknown (the follower no longer says).
 */
int
jstate_absorbed_slot (const struct engine *e, const struct hold *h,
                      uint64_t *target, bool *escaped)
{
  const struct jlog *jl = engine_jlog (e, h->fs);
  const struct ext4_fs *fs;
  struct jslot slot;
  uint64_t lblk;

  if (!jl || h->kind != HOLD_JABSORBED)
    return -1;
  fs = &e->layout->fs[h->fs];
  lblk = layout_journal_lblk (fs, h->off);
  if (lblk == UINT64_MAX || jlog_lookup (jl, lblk, &slot) < 0
      || slot.seq != h->seq)
    return -1;
  if (slot.kind == JS_DESCRIPTOR)
    return 0;
  if (slot.kind != JS_DATA || !slot.written
      || slot.target >= fs->size / fs->block_size)
    return -1;
  *target = fs->start + slot.target * fs->block_size;
  if (escaped)
    *escaped = slot.escaped;
  return 1;
}

/* ---- in-place blocks written since ---------------------------------- */

void
jstate_placed_locked (struct engine *e, uint64_t off, uint64_t gen)
{
  ASSERT_HOLD_LOCKED (e);
  if (e->holds.journal_count == 0)
    {
      /* No absorbed hold needs any of it: the record starts afresh. */
      e->placed.n = 0;
      e->placed_short = false;
      return;
    }
  /* Bounded by the blocks written, not by the writes: compacted each
   * time it would grow past 64Ki entries.
   */
  if (e->placed.n >= 65536 && e->placed.n == e->placed.cap)
    jstate_placed_ready (e, 0);
  if (placed_vec_append (&e->placed, (struct placed){ off, gen }) < 0)
    {
      /* Short of the truth: until the record starts afresh, an absorbed
       * copy is not written in place at its deadline (the log goes).
       */
      e->placed.n = 0;
      e->placed_short = true;
    }
}

void
jstate_placed_range_locked (struct engine *e, uint64_t off, uint64_t len,
                            uint64_t gen)
{
  uint64_t target;

  ASSERT_HOLD_LOCKED (e);
  for (struct hold *h = hold_oldest (&e->holds); h;
       h = hold_next (&e->holds, h))
    if (h->kind == HOLD_JABSORBED
        && jstate_absorbed_slot (e, h, &target, NULL) == 1 && target >= off
        && target - off < len)
      jstate_placed_locked (e, target, gen);
}

static int
by_off_then_gen (const void *a, const void *b)
{
  const struct placed *x = a, *y = b;

  if (x->off != y->off)
    return (x->off > y->off) - (x->off < y->off);
  return (x->gen > y->gen) - (x->gen < y->gen);
}

void
jstate_placed_ready (struct engine *e, uint64_t min_gen)
{
  struct placed_vec *p = &e->placed;
  size_t k = 0;

  ASSERT_HOLD_LOCKED (e);
  if (p->n == 0)
    return;
  qsort (p->v, p->n, sizeof *p->v, by_off_then_gen);
  /* Per block the newest, and only if newer than some absorbed hold. */
  for (size_t i = 0; i < p->n; i++)
    if ((i + 1 == p->n || p->v[i + 1].off != p->v[i].off)
        && p->v[i].gen >= min_gen)
      p->v[k++] = p->v[i];
  p->n = k;
}

bool
jstate_placed_since (const struct engine *e, uint64_t off, uint64_t gen)
{
  const struct placed *v = e->placed.v;
  size_t lo = 0, hi = e->placed.n;

  while (lo < hi)
    {
      size_t mid = lo + (hi - lo) / 2;

      if (v[mid].off < off)
        lo = mid + 1;
      else
        hi = mid;
    }
  return lo < e->placed.n && v[lo].off == off && v[lo].gen >= gen;
}

/* ---- journal writes on their way ------------------------------------- */

static bool
jflight_touches (const struct engine *e, uint64_t off, uint64_t end)
{
  const struct jflight *f;

  LIST_FOREACH (f, &e->jflights, link)
    if (f->off < end && off < f->end)
      return true;
  return false;
}

void
jstate_wait_passes_locked (struct engine *e, uint64_t off, uint64_t len)
{
  const uint64_t end = len > UINT64_MAX - off ? UINT64_MAX : off + len;

  ASSERT_HOLD_LOCKED (e);
  pthread_mutex_lock (&e->jflight_lock);
  while (jflight_touches (e, off, end))
    {
      TEST_POINT (TP_PASS_WAIT);
      pthread_cond_wait (&e->jflight_cond, &e->jflight_lock);
    }
  pthread_mutex_unlock (&e->jflight_lock);
}

bool
jstate_wait_passes_unlocking (struct engine *e, uint64_t off, uint64_t len)
{
  const uint64_t end = len > UINT64_MAX - off ? UINT64_MAX : off + len;
  bool busy;

  ASSERT_HOLD_LOCKED (e);
  pthread_mutex_lock (&e->jflight_lock);
  busy = jflight_touches (e, off, end);
  pthread_mutex_unlock (&e->jflight_lock);
  if (!busy)
    return false;
  pthread_mutex_unlock (&e->hold_lock);
  pthread_mutex_lock (&e->jflight_lock);
  while (jflight_touches (e, off, end))
    {
      TEST_POINT (TP_PASS_WAIT);
      pthread_cond_wait (&e->jflight_cond, &e->jflight_lock);
    }
  pthread_mutex_unlock (&e->jflight_lock);
  pthread_mutex_lock (&e->hold_lock);
  return true;
}

void
jstate_pass_begin_locked (struct engine *e, struct jflight *f, uint64_t off,
                          uint64_t end)
{
  ASSERT_HOLD_LOCKED (e);
  assert (off < end);
  *f = (struct jflight){ .off = off, .end = end };
  pthread_mutex_lock (&e->jflight_lock);
  LIST_INSERT_HEAD (&e->jflights, f, link);
  pthread_mutex_unlock (&e->jflight_lock);
}

void
jstate_pass_end (struct engine *e, struct jflight *f)
{
  pthread_mutex_lock (&e->jflight_lock);
  LIST_REMOVE (f, link);
  pthread_cond_broadcast (&e->jflight_cond);
  pthread_mutex_unlock (&e->jflight_lock);
}

/* ---- dead holds and the durable tail ------------------------------- */

/* The durable tail of filesystem fsi's journal moved: absorbed journal
 * holds behind it are dead.  Recovery never replays them, so they are
 * discarded at once (a raw read of that journal block then returns what
 * the store has there, a log block the filesystem no longer uses):
 * written back they would only cost the store writes the kernel's own
 * lazytime never sends.
 */
void
jstate_discard_dead_locked (struct engine *e, size_t fsi)
{
  const struct jlog *jl = engine_jlog (e, fsi);
  struct hold *h, *next;

  ASSERT_HOLD_LOCKED (e);
  if (!jl)
    return;
  for (h = hold_oldest (&e->holds); h; h = next)
    {
      next = hold_next (&e->holds, h);
      if (h->fs != fsi || (h->kind != HOLD_JABSORBED && h->kind != HOLD_JCOMMIT)
          || !jlog_behind_tail (jl, h->seq))
        continue;
      STAT_INC (e->fst[fsi].discarded);
      hold_drop (&e->holds, h);
    }
  holds_changed (e);
}

void
jstate_flushed_locked (struct engine *e)
{
  ASSERT_HOLD_LOCKED (e);
  if (!atomic_exchange (&e->tails_pending, false) || !e->jl)
    return;
  for (size_t i = 0; i < e->layout->n_fs; i++)
    if (e->jl[i] && jlog_flushed (e->jl[i]))
      jstate_discard_dead_locked (e, i);
}

void
jstate_written_back_locked (struct engine *e)
{
  ASSERT_HOLD_LOCKED (e);
  for (size_t i = 0; e->jl && i < e->layout->n_fs; i++)
    if (e->jl[i] && jlog_absorbed_to_live (e->jl[i]) < 0)
      log_notice ("journal at offset %" PRIu64 ": out of memory: "
                  "no more absorption until the log is empty",
                  e->layout->fs[i].start);
}
