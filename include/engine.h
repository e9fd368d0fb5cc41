/* SPDX-License-Identifier: BSD-3-Clause */
/* engine.h --- the ext4lazy engine: what the nbdkit plugin (or anything
 * else) drives.  It owns the backing store and decides, request by
 * request, what goes straight through and what is held.
 *
 * Lifecycle: engine_open (before serving: opens and probes the store,
 * discovers the layout, then suspends a store that would not survive a
 * fork), engine_start (in the serving process: resumes the store,
 * starts background threads), the data calls from any number of threads,
 * engine_stop (writes back everything held, stops threads), then
 * engine_close.  Every call returns 0 or -errno; none prints errors.
 *
 * The data calls mirror backend.h's (the engine sits in front of a
 * backend and has the same request vocabulary).
 */
#ifndef EXT4LAZY_ENGINE_H
#define EXT4LAZY_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* Flags for engine_pwrite/zero/trim: the BIO_* request flags. */

enum policy
{
  POLICY_STRICT, /* nothing held outlives a FLUSH */
  POLICY_ATIME,  /* atime-only holds outlive flushes */
  POLICY_LAZY,   /* every time-only hold outlives flushes */
};

extern const char *policy_name (enum policy p);

#define ENGINE_DEFAULT_MAX_AGE_NS (24ull * 3600 * 1000000000)
#define ENGINE_DEFAULT_MAX_HELD (64ull << 20)

struct engine_config
{
  struct backend_config store;
  enum policy policy;
  uint64_t max_age_ns; /* deadline of a hold, from its first hold */
  uint64_t max_held;   /* bytes of held content before the oldest go */
};

struct engine;

extern int engine_open (const struct engine_config *cfg, struct engine **out);
/* errbuf (may be NULL) gets the failed step of resuming the store. */
extern int engine_start (struct engine *e, char *errbuf, size_t size);
extern int engine_stop (struct engine *e);
extern void engine_close (struct engine *e);
/* Release what the engine's libraries keep for the process; call once,
 * when no engine will be opened again (plugin unload).
 */
extern void engine_unload (void);

/* The store's size, read again (backend_refresh_size): call it for
 * each new client.
 */
extern uint64_t engine_size (const struct engine *e);
extern const struct backend_caps *engine_caps (const struct engine *e);
extern const char *engine_backend_name (const struct engine *e);

extern int engine_pread (struct engine *e, void *buf, uint64_t len,
                         uint64_t off);
extern int engine_pwrite (struct engine *e, const void *buf, uint64_t len,
                          uint64_t off, uint32_t flags);
extern int engine_flush (struct engine *e);
extern int engine_zero (struct engine *e, uint64_t len, uint64_t off,
                        uint32_t flags);
extern int engine_trim (struct engine *e, uint64_t len, uint64_t off,
                        uint32_t flags);
extern int engine_cache (struct engine *e, uint64_t len, uint64_t off);
extern int engine_extents (struct engine *e, uint64_t len, uint64_t off,
                           backend_extent_fn fn, void *opaque);

/* Write back every hold, whatever the policy, and make it durable
 * (the control socket's flush).
 */
extern int engine_writeback_all (struct engine *e);

/* A snapshot of the counters; free with engine_stats_free. */
struct stats_snapshot;
extern int engine_stats (struct engine *e, struct stats_snapshot *out);
extern void engine_stats_free (struct stats_snapshot *s);

/* Call fn (with opaque) for every held block, oldest first, described
 * as a struct held_block (stats.h, valid during the call): its kind,
 * instance, age, deadline and, for an in-place hold, the inode records
 * that differ from the store's block and in which time fields.  Each
 * block is looked at under the engine's locks, the store's block read
 * there, one block at a time: a hold that leaves meanwhile is skipped,
 * one that arrives is not listed.  fn must not call the engine.
 * Returns 0, fn's first non-zero return, or -errno.
 */
struct held_block;
typedef int (*engine_hold_fn) (void *opaque, const struct held_block *hb);
extern int engine_holds (struct engine *e, engine_hold_fn fn, void *opaque);

/* Fence the engine: the store now belongs to another writer (the
 * backend fences itself when it finds that out; tests call this).
 * Every hold is discarded, every later request fails with -EIO, and
 * nothing is written to the store again.
 */
extern void engine_fence (struct engine *e, const char *why);

/* The gate every client request passes (drain.h). */
struct drain;
extern struct drain *engine_gate (struct engine *e);

/* The drain's steps (drain_run, with the gate closed).  engine_drain
 * writes back every hold and flushes the store (as a stop does), then
 * fences the store quietly: no request reaches it again, each fails
 * with -EIO.  Returns 0, or -errno with nothing fenced: the engine
 * serves on.  A store fenced already (lost to another writer, its
 * holds discarded) is drained at once, and not released.  engine_release then releases the store's lock
 * (storelock.h, the RBD exclusive lock) for the next server.
 * engine_drain_failed counts a drain that failed (stats).
 */
extern int engine_drain (struct engine *e);
extern void engine_release (struct engine *e);
extern void engine_drain_failed (struct engine *e);

/* Clients come and go; when the last one leaves, holds are written back. */
extern void engine_client_open (struct engine *e);
extern int engine_client_close (struct engine *e);

#endif /* EXT4LAZY_ENGINE_H */
