/* SPDX-License-Identifier: BSD-3-Clause */
/* test-drain.c --- the gate and the drain (drain.h): a closed gate
 * lets nothing in and waits for what is in; it opens again on a
 * timeout; many threads passing it while it closes and opens never
 * see a request inside a closed gate.  The drain on an engine writes
 * the holds back, releases the store's lock and calls its hooks in
 * order; when the write-back fails it serves on, counted, the holds
 * kept; one drain runs at a time.
 *
 * The engine's image is testengine.c's (setup): a time-only block comes
 * from debugfs changing f1's atime on a copy.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "drain.h"
#include "engine.h"
#include "stats.h"
#include "storelock.h"
#include "testengine.h"
#include "testutil.h"

#define NS 1000000000ull

static void
pause_ms (long ms)
{
  nanosleep (&(struct timespec){ ms / 1000, (ms % 1000) * 1000000L }, NULL);
}

/* ---- the gate alone ---------------------------------------------------- */

Test (drain, close_waits_for_what_is_in_and_lets_nothing_in)
{
  struct drain *g;
  uint64_t left = 99;

  cr_assert_eq (drain_new (&g), 0);
  drain_enter (g);
  drain_enter (g);
  cr_assert_eq (drain_in_flight (g), 2);
  drain_leave (g);
  /* One still in: the close times out and opens the gate again. */
  cr_assert_eq (drain_close (g, NS / 20, &left), -ETIMEDOUT);
  cr_assert_eq (left, 1);
  drain_enter (g); /* open again: does not wait */
  cr_assert_eq (drain_in_flight (g), 2);
  drain_leave (g);
  drain_leave (g);
  cr_assert_eq (drain_close (g, NS, &left), 0);
  cr_assert_eq (left, 0);
  cr_assert_eq (drain_close (g, NS, NULL), -EALREADY);
  drain_open (g);
  drain_free (g);
}

struct passer
{
  struct drain *g;
  atomic_bool passed;
};

static void *
pass_once (void *p)
{
  struct passer *ps = p;

  drain_enter (ps->g);
  atomic_store (&ps->passed, true);
  drain_leave (ps->g);
  return NULL;
}

Test (drain, a_closed_gate_holds_requests_until_it_opens)
{
  struct passer ps = { 0 };
  pthread_t t;

  cr_assert_eq (drain_new (&ps.g), 0);
  cr_assert_eq (drain_close (ps.g, NS, NULL), 0);
  cr_assert_eq (pthread_create (&t, NULL, pass_once, &ps), 0);
  pause_ms (100);
  cr_assert_not (atomic_load (&ps.passed), "passed a closed gate");
  cr_assert_eq (drain_in_flight (ps.g), 0, "counted while waiting");
  drain_open (ps.g);
  pthread_join (t, NULL);
  cr_assert (atomic_load (&ps.passed));
  drain_free (ps.g);
}

/* Many threads pass the gate over and over while another closes and
 * opens it: whenever drain_close has returned 0, nothing is inside.
 */
#define PASSERS 8
#define ROUNDS 200

struct crowd
{
  struct drain *g;
  atomic_int inside;     /* threads between enter and leave */
  atomic_bool shut;      /* drain_close returned 0, not opened yet */
  atomic_int violations; /* inside a shut gate */
  atomic_bool stop;
  atomic_long passes;
};

static void *
crowd_pass (void *p)
{
  struct crowd *c = p;

  while (!atomic_load (&c->stop))
    {
      drain_enter (c->g);
      atomic_fetch_add (&c->inside, 1);
      if (atomic_load (&c->shut))
        atomic_fetch_add (&c->violations, 1);
      atomic_fetch_add (&c->passes, 1);
      atomic_fetch_sub (&c->inside, 1);
      drain_leave (c->g);
    }
  return NULL;
}

Test (drain, many_threads_never_inside_a_closed_gate)
{
  struct crowd c = { 0 };
  pthread_t t[PASSERS];
  long before;

  cr_assert_eq (drain_new (&c.g), 0);
  for (int i = 0; i < PASSERS; i++)
    cr_assert_eq (pthread_create (&t[i], NULL, crowd_pass, &c), 0);
  for (int r = 0; r < ROUNDS; r++)
    {
      cr_assert_eq (drain_close (c.g, 10 * NS, NULL), 0);
      atomic_store (&c.shut, true);
      before = atomic_load (&c.passes);
      /* (drain_in_flight may count a thread for a moment: one that
       * found the gate closed and is taking itself out again.)
       */
      cr_assert_eq (atomic_load (&c.inside), 0);
      sched_yield ();
      cr_assert_eq (atomic_load (&c.passes), before, "passed while closed");
      atomic_store (&c.shut, false);
      drain_open (c.g);
      sched_yield ();
    }
  atomic_store (&c.stop, true);
  for (int i = 0; i < PASSERS; i++)
    pthread_join (t[i], NULL);
  cr_assert_eq (atomic_load (&c.violations), 0);
  cr_assert_eq (drain_in_flight (c.g), 0);
  drain_free (c.g);
}

/* ---- the drain on an engine -------------------------------------------- */

static atomic_bool fail_writes;
static char calls[8]; /* the hooks called, in order: 'h', 'd' */
static size_t ncalls;

static void
setup_engine (void)
{
  setup ();
  atomic_store (&fail_writes, false);
  ncalls = 0;
  memset (calls, 0, sizeof calls);
}

TestSuite (drain_engine, .init = setup_engine, .fini = teardown, .timeout = 60);

static int
faulty (const struct bio *bio)
{
  return atomic_load (&fail_writes) && bio->op != BIO_READ ? -EIO : 0;
}

static void
on_handover (void *opaque)
{
  cr_assert_eq (opaque, img);
  calls[ncalls++] = 'h';
}

static void
on_drained (void *opaque)
{
  cr_assert_eq (opaque, img);
  calls[ncalls++] = 'd';
}

/* An engine on img (policy=strict), started, with the hooks above. */
static struct engine *
drain_engine (void)
{
  struct engine *e;
  const struct drain_hooks h = { on_handover, on_drained, img };

  fault_hook = faulty;
  e = open_engine (0, 0);
  cr_assert_eq (engine_start (e, NULL, 0), 0);
  drain_set_hooks (engine_gate (e), &h);
  return e;
}

/* Does another open file description see a writer's lock on img? */
static bool
locked (void)
{
  int fd = open (img, O_RDWR | O_CLOEXEC);
  int r;

  cr_assert_geq (fd, 0);
  r = storelock_test (fd, true);
  close (fd);
  return r == -EBUSY;
}

static uint64_t
drain_failures (struct engine *e)
{
  struct stats_snapshot s;
  uint64_t n;

  cr_assert_eq (engine_stats (e, &s), 0);
  n = s.drain_failures;
  engine_stats_free (&s);
  return n;
}

Test (drain_engine, writes_back_releases_and_calls_the_hooks)
{
  struct engine *e = drain_engine ();
  char held[4096], orig[4096], buf[4096], why[256] = "";
  uint64_t off = hold_atime (e, "f1", held, orig);

  cr_assert (locked ());

  cr_assert_eq (drain_run (e, 0, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq (calls, "hd");
  store_block (off, buf);
  cr_assert_eq (memcmp (buf, held, 4096), 0, "the hold is on the store");
  cr_assert_not (locked (), "the lock is released");
  /* Nothing reaches the store any more; no second drain. */
  cr_assert_eq (engine_pread (e, buf, 4096, 0), -EIO);
  cr_assert_eq (drain_run (e, 0, why, sizeof why), -EALREADY);
  cr_assert_eq (drain_failures (e), 0);
  engine_close (e);
}

Test (drain_engine, a_failed_writeback_serves_on)
{
  struct engine *e = drain_engine ();
  char held[4096], orig[4096], buf[4096], why[256] = "";
  uint64_t off = hold_atime (e, "f1", held, orig);

  atomic_store (&fail_writes, true);
  cr_assert_eq (drain_run (e, 0, why, sizeof why), -EIO);
  cr_assert_not_null (strstr (why, "writing back"), "%s", why);
  cr_assert_str_eq (calls, "", "no hook called");
  cr_assert_eq (drain_failures (e), 1);
  cr_assert (locked (), "the lock is kept");
  /* The gate is open: requests pass and see the hold. */
  cr_assert_eq (engine_pread (e, buf, 4096, off), 0);
  cr_assert_eq (memcmp (buf, held, 4096), 0);

  atomic_store (&fail_writes, false);
  cr_assert_eq (drain_run (e, 0, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq (calls, "hd");
  store_block (off, buf);
  cr_assert_eq (memcmp (buf, held, 4096), 0);
  engine_close (e);
}

/* A store lost to another writer (fenced): nothing can be written, the
 * holds are gone; the drain ends the server at once.
 */
Test (drain_engine, a_fenced_store_drains_at_once)
{
  struct engine *e = drain_engine ();
  char held[4096], orig[4096], buf[4096], why[256] = "";
  uint64_t off = hold_atime (e, "f1", held, orig);

  engine_fence (e, "lost to another writer");
  atomic_store (&fail_writes, true); /* nothing may be written */
  cr_assert_eq (drain_run (e, 0, why, sizeof why), 0, "%s", why);
  cr_assert_str_eq (calls, "hd");
  cr_assert_eq (drain_failures (e), 0);
  store_block (off, buf);
  cr_assert_eq (memcmp (buf, orig, 4096), 0, "the hold was discarded");
  engine_close (e);
}

/* A request stuck in the engine: the drain gives up and serves on. */
Test (drain_engine, a_request_that_does_not_finish_serves_on)
{
  struct engine *e = drain_engine ();
  struct drain *g = engine_gate (e);
  struct passer ps = { .g = g };
  char why[256] = "";
  pthread_t t;

  drain_enter (g); /* a request in the engine */
  cr_assert_eq (drain_run (e, NS / 10, why, sizeof why), -ETIMEDOUT);
  cr_assert_str_eq (why, "1 request still in the server after 0.1 s");
  cr_assert_eq (drain_failures (e), 1);
  cr_assert_str_eq (calls, "");
  cr_assert (pthread_create (&t, NULL, pass_once, &ps) == 0);
  pthread_join (t, NULL); /* the gate is open again */
  cr_assert (atomic_load (&ps.passed));
  drain_leave (g);
  cr_assert (locked ());
  engine_close (e);
}
