/* SPDX-License-Identifier: BSD-3-Clause */
/* backend-uring.c --- run backing-store requests through io_uring.
 *
 * backend.c decides what comes here: buffered writes, lone buffered
 * reads and lone flushes run as plain syscalls before reaching this
 * file (see run_group in backend.c); everything uring_run is given
 * goes through the ring, unless the calling thread cannot have one.
 * Adjacent writes of a group (a write-back of neighbouring blocks to
 * an O_DIRECT store) go as one writev entry, not one per block.
 *
 * Thread model: one ring per calling thread.  nbdkit calls the plugin
 * from many worker threads at once; giving each its own ring means the
 * data path takes no lock and the ring can be set up single-issuer.  A
 * ring is created on a thread's first request and freed by the thread's
 * pthread key destructor when the thread exits, or by fini.  ring_lock
 * protects only the list of live rings.
 */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/uio.h>

#include <liburing.h>
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MAKE_MEM_DEFINED(addr, len) ((void)(addr), (void)(len))
#endif

#include "backend-impl.h"
#include "log.h"

#define RING_ENTRIES 64
#define MAX_SQE_LEN (1u << 30)

struct uring_tls
{
  struct io_uring ring;
  struct uring_state *st;
  LIST_ENTRY (uring_tls) link; /* in uring_state.rings */
};

struct uring_state
{
  pthread_key_t key;
  pthread_mutex_t ring_lock;               /* protects the list below */
  LIST_HEAD (uring_list, uring_tls) rings; /* the live rings */
};

/* Set up a ring with the cheapest flags the running kernel accepts. */
static int
ring_setup (struct io_uring *ring)
{
  static const unsigned flag_sets[] = {
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN,
    IORING_SETUP_COOP_TASKRUN,
    0,
  };
  int r = -EINVAL;

  for (size_t i = 0; i < sizeof flag_sets / sizeof flag_sets[0]; i++)
    {
      struct io_uring_params p = { .flags = flag_sets[i] };

      r = io_uring_queue_init_params (RING_ENTRIES, ring, &p);
      if (r != -EINVAL)
        break;
    }
  return r;
}

/* Can io_uring be used at all (sysctl, seccomp, kernel)? */
static int
uring_probe (void)
{
  struct io_uring ring;
  struct io_uring_sqe *sqe;
  struct io_uring_cqe *cqe;
  int r;

  r = ring_setup (&ring);
  if (r < 0)
    return r;
  sqe = io_uring_get_sqe (&ring);
  if (!sqe)
    {
      io_uring_queue_exit (&ring);
      return -EBUSY;
    }
  io_uring_prep_nop (sqe);
  r = io_uring_submit_and_wait (&ring, 1);
  if (r >= 0)
    {
      r = io_uring_wait_cqe (&ring, &cqe);
      if (r == 0)
        {
          r = cqe->res;
          io_uring_cqe_seen (&ring, cqe);
        }
    }
  io_uring_queue_exit (&ring);
  return r < 0 ? r : 0;
}

static void
tls_destroy (void *p)
{
  struct uring_tls *t = p;
  struct uring_state *st = t->st;

  pthread_mutex_lock (&st->ring_lock);
  LIST_REMOVE (t, link);
  pthread_mutex_unlock (&st->ring_lock);
  io_uring_queue_exit (&t->ring);
  free (t);
}

static int
uring_init (struct backend *b)
{
  struct uring_state *st = calloc (1, sizeof *st);
  int r;

  if (!st)
    return -ENOMEM;
  r = pthread_key_create (&st->key, tls_destroy);
  if (r != 0)
    {
      free (st);
      return -r;
    }
  pthread_mutex_init (&st->ring_lock, NULL);
  LIST_INIT (&st->rings);
  b->impl = st;
  return 0;
}

static void
uring_fini (struct backend *b)
{
  struct uring_state *st = b->impl;

  if (!st)
    return;
  /* No thread may be submitting now.  Free every ring still alive. */
  pthread_mutex_lock (&st->ring_lock);
  while (!LIST_EMPTY (&st->rings))
    {
      struct uring_tls *t = LIST_FIRST (&st->rings);

      LIST_REMOVE (t, link);
      io_uring_queue_exit (&t->ring);
      free (t);
    }
  pthread_mutex_unlock (&st->ring_lock);
  /* Only this thread's value can be cleared; other threads' values die
   * with the key, whose destructor is not called after delete.
   */
  pthread_setspecific (st->key, NULL);
  pthread_key_delete (st->key);
  pthread_mutex_destroy (&st->ring_lock);
  free (st);
  b->impl = NULL;
}

static struct uring_tls *
get_ring (struct uring_state *st, int *err)
{
  struct uring_tls *t = pthread_getspecific (st->key);

  if (t)
    return t;
  t = calloc (1, sizeof *t);
  if (!t)
    {
      *err = -ENOMEM;
      return NULL;
    }
  *err = ring_setup (&t->ring);
  if (*err < 0)
    {
      free (t);
      return NULL;
    }
  t->st = st;
  pthread_mutex_lock (&st->ring_lock);
  LIST_INSERT_HEAD (&st->rings, t, link);
  pthread_mutex_unlock (&st->ring_lock);
  pthread_setspecific (st->key, t);
  return t;
}

/* One ring entry's work: the bios ord[k .. k + m) of a group, m > 1
 * only for writes that follow each other on the store, which go as one
 * writev of their buffers (iov[0 .. iovcnt), advanced past what has
 * moved).
 */
struct uring_req
{
  size_t k, m;
  uint64_t done, len; /* bytes moved so far, of len */
  struct iovec *iov;
  int iovcnt;
  bool fua; /* a FUA write among them */
};

/* Queue the remainder of request q, the i-th of its chunk. */
static void
prep_req (struct io_uring *ring, struct backend *b, struct bio *bio,
          const struct uring_req *q, size_t i)
{
  const int fd = b->fd;
  struct io_uring_sqe *sqe = io_uring_get_sqe (ring);
  uint64_t left = q->len - q->done;

  /* At most RING_ENTRIES requests are in flight, so the queue has room;
   * should it not, submitting what is queued frees its entries.
   */
  if (!sqe && io_uring_submit (ring) >= 0)
    sqe = io_uring_get_sqe (ring);
  assert (sqe != NULL);
  atomic_fetch_add (&b->issued, 1);
  unsigned len = left > MAX_SQE_LEN ? MAX_SQE_LEN : (unsigned)left;

  if (q->m > 1)
    io_uring_prep_writev (sqe, fd, q->iov, (unsigned)q->iovcnt,
                          bio->offset + q->done);
  else
    switch (bio->op)
      {
      case BIO_READ:
        io_uring_prep_read (sqe, fd, (char *)bio->buf + q->done, len,
                            bio->offset + q->done);
        break;
      case BIO_WRITE:
        io_uring_prep_write (sqe, fd, (char *)bio->buf + q->done, len,
                             bio->offset + q->done);
        break;
      default: /* BIO_FLUSH */
        io_uring_prep_fsync (sqe, fd, IORING_FSYNC_DATASYNC);
        break;
      }
  if (q->fua)
    sqe->rw_flags = RWF_DSYNC;
  io_uring_sqe_set_data64 (sqe, i);
}

/* Move q's buffers past n more bytes that moved. */
static void
iov_advance (struct uring_req *q, uint64_t n)
{
  while (n > 0 && q->iovcnt > 0)
    {
      size_t step = n < q->iov->iov_len ? n : q->iov->iov_len;

      q->iov->iov_base = (char *)q->iov->iov_base + step;
      q->iov->iov_len -= step;
      n -= step;
      if (q->iov->iov_len == 0)
        {
          q->iov++;
          q->iovcnt--;
        }
    }
}

/* Set the result of q's bios, tracing those that succeeded. */
static void
req_done (struct backend *b, struct bio *v, const size_t *ord,
          const struct uring_req *q, int res)
{
  for (size_t j = 0; j < q->m; j++)
    {
      struct bio *bio = &v[ord[q->k + j]];

      bio->result = res;
      if (res == 0)
        backend_trace (b, bio);
    }
}

/* Take in a completion of q (first bio: bio).  Sets the results, and
 * traces them, once q is over; returns true when its remainder must be
 * queued again.
 */
static bool
reap_req (struct backend *b, struct bio *v, const size_t *ord,
          struct uring_req *q, int res)
{
  const struct bio *bio = &v[ord[q->k]];

  if (res == -EAGAIN || res == -EINTR)
    return true; /* nothing moved: queue the same remainder again */
  if (res < 0)
    {
      req_done (b, v, ord, q, res);
      return false;
    }
  if (res == 0 && bio->op != BIO_FLUSH)
    {
      /* Unexpected end of file. */
      req_done (b, v, ord, q, bio->op == BIO_READ ? -EIO : -ENOSPC);
      return false;
    }
  if (bio->op != BIO_FLUSH)
    {
      /* The kernel filled the buffer; memcheck cannot see it. */
      if (bio->op == BIO_READ)
        VALGRIND_MAKE_MEM_DEFINED ((char *)bio->buf + q->done, res);
      q->done += res;
      if (q->m > 1)
        iov_advance (q, res);
      if (q->done != q->len)
        return true;
    }
  req_done (b, v, ord, q, 0);
  return false;
}

/* Run up to RING_ENTRIES requests q[0 .. nq) to completion. */
static int
run_chunk (struct backend *b, struct io_uring *ring, struct bio *v,
           const size_t *ord, struct uring_req *q, size_t nq)
{
  size_t inflight = 0;
  int r;

  for (size_t i = 0; i < nq; i++)
    {
      prep_req (ring, b, &v[ord[q[i].k]], &q[i], i);
      inflight++;
    }

  while (inflight > 0)
    {
      struct io_uring_cqe *cqe;
      unsigned head, seen = 0;

      r = io_uring_submit_and_wait (ring, 1);
      if (r < 0 && r != -EINTR && r != -EBUSY)
        return r; /* the ring is unusable */

      io_uring_for_each_cqe (ring, head, cqe)
      {
        size_t i = io_uring_cqe_get_data64 (cqe);

        seen++;
        inflight--;
        if (reap_req (b, v, ord, &q[i], cqe->res))
          {
            prep_req (ring, b, &v[ord[q[i].k]], &q[i], i);
            inflight++;
          }
      }
      io_uring_cq_advance (ring, seen);
    }
  return 0;
}

/* Split v[0 .. n) into requests q (returns how many): reads first,
 * then writes by offset, adjacent writes as one (iov[k ..) their
 * buffers).
 */
static size_t
make_reqs (struct bio *v, size_t n, size_t *ord, struct uring_req *q,
           struct iovec *iov)
{
  size_t nq = 0;

  backend_order (v, n, ord);
  for (size_t k = 0, m; k < n; k += m, nq++)
    {
      m = backend_run_len (v, ord, k, n, IOV_MAX, BACKEND_RUN_BYTES);
      q[nq] = (struct uring_req){ .k = k, .m = m, .iov = &iov[k] };
      for (size_t j = 0; j < m; j++)
        {
          const struct bio *bio = &v[ord[k + j]];

          iov[k + j] = (struct iovec){ bio->buf, bio->len };
          q[nq].len += bio->len;
          q[nq].fua |= bio->op == BIO_WRITE && (bio->flags & BIO_FUA);
          v[ord[k + j]].result = -EINPROGRESS;
        }
      q[nq].iovcnt = (int)m;
    }
  return nq;
}

#define URING_SMALL 16 /* a group this small needs no allocation */

static int
uring_run (struct backend *b, struct bio *v, size_t n)
{
  struct uring_state *st = b->impl;
  struct uring_tls *t;
  size_t small_ord[URING_SMALL], *ord = small_ord, nq;
  struct uring_req small_q[URING_SMALL], *q = small_q;
  struct iovec small_iov[URING_SMALL], *iov = small_iov;
  int r = 0;

  t = get_ring (st, &r);
  if (n > URING_SMALL)
    {
      ord = malloc (n * sizeof *ord);
      q = malloc (n * sizeof *q);
      iov = malloc (n * sizeof *iov);
    }
  if (!t || !ord || !q || !iov)
    {
      /* Out of memory or locked memory for a ring: do not fail the
       * request, run it the plain way.
       */
      if (!t)
        log_debug ("io_uring setup failed for a thread (%s), using psync",
                   strerror (-r));
      r = backend_run_sync (b, v, n);
      goto out;
    }

  nq = make_reqs (v, n, ord, q, iov);
  for (size_t i = 0; i < nq && r == 0; i += RING_ENTRIES)
    r = run_chunk (b, &t->ring, v, ord, &q[i],
                   nq - i < RING_ENTRIES ? nq - i : RING_ENTRIES);
  /* A ring that became unusable fails every request left. */
  for (size_t i = 0; i < n; i++)
    if (v[i].result == -EINPROGRESS)
      v[i].result = r < 0 ? r : -EIO;
  r = 0;
  for (size_t i = 0; i < n && r == 0; i++)
    r = v[i].result;
out:
  if (ord != small_ord)
    free (ord);
  if (q != small_q)
    free (q);
  if (iov != small_iov)
    free (iov);
  return r;
}

/* Mirrors backend_psync_ops: both fill in one interface, backend_ops. */
const struct backend_ops backend_uring_ops = {
  .name = "uring",
  .kind = BACKEND_URING,
  .probe = uring_probe,
  .init = uring_init,
  .fini = uring_fini,
  .run = uring_run,
};
