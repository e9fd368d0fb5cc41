/* SPDX-License-Identifier: BSD-3-Clause */
/* engine.c --- route client requests: hold timestamp-only inode-table
 * writes, pass journal writes to absorb.c, send everything else straight
 * to the backing store.  Also the engine's lifecycle, re-reading the
 * layout, the stats snapshot and the list of holds.  State and locks:
 * engine-impl.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "classify.h"
#include "engine-impl.h"
#include "drain.h"
#include "log.h"
#include "ondisk.h"
#include "testpoint.h"

const char *
policy_name (enum policy p)
{
  switch (p)
    {
    case POLICY_STRICT:
      return "strict";
    case POLICY_ATIME:
      return "atime";
    case POLICY_LAZY:
      return "lazy";
    }
  return "?";
}

void
engine_unload (void)
{
  layout_unload ();
}

static int
store_read (void *opaque, void *buf, size_t len, uint64_t off)
{
  return backend_pread (opaque, buf, len, off);
}

/* ---- segments of a request ------------------------------------------ */

/* Outside every filesystem: up to the next one's start. */
static uint64_t
next_fs_start (const struct layout *L, uint64_t off, uint64_t stop)
{
  for (size_t i = 0; i < L->n_fs; i++)
    if (L->fs[i].start > off && L->fs[i].start < stop)
      stop = L->fs[i].start;
  return stop;
}

static void
next_seg (const struct layout *L, uint64_t off, uint64_t end, struct seg *s)
{
  const struct ext4_fs *fs = layout_fs_at (L, off);
  const struct itable_run *run;
  const struct journal_extent *x;
  uint64_t stop = end;

  s->off = off;
  s->fs = fs;
  s->fsi = fs ? (size_t)(fs - L->fs) : L->n_fs;
  s->itable = false;
  s->journal = false;
  s->sb = false;
  if (!fs)
    stop = next_fs_start (L, off, stop);
  else if (off >= engine_sb_block (fs)
           && off < engine_sb_block (fs) + fs->block_size)
    {
      s->sb = true;
      if (engine_sb_block (fs) + fs->block_size < stop)
        stop = engine_sb_block (fs) + fs->block_size;
    }
  else if ((run = layout_itable_at (fs, off)) != NULL)
    {
      s->itable = true;
      if (run->off + run->len < stop)
        stop = run->off + run->len;
    }
  else if ((x = layout_journal_at (fs, off)) != NULL)
    {
      s->journal = true;
      if (x->off + x->len < stop)
        stop = x->off + x->len;
    }
  else if (layout_next_region (fs, off) < stop)
    stop = layout_next_region (fs, off);
  if (fs && off < engine_sb_block (fs) && engine_sb_block (fs) < stop)
    stop = engine_sb_block (fs);
  s->len = stop - off;
}

/* Could [off, off+len) hold held content (inode tables, journals)? */
static bool
touches_held_region (const struct layout *L, uint64_t off, uint64_t len)
{
  uint64_t end = off + len;
  struct seg s;

  for (; off < end; off += s.len)
    {
      next_seg (L, off, end, &s);
      if (s.itable || s.journal || s.sb)
        return true;
    }
  return false;
}

/* Blocks whose store content the engine keeps (refcache.h, refs.c): 4 MiB
 * of 4 KiB blocks at most, allocated as inode-table traffic uses them.
 */
#define REFCACHE_SLOTS 1024

/* ---- layout --------------------------------------------------------- */

static void
describe_layout (struct engine *e, const struct layout *old)
{
  const struct layout *L = e->layout;

  if (L->n_fs == 0 && (!old || old->n_fs > 0))
    log_notice ("no ext2/3/4 filesystem found: serving as plain "
                "pass-through until one is written");
  for (size_t i = 0; i < L->n_fs; i++)
    {
      const struct ext4_fs *fs = &L->fs[i];
      bool known = false;

      if (old)
        for (size_t j = 0; j < old->n_fs; j++)
          known |= old->fs[j].start == fs->start
                   && old->fs[j].has_journal == fs->has_journal;
      if (known)
        continue;
      log_debug ("filesystem at offset %" PRIu64 ": %" PRIu64 " bytes, %" PRIu32
                 "-byte blocks, %" PRIu32
                 "-byte inodes, %zu inode-table runs%s",
                 fs->start, fs->size, fs->block_size, fs->inode_size,
                 fs->n_itable, fs->has_journal ? ", journal" : "");
      if (fs->has_journal && e->cfg.policy == POLICY_STRICT)
        log_notice ("the filesystem at offset %" PRIu64 " has a journal: "
                    "ext4 flushes at every journal commit (every few "
                    "seconds), so policy=strict holds timestamps only "
                    "between commits; policy=atime or policy=lazy give "
                    "journaled filesystems lazytime behaviour",
                    fs->start);
    }
}

/* The counters for layout nl when the layout changes: a copy if the
 * filesystems are the same in number, else a new array that keeps only
 * "other".
 */
static int
new_stats (struct engine *e, const struct layout *old, const struct layout *nl,
           struct fs_stats **out)
{
  struct fs_stats *nst = calloc (nl->n_fs + 1, sizeof *nst);

  if (!nst)
    return -ENOMEM;
  if (nl->n_fs == old->n_fs)
    memcpy (nst, e->fst, (nl->n_fs + 1) * sizeof *nst);
  else
    nst[nl->n_fs] = e->fst[old->n_fs];
  *out = nst;
  return 0;
}

/* Would switching to nl move something held: an inode table, or a
 * followed journal?  (Layout lock held, for reading at least.)
 */
static bool
layout_moves (const struct engine *e, const struct layout *nl)
{
  return !layout_same_itables (e->layout, nl)
         || absorb_journal_moved (e, e->layout, nl);
}

/* Switch to layout nl (both locks held).  If something held moved,
 * everything is written back first.  What the new layout needs is made
 * before anything is replaced, so that on failure the engine keeps its
 * layout, counters and jlogs as they were.
 */
static int
switch_layout_locked (struct engine *e, struct layout *nl)
{
  struct layout *old = e->layout;
  bool moved = layout_moves (e, nl);
  struct fs_stats *nst = NULL;
  struct jlog **njl = NULL;
  int r = 0;

  ASSERT_HOLD_LOCKED (e);
  if (moved)
    r = writeback_locked (e, writeback_pred_all, NULL, WB_LAYOUT, false);
  if (r == 0 && moved)
    r = new_stats (e, old, nl, &nst);
  if (r == 0)
    r = absorb_jlogs_new (e, old, e->jl, nl, &njl);
  if (r < 0)
    {
      free (nst);
      return r;
    }
  if (nst)
    {
      free (e->fst);
      e->fst = nst;
    }
  absorb_jlogs_free (e->jl, old->n_fs);
  e->jl = njl;
  e->layout = nl;
  refcache_clear (e->refs); /* blocks may be inode tables no more */
  /* The record of in-place writes starts afresh only when no journal
   * hold is left to need it: when nothing held moved, absorbed holds
   * survive the switch, and at their deadline a block the record no
   * longer had would get an older logged copy over newer content.
   */
  if (e->holds.journal_count == 0)
    {
      e->placed.n = 0;
      e->placed_short = false;
    }
  return 0;
}

/* The store as it is after a client write that reached it: the bytes
 * the write covers come from the client's buffer.
 */
struct written_store
{
  struct backend *store;
  const char *data;
  uint64_t off, len;
};

static int
written_read (void *opaque, void *buf, size_t len, uint64_t off)
{
  const struct written_store *w = opaque;

  if (off < w->off || off + len > w->off + w->len)
    return backend_pread (w->store, buf, len, off);
  memcpy (buf, w->data + (off - w->off), len);
  return 0;
}

/* The client wrote data to [off, off+len), which overlaps what the
 * layout watches, and the write has reached the store (layout lock held
 * for reading; data NULL: the write failed, the store alone says what
 * it left).  Mark the layout stale only if what defines it changed; a
 * read error marks it stale too, and the re-read reports it.
 */
static void
check_layout_write (struct engine *e, const char *data, uint64_t off,
                    uint64_t len)
{
  struct written_store w = { e->store, data, off, data ? len : 0 };

  STAT_INC (e->layout_checks);
  if (layout_check_write (e->layout, written_read, &w, off, len) != 0)
    atomic_store (&e->layout_stale, true);
}

/* Before a re-read of the layout: if the layout the store has now would
 * move something held, write every hold back, with the layout lock held
 * for reading only, so that reads, the other connections' writes and
 * the control socket go on while the store is slow or stuck.  The
 * layout read here only decides that: a write may change it before the
 * re-read, which reads it again under the write lock.
 */
static int
writeback_what_moves (struct engine *e)
{
  struct layout *nl = NULL;
  bool moved;
  int r;

  if (atomic_load (&e->nheld) == 0)
    return 0;
  r = layout_discover (store_read, e->store, backend_size (e->store), &nl);
  if (r < 0)
    return r;
  pthread_rwlock_rdlock (&e->layout_lock);
  moved = layout_moves (e, nl);
  pthread_rwlock_unlock (&e->layout_lock);
  layout_free (nl);
  return moved ? writeback_all (e, WB_LAYOUT, false) : 0;
}

/* Re-read the layout after the client wrote a superblock, descriptor
 * or partition table.  Holds survive only if nothing held moved; those
 * are written back first (writeback_what_moves), so that the switch,
 * under the write lock, writes back only what was held meanwhile.  One
 * re-read at a time (relayout_lock).  The layout stays stale until the
 * write lock is held, so that every write made meanwhile waits here for
 * the new layout before it is classified; reads and the stats go on.
 */
static int
relayout (struct engine *e)
{
  struct layout *nl = NULL, *old = NULL;
  int r = 0;

  pthread_mutex_lock (&e->relayout_lock);
  if (!atomic_load (&e->layout_stale))
    goto out;
  r = writeback_what_moves (e);
  pthread_rwlock_wrlock (&e->layout_lock);
  if (r == 0)
    {
      /* Every write that changed the layout has reached the store. */
      atomic_store (&e->layout_stale, false);
      STAT_INC (e->layout_rereads);
      r = layout_discover (store_read, e->store, backend_size (e->store), &nl);
    }
  if (r == 0)
    {
      old = e->layout;
      pthread_mutex_lock (&e->hold_lock);
      r = switch_layout_locked (e, nl);
      pthread_mutex_unlock (&e->hold_lock);
    }
  if (r < 0)
    {
      layout_free (nl);
      atomic_store (&e->layout_stale, true);
    }
  else
    {
      describe_layout (e, old);
      layout_free (old);
    }
  pthread_rwlock_unlock (&e->layout_lock);
out:
  pthread_mutex_unlock (&e->relayout_lock);
  return r;
}

/* ---- lifecycle ------------------------------------------------------ */

int
engine_open (const struct engine_config *cfg, struct engine **out)
{
  struct engine *e = calloc (1, sizeof *e);
  pthread_rwlockattr_t ra;
  pthread_condattr_t ca;
  int r;

  if (!e)
    return -ENOMEM;
  hold_tid_setup ();
  e->cfg = *cfg;
  e->cfg.store.errbuf = NULL; /* the caller's, valid during this call only */
  e->cfg.store.errbuf_size = 0;
  if (e->cfg.max_age_ns == 0)
    e->cfg.max_age_ns = ENGINE_DEFAULT_MAX_AGE_NS;
  pthread_mutex_init (&e->relayout_lock, NULL);
  /* Writers first: reads and FLUSHes keep the read lock across store
   * I/O, and with readers preferred (glibc's default) a re-read of the
   * layout, and every write behind it, could wait for as long as they
   * overlap.  No thread takes the read lock while it holds it.
   */
  pthread_rwlockattr_init (&ra);
#ifdef __GLIBC__
  pthread_rwlockattr_setkind_np (&ra,
                                 PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
  pthread_rwlock_init (&e->layout_lock, &ra);
  pthread_rwlockattr_destroy (&ra);
  pthread_mutex_init (&e->hold_lock, NULL);
  pthread_mutex_init (&e->sum_lock, NULL);
  pthread_condattr_init (&ca);
  pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
  pthread_cond_init (&e->wb_cond, &ca);
  pthread_cond_init (&e->flight_cond, NULL);
  pthread_cond_init (&e->jwb_cond, NULL);
  pthread_mutex_init (&e->jflight_lock, NULL);
  pthread_mutex_init (&e->wflight_lock, NULL);
  pthread_cond_init (&e->wflight_cond, NULL);
  LIST_INIT (&e->wflights);
  LIST_INIT (&e->refreads);
  TAILQ_INIT (&e->flights);
  LIST_INIT (&e->jflights);
  pthread_cond_init (&e->jflight_cond, NULL);
  pthread_condattr_destroy (&ca);
  store_init (e);

  r = drain_new (&e->gate);
  if (r == 0)
    r = hold_init (&e->holds);
  if (r == 0)
    r = refcache_new (REFCACHE_SLOTS, &e->refs);
  if (r == 0)
    r = backend_open (&cfg->store, &e->store);
  if (r == 0)
    r = layout_discover (store_read, e->store, backend_size (e->store),
                         &e->layout);
  if (r == 0 && !(e->fst = calloc (e->layout->n_fs + 1, sizeof *e->fst)))
    r = -ENOMEM;
  if (r == 0)
    r = absorb_jlogs_new (e, NULL, NULL, e->layout, &e->jl);
  if (r < 0)
    {
      engine_close (e);
      return r;
    }
  describe_layout (e, NULL);
  backend_suspend (e->store); /* until engine_start, after any fork */
  *out = e;
  return 0;
}

/* ---- fenced ---------------------------------------------------------- */

/* 0, or -EIO when the store is fenced (store_fenced_locked). */
static int
fenced (struct engine *e)
{
  bool f;

  if (!backend_fenced (e->store))
    return 0;
  pthread_mutex_lock (&e->hold_lock);
  f = store_fenced_locked (e);
  pthread_mutex_unlock (&e->hold_lock);
  return f ? -EIO : 0;
}

void
engine_fence (struct engine *e, const char *why)
{
  backend_fence (e->store, why);
  fenced (e);
}

int
engine_start (struct engine *e, char *errbuf, size_t size)
{
  int r = backend_resume (e->store, errbuf, size);

  return r < 0 ? r : writeback_start (e);
}

int
engine_stop (struct engine *e)
{
  /* Clients are gone; no new holds can appear. */
  int r = fenced (e);
  size_t left;

  e->stopped = true;
  if (r == 0 && atomic_load (&e->nheld) > 0 && store_not_answering (e))
    r = -EIO;
  if (r == 0)
    r = writeback_all (e, WB_SHUTDOWN, false);
  if (r < 0)
    fenced (e);
  writeback_stop (e);
  left = atomic_load (&e->nheld);
  if (r < 0 && left > 0)
    log_notice ("stopping: %zu held block%s could not be written back (%s): "
                "the timestamps in %s are lost",
                left, left == 1 ? "" : "s", strerror (-r),
                left == 1 ? "it" : "them");
  return r;
}

struct drain *
engine_gate (struct engine *e)
{
  return e->gate;
}

int
engine_drain (struct engine *e)
{
  /* The gate is closed: no client request runs, none can hold.  A
   * fenced store is another's already, with nothing held: drained.
   */
  int r;

  if (fenced (e) < 0)
    return 0;
  if (atomic_load (&e->nheld) == 0 && store_untouched (e))
    r = 0; /* nothing of this server's to make durable */
  else
    r = writeback_all (e, WB_SHUTDOWN, true);
  if (r < 0)
    return fenced (e) < 0 ? 0 : r;
  pthread_mutex_lock (&e->hold_lock);
  if (atomic_load (&e->nheld) > 0)
    r = -EAGAIN; /* a hold came from elsewhere: not drained */
  else
    {
      backend_fence (e->store, "drained: the store was handed over");
      e->fence_done = true; /* nothing to discard, nothing to say */
      e->drained = true;
    }
  pthread_mutex_unlock (&e->hold_lock);
  return r;
}

bool
engine_drained (const struct engine *e)
{
  return e->drained;
}

void
engine_release (struct engine *e)
{
  if (e->drained) /* not when the store was lost to another writer */
    backend_release (e->store);
}

void
engine_drain_failed (struct engine *e)
{
  STAT_INC (e->drain_failures);
}

void
engine_close (struct engine *e)
{
  if (!e)
    return;
  if (!e->stopped && (e->wb_running || atomic_load (&e->nheld) > 0))
    engine_stop (e);
  hold_fini (&e->holds);
  refcache_free (e->refs);
  placed_vec_reset (&e->placed);
  if (e->layout)
    absorb_jlogs_free (e->jl, e->layout->n_fs);
  layout_free (e->layout);
  free (e->fst);
  backend_close (e->store);
  drain_free (e->gate);
  pthread_cond_destroy (&e->wb_cond);
  pthread_cond_destroy (&e->flight_cond);
  pthread_cond_destroy (&e->jwb_cond);
  pthread_cond_destroy (&e->jflight_cond);
  pthread_mutex_destroy (&e->jflight_lock);
  pthread_cond_destroy (&e->wflight_cond);
  pthread_mutex_destroy (&e->wflight_lock);
  pthread_mutex_destroy (&e->hold_lock);
  pthread_mutex_destroy (&e->sum_lock);
  free (e->sum);
  pthread_rwlock_destroy (&e->layout_lock);
  pthread_mutex_destroy (&e->relayout_lock);
  free (e);
}

uint64_t
engine_size (const struct engine *e)
{
  int r = backend_refresh_size (e->store);

  if (r < 0)
    log_debug ("reading the store's size again: %s", strerror (-r));
  return backend_size (e->store);
}

const struct backend_caps *
engine_caps (const struct engine *e)
{
  return backend_caps (e->store);
}

const char *
engine_backend_name (const struct engine *e)
{
  return backend_name (e->store);
}

/* ---- reads ---------------------------------------------------------- */

/* Copy held content over what was read from the store. */
static void
overlay_locked (struct engine *e, char *buf, uint64_t len, uint64_t off)
{
  const struct layout *L = e->layout;
  uint64_t end = off + len;
  struct seg s;

  ASSERT_HOLD_LOCKED (e);
  for (uint64_t p = off; p < end; p += s.len)
    {
      uint32_t bs;

      next_seg (L, p, end, &s);
      if (!s.itable && !s.journal && !s.sb)
        continue;
      bs = s.fs->block_size;
      for (uint64_t b = s.fs->start + (s.off - s.fs->start) / bs * bs;
           b < s.off + s.len; b += bs)
        {
          const struct hold *h = hold_find (&e->holds, b);
          uint64_t lo, hi;

          if (!h)
            continue;
          lo = b > off ? b : off;
          hi = b + h->len < end ? b + h->len : end;
          memcpy (buf + (lo - off), h->data + (lo - b), hi - lo);
        }
    }
}

/* Does held content cover all of [off, off+len)?  Then a read needs no
 * store.
 */
static bool
covered_locked (struct engine *e, uint64_t len, uint64_t off)
{
  const struct layout *L = e->layout;
  uint64_t end = off + len, got = 0;
  struct seg s;

  for (uint64_t p = off; p < end; p += s.len)
    {
      uint32_t bs;

      next_seg (L, p, end, &s);
      if (!s.itable && !s.journal && !s.sb)
        return false;
      bs = s.fs->block_size;
      for (uint64_t b = s.fs->start + (s.off - s.fs->start) / bs * bs;
           b < s.off + s.len; b += bs)
        {
          const struct hold *h = hold_find (&e->holds, b);
          uint64_t lo = b > s.off ? b : s.off, hi;

          if (!h)
            return false;
          hi = b + h->len < s.off + s.len ? b + h->len : s.off + s.len;
          got += hi > lo ? hi - lo : 0;
        }
    }
  return got == len;
}

int
engine_pread (struct engine *e, void *buf, uint64_t len, uint64_t off)
{
  uint64_t drops;
  int r;

  STAT_INC (e->client_reads);
  if ((r = fenced (e)) < 0)
    return r;
  if (atomic_load (&e->nheld) == 0)
    return backend_pread (e->store, buf, len, off);

  pthread_rwlock_rdlock (&e->layout_lock);
  if (!touches_held_region (e->layout, off, len))
    {
      pthread_rwlock_unlock (&e->layout_lock);
      return backend_pread (e->store, buf, len, off);
    }
  /* The store is read without the hold lock, then overlaid with what
   * is held under it.  A hold leaves the table only once the store has
   * its block (or the client's newer bytes), so unless one left while
   * the store was read, the read plus the overlay is what the client
   * sees; if one did, the read is made again under the lock.
   */
  /* All held: no store read, which may be slow or stalled. */
  if (hold_maybe_in (&e->holds, off, len))
    {
      bool all;

      pthread_mutex_lock (&e->hold_lock);
      all = covered_locked (e, len, off);
      if (all)
        overlay_locked (e, buf, len, off);
      pthread_mutex_unlock (&e->hold_lock);
      if (all)
        {
          pthread_rwlock_unlock (&e->layout_lock);
          return 0;
        }
    }
  drops = atomic_load (&e->holds.drops);
  r = backend_pread (e->store, buf, len, off);
  TEST_POINT (TP_PREAD_READ);
  /* No hold there now, and none left since the read began: nothing to
   * overlay, no need of the lock.
   */
  if (r == 0 && !hold_maybe_in (&e->holds, off, len)
      && atomic_load (&e->holds.drops) == drops)
    {
      pthread_rwlock_unlock (&e->layout_lock);
      return 0;
    }
  pthread_mutex_lock (&e->hold_lock);
  if (r == 0 && atomic_load (&e->holds.drops) != drops)
    r = backend_pread (e->store, buf, len, off);
  if (r == 0)
    overlay_locked (e, buf, len, off);
  pthread_mutex_unlock (&e->hold_lock);
  pthread_rwlock_unlock (&e->layout_lock);
  return r;
}

/* ---- writes --------------------------------------------------------- */

/* What became of one inode-table block of a write. */
enum itable_fate
{
  BLOCK_UNCHANGED, /* the store has exactly this: nothing to do */
  BLOCK_HELD,
  BLOCK_WRITE, /* to the store (its hold, if any, goes once it is there) */
};

/* Decide the fate of inode-table block b, whose new content is blk and
 * whose content in the store is ref.  Returns an itable_fate, or -errno.
 */
static int
itable_block (struct engine *e, const struct seg *s, uint64_t b,
              const char *ref, const char *blk, uint32_t flags)
{
  struct fs_stats *st = &e->fst[s->fsi];
  const uint32_t bs = s->fs->block_size;
  struct hold *h = hold_find (&e->holds, b);
  enum tclass cls = s->sb ? classify_superblock (ref, blk, bs, SB_OFFSET % bs)
                          : classify_block (s->fs->inode_size, ref, blk, bs);
  int r = 0;

  STAT_INC (st->itable_writes);
  if (cls == TCLASS_SAME && !(flags & BIO_FUA))
    {
      STAT_INC (st->unchanged);
      if (h)
        hold_drop (&e->holds, h);
      /* The store has the client's newest content of the block. */
      jstate_placed_locked (e, b, e->holds.gen);
      return BLOCK_UNCHANGED;
    }
  if ((cls == TCLASS_ATIME || cls == TCLASS_TIME) && !(flags & BIO_FUA))
    {
      if (h)
        STAT_INC (st->superseded);
      STAT_INC (st->held);
      if (!hold_put (&e->holds, b, bs,
                     &(struct hold_info){
                         .fs = s->fsi, .kind = HOLD_INPLACE, .cls = cls },
                     blk, now_ns (), &r))
        return r;
      return BLOCK_HELD;
    }
  if (cls == TCLASS_REAL)
    STAT_INC (st->real_writes);
  if (h)
    STAT_INC (st->writeback[(flags & BIO_FUA) ? WB_FUA : WB_REAL]);
  return BLOCK_WRITE;
}

/* The blocks of a write to one inode-table segment: nw gets the merged
 * content (what the client sees now, then the client's bytes), ref is
 * what the store has.  Returns the number of store writes put in bios,
 * or -errno; *held_any is set if a block was held.
 */
static int
itable_blocks (struct engine *e, const struct seg *s, const char *data,
               uint32_t flags, const char *ref, char *nw, struct bio *bios,
               bool *held_any)
{
  const uint32_t bs = s->fs->block_size;
  const uint64_t b0 = s->fs->start + (s->off - s->fs->start) / bs * bs;
  const uint64_t end = s->off + s->len;
  int nb = 0;

  for (uint64_t b = b0; b < end; b += bs)
    {
      const struct hold *h = hold_find (&e->holds, b);
      char *blk = nw + (b - b0);
      uint64_t lo = b > s->off ? b : s->off;
      uint64_t hi = b + bs < end ? b + bs : end;
      int fate;

      /* What the client sees now, under the bytes it wrote (all of
       * them, usually: then nothing).
       */
      if (hi - lo < bs)
        memcpy (blk, h ? (const char *)h->data : ref + (b - b0), bs);
      memcpy (blk + (lo - b), data + (lo - s->off), hi - lo);
      fate = itable_block (e, s, b, ref + (b - b0), blk, flags);
      if (fate < 0)
        return fate;
      *held_any |= fate == BLOCK_HELD;
      if (fate == BLOCK_WRITE)
        bios[nb++] = (struct bio){
          .op = BIO_WRITE, .buf = blk, .offset = b, .len = bs, .flags = flags
        };
    }
  return nb;
}

/* Held in-place blocks that ride along with a write, at most. */
#define RIDE_MAX 16

/* Bytes of blocks up to which an inode-table write's buffers are on the
 * stack.
 */
#define ITABLE_STACK 8192

static size_t
align_up (size_t n)
{
  return (n + HOLD_ALIGN - 1) / HOLD_ALIGN * HOLD_ALIGN;
}

static bool
in_bios (const struct bio *v, int n, uint64_t off)
{
  for (int i = 0; i < n; i++)
    if (v[i].offset == off)
      return true;
  return false;
}

/* Held in-place neighbours of the blocks written, bios[0..nb) (room for
 * RIDE_MAX more): each block is extended both ways while the next block
 * is held in place, outside the request's blocks [lo, hi) (what this
 * request has just held stays held) and not being written already.
 * Writing a hold sooner, together with others, is always allowed, and
 * the store gets one request where it would later get another.  Their
 * content is copied to *copies (RIDE_MAX blocks, allocated here for the
 * first of them: most writes have none, and allocate nothing), their
 * generations to gens, as the write runs without the hold lock.  Without
 * memory for the copies, none rides along (they are written later).
 * Returns the new count.
 */
static int
ride_along_locked (struct engine *e, uint32_t bs, uint64_t lo, uint64_t hi,
                   struct bio *bios, int nb, char **copies, uint64_t *gens)
{
  int n = nb;

  ASSERT_HOLD_LOCKED (e);
  for (int i = 0; i < nb; i++)
    for (int dir = -1; dir <= 1; dir += 2)
      for (uint64_t b = bios[i].offset + dir * (int64_t)bs; n - nb < RIDE_MAX;
           b += dir * (int64_t)bs)
        {
          struct hold *h = hold_find (&e->holds, b);
          char *copy;

          if (!h || h->kind != HOLD_INPLACE || h->len != bs
              || (b >= lo && b < hi) || in_bios (bios, n, b)
              || writeback_busy_locked (e, b, bs))
            break;
          if (!*copies)
            *copies
                = aligned_alloc (HOLD_ALIGN, align_up ((size_t)RIDE_MAX * bs));
          if (!*copies)
            return n;
          copy = *copies + (size_t)(n - nb) * bs;
          memcpy (copy, h->data, bs);
          gens[n - nb] = h->gen;
          bios[n++] = (struct bio){ .op = BIO_WRITE,
                                    .buf = copy,
                                    .offset = b,
                                    .len = bs,
                                    .flags = bios[i].flags };
        }
  return n;
}

/* Drop the holds of bios[0..n) once written: those from ride_along_locked
 * (from own on, of generations gens) count as written back with a real
 * write.  The client's own blocks are newer than every hold there was
 * when the write began (gen0); a hold given since stays.  A held
 * neighbour is as new as its hold (jstate_placed_locked).
 */
static void
drop_written_locked (struct engine *e, const struct bio *bios, int n, int own,
                     uint64_t gen0, const uint64_t *gens)
{
  ASSERT_HOLD_LOCKED (e);
  for (int i = 0; i < n; i++)
    {
      struct hold *h = hold_find (&e->holds, bios[i].offset);
      uint64_t gen = i < own ? gen0 : gens[i - own];

      jstate_placed_locked (e, bios[i].offset, gen);
      if (!h || (i < own ? h->gen > gen0 : h->gen != gen))
        continue;
      if (i >= own)
        STAT_INC (hold_stats (e, h)->writeback[WB_REAL]);
      hold_drop (&e->holds, h);
    }
}

/* The store write of an inode-table write's blocks, bios[0..nb) (own of
 * them the client's, the rest held neighbours of generations gens),
 * without the hold lock: claimed first, so that every other write of
 * them (a write-back, another inode-table write, a zero or trim) waits
 * for it, and reads, the stats and the other blocks' writes go on.
 * Hold lock held on entry and on return.
 */
static int
itable_store_unlocking (struct engine *e, struct bio *bios, int nb, int own,
                        const uint64_t *gens)
{
  const uint64_t gen0 = e->holds.gen;
  struct wflight *w = writeback_claim_locked (e, bios, nb);
  uint64_t seq = e->wb_write_seq;
  int r;

  ASSERT_HOLD_LOCKED (e);
  if (!w)
    return -ENOMEM;
  pthread_mutex_unlock (&e->hold_lock);
  r = store_submit (e, bios, nb, ST_PASS);
  pthread_mutex_lock (&e->hold_lock);
  /* The store has the blocks, unless a write followed (or they failed). */
  if (seq == e->wb_write_seq)
    refs_written_locked (e, bios, nb, r);
  else
    for (int i = 0; i < nb; i++)
      refs_forget_locked (e, bios[i].offset, bios[i].len);
  if (r == 0)
    drop_written_locked (e, bios, nb, own, gen0, gens);
  /* Only now: an older held copy of them may go. */
  writeback_unclaim (e, w);
  return r;
}

/* The inode-table part of a write: whole blocks [b0, b0 + n*bs), of
 * which the client wrote [s->off, +len) from data.  It waits (without
 * the hold lock) for writes of the same blocks on their way, so that
 * the reference is what the store has: from the cache, or read once for
 * any n (again only if a write of these blocks began meanwhile); a
 * block written leaves the hold table once the store has it.
 */
static int
write_itable (struct engine *e, const struct seg *s, const char *data,
              uint32_t flags)
{
  const uint32_t bs = s->fs->block_size;
  const uint64_t b0 = s->fs->start + (s->off - s->fs->start) / bs * bs;
  const uint64_t n = (s->off + s->len - b0 + bs - 1) / bs;
  /* The common write, a block or two, allocates nothing. */
  const bool small = n * bs <= ITABLE_STACK;
  _Alignas (HOLD_ALIGN) char nw_small[ITABLE_STACK];
  char ref_small[ITABLE_STACK];
  struct bio bios_small[ITABLE_STACK / 1024 + RIDE_MAX];
  char *ref = small ? ref_small : malloc (n * bs);
  char *nw = small ? nw_small : aligned_alloc (HOLD_ALIGN, align_up (n * bs));
  struct bio *bios = small ? bios_small : calloc (n + RIDE_MAX, sizeof *bios);
  char *copies = NULL;
  uint64_t gens[RIDE_MAX];
  bool held_any = false;
  int r = -ENOMEM, nb, own;

  if (ref && nw && bios)
    {
      pthread_mutex_lock (&e->hold_lock);
      /* The reference is the block as the store has it. */
      do
        r = writeback_wait_range_unlocking (e, b0, n * bs)
                ? 1
                : refs_read_unlocking (e, ref, b0, n, bs);
      while (r == 1);
      nb = r < 0 ? r
                 : itable_blocks (e, s, data, flags, ref, nw, bios, &held_any);
      own = nb;
      if (nb > 0)
        nb = ride_along_locked (e, bs, b0, b0 + n * bs, bios, nb, &copies,
                                gens);
      r = nb <= 0 ? nb : itable_store_unlocking (e, bios, nb, own, gens);
      if (r == 0)
        r = writeback_cap_unlocking (e);
      if (held_any)
        writeback_kick_locked (e);
      holds_changed (e);
      pthread_mutex_unlock (&e->hold_lock);
    }
  if (!small)
    {
      free (ref);
      free (nw);
      free (bios);
    }
  free (copies);
  return r;
}

int
engine_pwrite (struct engine *e, const void *buf, uint64_t len, uint64_t off,
               uint32_t flags)
{
  const struct layout *L;
  uint64_t end = off + len;
  struct seg s;
  size_t last_fsi = SIZE_MAX;
  int r = 0;

  STAT_INC (e->client_writes);
  if ((r = fenced (e)) < 0)
    return r;
  if (atomic_load (&e->layout_stale))
    {
      r = relayout (e);
      if (r < 0)
        return r;
    }
  flags &= BIO_FUA;

  pthread_rwlock_rdlock (&e->layout_lock);
  L = e->layout;
  for (uint64_t p = off; p < end && r == 0; p += s.len)
    {
      const char *data = (const char *)buf + (p - off);

      next_seg (L, p, end, &s);
      if (s.fsi != last_fsi)
        {
          STAT_INC (e->fst[s.fsi].client_writes);
          last_fsi = s.fsi;
        }
      if (s.itable || s.sb)
        r = write_itable (e, &s, data, flags);
      else if (s.journal && engine_jlog (e, s.fsi))
        r = absorb_write (e, &s, data, flags);
      else
        r = store_pwrite (e, data, s.len, p, flags, ST_PASS);
    }
  /* A failed write may have left any part of it: the store says. */
  if (layout_overlaps_watch (L, off, len))
    check_layout_write (e, r == 0 ? buf : NULL, off, len);
  pthread_rwlock_unlock (&e->layout_lock);
  if (r < 0)
    fenced (e);
  return r;
}

int
engine_flush (struct engine *e)
{
  int r;

  STAT_INC (e->client_flushes);
  if ((r = fenced (e)) < 0)
    return r;
  if (atomic_load (&e->nheld) == 0 && !atomic_load (&e->tails_pending))
    return writeback_report (e, store_flush (e, WB_FLUSH));
  pthread_rwlock_rdlock (&e->layout_lock);
  r = writeback_flush (e);
  pthread_rwlock_unlock (&e->layout_lock);
  if (r < 0)
    fenced (e);
  return r;
}

/* ---- zero and trim -------------------------------------------------- */

/* Holds under [off, off+len): partly covered ones and journal holds are
 * written back first (writeback_range_unlocking); whole in-place ones
 * are dropped once the store operation succeeded (the new request
 * wins), unless given new content meanwhile.  If it failed, they stay:
 * the client sees what it saw before.  The store operation runs without
 * the hold lock, claimed as an inode-table write is.
 */
static int
zero_or_trim_locked (struct engine *e, struct bio *bio)
{
  const uint64_t off = bio->offset, end = bio->offset + bio->len;
  struct hold *h, *next;
  struct wflight *w;
  uint64_t gen0;
  int r;

  ASSERT_HOLD_LOCKED (e);
  /* Until, with the lock held, nothing is left to write back first and
   * nothing writes its blocks.
   */
  for (;;)
    {
      if (writeback_range_pending_locked (e, off, bio->len))
        {
          r = writeback_range_unlocking (e, off, bio->len);
          if (r < 0)
            return r;
          continue;
        }
      if (jstate_wait_passes_unlocking (e, off, bio->len))
        continue;
      if (!writeback_wait_range_unlocking (e, off, bio->len))
        break;
    }
  gen0 = e->holds.gen;
  w = writeback_claim_locked (e, bio, 1);
  if (!w)
    return -ENOMEM;
  pthread_mutex_unlock (&e->hold_lock);
  r = store_submit (e, bio, 1, ST_PASS);
  pthread_mutex_lock (&e->hold_lock);
  refs_forget_locked (e, off, bio->len);
  /* Newer than any absorbed copy of a block there. */
  if (r == 0)
    jstate_placed_range_locked (e, off, bio->len, gen0);
  for (h = hold_oldest (&e->holds); r == 0 && h; h = next)
    {
      next = hold_next (&e->holds, h);
      if (h->off >= off && h->off + h->len <= end && h->gen <= gen0)
        {
          STAT_INC (hold_stats (e, h)->dropped);
          hold_drop (&e->holds, h);
        }
    }
  holds_changed (e);
  /* Only now: an older held copy of them may go. */
  writeback_unclaim (e, w);
  return r;
}

static int
zero_or_trim (struct engine *e, enum bio_op op, uint64_t len, uint64_t off,
              uint32_t flags)
{
  struct bio bio = { .op = op, .len = len, .offset = off, .flags = flags };
  int r;

  STAT_INC (e->client_writes);
  if ((r = fenced (e)) < 0)
    return r;
  pthread_rwlock_rdlock (&e->layout_lock);
  /* Under the hold lock wherever an inode table or journal may be hit:
   * holds there, and the reference cache, must hear of it.
   */
  if (!touches_held_region (e->layout, off, len))
    r = store_submit (e, &bio, 1, ST_PASS);
  else
    {
      pthread_mutex_lock (&e->hold_lock);
      r = zero_or_trim_locked (e, &bio);
      pthread_mutex_unlock (&e->hold_lock);
    }
  if (layout_overlaps_watch (e->layout, off, len))
    atomic_store (&e->layout_stale, true);
  pthread_rwlock_unlock (&e->layout_lock);
  return r;
}

int
engine_zero (struct engine *e, uint64_t len, uint64_t off, uint32_t flags)
{
  return zero_or_trim (e, BIO_ZERO, len, off, flags);
}

int
engine_trim (struct engine *e, uint64_t len, uint64_t off, uint32_t flags)
{
  return zero_or_trim (e, BIO_TRIM, len, off, flags);
}

int
engine_cache (struct engine *e, uint64_t len, uint64_t off)
{
  int r = fenced (e);

  return r < 0 ? r : backend_cache (e->store, len, off);
}

/* ---- extents -------------------------------------------------------- */

/* The store's extents, with held blocks as data: a hold may sit where
 * the store has a hole (a journal position never written: mkfs leaves
 * the journal sparse), and extents must agree with reads.
 */
struct held_extents
{
  struct engine *e;
  backend_extent_fn fn;
  void *opaque;
};

static int
cmp_hold_off (const void *a, const void *b)
{
  const struct hold *x = *(const struct hold *const *)a;
  const struct hold *y = *(const struct hold *const *)b;

  return x->off < y->off ? -1 : x->off > y->off;
}

/* Report the hole [off, end) split around the held blocks in it, which
 * are sorted in v[0..n).
 */
static int
split_hole (const struct held_extents *x, struct hold **v, size_t n,
            uint64_t off, uint64_t end)
{
  for (size_t i = 0; i < n && off < end; i++)
    {
      uint64_t lo = v[i]->off > off ? v[i]->off : off;
      uint64_t hi = v[i]->off + v[i]->len;
      int r;

      if (hi > end)
        hi = end;
      if (hi <= off)
        continue;
      if (lo > off && (r = x->fn (x->opaque, off, lo - off, true)) != 0)
        return r;
      if ((r = x->fn (x->opaque, lo, hi - lo, false)) != 0)
        return r;
      off = hi;
    }
  return off < end ? x->fn (x->opaque, off, end - off, true) : 0;
}

/* A store extent: data as it is; a hole split around held blocks
 * (hold lock held).
 */
static int
held_extent (struct held_extents *x, uint64_t off, uint64_t len, bool hole)
{
  struct hold **v, *h;
  size_t n = 0;
  int r;

  ASSERT_HOLD_LOCKED (x->e);
  if (!hole || x->e->holds.count == 0)
    return x->fn (x->opaque, off, len, hole);
  v = malloc (x->e->holds.count * sizeof *v);
  if (!v)
    return -ENOMEM;
  for (h = hold_oldest (&x->e->holds); h; h = hold_next (&x->e->holds, h))
    if (h->off < off + len && h->off + h->len > off)
      v[n++] = h;
  qsort (v, n, sizeof *v, cmp_hold_off);
  r = split_hole (x, v, n, off, off + len);
  free (v);
  return r;
}

/* The store's extents, as its query tells them (without the hold lock). */
struct extent
{
  uint64_t off, len;
  bool hole;
};
DEFINE_VECTOR (extent_vec, struct extent)

static int
collect_extent (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  TEST_POINT (TP_EXTENTS);
  return extent_vec_append (opaque, (struct extent){ off, len, hole });
}

/* Tries of the store's query before the extents are told as all data. */
#define EXTENT_TRIES 3

/* The store is asked without the hold lock (it may be a remote's block
 * status, slow or stuck), then what it told is split around the holds
 * under the lock.  A hold that left the table meanwhile was written to
 * the store first, where the answer may show a hole: then it is asked
 * again, and after EXTENT_TRIES the extents are told as data, which is
 * never wrong.
 */
int
engine_extents (struct engine *e, uint64_t len, uint64_t off,
                backend_extent_fn fn, void *opaque)
{
  struct held_extents x = { e, fn, opaque };
  struct extent_vec v = { 0 };
  int r;

  if ((r = fenced (e)) < 0)
    return r;
  if (atomic_load (&e->nheld) == 0)
    return backend_extents (e->store, len, off, fn, opaque);
  for (int tries = 1;; tries++)
    {
      uint64_t drops = atomic_load (&e->holds.drops);
      bool moved;

      v.n = 0;
      r = backend_extents (e->store, len, off, collect_extent, &v);
      if (r < 0)
        break;
      pthread_mutex_lock (&e->hold_lock);
      moved = atomic_load (&e->holds.drops) != drops;
      for (size_t i = 0; !moved && r == 0 && i < v.n; i++)
        r = held_extent (&x, v.v[i].off, v.v[i].len, v.v[i].hole);
      pthread_mutex_unlock (&e->hold_lock);
      if (!moved)
        break;
      if (tries == EXTENT_TRIES)
        {
          for (size_t i = 0; r == 0 && i < v.n; i++)
            r = fn (opaque, v.v[i].off, v.v[i].len, false);
          break;
        }
    }
  extent_vec_reset (&v);
  return r;
}

/* ---- clients, stats ------------------------------------------------- */

void
engine_client_open (struct engine *e)
{
  atomic_fetch_add (&e->clients, 1);
}

int
engine_client_close (struct engine *e)
{
  if (atomic_fetch_sub (&e->clients, 1) == 1)
    return writeback_all (e, WB_DISCONNECT, false);
  return 0;
}

/* The name of instance i of layout L: "ext4@START", or "other". */
static void
instance_name (const struct layout *L, size_t i, char *buf, size_t size)
{
  if (i < L->n_fs)
    snprintf (buf, size, "ext4@%" PRIu64, L->fs[i].start);
  else
    snprintf (buf, size, "other");
}

/* Names, geometry and counters of every instance, "other" last. */
static void
snapshot_instances (struct engine *e, struct stats_snapshot *out)
{
  const struct layout *L = e->layout;

  for (size_t i = 0; i <= L->n_fs; i++)
    {
      struct fs_snapshot *f = &out->fs[i];

      instance_name (L, i, f->name, sizeof f->name);
      if (i < L->n_fs)
        {
          f->start = L->fs[i].start;
          f->size = L->fs[i].size;
          f->block_size = L->fs[i].block_size;
          f->journal = L->fs[i].has_journal;
        }
      else
        f->size = backend_size (e->store);
      stats_load (&f->c, &e->fst[i]);
    }
}

/* Has "other" (the last instance) anything to show: is it the only
 * instance, or was something outside every filesystem written or held?
 */
static bool
other_shown (const struct stats_snapshot *s)
{
  static const struct fs_stats zero;
  const struct fs_snapshot *o = &s->fs[s->n - 1];

  return s->n == 1 || o->held_blocks > 0
         || memcmp (&o->c, &zero, sizeof zero) != 0;
}

/* Take e's hold lock within ms milliseconds: 0, or -EBUSY (a write-back
 * that runs under it waits on the store).
 */
static int
hold_lock_within (struct engine *e, long ms)
{
  struct timespec ts;

  clock_gettime (CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000)
    {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
  return pthread_mutex_timedlock (&e->hold_lock, &ts) == 0 ? 0 : -EBUSY;
}

/* The hold figures of out's instances, counted in the table and kept
 * (e->sum) when the hold lock comes within STATS_HOLD_WAIT_MS; else
 * those kept last time, and out->holds_stale_s says how old they are
 * (-1: none kept yet), so that a store that stopped answering under the
 * hold lock stalls requests, not the stats.
 */
static void
stats_holds (struct engine *e, struct stats_snapshot *out, uint64_t now)
{
  struct hold_sum *sum = calloc (out->n, sizeof *sum);
  bool fresh = sum && hold_lock_within (e, STATS_HOLD_WAIT_MS) == 0;

  if (fresh)
    {
      for (struct hold *h = hold_oldest (&e->holds); h;
           h = hold_next (&e->holds, h))
        {
          struct hold_sum *f = &sum[h->fs < out->n ? h->fs : out->n - 1];

          f->blocks++;
          f->bytes += h->len;
          if (!h->met && (f->oldest_ns == 0 || h->first_ns < f->oldest_ns))
            f->oldest_ns = h->first_ns;
        }
      pthread_mutex_unlock (&e->hold_lock);
    }
  pthread_mutex_lock (&e->sum_lock);
  if (fresh)
    {
      free (e->sum);
      e->sum = sum;
      e->sum_n = out->n;
      e->sum_ns = now;
      sum = NULL;
    }
  out->holds_stale_s = fresh ? 0 : e->sum ? (now - e->sum_ns) / 1e9 : -1;
  for (size_t i = 0; e->sum && e->sum_n == out->n && i < out->n; i++)
    {
      out->fs[i].held_blocks = e->sum[i].blocks;
      out->fs[i].held_bytes = e->sum[i].bytes;
      if (e->sum[i].oldest_ns)
        out->fs[i].oldest_age_s = (now - e->sum[i].oldest_ns) / 1e9;
    }
  pthread_mutex_unlock (&e->sum_lock);
  free (sum);
}

int
engine_stats (struct engine *e, struct stats_snapshot *out)
{
  uint64_t now = now_ns ();

  memset (out, 0, sizeof *out);
  out->policy = policy_name (e->cfg.policy);
  out->max_held = e->cfg.max_held;
  out->max_age_s = e->cfg.max_age_ns / 1000000000;
  out->client_writes = __atomic_load_n (&e->client_writes, __ATOMIC_RELAXED);
  out->client_reads = __atomic_load_n (&e->client_reads, __ATOMIC_RELAXED);
  out->client_flushes = __atomic_load_n (&e->client_flushes, __ATOMIC_RELAXED);
  out->layout_checks = __atomic_load_n (&e->layout_checks, __ATOMIC_RELAXED);
  out->layout_rereads = __atomic_load_n (&e->layout_rereads, __ATOMIC_RELAXED);
  out->store_errors = backend_failures (e->store, &out->last_error_time);
  out->writeback_errors
      = __atomic_load_n (&e->writeback_errors, __ATOMIC_RELAXED);
  if (__atomic_load_n (&e->last_writeback_error, __ATOMIC_RELAXED)
      > out->last_error_time)
    out->last_error_time
        = __atomic_load_n (&e->last_writeback_error, __ATOMIC_RELAXED);
  out->drain_failures = __atomic_load_n (&e->drain_failures, __ATOMIC_RELAXED);
  out->fenced = backend_fenced (e->store);
  for (int t = 0; t < ST_NTRIGGERS; t++)
    {
      out->store_writes[t]
          = __atomic_load_n (&e->store_writes[t], __ATOMIC_RELAXED);
      out->store_flushes[t]
          = __atomic_load_n (&e->store_flushes[t], __ATOMIC_RELAXED);
    }
  out->store_flushes_skipped
      = __atomic_load_n (&e->store_flushes_skipped, __ATOMIC_RELAXED);

  pthread_rwlock_rdlock (&e->layout_lock);
  out->fs = calloc (e->layout->n_fs + 1, sizeof *out->fs);
  if (!out->fs)
    {
      pthread_rwlock_unlock (&e->layout_lock);
      return -ENOMEM;
    }
  out->n = e->layout->n_fs + 1;
  snapshot_instances (e, out);
  stats_holds (e, out, now);
  pthread_rwlock_unlock (&e->layout_lock);
  if (!other_shown (out))
    out->n--;
  return 0;
}

void
engine_stats_free (struct stats_snapshot *s)
{
  free (s->fs);
  s->fs = NULL;
}

/* ---- the list of holds ---------------------------------------------- */

/* Buffers for engine_holds, grown as needed. */
struct holds_scratch
{
  char *ref; /* the store's block */
  struct held_inode *inodes;
  size_t cap;     /* bytes of ref, records of inodes */
  size_t ref_len; /* bytes read into ref */
};

static int
scratch_grow (struct holds_scratch *x, size_t len)
{
  char *ref;
  struct held_inode *ino;

  if (len <= x->cap)
    return 0;
  ref = realloc (x->ref, len);
  if (ref)
    x->ref = ref;
  ino = realloc (x->inodes, len * sizeof *ino);
  if (ino)
    x->inodes = ino;
  if (!ref || !ino)
    return -ENOMEM;
  x->cap = len;
  return 0;
}

/* The offsets of every hold, oldest first (*n may be 0). */
static int
held_offsets (struct engine *e, uint64_t **out, size_t *n)
{
  size_t i = 0;
  int r = hold_lock_within (e, HOLDS_WAIT_MS);

  if (r < 0)
    return r;
  *n = e->holds.count;
  *out = malloc ((*n ? *n : 1) * sizeof **out);
  for (struct hold *h = hold_oldest (&e->holds); *out && h;
       h = hold_next (&e->holds, h))
    (*out)[i++] = h->off;
  pthread_mutex_unlock (&e->hold_lock);
  return *out ? 0 : -ENOMEM;
}

/* Is hold h in place, with inode records to compare? */
static bool
has_records (struct engine *e, const struct hold *h)
{
  const struct ext4_fs *fs
      = h->fs < e->layout->n_fs ? &e->layout->fs[h->fs] : NULL;
  uint32_t isz = fs ? fs->inode_size : 0;

  return h->kind == HOLD_INPLACE && isz && h->len % isz == 0
         && h->off != engine_sb_block (fs);
}

/* The records of in-place hold h that differ from the store's block,
 * read (x->ref, x->ref_len bytes) with result read_r, into hb; a failed
 * store read is reported in hb, not returned.
 */
static int
differing_inodes_locked (struct engine *e, const struct hold *h,
                         struct holds_scratch *x, int read_r,
                         struct held_block *hb)
{
  const struct ext4_fs *fs;
  uint32_t isz;

  ASSERT_HOLD_LOCKED (e);
  if (!has_records (e, h) || x->ref_len != h->len)
    return 0;
  if (read_r < 0)
    {
      hb->store_err = read_r;
      return 0;
    }
  fs = &e->layout->fs[h->fs];
  isz = fs->inode_size;
  for (uint32_t k = 0; k < h->len; k += isz)
    if (memcmp (x->ref + k, h->data + k, isz) != 0)
      x->inodes[hb->n_inodes++] = (struct held_inode){
        .ino = layout_ino_at (fs, h->off + k),
        .fields = classify_time_fields (isz, x->ref + k, h->data + k),
      };
  hb->inodes = x->inodes;
  return 0;
}

/* What engine_holds shows of hold h (both locks held), against the
 * store's block as read (differing_inodes_locked).
 */
static int
view_hold_locked (struct engine *e, const struct hold *h,
                  struct holds_scratch *x, int read_r, struct held_block *hb)
{
  const struct layout *L = e->layout;
  uint64_t now = now_ns ();
  struct timespec wall;

  ASSERT_HOLD_LOCKED (e);
  memset (hb, 0, sizeof *hb);
  instance_name (L, h->fs < L->n_fs ? h->fs : L->n_fs, hb->fs, sizeof hb->fs);
  hb->off = h->off;
  hb->len = h->len;
  hb->kind = h->kind;
  hb->cls = h->cls;
  hb->seq = h->seq;
  hb->met = h->met;
  hb->age_s = (now - h->first_ns) / 1e9;
  hb->deadline_in_s = e->cfg.max_age_ns / 1e9 - hb->age_s;
  clock_gettime (CLOCK_REALTIME, &wall);
  hb->deadline_unix
      = (int64_t)(wall.tv_sec + wall.tv_nsec / 1e9 + hb->deadline_in_s);
  if (h->kind != HOLD_INPLACE)
    return 0;
  return differing_inodes_locked (e, h, x, read_r, hb);
}

int
engine_holds (struct engine *e, engine_hold_fn fn, void *opaque)
{
  struct holds_scratch x = { 0 };
  uint64_t *offs = NULL;
  size_t n = 0;
  int r = held_offsets (e, &offs, &n);

  /* One hold at a time under the locks, and the store's block read
   * without the hold lock: a store that is slow or not answering stalls
   * this list, not the requests.
   */
  for (size_t i = 0; r == 0 && i < n; i++)
    {
      struct held_block hb;
      const struct hold *h;
      int read_r = 0;

      pthread_rwlock_rdlock (&e->layout_lock);
      if ((r = hold_lock_within (e, HOLDS_WAIT_MS)) < 0)
        {
          pthread_rwlock_unlock (&e->layout_lock);
          break;
        }
      h = hold_find (&e->holds, offs[i]);
      x.ref_len = 0;
      if (h && has_records (e, h))
        {
          uint64_t len = h->len;
          /* A write-back on its way, or one that just failed: the store
           * may not answer, and the control socket must.
           */
          bool busy = !TAILQ_EMPTY (&e->flights) || store_not_answering (e);

          pthread_mutex_unlock (&e->hold_lock);
          r = scratch_grow (&x, len);
          if (r == 0)
            {
              read_r = busy ? -EAGAIN
                            : backend_pread (e->store, x.ref, len, offs[i]);
              x.ref_len = len;
            }
          if (hold_lock_within (e, HOLDS_WAIT_MS) < 0)
            {
              pthread_rwlock_unlock (&e->layout_lock);
              r = -EBUSY;
              break;
            }
          h = hold_find (&e->holds, offs[i]);
        }
      if (h && r == 0)
        r = view_hold_locked (e, h, &x, read_r, &hb);
      if (h && r == 0)
        r = fn (opaque, &hb);
      pthread_mutex_unlock (&e->hold_lock);
      pthread_rwlock_unlock (&e->layout_lock);
    }
  free (offs);
  free (x.ref);
  free (x.inodes);
  return r;
}
