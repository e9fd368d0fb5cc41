/* backend-psync.c --- run backing-store requests with pread/pwritev2. */
#include <errno.h>
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

static int
psync_one (struct backend *b, struct bio *bio)
{
  char *p = bio->buf;
  uint64_t left = bio->len, off = bio->offset;
  ssize_t r;

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

static int
psync_run (struct backend *b, struct bio *v, size_t n)
{
  for (size_t i = 0; i < n; i++)
    v[i].result = psync_one (b, &v[i]);
  return backend_trace_run (b, v, n);
}

/* Mirrors backend_uring_ops: both fill in one interface, backend_ops. */
const struct backend_ops backend_psync_ops = {
  .name = "psync",
  .init = psync_init,
  .fini = psync_fini,
  .run = psync_run,
};
