/* SPDX-License-Identifier: BSD-3-Clause */
/* backend-uring.c --- run backing-store requests through io_uring.
 *
 * backend.c decides what comes here: buffered writes and lone flushes
 * run as plain syscalls before reaching this file (see run_group in
 * backend.c); everything uring_run is given goes through the ring,
 * unless the calling thread cannot have one.
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

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

/* Queue the remainder of request i, done bytes already transferred. */
static void
prep_one (struct io_uring *ring, struct backend *b, struct bio *bio,
          uint64_t done, size_t i)
{
  const int fd = b->fd;
  struct io_uring_sqe *sqe = io_uring_get_sqe (ring);
  uint64_t left = bio->len - done;

  /* At most RING_ENTRIES requests are in flight, so the queue has room;
   * should it not, submitting what is queued frees its entries.
   */
  if (!sqe && io_uring_submit (ring) >= 0)
    sqe = io_uring_get_sqe (ring);
  assert (sqe != NULL);
  atomic_fetch_add (&b->issued, 1);
  unsigned len = left > MAX_SQE_LEN ? MAX_SQE_LEN : (unsigned)left;

  switch (bio->op)
    {
    case BIO_READ:
      io_uring_prep_read (sqe, fd, (char *)bio->buf + done, len,
                          bio->offset + done);
      break;
    case BIO_WRITE:
      io_uring_prep_write (sqe, fd, (char *)bio->buf + done, len,
                           bio->offset + done);
      if (bio->flags & BIO_FUA)
        sqe->rw_flags = RWF_DSYNC;
      break;
    default: /* BIO_FLUSH */
      io_uring_prep_fsync (sqe, fd, IORING_FSYNC_DATASYNC);
      break;
    }
  io_uring_sqe_set_data64 (sqe, i);
}

/* Take in a completion of bio, of which done bytes had moved before.
 * Sets its result, and traces it, once it is over; returns true when
 * its remainder must be queued again.
 */
static bool
reap_one (struct backend *b, struct bio *bio, int res, uint64_t *done)
{
  const bool again = res == -EAGAIN || res == -EINTR;

  if (again)
    res = 0; /* nothing moved: queue the same remainder again */
  else if (res < 0)
    {
      bio->result = res;
      return false;
    }
  else if (res == 0 && bio->op != BIO_FLUSH)
    {
      /* Unexpected end of file. */
      bio->result = bio->op == BIO_READ ? -EIO : -ENOSPC;
      return false;
    }
  if (bio->op == BIO_FLUSH)
    {
      if (again)
        return true;
    }
  else
    {
      /* The kernel filled the buffer; memcheck cannot see it. */
      if (bio->op == BIO_READ)
        VALGRIND_MAKE_MEM_DEFINED ((char *)bio->buf + *done, res);
      *done += res;
      if (*done != bio->len)
        return true;
    }
  bio->result = 0;
  backend_trace (b, bio);
  return false;
}

/* Run up to RING_ENTRIES requests to completion. */
static int
run_chunk (struct backend *b, struct io_uring *ring, struct bio *v, size_t n)
{
  uint64_t done[RING_ENTRIES] = { 0 };
  size_t inflight = 0;
  int r;

  for (size_t i = 0; i < n; i++)
    {
      v[i].result = -EINPROGRESS;
      prep_one (ring, b, &v[i], 0, i);
      inflight++;
    }

  while (inflight > 0)
    {
      struct io_uring_cqe *cqe;
      unsigned head, seen = 0;

      r = io_uring_submit_and_wait (ring, 1);
      if (r < 0 && r != -EINTR && r != -EBUSY)
        {
          /* The ring is unusable: fail every request left. */
          for (size_t i = 0; i < n; i++)
            if (v[i].result == -EINPROGRESS)
              v[i].result = r;
          return r;
        }

      io_uring_for_each_cqe (ring, head, cqe)
      {
        size_t i = io_uring_cqe_get_data64 (cqe);

        seen++;
        inflight--;
        if (reap_one (b, &v[i], cqe->res, &done[i]))
          {
            prep_one (ring, b, &v[i], done[i], i);
            inflight++;
          }
      }
      io_uring_cq_advance (ring, seen);
    }
  return 0;
}

static int
uring_run (struct backend *b, struct bio *v, size_t n)
{
  struct uring_state *st = b->impl;
  struct uring_tls *t;
  int r, first = 0;

  t = get_ring (st, &r);
  if (!t)
    {
      /* Out of memory or locked memory for a ring: do not fail the
       * request, run it the plain way.
       */
      log_debug ("io_uring setup failed for a thread (%s), using psync",
                 strerror (-r));
      return backend_run_sync (b, v, n);
    }

  for (size_t i = 0; i < n; i += RING_ENTRIES)
    {
      size_t m = n - i < RING_ENTRIES ? n - i : RING_ENTRIES;

      r = run_chunk (b, &t->ring, &v[i], m);
      if (r < 0)
        {
          for (size_t j = i + m; j < n; j++)
            v[j].result = r;
          break;
        }
    }
  for (size_t i = 0; i < n; i++)
    if (v[i].result < 0)
      {
        first = v[i].result;
        break;
      }
  return first;
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
