/* SPDX-License-Identifier: BSD-3-Clause */
/* backend-nbd.c --- the backing store is an NBD export, reached with
 * libnbd.
 *
 * backend.c still splits batches at their flush barriers, checks
 * bounds and the writable cap, runs the fault hook and keeps the error
 * sequence; this file turns what it is given into NBD commands:
 *
 *   READ, WRITE  nbd_aio_pread/nbd_aio_pwrite: the requests of a group
 *                are in flight together on one connection, and the
 *                group ends when all have completed.  Adjacent writes
 *                of a group (a write-back of neighbouring blocks) are
 *                copied into one buffer and go as one command.
 *   WRITE|FUA    LIBNBD_CMD_FLAG_FUA when the remote can do FUA; else
 *                the write, then one NBD flush once every write of the
 *                group has completed.
 *   FLUSH        NBD flush.  A remote that offers no flush at all
 *                (NBD_FLAG_SEND_FLUSH unset) says it has no volatile
 *                cache: what it acknowledged is durable, and a flush
 *                (or the flush half of FUA) succeeds at once.
 *   ZERO         nbd_zero, with NO_HOLE unless BIO_MAY_TRIM and
 *                FAST_ZERO for BIO_FAST (-ENOTSUP when the remote
 *                cannot zero fast).  A remote that cannot zero:
 *                backend.c writes zeroes (a BIO_FAST zero fails with
 *                -ENOTSUP).
 *   TRIM         nbd_trim; a remote that cannot trim: nothing (trim is
 *                advisory in NBD).
 *   cache        nbd_cache, or nothing.
 *   extents      the remote's base:allocation context (nbd_block_status),
 *                else everything is data.
 *
 * A remote that requires aligned requests (a minimum block size above
 * 1) gets them: caps.align is that size and b->direct is set, so
 * backend.c bounces reads and writes unaligned in offset or length
 * through the same read-modify-write it does for O_DIRECT (where their
 * buffers are in memory does not matter here).
 *
 * Errors: a failed command's errno, as the remote (or libnbd) gave it,
 * through nbdremote_errno (EIO when unknown, or when the remote stays
 * away past io-timeout).  A failed flush, or a failed FUA write, zero or trim,
 * counts in the error sequence as a failed fdatasync does (backend.c
 * for flushes and FUA writes, nbd_zero_op and nbd_trim_op for the
 * rest), so the engine never acknowledges a FLUSH over a failed
 * write-back.
 *
 * Connections and threads.  nbdkit calls the engine from many threads,
 * and each of them issues its commands with libnbd's asynchronous calls
 * and sleeps until they are done, so a connection carries the commands
 * of every thread at once (libnbd's synchronous calls would hold the
 * handle's lock until their reply, one command at a time).  Each
 * connection has a poller thread that waits on the socket and feeds
 * libnbd's state machine; it runs the completion callbacks, which wake
 * the thread that issued the commands (struct group).  An issuing
 * thread that leaves libnbd wanting to write wakes the poller through
 * an eventfd, so that it polls for POLLOUT too.
 *
 * With multi-conn, a flush on any connection covers the writes
 * completed on all of them, so the backend opens NBD_CONNS connections
 * and a request takes the first with fewer than CONN_FILL requests on
 * it (conn_get), the least busy when all have.  Without multi-conn a
 * flush need not cover another connection's writes, so there is exactly
 * one connection.
 *
 * Reconnecting.  A connection is lost when libnbd sees it end (end of
 * file, an error; on TCP also keepalive and TCP_USER_TIMEOUT), when a
 * command gets no reply within io-timeout (the connection is then shut
 * down from this side, which fails its commands), or when the remote
 * answers ESHUTDOWN: it is going away (nbdkit so answers every request
 * it reads after SIGTERM, and exits only once its clients have left).
 * So that an idle connection does not keep such a remote waiting, the
 * keeper reads its first sector after each PROBE_NS with no request
 * (probe_idle).  The keeper thread then waits for the requests in
 * flight to leave, closes every connection and connects again with a
 * bounded backoff (100 ms doubling to 5 s), each attempt within
 * io-timeout.  A remote back smaller or with fewer flags
 * (reconnect_caps_check) is not used: the state stays LINK_FAILED and
 * every request fails.  One back larger is used at the size it had.
 * Meanwhile requests wait for the remote, up to io-timeout from their
 * start, and then fail with EIO; a request whose commands failed with
 * the connection is run again on the new one (link_run).
 *
 * No lie about durability.  A remote with a volatile cache may die with
 * writes it acknowledged and had not flushed.  So every acknowledged
 * write, zero and trim since the last successful flush is logged (a
 * bounded copy, reconnect.h; a FUA one only over an older entry) and,
 * before anything else reaches a new connection, sent to it in order
 * and flushed: every range then holds the newest content acknowledged
 * for it.  When more than the bound was acknowledged, or the remote
 * refuses a replayed command, what is missing cannot be written again:
 * the reconnect counts a failed sync in the error sequence, so the next
 * FLUSH fails once and the guest's fsync reports it.
 *
 * The pollers are threads, which do not survive a fork: they run from
 * open to backend_suspend and from backend_resume to close.  While
 * they are stopped, a thread that issues commands polls the connection
 * itself until its group is done (only the engine's start-up runs then,
 * in one thread); the keeper likewise.  Everything in nbd_state is
 * set at open and read-only afterwards, except next, each connection's
 * poller state (suspend and resume change it while no request runs),
 * the replay log (its own lock), the link state (st->lock) and the
 * handles, which only the keeper replaces, while no request is active.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libnbd.h>

#include "backend-impl.h"
#include "log.h"
#include "nbdremote.h"
#include "reconnect.h"
#include "vector.h"

#define NBD_CONNS 4             /* connections when the remote has multi-conn */
#define CONN_FILL 16            /* requests on a connection before the next */
#define MAX_IN_FLIGHT 64        /* commands in flight per group */
#define MAX_IO (32u << 20)      /* bytes per read or write command */
#define MAX_OTHER (1u << 30)    /* bytes per zero, trim, cache, block status */
#define REPLAY_MAX (64u << 20)  /* bytes of unflushed writes kept to replay */
#define MAX_TRIES 5             /* attempts of a request over reconnects */
#define PROBE_NS 1000000000ull  /* idle this long: the keeper probes */
#define RELINK_NS 2000000000ull /* lost this soon after up: back off */
#define DEFAULT_IO_TIMEOUT (60 * 1000000000ull)

struct nbd_state;

struct nbd_conn
{
  struct nbd_state *st;
  struct nbd_handle *h;
  int fd;            /* h's socket, -1 when none */
  int wake;          /* eventfd: wakes the poller, -1 when it has none */
  bool polling;      /* the poller runs */
  _Atomic bool stop; /* asks the poller to end */
  pthread_t poller;
  unsigned active; /* requests using it (nbd_state's lock) */
  /* Without a poller: held by the thread driving the connection in
   * group_wait (nbd_poll holds libnbd's own lock while it sleeps, so
   * two threads polling one handle could each sleep on the other's
   * replies).
   */
  pthread_mutex_t drive;
};

enum link_state
{
  LINK_UP,     /* requests run */
  LINK_DOWN,   /* the keeper reconnects; requests wait */
  LINK_FAILED, /* the remote came back different: requests fail */
};

struct nbd_state
{
  struct nbd_conn conn[NBD_CONNS];
  size_t nconn;
  /* What the remote can do, read at open. */
  bool can_flush, can_fua, can_zero, can_fast_zero, can_trim, can_cache;
  uint64_t max_io;
  struct remote_caps caps; /* what it offered at open */
  char *uri;
  uint64_t io_timeout; /* ns */
  struct backend *b;
  /* Writes acknowledged since the last flush (reconnect.h). */
  struct replay_log log;
  bool replay_off; /* nbd-replay=off: log keeps nothing */
  /* lock protects state, active, begun, each connection's active and
   * quit; cond signals a change of the state or quit, and active's
   * fall to 0 while the link is down.  A request is active from
   * link_enter to link_leave, and uses the connections' handles only
   * then; the keeper replaces them only while the state is LINK_DOWN and
   * no request is active.
   */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  enum link_state state;
  unsigned active;
  uint64_t begun;     /* requests begun (link_enter), for the idle probe */
  bool lost_shutdown; /* the link went down on ESHUTDOWN */
  bool quit;          /* asks the keeper to end */
  bool keeping;       /* the keeper thread runs */
  /* The keeper's own: when the link last came up, and how many times
   * in a row it was lost on ESHUTDOWN within RELINK_NS of that (the
   * first attempt of the next reconnect backs off that many steps).
   */
  uint64_t up_at;
  unsigned relinks;
  pthread_t keeper;
};

/* The commands one thread issued and waits for.  lock protects pending
 * and the results the commands write (struct cmd).
 */
struct group
{
  pthread_mutex_t lock;
  pthread_cond_t cond;
  unsigned pending; /* commands issued whose free callback has not run */
  unsigned want;    /* group_wait sleeps until pending is at most this */
};

/* What a command's callbacks are given: its group, and the result it
 * sets on failure (several commands may share one).
 */
struct cmd
{
  struct group *g;
  int *result;
};

/* Is there a socket to wait on?  A dead or closed handle has none. */
static bool
conn_live (struct nbd_handle *h)
{
  return !nbd_aio_is_dead (h) && !nbd_aio_is_closed (h);
}

/* A command's errno as this file sees it: nbdremote_errno's, except
 * that ESHUTDOWN stays.  A remote answers ESHUTDOWN when it is going
 * away (nbdkit after SIGTERM answers every request it reads so, and
 * performs none): link_run then treats the connection as lost, ends it
 * (which lets the remote exit) and runs the request again on the next.
 */
static int
remote_errno (int err)
{
  return err == ESHUTDOWN ? ESHUTDOWN : nbdremote_errno (err);
}

/* The -errno of the libnbd call on h that just failed in this thread:
 * -EIO once the connection is lost (libnbd would say EINVAL, a command
 * in the wrong state).
 */
static int
last_error (struct nbd_handle *h)
{
  if (!conn_live (h))
    return -EIO;
  return -remote_errno (nbd_get_errno ());
}

/* A connection for a request: the first with fewer than CONN_FILL
 * requests on it, else the least busy.  So the requests of one client
 * (nbdkit runs at most 16 at once per client by default) share one
 * connection, whose poller then reaps several replies per wake-up, and
 * the remote serves them on one connection's threads: spread round the
 * ring, they cost the remote about half as much CPU again per write
 * (1 MiB writes to nbdkit's file plugin on tmpfs).  More load spills
 * onto the other connections.  Called with st->lock held.
 */
static struct nbd_conn *
conn_get (struct nbd_state *st)
{
  struct nbd_conn *best = &st->conn[0];

  for (size_t i = 0; i < st->nconn; i++)
    {
      struct nbd_conn *c = &st->conn[i];

      if (c->active < CONN_FILL)
        return c;
      if (c->active < best->active)
        best = c;
    }
  return best;
}

static uint64_t
now_ns (void)
{
  struct timespec t;

  clock_gettime (CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000 + (uint64_t)t.tv_nsec;
}

static struct timespec
to_timespec (uint64_t ns)
{
  return (struct timespec){ .tv_sec = ns / 1000000000,
                            .tv_nsec = ns % 1000000000 };
}

/* A condition variable whose timed waits use CLOCK_MONOTONIC. */
static void
cond_init (pthread_cond_t *cond)
{
  pthread_condattr_t a;

  pthread_condattr_init (&a);
  pthread_condattr_setclock (&a, CLOCK_MONOTONIC);
  pthread_cond_init (cond, &a);
  pthread_condattr_destroy (&a);
}

/* End c's connection from this side: libnbd then sees end of file and
 * fails every command in flight on it.
 */
static void
conn_kill (struct nbd_conn *c)
{
  if (c->fd >= 0)
    shutdown (c->fd, SHUT_RDWR);
}

/* link_lost's why for a remote that answered ESHUTDOWN. */
static const char SHUTTING_DOWN[] = "the remote is shutting down (ESHUTDOWN)";

/* The connection to the remote is lost: wake the keeper. */
static void
link_lost (struct nbd_state *st, const char *why)
{
  pthread_mutex_lock (&st->lock);
  if (st->state == LINK_UP)
    {
      st->state = LINK_DOWN;
      st->lost_shutdown = why == SHUTTING_DOWN;
      log_notice ("nbd: %s: %s; reconnecting", st->uri, why);
      pthread_cond_broadcast (&st->cond);
    }
  pthread_mutex_unlock (&st->lock);
}

/* Did the request on c that ended with r lose the link: ESHUTDOWN (the
 * remote is going away), or a failure with the connection gone?  Then
 * wake the keeper, and say so.
 */
static bool
link_check (struct nbd_state *st, struct nbd_conn *c, int r)
{
  if (r == -ESHUTDOWN)
    link_lost (st, SHUTTING_DOWN);
  else if (r < 0 && !conn_live (c->h))
    link_lost (st, "a request failed with the connection");
  else
    return false;
  return true;
}

/* Round [*off, *off + *len) out to the alignment, within the size. */
static void
align_out (const struct backend *b, uint64_t *off, uint64_t *len)
{
  const uint64_t A = b->caps.align;
  uint64_t a = *off & ~(A - 1), e = (*off + *len + A - 1) & ~(A - 1);

  if (e > b->size)
    e = b->size;
  *off = a;
  *len = e > a ? e - a : 0;
}

/* ---- the poller and the groups -------------------------------------- */

static void *
poll_loop (void *arg)
{
  struct nbd_conn *c = arg;

  while (!atomic_load (&c->stop))
    {
      struct pollfd p[2]
          = { { .fd = c->wake, .events = POLLIN }, { .fd = -1 } };
      unsigned dir = nbd_aio_get_direction (c->h);
      uint64_t v;

      if (dir != 0 && conn_live (c->h))
        {
          p[1].fd = nbd_aio_get_fd (c->h);
          if (dir & LIBNBD_AIO_DIRECTION_READ)
            p[1].events |= POLLIN;
          if (dir & LIBNBD_AIO_DIRECTION_WRITE)
            p[1].events |= POLLOUT;
        }
      if (poll (p, 2, -1) == -1)
        continue; /* EINTR; nothing else can fail here */
      if ((p[0].revents & POLLIN) && read (c->wake, &v, sizeof v) == -1)
        v = 0; /* cannot fail after POLLIN: only this thread reads */
      dir = nbd_aio_get_direction (c->h);
      if ((dir & LIBNBD_AIO_DIRECTION_READ)
          && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
        nbd_aio_notify_read (c->h);
      else if ((dir & LIBNBD_AIO_DIRECTION_WRITE)
               && (p[1].revents & (POLLOUT | POLLHUP | POLLERR)))
        nbd_aio_notify_write (c->h);
      if (p[1].fd >= 0 && !conn_live (c->h))
        link_lost (c->st, "the remote closed the connection");
    }
  return NULL;
}

static void
poller_wake (struct nbd_conn *c)
{
  uint64_t one = 1;

  if (write (c->wake, &one, sizeof one) == -1)
    one = 0; /* the counter is full: the poller is awake anyway */
}

static int
poller_start (struct nbd_conn *c)
{
  int r;

  if (c->polling || !c->h)
    return 0;
  if (c->wake == -1)
    {
      c->wake = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (c->wake == -1)
        return -errno;
    }
  atomic_store (&c->stop, false);
  r = pthread_create (&c->poller, NULL, poll_loop, c);
  if (r != 0)
    return -r;
  c->polling = true;
  return 0;
}

static void
poller_stop (struct nbd_conn *c)
{
  if (!c->polling)
    return;
  atomic_store (&c->stop, true);
  poller_wake (c);
  pthread_join (c->poller, NULL);
  c->polling = false;
}

static void
group_init (struct group *g)
{
  pthread_mutex_init (&g->lock, NULL);
  cond_init (&g->cond);
  g->pending = 0;
  g->want = 0;
}

static void
group_destroy (struct group *g)
{
  pthread_cond_destroy (&g->cond);
  pthread_mutex_destroy (&g->lock);
}

static unsigned
group_pending (struct group *g)
{
  unsigned n;

  pthread_mutex_lock (&g->lock);
  n = g->pending;
  pthread_mutex_unlock (&g->lock);
  return n;
}

/* The command failed with -err: its result keeps the first error. */
static void
cmd_fail (struct cmd *cmd, int err)
{
  pthread_mutex_lock (&cmd->g->lock);
  if (*cmd->result == 0)
    *cmd->result = err;
  pthread_mutex_unlock (&cmd->g->lock);
}

/* Completion callback. */
static int
cmd_done (void *user_data, int *error)
{
  if (*error)
    cmd_fail (user_data, -remote_errno (*error));
  return 1; /* retire the command */
}

/* Free callback: libnbd is done with the command, issued or not. */
static void
cmd_free (void *user_data)
{
  struct group *g = ((struct cmd *)user_data)->g;

  pthread_mutex_lock (&g->lock);
  if (--g->pending <= g->want)
    pthread_cond_signal (&g->cond); /* only the issuing thread waits */
  pthread_mutex_unlock (&g->lock);
}

/* The callback to give a command of g, counted as pending. */
static nbd_completion_callback
group_add (struct cmd *cmd)
{
  pthread_mutex_lock (&cmd->g->lock);
  cmd->g->pending++;
  pthread_mutex_unlock (&cmd->g->lock);
  return (nbd_completion_callback){ .callback = cmd_done,
                                    .user_data = cmd,
                                    .free = cmd_free };
}

/* Wait until at most max of g's commands are pending.  With no poller,
 * drive the connection here.  A connection that dies fails every
 * command in flight, so this ends.  A poll error on a live connection
 * is retried: the commands in flight still point into the caller's
 * buffers, so returning before they complete is not an option.
 */
static void
group_wait (struct nbd_conn *c, struct group *g, unsigned max)
{
  const uint64_t limit = c->st->io_timeout;
  struct timespec ts = to_timespec (now_ns () + limit);
  bool killed = false;

  if (!c->polling)
    {
      pthread_mutex_lock (&c->drive);
      while (group_pending (g) > max)
        {
          int r = nbd_poll (c->h, (int)(limit / 1000000));

          if (r == -1 && !conn_live (c->h))
            break;
          if (r == 0 && !killed)
            {
              killed = true;
              conn_kill (c);
            }
        }
      pthread_mutex_unlock (&c->drive);
      return;
    }
  if (nbd_aio_get_direction (c->h) & LIBNBD_AIO_DIRECTION_WRITE)
    poller_wake (c);
  pthread_mutex_lock (&g->lock);
  g->want = max;
  while (g->pending > max)
    /* No reply within the timeout: end the connection (its commands
     * then fail and are retired) and wait for that.
     */
    if (killed)
      pthread_cond_wait (&g->cond, &g->lock);
    else if (pthread_cond_timedwait (&g->cond, &g->lock, &ts) == ETIMEDOUT)
      {
        killed = true;
        conn_kill (c);
        log_notice ("nbd: %s: no reply within io-timeout", c->st->uri);
      }
  pthread_mutex_unlock (&g->lock);
}

/* ---- requests over reconnects --------------------------------------- */

/* Begin a request: wait until the remote is connected, at most until
 * deadline.  Returns 0 with *c the connection to use, or -EIO.
 */
static int
link_enter (struct nbd_state *st, uint64_t deadline, struct nbd_conn **c)
{
  struct timespec ts = to_timespec (deadline);
  int r = -EIO;

  pthread_mutex_lock (&st->lock);
  while (st->state == LINK_DOWN
         && pthread_cond_timedwait (&st->cond, &st->lock, &ts) == 0)
    ;
  if (st->state == LINK_UP)
    {
      st->active++;
      st->begun++;
      *c = conn_get (st);
      (*c)->active++;
      r = 0;
    }
  pthread_mutex_unlock (&st->lock);
  return r;
}

static void
link_leave (struct nbd_state *st, struct nbd_conn *c)
{
  pthread_mutex_lock (&st->lock);
  c->active--;
  if (--st->active == 0 && st->state == LINK_DOWN)
    pthread_cond_broadcast (&st->cond); /* the keeper waits for this */
  pthread_mutex_unlock (&st->lock);
}

/* One attempt of a request on connection c: 0 or -errno. */
typedef int (*attempt_fn) (struct backend *b, struct nbd_conn *c, void *arg);

/* Run fn until it succeeds, fails with the connection alive (the
 * remote's own error), or the remote is not back within io-timeout of
 * the start: a request that got no reply, or ESHUTDOWN (the remote is
 * going away), goes again on the new connection.  Returns fn's result,
 * or -EIO.
 */
static int
link_run (struct backend *b, attempt_fn fn, void *arg)
{
  struct nbd_state *st = b->impl;
  const uint64_t deadline = now_ns () + st->io_timeout;
  int r = -EIO;

  for (unsigned tries = 0; tries < MAX_TRIES; tries++)
    {
      struct nbd_conn *c = NULL;
      bool lost;

      if (link_enter (st, deadline, &c) < 0 || !c)
        return -EIO;
      r = fn (b, c, arg);
      lost = link_check (st, c, r);
      link_leave (st, c);
      if (!lost)
        return r;
    }
  return r == -ESHUTDOWN ? -EIO : r;
}

/* ---- reads, writes and flushes -------------------------------------- */

/* Issue bio's commands, at most max_io bytes each, in group cmd->g. */
static void
issue_rw (struct nbd_state *st, struct nbd_conn *c, struct bio *bio,
          struct cmd *cmd)
{
  const uint32_t fua
      = (bio->flags & BIO_FUA) && st->can_fua ? LIBNBD_CMD_FLAG_FUA : 0;
  uint64_t done, m;

  for (done = 0; done < bio->len; done += m)
    {
      char *p = (char *)bio->buf + done;
      int64_t r;

      m = bio->len - done < st->max_io ? bio->len - done : st->max_io;
      group_wait (c, cmd->g, MAX_IN_FLIGHT - 1);
      atomic_fetch_add (&st->b->issued, 1);
      if (bio->op == BIO_READ)
        r = nbd_aio_pread (c->h, p, m, bio->offset + done, group_add (cmd), 0);
      else
        r = nbd_aio_pwrite (c->h, p, m, bio->offset + done, group_add (cmd),
                            fua);
      if (r == -1)
        {
          cmd_fail (cmd, last_error (c->h));
          return;
        }
    }
}

/* Flush c, waiting for the reply.  Returns 0 or -errno. */
static int
flush_conn (struct nbd_state *st, struct nbd_conn *c)
{
  struct group g;
  int result = 0;
  struct cmd cmd = { &g, &result };

  uint64_t mark;

  if (!st->can_flush)
    return 0; /* no volatile cache: see the top of the file */
  mark = replay_mark (&st->log);
  group_init (&g);
  atomic_fetch_add (&st->b->issued, 1);
  if (nbd_aio_flush (c->h, group_add (&cmd), 0) == -1)
    cmd_fail (&cmd, last_error (c->h));
  group_wait (c, &g, 0);
  group_destroy (&g);
  if (result == 0)
    replay_flushed (&st->log, mark);
  return result;
}

/* One NBD command of a group: the bios ord[k .. k + m), m > 1 only
 * for writes that follow each other on the export, copied into one
 * buffer (libnbd has no vectored write).
 */
struct nbd_req
{
  struct cmd cmd;
  int result;
  size_t k, m;
  void *bounce;
};

/* Issue q: its one bio, or its adjacent writes as one command.  When
 * no buffer can be had for them, each goes as a command of its own.
 */
static void
issue_req (struct nbd_state *st, struct nbd_conn *c, struct bio *v,
           const size_t *ord, struct nbd_req *q)
{
  struct bio w = v[ord[q->k]];

  q->bounce = NULL;
  if (q->m > 1)
    {
      for (size_t j = 1; j < q->m; j++)
        w.len += v[ord[q->k + j]].len;
      q->bounce = malloc (w.len);
    }
  if (q->m > 1 && q->bounce)
    {
      char *p = q->bounce;

      for (size_t j = 0; j < q->m; j++)
        {
          const struct bio *x = &v[ord[q->k + j]];

          memcpy (p, x->buf, x->len);
          p += x->len;
          w.flags |= x->flags & BIO_FUA;
        }
      w.buf = q->bounce;
      issue_rw (st, c, &w, &q->cmd);
    }
  else
    for (size_t j = 0; j < q->m; j++)
      issue_rw (st, c, &v[ord[q->k + j]], &q->cmd);
}

/* Does the replay log keep bio once acknowledged?  A FUA write only
 * over an older entry: rw_attempt decides that at its acknowledgement.
 */
static bool
logged_write (const struct nbd_state *st, const struct bio *bio)
{
  return bio->op == BIO_WRITE && st->can_flush && !(bio->flags & BIO_FUA);
}

/* While v's commands are on their way: copy the writes the log keeps
 * into entries reserved for them (pend[i], NULL when none).
 */
static void
reserve_writes (struct nbd_state *st, const struct bio *v, size_t n,
                struct replay_entry **pend)
{
  for (size_t i = 0; i < n; i++)
    {
      pend[i]
          = logged_write (st, &v[i])
                ? replay_reserve (&st->log, REPLAY_WRITE, v[i].offset, v[i].len)
                : NULL;
      if (pend[i])
        memcpy (pend[i]->data, v[i].buf, v[i].len);
    }
}

/* A group of reads and writes, all in flight together, adjacent writes
 * merged: a write-back of neighbouring blocks is one command, not one
 * per block.  The copies for the replay log (pend) are made while the
 * commands are on their way.
 */
static void
run_rw (struct backend *b, struct nbd_conn *c, struct bio *v, size_t n,
        struct replay_entry **pend)
{
  struct nbd_state *st = b->impl;
  size_t small_ord[16], *ord = small_ord, nq = 0;
  struct nbd_req small_q[16], *q = small_q;
  struct group g;

  if (n > sizeof small_q / sizeof small_q[0])
    {
      ord = malloc (n * sizeof *ord);
      q = malloc (n * sizeof *q);
    }
  for (size_t i = 0; i < n; i++)
    v[i].result = ord && q ? 0 : -ENOMEM;
  if (ord && q)
    {
      backend_order (v, n, ord);
      group_init (&g);
      for (size_t k = 0; k < n; k += q[nq++].m)
        {
          q[nq] = (struct nbd_req){ .cmd = { &g, &q[nq].result }, .k = k };
          q[nq].m = backend_run_len (v, ord, k, n, SIZE_MAX, st->max_io);
          issue_req (st, c, v, ord, &q[nq]);
        }
      reserve_writes (st, v, n, pend);
      group_wait (c, &g, 0);
      group_destroy (&g);
    }
  for (size_t i = 0; i < nq; i++)
    {
      for (size_t j = 0; j < q[i].m; j++)
        v[ord[q[i].k + j]].result = q[i].result;
      free (q[i].bounce);
    }
  if (ord != small_ord)
    free (ord);
  if (q != small_q)
    free (q);

  /* FUA the remote cannot do itself: a flush after every write. */
  if (!st->can_fua && backend_fua_pending (v, n))
    backend_fua_synced (v, n, flush_conn (st, c));
}

struct rw_args
{
  struct bio *v;
  size_t n;
};

/* One attempt of nbd_run.  The writes the remote acknowledged go to
 * the replay log while the request is active, so that a reconnect
 * replays them: copied while on their way (run_rw), placed in the log's
 * order at their acknowledgement; a FUA one (done natively or by a
 * flush) only over an older entry (reconnect.h), copied then.  A write
 * that failed leaves nothing.
 */
static int
rw_attempt (struct backend *b, struct nbd_conn *c, void *arg)
{
  struct nbd_state *st = b->impl;
  struct rw_args *a = arg;
  struct replay_entry *small[16], **pend = small;
  int r = 0;

  if (a->n > sizeof small / sizeof small[0])
    pend = malloc (a->n * sizeof *pend);
  if (!pend)
    {
      for (size_t i = 0; i < a->n; i++)
        a->v[i].result = -ENOMEM;
      return -ENOMEM;
    }
  for (size_t i = 0; i < a->n; i++)
    pend[i] = NULL;
  if (a->n == 1 && a->v[0].op == BIO_FLUSH)
    a->v[0].result = flush_conn (st, c);
  else
    run_rw (b, c, a->v, a->n, pend);
  for (size_t i = 0; i < a->n; i++)
    {
      const struct bio *bio = &a->v[i];

      if (bio->result < 0 && (r == 0 || bio->result == -ESHUTDOWN))
        r = bio->result; /* ESHUTDOWN first: the batch goes again */
      if (bio->result < 0 && pend[i])
        replay_cancel (&st->log, pend[i]);
      else if (bio->result < 0 || bio->op != BIO_WRITE || !st->can_flush)
        continue;
      else if (pend[i])
        replay_acked (&st->log, pend[i], REPLAY_WRITE, bio->offset, bio->len,
                      0);
      else
        replay_note_write (&st->log, bio->offset, bio->len, bio->buf,
                           bio->flags & BIO_FUA ? REPLAY_DURABLE : 0);
    }
  if (pend != small)
    free (pend);
  return r;
}

static int
nbd_run (struct backend *b, struct bio *v, size_t n)
{
  struct rw_args a = { v, n };

  for (size_t i = 0; i < n; i++)
    v[i].result = -EIO; /* unless an attempt runs */
  link_run (b, rw_attempt, &a);
  for (size_t i = 0; i < n; i++)
    if (v[i].result == -ESHUTDOWN) /* the remote never came back */
      v[i].result = -EIO;
  return backend_trace_run (b, v, n);
}

static int
sync_attempt (struct backend *b, struct nbd_conn *c, void *arg)
{
  (void)arg;
  return flush_conn (b->impl, c);
}

static int
nbd_sync_op (struct backend *b)
{
  return link_run (b, sync_attempt, NULL);
}

/* ---- zero, trim and cache ------------------------------------------ */

enum other_cmd
{
  CMD_ZERO,
  CMD_TRIM,
  CMD_CACHE,
};

/* Run a zero, trim or cache over [off, off + len) in commands of at
 * most MAX_OTHER bytes, all in flight together.  Returns 0 or -errno.
 */
static int
run_other (struct nbd_conn *c, enum other_cmd op, uint64_t off, uint64_t len,
           uint32_t flags)
{
  struct group g;
  int result = 0;
  struct cmd cmd = { &g, &result };

  group_init (&g);
  while (len > 0)
    {
      uint64_t m = len < MAX_OTHER ? len : MAX_OTHER;
      int64_t r;

      group_wait (c, &g, MAX_IN_FLIGHT - 1);
      if (op == CMD_ZERO)
        r = nbd_aio_zero (c->h, m, off, group_add (&cmd), flags);
      else if (op == CMD_TRIM)
        r = nbd_aio_trim (c->h, m, off, group_add (&cmd), flags);
      else
        r = nbd_aio_cache (c->h, m, off, group_add (&cmd), flags);
      if (r == -1)
        {
          cmd_fail (&cmd, last_error (c->h));
          break;
        }
      off += m;
      len -= m;
    }
  group_wait (c, &g, 0);
  group_destroy (&g);
  return result;
}

struct other_args
{
  enum other_cmd op;
  uint64_t off, len;
  uint32_t flags;
};

/* One attempt of a zero, trim or cache; an acknowledged zero or trim
 * goes to the replay log as a write does (rw_attempt).
 */
static int
other_attempt (struct backend *b, struct nbd_conn *c, void *arg)
{
  struct nbd_state *st = b->impl;
  const struct other_args *a = arg;
  int r = run_other (c, a->op, a->off, a->len, a->flags);

  if (r == 0 && a->op != CMD_CACHE && st->can_flush)
    replay_note_other (
        &st->log, a->op == CMD_ZERO ? REPLAY_ZERO : REPLAY_TRIM, a->off, a->len,
        (a->flags & LIBNBD_CMD_FLAG_FUA ? REPLAY_DURABLE : 0)
            | (a->flags & LIBNBD_CMD_FLAG_NO_HOLE ? 0 : REPLAY_MAY_TRIM));
  return r;
}

static int
other_run (struct backend *b, enum other_cmd op, uint64_t off, uint64_t len,
           uint32_t flags)
{
  struct other_args a = { op, off, len, flags };

  return link_run (b, other_attempt, &a);
}

/* The end of a zero or trim with BIO_FUA: counted in the error sequence
 * when done natively (fua) and failed, else made durable by a sync.
 */
static int
finish_fua (struct backend *b, const struct bio *bio, bool fua, int r)
{
  if (r < 0)
    {
      if (fua)
        backend_errseq_record (b, r);
      return r;
    }
  if ((bio->flags & BIO_FUA) && !fua)
    return backend_sync (b);
  return 0;
}

static int
nbd_zero_op (struct backend *b, const struct bio *bio)
{
  struct nbd_state *st = b->impl;
  const bool fua = (bio->flags & BIO_FUA) && st->can_fua;
  uint32_t f = fua ? LIBNBD_CMD_FLAG_FUA : 0;
  int r;

  if (!st->can_zero)
    return -EOPNOTSUPP;
  if (bio->flags & BIO_FAST)
    {
      if (!st->can_fast_zero)
        return -ENOTSUP;
      f |= LIBNBD_CMD_FLAG_FAST_ZERO;
    }
  if (!(bio->flags & BIO_MAY_TRIM))
    f |= LIBNBD_CMD_FLAG_NO_HOLE;
  r = other_run (b, CMD_ZERO, bio->offset, bio->len, f);
  if (r == -ENOTSUP || r == -EOPNOTSUPP)
    return (bio->flags & BIO_FAST) ? -ENOTSUP : -EOPNOTSUPP;
  return finish_fua (b, bio, fua, r);
}

static int
nbd_trim_op (struct backend *b, const struct bio *bio)
{
  struct nbd_state *st = b->impl;
  const bool fua = (bio->flags & BIO_FUA) && st->can_fua;
  int r = 0;

  if (st->can_trim)
    r = other_run (b, CMD_TRIM, bio->offset, bio->len,
                   fua ? LIBNBD_CMD_FLAG_FUA : 0);
  if (r == -EOPNOTSUPP)
    r = 0; /* advisory */
  return finish_fua (b, bio, fua && st->can_trim, r);
}

static int
nbd_cache_op (struct backend *b, uint64_t len, uint64_t off)
{
  struct nbd_state *st = b->impl;
  int r;

  if (!st->can_cache)
    return 0;
  align_out (b, &off, &len);
  r = other_run (b, CMD_CACHE, off, len, 0);
  return r == -EOPNOTSUPP ? 0 : r;
}

/* ---- extents -------------------------------------------------------- */

struct extent
{
  uint64_t len;
  bool hole;
};

DEFINE_VECTOR (extent_vec, struct extent)

/* What one block status command gathers: the extents from pos (where
 * the command started) on, to be reported from want (>= pos) on.
 */
struct status
{
  uint64_t pos, want, end;
  uint64_t count; /* the command's length */
  struct extent_vec ext;
  int err;
};

static int
status_add (struct status *s, uint64_t len, bool hole)
{
  struct extent_vec *x = &s->ext;

  if (x->n > 0 && x->v[x->n - 1].hole == hole)
    {
      x->v[x->n - 1].len += len;
      return 0;
    }
  return extent_vec_append (x, (struct extent){ len, hole });
}

/* libnbd's extent callback (no libnbd call may be made from here). */
static int
status_cb (void *user_data, const char *metacontext, uint64_t offset,
           uint32_t *entries, size_t nr_entries, int *error)
{
  struct status *s = user_data;
  const uint32_t hz = LIBNBD_STATE_HOLE | LIBNBD_STATE_ZERO;
  uint64_t p = offset;

  (void)error;
  if (strcmp (metacontext, LIBNBD_CONTEXT_BASE_ALLOCATION) != 0 || s->ext.n > 0
      || offset != s->pos)
    return 0; /* another context, or more replies than asked for */
  for (size_t i = 0; i + 1 < nr_entries && p < s->end && s->err == 0; i += 2)
    {
      uint64_t a = p > s->want ? p : s->want;
      uint64_t e = p + entries[i] < s->end ? p + entries[i] : s->end;

      /* Only what reads as zero and holds nothing counts as a hole. */
      if (e > a)
        s->err = status_add (s, e - a, (entries[i + 1] & hz) == hz);
      p += entries[i];
    }
  return 0;
}

/* One block status command over s->pos.., waiting for its reply.
 * Returns 0 or -errno.
 */
static int
block_status (struct backend *b, struct nbd_conn *c, void *arg)
{
  struct status *s = arg;
  nbd_extent_callback cb = { .callback = status_cb, .user_data = s };
  struct group g;
  int result = 0;
  struct cmd cmd = { &g, &result };

  (void)b;
  s->ext.n = 0; /* what an earlier attempt gathered */
  s->err = 0;
  group_init (&g);
  if (nbd_aio_block_status (c->h, s->count, s->pos, cb, group_add (&cmd), 0)
      == -1)
    cmd_fail (&cmd, last_error (c->h));
  group_wait (c, &g, 0);
  group_destroy (&g);
  return result;
}

static int
nbd_extents_op (struct backend *b, uint64_t len, uint64_t off,
                backend_extent_fn fn, void *opaque)
{
  struct status s = { .want = off, .end = off + len };
  int r = 0;

  while (s.want < s.end && r == 0)
    {
      uint64_t n = s.end - s.want;

      s.pos = s.want;
      align_out (b, &s.pos, &n);
      s.count = n < MAX_OTHER ? n : MAX_OTHER;
      r = link_run (b, block_status, &s);
      if (r == 0 && s.err < 0)
        r = s.err;
      else if (r == 0 && s.ext.n == 0) /* nothing usable: call the rest data */
        r = fn (opaque, s.want, s.end - s.want, false);
      for (size_t i = 0; i < s.ext.n && r == 0; i++)
        {
          r = fn (opaque, s.want, s.ext.v[i].len, s.ext.v[i].hole);
          s.want += s.ext.v[i].len;
        }
      if (s.ext.n == 0)
        break;
    }
  extent_vec_reset (&s.ext);
  return r;
}

/* ---- open and close ------------------------------------------------- */

/* Connect one handle to uri, asking for base:allocation.  Returns 0 or
 * -errno, with libnbd's message in cfg's errbuf when there is one.
 */
static int
conn_open (const struct backend_config *cfg, struct nbd_conn *c)
{
  struct nbd_handle *h = nbd_create ();
  int r;

#ifdef LIBNBD_HAVE_NBD_SET_PREAD_INITIALIZE
  /* libnbd zeroes every read buffer first, in case a caller ignores a
   * failed read; a failed read here never reaches a client's buffer
   * (nbdkit sends the error instead), so that is a memset of each
   * MiB read for nothing.
   */
  if (h)
    nbd_set_pread_initialize (h, false);
#endif
  if (h && nbd_add_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) != -1
      && nbd_set_uri_allow_local_file (h, true) != -1
      && nbd_connect_uri (h, cfg->path) != -1)
    {
      c->h = h;
      return 0;
    }
  r = -nbdremote_errno (nbd_get_errno ());
  if (r == -EIO && !h)
    r = -ENOMEM;
  if (cfg->errbuf && cfg->errbuf_size > 0)
    snprintf (cfg->errbuf, cfg->errbuf_size, "%s", nbd_get_error ());
  log_debug ("%s: %s", cfg->path, nbd_get_error ());
  nbd_close (h);
  return r;
}

/* c's socket, and on TCP keepalive and a user timeout of io-timeout,
 * so that a remote gone from the network is noticed while idle.
 */
static void
conn_setup (struct nbd_state *st, struct nbd_conn *c)
{
  const int secs = (int)(st->io_timeout / 1000000000);
  const int one = 1, idle = secs / 2 > 0 ? secs / 2 : 1;
  const int intvl = secs / 6 > 0 ? secs / 6 : 1, cnt = 3;
  const unsigned ms = (unsigned)(st->io_timeout / 1000000);
  socklen_t l = sizeof (int);
  int dom;

  c->st = st;
  c->fd = nbd_aio_get_fd (c->h);
  if (c->fd < 0 || getsockopt (c->fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) == -1
      || (dom != AF_INET && dom != AF_INET6))
    return;
  setsockopt (c->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt (c->fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt (c->fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt (c->fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt (c->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

/* What the connection h offers. */
static void
read_caps (struct nbd_handle *h, bool readonly, struct remote_caps *k)
{
  int64_t size = nbd_get_size (h);
  int64_t min = nbd_get_block_size (h, LIBNBD_SIZE_MINIMUM);
  int64_t max = nbd_get_block_size (h, LIBNBD_SIZE_MAXIMUM);

  *k = (struct remote_caps){
    .size = size > 0 ? (uint64_t)size : 0,
    .writable = !readonly && nbd_is_read_only (h) == 0,
    .can_flush = nbd_can_flush (h) == 1,
    .can_fua = nbd_can_fua (h) == 1,
    .can_zero = nbd_can_zero (h) == 1,
    .can_fast_zero = nbd_can_fast_zero (h) == 1,
    .can_trim = nbd_can_trim (h) == 1,
    .can_cache = nbd_can_cache (h) == 1,
    .can_multi_conn = nbd_can_multi_conn (h) == 1,
    .can_extents
    = nbd_can_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == 1,
    .min_block = min > 1 ? (uint64_t)min : 1,
    .max_block = max > 0 ? (uint64_t)max : 0,
  };
}

/* Read what the remote can do from its first connection. */
static void
probe (struct backend *b, const struct backend_config *cfg)
{
  struct nbd_state *st = b->impl;
  struct nbd_handle *h = st->conn[0].h;
  int64_t min = nbd_get_block_size (h, LIBNBD_SIZE_MINIMUM);
  int64_t max = nbd_get_block_size (h, LIBNBD_SIZE_MAXIMUM);

  st->can_flush = nbd_can_flush (h) == 1;
  st->can_fua = nbd_can_fua (h) == 1;
  st->can_zero = nbd_can_zero (h) == 1;
  st->can_fast_zero = nbd_can_fast_zero (h) == 1;
  st->can_trim = nbd_can_trim (h) == 1;
  st->can_cache = nbd_can_cache (h) == 1;

  b->caps.writable = !cfg->readonly && nbd_is_read_only (h) == 0;
  b->caps.can_punch = st->can_trim;
  b->caps.can_extents
      = nbd_can_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
  b->caps.align = min > 1 ? (uint32_t)min : 1;
  b->caps.sector = min > 512 ? (uint32_t)min : 512;
  b->direct = b->caps.align > 1;
  st->max_io = max > 0 && (uint64_t)max < MAX_IO ? (uint64_t)max : MAX_IO;
  st->max_io &= ~(uint64_t)(b->caps.align - 1);
  read_caps (h, cfg->readonly, &st->caps);
}

/* ---- the keeper: reconnecting ---------------------------------------- */

/* Drive h one step towards what it waits for, at most until deadline.
 * Returns 0, -ETIMEDOUT, -ECANCELED (the keeper is asked to end) or
 * -EIO (the connection died).
 */
static int
drive (struct nbd_state *st, struct nbd_handle *h, uint64_t deadline)
{
  struct pollfd p = { .fd = nbd_aio_get_fd (h) };
  unsigned dir = nbd_aio_get_direction (h);
  uint64_t now = now_ns ();
  int ms;

  pthread_mutex_lock (&st->lock);
  ms = st->quit ? -1 : 0;
  pthread_mutex_unlock (&st->lock);
  if (ms < 0)
    return -ECANCELED;
  if (!conn_live (h) || p.fd < 0)
    return -EIO;
  if (now >= deadline)
    return -ETIMEDOUT;
  ms = (deadline - now) / 1000000 < 100 ? (int)((deadline - now) / 1000000)
                                        : 100;
  p.events = (dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0)
             | (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0);
  if (poll (&p, 1, ms) <= 0)
    return 0;
  if ((dir & LIBNBD_AIO_DIRECTION_READ)
      && (p.revents & (POLLIN | POLLHUP | POLLERR)))
    nbd_aio_notify_read (h);
  else if ((dir & LIBNBD_AIO_DIRECTION_WRITE)
           && (p.revents & (POLLOUT | POLLHUP | POLLERR)))
    nbd_aio_notify_write (h);
  return 0;
}

/* Connect c anew, within io-timeout.  Returns 0 or -errno. */
static int
conn_connect (struct nbd_state *st, struct nbd_conn *c)
{
  const uint64_t deadline = now_ns () + st->io_timeout;
  struct nbd_handle *h = nbd_create ();
  int r = -EIO;

  if (!h)
    return -ENOMEM;
#ifdef LIBNBD_HAVE_NBD_SET_PREAD_INITIALIZE
  nbd_set_pread_initialize (h, false);
#endif
  if (nbd_add_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) != -1
      && nbd_set_uri_allow_local_file (h, true) != -1
      && nbd_aio_connect_uri (h, st->uri) != -1)
    for (r = 0; r == 0 && nbd_aio_is_connecting (h);)
      r = drive (st, h, deadline);
  if (r == 0 && nbd_aio_is_ready (h))
    {
      c->h = h;
      conn_setup (st, c);
      return 0;
    }
  log_debug ("nbd: %s: reconnecting: %s", st->uri,
             r == 0 || r == -EIO ? nbd_get_error () : strerror (-r));
  nbd_close (h);
  return r < 0 ? r : -EIO;
}

/* Run the command cookie on h to its end, within the deadline. */
static int
wait_cookie (struct nbd_state *st, struct nbd_handle *h, int64_t cookie,
             uint64_t deadline)
{
  int r = 0, done = 0;

  if (cookie == -1)
    return -EIO;
  while (r == 0 && (done = nbd_aio_command_completed (h, cookie)) == 0)
    r = drive (st, h, deadline);
  if (r == 0 && done == -1)
    r = -remote_errno (nbd_get_errno ());
  return r;
}

/* r, the result of a command on h, as the replay sees it: 0, -errno
 * (the remote refused it) or REPLAY_GONE (the connection is lost, it
 * did not answer, it is going away, or the keeper is asked to end).
 */
static int
replay_result (struct nbd_handle *h, int r)
{
  if (r == 0)
    return 0;
  if (r == -ECANCELED || r == -ETIMEDOUT || r == -ESHUTDOWN || !conn_live (h))
    return REPLAY_GONE;
  return r;
}

/* Replay one command of the log to the new connection (the keeper's
 * replay_fn).  A zero goes without FAST_ZERO (the remote may refuse
 * that at any time) and with NO_HOLE unless the logged one could trim.
 */
static int
replay_one (void *opaque, const struct replay_cmd *c)
{
  struct nbd_state *st = opaque;
  struct nbd_handle *h = st->conn[0].h;
  int64_t cookie;

  switch (c->op)
    {
    case REPLAY_ZERO:
      cookie = nbd_aio_zero (
          h, c->len, c->off, NBD_NULL_COMPLETION,
          c->flags & REPLAY_MAY_TRIM ? 0 : LIBNBD_CMD_FLAG_NO_HOLE);
      break;
    case REPLAY_TRIM:
      cookie = nbd_aio_trim (h, c->len, c->off, NBD_NULL_COMPLETION, 0);
      break;
    default:
      cookie
          = nbd_aio_pwrite (h, c->data, c->len, c->off, NBD_NULL_COMPLETION, 0);
      break;
    }
  return replay_result (
      h, wait_cookie (st, h, cookie, now_ns () + st->io_timeout));
}

/* Before anything else reaches the new connection: the log of what the
 * remote acknowledged since its last flush, then a flush.  What could
 * not be kept, or was refused now, fails the next FLUSH instead (the
 * error sequence), once; only a lost connection fails the attempt.
 */
static int
replay_all (struct nbd_state *st)
{
  const uint64_t mark = replay_mark (&st->log);
  const bool over = replay_lost (&st->log);
  struct nbd_handle *h = st->conn[0].h;
  bool lost = false;
  int r;

  if (!st->can_flush)
    return 0;
  r = replay_run (&st->log, st->max_io, MAX_OTHER, replay_one, st, &lost);
  if (r == 0)
    {
      r = replay_result (
          h, wait_cookie (st, h, nbd_aio_flush (h, NBD_NULL_COMPLETION, 0),
                          now_ns () + st->io_timeout));
      if (r == REPLAY_GONE)
        r = -ENOTCONN;
      else if (r < 0)
        lost = true;
    }
  if (r == -ENOTCONN)
    return -EIO;
  if (lost)
    {
      backend_errseq_record (st->b, -EIO);
      if (over)
        log_notice ("nbd: %s: %" PRIu64 " bytes of writes the remote "
                    "acknowledged before it went away were %s: the next "
                    "flush fails",
                    st->uri, replay_forget_lost (&st->log),
                    st->replay_off ? "not kept (nbd-replay=off)"
                                   : "too many to keep");
      else
        log_notice ("nbd: %s: the remote refused writes it had "
                    "acknowledged before it went away: the next flush "
                    "fails",
                    st->uri);
    }
  replay_forget_lost (&st->log);
  replay_flushed (&st->log, mark);
  return 0;
}

/* Close every connection (no request is active, no poller runs). */
static void
conns_close (struct nbd_state *st)
{
  for (size_t i = 0; i < st->nconn; i++)
    if (st->conn[i].h)
      {
        nbd_close (st->conn[i].h);
        st->conn[i].h = NULL;
        st->conn[i].fd = -1;
      }
}

/* One reconnect attempt: every connection, the check, the replay.
 * Returns 0, -EPROTO (the remote is not what it was) or -errno.
 */
static int
reopen (struct nbd_state *st)
{
  struct remote_caps now;
  char why[160];
  int r = 0;

  conns_close (st);
  for (size_t i = 0; i < st->nconn && r == 0; i++)
    r = conn_connect (st, &st->conn[i]);
  if (r < 0)
    return r;
  read_caps (st->conn[0].h, !st->caps.writable, &now);
  if (reconnect_caps_check (&st->caps, &now, why, sizeof why))
    {
      log_notice ("nbd: %s: the remote is back but %s: not using it; every "
                  "request fails until ext4lazy is restarted",
                  st->uri, why);
      return -EPROTO;
    }
  if (now.size > st->caps.size)
    log_notice ("nbd: %s: the remote is back with %" PRIu64 " bytes, was "
                "%" PRIu64 ": the export keeps its size until ext4lazy is "
                "restarted",
                st->uri, now.size, st->caps.size);
  return replay_all (st);
}

/* Wait ms milliseconds, or less when the keeper is asked to end.
 * Returns -ECANCELED if it is, else 0.
 */
static int
keeper_sleep (struct nbd_state *st, unsigned ms)
{
  struct timespec ts = to_timespec (now_ns () + (uint64_t)ms * 1000000);
  bool quit;

  pthread_mutex_lock (&st->lock);
  while (!st->quit && pthread_cond_timedwait (&st->cond, &st->lock, &ts) == 0)
    ;
  quit = st->quit;
  pthread_mutex_unlock (&st->lock);
  return quit ? -ECANCELED : 0;
}

/* Reconnect, with backoff, until it works, the remote is found
 * different, or the keeper is asked to end.  Returns 0, -EPROTO or
 * -ECANCELED.
 */
static int
reconnect (struct nbd_state *st)
{
  int r = -EIO;

  for (size_t i = 0; i < st->nconn; i++)
    poller_stop (&st->conn[i]);
  /* A remote that answers ESHUTDOWN again at once (to everything) is
   * not reconnected to at once, each time.  (lost_shutdown was set
   * under st->lock, which the keeper took since.)
   */
  st->relinks
      = st->lost_shutdown && st->up_at && now_ns () - st->up_at < RELINK_NS
            ? st->relinks + 1
            : 0;
  for (unsigned attempt = st->relinks;
       r != 0 && r != -EPROTO && r != -ECANCELED; attempt++)
    {
      r = attempt > 0 ? keeper_sleep (st, reconnect_backoff_ms (attempt - 1))
                      : 0;
      if (r == 0)
        r = reopen (st);
    }
  if (r < 0)
    conns_close (st);
  for (size_t i = 0; r == 0 && i < st->nconn; i++)
    r = poller_start (&st->conn[i]);
  if (r == 0)
    {
      st->up_at = now_ns ();
      log_notice ("nbd: %s: reconnected", st->uri);
    }
  return r;
}

/* The probe of an idle remote: one small read on the first
 * connection, counted nowhere.  A remote told to stop answers it
 * ESHUTDOWN (nbdkit after SIGTERM), and the plugin then leaves it,
 * which lets it exit: an idle connection would otherwise keep it
 * waiting until the next request, or until it is killed.  A dead
 * connection is found too.  Called by the keeper without st->lock.
 */
static void
probe_idle (struct nbd_state *st)
{
  const uint64_t len = st->b->caps.sector;
  struct nbd_conn *c = &st->conn[0];
  struct group g;
  int result = 0;
  struct cmd cmd = { &g, &result };
  void *buf = st->b->size >= len ? malloc (len) : NULL;

  pthread_mutex_lock (&st->lock);
  if (!buf || st->quit || st->state != LINK_UP)
    {
      pthread_mutex_unlock (&st->lock);
      free (buf);
      return;
    }
  st->active++;
  c->active++;
  pthread_mutex_unlock (&st->lock);
  group_init (&g);
  if (nbd_aio_pread (c->h, buf, len, 0, group_add (&cmd), 0) == -1)
    cmd_fail (&cmd, last_error (c->h));
  group_wait (c, &g, 0);
  group_destroy (&g);
  link_check (st, c, result);
  link_leave (st, c);
  free (buf);
}

/* With st->lock held: wait for a change of the link, at most PROBE_NS
 * while it is up.  True when it stayed up and idle all that time (no
 * request begun, none active): time for probe_idle.
 */
static bool
keeper_wait (struct nbd_state *st)
{
  const uint64_t begun = st->begun;
  struct timespec ts = to_timespec (now_ns () + PROBE_NS);

  if (st->state != LINK_UP)
    {
      pthread_cond_wait (&st->cond, &st->lock);
      return false;
    }
  if (pthread_cond_timedwait (&st->cond, &st->lock, &ts) != ETIMEDOUT)
    return false;
  return !st->quit && st->state == LINK_UP && st->active == 0
         && st->begun == begun;
}

/* The keeper thread: while the remote is lost, end what is in flight
 * on the old connections, wait for the requests to leave, reconnect;
 * while it is up and idle, probe it every PROBE_NS.
 */
static void *
keeper_loop (void *arg)
{
  struct nbd_state *st = arg;

  pthread_mutex_lock (&st->lock);
  for (;;)
    {
      int r;

      while (!st->quit && (st->state != LINK_DOWN || st->active > 0))
        {
          if (st->state == LINK_DOWN)
            for (size_t i = 0; i < st->nconn; i++)
              conn_kill (&st->conn[i]);
          if (keeper_wait (st))
            {
              pthread_mutex_unlock (&st->lock);
              probe_idle (st);
              pthread_mutex_lock (&st->lock);
            }
        }
      if (st->quit)
        break;
      pthread_mutex_unlock (&st->lock);
      r = reconnect (st);
      pthread_mutex_lock (&st->lock);
      if (r == 0)
        st->state = LINK_UP;
      else if (r != -ECANCELED)
        st->state = LINK_FAILED;
      pthread_cond_broadcast (&st->cond);
    }
  pthread_mutex_unlock (&st->lock);
  return NULL;
}

static int
keeper_start (struct nbd_state *st)
{
  int r;

  if (st->keeping)
    return 0;
  st->quit = false;
  r = pthread_create (&st->keeper, NULL, keeper_loop, st);
  if (r != 0)
    return -r;
  st->keeping = true;
  return 0;
}

static void
keeper_stop (struct nbd_state *st)
{
  if (!st->keeping)
    return;
  pthread_mutex_lock (&st->lock);
  st->quit = true;
  pthread_cond_broadcast (&st->cond);
  pthread_mutex_unlock (&st->lock);
  pthread_join (st->keeper, NULL);
  st->keeping = false;
}

/* Connect to cfg->path (an NBD URI) and probe the export. */
static int
nbd_open_op (const struct backend_config *cfg, struct backend *b)
{
  struct nbd_state *st = calloc (1, sizeof *st);
  int64_t size;
  int r;

  if (!st)
    return -ENOMEM;
  b->impl = st;
  st->b = b;
  st->io_timeout = cfg->io_timeout_ns ? cfg->io_timeout_ns : DEFAULT_IO_TIMEOUT;
  pthread_mutex_init (&st->lock, NULL);
  cond_init (&st->cond);
  /* nbd-replay=off: a log that keeps nothing, so that every write
   * acknowledged since the last flush counts as lost.
   */
  st->replay_off = cfg->nbd_replay_off;
  replay_init (&st->log, st->replay_off ? 0 : REPLAY_MAX);
  for (size_t i = 0; i < NBD_CONNS; i++)
    {
      st->conn[i].wake = -1;
      st->conn[i].fd = -1;
      st->conn[i].st = st;
      pthread_mutex_init (&st->conn[i].drive, NULL);
    }
  st->uri = strdup (cfg->path);
  if (!st->uri)
    return -ENOMEM;

  r = conn_open (cfg, &st->conn[0]);
  if (r < 0)
    return r;
  conn_setup (st, &st->conn[0]);
  st->nconn = 1;
  size = nbd_get_size (st->conn[0].h);
  if (size == -1)
    return last_error (st->conn[0].h);
  b->size = size;
  probe (b, cfg);

  /* Several connections only where a flush on one covers them all. */
  if (nbd_can_multi_conn (st->conn[0].h) == 1)
    for (; st->nconn < NBD_CONNS; st->nconn++)
      {
        r = conn_open (cfg, &st->conn[st->nconn]);
        if (r < 0)
          return r;
        conn_setup (st, &st->conn[st->nconn]);
      }
  log_debug ("nbd: %s: %" PRIu64 " bytes, %zu connection(s), flush=%d "
             "fua=%d zero=%d fast_zero=%d trim=%d cache=%d extents=%d "
             "align=%" PRIu32 "%s",
             cfg->path, b->size, st->nconn, st->can_flush, st->can_fua,
             st->can_zero, st->can_fast_zero, st->can_trim, st->can_cache,
             b->caps.can_extents, b->caps.align,
             b->caps.writable ? "" : ", read-only");
  for (size_t i = 0; i < st->nconn; i++)
    {
      r = poller_start (&st->conn[i]);
      if (r < 0)
        return r;
    }
  return keeper_start (st);
}

static int
nbd_init (struct backend *b)
{
  (void)b;
  return 0;
}

static void
nbd_fini (struct backend *b)
{
  struct nbd_state *st = b->impl;

  if (!st)
    return;
  /* No thread may be submitting now.  A clean disconnect first, so
   * that the remote does not log an abrupt close.
   */
  keeper_stop (st);
  for (size_t i = 0; i < NBD_CONNS; i++)
    {
      struct nbd_conn *c = &st->conn[i];

      poller_stop (c);
      if (c->h)
        {
          nbd_shutdown (c->h, 0);
          nbd_close (c->h);
        }
      if (c->wake != -1)
        close (c->wake);
      pthread_mutex_destroy (&c->drive);
    }
  replay_destroy (&st->log);
  pthread_cond_destroy (&st->cond);
  pthread_mutex_destroy (&st->lock);
  free (st->uri);
  free (st);
  b->impl = NULL;
}

/* Stop the pollers before a fork, start them again after it. */
static void
nbd_suspend (struct backend *b)
{
  struct nbd_state *st = b->impl;

  keeper_stop (st);
  for (size_t i = 0; i < st->nconn; i++)
    poller_stop (&st->conn[i]);
}

static int
nbd_resume (struct backend *b, char *errbuf, size_t size)
{
  struct nbd_state *st = b->impl;

  int r;

  for (size_t i = 0; i < st->nconn; i++)
    {
      r = poller_start (&st->conn[i]);

      if (r < 0)
        {
          if (errbuf && size > 0)
            snprintf (errbuf, size, "starting the NBD poller thread: %s",
                      strerror (-r));
          return r;
        }
    }
  r = keeper_start (st);
  if (r < 0 && errbuf && size > 0)
    snprintf (errbuf, size, "starting the NBD keeper thread: %s",
              strerror (-r));
  return r;
}

/* Mirrors backend_psync_ops and backend_uring_ops, with the optional
 * members of a store that is not a file descriptor.
 */
const struct backend_ops backend_nbd_ops = {
  .name = "nbd",
  .kind = BACKEND_NBD,
  .open = nbd_open_op,
  .init = nbd_init,
  .fini = nbd_fini,
  .run = nbd_run,
  .sync = nbd_sync_op,
  .zero = nbd_zero_op,
  .trim = nbd_trim_op,
  .cache = nbd_cache_op,
  .extents = nbd_extents_op,
  .suspend = nbd_suspend,
  .resume = nbd_resume,
};
