/* SPDX-License-Identifier: BSD-3-Clause */
/* backend.c --- open and probe the backing store; batches and their
 * dispatch, alignment, zeroing, trimming, extents and tracing common to
 * every implementation (a store that is not a file descriptor brings
 * its own zeroing, trimming, cache and extents: backend-impl.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend-impl.h"
#include "log.h"
#include "storelock.h"

#define ZERO_CHUNK (1u << 20)

/* Does bio make data durable (and so report write-back errors)? */
static bool
is_sync (const struct bio *bio)
{
  return bio->op == BIO_FLUSH
         || (bio->op != BIO_READ && (bio->flags & BIO_FUA));
}

/* Only buffered writes? */
static bool
buffered_writes (const struct backend *b, const struct bio *v, size_t n)
{
  if (b->direct)
    return false;
  for (size_t i = 0; i < n; i++)
    if (v[i].op != BIO_WRITE)
      return false;
  return true;
}

/* Run one aligned request: a READ, a WRITE or a FLUSH.
 *
 * A buffered write, or a flush, cannot complete inline in an io_uring:
 * the kernel hands it to an io-wq worker thread (buffered writes to one
 * file all to the same one) and the caller waits for the hand-off.  The
 * plain syscalls do the same work without it, adjacent writes as one
 * (backend-psync.c).  A lone buffered read gains nothing from a ring
 * either: the caller waits for it alone, and one preadv2 is one system
 * call where the ring takes its submission, io_uring_enter and the
 * completion (and a page not in the cache blocks both alike).  Reads of
 * a group (in flight together) and O_DIRECT I/O go to the
 * implementation.
 */
static void
run_one (struct backend *b, struct bio *bio)
{
  if (b->fd >= 0 && (bio->op == BIO_FLUSH || !b->direct))
    {
      /* One system call, as in nbdkit's file plugin: a client's read
       * or write of data comes here.
       */
      bio->result = backend_psync_one (b, bio);
      if (bio->result == 0)
        backend_trace (b, bio);
    }
  else
    b->ops->run (b, bio, 1);
}

/* Run aligned requests: n READ/WRITE requests, or one FLUSH (run_one). */
static void
run_group (struct backend *b, struct bio *v, size_t n)
{
  if (n == 1)
    run_one (b, v);
  else if (b->fd >= 0 && buffered_writes (b, v, n))
    backend_run_sync (b, v, n);
  else
    b->ops->run (b, v, n);
}

static int
first_error (const struct bio *v, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (v[i].result < 0)
      return v[i].result;
  return 0;
}

/* dispatch of one request: what a client's read or write of data and
 * a flush take, with nothing to group.
 */
static int
dispatch_one (struct backend *b, struct bio *bio)
{
  if (!b->fault || !backend_inject (b, bio))
    run_one (b, bio);
  if (bio->result < 0 && is_sync (bio))
    backend_errseq_record (b, bio->result);
  return bio->result;
}

/* Run aligned requests (what run_group accepts), leaving out those the
 * fault hook fails, and count the syncs that failed.  Returns 0 or the
 * first -errno.
 */
static int
dispatch (struct backend *b, struct bio *v, size_t n)
{
  size_t i = 0, j;

  if (n == 1)
    return dispatch_one (b, v);
  while (i < n)
    {
      for (j = i; j < n && !backend_inject (b, &v[j]); j++)
        ;
      if (j > i)
        run_group (b, &v[i], j - i);
      i = j + 1;
    }
  for (i = 0; i < n; i++)
    if (v[i].result < 0 && is_sync (&v[i]))
      backend_errseq_record (b, v[i].result);
  return first_error (v, n);
}

static uint32_t
dio_alignment (int fd, bool blockdev, uint32_t sector)
{
#ifdef STATX_DIOALIGN
  struct statx stx;

  if (statx (fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0
      && (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align > 0)
    {
      uint32_t a = stx.stx_dio_offset_align;

      if (stx.stx_dio_mem_align > a)
        a = stx.stx_dio_mem_align;
      return a < 512 ? 512 : a;
    }
#endif
  return blockdev ? (sector < 512 ? 512 : sector) : 4096;
}

static void
set_why (const struct backend_config *cfg, const char *why)
{
  if (cfg->errbuf && cfg->errbuf_size > 0)
    snprintf (cfg->errbuf, cfg->errbuf_size, "%s", why);
}

/* Open the file or device: for writing if it may be, a block device
 * for writing with O_EXCL (the kernel's claim: fails with EBUSY while
 * it is mounted or another process claimed it) unless cfg->no_lock.
 */
static int
open_fd (const struct backend_config *cfg, struct backend *b)
{
  int flags = O_CLOEXEC | O_NOCTTY | (cfg->direct ? O_DIRECT : 0);
  struct stat st;

  if (!cfg->readonly && !cfg->no_lock && stat (cfg->path, &st) == 0
      && S_ISBLK (st.st_mode))
    flags |= O_EXCL;
  b->fd = open (cfg->path, flags | (cfg->readonly ? O_RDONLY : O_RDWR));
  b->caps.writable = !cfg->readonly;
  if (b->fd == -1 && !cfg->readonly
      && (errno == EACCES || errno == EROFS || errno == EPERM))
    {
      b->fd = open (cfg->path, (flags & ~O_EXCL) | O_RDONLY);
      b->caps.writable = false;
    }
  if (b->fd == -1 && errno == EBUSY && (flags & O_EXCL))
    set_why (cfg, "device busy: mounted, or claimed by another process");
  return b->fd == -1 ? -errno : 0;
}

/* One writer per volume (storelock.h): a writer's lock, or a reader's
 * when the store is served read-only.
 */
static int
lock_store (const struct backend_config *cfg, struct backend *b)
{
  int r;

  if (cfg->no_lock)
    return 0;
  r = storelock_take (b->fd, b->caps.writable);
  if (r == -EBUSY)
    set_why (cfg, b->caps.writable
                      ? "in use by another process (another server, or "
                        "qemu): it holds the image lock"
                      : "open for writing by another process (another "
                        "server, or qemu): it holds the image lock");
  else if (r == -ENOLCK)
    set_why (cfg, "cannot be locked: the filesystem does not support "
                  "OFD locks");
  return r;
}

/* A server that is draining holds its lock (and its claim on a
 * device) until it has written back what it held: so a store that is
 * busy is tried again, every LOCK_RETRY_MS for cfg->lock_wait_ns,
 * before it is refused.
 */
#define LOCK_RETRY_MS 100

static int
open_locked (const struct backend_config *cfg, struct backend *b)
{
  const struct timespec pause = { 0, LOCK_RETRY_MS * 1000000L };
  const uint64_t wait_ms = backend_lock_wait_ms (cfg);
  int r;

  for (uint64_t waited = 0;; waited += LOCK_RETRY_MS)
    {
      r = open_fd (cfg, b);
      if (r == 0)
        r = lock_store (cfg, b);
      if (r != -EBUSY || waited >= wait_ms)
        return r;
      if (b->fd >= 0)
        close (b->fd);
      b->fd = -1;
      nanosleep (&pause, NULL);
    }
}

static int
open_store (const struct backend_config *cfg, struct backend *b)
{
  struct stat st;
  int r = open_locked (cfg, b);

  if (r < 0)
    return r;

  if (fstat (b->fd, &st) == -1)
    return -errno;
  if (S_ISBLK (st.st_mode))
    {
      uint64_t size;
      int sector;

      b->caps.blockdev = true;
      if (ioctl (b->fd, BLKGETSIZE64, &size) == -1)
        return -errno;
      b->size = size;
      b->caps.sector = ioctl (b->fd, BLKSSZGET, &sector) == 0 && sector > 0
                           ? (uint32_t)sector
                           : 512;
    }
  else if (S_ISREG (st.st_mode))
    {
      b->size = st.st_size;
      b->caps.sector = 512;
      b->caps.can_extents = lseek (b->fd, 0, SEEK_HOLE) != -1;
    }
  else
    return -ENOTBLK;

  b->caps.can_punch = true; /* until the store says otherwise */
  b->caps.align = 1;
  b->direct = cfg->direct;
  if (cfg->direct)
    {
      b->caps.align = dio_alignment (b->fd, b->caps.blockdev, b->caps.sector);
      if (b->size % b->caps.align != 0)
        {
          /* The last sector could not be written without growing the
           * file: serve it without O_DIRECT rather than corrupt it.
           */
          log_notice ("direct=true: size %" PRIu64 " is not a multiple of "
                      "%" PRIu32 ", serving without O_DIRECT",
                      b->size, b->caps.align);
          if (fcntl (b->fd, F_SETFL, fcntl (b->fd, F_GETFL) & ~O_DIRECT) == -1)
            return -errno;
          b->direct = false;
          b->caps.align = 1;
        }
    }
  return 0;
}

/* The kinds of store this build serves, by enum backend_kind. */
static const struct backend_ops *const kinds[] = {
  [BACKEND_URING] = &backend_uring_ops,
  [BACKEND_PSYNC] = &backend_psync_ops,
#ifdef HAVE_LIBNBD
  [BACKEND_NBD] = &backend_nbd_ops,
#endif
#ifdef HAVE_LIBRBD
  [BACKEND_RBD] = &backend_rbd_ops,
#endif
};

static const struct backend_ops *
kind_ops (enum backend_kind kind)
{
  if ((size_t)kind >= sizeof kinds / sizeof kinds[0])
    return NULL;
  return kinds[kind];
}

/* Open a file or device (ops->open NULL).  When the implementation
 * cannot run here (ops->probe), fall back to the plain syscalls with
 * one notice.
 */
static int
open_file_kind (const struct backend_config *cfg, struct backend *b)
{
  int r = open_store (cfg, b);

  if (r < 0)
    return r;
  b->plain = kinds[BACKEND_PSYNC];
  if (b->ops->probe)
    {
      /* -EPERM is what kernel.io_uring_disabled=2 gives. */
      r = cfg->no_uring ? -EPERM : b->ops->probe ();
      if (r < 0)
        {
          log_notice ("io_uring cannot be used here (%s): "
                      "falling back to backend=%s",
                      strerror (-r), b->plain->name);
          b->ops = b->plain;
        }
    }
  return 0;
}

int
backend_open (const struct backend_config *cfg, struct backend **out)
{
  const struct backend_ops *ops = kind_ops (cfg->kind);
  struct backend *b;
  int r;

  if (!ops)
    return -EPROTONOSUPPORT;
  b = calloc (1, sizeof *b);
  if (!b)
    return -ENOMEM;
  b->fd = -1;
  b->trace = cfg->trace;
  b->fault = cfg->fault;
  pthread_mutex_init (&b->lseek_lock, NULL);
  for (size_t i = 0; i < RMW_STRIPES; i++)
    pthread_mutex_init (&b->rmw_lock[i], NULL);

  b->ops = ops;
  r = ops->open ? ops->open (cfg, b) : open_file_kind (cfg, b);
  if (r == 0)
    r = b->ops->init (b);
  if (r < 0)
    {
      backend_close (b);
      return r;
    }
  *out = b;
  return 0;
}

void
backend_close (struct backend *b)
{
  if (!b)
    return;
  if (b->ops)
    b->ops->fini (b);
  if (b->fd >= 0)
    close (b->fd);
  pthread_mutex_destroy (&b->lseek_lock);
  for (size_t i = 0; i < RMW_STRIPES; i++)
    pthread_mutex_destroy (&b->rmw_lock[i]);
  free (b);
}

bool
backend_kind_available (enum backend_kind kind)
{
  return kind_ops (kind) != NULL;
}

void
backend_release (struct backend *b)
{
  int none;

  if (b->ops->release)
    {
      b->ops->release (b);
      return;
    }
  if (b->fd < 0)
    return;
  storelock_release (b->fd);
  if (!b->caps.blockdev)
    return;
  /* A device's O_EXCL claim goes with its descriptor: put one that
   * fails every request in its place.
   */
  none = open ("/", O_PATH | O_CLOEXEC);
  if (none >= 0)
    {
      dup3 (none, b->fd, O_CLOEXEC);
      close (none);
    }
}

void
backend_suspend (struct backend *b)
{
  if (b->ops->suspend)
    b->ops->suspend (b);
}

int
backend_resume (struct backend *b, char *errbuf, size_t size)
{
  return b->ops->resume ? b->ops->resume (b, errbuf, size) : 0;
}

uint64_t
backend_size (const struct backend *b)
{
  return atomic_load (&b->size);
}

/* The size of the file or device now; see open_store. */
static int
fd_size (const struct backend *b, uint64_t *size)
{
  struct stat st;

  if (b->caps.blockdev)
    return ioctl (b->fd, BLKGETSIZE64, size) == -1 ? -errno : 0;
  if (fstat (b->fd, &st) == -1)
    return -errno;
  *size = st.st_size;
  return 0;
}

int
backend_refresh_size (struct backend *b)
{
  uint64_t size, old = atomic_load (&b->size);
  int r;

  if (b->ops->refresh)
    return b->ops->refresh (b);
  if (b->fd < 0)
    return 0; /* a store that cannot change size (NBD) */
  r = fd_size (b, &size);
  if (r < 0)
    return r;
  /* O_DIRECT serves whole sectors only (open_store). */
  if (b->direct)
    size &= ~(uint64_t)(b->caps.align - 1);
  while (size > old && !atomic_compare_exchange_weak (&b->size, &old, size))
    ;
  return 0;
}

enum backend_kind
backend_kind (const struct backend *b)
{
  return b->ops->kind;
}

const char *
backend_name (const struct backend *b)
{
  return b->ops->name;
}

const struct backend_caps *
backend_caps (const struct backend *b)
{
  return &b->caps;
}

/* Does this read or write need a bounce buffer under O_DIRECT (or on
 * a remote with a minimum block size)?  Where the buffer is in memory
 * matters to O_DIRECT only: a remote takes any buffer, and adjacent
 * writes from anywhere in memory then go as one request.
 */
static bool
needs_bounce (const struct backend *b, const struct bio *bio)
{
  uint64_t mask = b->caps.align - 1;
  uintptr_t mem = b->fd >= 0 ? (uintptr_t)bio->buf : 0;

  if (!b->direct || (bio->op != BIO_READ && bio->op != BIO_WRITE))
    return false;
  return ((bio->offset | bio->len | mem) & mask) != 0;
}

/* Under O_DIRECT, is bio (a read or write) aligned on the store but
 * not in memory?  Then a copy of its buffer will do, with no
 * read-modify-write, and it can still go with its neighbours.
 */
static bool
needs_copy (const struct backend *b, const struct bio *bio)
{
  uint64_t mask = b->caps.align - 1;

  return b->direct && b->fd >= 0
         && (bio->op == BIO_READ || bio->op == BIO_WRITE)
         && ((bio->offset | bio->len) & mask) == 0
         && ((uintptr_t)bio->buf & mask) != 0;
}

static pthread_mutex_t *
stripe (struct backend *b, uint64_t sector_off)
{
  return &b->rmw_lock[(sector_off / b->caps.align) % RMW_STRIPES];
}

/* O_DIRECT read or write of an unaligned request through a bounce
 * buffer covering the aligned span.  Edge sectors of a write are read
 * first, under their stripe locks.
 */
static int
run_bounced (struct backend *b, struct bio *bio)
{
  const uint64_t A = b->caps.align;
  uint64_t a = bio->offset & ~(A - 1);
  uint64_t e = (bio->offset + bio->len + A - 1) & ~(A - 1);
  uint64_t tail = e - A;
  pthread_mutex_t *l1 = NULL, *l2 = NULL;
  struct bio sub;
  char *buf;
  int r;

  buf = aligned_alloc (A, e - a);
  if (!buf)
    return -ENOMEM;

  if (bio->op == BIO_READ)
    {
      sub = (struct bio){
        .op = BIO_READ, .buf = buf, .offset = a, .len = e - a
      };
      r = dispatch (b, &sub, 1);
      if (r == 0)
        memcpy (bio->buf, buf + (bio->offset - a), bio->len);
      goto out;
    }

  if (bio->offset != a || bio->offset + bio->len != e)
    {
      /* Lock the edge stripes in a fixed order. */
      l1 = stripe (b, a);
      l2 = stripe (b, tail);
      if (l2 == l1)
        l2 = NULL;
      else if (l2 < l1)
        {
          pthread_mutex_t *t = l1;
          l1 = l2;
          l2 = t;
        }
      pthread_mutex_lock (l1);
      if (l2)
        pthread_mutex_lock (l2);
    }
  if (bio->offset != a)
    {
      sub = (struct bio){ .op = BIO_READ, .buf = buf, .offset = a, .len = A };
      r = dispatch (b, &sub, 1);
      if (r < 0)
        goto unlock;
    }
  if (bio->offset + bio->len != e && (tail != a || bio->offset == a))
    {
      sub = (struct bio){
        .op = BIO_READ, .buf = buf + (tail - a), .offset = tail, .len = A
      };
      r = dispatch (b, &sub, 1);
      if (r < 0)
        goto unlock;
    }
  memcpy (buf + (bio->offset - a), bio->buf, bio->len);
  sub = (struct bio){
    .op = BIO_WRITE, .flags = bio->flags, .buf = buf, .offset = a, .len = e - a
  };
  r = dispatch (b, &sub, 1);
unlock:
  if (l2)
    pthread_mutex_unlock (l2);
  if (l1)
    pthread_mutex_unlock (l1);
out:
  free (buf);
  return r;
}

/* Run reads and writes aligned on the store (what dispatch accepts),
 * those not aligned in memory (needs_copy) from one aligned copy of
 * them all, so that adjacent writes still go as one request.  Without
 * memory for the copy, each goes through its own bounce buffer.
 */
static void
dispatch_copied (struct backend *b, struct bio *v, size_t n)
{
  uint64_t bytes = 0;
  void **orig = NULL;
  char *copy = NULL, *p;

  for (size_t i = 0; i < n; i++)
    bytes += needs_copy (b, &v[i]) ? v[i].len : 0;
  if (bytes == 0)
    {
      dispatch (b, v, n);
      return;
    }
  orig = malloc (n * sizeof *orig);
  copy = aligned_alloc (b->caps.align, bytes);
  if (!orig || !copy)
    {
      for (size_t i = 0; i < n; i++)
        if (needs_copy (b, &v[i]))
          v[i].result = run_bounced (b, &v[i]);
        else
          dispatch (b, &v[i], 1);
      goto out;
    }
  p = copy;
  for (size_t i = 0; i < n; i++)
    {
      orig[i] = v[i].buf;
      if (!needs_copy (b, &v[i]))
        continue;
      if (v[i].op == BIO_WRITE)
        memcpy (p, v[i].buf, v[i].len);
      v[i].buf = p;
      p += v[i].len;
    }
  dispatch (b, v, n);
  for (size_t i = 0; i < n; i++)
    if (v[i].buf != orig[i])
      {
        if (v[i].op == BIO_READ && v[i].result == 0)
          memcpy (orig[i], v[i].buf, v[i].len);
        v[i].buf = orig[i];
      }
out:
  free (orig);
  free (copy);
}

/* Write zeroes by writing a buffer of zeroes. */
static int
write_zeroes (struct backend *b, uint64_t len, uint64_t off, uint32_t flags)
{
  const size_t chunk = ZERO_CHUNK;
  char *zeroes;
  int r = 0;

  zeroes = aligned_alloc (4096, chunk);
  if (!zeroes)
    return -ENOMEM;
  memset (zeroes, 0, chunk);
  while (len > 0 && r == 0)
    {
      uint64_t n = len < chunk ? len : chunk;
      struct bio w = { .op = BIO_WRITE,
                       .buf = zeroes,
                       .offset = off,
                       .len = n,
                       .flags = flags & BIO_FUA };

      r = needs_bounce (b, &w) ? run_bounced (b, &w) : dispatch (b, &w, 1);
      off += n;
      len -= n;
    }
  free (zeroes);
  return r;
}

static bool
is_enotsup (int err)
{
  return err == EOPNOTSUPP || err == ENOTSUP || err == ENODEV;
}

static int
try_fallocate (struct backend *b, int mode, uint64_t off, uint64_t len)
{
  if (fallocate (b->fd, mode, off, len) == 0)
    return 0;
  return is_enotsup (errno) ? -EOPNOTSUPP : -errno;
}

/* fallocate with mode | FALLOC_FL_KEEP_SIZE, unless the store refused
 * that mode before (*refused); a refusal is remembered there.  Returns
 * 0, -EOPNOTSUPP or another -errno.
 */
static int
try_mode (struct backend *b, int mode, _Atomic bool *refused, uint64_t off,
          uint64_t len)
{
  int r;

  if (atomic_load (refused))
    return -EOPNOTSUPP;
  r = try_fallocate (b, mode | FALLOC_FL_KEEP_SIZE, off, len);
  if (r == -EOPNOTSUPP)
    atomic_store (refused, true);
  return r;
}

/* Zero a range of a file in place.  Returns 0, -EOPNOTSUPP when no way
 * of doing it in place works, or another -errno.
 */
static int
zero_file (struct backend *b, const struct bio *bio)
{
  const uint64_t off = bio->offset, len = bio->len;
  int r = -EOPNOTSUPP;

  if (bio->flags & BIO_MAY_TRIM)
    r = try_mode (b, FALLOC_FL_PUNCH_HOLE, &b->no_punch, off, len);
  if (r == -EOPNOTSUPP)
    r = try_mode (b, FALLOC_FL_ZERO_RANGE, &b->no_zero_range, off, len);
  if (r == -EOPNOTSUPP)
    {
      /* Punch, then allocate again so later writes cannot fail. */
      r = try_mode (b, FALLOC_FL_PUNCH_HOLE, &b->no_punch, off, len);
      if (r == 0)
        {
          r = try_fallocate (b, 0, off, len);
          if (r == -EOPNOTSUPP)
            r = 0;
        }
    }
  return r;
}

/* Zero a range of a block device in place (BLKZEROOUT, which may unmap
 * when allowed to trim).  The kernel may emulate it by writing zeroes,
 * so it never counts as fast.  Returns 0, -EOPNOTSUPP or another -errno.
 */
static int
zero_device (struct backend *b, const struct bio *bio)
{
  int mode = (bio->flags & BIO_MAY_TRIM) ? FALLOC_FL_PUNCH_HOLE
                                         : FALLOC_FL_ZERO_RANGE;

  if ((bio->flags & BIO_FAST)
      || ((bio->offset | bio->len) & (b->caps.sector - 1)) != 0)
    return -EOPNOTSUPP;
  return try_fallocate (b, mode | FALLOC_FL_KEEP_SIZE, bio->offset, bio->len);
}

static int
do_zero (struct backend *b, struct bio *bio)
{
  int r;

  if (b->ops->zero)
    r = b->ops->zero (b, bio);
  else
    r = b->caps.blockdev ? zero_device (b, bio) : zero_file (b, bio);
  if (r == -EOPNOTSUPP)
    {
      if (bio->flags & BIO_FAST)
        return -ENOTSUP;
      /* write_zeroes honours FUA itself. */
      return write_zeroes (b, bio->len, bio->offset, bio->flags);
    }
  if (r < 0 || b->ops->zero) /* the store's zero did FUA itself */
    return r;
  return (bio->flags & BIO_FUA) ? backend_sync (b) : 0;
}

static int
do_trim (struct backend *b, struct bio *bio)
{
  uint64_t off = bio->offset, len = bio->len;

  if (b->ops->trim)
    return b->ops->trim (b, bio);
  if (!b->caps.blockdev)
    {
      int r = try_mode (b, FALLOC_FL_PUNCH_HOLE, &b->no_punch, off, len);

      if (r == -EPERM || r == -EIO)
        return r;
    }
  else
    {
      /* Discard only whole sectors; trim is advisory. */
      uint64_t s = b->caps.sector;
      uint64_t a = (off + s - 1) & ~(s - 1);
      uint64_t e = (off + len) & ~(s - 1);

      if (e > a)
        {
          uint64_t range[2] = { a, e - a };

          if (ioctl (b->fd, BLKDISCARD, range) == -1
              && (errno == EPERM || errno == EIO))
            return -errno;
        }
    }
  return (bio->flags & BIO_FUA) ? backend_sync (b) : 0;
}

/* Under O_DIRECT, sectors that a zero or trim covers only in part may be
 * under a read-modify-write by a concurrent unaligned write, which would
 * put back the bytes fallocate just zeroed.  So the partial edge sectors
 * are zeroed through the same locked read-modify-write (zeroes written),
 * and only the whole sectors in between are zeroed or trimmed in place.
 * (Trim is advisory: its edges are simply left alone.)
 */
static int
do_zero_or_trim_direct (struct backend *b, struct bio *bio)
{
  const uint64_t A = b->caps.align;
  uint64_t off = bio->offset, end = bio->offset + bio->len;
  uint64_t a = (off + A - 1) & ~(A - 1), e = end & ~(A - 1);
  struct bio mid = *bio;
  int r = 0;

  if (a >= e)
    {
      /* Within one or two partial sectors: nothing whole to fallocate. */
      if (bio->op == BIO_TRIM)
        return 0;
      if (bio->flags & BIO_FAST)
        return -ENOTSUP;
      return write_zeroes (b, bio->len, off, bio->flags);
    }
  if (bio->op == BIO_ZERO && (bio->flags & BIO_FAST) && (off != a || end != e))
    return -ENOTSUP; /* the edges would be written */
  if (bio->op == BIO_ZERO && off < a)
    r = write_zeroes (b, a - off, off, bio->flags & BIO_FUA);
  if (r == 0 && bio->op == BIO_ZERO && e < end)
    r = write_zeroes (b, end - e, e, bio->flags & BIO_FUA);
  if (r < 0)
    return r;
  mid.offset = a;
  mid.len = e - a;
  return bio->op == BIO_ZERO ? do_zero (b, &mid) : do_trim (b, &mid);
}

static bool
is_write_op (enum bio_op op)
{
  return op == BIO_WRITE || op == BIO_ZERO || op == BIO_TRIM;
}

/* The syncs of a batch that succeeded while the error sequence moved
 * from since fail with its errno (backend.h).  Returns the batch's
 * first error.
 */
static int
unsure_syncs (struct backend *b, struct bio *v, size_t n, uint64_t since)
{
  int err = backend_errseq_check (b, since);

  for (size_t i = 0; err < 0 && i < n; i++)
    if (v[i].result == 0 && is_sync (&v[i]))
      v[i].result = err;
  return first_error (v, n);
}

/* Count the requests the store failed (not those refused here before
 * reaching it: past the size, or a write to a read-only store).
 */
static void
count_failures (struct backend *b, const struct bio *v, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (v[i].result < 0 && v[i].result != -EINVAL && v[i].result != -EPERM)
      {
        atomic_fetch_add (&b->failures, 1);
        atomic_store (&b->last_failure, (uint64_t)time (NULL));
      }
}

uint64_t
backend_failures (struct backend *b, uint64_t *last)
{
  *last = atomic_load (&b->last_failure);
  return atomic_load (&b->failures);
}

bool
backend_watched (const struct backend *b)
{
  return b->ops->watch != NULL;
}

int
backend_watch (struct backend *b)
{
  if (!b->ops->watch || atomic_load (&b->fence_state))
    return 0;
  return b->ops->watch (b);
}

/* A fenced store runs nothing: every request fails with -EIO. */
static int
fence_batch (struct bio *v, size_t n)
{
  for (size_t i = 0; i < n; i++)
    v[i].result = -EIO;
  return -EIO;
}

/* Does bio, alone in its batch, go to dispatch as it is: a flush, or a
 * read or write within the store's size (a write to a writable one)
 * that needs no bounce buffer?
 */
static bool
is_plain_one (const struct backend *b, const struct bio *bio)
{
  const uint64_t size = b->size;

  return (bio->op == BIO_FLUSH
          || (!b->direct
              && (bio->op == BIO_READ
                  || (bio->op == BIO_WRITE && b->caps.writable))))
         && bio->offset <= size && bio->len <= size - bio->offset;
}

/* The requests of a batch, each refused, transformed (zero, trim, an
 * unaligned O_DIRECT request) or dispatched, runs of plain reads and
 * writes together.
 */
static void
submit_each (struct backend *b, struct bio *v, size_t n)
{
  size_t i = 0;

  while (i < n)
    {
      struct bio *bio = &v[i];
      size_t j;

      if (is_write_op (bio->op) && !b->caps.writable)
        bio->result = -EPERM;
      else if (bio->offset > b->size || bio->len > b->size - bio->offset)
        bio->result = -EINVAL;
      else if (bio->op == BIO_FLUSH)
        bio->result = dispatch (b, bio, 1);
      else if (bio->op == BIO_ZERO || bio->op == BIO_TRIM)
        {
          if (b->direct
              && ((bio->offset | bio->len) & (b->caps.align - 1)) != 0)
            bio->result = do_zero_or_trim_direct (b, bio);
          else
            bio->result
                = bio->op == BIO_ZERO ? do_zero (b, bio) : do_trim (b, bio);
          if (bio->result == 0)
            backend_trace (b, bio);
        }
      else if (needs_bounce (b, bio) && !needs_copy (b, bio))
        bio->result = run_bounced (b, bio);
      else
        {
          /* A run of plain reads and writes goes down in one go. */
          for (j = i + 1; j < n; j++)
            if ((v[j].op != BIO_READ && v[j].op != BIO_WRITE)
                || (needs_bounce (b, &v[j]) && !needs_copy (b, &v[j]))
                || (v[j].op == BIO_WRITE && !b->caps.writable)
                || v[j].offset > b->size || v[j].len > b->size - v[j].offset)
              break;
          dispatch_copied (b, bio, j - i);
          i = j;
          continue;
        }
      i++;
    }
}

int
backend_submit (struct backend *b, struct bio *v, size_t n)
{
  const uint64_t since = backend_errseq (b);

  if (atomic_load (&b->fence_state))
    return fence_batch (v, n);
  if (n == 1 && is_plain_one (b, v))
    dispatch_one (b, v);
  else
    submit_each (b, v, n);
  count_failures (b, v, n);
  return unsure_syncs (b, v, n, since);
}

int
backend_pread (struct backend *b, void *buf, uint64_t len, uint64_t off)
{
  struct bio bio = { .op = BIO_READ, .buf = buf, .len = len, .offset = off };

  return backend_submit (b, &bio, 1);
}

int
backend_pwrite (struct backend *b, const void *buf, uint64_t len, uint64_t off,
                uint32_t flags)
{
  struct bio bio = { .op = BIO_WRITE,
                     .buf = (void *)buf,
                     .len = len,
                     .offset = off,
                     .flags = flags };

  return backend_submit (b, &bio, 1);
}

int
backend_flush (struct backend *b)
{
  struct bio bio = { .op = BIO_FLUSH };

  return backend_submit (b, &bio, 1);
}

int
backend_zero (struct backend *b, uint64_t len, uint64_t off, uint32_t flags)
{
  struct bio bio
      = { .op = BIO_ZERO, .len = len, .offset = off, .flags = flags };

  return backend_submit (b, &bio, 1);
}

int
backend_trim (struct backend *b, uint64_t len, uint64_t off, uint32_t flags)
{
  struct bio bio
      = { .op = BIO_TRIM, .len = len, .offset = off, .flags = flags };

  return backend_submit (b, &bio, 1);
}

int
backend_cache (struct backend *b, uint64_t len, uint64_t off)
{
  int r;

  if (atomic_load (&b->fence_state))
    return -EIO;
  if (b->ops->cache)
    return b->ops->cache (b, len, off);
  if (b->direct)
    return 0; /* no page cache to warm */
  r = posix_fadvise (b->fd, off, len, POSIX_FADV_WILLNEED);
  return r == 0 || is_enotsup (r) ? 0 : -r;
}

int
backend_extents (struct backend *b, uint64_t len, uint64_t off,
                 backend_extent_fn fn, void *opaque)
{
  uint64_t end = off + len;
  int r = 0;

  if (atomic_load (&b->fence_state))
    return -EIO;
  if (off >= b->size)
    return -EINVAL;
  if (end > b->size)
    end = b->size;
  if (b->ops->extents && b->caps.can_extents)
    return b->ops->extents (b, end - off, off, fn, opaque);
  if (!b->caps.can_extents)
    return fn (opaque, off, end - off, false);

  pthread_mutex_lock (&b->lseek_lock);
  while (off < end && r == 0)
    {
      off_t d = lseek (b->fd, off, SEEK_DATA), h;

      if (d == -1 && errno != ENXIO)
        {
          r = -errno;
          break;
        }
      if (d == -1 || (uint64_t)d >= end)
        {
          r = fn (opaque, off, end - off, true);
          break;
        }
      if ((uint64_t)d > off)
        {
          r = fn (opaque, off, d - off, true);
          off = d;
          continue;
        }
      h = lseek (b->fd, off, SEEK_HOLE);
      if (h == -1)
        {
          if (errno != ENXIO)
            {
              r = -errno;
              break;
            }
          h = end;
        }
      if ((uint64_t)h > end)
        h = end;
      if ((uint64_t)h <= off)
        h = end; /* the store changed under us: call it data */
      r = fn (opaque, off, h - off, false);
      off = h;
    }
  pthread_mutex_unlock (&b->lseek_lock);
  return r;
}
