/* SPDX-License-Identifier: BSD-3-Clause */
/* store.c --- every store write, zero, trim and flush of the engine goes
 * through here: counted by what made the engine send it (stats.h, enum
 * st_trigger), and a flush with nothing to flush is skipped.
 *
 * Nothing to flush: no write has completed on the store since the start
 * of its last successful flush, and none is on its way.  A write counts
 * once it completed (st_dirty, after backend_submit returned), unless
 * it was FUA and succeeded: then it is durable already.  A flush that
 * succeeds covers what had completed when it began (st_clean).  The
 * first flush always goes: the store may hold what an earlier server
 * wrote without flushing it.  A sync error recorded since the last
 * FLUSH is still reported, by the error sequence (writeback_report),
 * whether the flush ran or not.
 *
 * The counters need no lock (atomics).
 *
 * Also here, as they are the store's state: a fenced store (every hold
 * dropped, nothing written again) and a store that is not answering.
 */
#include <stdlib.h>

#include "engine-impl.h"
#include "log.h"

static bool
is_store_write (const struct bio *bio)
{
  return bio->op == BIO_WRITE || bio->op == BIO_ZERO || bio->op == BIO_TRIM;
}

static int
by_offset (const void *a, const void *b)
{
  const struct bio *x = *(const struct bio *const *)a;
  const struct bio *y = *(const struct bio *const *)b;

  return (x->offset > y->offset) - (x->offset < y->offset);
}

/* The store write requests of v[0..n): each zero and trim, and each run
 * of adjacent writes once (the backends send such a run as one request,
 * up to their limit).
 */
static uint64_t
count_requests (const struct bio *v, size_t n)
{
  const struct bio **w;
  uint64_t reqs = 0;
  size_t nw = 0;

  if (n == 1)
    return is_store_write (&v[0]);
  w = malloc (n * sizeof *w);
  for (size_t i = 0; i < n; i++)
    if (v[i].op == BIO_WRITE && w)
      w[nw++] = &v[i];
    else
      reqs += is_store_write (&v[i]);
  if (!w)
    return reqs;
  qsort (w, nw, sizeof *w, by_offset);
  for (size_t i = 0; i < nw; i++)
    reqs += i == 0 || w[i - 1]->offset + w[i - 1]->len != w[i]->offset;
  free (w);
  return reqs;
}

/* Run v[0..n), in which a flush does not count towards st_clean. */
static int
run_writes (struct engine *e, struct bio *v, size_t n, unsigned why)
{
  uint64_t nw = 0, dirt = 0, nf = 0;
  int r;

  for (size_t i = 0; i < n; i++)
    {
      nw += is_store_write (&v[i]);
      nf += v[i].op == BIO_FLUSH;
    }
  if (nw + nf == 0)
    return backend_submit (e->store, v, n);
  atomic_fetch_add (&e->st_inflight, nw);
  r = backend_submit (e->store, v, n);
  for (size_t i = 0; i < n; i++)
    dirt += is_store_write (&v[i])
            && (!(v[i].flags & BIO_FUA) || v[i].result != 0);
  if (dirt > 0)
    atomic_fetch_add (&e->st_dirty, dirt);
  atomic_fetch_sub (&e->st_inflight, nw);
  STAT_ADD (e->store_writes[why], count_requests (v, n));
  STAT_ADD (e->store_flushes[why], nf);
  return r;
}

/* The flush f, unless there is nothing to flush. */
static int
flush_one (struct engine *e, struct bio *f, unsigned why)
{
  uint64_t dirty = atomic_load (&e->st_dirty), clean;
  int r;

  if (atomic_load (&e->st_inflight) == 0 && atomic_load (&e->st_clean) == dirty)
    {
      STAT_INC (e->store_flushes_skipped);
      f->result = 0;
      return 0;
    }
  STAT_INC (e->store_flushes[why]);
  r = backend_submit (e->store, f, 1);
  if (r < 0)
    return r;
  clean = atomic_load (&e->st_clean);
  while (clean < dirty
         && !atomic_compare_exchange_weak (&e->st_clean, &clean, dirty))
    ;
  return 0;
}

void
store_init (struct engine *e)
{
  atomic_store (&e->st_dirty, 1);
  atomic_store (&e->st_clean, 0);
}

/* A batch whose only flush is its last request is run as its writes,
 * then the flush (which the backend would issue after them anyway), so
 * that the flush covers them: the flush then fails as backend_submit's
 * would when a sync failed anywhere since the batch began.
 */
int
store_submit (struct engine *e, struct bio *v, size_t n, unsigned why)
{
  size_t nf = 0;
  uint64_t since;
  int r = 0, rf;

  for (size_t i = 0; i < n; i++)
    nf += v[i].op == BIO_FLUSH;
  if (nf != 1 || v[n - 1].op != BIO_FLUSH)
    return run_writes (e, v, n, why);
  since = backend_errseq (e->store);
  if (n > 1)
    r = run_writes (e, v, n - 1, why);
  /* Failed writes fail the batch: its flush would change nothing but
   * the time a store that stopped answering takes to say so.
   */
  if (r < 0)
    return v[n - 1].result = r;
  rf = flush_one (e, &v[n - 1], why);
  if (rf == 0 && n > 1)
    rf = v[n - 1].result = backend_errseq_check (e->store, since);
  return r < 0 ? r : rf;
}

int
store_pwrite (struct engine *e, const void *buf, uint64_t len, uint64_t off,
              uint32_t flags, unsigned why)
{
  struct bio bio = { .op = BIO_WRITE,
                     .buf = (void *)buf,
                     .len = len,
                     .offset = off,
                     .flags = flags };

  return store_submit (e, &bio, 1, why);
}

int
store_flush (struct engine *e, unsigned why)
{
  struct bio bio = { .op = BIO_FLUSH };

  return store_submit (e, &bio, 1, why);
}

/* ---- a fenced store, a store not answering ------------------------- */

bool
store_fenced_locked (struct engine *e)
{
  const char *why = backend_fenced (e->store);
  size_t n = e->holds.count;

  ASSERT_HOLD_LOCKED (e);
  if (!why)
    return false;
  if (e->fence_done)
    return true;
  e->fence_done = true;
  while (hold_oldest (&e->holds))
    hold_drop (&e->holds, hold_oldest (&e->holds));
  holds_changed (e);
  log_notice ("fenced: %s: %zu held blocks discarded; every request fails "
              "from now on and nothing is written to the store",
              why, n);
  return true;
}

bool
store_untouched (struct engine *e)
{
  /* st_dirty starts at 1: what an earlier server may have left. */
  return atomic_load (&e->st_dirty) == 1 && atomic_load (&e->st_inflight) == 0;
}

/* Did a write-back fail less than io-timeout ago, with none succeeding
 * since?  Then the store is not answering, and stopping does not wait
 * for it again.
 */
bool
store_not_answering (struct engine *e)
{
  const uint64_t timeout = e->cfg.store.io_timeout_ns
                               ? e->cfg.store.io_timeout_ns
                               : 60 * 1000000000ull;
  uint64_t failed = __atomic_load_n (&e->wb_failed_ns, __ATOMIC_RELAXED);
  uint64_t ok = __atomic_load_n (&e->wb_ok_ns, __ATOMIC_RELAXED);

  return failed > ok && now_ns () - failed < timeout;
}
