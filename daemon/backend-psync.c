/* SPDX-License-Identifier: BSD-3-Clause */
/* backend-psync.c --- run backing-store requests with pread/pwritev2.
 *
 * The requests of a group run one after the other in the calling thread;
 * adjacent writes go as one pwritev2 (a write-back of neighbouring
 * blocks is one syscall, not one per block).
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include "backend-impl.h"

static int
psync_init (struct backend *b)
{
  (void)b;
  return 0;
}

static void
psync_fini (struct backend *b)
{
  (void)b;
}

int
backend_psync_one (struct backend *b, struct bio *bio)
{
  char *p = bio->buf;
  uint64_t left = bio->len, off = bio->offset;
  ssize_t r;

  atomic_fetch_add (&b->issued, 1);
  if (bio->op == BIO_FLUSH)
    return fdatasync (b->fd) == -1 ? -errno : 0;

  while (left > 0)
    {
      struct iovec iov = { .iov_base = p, .iov_len = left };

      if (bio->op == BIO_READ)
        r = preadv2 (b->fd, &iov, 1, off, 0);
      else
        r = pwritev2 (b->fd, &iov, 1, off,
                      (bio->flags & BIO_FUA) ? RWF_DSYNC : 0);
      if (r == -1)
        {
          if (errno == EINTR)
            continue;
          return -errno;
        }
      if (r == 0)
        return bio->op == BIO_READ ? -EIO : -ENOSPC; /* unexpected EOF */
      p += r;
      off += r;
      left -= r;
    }
  return 0;
}

/* Write v[ord[0 .. m)], adjacent on the store, as one pwritev2 (FUA if
 * any is), iov[0 .. m) their buffers.  After a short write, what is
 * left goes bio by bio.
 */
static void
psync_writev (struct backend *b, struct bio *v, const size_t *ord, size_t m,
              struct iovec *iov)
{
  uint64_t done = 0;
  int flags = 0;
  ssize_t r;

  for (size_t j = 0; j < m; j++)
    {
      iov[j] = (struct iovec){ v[ord[j]].buf, v[ord[j]].len };
      if (v[ord[j]].flags & BIO_FUA)
        flags = RWF_DSYNC;
    }
  atomic_fetch_add (&b->issued, 1);
  do
    r = pwritev2 (b->fd, iov, (int)m, v[ord[0]].offset, flags);
  while (r == -1 && errno == EINTR);
  if (r > 0)
    done = (uint64_t)r;
  for (size_t j = 0; j < m; j++)
    {
      struct bio *x = &v[ord[j]], rest = *x;

      if (done >= x->len)
        {
          x->result = 0;
          done -= x->len;
          continue;
        }
      if (r == -1 && j == 0)
        {
          x->result = -errno;
          continue;
        }
      rest.buf = (char *)x->buf + done;
      rest.offset += done;
      rest.len -= done;
      done = 0;
      x->result = backend_psync_one (b, &rest);
    }
}

#define PSYNC_SMALL 16 /* a group this small needs no allocation */

static int
psync_run (struct backend *b, struct bio *v, size_t n)
{
  size_t small_ord[PSYNC_SMALL], *ord = small_ord;
  struct iovec small_iov[PSYNC_SMALL], *iov = small_iov;

  if (n > PSYNC_SMALL)
    {
      ord = malloc (n * sizeof *ord);
      iov = malloc (n * sizeof *iov);
    }
  if (!ord || !iov)
    for (size_t i = 0; i < n; i++)
      v[i].result = backend_psync_one (b, &v[i]);
  else
    {
      backend_order (v, n, ord);
      for (size_t k = 0, m; k < n; k += m)
        {
          m = backend_run_len (v, ord, k, n, IOV_MAX, BACKEND_RUN_BYTES);
          if (m > 1)
            psync_writev (b, v, &ord[k], m, &iov[k]);
          else
            v[ord[k]].result = backend_psync_one (b, &v[ord[k]]);
        }
    }
  if (ord != small_ord)
    free (ord);
  if (iov != small_iov)
    free (iov);
  return backend_trace_run (b, v, n);
}

/* Mirrors backend_uring_ops: both fill in one interface, backend_ops. */
const struct backend_ops backend_psync_ops = {
  .name = "psync",
  .kind = BACKEND_PSYNC,
  .init = psync_init,
  .fini = psync_fini,
  .run = psync_run,
};
