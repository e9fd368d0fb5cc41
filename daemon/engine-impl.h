/* SPDX-License-Identifier: BSD-3-Clause */
/* engine-impl.h --- the engine's state and what its files share.
 *
 *   engine.c     lifecycle, request dispatch (the segment walk), in-place
 *                holds, reads, zero and trim, re-reading the layout
 *   writeback.c  where holds become store writes (but for those that
 *                ride along with a real write, engine.c): what each
 *                trigger selects, the write-back batch, the memory cap,
 *                the deadline thread
 *   absorb.c     the journal under policy=atime|lazy: holding journal
 *                blocks, the class of a transaction, pending and dead
 *                holds, the ordering rule
 *   store.c      every store write and flush of the three: counted by
 *                trigger, a flush with nothing to flush skipped
 *
 * Locks, in the order they are taken:
 *
 *   relayout_lock (mutex) one re-read of the layout at a time
 *                         (engine.c relayout); taken with no other lock
 *                         held.
 *   layout_lock (rwlock)  protects `layout`, `fst` (the per-instance
 *                         counters array) and the `jl` array.  Requests
 *                         hold it for reading while they classify; a
 *                         re-read of the layout writes back what moves
 *                         before it holds it for writing, to read the
 *                         layout and switch.  Writers first (a waiting
 *                         writer goes before new readers): no thread
 *                         may take it for reading while it holds it.
 *   hold_lock (mutex)     protects the hold table, the jlogs' contents,
 *                         `flights`, `stopping`, `wb_due`, and makes
 *                         every read-merge-classify-write of an
 *                         inode-table or journal block, every overlay
 *                         of held content and every write-back atomic
 *                         with respect to each other.  A hold leaves
 *                         the table only after its write-back
 *                         completed.  Store I/O runs without it: the
 *                         blocks being written are marked (flights,
 *                         claims, jwb_busy) and what touches them waits;
 *                         under it run only the write-back of the holds
 *                         made while a re-read of the layout wrote back
 *                         the rest (switch_layout_locked) and a client
 *                         read made again because a hold left the table
 *                         meanwhile (docs/design.md says why).  A
 *                         client read no hold covers (hold_maybe_in)
 *                         takes it not at all: see docs/design.md.
 *   jflight_lock (mutex)  protects `jflights`, the journal writes on
 *                         their way to the store without the hold lock
 *                         (absorb.c).
 *   wflight_lock (mutex)  protects `wflights`, the write-backs' writes
 *                         on their way without the hold lock; a store
 *                         write under the hold lock waits there for
 *                         those of the same blocks (writeback.c).
 *
 * `flush_errseq`, `holds.drops` and `holds.hot` need no lock (atomics).
 *
 * Counters are updated with relaxed atomic adds; `nheld` mirrors the
 * table's count so that requests can skip the hold lock when nothing
 * is held.  Functions named *_locked expect both locks held (the layout
 * lock for reading at least).
 */
#ifndef EXT4LAZY_ENGINE_IMPL_H
#define EXT4LAZY_ENGINE_IMPL_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "engine.h"
#include "hold.h"
#include "jlog.h"
#include "layout.h"
#include "refcache.h"
#include "stats.h"
#include "vector.h"

struct flight;
struct wflight;

/* An in-place block reached the store with content of hold-table
 * generation gen or newer (jstate.c).
 */
struct placed
{
  uint64_t off, gen;
};
DEFINE_VECTOR (placed_vec, struct placed)

/* The last batch of an absorb_write, written without the hold lock:
 * the device range [off, end) from its first block to its last.  Until
 * it has arrived, a store read or write of journal blocks under the
 * hold lock that it touches waits for it (jstate_wait_passes_locked), so
 * that the store is as if it had been written under the lock.
 */
struct jflight
{
  uint64_t off, end;
  LIST_ENTRY (jflight) link;
};

/* A store read of in-place blocks [off, end) for a reference, made
 * without the hold lock (refs.c): a store write of one of them that
 * begins meanwhile spoils it (refs_forget_locked), and it is made again.
 */
struct refread
{
  uint64_t off, end;
  bool spoiled;
  LIST_ENTRY (refread) link;
};

/* Counters are plain uint64_t, every access to them atomic: STAT_ADD
 * and STAT_INC count, stats_load reads a whole struct fs_stats for a
 * snapshot while other threads count.
 */
#define STAT_ADD(field, n) __atomic_fetch_add (&(field), (n), __ATOMIC_RELAXED)
#define STAT_INC(field) STAT_ADD (field, 1)

/* stats_load reads struct fs_stats as the array of uint64_t it is. */
_Static_assert (sizeof (struct fs_stats) % sizeof (uint64_t) == 0
                    && _Alignof (struct fs_stats) == _Alignof (uint64_t),
                "struct fs_stats holds only uint64_t counters");

/* Copy the counters of src to dst, each with an atomic load. */
static inline void
stats_load (struct fs_stats *dst, const struct fs_stats *src)
{
  const uint64_t *s = (const uint64_t *)(const void *)src;
  uint64_t *d = (uint64_t *)(void *)dst;

  for (size_t k = 0; k < sizeof *src / sizeof *s; k++)
    d[k] = __atomic_load_n (&s[k], __ATOMIC_RELAXED);
}

struct engine
{
  struct engine_config cfg;
  struct backend *store;
  atomic_int clients;
  uint64_t client_writes, client_reads, client_flushes;
  /* Client writes to watched metadata checked against the layout, and
   * full re-reads of the layout (layout_check_write found a change).
   */
  uint64_t layout_checks, layout_rereads;
  /* Write-backs that failed, and when the latest did (seconds since
   * the epoch); atomic, like the counters above.
   */
  uint64_t writeback_errors, last_writeback_error;
  /* When (now_ns) the latest write-back failed and the latest
   * succeeded: atomic.  Stopping does not wait again for a store that
   * failed a write-back less than io-timeout ago and none since.
   */
  uint64_t wb_failed_ns, wb_ok_ns;
  bool stopped; /* engine_stop ran */
  /* The gate in front of the engine (drain.h), and the drains that
   * failed (atomic).
   */
  struct drain *gate;
  uint64_t drain_failures;
  bool drained; /* engine_drain fenced the store (the drain's thread) */

  pthread_mutex_t relayout_lock;
  pthread_rwlock_t layout_lock;
  struct layout *layout;
  struct fs_stats *fst; /* layout->n_fs + 1 entries; the last is "other" */
  /* Per filesystem of the layout: its journal as followed under
   * policy=atime|lazy (NULL: no absorption), or NULL altogether under
   * policy=strict.
   */
  struct jlog **jl;
  atomic_bool layout_stale;
  /* A journal superblock was written without FUA: its tail counts
   * after the next flush (jlog_flushed).
   */
  atomic_bool tails_pending;
  /* The store's error sequence as last reported to a client FLUSH
   * (writeback_report): one for every client, as they share the store.
   */
  _Atomic uint64_t flush_errseq;

  pthread_mutex_t hold_lock;
  struct hold_table holds;
  /* The store content of recently used inode-table blocks (refcache.h),
   * and the store's error sequence when it was last checked: a failed
   * sync anywhere makes what the store holds uncertain, and the cache
   * is emptied.  Under hold_lock.
   */
  struct refcache *refs;
  uint64_t refs_errseq;
  /* In-place blocks written to the store while journal holds exist, for
   * the deadline of absorbed ones (jstate.c).  Under hold_lock.
   */
  struct placed_vec placed;
  /* The record lost entries (out of memory) since it last started
   * afresh: a block absent from it may have reached the store in place.
   * Under hold_lock.
   */
  bool placed_short;
  atomic_size_t nheld;
  /* The journal blocks absorb_write is passing through, gathered to go
   * to the store as one batch (absorb.c); NULL outside absorb_write.
   * Under hold_lock.
   */
  struct jpass *jpass;
  /* The last batch of each absorb_write, on its way to the store
   * without the hold lock (struct jflight, absorb.c).  Under
   * jflight_lock, which is taken after hold_lock if both are; jflight_cond
   * tells that one arrived.
   */
  pthread_mutex_t jflight_lock;
  pthread_cond_t jflight_cond;
  LIST_HEAD (jflight_list, jflight) jflights;
  /* The FLUSHes whose sync runs without the hold lock (writeback_flush),
   * in the order they started, and the number of the last to start;
   * flight_cond tells that one ended.  Under hold_lock.
   */
  TAILQ_HEAD (flight_list, flight) flights;
  uint64_t flight_no;
  pthread_cond_t flight_cond;
  /* Flights that failed (their writes or their sync), for a FLUSH that
   * counted on the writes of one: under hold_lock.
   */
  uint64_t flight_failures;
  /* The writes on their way to the store without the hold lock
   * (struct wflight, writeback.c): a write-back's copies of held
   * content, an inode-table write's or a zero's claimed blocks
   * (writeback_claim_locked).  Any other store write of a block among
   * them waits for them, the hold lock released (writeback_locked,
   * writeback_wait_range_unlocking), so that an older held copy never
   * lands after a newer write, and an inode-table write is judged
   * against what the store has.  Inserted with hold_lock held; under
   * wflight_lock, taken after hold_lock if both are; wflight_cond tells
   * that one ended.
   */
  pthread_mutex_t wflight_lock;
  pthread_cond_t wflight_cond;
  LIST_HEAD (wflight_list, wflight) wflights;
  /* Store writes begun that may touch an in-place block
   * (a write-back under the lock, each flight's copies, each claim):
   * a flight or claimed write whose writes none followed, or a reference
   * read that none overtook, tells the reference cache what the store
   * now has.  Under hold_lock.
   */
  uint64_t wb_write_seq;
  /* The reference reads on their way without the hold lock (struct
   * refread, refs.c).  Under hold_lock.
   */
  LIST_HEAD (refread_list, refread) refreads;
  /* The journal state (journal holds, jlogs, tails, jpass) is one
   * thread's while it works on it with its store I/O without the hold
   * lock: a client's journal write (absorb_write), a write-back of
   * journal holds (writeback.c, journal_flight_locked), a FLUSH that a
   * journal tail awaits (writeback_flush).  Until it gives it back,
   * everything else that reads or changes it waits on jwb_cond
   * (writeback_journal_idle_locked).  Under hold_lock.
   */
  bool jwb_busy;
  pthread_t jwb_owner; /* whose it is, while jwb_busy */
  pthread_cond_t jwb_cond;
  pthread_cond_t wb_cond; /* a hold due sooner appeared, or stopping */
  /* When the deadline thread wakes next (it is told through wb_cond
   * only about a hold due before that).  Under hold_lock.
   */
  uint64_t wb_due;
  /* The hold figures of the last stats that got the hold lock
   * (engine_stats), per instance, and when (now_ns): for the stats
   * asked while it is busy.  Under sum_lock, taken after hold_lock if
   * both are.
   */
  pthread_mutex_t sum_lock;
  struct hold_sum *sum;
  size_t sum_n;
  uint64_t sum_ns;
  bool stopping;
  bool wb_running;
  pthread_t wb_thread;
  /* Fenced (backend_fenced): the holds were discarded.  Under
   * hold_lock.
   */
  bool fence_done;
  /* The store's writes on their way, the writes completed that a flush
   * has still to make durable (a sequence), and that sequence as of the
   * start of the last flush that succeeded (store.c).  Atomics.
   */
  atomic_uint_fast64_t st_inflight, st_dirty, st_clean;
  /* Of those, the writes that succeeded (a failed one was not
   * acknowledged, a FUA one is durable), and that sequence as of the
   * start of the last flush that succeeded: store_untouched.  Atomics.
   */
  atomic_uint_fast64_t st_ok, st_ok_clean;
  /* Store write requests and flushes by trigger (enum st_trigger), and
   * flushes skipped with nothing to flush.
   */
  uint64_t store_writes[ST_NTRIGGERS], store_flushes[ST_NTRIGGERS];
  uint64_t store_flushes_skipped;
};

/* An instance's holds, for the stats: how many, their bytes, and the
 * first-hold time of the oldest whose deadline is not met (0: none).
 */
struct hold_sum
{
  uint64_t blocks, bytes, oldest_ns;
};

/* How long the stats and the list of holds wait for the hold lock
 * before they answer without it (engine_stats, engine_holds).
 */
#define STATS_HOLD_WAIT_MS 200
#define HOLDS_WAIT_MS 1000

/* Does the calling thread hold e's hold lock?  glibc keeps the thread
 * id of a mutex's owner in the mutex, set when the lock is taken
 * (pthread_cond_wait's return included) and cleared when it is given
 * back; without glibc the check is skipped.  For assert(): a *_locked
 * function checks its caller with ASSERT_HOLD_LOCKED (e).
 */
static inline bool
hold_lock_held (struct engine *e)
{
#ifdef __GLIBC__
  return e->hold_lock.__data.__owner == hold_self_tid ();
#else
  (void)e;
  return true;
#endif
}
#define ASSERT_HOLD_LOCKED(e) assert (hold_lock_held (e))

/* The reference cache (refs.c), hold lock held.  refs_read_unlocking
 * fills ref with the store content of the n blocks of bs bytes from
 * off, which no write on its way touches (the caller waited): from the
 * cache, or else with one store read made without the hold lock.  It
 * returns 0 when ref is what the store has: from the cache, or read
 * with no store write of those blocks begun meanwhile (any n: the read
 * is used, not only cached).  It returns 1 when one began: the caller
 * waits for it and asks again (-errno: the read failed).
 * refs_written_locked records what the writes v[0..n) did to the store:
 * r is the batch's result (0: each write's own result says).
 * refs_forget_locked: a store write of [off, off + len) begins (or the
 * store's content there is no longer known): the cache forgets it, and
 * the reference reads of it on their way are spoiled.
 */
extern int refs_read_unlocking (struct engine *e, char *ref, uint64_t off,
                                uint64_t n, uint32_t bs);
extern void refs_written_locked (struct engine *e, const struct bio *v,
                                 size_t n, int r);
extern void refs_forget_locked (struct engine *e, uint64_t off, uint64_t len);
/* One block of bs bytes at off from the cache into buf: false if it is
 * not there.  refs_put_locked puts one there, read from the store with
 * no write of it begun since.
 */
extern bool refs_get_locked (struct engine *e, char *buf, uint64_t off,
                             uint32_t bs);
extern void refs_put_locked (struct engine *e, const char *buf, uint64_t off,
                             uint32_t bs);

/* A piece of a request: inside one inode-table run of one instance,
 * inside one extent of its journal, or outside both.
 */
struct seg
{
  uint64_t off, len;
  const struct ext4_fs *fs; /* NULL outside every filesystem */
  size_t fsi;               /* index of fs, or n_fs for "other" */
  bool itable;
  bool journal;
  bool sb; /* the block of the primary superblock (held as itable is) */
};

/* Device offset of the block of fs that holds its primary superblock. */
static inline uint64_t
engine_sb_block (const struct ext4_fs *fs)
{
  return fs->start + 1024 / fs->block_size * fs->block_size;
}

/* May the reference cache be asked about, or told of, the block at off
 * (asserts)?  Only inode-table blocks and the primary superblock's block
 * of the current layout: the cache is emptied whenever the layout
 * changes.
 */
static inline bool
engine_ref_block (const struct engine *e, uint64_t off)
{
  const struct ext4_fs *fs = layout_fs_at (e->layout, off);

  return fs && (layout_itable_at (fs, off) || off == engine_sb_block (fs));
}

static inline uint64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The counters of the filesystem a hold belongs to ("other" if it is
 * not in the layout any more).
 */
static inline struct fs_stats *
hold_stats (struct engine *e, const struct hold *h)
{
  return &e->fst[h->fs <= e->layout->n_fs ? h->fs : e->layout->n_fs];
}

/* The jlog of filesystem fsi, or NULL when it is not followed. */
static inline struct jlog *
engine_jlog (const struct engine *e, size_t fsi)
{
  return e->jl && fsi < e->layout->n_fs ? e->jl[fsi] : NULL;
}

/* Store the table's count for the lock-free checks. */
static inline void
holds_changed (struct engine *e)
{
  atomic_store (&e->nheld, e->holds.count);
}

/* ---- store.c ---- */

/* The engine's store I/O: backend_submit and its wrappers, with the
 * writes and flushes counted for trigger why (enum st_trigger), and a
 * flush with nothing to flush skipped (store.c says when).  store_init
 * before the first.
 */
extern void store_init (struct engine *e);
extern int store_submit (struct engine *e, struct bio *v, size_t n,
                         unsigned why);
extern int store_pwrite (struct engine *e, const void *buf, uint64_t len,
                         uint64_t off, uint32_t flags, unsigned why);
extern int store_flush (struct engine *e, unsigned why);
/* Is the store fenced (backend_fence)?  The first time it is seen,
 * every hold is discarded (they are time-only, the contract allows
 * losing them) and a notice says why; from then on every request fails
 * with -EIO and nothing reaches the store.  Hold lock held.
 */
extern bool store_fenced_locked (struct engine *e);

/* Did a write-back fail less than io-timeout ago, with none succeeding
 * since?  Then the store is not answering.
 */
extern bool store_not_answering (struct engine *e);

/* Has no write succeeded on the store since the last flush that did
 * (but FUA ones), and none is on its way?  Then nothing this server
 * acknowledged waits for a flush, and a drain with nothing held need
 * not flush (a failed write counts for store_flush, not here).
 */
extern bool store_untouched (struct engine *e);

/* ---- jstate.c ---- */

/* Does the policy absorb a transaction (or keep a block) of class cls? */
extern bool jstate_policy_absorbs (enum policy policy, enum tclass cls);
/* May pending journal hold h wait for its transaction's commit (its
 * block, when it arrived, was not bound to make the transaction real)?
 * No I/O: a function of h and the policy.
 */
extern bool jstate_pending_may_wait (enum policy policy, const struct hold *h);
/* What absorbed journal hold h is in its transaction: 1, a logged copy,
 * with *target the device offset of the block it logs and *escaped (if
 * not NULL) whether jbd2 escaped its first word; 0, its descriptor; -1,
 * unknown (hold lock held).
 */
extern int jstate_absorbed_slot (const struct engine *e, const struct hold *h,
                                 uint64_t *target, bool *escaped);
/* Wait until no journal write of absorb_write on its way to the store
 * without the hold lock touches [off, off + len) (hold lock held).
 */
extern void jstate_wait_passes_locked (struct engine *e, uint64_t off,
                                       uint64_t len);
/* The same, with the hold lock released while it waits: true if it
 * waited, and the caller looks again.
 */
extern bool jstate_wait_passes_unlocking (struct engine *e, uint64_t off,
                                          uint64_t len);
/* Journal writes of [off, end) leave without the hold lock (f, until
 * jstate_pass_end, without it).
 */
extern void jstate_pass_begin_locked (struct engine *e, struct jflight *f,
                                      uint64_t off, uint64_t end);
extern void jstate_pass_end (struct engine *e, struct jflight *f);
/* In-place block off reached the store with content of hold-table
 * generation gen or newer (hold lock held): recorded while journal
 * holds exist.  jstate_placed_ready before jstate_placed_since; the
 * record is only ever short of the truth (out of memory), never beyond.
 */
extern void jstate_placed_locked (struct engine *e, uint64_t off, uint64_t gen);
/* The same for every block in [off, off + len) that an absorbed hold
 * logs (a zero or trim reached the store there).
 */
extern void jstate_placed_range_locked (struct engine *e, uint64_t off,
                                        uint64_t len, uint64_t gen);
/* Sort the record, dropping what no absorbed hold older than gen
 * min_gen can need.
 */
extern void jstate_placed_ready (struct engine *e, uint64_t min_gen);
/* Did block off reach the store in place with content of generation gen
 * or newer?
 */
extern bool jstate_placed_since (const struct engine *e, uint64_t off,
                                 uint64_t gen);
/* The durable tail of filesystem fsi's journal moved: drop the dead. */
extern void jstate_discard_dead_locked (struct engine *e, size_t fsi);
/* Journal holds were written back: absorbed transactions are live. */
extern void jstate_written_back_locked (struct engine *e);
/* A flush completed: tails written before it count now. */
extern void jstate_flushed_locked (struct engine *e);

/* ---- writeback.c ---- */

/* Selects holds for a write-back; arg is the caller's. */
typedef bool (*hold_pred) (struct engine *e, const struct hold *h, void *arg);

extern int writeback_locked (struct engine *e, hold_pred pred, void *arg,
                             enum wb_trigger why, bool always_flush);
/* The predicates, each a function of the hold, the engine's
 * configuration and arg alone (no I/O): every hold; journal holds (the
 * ordering rule); what a FLUSH writes back under the policy; what the
 * deadline sweep of *(const struct wb_sweep *)arg writes (holds due, not
 * met, and the in-place holds that meet absorbed ones); holds first made no
 * later than *(const uint64_t *)arg (the memory cap's oldest); holds a zero or
 * trim of *(const struct wb_range
 * *)arg needs back.
 */
extern bool writeback_pred_all (struct engine *e, const struct hold *h,
                                void *arg);
extern bool writeback_pred_ordered (struct engine *e, const struct hold *h,
                                    void *arg);
extern bool writeback_pred_flush (struct engine *e, const struct hold *h,
                                  void *arg);
/* How many holds a FLUSH would select now (writeback_pred_flush), from
 * the hold table's counts by kind and class: no walk.  Hold lock held.
 */
extern size_t writeback_flush_takes_locked (struct engine *e);
struct wb_sweep
{
  uint64_t now;         /* monotonic time of the sweep */
  bool meet;            /* absorbed holds are met in place: not selected */
  const uint64_t *also; /* in-place holds to write too (sorted offsets) */
  size_t n;
};
extern bool writeback_pred_expired (struct engine *e, const struct hold *h,
                                    void *arg);
extern bool writeback_pred_over_cap (struct engine *e, const struct hold *h,
                                     void *arg);
struct wb_range
{
  uint64_t off, len;
};
extern bool writeback_pred_range (struct engine *e, const struct hold *h,
                                  void *arg);
/* Every journal hold still part of the log, in order, and flushed:
 * what must precede any other journal write.
 */
extern int writeback_journal_unlocking (struct engine *e, enum wb_trigger why);
/* The journal state is one thread's at a time while it works on it
 * without the hold lock (a journal write-back, absorb_write): idle
 * waits (the hold lock released meanwhile) until no other thread has
 * it, before anything that reads or changes it; take makes it the
 * calling thread's (false if it was already), give gives back what
 * take took.
 */
extern void writeback_journal_idle_locked (struct engine *e);
extern bool writeback_journal_take_locked (struct engine *e);
extern void writeback_journal_give_locked (struct engine *e, bool taken);
/* A store write that runs without the hold lock outside a write-back
 * (an inode-table write, a zero or trim): the hold lock is taken
 * again after it, so the others wait for it without the hold lock.
 * writeback_wait_range_unlocking waits, with the hold lock released
 * meanwhile, until no write on its way (a write-back's copies, a
 * claimed write) touches [off, off+len); true if it waited, and the
 * table may have changed.  writeback_busy_locked tells whether one
 * does.  writeback_claim_locked makes v[0..n), which none touches,
 * such a write (NULL: out of memory), forgetting the reference cache
 * there; writeback_unclaim (hold lock held) ends it once the store has
 * answered and the holds it supersedes are gone: until then no other
 * write of its blocks may start, or an older held copy could land
 * after it.  Nothing waits for a write on its way with the hold lock
 * held.
 */
struct wflight;
extern bool writeback_wait_range_unlocking (struct engine *e, uint64_t off,
                                            uint64_t len);
extern bool writeback_busy_locked (struct engine *e, uint64_t off,
                                   uint64_t len);
extern struct wflight *writeback_claim_locked (struct engine *e,
                                               const struct bio *v, size_t n);
extern void writeback_unclaim (struct engine *e, struct wflight *w);
/* Over the memory cap: the oldest holds go until it holds, with the
 * store I/O without the hold lock, as a FLUSH's: the caller must expect
 * the table to change meanwhile.
 */
extern int writeback_cap_unlocking (struct engine *e);
/* A client FLUSH (layout lock held for reading, hold lock not held):
 * what the policy does not keep is written back and made durable, then
 * writeback_report.  Its store writes and sync run without the hold
 * lock unless a journal tail waits for it (writeback.c says how).
 */
extern int writeback_flush (struct engine *e);
/* A client FLUSH ends with r: it fails, once, for each sync failure
 * since the last FLUSH reported one, whoever met it.  Returns what the
 * FLUSH returns.
 */
extern int writeback_report (struct engine *e, int r);
/* Before a zero or trim of [off, off+len): partly covered holds and
 * every journal hold there go back (pending: is there one?), with the
 * store I/O without the hold lock as a FLUSH's unless journal holds are
 * among them: the caller must look again once it returns.
 */
extern bool writeback_range_pending_locked (struct engine *e, uint64_t off,
                                            uint64_t len);
extern int writeback_range_unlocking (struct engine *e, uint64_t off,
                                      uint64_t len);
/* Takes the locks itself; the store I/O runs without the hold lock
 * unless journal holds are involved, as a FLUSH's.
 */
extern int writeback_all (struct engine *e, enum wb_trigger why,
                          bool always_flush);
/* Holds were added: wake the deadline thread if the oldest is due
 * before it would wake anyway (hold lock held).
 */
extern void writeback_kick_locked (struct engine *e);
extern int writeback_start (struct engine *e);
extern void writeback_stop (struct engine *e);

/* ---- absorb.c ---- */

/* A client write to a journal extent of a followed journal. */
extern int absorb_write (struct engine *e, const struct seg *s,
                         const char *data, uint32_t flags);

/* The jlogs for layout nl: moved from oldjl where the journal did not
 * move (the slot in oldjl becomes NULL), new otherwise; *out is NULL
 * under policy=strict.  On failure every jlog taken from oldjl is back
 * there.
 */
extern int absorb_jlogs_new (struct engine *e, const struct layout *old,
                             struct jlog **oldjl, const struct layout *nl,
                             struct jlog ***out);
extern void absorb_jlogs_free (struct jlog **jl, size_t n);
/* Does a journal we follow move (or vanish) from old to nl? */
extern bool absorb_journal_moved (const struct engine *e,
                                  const struct layout *old,
                                  const struct layout *nl);

/* Count a failed write-back (stats). */
static inline void
engine_note_writeback_error (struct engine *e)
{
  __atomic_fetch_add (&e->writeback_errors, 1, __ATOMIC_RELAXED);
  __atomic_store_n (&e->last_writeback_error, (uint64_t)time (NULL),
                    __ATOMIC_RELAXED);
  __atomic_store_n (&e->wb_failed_ns, now_ns (), __ATOMIC_RELAXED);
}

/* A write-back succeeded. */
static inline void
engine_note_writeback_ok (struct engine *e)
{
  __atomic_store_n (&e->wb_ok_ns, now_ns (), __ATOMIC_RELAXED);
}

#endif /* EXT4LAZY_ENGINE_IMPL_H */
