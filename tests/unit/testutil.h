/* SPDX-License-Identifier: BSD-3-Clause */
/* testutil.h --- shell helpers shared by the unit tests that make
 * images with mkfs.ext4, debugfs and sfdisk, and a gate for the
 * concurrency tests.
 */
#ifndef EXT4LAZY_TESTUTIL_H
#define EXT4LAZY_TESTUTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Run a shell command (output discarded); its exit status, or -1. */
extern int sh (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

/* Run a shell command and return its standard output (free it). */
extern char *capture (const char *fmt, ...)
    __attribute__ ((format (printf, 1, 2)));

/* A gate that threads of the code under test (a store hook, a control
 * handler) stop at, as at a store that stopped answering, until the
 * test opens it: gate_pass stops there, gate_wait waits until n threads
 * have come, gate_open lets them all go (and every later one through),
 * gate_close makes it a new gate.
 */
struct gate
{
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int in;
  bool open;
};
#define GATE_INIT                                                              \
  { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false }

extern void gate_pass (struct gate *g);
extern void gate_wait (struct gate *g, int n);
extern void gate_open (struct gate *g);
extern void gate_close (struct gate *g);

/* A request run on a thread of its own (the call_* functions, given to
 * pthread_create): its engine, offset and buffer, its result, and
 * whether it is done.
 */
struct engine;
struct call
{
  struct engine *e;
  uint64_t off;
  char *buf;
  int r;
  atomic_bool done;
};

extern void *call_flush (void *c);
extern void *call_write (void *c); /* 4096 bytes of buf at off */
extern void *call_zero (void *c);  /* 4096 bytes at off, FUA */
/* A read of 4096 bytes at off into buf, the stats, which must be current
 * (not the hold figures kept last: else -EBUSY), and a FLUSH.
 */
extern void *call_read_stats_flush (void *c);
/* Wait up to secs for c to be done (a generous bound: the callers wait
 * for what must not be held up).
 */
extern bool call_done_within (struct call *c, int secs);
/* The engine's re-reads of the layout so far (its stats). */
extern uint64_t layout_rereads (struct engine *e);

#endif /* EXT4LAZY_TESTUTIL_H */
