/* SPDX-License-Identifier: BSD-3-Clause */
/* backend-rbd.c --- the backing store is a Ceph RBD image, reached
 * with librbd's asynchronous API (loaded at run time: rbdlib.h).
 *
 * backend.c still splits batches at their flush barriers, checks
 * bounds and the writable cap, runs the fault hook and keeps the error
 * sequence; this file turns what it is given into librbd calls:
 *
 *   READ, WRITE  rbd_aio_read2/rbd_aio_write2: the requests of a group
 *                are in flight together, and the group ends when all
 *                have completed.  Writes that follow each other on the
 *                image go as one rbd_aio_writev.
 *   WRITE|FUA    RBD has no FUA: the writes, then one rbd_aio_flush
 *                once every write of the group has completed.
 *   FLUSH        rbd_aio_flush: what librbd's cache holds reaches the
 *                OSDs, which acknowledge a write only once it is
 *                durable there (with rbd cache off, nothing to do).
 *   ZERO         rbd_aio_write_zeroes; without BIO_MAY_TRIM it keeps
 *                the range allocated (THICK_PROVISION).  Never fast:
 *                a partial object is zeroed by writing zeroes, so a
 *                BIO_FAST zero fails with -ENOTSUP.
 *   TRIM         rbd_aio_discard.
 *   cache        nothing.
 *   extents      rbd_diff_iterate2 over the image's whole history when
 *                it has a valid fast-diff object map (answered without
 *                reading objects); else everything is data.
 *
 * Errors: librbd's -errno, narrowed to those a client can act on
 * (rbd_errno).  A failed flush, or the flush half of a FUA write, zero
 * or trim, counts in the error sequence as a failed fdatasync does.
 *
 * Size: the image's, read at open and again whenever backend.c asks
 * (each new client connection); only growth is taken, so that nothing
 * held or mapped can fall off the end of a store that shrank under a
 * running server.
 *
 * Fork: librados runs threads, which a fork does not copy, and nbdkit
 * forks into the background after its plugin opened the store.  So the
 * store is suspended (everything closed, the cluster connection shut
 * down) once the engine has read the layout, and resumed in the
 * serving process (backend_suspend, backend_resume).
 *
 * Threads: a librbd image handle may be used by any number of threads
 * at once, so there is no lock here; each group waits for its own
 * completions.  Everything in rbd_state is set at open or resume,
 * before requests can arrive, and read-only while they do.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "backend-impl.h"
#include "log.h"
#include "rbdlib.h"
#include "vector.h"

struct rbd_state
{
  const struct rbdlib *R;
  struct backend *b; /* the backend this is the state of (fencing) */
  struct rbd_spec spec;
  char *path;      /* the rbd= value, for messages */
  char *conf, *id; /* NULL: librados's defaults */
  bool readonly;
  bool no_lock;        /* lock=off: no exclusive lock */
  uint64_t io_timeout; /* ns: io-timeout=, for librados (rbdlib.h) */
  /* Set by store_connect, cleared by store_disconnect. */
  rados_t cluster;
  rados_ioctx_t io;
  rbd_image_t image;
  bool connected;
  bool fast_diff;
  /* The last request that completed timed out (rados_osd_op_timeout):
   * closing waits only a second for the cluster.
   */
  atomic_bool timed_out;
};

/* What a client gets for librbd's err (negative in, negative out): the
 * errors a client can act on as they are, the rest as EIO (a timeout,
 * a blocklisted client or a lost cluster are all "the store failed").
 */
static int
rbd_errno (int err)
{
  switch (-err)
    {
    case EIO:
    case ENOSPC:
    case EROFS:
    case EPERM:
    case EACCES:
    case ENOMEM:
    case EINVAL:
    case ENOTSUP:
      return err;
    case EDQUOT:
      return -ENOSPC;
    default:
      return -EIO;
    }
}

static void
ignore_completion (rbd_completion_t c, void *arg)
{
  (void)c;
  (void)arg;
}

/* librbd says the client was blocklisted (-EBLOCKLISTED, which is
 * -ESHUTDOWN): another client broke its lock, and the image is no
 * longer this server's.  Fence the store.
 */
static int
check_blocklisted (struct rbd_state *st, int r)
{
  if (r == -ESHUTDOWN)
    backend_fence (st->b, "this client was blocklisted: another client "
                          "broke its RBD exclusive lock");
  return r;
}

/* Wait for c, release it and return its result (0 or -errno). */
static int
complete (struct rbd_state *st, rbd_completion_t c)
{
  const struct rbdlib *R = st->R;
  ssize_t r;

  R->rbd_aio_wait_for_complete (c);
  r = R->rbd_aio_get_return_value (c);
  R->rbd_aio_release (c);
  if (r >= 0 || r == -ETIMEDOUT)
    atomic_store (&st->timed_out, r == -ETIMEDOUT);
  return r < 0 ? rbd_errno (check_blocklisted (st, (int)r)) : 0;
}

/* Before writing: is the exclusive lock still this client's?  If not,
 * fence the store and write nothing.
 */
static int
check_owner (struct rbd_state *st)
{
  int owner = 0;
  int r;

  if (st->readonly || st->no_lock)
    return 0;
  r = st->R->rbd_is_exclusive_lock_owner (st->image, &owner);
  if (r == -ETIMEDOUT)
    atomic_store (&st->timed_out, true);
  if (check_blocklisted (st, r) < 0 || !owner)
    {
      if (r >= 0)
        backend_fence (st->b, "the RBD exclusive lock was lost to another "
                              "client");
      return -EIO;
    }
  return 0;
}

/* ---- reads, writes and flushes -------------------------------------- */

static int
flush_image (struct rbd_state *st)
{
  rbd_completion_t c;
  int r = st->R->rbd_aio_create_completion (NULL, ignore_completion, &c);

  if (r < 0)
    return rbd_errno (r);
  atomic_fetch_add (&st->b->issued, 1);
  r = st->R->rbd_aio_flush (st->image, c);
  if (r < 0)
    {
      st->R->rbd_aio_release (c);
      return rbd_errno (r);
    }
  return complete (st, c);
}

#define RBD_GROUP 64                /* requests in flight at once */
#define RBD_MERGE_BYTES (32u << 20) /* adjacent writes in one request */

/* One librbd request: the bios ord[k .. k + m) of a group, m > 1 only
 * for writes that follow each other on the image (iov[0 .. m) their
 * buffers).
 */
struct rbd_req
{
  size_t k, m;
  rbd_completion_t c; /* NULL: it did not start, err says why */
  int err;
  struct iovec *iov;
};

/* Start q: a read, a write, or adjacent writes as one rbd_aio_writev. */
static void
issue_req (struct rbd_state *st, const struct bio *v, const size_t *ord,
           struct rbd_req *q)
{
  const struct rbdlib *R = st->R;
  const struct bio *b = &v[ord[q->k]];
  int r = R->rbd_aio_create_completion (NULL, ignore_completion, &q->c);

  if (r == 0)
    {
      atomic_fetch_add (&st->b->issued, 1);
      for (size_t j = 0; j < q->m; j++)
        q->iov[j]
            = (struct iovec){ v[ord[q->k + j]].buf, v[ord[q->k + j]].len };
      if (b->op == BIO_READ)
        r = R->rbd_aio_read2 (st->image, b->offset, b->len, b->buf, q->c, 0);
      else if (q->m == 1)
        r = R->rbd_aio_write2 (st->image, b->offset, b->len, b->buf, q->c, 0);
      else
        r = R->rbd_aio_writev (st->image, q->iov, (int)q->m, b->offset, q->c);
      if (r < 0)
        R->rbd_aio_release (q->c);
    }
  if (r < 0)
    {
      q->c = NULL;
      q->err = rbd_errno (r);
    }
}

/* Reads and writes, at most RBD_GROUP requests in flight together,
 * adjacent writes merged (a write-back of neighbouring inode-table
 * blocks is then one request, one OSD operation per object, not one
 * per block); then one flush for the FUA writes among them.
 */
static void
run_rw (struct rbd_state *st, struct bio *v, size_t n)
{
  /* n requests at most: a lone read does not pay for a full group. */
  const size_t group = n < RBD_GROUP ? n : RBD_GROUP;
  size_t *ord = malloc (n * sizeof *ord);
  struct rbd_req *q = malloc (group * sizeof *q);
  struct iovec *iov = malloc (n * sizeof *iov);
  const bool ok = ord && q && iov;

  for (size_t i = 0; i < n; i++)
    v[i].result = ok ? 0 : -ENOMEM;
  if (ok)
    backend_order (v, n, ord);
  for (size_t k = 0; ok && k < n;)
    {
      size_t nq = 0;

      for (; nq < group && k < n; k += q[nq++].m)
        {
          q[nq].k = k;
          q[nq].m = backend_run_len (v, ord, k, n, IOV_MAX, RBD_MERGE_BYTES);
          q[nq].iov = &iov[k];
          issue_req (st, v, ord, &q[nq]);
        }
      for (size_t i = 0; i < nq; i++)
        {
          int r = q[i].c ? complete (st, q[i].c) : q[i].err;

          for (size_t j = 0; j < q[i].m; j++)
            v[ord[q[i].k + j]].result = r;
        }
    }
  free (ord);
  free (q);
  free (iov);
  if (backend_fua_pending (v, n))
    backend_fua_synced (v, n, flush_image (st));
}

static bool
has_writes (const struct bio *v, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (v[i].op != BIO_READ)
      return true;
  return false;
}

static int
rbd_run (struct backend *b, struct bio *v, size_t n)
{
  struct rbd_state *st = b->impl;

  if (has_writes (v, n) && check_owner (st) < 0)
    {
      for (size_t i = 0; i < n; i++)
        v[i].result = -EIO;
      return -EIO;
    }
  if (n == 1 && v[0].op == BIO_FLUSH)
    v[0].result = flush_image (st);
  else
    run_rw (st, v, n);
  return backend_trace_run (b, v, n);
}

static int
rbd_sync_op (struct backend *b)
{
  return flush_image (b->impl);
}

/* ---- zero and trim -------------------------------------------------- */

/* The end of a zero or trim: with BIO_FUA, a flush (counted in the
 * error sequence by backend_sync when it fails).
 */
static int
finish_fua (struct backend *b, const struct bio *bio, int r)
{
  if (r == 0 && (bio->flags & BIO_FUA))
    return backend_sync (b);
  return r;
}

static int
rbd_zero_op (struct backend *b, const struct bio *bio)
{
  struct rbd_state *st = b->impl;
  const int zflags
      = (bio->flags & BIO_MAY_TRIM) ? 0 : RBD_WRITE_ZEROES_FLAG_THICK_PROVISION;
  rbd_completion_t c;
  int r;

  if (check_owner (st) < 0)
    return -EIO;
  if (bio->flags & BIO_FAST)
    return -ENOTSUP; /* see the top of the file */
  r = st->R->rbd_aio_create_completion (NULL, ignore_completion, &c);
  if (r < 0)
    return rbd_errno (r);
  r = st->R->rbd_aio_write_zeroes (st->image, bio->offset, bio->len, c, zflags,
                                   0);
  if (r < 0)
    st->R->rbd_aio_release (c);
  r = r < 0 ? rbd_errno (r) : complete (st, c);
  if (r == -EINVAL || r == -ENOTSUP)
    return -EOPNOTSUPP; /* an older cluster: backend.c writes zeroes */
  return finish_fua (b, bio, r);
}

static int
rbd_trim_op (struct backend *b, const struct bio *bio)
{
  struct rbd_state *st = b->impl;
  rbd_completion_t c;
  int r = check_owner (st);

  if (r < 0)
    return r;
  r = st->R->rbd_aio_create_completion (NULL, ignore_completion, &c);
  if (r < 0)
    return rbd_errno (r);
  r = st->R->rbd_aio_discard (st->image, bio->offset, bio->len, c);
  if (r < 0)
    st->R->rbd_aio_release (c);
  r = r < 0 ? rbd_errno (r) : complete (st, c);
  return finish_fua (b, bio, r);
}

static int
rbd_cache_op (struct backend *b, uint64_t len, uint64_t off)
{
  (void)b;
  (void)len;
  (void)off;
  return 0;
}

/* ---- extents -------------------------------------------------------- */

struct range
{
  uint64_t off, end;
};
DEFINE_VECTOR (ranges, struct range);

struct diff
{
  uint64_t off, end; /* asked for */
  struct ranges data;
  int r;
};

/* librbd's callback: collect what exists, clipped to what was asked.
 * Nothing is reported from here: librbd does not promise an order, and
 * a range wrongly called a hole would lose data for a client that
 * skips holes.
 */
static int
diff_cb (uint64_t off, size_t len, int exists, void *arg)
{
  struct diff *d = arg;
  uint64_t a = off > d->off ? off : d->off;
  uint64_t e = off + len < d->end ? off + len : d->end;

  if (exists && e > a)
    d->r = ranges_append (&d->data, (struct range){ a, e });
  return d->r;
}

static int
by_offset (const void *a, const void *b)
{
  const struct range *x = a, *y = b;

  return (x->off > y->off) - (x->off < y->off);
}

static int
rbd_extents_op (struct backend *b, uint64_t len, uint64_t off,
                backend_extent_fn fn, void *opaque)
{
  struct rbd_state *st = b->impl;
  struct diff d = { .off = off, .end = off + len };
  uint64_t pos = off;
  int r;

  r = st->R->rbd_diff_iterate2 (st->image, NULL, off, len, 1, 0, diff_cb, &d);
  if (r < 0)
    {
      ranges_reset (&d.data);
      return d.r < 0 ? d.r : rbd_errno (r);
    }
  if (d.data.n > 1)
    qsort (d.data.v, d.data.n, sizeof *d.data.v, by_offset);
  r = 0;
  for (size_t i = 0; i < d.data.n && r == 0;)
    {
      uint64_t a = d.data.v[i].off, e = d.data.v[i].end;

      /* Merge what overlaps or touches into one data extent: then
       * every extent starts past the end of the one before.
       */
      for (i++; i < d.data.n && d.data.v[i].off <= e; i++)
        if (d.data.v[i].end > e)
          e = d.data.v[i].end;
      if (a > pos)
        r = fn (opaque, pos, a - pos, true);
      if (r == 0)
        r = fn (opaque, a, e - a, false);
      pos = e;
    }
  if (r == 0 && pos < d.end)
    r = fn (opaque, pos, d.end - pos, true);
  ranges_reset (&d.data);
  return r;
}

/* ---- connecting ----------------------------------------------------- */

/* Close the image (which writes back librbd's cache, then releases the
 * exclusive lock and the header's watch: OSD requests, each of which a
 * cluster that stopped answering makes wait up to its timeout) within
 * io-timeout, or a second when the last request timed out.  Returns
 * false if it did not finish in time: the image is left open.
 */
static bool
close_image (struct rbd_state *st)
{
  const struct rbdlib *R = st->R;
  const uint64_t limit_ms
      = atomic_load (&st->timed_out) ? 1000 : st->io_timeout / 1000000;
  const struct timespec tick = { 0, 10000000 };
  rbd_completion_t c;

  if (R->rbd_aio_create_completion (NULL, ignore_completion, &c) < 0)
    {
      R->rbd_close (st->image);
      return true;
    }
  if (R->rbd_aio_close (st->image, c) < 0)
    {
      R->rbd_aio_release (c);
      R->rbd_close (st->image);
      return true;
    }
  for (uint64_t ms = 0; !R->rbd_aio_is_complete (c); ms += 10)
    {
      if (ms >= limit_ms)
        return false; /* c stays with librbd */
      nanosleep (&tick, NULL);
    }
  R->rbd_aio_release (c);
  return true;
}

static void
store_disconnect (struct rbd_state *st)
{
  if (!st->connected)
    return;
  st->connected = false;
  if (!close_image (st))
    {
      log_notice ("rbd=%s: the cluster did not answer the image's close: "
                  "left open (its exclusive lock stays until the cluster "
                  "sees this client go)",
                  st->path);
      return;
    }
  st->R->rados_ioctx_destroy (st->io);
  st->R->rados_shutdown (st->cluster);
}

/* Say which step failed ("opening image" and the image's name, say),
 * in errbuf.
 */
static int
step_failed (const struct backend_config *cfg, int r, const char *step,
             const char *name)
{
  char what[320];

  snprintf (what, sizeof what, "%s%s%s", step, name[0] ? " " : "", name);
  if (cfg->errbuf && cfg->errbuf_size > 0)
    snprintf (cfg->errbuf, cfg->errbuf_size, "%s: %s", what, strerror (-r));
  log_debug ("rbd=%s: %s: %s", cfg->path, what, strerror (-r));
  return r;
}

/* Read the configuration: ceph-conf= (which must exist), else the
 * default search, which may find nothing (CEPH_ARGS may say it all).
 * Then io-timeout= for the timeouts it left as they were.
 */
static int
read_conf (struct rbd_state *st, const struct backend_config *cfg)
{
  struct rbdlib_timeouts builtin;
  int r;

  rbdlib_timeouts_save (st->R, st->cluster, &builtin);
  r = st->R->rados_conf_read_file (st->cluster, st->conf);

  if (r < 0 && (st->conf || r != -ENOENT))
    return step_failed (cfg, r, "reading the Ceph configuration",
                        st->conf ? st->conf : "(default search)");
  r = st->R->rados_conf_parse_env (st->cluster, NULL);
  if (r < 0)
    return step_failed (cfg, r, "reading", "CEPH_ARGS");
  r = rbdlib_timeouts_apply (st->R, st->cluster, &builtin, st->io_timeout);
  if (r < 0)
    return step_failed (cfg, r, "setting", "the timeouts");
  for (int i = 0; i < RBDLIB_TIMEOUT_OPTIONS; i++)
    if (!(r & (1 << i)))
      log_debug ("rbd=%s: %s as the Ceph configuration sets it", st->path,
                 rbdlib_timeout_option[i]);
  return 0;
}

/* The owner of the image's exclusive lock, in owner (of size size):
 * "client.N at ADDR", or the address alone when the locker cannot be
 * listed; false when there is none, or it cannot be said.
 */
static bool
lock_owner (struct rbd_state *st, char *owner, size_t size)
{
  rbd_lock_mode_t mode;
  char *owners[8];
  size_t n = 8;
  char tag[256], clients[128], cookies[256], addrs[128];
  size_t tl = sizeof tag, cl = sizeof clients, kl = sizeof cookies,
         al = sizeof addrs;
  int excl;

  if (st->R->rbd_list_lockers (st->image, &excl, tag, &tl, clients, &cl,
                               cookies, &kl, addrs, &al)
      > 0)
    {
      /* The first of each NUL-separated list. */
      snprintf (owner, size, "%s at %s", clients, addrs);
      return true;
    }
  if (st->R->rbd_lock_get_owners (st->image, &mode, owners, &n) != 0 || n == 0)
    return false;
  snprintf (owner, size, "%s", owners[0]);
  st->R->rbd_lock_get_owners_cleanup (owners, n);
  return true;
}

/* Say who holds the image's exclusive lock, in errbuf. */
static int
lock_held (struct rbd_state *st, const struct backend_config *cfg, int r)
{
  char owner[320];

  if (lock_owner (st, owner, sizeof owner))
    {
      if (cfg->errbuf && cfg->errbuf_size > 0)
        snprintf (cfg->errbuf, cfg->errbuf_size,
                  "its exclusive lock is held by %s (another server, "
                  "rbd-nbd or qemu)",
                  owner);
    }
  else
    step_failed (cfg, r, "taking the exclusive lock of", st->spec.image);
  return -EBUSY;
}

static double
seconds_since (const struct timespec *t0)
{
  struct timespec t;

  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* rbd_lock_acquire, tried again every LOCK_RETRY_MS while a live owner
 * refuses, for lock-wait= (backend.c open_locked: a server that is
 * draining keeps the lock until it has written back what it held).
 */
#define LOCK_RETRY_MS 100

static int
acquire_waiting (struct rbd_state *st, const struct backend_config *cfg)
{
  const struct timespec pause = { 0, LOCK_RETRY_MS * 1000000L };
  const uint64_t wait_ms = backend_lock_wait_ms (cfg);
  int r;

  for (uint64_t waited = 0;; waited += LOCK_RETRY_MS)
    {
      r = st->R->rbd_lock_acquire (st->image, RBD_LOCK_MODE_EXCLUSIVE);
      if ((r != -EROFS && r != -EBUSY && r != -EAGAIN) || waited >= wait_ms)
        return r;
      nanosleep (&pause, NULL);
    }
}

/* One writer per image: the exclusive lock, taken as a managed lock
 * that is not handed over when another client asks for it.  An image
 * without the exclusive-lock feature cannot be locked: refused.
 */
static int
lock_image (struct rbd_state *st, const struct backend_config *cfg)
{
  uint64_t features = 0;
  char owner[320];
  bool had_owner;
  struct timespec t0;
  int r;

  if (st->readonly || st->no_lock)
    return 0;
  r = st->R->rbd_get_features (st->image, &features);
  if (r < 0)
    return step_failed (cfg, r, "reading the features of", st->spec.image);
  if (!(features & RBD_FEATURE_EXCLUSIVE_LOCK))
    {
      if (cfg->errbuf && cfg->errbuf_size > 0)
        snprintf (cfg->errbuf, cfg->errbuf_size,
                  "the image has no exclusive-lock feature, so another "
                  "writer cannot be kept out: rbd feature enable %s "
                  "exclusive-lock",
                  st->path);
      return -EOPNOTSUPP;
    }
  /* A live owner refuses at once.  One that does not answer (dead, or
   * stalled) is waited for until the OSD drops its watch on the image
   * header (osd_client_watch_timeout); then librbd breaks its lock,
   * blocklisting it.  Say when the lock had an owner, and the wait.
   */
  had_owner = lock_owner (st, owner, sizeof owner);
  clock_gettime (CLOCK_MONOTONIC, &t0);
  r = acquire_waiting (st, cfg);
  if (r == -EROFS || r == -EBUSY || r == -EAGAIN)
    return lock_held (st, cfg, r);
  if (r < 0)
    return step_failed (cfg, r, "taking the exclusive lock of", st->spec.image);
  if (had_owner)
    log_notice ("rbd=%s: took the exclusive lock, which %s held at start-up, "
                "after %.1f s (librbd breaks the lock of an owner that does "
                "not answer once its watch lapsed, and blocklists it)",
                st->path, owner, seconds_since (&t0));
  return 0;
}

/* Connect to the cluster and open the image.  On failure, nothing is
 * left open.
 */
static int
store_connect (struct rbd_state *st, const struct backend_config *cfg)
{
  const struct rbdlib *R = st->R;
  int r = R->rados_create (&st->cluster, st->id);

  if (r < 0)
    return step_failed (cfg, r, "creating a cluster handle for",
                        st->id ? st->id : "client.admin");
  r = read_conf (st, cfg);
  if (r == 0 && (r = R->rados_connect (st->cluster)) < 0)
    step_failed (cfg, r, "connecting to the cluster", "");
  if (r == 0
      && (r = R->rados_ioctx_create (st->cluster, st->spec.pool, &st->io)) < 0)
    step_failed (cfg, r, "opening pool", st->spec.pool);
  if (r < 0)
    {
      R->rados_shutdown (st->cluster);
      return r;
    }
  R->rados_ioctx_set_namespace (st->io, st->spec.ns);
  if (st->readonly)
    r = R->rbd_open_read_only (st->io, st->spec.image, &st->image, NULL);
  else
    r = R->rbd_open (st->io, st->spec.image, &st->image, NULL);
  if (r < 0)
    {
      char name[600];

      snprintf (name, sizeof name, "%s%s%s", st->spec.image,
                st->spec.ns[0] ? " in namespace " : "", st->spec.ns);
      step_failed (cfg, r, "opening image", name);
      R->rados_ioctx_destroy (st->io);
      R->rados_shutdown (st->cluster);
      return r;
    }
  r = lock_image (st, cfg);
  if (r < 0)
    {
      R->rbd_close (st->image);
      R->rados_ioctx_destroy (st->io);
      R->rados_shutdown (st->cluster);
      return r;
    }
  st->connected = true;
  return 0;
}

/* Does the image have an object map that can answer block status? */
static bool
has_fast_diff (struct rbd_state *st)
{
  uint64_t features = 0, flags = 0;

  return st->R->rbd_get_features (st->image, &features) == 0
         && (features & RBD_FEATURE_FAST_DIFF)
         && st->R->rbd_get_flags (st->image, &flags) == 0
         && !(flags & RBD_FLAG_FAST_DIFF_INVALID);
}

static int
rbd_refresh_op (struct backend *b)
{
  struct rbd_state *st = b->impl;
  uint64_t size;
  int r;

  if (!st->connected)
    return 0; /* suspended: the size is the one read last */
  r = st->R->rbd_get_size (st->image, &size);
  if (r < 0)
    return rbd_errno (r);
  if (size > atomic_load (&b->size))
    atomic_store (&b->size, size);
  return 0;
}

/* Load librbd, connect to the cluster and open cfg->path (POOL/IMAGE);
 * -ELIBACC when librbd cannot be loaded.
 */
static int
rbd_open_op (const struct backend_config *cfg, struct backend *b)
{
  struct rbd_state *st = calloc (1, sizeof *st);
  uint64_t size;
  int r;

  if (!st)
    return -ENOMEM;
  b->impl = st;
  st->b = b;
  st->R = rbdlib_get (cfg->errbuf, cfg->errbuf_size);
  if (!st->R)
    return -ELIBACC;
  if (rbdlib_parse_spec (cfg->path, &st->spec))
    return -EINVAL;
  st->path = strdup (cfg->path);
  st->conf = cfg->ceph_conf ? strdup (cfg->ceph_conf) : NULL;
  st->id = cfg->ceph_id ? strdup (cfg->ceph_id) : NULL;
  if (!st->path || (cfg->ceph_conf && !st->conf) || (cfg->ceph_id && !st->id))
    return -ENOMEM;
  st->readonly = cfg->readonly;
  st->no_lock = cfg->no_lock;
  st->io_timeout = cfg->io_timeout_ns ? cfg->io_timeout_ns : 60 * 1000000000ull;

  r = store_connect (st, cfg);
  if (r < 0)
    return r;
  r = st->R->rbd_get_size (st->image, &size);
  if (r < 0)
    return step_failed (cfg, rbd_errno (r), "reading the size of",
                        st->spec.image);
  atomic_store (&b->size, size);
  st->fast_diff = has_fast_diff (st);

  b->caps.writable = !cfg->readonly;
  b->caps.can_punch = true;
  b->caps.can_extents = st->fast_diff;
  b->caps.align = 1;
  b->caps.sector = 512;
  b->direct = false;
  log_debug ("rbd: %s: %" PRIu64 " bytes, extents=%d%s", cfg->path, size,
             st->fast_diff, cfg->readonly ? ", read-only" : "");
  return 0;
}

static void
rbd_suspend_op (struct backend *b)
{
  store_disconnect (b->impl);
}

static int
rbd_resume_op (struct backend *b, char *errbuf, size_t size)
{
  struct rbd_state *st = b->impl;
  struct backend_config cfg
      = { .path = st->path, .errbuf = errbuf, .errbuf_size = size };
  int r;

  if (st->connected)
    return 0;
  r = store_connect (st, &cfg);
  if (r < 0)
    return r;
  st->fast_diff = has_fast_diff (st);
  b->caps.can_extents = st->fast_diff;
  return rbd_refresh_op (b);
}

static int
rbd_init (struct backend *b)
{
  (void)b;
  return 0;
}

static void
rbd_fini (struct backend *b)
{
  struct rbd_state *st = b->impl;

  if (!st)
    return;
  /* No thread may be submitting now. */
  store_disconnect (st);
  free (st->path);
  free (st->conf);
  free (st->id);
  free (st);
  b->impl = NULL;
}

/* Between requests: a lock broken (rbd lock rm) or a client
 * blocklisted while the server is idle fences it now, not at its next
 * write.
 */
static int
rbd_watch_op (struct backend *b)
{
  struct rbd_state *st = b->impl;
  int r = st && st->image ? check_owner (st) : 0;

  return backend_fenced (b) ? 0 : r;
}

/* The drain hands the image over: its exclusive lock goes now, not
 * when the process ends.
 */
static void
rbd_release_op (struct backend *b)
{
  struct rbd_state *st = b->impl;
  int r;

  if (!st || !st->image || st->readonly || st->no_lock)
    return;
  r = st->R->rbd_lock_release (st->image);
  if (r < 0)
    log_notice ("rbd=%s: releasing the exclusive lock: %s (it goes when "
                "the server exits)",
                st->path, strerror (-r));
}

/* Mirrors backend_nbd_ops: a store that is not a file descriptor. */
const struct backend_ops backend_rbd_ops = {
  .name = "rbd",
  .kind = BACKEND_RBD,
  .open = rbd_open_op,
  .init = rbd_init,
  .fini = rbd_fini,
  .run = rbd_run,
  .sync = rbd_sync_op,
  .zero = rbd_zero_op,
  .trim = rbd_trim_op,
  .cache = rbd_cache_op,
  .extents = rbd_extents_op,
  .refresh = rbd_refresh_op,
  .suspend = rbd_suspend_op,
  .resume = rbd_resume_op,
  .watch = rbd_watch_op,
  .release = rbd_release_op,
};
