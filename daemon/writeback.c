/* SPDX-License-Identifier: BSD-3-Clause */
/* writeback.c --- the only place holds become store writes: which holds
 * each trigger selects, the write-back batch, the memory cap and the
 * deadline thread (locks: engine-impl.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"
#include "log.h"

/* ---- predicates ------------------------------------------------------ */

bool
writeback_pred_all (struct engine *e, const struct hold *h, void *arg)
{
  (void)e;
  (void)h;
  (void)arg;
  return true;
}

static bool
is_journal_hold (const struct hold *h)
{
  return h->kind != HOLD_INPLACE;
}

/* Journal holds are part of the log (dead ones are discarded): each must
 * reach the store before any journal write after it.
 */
bool
writeback_pred_ordered (struct engine *e, const struct hold *h, void *arg)
{
  (void)e;
  (void)arg;
  return is_journal_hold (h);
}

/* Which holds a FLUSH must write back under the policy: a choice made
 * on the hold's kind and class alone (writeback_flush_takes_locked
 * counts on it).
 */
bool
writeback_pred_flush (struct engine *e, const struct hold *h, void *arg)
{
  (void)arg;
  /* Journal holds exist only under atime/lazy.  An absorbed
   * transaction is of a class the policy keeps; a block of a
   * transaction whose commit has not come can wait for it (no commit,
   * nothing replayed), unless the transaction is already bound to be
   * real: then it rides this flush rather than needing one of its own
   * before the commit.  Anything else in the journal must go.
   */
  if (h->kind == HOLD_JABSORBED || h->kind == HOLD_JCOMMIT)
    return false;
  if (h->kind == HOLD_JPENDING)
    return !jstate_pending_may_wait (e->cfg.policy, h);
  switch (e->cfg.policy)
    {
    case POLICY_ATIME:
      return h->cls != TCLASS_ATIME;
    case POLICY_LAZY:
      return h->cls != TCLASS_ATIME && h->cls != TCLASS_TIME;
    default:
      return true;
    }
}

size_t
writeback_flush_takes_locked (struct engine *e)
{
  struct hold probe = { 0 };
  size_t n = 0;

  ASSERT_HOLD_LOCKED (e);
  for (int k = 0; k < HOLD_KINDS; k++)
    for (int c = 0; c < HOLD_CLASSES; c++)
      {
        size_t m = e->holds.by_kind[k][c];

        if (m == 0)
          continue;
        probe.kind = (enum hold_kind)k;
        probe.cls = (enum tclass)c;
        if (writeback_pred_flush (e, &probe, NULL))
          n += m;
      }
  return n;
}

/* A deadline sweep writes back, in one batch, every hold due within
 * the sweep interval from now: a quarter of max-age, at most a minute
 * (writing a hold back sooner is always allowed).  Holds made over a
 * scan then expire together instead of in one batch each.
 */
static uint64_t
sweep_ns (const struct engine *e)
{
  const uint64_t quarter = e->cfg.max_age_ns / 4;

  return quarter < 60000000000ull ? quarter : 60000000000ull;
}

static int
by_value (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

  return (x > y) - (x < y);
}

bool
writeback_pred_expired (struct engine *e, const struct hold *h, void *arg)
{
  const struct wb_sweep *d = arg;

  if (h->met)
    return false;
  if (d->meet && (h->kind == HOLD_JABSORBED || h->kind == HOLD_JCOMMIT))
    return false;
  if (h->kind == HOLD_INPLACE && d->n > 0
      && bsearch (&h->off, d->also, d->n, sizeof *d->also, by_value))
    return true;
  return h->first_ns + e->cfg.max_age_ns <= d->now + sweep_ns (e);
}

/* Holds first made no later than *arg, a monotonic time: the memory
 * cap's choice (cap_cutoff_locked), the oldest holds.
 */
bool
writeback_pred_over_cap (struct engine *e, const struct hold *h, void *arg)
{
  const uint64_t *cutoff = arg;

  (void)e;
  return h->first_ns <= *cutoff;
}

static bool
overlaps (const struct hold *h, const struct wb_range *r)
{
  return h->off < r->off + r->len && h->off + h->len > r->off;
}

/* Holds under a zero or trim that it covers only partly (whole ones
 * are dropped: the new request wins), and journal holds anywhere under
 * it: the log they belong to goes back whole.
 */
bool
writeback_pred_range (struct engine *e, const struct hold *h, void *arg)
{
  const struct wb_range *r = arg;

  (void)e;
  if (!overlaps (h, r))
    return false;
  return is_journal_hold (h) || h->off < r->off
         || h->off + h->len > r->off + r->len;
}

/* ---- the batch ------------------------------------------------------- */

/* The holds pred selects, oldest first, into sel (room for most of
 * them, and every journal hold besides).  The walk stops at the most-th:
 * pred selects no more than most.  If any is a journal hold, every
 * journal hold joins them, in age order.  pred is asked once per hold
 * walked.  *count is the number selected.  Returns 0 or -ENOMEM.
 */
static int
select_holds (struct engine *e, hold_pred pred, void *arg, size_t most,
              struct hold **sel, size_t *count, bool *journal)
{
  struct hold **first, *h;
  size_t n = 0, k = 0;

  ASSERT_HOLD_LOCKED (e);
  assert (e->holds.journal_count <= e->holds.count);
  assert (e->holds.journal_count == 0 || e->cfg.policy != POLICY_STRICT);
  *journal = false;
  for (h = hold_oldest (&e->holds); h && n < most; h = hold_next (&e->holds, h))
    if (pred (e, h, arg))
      {
        sel[n++] = h;
        *journal |= is_journal_hold (h);
      }
  /* A FLUSH's walk ends only at its last hold: it found them all. */
  assert (n == most || pred != writeback_pred_flush);
  *count = n;
  if (!*journal)
    return 0;
  first = malloc (n * sizeof *first);
  if (!first)
    return -ENOMEM;
  memcpy (first, sel, n * sizeof *first);
  *count = 0;
  for (h = hold_oldest (&e->holds); h; h = hold_next (&e->holds, h))
    {
      bool chosen = k < n && first[k] == h;

      k += chosen;
      if (chosen || is_journal_hold (h))
        sel[(*count)++] = h;
    }
  free (first);
  return 0;
}

/* At most how many holds pred selects: a FLUSH's from the table's
 * counts by kind and class, so that a FLUSH with nothing to write back
 * walks none of the holds it keeps; any other's, every hold.
 */
static size_t
selectable_locked (struct engine *e, hold_pred pred)
{
  if (pred == writeback_pred_flush)
    return writeback_flush_takes_locked (e);
  return e->holds.count;
}

/* The holds pred selects (select_holds), in *sel, a new array, NULL
 * when pred can select none: then nothing is walked.
 */
static int
select_locked (struct engine *e, hold_pred pred, void *arg, struct hold ***sel,
               size_t *count, bool *journal)
{
  size_t most = selectable_locked (e, pred), room;

  *sel = NULL;
  *count = 0;
  *journal = false;
  if (most == 0)
    return 0;
  room = most + e->holds.journal_count;
  if (room > e->holds.count)
    room = e->holds.count;
  *sel = malloc (room * sizeof **sel);
  if (!*sel)
    return -ENOMEM;
  return select_holds (e, pred, arg, most, *sel, count, journal);
}

/* A hold as a batch writes it: its own data under the lock, a copy in
 * a journal flight.
 */
struct wb_block
{
  uint64_t off, len, gen;
  enum hold_kind kind;
  char *data;
};

/* Write the copies c[0..n) whose commit-ness is commits, then flush
 * (with no commit block, nothing).
 */
static int
wb_phase (struct engine *e, const struct wb_block *c, size_t n, bool commits,
          struct bio *bios, enum wb_trigger why)
{
  size_t nb = 0;

  for (size_t i = 0; i < n; i++)
    if ((c[i].kind == HOLD_JCOMMIT) == commits)
      bios[nb++] = (struct bio){
        .op = BIO_WRITE, .buf = c[i].data, .offset = c[i].off, .len = c[i].len
      };
  if (commits && nb == 0)
    return 0;
  bios[nb++] = (struct bio){ .op = BIO_FLUSH };
  return store_submit (e, bios, nb, why);
}

/* What a write-back of sel[0..n) with result r did to the in-place
 * blocks in the store, for the reference cache: on success they hold
 * the held content, on failure nobody knows.
 */
static void
written_in_place (struct engine *e, struct hold **sel, size_t n, int r)
{
  for (size_t i = 0; i < n; i++)
    if (sel[i]->kind == HOLD_INPLACE)
      {
        if (r == 0)
          {
            refcache_put (e->refs, sel[i]->off, sel[i]->len, sel[i]->data);
            jstate_placed_locked (e, sel[i]->off, sel[i]->gen);
          }
        else
          refs_forget_locked (e, sel[i]->off, sel[i]->len);
      }
}

/* Write back the holds that pred selects, oldest first, and make them
 * durable; drop them once they are.  With no hold selected, flush only
 * when always_flush.  The backend fails a batch's flush if any sync
 * failed while the batch ran, here or in another thread (backend.h):
 * that sync may have taken the batch's error.  So a hold is dropped
 * only when its own write-back is known good.
 *
 * Journal holds go all together or not at all, in two batches: every
 * block but the commit blocks, a flush, then the commit blocks and a
 * flush, so that no commit is durable before what it commits.  They are
 * then part of the durable log, and their transactions become live.
 */
static int
writeback_sel_locked (struct engine *e, struct hold **sel, size_t n,
                      bool journal, enum wb_trigger why, bool always_flush)
{
  struct bio *bios = NULL;
  struct wb_block *c = NULL;
  int r = 0;

  ASSERT_HOLD_LOCKED (e);
  if (n == 0)
    {
      free (sel);
      return always_flush ? store_flush (e, why) : 0;
    }
  c = calloc (n, sizeof *c);
  if (journal)
    jstate_wait_passes_locked (e, 0, UINT64_MAX);
  bios = calloc (n + 2, sizeof *bios);
  /* Nothing of them is on its way (writeback_locked waited): what it
   * writes lands after every other write of them, and changes what the
   * store has under the reference cache.
   */
  e->wb_write_seq++;
  for (size_t i = 0; i < n; i++)
    if (sel[i]->kind == HOLD_INPLACE)
      refs_forget_locked (e, sel[i]->off, sel[i]->len);
  if (c)
    for (size_t i = 0; i < n; i++)
      c[i] = (struct wb_block){ sel[i]->off, sel[i]->len, sel[i]->gen,
                                sel[i]->kind, (char *)sel[i]->data };
  r = bios && c ? wb_phase (e, c, n, false, bios, why) : -ENOMEM;
  if (r == 0)
    r = wb_phase (e, c, n, true, bios, why);
  written_in_place (e, sel, n, r);
  if (r == 0)
    {
      engine_note_writeback_ok (e);
      STAT_INC (e->fst[e->layout->n_fs].writeback_batches);
      for (size_t i = 0; i < n; i++)
        {
          STAT_INC (hold_stats (e, sel[i])->writeback[why]);
          hold_drop (&e->holds, sel[i]);
        }
      holds_changed (e);
      if (journal)
        jstate_written_back_locked (e);
    }
  else
    engine_note_writeback_error (e);
  free (c);
  free (bios);
  free (sel);
  return r;
}

static bool wflights_touch (struct engine *e, const struct bio *v, size_t n);
static void wflights_wait (struct engine *e, const struct bio *v, size_t n);

/* Does a write on its way touch a block of sel[0..n)?  Then wait until
 * none touches that block, with the hold lock released meanwhile (sel is
 * then stale).  Nothing is allocated: a failed allocation must never
 * read as "nothing on its way", or an older held copy could land after
 * a newer write.
 */
static bool
sel_busy_unlocking (struct engine *e, struct hold **sel, size_t n)
{
  for (size_t i = 0; i < n; i++)
    {
      const struct bio b
          = { .op = BIO_WRITE, .offset = sel[i]->off, .len = sel[i]->len };
      bool busy;

      pthread_mutex_lock (&e->wflight_lock);
      busy = wflights_touch (e, &b, 1);
      pthread_mutex_unlock (&e->wflight_lock);
      if (busy)
        {
          pthread_mutex_unlock (&e->hold_lock);
          wflights_wait (e, &b, 1);
          pthread_mutex_lock (&e->hold_lock);
          return true;
        }
    }
  return false;
}

int
writeback_locked (struct engine *e, hold_pred pred, void *arg,
                  enum wb_trigger why, bool always_flush)
{
  struct hold **sel = NULL;
  bool journal = false;
  size_t n = 0;
  int r = 0;

  ASSERT_HOLD_LOCKED (e);
  for (;;)
    {
      writeback_journal_idle_locked (e);
      r = select_locked (e, pred, arg, &sel, &n, &journal);
      if (r < 0)
        {
          free (sel);
          return r;
        }
      /* A write of one of them on its way (an older copy, or a real
       * write that drops them once it lands) lands first: wait for it,
       * the hold lock released, and select again.
       */
      if (!sel_busy_unlocking (e, sel, n))
        return writeback_sel_locked (e, sel, n, journal, why, always_flush);
      free (sel);
      sel = NULL;
      n = 0;
    }
}

static int flight_run_locked (struct engine *e, hold_pred pred, void *arg,
                              enum wb_trigger why, bool always_flush);

int
writeback_journal_unlocking (struct engine *e, enum wb_trigger why)
{
  ASSERT_HOLD_LOCKED (e);
  return flight_run_locked (e, writeback_pred_ordered, NULL, why, false);
}

/* Past the cap, the oldest holds go down to the low-water mark, three
 * quarters of the cap, so that the next writes do not each cost a batch:
 * the first-hold time up to which the oldest holds add up to what must
 * go (the age list is in first-hold order).  Returns false if the cap
 * holds.
 */
static bool
cap_cutoff_locked (struct engine *e, uint64_t *cutoff)
{
  uint64_t excess;

  ASSERT_HOLD_LOCKED (e);
  if (e->holds.bytes <= e->cfg.max_held)
    return false;
  excess = e->holds.bytes - (e->cfg.max_held - e->cfg.max_held / 4);
  *cutoff = UINT64_MAX;
  for (struct hold *h = hold_oldest (&e->holds); h;
       h = hold_next (&e->holds, h))
    {
      if (h->len >= excess)
        {
          *cutoff = h->first_ns;
          break;
        }
      excess -= h->len;
    }
  return true;
}

int
writeback_cap_unlocking (struct engine *e)
{
  uint64_t cutoff;

  if (!cap_cutoff_locked (e, &cutoff))
    return 0;
  return flight_run_locked (e, writeback_pred_over_cap, &cutoff, WB_MEMORY,
                            false);
}

int
writeback_report (struct engine *e, int r)
{
  int seen = backend_errseq_advance (e->store, &e->flush_errseq);

  return seen < 0 ? seen : r;
}

/* The end of a FLUSH (result r) that a journal tail waited for, the
 * journal state its own throughout.  Journal tails count only after a
 * FLUSH that reported no error: one met by another sync may be the
 * tail's write-back.
 */
static int
flushed_locked (struct engine *e, int r)
{
  ASSERT_HOLD_LOCKED (e);
  r = writeback_report (e, r);
  if (r == 0)
    jstate_flushed_locked (e);
  return r;
}

/* A write-back whose store I/O runs without the hold lock (a FLUSH, the
 * deadline thread, the last client leaving, an explicit or shutdown
 * write-back), from the copies of its holds to its end, in the engine's
 * list (e->flights).
 */
struct flight
{
  uint64_t no;
  TAILQ_ENTRY (flight) link;
};

/* Its writes, copies of held content, while they are on their way (in
 * e->wflights).
 */
struct wflight
{
  struct bio *v;
  size_t n;
  char *buf;
  LIST_ENTRY (wflight) link;
};

static void
flight_begin_locked (struct engine *e, struct flight *f)
{
  ASSERT_HOLD_LOCKED (e);
  f->no = ++e->flight_no;
  TAILQ_INSERT_TAIL (&e->flights, f, link);
}

static void
flight_end_locked (struct engine *e, struct flight *f)
{
  ASSERT_HOLD_LOCKED (e);
  TAILQ_REMOVE (&e->flights, f, link);
  pthread_cond_broadcast (&e->flight_cond);
}

/* Wait until every flight numbered up to no has ended: its sync's error,
 * if any, is then in the store's error sequence, and a failure of its
 * writes in e->flight_failures.
 */
static void
flight_wait_locked (struct engine *e, uint64_t no)
{
  ASSERT_HOLD_LOCKED (e);
  while (!TAILQ_EMPTY (&e->flights) && TAILQ_FIRST (&e->flights)->no <= no)
    pthread_cond_wait (&e->flight_cond, &e->hold_lock);
}

static bool
is_write (const struct bio *b)
{
  return b->op == BIO_WRITE || b->op == BIO_ZERO || b->op == BIO_TRIM;
}

/* Does a write of v[0..n) touch a block that w writes? */
static bool
wflight_touches (const struct wflight *w, const struct bio *v, size_t n)
{
  for (size_t i = 0; i < w->n; i++)
    for (size_t j = 0; j < n; j++)
      if (is_write (&v[j]) && w->v[i].offset < v[j].offset + v[j].len
          && v[j].offset < w->v[i].offset + w->v[i].len)
        return true;
  return false;
}

static bool
wflights_touch (struct engine *e, const struct bio *v, size_t n)
{
  struct wflight *w;

  LIST_FOREACH (w, &e->wflights, link)
    if (wflight_touches (w, v, n))
      return true;
  return false;
}

/* wflight_lock not held. */
static void
wflights_wait (struct engine *e, const struct bio *v, size_t n)
{
  pthread_mutex_lock (&e->wflight_lock);
  while (wflights_touch (e, v, n))
    pthread_cond_wait (&e->wflight_cond, &e->wflight_lock);
  pthread_mutex_unlock (&e->wflight_lock);
}

static void
wflight_end (struct engine *e, struct wflight *w)
{
  pthread_mutex_lock (&e->wflight_lock);
  LIST_REMOVE (w, link);
  pthread_cond_broadcast (&e->wflight_cond);
  pthread_mutex_unlock (&e->wflight_lock);
}

static void
wflight_free (struct wflight *w)
{
  free (w->v);
  free (w->buf);
  w->v = NULL;
  w->buf = NULL;
  w->n = 0;
}

bool
writeback_busy_locked (struct engine *e, uint64_t off, uint64_t len)
{
  const struct bio b = { .op = BIO_WRITE, .offset = off, .len = len };
  bool busy;

  ASSERT_HOLD_LOCKED (e);
  pthread_mutex_lock (&e->wflight_lock);
  busy = wflights_touch (e, &b, 1);
  pthread_mutex_unlock (&e->wflight_lock);
  return busy;
}

bool
writeback_wait_range_unlocking (struct engine *e, uint64_t off, uint64_t len)
{
  const struct bio b = { .op = BIO_WRITE, .offset = off, .len = len };

  if (!writeback_busy_locked (e, off, len))
    return false;
  pthread_mutex_unlock (&e->hold_lock);
  wflights_wait (e, &b, 1);
  pthread_mutex_lock (&e->hold_lock);
  return true;
}

struct wflight *
writeback_claim_locked (struct engine *e, const struct bio *v, size_t n)
{
  struct wflight *w = calloc (1, sizeof *w);

  ASSERT_HOLD_LOCKED (e);
  if (w)
    w->v = malloc (n * sizeof *w->v);
  if (!w || !w->v)
    {
      free (w);
      return NULL;
    }
  memcpy (w->v, v, n * sizeof *v);
  w->n = n;
  pthread_mutex_lock (&e->wflight_lock);
  assert (!wflights_touch (e, v, n));
  LIST_INSERT_HEAD (&e->wflights, w, link);
  pthread_mutex_unlock (&e->wflight_lock);
  e->wb_write_seq++;
  for (size_t i = 0; i < n; i++)
    refs_forget_locked (e, v[i].offset, v[i].len);
  return w;
}

void
writeback_unclaim (struct engine *e, struct wflight *w)
{
  wflight_end (e, w);
  wflight_free (w);
  free (w);
}

/* A hold a flight selected, to be dropped once durable. */
struct written
{
  uint64_t off, len, gen;
  bool wrote; /* by this flight, not by one before it */
};

/* Copy the holds flight f selected, sel[0..n), into w, and note them
 * in done (hold lock held).  A hold whose content an earlier flight has
 * written (or is writing) is not written again: this flight's sync
 * makes it durable too, provided the earlier flight did not fail, so
 * *since moves back to the store's error sequence of that write and
 * *after to the earlier flight, to be waited for.  The holds copied are
 * marked written by f for the flights that follow, and w joins
 * e->wflights.  Returns 0, -ENOMEM, or -EAGAIN with nothing marked when
 * a flight still writing writes one of the same blocks (w then lists
 * them, to wait for).
 */
static int
flight_prepare_locked (struct engine *e, const struct flight *f,
                       struct hold **sel, size_t n, struct written *done,
                       uint64_t *since, uint64_t *after, struct wflight *w)
{
  const uint64_t seq0 = *since;
  size_t bytes = 0, nb = 0;
  char *p;
  bool busy;

  ASSERT_HOLD_LOCKED (e);
  for (size_t i = 0; i < n; i++)
    {
      struct hold *h = sel[i];

      done[i]
          = (struct written){ h->off, h->len, h->gen, h->stored_gen != h->gen };
      if (done[i].wrote)
        {
          bytes += h->len;
          nb++;
          continue;
        }
      *since = h->stored_seq < *since ? h->stored_seq : *since;
      *after = h->stored_by > *after ? h->stored_by : *after;
    }
  *w = (struct wflight){ 0 };
  if (nb == 0)
    return 0;
  /* Aligned as hold data is, so that a direct store takes the copies
   * as they are.
   */
  w->v = calloc (nb, sizeof *w->v);
  w->buf = aligned_alloc (HOLD_ALIGN,
                          (bytes + HOLD_ALIGN - 1) / HOLD_ALIGN * HOLD_ALIGN);
  if (!w->v || !w->buf)
    {
      wflight_free (w);
      return -ENOMEM;
    }
  p = w->buf;
  for (size_t i = 0; i < n; i++)
    if (done[i].wrote)
      {
        memcpy (p, sel[i]->data, sel[i]->len);
        w->v[w->n++] = (struct bio){
          .op = BIO_WRITE, .buf = p, .offset = sel[i]->off, .len = sel[i]->len
        };
        p += sel[i]->len;
      }
  pthread_mutex_lock (&e->wflight_lock);
  busy = wflights_touch (e, w->v, w->n);
  if (!busy)
    LIST_INSERT_HEAD (&e->wflights, w, link);
  pthread_mutex_unlock (&e->wflight_lock);
  if (busy)
    return -EAGAIN;
  e->wb_write_seq++;
  for (size_t i = 0; i < n; i++)
    if (done[i].wrote)
      {
        sel[i]->stored_gen = sel[i]->gen;
        sel[i]->stored_by = f->no;
        sel[i]->stored_seq = seq0;
        /* The store changes under the reference cache. */
        refs_forget_locked (e, sel[i]->off, sel[i]->len);
      }
  return 0;
}

/* The end of flight f, which selected done[0..n), with result r (hold
 * lock held): once the flights whose writes it counted on have ended
 * (and none of them failed since it began: fails0), drop the holds
 * still as selected if everything succeeded; else let the next
 * write-back write again what this one wrote.  Returns the result.
 */
static int
flight_end (struct engine *e, struct flight *f, const struct written *done,
            size_t n, int r, uint64_t since, uint64_t after, uint64_t fails0,
            enum wb_trigger why, const struct wflight *w, uint64_t seq)
{
  /* The store has the copies, unless a write followed them (or they
   * failed): then nobody knows.
   */
  for (size_t i = 0; i < w->n; i++)
    if (r == 0 && e->wb_write_seq == seq)
      refcache_put (e->refs, w->v[i].offset, w->v[i].len, w->v[i].buf);
    else
      refs_forget_locked (e, w->v[i].offset, w->v[i].len);
  if (r == 0 && after > 0)
    {
      flight_wait_locked (e, after);
      r = backend_errseq_check (e->store, since);
      if (r == 0 && e->flight_failures != fails0)
        r = -EIO;
    }
  flight_end_locked (e, f);
  if (r == 0)
    {
      engine_note_writeback_ok (e);
      STAT_INC (e->fst[e->layout->n_fs].writeback_batches);
    }
  else
    {
      e->flight_failures++;
      engine_note_writeback_error (e);
    }
  for (size_t i = 0; i < n; i++)
    {
      struct hold *h = hold_find (&e->holds, done[i].off);

      if (!h || h->gen != done[i].gen)
        continue;
      if (r == 0)
        {
          STAT_INC (hold_stats (e, h)->writeback[why]);
          if (h->kind == HOLD_INPLACE)
            jstate_placed_locked (e, h->off, h->gen);
          hold_drop (&e->holds, h);
        }
      else if (done[i].wrote)
        h->stored_gen = 0;
    }
  if (r == 0)
    holds_changed (e);
  return r;
}

/* ---- journal write-backs without the hold lock ---------------------- */

/* Is the journal state another thread's for now? */
static bool
journal_elsewhere (const struct engine *e)
{
  return e->jwb_busy && !pthread_equal (e->jwb_owner, pthread_self ());
}

void
writeback_journal_idle_locked (struct engine *e)
{
  ASSERT_HOLD_LOCKED (e);
  while (journal_elsewhere (e))
    pthread_cond_wait (&e->jwb_cond, &e->hold_lock);
}

bool
writeback_journal_take_locked (struct engine *e)
{
  ASSERT_HOLD_LOCKED (e);
  assert (!journal_elsewhere (e));
  if (e->jwb_busy)
    return false;
  e->jwb_busy = true;
  e->jwb_owner = pthread_self ();
  return true;
}

void
writeback_journal_give_locked (struct engine *e, bool taken)
{
  ASSERT_HOLD_LOCKED (e);
  if (!taken)
    return;
  e->jwb_busy = false;
  pthread_cond_broadcast (&e->jwb_cond);
}

/* Before a journal flight of sel[0..n): wait, with the hold lock
 * released meanwhile, for another journal flight, the journal writes on
 * their way, and writes of the same blocks.  True if it waited: sel may
 * be stale, select again.
 */
static bool
jflight_waited (struct engine *e, struct hold **sel, size_t n)
{
  if (journal_elsewhere (e))
    {
      writeback_journal_idle_locked (e);
      return true;
    }
  if (jstate_wait_passes_unlocking (e, 0, UINT64_MAX))
    return true;
  return sel_busy_unlocking (e, sel, n);
}

/* Copy sel[0..n) into c and buf, and list their blocks (bios, the
 * copies) in w, on its way: every other write of them waits for it.
 */
static void
jflight_copy_locked (struct engine *e, struct hold **sel, size_t n,
                     struct wb_block *c, char *buf, struct bio *bios,
                     struct wflight *w)
{
  for (size_t i = 0; i < n; i++)
    {
      const struct hold *h = sel[i];

      c[i] = (struct wb_block){ h->off, h->len, h->gen, h->kind, buf };
      memcpy (buf, h->data, h->len);
      bios[i] = (struct bio){
        .op = BIO_WRITE, .buf = buf, .offset = h->off, .len = h->len
      };
      buf += (h->len + HOLD_ALIGN - 1) / HOLD_ALIGN * HOLD_ALIGN;
      if (h->kind == HOLD_INPLACE)
        refs_forget_locked (e, h->off, h->len);
    }
  *w = (struct wflight){ .v = bios, .n = n };
  pthread_mutex_lock (&e->wflight_lock);
  LIST_INSERT_HEAD (&e->wflights, w, link);
  pthread_mutex_unlock (&e->wflight_lock);
  e->wb_write_seq++;
}

/* The end of a journal flight of c[0..n) with result r, write sequence
 * seq at its start (hold lock held): the reference cache told, and on
 * success the holds still as copied dropped and the absorbed
 * transactions made live.
 */
static void
jflight_end_locked (struct engine *e, const struct wb_block *c, size_t n, int r,
                    uint64_t seq, enum wb_trigger why)
{
  for (size_t i = 0; i < n; i++)
    if (c[i].kind == HOLD_INPLACE)
      {
        if (r == 0 && seq == e->wb_write_seq)
          refcache_put (e->refs, c[i].off, c[i].len, c[i].data);
        else
          refs_forget_locked (e, c[i].off, c[i].len);
        if (r == 0)
          jstate_placed_locked (e, c[i].off, c[i].gen);
      }
  if (r < 0)
    {
      engine_note_writeback_error (e);
      return;
    }
  engine_note_writeback_ok (e);
  STAT_INC (e->fst[e->layout->n_fs].writeback_batches);
  for (size_t i = 0; i < n; i++)
    {
      struct hold *h = hold_find (&e->holds, c[i].off);

      if (!h || h->gen != c[i].gen)
        continue;
      STAT_INC (hold_stats (e, h)->writeback[why]);
      hold_drop (&e->holds, h);
    }
  holds_changed (e);
  jstate_written_back_locked (e);
}

/* A write-back whose selection sel[0..n) holds journal holds, as
 * writeback_sel_locked writes it (every block but the commits, a flush,
 * the commits, a flush) but from copies and without the hold lock (held
 * on entry and on return): a store that stops answering stalls it, not
 * the reads of held blocks, the other inode-table writes and the stats.
 * Meanwhile nothing else changes the journal state (e->jwb_busy), and
 * the blocks are listed as on their way (e->wflights).  sel is freed.
 * Returns -EAGAIN when it had to wait first: select again.
 */
static int
journal_flight_locked (struct engine *e, struct hold **sel, size_t n,
                       enum wb_trigger why)
{
  struct wb_block *c = calloc (n, sizeof *c);
  /* The blocks on their way (listed in w), and each phase's requests. */
  struct bio *listed = calloc (n, sizeof *listed);
  struct bio *v = calloc (n + 1, sizeof *v);
  struct wflight w;
  size_t bytes = 0;
  char *buf = NULL;
  uint64_t seq;
  bool taken;
  int r = -ENOMEM;

  ASSERT_HOLD_LOCKED (e);
  for (size_t i = 0; i < n; i++)
    bytes += (sel[i]->len + HOLD_ALIGN - 1) / HOLD_ALIGN * HOLD_ALIGN;
  if (c && listed && v)
    buf = aligned_alloc (HOLD_ALIGN, bytes);
  if (buf && jflight_waited (e, sel, n))
    r = -EAGAIN;
  else if (buf)
    {
      jflight_copy_locked (e, sel, n, c, buf, listed, &w);
      seq = e->wb_write_seq;
      taken = writeback_journal_take_locked (e);
      pthread_mutex_unlock (&e->hold_lock);
      r = wb_phase (e, c, n, false, v, why);
      if (r == 0)
        r = wb_phase (e, c, n, true, v, why);
      wflight_end (e, &w);
      pthread_mutex_lock (&e->hold_lock);
      jflight_end_locked (e, c, n, r, seq, why);
      writeback_journal_give_locked (e, taken);
    }
  free (sel);
  free (c);
  free (listed);
  free (v);
  free (buf);
  return r;
}

/* Write back what pred selects and make it durable, with the hold lock
 * released for the store I/O (held on entry and on return).  With
 * nothing selected, flush only when always_flush.  While the I/O runs:
 *  - a hold given new content (a newer time-only write) has a new
 *    generation and stays: only what was written is dropped;
 *  - a hold dropped (a real write, a zero or trim) or written back by
 *    another trigger is simply gone;
 *  - a real write, zero or trim of a block being written waits for
 *    that write (writeback_wait_range_unlocking), so that it lands last;
 *  - a later flight does not write its holds again, but waits for its
 *    end (flight_prepare_locked); one that would write a newer copy of
 *    a block still being written waits for that write first;
 *  - a sync that fails anywhere after the writes began may have taken
 *    their error (backend.h): then every hold stays.
 * When journal holds are selected, the write-back is a journal flight
 * instead (journal_flight_locked): the same selection, written in the
 * order of writeback_sel_locked, without the hold lock too.
 */
static int
flight_run_locked (struct engine *e, hold_pred pred, void *arg,
                   enum wb_trigger why, bool always_flush)
{
  ASSERT_HOLD_LOCKED (e);
  for (;;)
    {
      struct hold **sel = NULL;
      struct written *done = NULL;
      struct wflight w = { 0 };
      struct flight f;
      bool journal = false;
      size_t n = 0;
      uint64_t since, after = 0, fails0 = e->flight_failures, seq;
      int r = 0;

      r = select_locked (e, pred, arg, &sel, &n, &journal);
      if (r == 0 && journal)
        {
          r = journal_flight_locked (e, sel, n, why);
          if (r == -EAGAIN)
            continue;
          return r;
        }
      if (r == 0 && n > 0 && !(done = calloc (n, sizeof *done)))
        r = -ENOMEM;
      if (r != 0 || (n == 0 && !always_flush))
        {
          free (sel);
          return r;
        }
      since = backend_errseq (e->store);
      if (n > 0)
        {
          flight_begin_locked (e, &f);
          r = flight_prepare_locked (e, &f, sel, n, done, &since, &after, &w);
        }
      free (sel);
      if (r == -EAGAIN)
        {
          flight_end_locked (e, &f);
          pthread_mutex_unlock (&e->hold_lock);
          wflights_wait (e, w.v, w.n);
          wflight_free (&w);
          free (done);
          pthread_mutex_lock (&e->hold_lock);
          continue;
        }
      if (r < 0)
        {
          if (n > 0)
            flight_end_locked (e, &f);
          free (done);
          return r;
        }
      seq = e->wb_write_seq;
      pthread_mutex_unlock (&e->hold_lock);
      if (w.n > 0)
        {
          r = store_submit (e, w.v, w.n, why);
          wflight_end (e, &w);
        }
      if (r == 0)
        r = store_flush (e, why);
      if (r == 0)
        r = backend_errseq_check (e->store, since);
      pthread_mutex_lock (&e->hold_lock);
      if (n > 0)
        r = flight_end (e, &f, done, n, r, since, after, fails0, why, &w, seq);
      wflight_free (&w);
      free (done);
      return r;
    }
}

/* A client FLUSH.  Its writes and its sync run without the hold lock
 * (flight_run_locked, journal holds included), so that the other
 * connections' reads and inode-table writes, and the control socket, go
 * on meanwhile, and a store that stops answering stalls only this
 * FLUSH.  When a journal tail waits for it at the start, the journal
 * state is the FLUSH's until the tail counts (flushed_locked); a journal
 * superblock written without FUA waits for the next FLUSH (tails_pending
 * stays set).
 */
int
writeback_flush (struct engine *e)
{
  bool taken = false;
  int r;

  pthread_mutex_lock (&e->hold_lock);
  if (atomic_load (&e->tails_pending))
    {
      /* A journal tail waits for this flush: the journal state is this
       * FLUSH's until the tail counts, so that nothing moves it meanwhile.
       */
      writeback_journal_idle_locked (e);
      taken = writeback_journal_take_locked (e);
    }
  r = flight_run_locked (e, writeback_pred_flush, NULL, WB_FLUSH, true);
  if (taken)
    {
      r = flushed_locked (e, r);
      writeback_journal_give_locked (e, taken);
      pthread_mutex_unlock (&e->hold_lock);
      return r;
    }
  pthread_mutex_unlock (&e->hold_lock);
  return writeback_report (e, r);
}

bool
writeback_range_pending_locked (struct engine *e, uint64_t off, uint64_t len)
{
  struct wb_range range = { off, len };

  ASSERT_HOLD_LOCKED (e);
  for (struct hold *h = hold_oldest (&e->holds); h;
       h = hold_next (&e->holds, h))
    if (writeback_pred_range (e, h, &range))
      return true;
  return false;
}

int
writeback_range_unlocking (struct engine *e, uint64_t off, uint64_t len)
{
  struct wb_range range = { off, len };

  ASSERT_HOLD_LOCKED (e);
  return flight_run_locked (e, writeback_pred_range, &range, WB_REAL, false);
}

int
writeback_all (struct engine *e, enum wb_trigger why, bool always_flush)
{
  int r;

  if (atomic_load (&e->nheld) == 0)
    return always_flush ? store_flush (e, why) : 0;
  pthread_rwlock_rdlock (&e->layout_lock);
  pthread_mutex_lock (&e->hold_lock);
  r = flight_run_locked (e, writeback_pred_all, NULL, why, always_flush);
  pthread_mutex_unlock (&e->hold_lock);
  pthread_rwlock_unlock (&e->layout_lock);
  return r;
}

int
engine_writeback_all (struct engine *e)
{
  return writeback_all (e, WB_EXPLICIT, true);
}

/* ---- the deadline thread --------------------------------------------- */

/* The oldest hold whose deadline is not met yet, or NULL. */
static struct hold *
oldest_unmet_locked (struct engine *e)
{
  struct hold *h = hold_oldest (&e->holds);

  ASSERT_HOLD_LOCKED (e);
  while (h && h->met)
    h = hold_next (&e->holds, h);
  return h;
}

/* The deadline of absorbed journal holds is met in place (semantics.md,
 * "Coalescing"): every block a due logged copy logs gets, in place, the
 * newest content the engine knows of it, and the sweep writes that
 * instead of the log.  For each due copy:
 *  - the store already has content of its target as new in place
 *    (jstate_placed_since): nothing to write;
 *  - else an in-place hold of the target newer than every absorbed
 *    logged copy of it (the kernel's write of that block since): written;
 *  - else the newest absorbed logged copy of the target, which is
 *    time-only against every version recovery could produce (absorb.c
 *    decided so, and no live transaction follows an absorbed one): it
 *    becomes the target's in-place hold and is written, as the kernel's
 *    checkpoint would write it.  A later transaction's copy written so
 *    meets that transaction's deadline too, with nothing more to write.
 * The due absorbed holds then stay, met, until dead, needed first by a
 * journal write, or the cap.  If what a due hold is cannot be told, or
 * the record of in-place writes is short of the truth, nothing is met:
 * the log goes.  A write of a target on its way is waited for first
 * (the hold lock released: returns true, sweep again).  Fills d->meet,
 * d->also and d->n (free d->also), and the due holds it found met, m
 * (free m->v): what mark_met_locked marks once the in-place holds are
 * written, and nothing that came due while they were.
 */
struct met_list
{
  struct
  {
    uint64_t off, gen;
  } *v;
  size_t n;
};

static bool
met_add (struct met_list *m, const struct hold *h)
{
  void *nv = realloc (m->v, (m->n + 1) * sizeof *m->v);

  if (!nv)
    return false;
  m->v = nv;
  m->v[m->n].off = h->off;
  m->v[m->n++].gen = h->gen;
  return true;
}

/* An absorbed logged copy of the block at target. */
struct acopy
{
  uint64_t target;
  const struct hold *h;
  bool escaped;
};

static int
by_target_then_gen (const void *a, const void *b)
{
  const struct acopy *x = a, *y = b;

  if (x->target != y->target)
    return (x->target > y->target) - (x->target < y->target);
  return (x->h->gen > y->h->gen) - (x->h->gen < y->h->gen);
}

/* The newest absorbed logged copy of each block the absorbed holds log,
 * sorted by target, into *v (free it), *n of them.  Returns 0 or
 * -ENOMEM.
 */
static int
newest_copies_locked (struct engine *e, struct acopy **v, size_t *n)
{
  size_t k = 0;

  *v = NULL;
  *n = 0;
  for (struct hold *h = hold_oldest (&e->holds); h;
       h = hold_next (&e->holds, h))
    {
      struct acopy c = { .h = h };
      void *nv;

      if (h->kind != HOLD_JABSORBED
          || jstate_absorbed_slot (e, h, &c.target, &c.escaped) != 1)
        continue;
      nv = realloc (*v, (k + 1) * sizeof **v);
      if (!nv)
        {
          free (*v);
          *v = NULL;
          return -ENOMEM;
        }
      *v = nv;
      (*v)[k++] = c;
    }
  if (k > 1)
    qsort (*v, k, sizeof **v, by_target_then_gen);
  /* Per target the last, the newest. */
  for (size_t i = 0; i < k; i++)
    if (i + 1 == k || (*v)[i + 1].target != (*v)[i].target)
      (*v)[(*n)++] = (*v)[i];
  return 0;
}

static const struct acopy *
newest_of (const struct acopy *v, size_t n, uint64_t target)
{
  size_t lo = 0, hi = n;

  while (lo < hi)
    {
      size_t mid = lo + (hi - lo) / 2;

      if (v[mid].target < target)
        lo = mid + 1;
      else
        hi = mid;
    }
  return lo < n && v[lo].target == target ? &v[lo] : NULL;
}

/* Block offsets, in the order added. */
struct targets
{
  uint64_t *v;
  size_t n;
};

static bool
targets_add (struct targets *t, uint64_t target)
{
  uint64_t *nv = realloc (t->v, (t->n + 1) * sizeof *t->v);

  if (!nv)
    return false;
  t->v = nv;
  t->v[t->n++] = target;
  return true;
}

/* Hold, in place, the newest absorbed copy of each of the n blocks
 * listed (sorted) in v, duplicates once: they are written with the
 * sweep.  Returns false if one could not be held.
 */
static bool
hold_copies_locked (struct engine *e, const uint64_t *v, size_t n,
                    const struct acopy *copies, size_t ncopies)
{
  for (size_t i = 0; i < n; i++)
    {
      const struct acopy *c = newest_of (copies, ncopies, v[i]);
      unsigned char *tmp;
      int err = 0;

      if (i > 0 && v[i] == v[i - 1])
        continue;
      assert (c);
      tmp = malloc (c->h->len);
      if (!tmp)
        return false;
      memcpy (tmp, c->h->data, c->h->len);
      if (c->escaped)
        jbd2_unescape (tmp);
      if (!hold_put (&e->holds, v[i], c->h->len,
                     &(struct hold_info){ .fs = c->h->fs,
                                          .kind = HOLD_INPLACE,
                                          .cls = c->h->cls },
                     tmp, now_ns (), &err))
        {
          free (tmp);
          return false;
        }
      free (tmp);
      STAT_INC (e->fst[c->h->fs].deadline_copied);
      log_debug ("deadline: block %" PRIu64 " written in place from its "
                 "logged copy (transaction %" PRIu32 ")",
                 v[i], c->h->seq);
    }
  holds_changed (e);
  return true;
}

enum meet
{
  MEET_NO,   /* cannot be told: the log goes */
  MEET_YES,  /* met, with *ip or *cp added to if a block is to be written */
  MEET_WAIT, /* a write of its target, *busy, is on its way */
};

/* How due absorbed hold h (its commit block: nothing to write) is met:
 * by nothing if the store has content of its target as new as it, else
 * by the newest content known of the target: an in-place hold of it
 * (added to ip), or the newest absorbed logged copy of it, copies[0..n)
 * (added to cp).
 */
static enum meet
meet_one_locked (struct engine *e, const struct hold *h,
                 const struct acopy *copies, size_t n, struct targets *ip,
                 struct targets *cp, struct wb_range *busy)
{
  const struct acopy *newest;
  const struct hold *held;
  uint64_t target, held_gen;
  int what = h->kind == HOLD_JCOMMIT
                 ? 0
                 : jstate_absorbed_slot (e, h, &target, NULL);

  if (what == 0)
    return MEET_YES;
  if (what < 0 || !(newest = newest_of (copies, n, target)))
    {
      log_debug ("deadline: journal block at %" PRIu64 " (transaction "
                 "%" PRIu32 "): not known: the log is written",
                 h->off, h->seq);
      return MEET_NO;
    }
  /* Already in the store in place, as new? */
  if (jstate_placed_since (e, target, h->gen))
    return MEET_YES;
  held = hold_find (&e->holds, target);
  held_gen = held && held->kind == HOLD_INPLACE ? held->gen : 0;
  if (held_gen > newest->h->gen || (e->placed_short && held_gen > h->gen))
    return targets_add (ip, target) ? MEET_YES : MEET_NO;
  if (e->placed_short)
    {
      log_debug ("deadline: block %" PRIu64 " logged by transaction %" PRIu32
                 ": what reached the store in place since is not known: "
                 "the log is written",
                 target, h->seq);
      return MEET_NO;
    }
  /* A write of it on its way (a client's, or a write-back) lands first,
   * and says what the store has then.
   */
  if (writeback_busy_locked (e, target, h->len))
    {
      *busy = (struct wb_range){ target, h->len };
      return MEET_WAIT;
    }
  return targets_add (cp, target) ? MEET_YES : MEET_NO;
}

static bool
meet_in_place_locked (struct engine *e, struct wb_sweep *d, struct met_list *m)
{
  struct wb_sweep due = { .now = d->now };
  struct acopy *copies = NULL;
  struct targets ip = { 0 }, cp = { 0 };
  size_t ncopies = 0;
  struct wb_range busy = { 0 };
  uint64_t min_gen = UINT64_MAX;
  enum meet how = MEET_YES;
  bool any = false;

  for (struct hold *h = hold_oldest (&e->holds); h;
       h = hold_next (&e->holds, h))
    if (h->kind == HOLD_JABSORBED && h->gen < min_gen)
      min_gen = h->gen;
  if (min_gen == UINT64_MAX)
    return false;
  jstate_placed_ready (e, min_gen);
  if (newest_copies_locked (e, &copies, &ncopies) < 0)
    how = MEET_NO;
  for (struct hold *h = oldest_unmet_locked (e); h && how == MEET_YES;
       h = hold_next (&e->holds, h))
    if ((h->kind == HOLD_JABSORBED || h->kind == HOLD_JCOMMIT)
        && writeback_pred_expired (e, h, &due))
      {
        any = true;
        how = met_add (m, h)
                  ? meet_one_locked (e, h, copies, ncopies, &ip, &cp, &busy)
                  : MEET_NO;
      }
  if (how == MEET_YES && any)
    {
      if (cp.n > 1)
        qsort (cp.v, cp.n, sizeof *cp.v, by_value);
      if (!hold_copies_locked (e, cp.v, cp.n, copies, ncopies))
        how = MEET_NO;
      for (size_t i = 0; i < cp.n && how == MEET_YES; i++)
        if ((i == 0 || cp.v[i] != cp.v[i - 1]) && !targets_add (&ip, cp.v[i]))
          how = MEET_NO;
    }
  free (cp.v);
  free (copies);
  if (how == MEET_YES && any)
    {
      if (ip.n > 1)
        qsort (ip.v, ip.n, sizeof *ip.v, by_value);
      *d = (struct wb_sweep){
        .now = d->now, .meet = true, .also = ip.v, .n = ip.n
      };
      return false;
    }
  free (ip.v);
  free (m->v);
  *m = (struct met_list){ 0 };
  if (how == MEET_WAIT)
    writeback_wait_range_unlocking (e, busy.off, busy.len);
  return how == MEET_WAIT;
}

/* The holds meet_in_place_locked found met, m, are: those still as it
 * found them.
 */
static void
mark_met_locked (struct engine *e, const struct met_list *m)
{
  for (size_t i = 0; i < m->n; i++)
    {
      struct hold *h = hold_find (&e->holds, m->v[i].off);

      if (!h || h->gen != m->v[i].gen || h->met
          || (h->kind != HOLD_JABSORBED && h->kind != HOLD_JCOMMIT))
        continue;
      h->met = true;
      STAT_INC (hold_stats (e, h)->deadline_met);
    }
}

/* When the next deadline falls (an hour from now when nothing is held);
 * writes back what is due first.
 */
static uint64_t
expire_due_locked (struct engine *e)
{
  ASSERT_HOLD_LOCKED (e);
  for (;;)
    {
      struct hold *h = oldest_unmet_locked (e);
      struct wb_sweep d = { .now = now_ns () };
      struct met_list met = { 0 };
      uint64_t due;
      int r;

      if (!h)
        return d.now + 3600ull * 1000000000; /* nothing due: idle */
      due = h->first_ns + e->cfg.max_age_ns;
      if (due > d.now)
        return due;
      if (meet_in_place_locked (e, &d, &met))
        continue; /* it waited for a write, the lock released */
      r = flight_run_locked (e, writeback_pred_expired, &d, WB_DEADLINE, false);
      free ((void *)d.also);
      if (r == 0 && d.meet)
        mark_met_locked (e, &met);
      free (met.v);
      if (r < 0 && store_fenced_locked (e))
        continue; /* the holds are gone: nothing to retry */
      if (r < 0)
        {
          log_notice ("writing back expired holds: %s (retrying in 1s)",
                      strerror (-r));
          return d.now + 1000000000;
        }
    }
}

/* Sleeps until the oldest hold expires. */
/* How often the deadline thread asks a store that can be lost to
 * another writer whether it is still this server's (backend_watched):
 * an idle server learns within this that it was fenced.
 */
#define WATCH_NS (5ull * 1000000000)

/* Ask without the locks (the store may take its timeout to answer);
 * a store found lost fences the engine: its holds are discarded.  Not
 * while write-backs are on their way or the store has just failed one:
 * their requests meet a lost lock themselves, and a stop would wait
 * for the question as well as for them.  A question the store does not
 * answer counts as a failed write-back, so that a stop does not wait
 * for the store again.
 */
static void
watch_locked (struct engine *e)
{
  bool busy;
  int r;

  ASSERT_HOLD_LOCKED (e);
  pthread_mutex_lock (&e->wflight_lock);
  busy = !LIST_EMPTY (&e->wflights);
  pthread_mutex_unlock (&e->wflight_lock);
  if (busy || !TAILQ_EMPTY (&e->flights) || store_not_answering (e))
    return;
  pthread_mutex_unlock (&e->hold_lock);
  pthread_rwlock_unlock (&e->layout_lock);
  r = backend_watch (e->store);
  pthread_rwlock_rdlock (&e->layout_lock);
  pthread_mutex_lock (&e->hold_lock);
  if (!store_fenced_locked (e) && r < 0)
    __atomic_store_n (&e->wb_failed_ns, now_ns (), __ATOMIC_RELAXED);
}

static void *
wb_thread (void *p)
{
  struct engine *e = p;
  const bool watched = backend_watched (e->store);
  uint64_t watch_at = now_ns () + WATCH_NS;

  pthread_rwlock_rdlock (&e->layout_lock);
  pthread_mutex_lock (&e->hold_lock);
  while (!e->stopping)
    {
      uint64_t due = expire_due_locked (e);
      struct timespec ts;

      /* The write-back ran without the hold lock: a stop may have been
       * asked for meanwhile, and its signal is gone.
       */
      if (e->stopping)
        break;
      if (watched && now_ns () >= watch_at)
        {
          watch_locked (e);
          watch_at = now_ns () + WATCH_NS;
          continue;
        }
      e->wb_due = due;
      if (watched && due > watch_at)
        due = watch_at;
      ts = (struct timespec){ .tv_sec = due / 1000000000,
                              .tv_nsec = due % 1000000000 };
      /* Let a re-read of the layout in while we sleep. */
      pthread_rwlock_unlock (&e->layout_lock);
      pthread_cond_timedwait (&e->wb_cond, &e->hold_lock, &ts);
      pthread_mutex_unlock (&e->hold_lock);
      pthread_rwlock_rdlock (&e->layout_lock);
      pthread_mutex_lock (&e->hold_lock);
    }
  pthread_mutex_unlock (&e->hold_lock);
  pthread_rwlock_unlock (&e->layout_lock);
  return NULL;
}

void
writeback_kick_locked (struct engine *e)
{
  const struct hold *h = oldest_unmet_locked (e);

  /* A new hold is due after every older one, so this wakes the thread
   * only when it sleeps with nothing held, not once for every hold.
   */
  if (h && h->first_ns + e->cfg.max_age_ns < e->wb_due)
    pthread_cond_signal (&e->wb_cond);
}

int
writeback_start (struct engine *e)
{
  int r;

  e->stopping = false;
  r = pthread_create (&e->wb_thread, NULL, wb_thread, e);
  if (r != 0)
    return -r;
  e->wb_running = true;
  return 0;
}

void
writeback_stop (struct engine *e)
{
  if (!e->wb_running)
    return;
  pthread_mutex_lock (&e->hold_lock);
  e->stopping = true;
  pthread_cond_signal (&e->wb_cond);
  pthread_mutex_unlock (&e->hold_lock);
  pthread_join (e->wb_thread, NULL);
  e->wb_running = false;
}
