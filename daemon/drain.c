/* SPDX-License-Identifier: BSD-3-Clause */
/* drain.c --- count the requests in the engine, close the gate to new
 * ones, and the drain built on it (drain.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "drain.h"
#include "log.h"

/* A request passes with two atomic operations and no lock: it counts
 * itself in in_flight, then reads closed; drain_close sets closed, then
 * reads in_flight.  Both sequentially consistent, so that when
 * drain_close sees no request, every later one sees the gate closed
 * (and takes itself out again, and waits under the lock).
 *
 * lock protects draining and hooks, and orders the changes of closed
 * (made under it) with the waits on cond, which is signalled when the
 * gate opens and when the last request leaves a closed gate.
 */
struct drain
{
  pthread_mutex_t lock;
  pthread_cond_t cond;            /* on CLOCK_MONOTONIC */
  atomic_uint_fast64_t in_flight; /* between drain_enter and drain_leave */
  atomic_bool closed;
  bool draining; /* a drain_run is under way */
  struct drain_hooks hooks;
};

int
drain_new (struct drain **out)
{
  struct drain *g = calloc (1, sizeof *g);
  pthread_condattr_t ca;

  if (!g)
    return -ENOMEM;
  pthread_mutex_init (&g->lock, NULL);
  pthread_condattr_init (&ca);
  pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
  pthread_cond_init (&g->cond, &ca);
  pthread_condattr_destroy (&ca);
  *out = g;
  return 0;
}

void
drain_free (struct drain *g)
{
  if (!g)
    return;
  pthread_cond_destroy (&g->cond);
  pthread_mutex_destroy (&g->lock);
  free (g);
}

void
drain_leave (struct drain *g)
{
  if (atomic_fetch_sub (&g->in_flight, 1) == 1 && atomic_load (&g->closed))
    {
      pthread_mutex_lock (&g->lock);
      pthread_cond_broadcast (&g->cond);
      pthread_mutex_unlock (&g->lock);
    }
}

void
drain_enter (struct drain *g)
{
  for (;;)
    {
      atomic_fetch_add (&g->in_flight, 1);
      if (!atomic_load (&g->closed))
        return;
      drain_leave (g);
      pthread_mutex_lock (&g->lock);
      while (atomic_load (&g->closed))
        pthread_cond_wait (&g->cond, &g->lock);
      pthread_mutex_unlock (&g->lock);
    }
}

int
drain_close (struct drain *g, uint64_t timeout_ns, uint64_t *left)
{
  struct timespec until;
  uint64_t n;
  int r = 0;

  clock_gettime (CLOCK_MONOTONIC, &until);
  until.tv_sec += timeout_ns / 1000000000;
  until.tv_nsec += timeout_ns % 1000000000;
  if (until.tv_nsec >= 1000000000)
    {
      until.tv_sec++;
      until.tv_nsec -= 1000000000;
    }
  pthread_mutex_lock (&g->lock);
  if (atomic_load (&g->closed))
    {
      pthread_mutex_unlock (&g->lock);
      return -EALREADY;
    }
  atomic_store (&g->closed, true);
  n = atomic_load (&g->in_flight);
  log_debug ("the gate is closed, %" PRIu64 " request%s in flight", n,
             n == 1 ? "" : "s");
  while ((n = atomic_load (&g->in_flight)) > 0 && r != ETIMEDOUT)
    r = pthread_cond_timedwait (&g->cond, &g->lock, &until);
  if (left)
    *left = n;
  if (n > 0)
    {
      atomic_store (&g->closed, false);
      pthread_cond_broadcast (&g->cond);
      r = -ETIMEDOUT;
    }
  else
    r = 0;
  pthread_mutex_unlock (&g->lock);
  return r;
}

void
drain_open (struct drain *g)
{
  pthread_mutex_lock (&g->lock);
  atomic_store (&g->closed, false);
  pthread_cond_broadcast (&g->cond);
  pthread_mutex_unlock (&g->lock);
}

uint64_t
drain_in_flight (struct drain *g)
{
  return atomic_load (&g->in_flight);
}

void
drain_set_hooks (struct drain *g, const struct drain_hooks *h)
{
  pthread_mutex_lock (&g->lock);
  g->hooks = *h;
  pthread_mutex_unlock (&g->lock);
}

/* Claim the drain: false if one is under way.  *h gets the hooks. */
static bool
drain_claim (struct drain *g, struct drain_hooks *h)
{
  bool ok;

  pthread_mutex_lock (&g->lock);
  ok = !g->draining;
  g->draining = true;
  *h = g->hooks;
  pthread_mutex_unlock (&g->lock);
  return ok;
}

static void
drain_unclaim (struct drain *g)
{
  pthread_mutex_lock (&g->lock);
  g->draining = false;
  pthread_mutex_unlock (&g->lock);
}

/* The drain failed: serve on, say why, count it. */
static int
drain_failed (struct engine *e, int r, const char *why)
{
  struct drain *g = engine_gate (e);

  drain_open (g);
  drain_unclaim (g);
  engine_drain_failed (e);
  log_notice ("drain failed, serving on: %s", why);
  return r;
}

int
drain_run (struct engine *e, uint64_t timeout_ns, char *why, size_t size)
{
  struct drain *g = engine_gate (e);
  struct drain_hooks h;
  uint64_t left = 0;
  int r;

  if (!drain_claim (g, &h))
    {
      snprintf (why, size, "a drain is already under way");
      return -EALREADY;
    }
  if (timeout_ns == 0)
    timeout_ns = DRAIN_DEFAULT_TIMEOUT_NS;
  r = drain_close (g, timeout_ns, &left);
  if (r < 0)
    {
      snprintf (why, size,
                "%" PRIu64 " request%s still in the server after %g s", left,
                left == 1 ? "" : "s", timeout_ns / 1e9);
      return drain_failed (e, r, why);
    }
  r = engine_drain (e);
  if (r < 0)
    {
      snprintf (why, size, "writing back held blocks and flushing: %s",
                strerror (-r));
      return drain_failed (e, r, why);
    }
  if (h.handover)
    h.handover (h.opaque);
  engine_release (e);
  log_notice ("drained: every hold written back, the store flushed and "
              "released; exiting");
  if (h.drained)
    h.drained (h.opaque);
  return 0;
}
