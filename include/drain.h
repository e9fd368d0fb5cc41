/* SPDX-License-Identifier: BSD-3-Clause */
/* drain.h --- the gate in front of the engine, and the drain that
 * closes it to hand the store to the next server.
 *
 * Every client request (and every new connection) passes the gate:
 * drain_enter before it reaches the engine, drain_leave once it is
 * answered.  The gate counts the requests between the two.  Closed, it
 * lets nothing new in: drain_enter waits, without a timeout, until the
 * gate opens again (a drain that failed) or the process ends (a drain
 * that succeeded: the client re-sends what was not answered).
 *
 * The drain (drain_run): close the gate, wait for the requests in
 * the engine to be answered, write back every hold and flush the store
 * (engine_drain), then hand over: the hooks' handover (the control
 * socket stops listening, so that the next server can take its path),
 * release the store's lock (engine_release) and the hooks' drained
 * (the caller ends the process once it has told whoever asked).  If
 * the requests do not finish in time or the write-back fails, the gate
 * opens again and the server serves on; the failure is counted
 * (engine_drain_failed).  One drain runs at a time.
 *
 * The gate is the engine's (engine_gate); it holds no nbdkit type.
 */
#ifndef EXT4LAZY_DRAIN_H
#define EXT4LAZY_DRAIN_H

#include <stddef.h>
#include <stdint.h>

struct engine;
struct drain;

/* How long a drain waits for the requests in the engine by default. */
#define DRAIN_DEFAULT_TIMEOUT_NS (30ull * 1000000000)

extern int drain_new (struct drain **out);
extern void drain_free (struct drain *g);

/* Pass the gate (waits while it is closed) and leave it. */
extern void drain_enter (struct drain *g);
extern void drain_leave (struct drain *g);

/* Close the gate and wait until no request is between drain_enter and
 * drain_leave, at most timeout_ns.  Returns 0 (closed, nothing in
 * flight), -EALREADY (already closed), or -ETIMEDOUT (opened again;
 * *left, when not NULL, is how many were still in flight).
 */
extern int drain_close (struct drain *g, uint64_t timeout_ns, uint64_t *left);
extern void drain_open (struct drain *g);
/* Requests between drain_enter and drain_leave now. */
extern uint64_t drain_in_flight (struct drain *g);

/* What the drain calls beyond the engine (each may be NULL): handover
 * once the store is written back and flushed, just before its lock is
 * released; drained once it is.
 */
struct drain_hooks
{
  void (*handover) (void *opaque);
  void (*drained) (void *opaque);
  void *opaque;
};
/* Set before serving (not thread-safe against a drain). */
extern void drain_set_hooks (struct drain *g, const struct drain_hooks *h);

/* Drain e through its gate (above), waiting at most timeout_ns (0: the
 * default) for the requests in flight.  Returns 0 once drained (the
 * store is released: the caller must end the process, serving nothing
 * more); -EALREADY when a drain is under way; or -errno, the server
 * serving on, with why in why[size].
 */
extern int drain_run (struct engine *e, uint64_t timeout_ns, char *why,
                      size_t size);

#endif /* EXT4LAZY_DRAIN_H */
