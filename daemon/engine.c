/* engine.c --- route client requests: hold timestamp-only inode-table
 * writes, send everything else straight to the backing store.
 *
 * Locks, in the order they are taken:
 *
 *   layout_lock (rwlock)  protects `layout` and `fst` (the per-instance
 *                         counters array).  Requests hold it for reading
 *                         while they classify; re-reading the layout
 *                         holds it for writing.
 *   hold_lock (mutex)     protects the hold table, `stopping`, and makes
 *                         every read-merge-classify-write of an inode-
 *                         table block, every read that overlays held
 *                         content and every write-back atomic with
 *                         respect to each other.  A hold leaves the table
 *                         only after its write-back completed, so a read
 *                         sees either the hold or the written-back block.
 *
 * Counters are updated with relaxed atomic adds; `nheld` mirrors the
 * table's count so that requests can skip the hold lock when nothing
 * is held.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "classify.h"
#include "control.h"
#include "engine.h"
#include "hold.h"
#include "jlog.h"
#include "journal.h"
#include "layout.h"
#include "log.h"
#include "stats.h"

#define STAT_ADD(field, n) __atomic_fetch_add (&(field), (n), __ATOMIC_RELAXED)
#define STAT_INC(field) STAT_ADD (field, 1)

struct engine
{
  struct engine_config cfg;
  struct backend *store;
  atomic_int clients;
  uint64_t client_writes, client_reads, client_flushes;

  pthread_rwlock_t layout_lock;
  struct layout *layout;
  struct fs_stats *fst; /* layout->n_fs + 1 entries; the last is "other" */
  /* Per filesystem of the layout: its journal as followed under
   * policy=atime|lazy (NULL: no absorption).  The array is replaced
   * under the layout write lock; the jlogs are used under hold_lock.
   */
  struct jlog **jl;
  atomic_bool layout_stale;
  /* A journal superblock was written without FUA: its tail counts
   * after the next flush (jlog_flushed).
   */
  atomic_bool tails_pending;

  pthread_mutex_t hold_lock;
  struct hold_table holds;
  atomic_size_t nheld;
  pthread_cond_t wb_cond; /* a hold appeared, or stopping */
  bool stopping;
  bool wb_running;
  pthread_t wb_thread;

  struct control *ctl;
};

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

static uint64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int
store_read (void *opaque, void *buf, size_t len, uint64_t off)
{
  return backend_pread (opaque, buf, len, off);
}

/* ---- segments of a request ------------------------------------------ */

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
  const struct journal_extent *jext; /* journal: the extent */
};

/* The journal extent of fs holding off, or NULL; *next is the start of
 * the first extent after off (or UINT64_MAX).
 */
static const struct journal_extent *
jext_at (const struct ext4_fs *fs, uint64_t off, uint64_t *next)
{
  size_t lo = 0, hi = fs->n_journal;

  while (lo < hi)
    {
      size_t mid = lo + (hi - lo) / 2;

      if (fs->journal[mid].off <= off)
        lo = mid + 1;
      else
        hi = mid;
    }
  *next = lo < fs->n_journal ? fs->journal[lo].off : UINT64_MAX;
  if (lo > 0 && off < fs->journal[lo - 1].off + fs->journal[lo - 1].len)
    return &fs->journal[lo - 1];
  return NULL;
}

/* First inode-table run of fs that starts after off, or fs's end. */
static uint64_t
next_itable_start (const struct ext4_fs *fs, uint64_t off)
{
  size_t lo = 0, hi = fs->n_itable;

  while (lo < hi)
    {
      size_t mid = lo + (hi - lo) / 2;

      if (fs->itable[mid].off <= off)
        lo = mid + 1;
      else
        hi = mid;
    }
  return lo < fs->n_itable ? fs->itable[lo].off : fs->start + fs->size;
}

static void
next_seg (const struct layout *L, uint64_t off, uint64_t end, struct seg *s)
{
  const struct ext4_fs *fs = layout_fs_at (L, off);
  uint64_t stop = end;

  s->off = off;
  s->fs = fs;
  s->itable = false;
  s->journal = false;
  s->jext = NULL;
  if (fs)
    {
      const struct itable_run *run = layout_itable_at (fs, off);
      uint64_t nj;

      s->fsi = fs - L->fs;
      if (run)
        {
          s->itable = true;
          if (run->off + run->len < stop)
            stop = run->off + run->len;
        }
      else if ((s->jext = jext_at (fs, off, &nj)) != NULL)
        {
          s->journal = true;
          if (s->jext->off + s->jext->len < stop)
            stop = s->jext->off + s->jext->len;
        }
      else
        {
          uint64_t n = next_itable_start (fs, off);

          if (n < stop)
            stop = n;
          if (nj < stop)
            stop = nj;
        }
    }
  else
    {
      s->fsi = L->n_fs;
      for (size_t i = 0; i < L->n_fs; i++)
        if (L->fs[i].start > off && L->fs[i].start < stop)
          stop = L->fs[i].start;
    }
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
      if (s.itable || s.journal)
        return true;
    }
  return false;
}

/* ---- write-back ----------------------------------------------------- */

typedef bool (*hold_pred) (struct engine *e, const struct hold *h,
                           uint64_t arg);

static bool
pred_all (struct engine *e, const struct hold *h, uint64_t arg)
{
  (void)e;
  (void)h;
  (void)arg;
  return true;
}

static bool pending_in_open_tx (const struct engine *e, const struct hold *h);
static bool pending_known_real (struct engine *e, const struct hold *h);

/* Which holds a FLUSH must write back under the policy. */
static bool
pred_flush (struct engine *e, const struct hold *h, uint64_t arg)
{
  (void)arg;
  /* Journal holds exist only under atime/lazy.  An absorbed
   * transaction is of a class the policy keeps; a block of a
   * transaction whose commit has not come can wait for it (no commit,
   * nothing replayed), unless the transaction is already bound to be
   * real: then it rides this flush rather than needing one of its own
   * before the commit.  Anything else in the journal must go.
   */
  if (h->kind == HOLD_JABSORBED || h->kind == HOLD_JCOMMIT)
    return false;
  if (h->kind == HOLD_JPENDING)
    return !pending_in_open_tx (e, h) || pending_known_real (e, h);
  switch (e->cfg.policy)
    {
    case POLICY_ATIME:
      return h->cls != TCLASS_ATIME;
    case POLICY_LAZY:
      return h->cls != TCLASS_ATIME && h->cls != TCLASS_TIME;
    default:
      return true;
    }
}

static bool
pred_expired (struct engine *e, const struct hold *h, uint64_t now)
{
  return h->first_ns + e->cfg.max_age_ns <= now;
}

static void
count_writeback (struct engine *e, const struct hold *h, enum wb_trigger why)
{
  size_t i = h->fs <= e->layout->n_fs ? h->fs : e->layout->n_fs;

  STAT_INC (e->fst[i].writeback[why]);
}

static bool
is_journal_hold (const struct hold *h)
{
  return h->kind != HOLD_INPLACE;
}

/* A journal hold that is still part of the log: it must reach the store
 * before any journal write after it.
 */
static bool
is_ordered_hold (const struct hold *h)
{
  return is_journal_hold (h) && !h->dead;
}

/* Write back the holds that pred selects, oldest first, and make them
 * durable; drop them once they are.  With no hold selected, flush only
 * when always_flush.  Call with hold_lock held.
 *
 * Journal holds go all together or not at all, in two batches: every
 * block but the commit blocks, a flush, then the commit blocks and a
 * flush, so that no commit is durable before what it commits.  They are
 * then part of the durable log, and their transactions become live.
 */
static int
writeback_locked (struct engine *e, hold_pred pred, uint64_t arg,
                  enum wb_trigger why, bool always_flush)
{
  struct hold **sel = NULL;
  struct bio *bios;
  size_t n = 0, n1 = 0, n2 = 0;
  bool journal = false;
  struct hold *h;
  int r;

  if (e->holds.count > 0)
    {
      sel = malloc (e->holds.count * sizeof *sel);
      if (!sel)
        return -ENOMEM;
      for (h = hold_oldest (&e->holds); h; h = hold_next (&e->holds, h))
        if (pred (e, h, arg))
          {
            sel[n++] = h;
            journal |= is_ordered_hold (h);
          }
      if (journal)
        {
          /* Add the journal holds pred left out (dead ones need no
           * ordering: they stay until something selects them).
           */
          n = 0;
          for (h = hold_oldest (&e->holds); h; h = hold_next (&e->holds, h))
            if (is_ordered_hold (h) || pred (e, h, arg))
              sel[n++] = h;
        }
    }
  if (n == 0)
    {
      free (sel);
      return always_flush ? backend_flush (e->store) : 0;
    }

  bios = calloc (n + 2, sizeof *bios);
  if (!bios)
    {
      free (sel);
      return -ENOMEM;
    }
  for (size_t i = 0; i < n; i++)
    if (sel[i]->kind != HOLD_JCOMMIT)
      bios[n1++] = (struct bio){ .op = BIO_WRITE,
                                 .buf = sel[i]->data,
                                 .offset = sel[i]->off,
                                 .len = sel[i]->len };
  bios[n1++] = (struct bio){ .op = BIO_FLUSH };
  r = backend_submit (e->store, bios, n1);
  if (r == 0)
    {
      for (size_t i = 0; i < n; i++)
        if (sel[i]->kind == HOLD_JCOMMIT)
          bios[n2++] = (struct bio){ .op = BIO_WRITE,
                                     .buf = sel[i]->data,
                                     .offset = sel[i]->off,
                                     .len = sel[i]->len };
      if (n2 > 0)
        {
          bios[n2++] = (struct bio){ .op = BIO_FLUSH };
          r = backend_submit (e->store, bios, n2);
        }
    }
  if (r == 0)
    {
      STAT_INC (e->fst[e->layout->n_fs].writeback_batches);
      for (size_t i = 0; i < n; i++)
        {
          count_writeback (e, sel[i], why);
          hold_drop (&e->holds, sel[i]);
        }
      atomic_store (&e->nheld, e->holds.count);
      if (journal && e->jl)
        for (size_t i = 0; i < e->layout->n_fs; i++)
          if (e->jl[i] && jlog_absorbed_to_live (e->jl[i]) < 0)
            log_notice ("journal at offset %" PRIu64 ": out of memory: "
                        "no more absorption until the log is empty",
                        e->layout->fs[i].start);
    }
  free (bios);
  free (sel);
  return r;
}

static bool
pred_journal (struct engine *e, const struct hold *h, uint64_t arg)
{
  (void)e;
  (void)arg;
  return is_ordered_hold (h);
}

/* Before any other journal write can become durable: every journal
 * hold written back, in order, and flushed.
 */
static int
journal_writeback_locked (struct engine *e, enum wb_trigger why)
{
  return writeback_locked (e, pred_journal, 0, why, false);
}

/* Under the memory cap: write back the oldest holds until it holds. */
static bool
pred_over_cap (struct engine *e, const struct hold *h, uint64_t arg)
{
  /* arg counts down the bytes still to release. */
  uint64_t *left = (uint64_t *)(uintptr_t)arg;

  (void)e;
  if (*left == 0)
    return false;
  *left = *left > h->len ? *left - h->len : 0;
  return true;
}

static int
enforce_cap_locked (struct engine *e)
{
  uint64_t excess;

  if (e->holds.bytes <= e->cfg.max_held)
    return 0;
  excess = e->holds.bytes - e->cfg.max_held;
  return writeback_locked (e, pred_over_cap, (uintptr_t)&excess, WB_MEMORY,
                           false);
}

static int
writeback_all (struct engine *e, enum wb_trigger why, bool always_flush)
{
  int r;

  if (atomic_load (&e->nheld) == 0)
    return always_flush ? backend_flush (e->store) : 0;
  pthread_rwlock_rdlock (&e->layout_lock);
  pthread_mutex_lock (&e->hold_lock);
  r = writeback_locked (e, pred_all, 0, why, always_flush);
  pthread_mutex_unlock (&e->hold_lock);
  pthread_rwlock_unlock (&e->layout_lock);
  return r;
}

int
engine_writeback_all (struct engine *e)
{
  return writeback_all (e, WB_EXPLICIT, true);
}

/* The deadline thread: sleeps until the oldest hold expires. */
static void *
wb_thread (void *p)
{
  struct engine *e = p;

  pthread_rwlock_rdlock (&e->layout_lock);
  pthread_mutex_lock (&e->hold_lock);
  while (!e->stopping)
    {
      struct hold *h = hold_oldest (&e->holds);
      uint64_t now = now_ns (), due;
      struct timespec ts;
      int r;

      if (!h)
        due = now + 3600ull * 1000000000; /* nothing held: idle */
      else
        due = h->first_ns + e->cfg.max_age_ns;
      if (h && due <= now)
        {
          r = writeback_locked (e, pred_expired, now, WB_DEADLINE, false);
          if (r == 0)
            continue;
          log_notice ("writing back expired holds: %s (retrying in 1s)",
                      strerror (-r));
          due = now + 1000000000;
        }
      /* Let a re-read of the layout in while we sleep. */
      ts.tv_sec = due / 1000000000;
      ts.tv_nsec = due % 1000000000;
      pthread_rwlock_unlock (&e->layout_lock);
      pthread_cond_timedwait (&e->wb_cond, &e->hold_lock, &ts);
      pthread_mutex_unlock (&e->hold_lock);
      pthread_rwlock_rdlock (&e->layout_lock);
      pthread_mutex_lock (&e->hold_lock);
    }
  pthread_mutex_unlock (&e->hold_lock);
  pthread_rwlock_unlock (&e->layout_lock);
  return NULL;
}

/* ---- the journal (policy=atime|lazy) ------------------------------ */

/* Journal block number of device offset off in fs, or UINT64_MAX. */
static uint64_t
journal_lblk (const struct ext4_fs *fs, uint64_t off)
{
  uint64_t next;
  const struct journal_extent *x = jext_at (fs, off, &next);

  if (!x)
    return UINT64_MAX;
  return x->lblk + (off - x->off) / fs->block_size;
}

static bool
pending_in_open_tx (const struct engine *e, const struct hold *h)
{
  const struct jlog *jl;
  struct jslot slot;
  uint64_t lblk;

  if (!e->jl || h->fs >= e->layout->n_fs || !(jl = e->jl[h->fs]))
    return false;
  lblk = journal_lblk (&e->layout->fs[h->fs], h->off);
  if (lblk == UINT64_MAX || jfollow_lookup (jl->follow, lblk, &slot) < 0)
    return false;
  switch (slot.kind)
    {
    case JS_PENDING:
      return true;
    case JS_DESCRIPTOR:
    case JS_DATA:
    case JS_REVOKE:
      return slot.state == JTX_OPEN;
    default:
      return false;
    }
}

/* Read the content of journal block lblk as the client sees it now
 * (held, or in the store), unescaped.
 */
static int
read_journal_block (struct engine *e, const struct ext4_fs *fs, uint64_t lblk,
                    bool escaped, char *buf)
{
  uint64_t off = layout_journal_off (fs, lblk);
  const struct hold *h;
  int r = 0;

  if (off == UINT64_MAX)
    return -EINVAL;
  h = hold_find (&e->holds, off);
  if (h && h->len == fs->block_size)
    memcpy (buf, h->data, h->len);
  else
    r = backend_pread (e->store, buf, fs->block_size, off);
  if (r == 0 && escaped)
    jbd2_unescape (buf);
  return r;
}

struct vclass
{
  struct engine *e;
  const struct ext4_fs *fs;
  const char *copy;
  char *tmp;
  enum tclass cls;
};

static int
class_vs_live_copy (void *opaque, uint64_t lblk, bool escaped)
{
  struct vclass *v = opaque;
  enum tclass c;

  if (read_journal_block (v->e, v->fs, lblk, escaped, v->tmp) < 0)
    {
      v->cls = TCLASS_REAL;
      return 1;
    }
  c = classify_block (v->fs->inode_size, v->tmp, v->copy, v->fs->block_size);
  if (c > v->cls)
    v->cls = c;
  return v->cls == TCLASS_REAL;
}

/* The class of one logged copy (journal block lblk) of fs block target,
 * against every version recovery could produce for it: the store's
 * in-place block and every live logged copy.  Anything but an
 * inode-table target is REAL.  copy and ref are scratch blocks.
 */
static enum tclass
copy_class (struct engine *e, const struct ext4_fs *fs, struct jlog *jl,
            uint64_t target, uint64_t lblk, bool escaped, char *copy, char *ref)
{
  const uint32_t bs = fs->block_size;
  const uint64_t off = fs->start + target * bs;
  struct vclass v = { e, fs, copy, ref, TCLASS_SAME };

  if (target >= fs->size / bs || !layout_itable_at (fs, off)
      || read_journal_block (e, fs, lblk, escaped, copy) < 0
      || backend_pread (e->store, ref, bs, off) < 0)
    return TCLASS_REAL;
  v.cls = classify_block (fs->inode_size, ref, copy, bs);
  if (v.cls != TCLASS_REAL)
    jlog_live_copies (jl, target, class_vs_live_copy, &v);
  return v.cls;
}

/* The class of a committed transaction: the worst over its logged
 * copies (copy_class).
 */
static enum tclass
tx_class (struct engine *e, const struct ext4_fs *fs, struct jlog *jl,
          const struct jevent *ev)
{
  const uint32_t bs = fs->block_size;
  char *copy = malloc (bs), *ref = malloc (bs);
  enum tclass cls = TCLASS_SAME;

  if (!copy || !ref)
    cls = TCLASS_REAL;
  for (size_t i = 0; i < ev->nblocks && cls != TCLASS_REAL; i++)
    {
      struct jslot slot;
      enum tclass c;

      if (jfollow_lookup (jl->follow, ev->lblks[i], &slot) < 0
          || slot.kind != JS_DATA || !slot.written)
        c = TCLASS_REAL;
      else
        c = copy_class (e, fs, jl, ev->targets[i], ev->lblks[i], slot.escaped,
                        copy, ref);
      if (c > cls)
        cls = c;
    }
  free (copy);
  free (ref);
  return cls;
}

static bool
policy_absorbs (const struct engine *e, enum tclass cls)
{
  switch (e->cfg.policy)
    {
    case POLICY_ATIME:
      return cls <= TCLASS_ATIME;
    case POLICY_LAZY:
      return cls <= TCLASS_TIME;
    default:
      return false;
    }
}

/* The durable tail of filesystem fsi's journal moved: absorbed journal
 * holds behind it are dead.  Recovery never replays them, so they need
 * no ordering; a later write to their position supersedes them.  Under
 * policy=lazy they are discarded at once (a raw read of that journal
 * block then returns what the store has there).  Call with hold_lock.
 */
static void
mark_dead_locked (struct engine *e, size_t fsi)
{
  const struct jlog *jl = e->jl ? e->jl[fsi] : NULL;
  struct hold *h, *next;

  if (!jl)
    return;
  for (h = hold_oldest (&e->holds); h; h = next)
    {
      next = hold_next (&e->holds, h);
      if (h->fs != fsi || h->dead
          || (h->kind != HOLD_JABSORBED && h->kind != HOLD_JCOMMIT)
          || !jlog_behind_tail (jl, h->seq))
        continue;
      if (e->cfg.policy == POLICY_LAZY)
        {
          STAT_INC (e->fst[fsi].discarded);
          hold_drop (&e->holds, h);
        }
      else
        h->dead = true;
    }
  atomic_store (&e->nheld, e->holds.count);
}

/* A flush completed: journal superblocks written before it are
 * durable.  Call with hold_lock.
 */
static void
tails_flushed_locked (struct engine *e)
{
  if (!atomic_exchange (&e->tails_pending, false) || !e->jl)
    return;
  for (size_t i = 0; i < e->layout->n_fs; i++)
    if (e->jl[i] && jlog_flushed (e->jl[i]))
      mark_dead_locked (e, i);
}

/* Is pending journal block h part of an open transaction already bound
 * to be real: a revoke, or a logged copy the policy cannot absorb?
 * (Its other copies can only make it worse.)
 */
static bool
pending_known_real (struct engine *e, const struct hold *h)
{
  const struct ext4_fs *fs;
  struct jlog *jl;
  struct jslot slot;
  uint64_t lblk;
  char *copy, *ref;
  enum tclass cls;

  if (!e->jl || h->fs >= e->layout->n_fs || !(jl = e->jl[h->fs]))
    return false;
  fs = &e->layout->fs[h->fs];
  lblk = journal_lblk (fs, h->off);
  if (lblk == UINT64_MAX || jfollow_lookup (jl->follow, lblk, &slot) < 0
      || slot.state != JTX_OPEN)
    return false;
  if (slot.kind == JS_REVOKE)
    return true;
  if (slot.kind != JS_DATA || !slot.written)
    return false;
  copy = malloc (fs->block_size);
  ref = malloc (fs->block_size);
  cls = copy && ref
            ? copy_class (e, fs, jl, slot.target, lblk, slot.escaped, copy, ref)
            : TCLASS_REAL;
  free (copy);
  free (ref);
  return !policy_absorbs (e, cls);
}

/* The engine can no longer tell what the log holds: write back every
 * journal hold and stop absorbing until the log is empty again.
 */
static int
journal_lost_track (struct engine *e, struct jlog *jl)
{
  jlog_forget (jl);
  return journal_writeback_locked (e, WB_JOURNAL);
}

/* Handle the follower's events for one journal block write.  Sets
 * *absorbed_cls (>= 0) and *absorbed_seq when the block is the commit of
 * a transaction that is absorbed, else leaves them.
 */
static int
journal_events (struct engine *e, const struct seg *s, struct jlog *jl,
                const struct jevent *ev, int nev, int *absorbed_cls,
                uint32_t *absorbed_seq)
{
  const struct ext4_fs *fs = s->fs;
  struct fs_stats *st = &e->fst[s->fsi];
  int r = 0;

  for (int k = 0; k < nev && r == 0; k++)
    {
      const struct jevent *x = &ev[k];
      enum tclass cls = TCLASS_REAL;

      switch (x->type)
        {
        case JE_TX_COMMITTED:
          if (jl->known && !x->has_revoke && !x->has_unknown)
            cls = tx_class (e, fs, jl, x);
          if (policy_absorbs (e, cls))
            {
              /* Every block of it held so far is now absorbed. */
              for (size_t i = 0; i < x->npos; i++)
                {
                  uint64_t off = layout_journal_off (fs, x->pos[i]);
                  struct hold *h
                      = off == UINT64_MAX ? NULL : hold_find (&e->holds, off);

                  if (h && h->kind == HOLD_JPENDING)
                    {
                      h->kind = HOLD_JABSORBED;
                      h->cls = cls;
                      h->seq = x->seq;
                    }
                }
              r = jlog_add (jl, x, true);
              if (r == 0)
                {
                  *absorbed_cls = cls;
                  if (absorbed_seq)
                    *absorbed_seq = x->seq;
                  STAT_INC (st->tx_absorbed);
                }
            }
          else
            {
              /* A real transaction: what came before it in the log
               * becomes durable first; then it is live.
               */
              STAT_INC (st->tx_real);
              r = journal_writeback_locked (e, WB_JOURNAL);
              if (r == 0)
                r = jlog_add (jl, x, false);
            }
          break;
        case JE_TX_ABORTED:
        case JE_CONFUSED:
          r = journal_writeback_locked (e, WB_JOURNAL);
          break;
        default:
          break;
        }
    }
  return r;
}

/* A write to a journal extent under policy=atime|lazy, whole journal
 * blocks [b0, b0 + n*bs) of which the client wrote [s->off, +len).
 * Held: blocks of transactions whose commit has not come, and every
 * block of an absorbed transaction.  Everything else is written, after
 * every journal hold before it (the ordering invariant).
 */
static int
write_journal (struct engine *e, const struct seg *s, const char *data,
               uint32_t flags)
{
  const struct ext4_fs *fs = s->fs;
  struct jlog *jl = e->jl[s->fsi];
  struct fs_stats *st = &e->fst[s->fsi];
  const uint32_t bs = fs->block_size;
  const uint64_t b0 = fs->start + (s->off - fs->start) / bs * bs;
  const uint64_t n = (s->off + s->len - b0 + bs - 1) / bs;
  char *blk = malloc (bs);
  int r = 0;

  if (!blk)
    return -ENOMEM;
  pthread_mutex_lock (&e->hold_lock);
  for (uint64_t i = 0; i < n && r == 0; i++)
    {
      const uint64_t b = b0 + i * bs;
      const uint64_t lblk = journal_lblk (fs, b);
      uint64_t lo = b > s->off ? b : s->off;
      uint64_t hi = b + bs < s->off + s->len ? b + bs : s->off + s->len;
      struct hold *h = hold_find (&e->holds, b);
      struct jevent ev[JFOLLOW_MAX_EVENTS];
      struct jslot slot;
      int nev, absorbed_cls = -1;
      uint32_t absorbed_seq = 0;
      bool hold_it = false;

      STAT_INC (st->journal_writes);
      /* The block as the client sees it now, with the client's bytes. */
      if (hi - lo < bs)
        {
          if (h)
            memcpy (blk, h->data, bs);
          else if ((r = backend_pread (e->store, blk, bs, b)) < 0)
            break;
        }
      memcpy (blk + (lo - b), data + (lo - s->off), hi - lo);

      /* A held journal position written again: the log wrapped onto
       * it.  Behind the durable tail the held block is dead and the new
       * write supersedes it; else it is still part of the log, and
       * everything held goes first.
       */
      if (h && h->dead)
        {
          STAT_INC (st->superseded);
          hold_drop (&e->holds, h);
        }
      else if (h && (r = journal_writeback_locked (e, WB_JOURNAL)) < 0)
        break;

      if (lblk < jl->feat.first || hi - lo < bs)
        {
          /* The journal superblock, or a partial block write (which
           * the kernel never does): through, and re-read.
           */
          struct jfeatures nf = { 0 };
          const bool is_sb = lblk < jl->feat.first;

          nev = 0;
          if (is_sb)
            {
              bool fc = fs->feature_compat & 0x400;

              if (jbd2_features_from_raw (blk, bs, fc, &nf) == 0
                  && !nf.async_commit)
                {
                  nev = jfollow_reset (jl->follow, &nf, ev, JFOLLOW_MAX_EVENTS);
                  if (nev >= 0)
                    jl->feat = nf;
                }
              else
                nev = -EINVAL;
            }
          else
            nev = -EINVAL;
          if (nev < 0)
            r = journal_lost_track (e, jl);
          else
            r = journal_events (e, s, jl, ev, nev, &absorbed_cls, NULL);
          if (r == 0)
            r = backend_pwrite (e->store, blk, bs, b, flags);
          if (r == 0 && nev >= 0 && is_sb)
            {
              /* The tail it records counts once it is durable: now
               * with FUA, else at the next flush.
               */
              jlog_tail_written (jl, nf.sequence, nf.start, flags & BIO_FUA);
              if (flags & BIO_FUA)
                mark_dead_locked (e, s->fsi);
              else
                atomic_store (&e->tails_pending, true);
            }
          continue;
        }

      nev = jfollow_write (jl->follow, lblk, blk, bs, ev, JFOLLOW_MAX_EVENTS);
      if (nev < 0)
        {
          r = journal_lost_track (e, jl);
          if (r == 0)
            r = backend_pwrite (e->store, blk, bs, b, flags);
          continue;
        }
      r = journal_events (e, s, jl, ev, nev, &absorbed_cls, &absorbed_seq);
      if (r < 0)
        break;

      if (absorbed_cls >= 0)
        {
          /* The commit block of an absorbed transaction. */
          struct hold *c = hold_put (&e->holds, b, bs, s->fsi, absorbed_cls,
                                     blk, now_ns (), &r);
          if (!c)
            break;
          c->kind = HOLD_JCOMMIT;
          c->seq = absorbed_seq;
          STAT_INC (st->journal_held);
          continue;
        }
      if (jl->known && jfollow_lookup (jl->follow, lblk, &slot) == 0)
        switch (slot.kind)
          {
          case JS_PENDING:
            hold_it = true;
            break;
          case JS_DESCRIPTOR:
          case JS_DATA:
          case JS_REVOKE:
            hold_it = slot.state == JTX_OPEN;
            break;
          default:
            break;
          }
      if (hold_it)
        {
          struct hold *p = hold_put (&e->holds, b, bs, s->fsi, TCLASS_REAL, blk,
                                     now_ns (), &r);
          if (!p)
            break;
          p->kind = HOLD_JPENDING;
          STAT_INC (st->journal_held);
        }
      else
        {
          /* Through, after every journal hold before it. */
          r = journal_writeback_locked (e, WB_JOURNAL);
          if (r == 0)
            r = backend_pwrite (e->store, blk, bs, b, flags);
        }
    }
  if (r == 0)
    r = enforce_cap_locked (e);
  atomic_store (&e->nheld, e->holds.count);
  pthread_cond_signal (&e->wb_cond);
  pthread_mutex_unlock (&e->hold_lock);
  free (blk);
  return r;
}

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

static bool
same_itables (const struct layout *a, const struct layout *b)
{
  if (a->n_fs != b->n_fs)
    return false;
  for (size_t i = 0; i < a->n_fs; i++)
    {
      const struct ext4_fs *x = &a->fs[i], *y = &b->fs[i];

      if (x->start != y->start || x->block_size != y->block_size
          || x->inode_size != y->inode_size || x->n_itable != y->n_itable)
        return false;
      /* Field by field: struct itable_run has padding, which memcmp
       * would compare too.
       */
      for (size_t k = 0; k < x->n_itable; k++)
        if (x->itable[k].off != y->itable[k].off
            || x->itable[k].len != y->itable[k].len
            || x->itable[k].first_ino != y->itable[k].first_ino)
          return false;
    }
  return true;
}

static void
free_jlogs (struct jlog **jl, size_t n)
{
  if (!jl)
    return;
  for (size_t i = 0; i < n; i++)
    jlog_free (jl[i]);
  free (jl);
}

static bool
same_journal (const struct ext4_fs *a, const struct ext4_fs *b)
{
  if (a->start != b->start || a->block_size != b->block_size
      || a->n_journal != b->n_journal)
    return false;
  for (size_t k = 0; k < a->n_journal; k++)
    if (a->journal[k].off != b->journal[k].off
        || a->journal[k].len != b->journal[k].len
        || a->journal[k].lblk != b->journal[k].lblk)
      return false;
  return true;
}

/* The jlogs for layout nl: kept from the old layout where the journal
 * did not move (then *moved stays false for it), new otherwise.  Only
 * under policy=atime|lazy.
 */
static int
make_jlogs (struct engine *e, const struct layout *old, struct jlog **oldjl,
            const struct layout *nl, struct jlog ***out)
{
  struct jlog **jl;

  *out = NULL;
  if (e->cfg.policy == POLICY_STRICT)
    return 0;
  jl = calloc (nl->n_fs ? nl->n_fs : 1, sizeof *jl);
  if (!jl)
    return -ENOMEM;
  for (size_t i = 0; i < nl->n_fs; i++)
    {
      int r;

      for (size_t k = 0; old && oldjl && k < old->n_fs; k++)
        if (oldjl[k] && same_journal (&old->fs[k], &nl->fs[i]))
          {
            jl[i] = oldjl[k];
            oldjl[k] = NULL;
            break;
          }
      if (jl[i])
        continue;
      r = jlog_new (&nl->fs[i], &jl[i]);
      if (r < 0)
        {
          free_jlogs (jl, nl->n_fs);
          return r;
        }
    }
  *out = jl;
  return 0;
}

/* Does a journal we follow move (or vanish) from old to nl? */
static bool
journal_moved (const struct engine *e, const struct layout *old,
               const struct layout *nl)
{
  for (size_t k = 0; e->jl && k < old->n_fs; k++)
    {
      bool found = false;

      if (!e->jl[k])
        continue;
      for (size_t i = 0; i < nl->n_fs && !found; i++)
        found = same_journal (&old->fs[k], &nl->fs[i]);
      if (!found)
        return true;
    }
  return false;
}

/* Re-read the layout after the client wrote a superblock, descriptor
 * or partition table.  Holds survive only if no inode table moved.
 */
static int
relayout (struct engine *e)
{
  struct layout *nl = NULL, *old;
  struct fs_stats *nst = NULL;
  struct jlog **njl = NULL;
  bool moved;
  int r = 0;

  pthread_rwlock_wrlock (&e->layout_lock);
  if (!atomic_exchange (&e->layout_stale, false))
    goto out;
  r = layout_discover (store_read, e->store, backend_size (e->store), &nl);
  if (r < 0)
    {
      atomic_store (&e->layout_stale, true);
      goto out;
    }
  old = e->layout;
  pthread_mutex_lock (&e->hold_lock);
  moved = !same_itables (old, nl) || journal_moved (e, old, nl);
  if (moved)
    {
      /* Something we hold for moved: everything goes back first. */
      r = writeback_locked (e, pred_all, 0, WB_LAYOUT, false);
      if (r == 0)
        {
          nst = calloc (nl->n_fs + 1, sizeof *nst);
          if (!nst)
            r = -ENOMEM;
        }
      if (r == 0)
        {
          if (nl->n_fs == old->n_fs)
            memcpy (nst, e->fst, (nl->n_fs + 1) * sizeof *nst);
          else
            nst[nl->n_fs] = e->fst[old->n_fs];
          free (e->fst);
          e->fst = nst;
        }
    }
  if (r == 0)
    r = make_jlogs (e, old, e->jl, nl, &njl);
  if (r < 0)
    {
      /* Keep the old layout; the jlogs moved to njl go back. */
      if (njl && e->jl)
        for (size_t i = 0; i < nl->n_fs; i++)
          for (size_t k = 0; k < old->n_fs; k++)
            if (njl[i] && !e->jl[k] && same_journal (&old->fs[k], &nl->fs[i]))
              {
                e->jl[k] = njl[i];
                njl[i] = NULL;
              }
      pthread_mutex_unlock (&e->hold_lock);
      free_jlogs (njl, nl->n_fs);
      layout_free (nl);
      atomic_store (&e->layout_stale, true);
      goto out;
    }
  free_jlogs (e->jl, old->n_fs);
  e->jl = njl;
  e->layout = nl;
  pthread_mutex_unlock (&e->hold_lock);
  describe_layout (e, old);
  layout_free (old);

out:
  pthread_rwlock_unlock (&e->layout_lock);
  return r;
}

/* ---- lifecycle ------------------------------------------------------ */

static int control_cmd (void *opaque, const char *cmd, FILE *out);

int
engine_open (const struct engine_config *cfg, struct engine **out)
{
  struct engine *e = calloc (1, sizeof *e);
  pthread_condattr_t ca;
  int r;

  if (!e)
    return -ENOMEM;
  e->cfg = *cfg;
  if (e->cfg.max_age_ns == 0)
    e->cfg.max_age_ns = ENGINE_DEFAULT_MAX_AGE_NS;
  pthread_rwlock_init (&e->layout_lock, NULL);
  pthread_mutex_init (&e->hold_lock, NULL);
  pthread_condattr_init (&ca);
  pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
  pthread_cond_init (&e->wb_cond, &ca);
  pthread_condattr_destroy (&ca);

  r = hold_init (&e->holds);
  if (r < 0)
    goto err;
  r = backend_open (&cfg->store, &e->store);
  if (r < 0)
    goto err;
  r = layout_discover (store_read, e->store, backend_size (e->store),
                       &e->layout);
  if (r < 0)
    goto err;
  e->fst = calloc (e->layout->n_fs + 1, sizeof *e->fst);
  if (!e->fst)
    {
      r = -ENOMEM;
      goto err;
    }
  r = make_jlogs (e, NULL, NULL, e->layout, &e->jl);
  if (r < 0)
    goto err;
  describe_layout (e, NULL);
  if (cfg->control_path)
    {
      r = control_open (cfg->control_path, control_cmd, e, &e->ctl);
      if (r < 0)
        goto err;
    }
  *out = e;
  return 0;

err:
  engine_close (e);
  return r;
}

int
engine_start (struct engine *e)
{
  int r;

  e->stopping = false;
  r = pthread_create (&e->wb_thread, NULL, wb_thread, e);
  if (r != 0)
    return -r;
  e->wb_running = true;
  if (e->ctl)
    {
      r = control_start (e->ctl);
      if (r < 0)
        return r;
    }
  return 0;
}

int
engine_stop (struct engine *e)
{
  int r;

  /* Clients are gone; no new holds can appear. */
  if (e->ctl)
    {
      control_close (e->ctl);
      e->ctl = NULL;
    }
  r = writeback_all (e, WB_SHUTDOWN, false);
  if (e->wb_running)
    {
      pthread_mutex_lock (&e->hold_lock);
      e->stopping = true;
      pthread_cond_signal (&e->wb_cond);
      pthread_mutex_unlock (&e->hold_lock);
      pthread_join (e->wb_thread, NULL);
      e->wb_running = false;
    }
  return r;
}

void
engine_close (struct engine *e)
{
  if (!e)
    return;
  if (e->wb_running || atomic_load (&e->nheld) > 0)
    engine_stop (e);
  control_close (e->ctl);
  hold_fini (&e->holds);
  if (e->layout)
    free_jlogs (e->jl, e->layout->n_fs);
  layout_free (e->layout);
  free (e->fst);
  backend_close (e->store);
  pthread_cond_destroy (&e->wb_cond);
  pthread_mutex_destroy (&e->hold_lock);
  pthread_rwlock_destroy (&e->layout_lock);
  free (e);
}

uint64_t
engine_size (const struct engine *e)
{
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

  for (uint64_t p = off; p < end; p += s.len)
    {
      uint32_t bs;

      next_seg (L, p, end, &s);
      if (!s.itable && !s.journal)
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

int
engine_pread (struct engine *e, void *buf, uint64_t len, uint64_t off)
{
  int r;

  STAT_INC (e->client_reads);
  if (atomic_load (&e->nheld) == 0)
    return backend_pread (e->store, buf, len, off);

  pthread_rwlock_rdlock (&e->layout_lock);
  if (!touches_held_region (e->layout, off, len))
    {
      pthread_rwlock_unlock (&e->layout_lock);
      return backend_pread (e->store, buf, len, off);
    }
  pthread_mutex_lock (&e->hold_lock);
  r = backend_pread (e->store, buf, len, off);
  if (r == 0)
    overlay_locked (e, buf, len, off);
  pthread_mutex_unlock (&e->hold_lock);
  pthread_rwlock_unlock (&e->layout_lock);
  return r;
}

/* ---- writes --------------------------------------------------------- */

/* The inode-table part of a write: whole blocks [b0, b0 + n*bs), of
 * which the client wrote [off, off+len) from data.
 */
static int
write_itable (struct engine *e, const struct seg *s, const char *data,
              uint32_t flags)
{
  const struct ext4_fs *fs = s->fs;
  struct fs_stats *st = &e->fst[s->fsi];
  const uint32_t bs = fs->block_size;
  const uint64_t b0 = fs->start + (s->off - fs->start) / bs * bs;
  const uint64_t n = (s->off + s->len - b0 + bs - 1) / bs;
  char *ref = NULL, *nw = NULL;
  struct bio *bios = NULL;
  size_t nb = 0;
  bool *written = NULL;
  bool held_any = false;
  int r;

  ref = malloc (n * bs);
  nw = malloc (n * bs);
  bios = calloc (n, sizeof *bios);
  written = calloc (n, sizeof *written);
  if (!ref || !nw || !bios || !written)
    {
      r = -ENOMEM;
      goto out;
    }

  pthread_mutex_lock (&e->hold_lock);
  /* The reference is the block as the store has it. */
  r = backend_pread (e->store, ref, n * bs, b0);
  if (r < 0)
    goto unlock;

  for (uint64_t i = 0; i < n; i++)
    {
      const uint64_t b = b0 + i * bs;
      struct hold *h = hold_find (&e->holds, b);
      char *blk = nw + i * bs;
      uint64_t lo = b > s->off ? b : s->off;
      uint64_t hi = b + bs < s->off + s->len ? b + bs : s->off + s->len;
      enum tclass cls;

      /* Merge: what the client sees now, then the client's bytes. */
      memcpy (blk, h ? (const char *)h->data : ref + i * bs, bs);
      memcpy (blk + (lo - b), data + (lo - s->off), hi - lo);
      cls = classify_block (fs->inode_size, ref + i * bs, blk, bs);
      STAT_INC (st->itable_writes);

      if (cls == TCLASS_SAME && !(flags & BIO_FUA))
        {
          /* The store already has exactly this. */
          STAT_INC (st->unchanged);
          if (h)
            hold_drop (&e->holds, h);
        }
      else if ((cls == TCLASS_ATIME || cls == TCLASS_TIME)
               && !(flags & BIO_FUA))
        {
          if (h)
            STAT_INC (st->superseded);
          STAT_INC (st->held);
          if (!hold_put (&e->holds, b, bs, s->fsi, cls, blk, now_ns (), &r))
            goto unlock;
          held_any = true;
        }
      else
        {
          if (cls == TCLASS_REAL)
            STAT_INC (st->real_writes);
          if (h)
            STAT_INC (st->writeback[(flags & BIO_FUA) ? WB_FUA : WB_REAL]);
          bios[nb++] = (struct bio){ .op = BIO_WRITE,
                                     .buf = blk,
                                     .offset = b,
                                     .len = bs,
                                     .flags = flags & BIO_FUA };
          written[i] = true;
        }
    }

  r = nb ? backend_submit (e->store, bios, nb) : 0;
  if (r == 0)
    for (uint64_t i = 0; i < n; i++)
      {
        struct hold *h;

        if (written[i] && (h = hold_find (&e->holds, b0 + i * bs)))
          hold_drop (&e->holds, h);
      }
  if (r == 0)
    r = enforce_cap_locked (e);
  if (held_any)
    pthread_cond_signal (&e->wb_cond);

unlock:
  atomic_store (&e->nheld, e->holds.count);
  pthread_mutex_unlock (&e->hold_lock);
out:
  free (ref);
  free (nw);
  free (bios);
  free (written);
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
      next_seg (L, p, end, &s);
      if (s.fsi != last_fsi)
        {
          STAT_INC (e->fst[s.fsi].client_writes);
          last_fsi = s.fsi;
        }
      if (s.itable)
        r = write_itable (e, &s, (const char *)buf + (p - off), flags);
      else if (s.journal && e->jl && e->jl[s.fsi] && e->jl[s.fsi]->enabled)
        r = write_journal (e, &s, (const char *)buf + (p - off), flags);
      else
        r = backend_pwrite (e->store, (const char *)buf + (p - off), s.len, p,
                            flags);
    }
  if (layout_overlaps_watch (L, off, len))
    atomic_store (&e->layout_stale, true);
  pthread_rwlock_unlock (&e->layout_lock);
  return r;
}

int
engine_flush (struct engine *e)
{
  int r;

  STAT_INC (e->client_flushes);
  if (atomic_load (&e->nheld) == 0 && !atomic_load (&e->tails_pending))
    return backend_flush (e->store);
  pthread_rwlock_rdlock (&e->layout_lock);
  pthread_mutex_lock (&e->hold_lock);
  r = writeback_locked (e, pred_flush, 0, WB_FLUSH, true);
  if (r == 0)
    tails_flushed_locked (e);
  pthread_mutex_unlock (&e->hold_lock);
  pthread_rwlock_unlock (&e->layout_lock);
  return r;
}

/* ---- zero and trim -------------------------------------------------- */

/* Holds under [off, off+len): whole blocks are dropped (the new request
 * wins), partly covered ones are written back first.
 */
static bool
pred_partial (struct engine *e, const struct hold *h, uint64_t arg)
{
  const uint64_t *range = (const uint64_t *)(uintptr_t)arg;

  (void)e;
  return h->off < range[0] + range[1] && h->off + h->len > range[0]
         && (h->off < range[0] || h->off + h->len > range[0] + range[1]);
}

/* ... and journal holds there are never dropped: the log they belong to
 * goes back whole.
 */
static bool
pred_partial_or_journal (struct engine *e, const struct hold *h, uint64_t arg)
{
  const uint64_t *range = (const uint64_t *)(uintptr_t)arg;

  if (is_journal_hold (h))
    return h->off < range[0] + range[1] && h->off + h->len > range[0];
  return pred_partial (e, h, arg);
}

static int
zero_or_trim (struct engine *e, enum bio_op op, uint64_t len, uint64_t off,
              uint32_t flags)
{
  struct bio bio = { .op = op, .len = len, .offset = off, .flags = flags };
  int r;

  STAT_INC (e->client_writes);
  pthread_rwlock_rdlock (&e->layout_lock);
  if (atomic_load (&e->nheld) == 0
      || !touches_held_region (e->layout, off, len))
    r = backend_submit (e->store, &bio, 1);
  else
    {
      uint64_t range[2] = { off, len };

      pthread_mutex_lock (&e->hold_lock);
      r = writeback_locked (e, pred_partial_or_journal, (uintptr_t)range,
                            WB_REAL, false);
      if (r == 0)
        {
          struct hold *h = hold_oldest (&e->holds), *next;

          for (; h; h = next)
            {
              next = hold_next (&e->holds, h);
              if (h->off >= off && h->off + h->len <= off + len)
                {
                  STAT_INC (
                      e->fst[h->fs <= e->layout->n_fs ? h->fs : e->layout->n_fs]
                          .dropped);
                  hold_drop (&e->holds, h);
                }
            }
          atomic_store (&e->nheld, e->holds.count);
          r = backend_submit (e->store, &bio, 1);
        }
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
  return backend_cache (e->store, len, off);
}

int
engine_extents (struct engine *e, uint64_t len, uint64_t off,
                backend_extent_fn fn, void *opaque)
{
  /* Held blocks are inode-table blocks, which are always allocated in
   * the store: the store's extents stay true.
   */
  return backend_extents (e->store, len, off, fn, opaque);
}

/* ---- clients, stats, control ---------------------------------------- */

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

int
engine_stats (struct engine *e, struct stats_snapshot *out)
{
  const struct layout *L;
  uint64_t now = now_ns ();
  struct hold *h;

  memset (out, 0, sizeof *out);
  out->policy = policy_name (e->cfg.policy);
  out->max_held = e->cfg.max_held;
  out->max_age_s = e->cfg.max_age_ns / 1000000000;
  out->client_writes = __atomic_load_n (&e->client_writes, __ATOMIC_RELAXED);
  out->client_reads = __atomic_load_n (&e->client_reads, __ATOMIC_RELAXED);
  out->client_flushes = __atomic_load_n (&e->client_flushes, __ATOMIC_RELAXED);

  pthread_rwlock_rdlock (&e->layout_lock);
  L = e->layout;
  out->fs = calloc (L->n_fs + 1, sizeof *out->fs);
  if (!out->fs)
    {
      pthread_rwlock_unlock (&e->layout_lock);
      return -ENOMEM;
    }
  out->n = L->n_fs + 1;
  for (size_t i = 0; i <= L->n_fs; i++)
    {
      struct fs_snapshot *f = &out->fs[i];

      if (i < L->n_fs)
        {
          snprintf (f->name, sizeof f->name, "ext4@%" PRIu64, L->fs[i].start);
          f->start = L->fs[i].start;
          f->size = L->fs[i].size;
          f->block_size = L->fs[i].block_size;
          f->journal = L->fs[i].has_journal;
        }
      else
        {
          snprintf (f->name, sizeof f->name, "other");
          f->size = backend_size (e->store);
        }
      memcpy (&f->c, &e->fst[i], sizeof f->c);
    }
  pthread_mutex_lock (&e->hold_lock);
  for (h = hold_oldest (&e->holds); h; h = hold_next (&e->holds, h))
    {
      struct fs_snapshot *f = &out->fs[h->fs < out->n ? h->fs : out->n - 1];
      double age = (now - h->first_ns) / 1e9;

      f->held_blocks++;
      f->held_bytes += h->len;
      if (age > f->oldest_age_s)
        f->oldest_age_s = age;
    }
  pthread_mutex_unlock (&e->hold_lock);
  pthread_rwlock_unlock (&e->layout_lock);
  return 0;
}

void
engine_stats_free (struct stats_snapshot *s)
{
  free (s->fs);
  s->fs = NULL;
}

static int
control_cmd (void *opaque, const char *cmd, FILE *out)
{
  struct engine *e = opaque;
  struct stats_snapshot s;
  int r;

  if (strcmp (cmd, "flush") == 0)
    return engine_writeback_all (e);
  if (strncmp (cmd, "stats", 5) == 0)
    {
      const char *fmt = cmd + 5;

      r = engine_stats (e, &s);
      if (r < 0)
        return r;
      if (strcmp (fmt, " json") == 0)
        stats_print_json (out, &s);
      else if (strcmp (fmt, " prometheus") == 0)
        stats_print_prometheus (out, &s);
      else if (*fmt == '\0')
        stats_print_text (out, &s);
      else
        r = -EINVAL;
      engine_stats_free (&s);
      return r;
    }
  return -EINVAL;
}
