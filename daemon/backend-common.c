/* SPDX-License-Identifier: BSD-3-Clause */
/* backend-common.c --- what every backend implementation uses: the
 * order and the runs of adjacent writes in a group, FUA bookkeeping for
 * a store without native FUA, the fault hook, syncs, the error
 * sequence, tracing and the fence.
 *
 * backend.c and the implementations (backend-psync.c, backend-uring.c,
 * backend-nbd.c, backend-rbd.c) call this file; it calls neither, but
 * through b->ops and b->plain.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend-impl.h"

void
backend_trace (const struct backend *b, const struct bio *bio)
{
  if (b->trace)
    b->trace (bio);
}

int
backend_trace_run (const struct backend *b, const struct bio *v, size_t n)
{
  int first = 0;

  for (size_t i = 0; i < n; i++)
    {
      if (v[i].result == 0)
        backend_trace (b, &v[i]);
      else if (first == 0)
        first = v[i].result;
    }
  return first;
}

/* The error sequence: sync failures counted above ERRSEQ_SHIFT, the
 * errno of the latest below it (0 when it does not fit).
 */
#define ERRSEQ_SHIFT 12
#define ERRSEQ_ERRNO ((1u << ERRSEQ_SHIFT) - 1)

void
backend_errseq_record (struct backend *b, int err)
{
  const uint64_t e = -err > 0 && -err <= (int)ERRSEQ_ERRNO ? -err : 0;
  uint64_t old = atomic_load (&b->errseq);

  while (!atomic_compare_exchange_weak (
      &b->errseq, &old, ((old >> ERRSEQ_SHIFT) + 1) << ERRSEQ_SHIFT | e))
    ;
}

static int
errseq_errno (uint64_t seq)
{
  return (seq & ERRSEQ_ERRNO) ? -(int)(seq & ERRSEQ_ERRNO) : -EIO;
}

uint64_t
backend_errseq (struct backend *b)
{
  return atomic_load (&b->errseq);
}

int
backend_errseq_check (struct backend *b, uint64_t since)
{
  uint64_t seq = atomic_load (&b->errseq);

  return seq == since ? 0 : errseq_errno (seq);
}

int
backend_errseq_advance (struct backend *b, _Atomic uint64_t *since)
{
  uint64_t old = atomic_load (since);

  for (;;)
    {
      uint64_t seq = atomic_load (&b->errseq);

      if (seq == old)
        return 0;
      /* On failure old is what another caller moved *since to. */
      if (atomic_compare_exchange_weak (since, &old, seq))
        return errseq_errno (seq);
    }
}

static bool
fua_write_done (const struct bio *bio)
{
  return bio->op == BIO_WRITE && (bio->flags & BIO_FUA) && bio->result == 0;
}

bool
backend_fua_pending (const struct bio *v, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (fua_write_done (&v[i]))
      return true;
  return false;
}

void
backend_fua_synced (struct bio *v, size_t n, int r)
{
  for (size_t i = 0; i < n && r < 0; i++)
    if (fua_write_done (&v[i]))
      v[i].result = r;
}

/* Reads first, then writes by offset, so that adjacent writes meet. */
static int
by_op_offset (const void *a, const void *b, void *arg)
{
  const struct bio *v = arg;
  const struct bio *x = &v[*(const size_t *)a], *y = &v[*(const size_t *)b];

  if (x->op != y->op)
    return x->op == BIO_READ ? -1 : 1;
  return (x->offset > y->offset) - (x->offset < y->offset);
}

void
backend_order (const struct bio *v, size_t n, size_t *ord)
{
  for (size_t i = 0; i < n; i++)
    ord[i] = i;
  if (n > 1)
    qsort_r (ord, n, sizeof *ord, by_op_offset, (void *)v);
}

size_t
backend_run_len (const struct bio *v, const size_t *ord, size_t k, size_t n,
                 size_t max_m, uint64_t max_bytes)
{
  const struct bio *first = &v[ord[k]];
  uint64_t end = first->offset + first->len, bytes = first->len;
  size_t m = 1;

  if (first->op != BIO_WRITE)
    return 1;
  for (; k + m < n && m < max_m; m++)
    {
      const struct bio *b = &v[ord[k + m]];

      if (b->op != BIO_WRITE || b->offset != end || bytes + b->len > max_bytes)
        break;
      end += b->len;
      bytes += b->len;
    }
  return m;
}

int
backend_run_sync (struct backend *b, struct bio *v, size_t n)
{
  return b->plain->run (b, v, n);
}

bool
backend_inject (struct backend *b, struct bio *bio)
{
  int r = b->fault ? b->fault (bio) : 0;

  if (r == 0)
    return false;
  bio->result = r;
  return true;
}

int
backend_sync (struct backend *b)
{
  struct bio f = { .op = BIO_FLUSH };

  if (!backend_inject (b, &f))
    {
      if (b->ops->sync)
        f.result = b->ops->sync (b);
      else
        {
          atomic_fetch_add (&b->issued, 1);
          f.result = fdatasync (b->fd) == -1 ? -errno : 0;
        }
    }
  if (f.result < 0)
    backend_errseq_record (b, f.result);
  return f.result;
}

void
backend_fence (struct backend *b, const char *why)
{
  int no = 0;

  if (!atomic_compare_exchange_strong (&b->fence_state, &no, 1))
    return;
  snprintf (b->fence_why, sizeof b->fence_why, "%s", why);
  atomic_store (&b->fence_state, 2);
}

const char *
backend_fenced (const struct backend *b)
{
  return atomic_load (&b->fence_state) == 2 ? b->fence_why : NULL;
}

/* How long a busy store is tried again before it is refused (lock-wait=). */
uint64_t
backend_lock_wait_ms (const struct backend_config *cfg)
{
  return (cfg->lock_wait_ns ? cfg->lock_wait_ns : BACKEND_DEFAULT_LOCK_WAIT_NS)
         / 1000000;
}
