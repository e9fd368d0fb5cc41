/* SPDX-License-Identifier: BSD-3-Clause */
/* absorb.c --- the journal under policy=atime|lazy: which journal block
 * writes are held, the class of a committed transaction, absorbed,
 * pending and dead holds, and the ordering rule (every journal hold
 * reaches the store before any journal write after it).  Locks:
 * engine-impl.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <ext2fs/ext2_fs.h>

#include "classify.h"
#include "engine-impl.h"
#include "log.h"
#include "ondisk.h"

/* ---- journal blocks passed through ---------------------------------- */

/* One journal block of a client write: at device offset b, its content
 * as the client sees it after the write in blk.
 */
struct jwrite
{
  const struct seg *s;
  struct jlog *jl;
  struct fs_stats *st;
  uint64_t b, lblk;
  const char *blk;
  uint32_t flags;
};

/* The journal blocks of one client write that go through, in the order
 * the follower took them: written as one batch, adjacent blocks as one
 * write (on a remote store one round trip instead of one per block)
 * before any other store I/O of the engine, so that everything else
 * sees the store as if each had been written at once.
 */
#define JPASS_MAX 256 /* blocks in one batch */

struct jpass
{
  struct bio *v; /* the writes, pointing at the blocks they pass */
  size_t n, cap;
};

/* Merge each run of blocks adjacent both in the store and in memory
 * (whole blocks of the client's buffer) with the same flags into one
 * write, as a plain write of the same bytes would have gone.  Returns
 * the writes left.
 */
static size_t
jpass_merge (struct bio *v, size_t n)
{
  size_t k = 0;

  for (size_t i = 0; i < n; i++)
    {
      struct bio *last = k > 0 ? &v[k - 1] : NULL;

      if (last && last->offset + last->len == v[i].offset
          && (char *)last->buf + last->len == (char *)v[i].buf
          && last->flags == v[i].flags)
        last->len += v[i].len;
      else
        v[k++] = v[i];
    }
  return k;
}

/* Write what p gathered: before any other store I/O of absorb_write,
 * and at its end (then without the hold lock: struct jflight,
 * engine-impl.h).
 */
static int
jpass_run (struct engine *e, struct jpass *p)
{
  int r;

  if (!p || p->n == 0)
    return 0;
  r = store_submit (e, p->v, jpass_merge (p->v, p->n), ST_JPASS);
  p->n = 0;
  return r;
}

/* p's writes leave without the hold lock: f covers them until
 * jstate_pass_end.
 */
static void
jpass_begin_locked (struct engine *e, const struct jpass *p, struct jflight *f)
{
  uint64_t off = UINT64_MAX, end = 0;

  for (size_t i = 0; i < p->n; i++)
    {
      off = p->v[i].offset < off ? p->v[i].offset : off;
      end = p->v[i].offset + p->v[i].len > end ? p->v[i].offset + p->v[i].len
                                               : end;
    }
  jstate_pass_begin_locked (e, f, off, end);
}

/* Write what this write gathered so far, without the hold lock (the
 * journal state stays this write's): the engine's other store I/O of
 * those blocks waits for it.  Hold lock held on entry and on return.
 */
static int
jpass_submit (struct engine *e)
{
  struct jflight f;
  int r;

  if (!e->jpass || e->jpass->n == 0)
    return 0;
  jpass_begin_locked (e, e->jpass, &f);
  pthread_mutex_unlock (&e->hold_lock);
  r = jpass_run (e, e->jpass);
  jstate_pass_end (e, &f);
  pthread_mutex_lock (&e->hold_lock);
  return r;
}

/* Pass w's block through.  w->blk is not copied: it stays as it is
 * until the pass is submitted (a block of the client's buffer, or one of
 * absorb_write's merge buffers, each used for one block of a write).
 */
static int
jpass_add (struct engine *e, const struct jwrite *w)
{
  struct jpass *p = e->jpass;

  if (!p)
    return -EINVAL;
  if (p->n == p->cap)
    {
      int r = jpass_submit (e);

      if (r < 0)
        return r;
    }
  p->v[p->n++] = (struct bio){ .op = BIO_WRITE,
                               .buf = (void *)w->blk,
                               .offset = w->b,
                               .len = w->s->fs->block_size,
                               .flags = w->flags };
  return 0;
}

/* Read a journal block of the store at off, after what is gathered
 * and what is on its way there (another journal write's last batch,
 * waited for without the hold lock too), without the hold lock (held on
 * entry and on return).
 */
static int
journal_pread (struct engine *e, char *buf, uint32_t bs, uint64_t off)
{
  int r = jpass_submit (e);

  if (r < 0)
    return r;
  while (jstate_wait_passes_unlocking (e, off, bs))
    ;
  pthread_mutex_unlock (&e->hold_lock);
  r = backend_pread (e->store, buf, bs, off);
  pthread_mutex_lock (&e->hold_lock);
  return r;
}

/* Read the in-place block of the store at off, an inode-table or the
 * superblock's block, as it is between writes: from the reference cache
 * (a write of it begun forgets it there), or else from the store without
 * the hold lock (held on entry and on return), after the writes of it on
 * their way, and again if one began meanwhile (refs_read_unlocking).
 */
static int
inplace_pread (struct engine *e, char *buf, uint32_t bs, uint64_t off)
{
  int r;

  do
    r = writeback_wait_range_unlocking (e, off, bs)
            ? 1
            : refs_read_unlocking (e, buf, off, 1, bs);
  while (r == 1);
  return r;
}

static bool
has_journal_holds (struct engine *e)
{
  return e->holds.journal_count > 0;
}

/* Every journal hold to the store (the ordering rule), after what is
 * gathered.  With none, what is gathered stays gathered: a run of
 * blocks the follower cannot read (each a confusion) still goes as one
 * write.
 */
static int
journal_writeback (struct engine *e)
{
  int r;

  if (!has_journal_holds (e))
    return 0;
  r = jpass_submit (e);
  return r < 0 ? r : writeback_journal_unlocking (e, WB_JOURNAL);
}

/* ---- the class of a logged copy ------------------------------------- */

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
    r = journal_pread (e, buf, fs->block_size, off);
  if (r == 0 && escaped)
    jbd2_unescape (buf);
  return r;
}

/* The block of fs that holds the primary superblock, and where in it. */
static uint64_t
sb_block (const struct ext4_fs *fs)
{
  return SB_OFFSET / fs->block_size;
}

/* The class of a version nw of fs block target against ref: the
 * superblock's block by its own rule, any other as inode-table records.
 */
static enum tclass
target_class (const struct ext4_fs *fs, uint64_t target, const char *ref,
              const char *nw)
{
  if (target == sb_block (fs))
    return classify_superblock (ref, nw, fs->block_size,
                                SB_OFFSET % fs->block_size);
  return classify_block (fs->inode_size, ref, nw, fs->block_size);
}

struct vclass
{
  struct engine *e;
  const struct ext4_fs *fs;
  uint64_t target;
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
  c = target_class (v->fs, v->target, v->tmp, v->copy);
  if (c > v->cls)
    v->cls = c;
  return v->cls == TCLASS_REAL;
}

/* The class of one logged copy (journal block lblk) of fs block target,
 * against every version recovery could produce for it: the store's
 * in-place block and every live logged copy.  Anything but an
 * inode-table block or the primary superblock's block is REAL.  copy
 * and ref are scratch blocks.
 */
static enum tclass
copy_class (struct engine *e, const struct ext4_fs *fs, struct jlog *jl,
            uint64_t target, uint64_t lblk, bool escaped, char *copy, char *ref)
{
  const uint32_t bs = fs->block_size;
  const uint64_t off = fs->start + target * bs;
  struct vclass v = { e, fs, target, copy, ref, TCLASS_SAME };

  if (target >= fs->size / bs
      || (target != sb_block (fs) && !layout_itable_at (fs, off))
      || read_journal_block (e, fs, lblk, escaped, copy) < 0
      || inplace_pread (e, ref, bs, off) < 0)
    return TCLASS_REAL;
  v.cls = target_class (fs, target, ref, copy);
  if (v.cls != TCLASS_REAL)
    jlog_live_copies (jl, target, class_vs_live_copy, &v);
  return v.cls;
}

/* The class of the logged copy in journal block lblk (REAL if it is not
 * a logged copy that has arrived).
 */
static enum tclass
slot_class (struct engine *e, const struct ext4_fs *fs, struct jlog *jl,
            uint64_t lblk)
{
  char *copy = malloc (fs->block_size), *ref = malloc (fs->block_size);
  enum tclass cls = TCLASS_REAL;
  struct jslot slot;

  if (copy && ref && jlog_lookup (jl, lblk, &slot) == 0 && slot.kind == JS_DATA
      && slot.written)
    cls = copy_class (e, fs, jl, slot.target, lblk, slot.escaped, copy, ref);
  free (copy);
  free (ref);
  return cls;
}

/* The class of a committed transaction: the worst over its logged
 * copies.
 */
static enum tclass
tx_class (struct engine *e, const struct ext4_fs *fs, struct jlog *jl,
          const struct jevent *ev)
{
  enum tclass cls = TCLASS_SAME;

  for (size_t i = 0; i < ev->nblocks && cls != TCLASS_REAL; i++)
    {
      enum tclass c = slot_class (e, fs, jl, ev->lblks[i]);

      if (c > cls)
        cls = c;
    }
  return cls;
}

/* ---- a journal block write ----------------------------------------- */

/* The engine can no longer tell what the log holds: write back every
 * journal hold and stop absorbing until the log is empty again.
 */
static int
lost_track (struct engine *e, struct jlog *jl)
{
  jlog_forget (jl);
  return journal_writeback (e);
}

/* Turn the pending holds of absorbed transaction x into absorbed holds. */
static void
absorb_pending (struct engine *e, const struct ext4_fs *fs,
                const struct jevent *x, enum tclass cls)
{
  for (size_t i = 0; i < x->npos; i++)
    {
      uint64_t off = layout_journal_off (fs, x->pos[i]);
      struct hold *h = off == UINT64_MAX ? NULL : hold_find (&e->holds, off);

      if (h && h->kind == HOLD_JPENDING)
        hold_redescribe (&e->holds, h, HOLD_JABSORBED, cls, x->seq);
    }
}

/* A transaction committed: absorb it, or make what came before it in
 * the log durable and record it live.  *absorbed (the commit block is to
 * be held) is set when it was absorbed.
 */
static int
absorb_or_record_tx (struct engine *e, const struct jwrite *w,
                     const struct jevent *x, struct hold_info *absorbed)
{
  enum tclass cls = TCLASS_REAL;
  int r;

  if (jlog_known (w->jl) && !x->has_revoke && !x->has_unknown)
    cls = tx_class (e, w->s->fs, w->jl, x);
  if (!jstate_policy_absorbs (e->cfg.policy, cls))
    {
      STAT_INC (w->st->tx_real);
      r = journal_writeback (e);
      return r < 0 ? r : jlog_add (w->jl, x, false);
    }
  absorb_pending (e, w->s->fs, x, cls);
  r = jlog_add (w->jl, x, true);
  if (r == 0)
    {
      *absorbed = (struct hold_info){
        .fs = w->s->fsi, .kind = HOLD_JCOMMIT, .cls = cls, .seq = x->seq
      };
      STAT_INC (w->st->tx_absorbed);
    }
  return r;
}

/* Handle the follower's events for one journal block write. */
static int
on_events (struct engine *e, const struct jwrite *w, const struct jevent *ev,
           int nev, struct hold_info *absorbed)
{
  int r = 0;

  for (int k = 0; k < nev && r == 0; k++)
    switch (ev[k].type)
      {
      case JE_TX_COMMITTED:
        r = absorb_or_record_tx (e, w, &ev[k], absorbed);
        break;
      case JE_TX_ABORTED:
      case JE_CONFUSED:
        r = journal_writeback (e);
        break;
      default:
        break;
      }
  return r;
}

/* The journal superblock: re-read by the follower, then through.  The
 * tail it records counts once it is durable: now with FUA, else at the
 * next flush.
 */
static int
write_superblock (struct engine *e, const struct jwrite *w)
{
  const struct ext4_fs *fs = w->s->fs;
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  struct hold_info unused;
  uint32_t seq = 0, start = 0;
  int nev, r;

  nev = jlog_superblock (w->jl, w->blk, fs->block_size,
                         fs->feature_compat & EXT4_FEATURE_COMPAT_FAST_COMMIT,
                         ev, JFOLLOW_MAX_EVENTS, &seq, &start);
  r = nev < 0 ? lost_track (e, w->jl) : on_events (e, w, ev, nev, &unused);
  if (r == 0)
    r = jpass_add (e, w);
  if (r == 0)
    r = jpass_submit (e);
  if (r < 0 || nev < 0)
    return r;
  jlog_tail_written (w->jl, seq, start, w->flags & BIO_FUA);
  if (w->flags & BIO_FUA)
    jstate_discard_dead_locked (e, w->s->fsi);
  else
    atomic_store (&e->tails_pending, true);
  return 0;
}

static int
hold_block (struct engine *e, const struct jwrite *w,
            const struct hold_info *what)
{
  int r = 0;

  if (!hold_put (&e->holds, w->b, w->s->fs->block_size, what, w->blk, now_ns (),
                 &r))
    return r;
  STAT_INC (w->st->journal_held);
  return 0;
}

/* Through, after every journal hold before it. */
static int
pass_block (struct engine *e, const struct jwrite *w)
{
  int r = journal_writeback (e);

  return r < 0 ? r : jpass_add (e, w);
}

/* The pending hold of w's block (just held) gets the class its block
 * arrived with, for the write-back's decisions (jstate_pending_may_wait):
 * REAL for a revoke block, its logged copy's class for a data block,
 * SAME for anything else (a descriptor).  Its transaction's class is
 * decided again at the commit (tx_class).
 */
static void
note_arrival_class (struct engine *e, const struct jwrite *w)
{
  struct hold *h = hold_find (&e->holds, w->b);
  enum tclass cls = TCLASS_SAME;
  struct jslot slot;

  if (!h || h->kind != HOLD_JPENDING)
    return;
  if (jlog_lookup (w->jl, w->lblk, &slot) == 0 && slot.state == JTX_OPEN)
    {
      if (slot.kind == JS_REVOKE)
        cls = TCLASS_REAL;
      else if (slot.kind == JS_DATA && slot.written)
        cls = slot_class (e, w->s->fs, w->jl, w->lblk);
    }
  /* slot_class reads the store without the hold lock. */
  h = hold_find (&e->holds, w->b);
  if (h && h->kind == HOLD_JPENDING)
    hold_redescribe (&e->holds, h, HOLD_JPENDING, cls, h->seq);
}

/* A whole log block (not the superblock): held if it is the commit of
 * an absorbed transaction or belongs to a transaction whose commit has
 * not come, else through.
 */
static int
write_log_block (struct engine *e, const struct jwrite *w)
{
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  struct hold_info absorbed = { .kind = HOLD_INPLACE };
  int nev, r;

  nev = jlog_write (w->jl, w->lblk, w->blk, w->s->fs->block_size, ev,
                    JFOLLOW_MAX_EVENTS);
  if (nev < 0)
    {
      r = lost_track (e, w->jl);
      return r < 0 ? r : jpass_add (e, w);
    }
  r = on_events (e, w, ev, nev, &absorbed);
  if (r < 0)
    return r;
  if (absorbed.kind == HOLD_JCOMMIT)
    return hold_block (e, w, &absorbed);
  if (jlog_known (w->jl) && jlog_in_open_tx (w->jl, w->lblk))
    {
      r = hold_block (e, w,
                      &(struct hold_info){ .fs = w->s->fsi,
                                           .kind = HOLD_JPENDING,
                                           .cls = TCLASS_REAL });
      if (r == 0)
        note_arrival_class (e, w);
      return r;
    }
  return pass_block (e, w);
}

/* The block at b as the client sees it now, with the client's bytes
 * [lo, hi) from data (data is the client's buffer at s->off): a whole
 * block is the client's bytes themselves, a partial one is merged into
 * tmp.  Returns the block, or NULL with -errno in *err.
 */
static const char *
merge_block (struct engine *e, const struct seg *s, uint64_t b, uint64_t lo,
             uint64_t hi, const char *data, char *tmp, int *err)
{
  const uint32_t bs = s->fs->block_size;
  const struct hold *h;

  if (hi - lo == bs)
    return data + (lo - s->off);
  h = hold_find (&e->holds, b);
  if (h)
    memcpy (tmp, h->data, bs);
  else if ((*err = journal_pread (e, tmp, bs, b)) < 0)
    return NULL;
  memcpy (tmp + (lo - b), data + (lo - s->off), hi - lo);
  return tmp;
}

/* One journal block write.  A held position written again means the log
 * wrapped onto it while the held block is still part of the log (dead
 * ones are gone): everything held goes first.
 */
static int
write_block (struct engine *e, struct jwrite *w, uint64_t lo, uint64_t hi,
             const char *data, char *tmp)
{
  const uint32_t bs = w->s->fs->block_size;
  struct hold *h;
  int r = 0;

  w->blk = merge_block (e, w->s, w->b, lo, hi, data, tmp, &r);
  if (!w->blk)
    return r;
  h = hold_find (&e->holds, w->b);
  if (h && (r = journal_writeback (e)) < 0)
    return r;
  if (jlog_is_superblock (w->jl, w->lblk))
    return write_superblock (e, w);
  if (hi - lo < bs)
    {
      /* A partial block write (which the kernel never does). */
      r = lost_track (e, w->jl);
      return r < 0 ? r : jpass_add (e, w);
    }
  return write_log_block (e, w);
}

/* A write to a journal extent under policy=atime|lazy, covering whole
 * journal blocks [b0, b0 + n*bs) of which the client wrote [s->off,
 * +len).  Held: blocks of transactions whose commit has not come, and
 * every block of an absorbed transaction.  Everything else is written,
 * after every journal hold before it (the ordering rule).  The journal
 * state is this write's until its last batch (taken: engine-impl.h,
 * jwb_busy), so that its store I/O runs without the hold lock; the last
 * batch goes once it gave it back (nothing can count on it before the
 * client hears back, and the engine's own store I/O of those blocks
 * waits for it: struct jflight, engine-impl.h).  Only the first and the
 * last block can be partial: each has a merge buffer of its own, as the
 * pass may still point at the first.
 */
int
absorb_write (struct engine *e, const struct seg *s, const char *data,
              uint32_t flags)
{
  const uint32_t bs = s->fs->block_size;
  const uint64_t b0 = s->fs->start + (s->off - s->fs->start) / bs * bs;
  const uint64_t end = s->off + s->len;
  struct jwrite w
      = { .s = s, .jl = e->jl[s->fsi], .st = &e->fst[s->fsi], .flags = flags };
  const size_t n = (end - b0 + bs - 1) / bs;
  struct jpass pass = { .cap = n < JPASS_MAX ? n : JPASS_MAX };
  struct jflight flight;
  char *tmp = malloc (2 * (size_t)bs);
  bool taken;
  int r = 0, r2;

  pass.v = calloc (pass.cap, sizeof *pass.v);
  if (!tmp || !pass.v)
    {
      free (tmp);
      free (pass.v);
      return -ENOMEM;
    }
  STAT_ADD (w.st->journal_writes, n);
  pthread_mutex_lock (&e->hold_lock);
  /* The journal state is this write's until the last batch (its store
   * I/O runs without the hold lock).
   */
  do
    writeback_journal_idle_locked (e);
  while (jstate_wait_passes_unlocking (e, b0, n * bs));
  taken = writeback_journal_take_locked (e);
  e->jpass = &pass;
  for (w.b = b0; w.b < end && r == 0; w.b += bs)
    {
      uint64_t lo = w.b > s->off ? w.b : s->off;
      uint64_t hi = w.b + bs < end ? w.b + bs : end;

      w.lblk = layout_journal_lblk (s->fs, w.b);
      r = write_block (e, &w, lo, hi, data, w.b == b0 ? tmp : tmp + bs);
    }
  e->jpass = NULL;
  if (r == 0)
    r = writeback_cap_unlocking (e);
  holds_changed (e);
  writeback_kick_locked (e);
  writeback_journal_give_locked (e, taken);
  /* What was gathered goes even after an error, as it would have gone
   * block by block, and without the hold lock: other connections'
   * inode-table and journal writes go on meanwhile.
   */
  if (pass.n > 0)
    jpass_begin_locked (e, &pass, &flight);
  pthread_mutex_unlock (&e->hold_lock);
  if (pass.n > 0)
    {
      r2 = jpass_run (e, &pass);
      jstate_pass_end (e, &flight);
      r = r < 0 ? r : r2;
    }
  free (tmp);
  free (pass.v);
  return r;
}

/* ---- the jlogs of a layout ------------------------------------------ */

void
absorb_jlogs_free (struct jlog **jl, size_t n)
{
  if (!jl)
    return;
  for (size_t i = 0; i < n; i++)
    jlog_free (jl[i]);
  free (jl);
}

/* Move the jlog of nl's fs from oldjl if that journal did not move. */
static struct jlog *
take_jlog (const struct layout *old, struct jlog **oldjl,
           const struct ext4_fs *fs)
{
  for (size_t k = 0; old && oldjl && k < old->n_fs; k++)
    if (oldjl[k] && layout_same_journal (&old->fs[k], fs))
      {
        struct jlog *j = oldjl[k];

        oldjl[k] = NULL;
        return j;
      }
  return NULL;
}

/* Undo take_jlog for every jlog of jl, then free the rest. */
static void
give_back_jlogs (const struct layout *old, struct jlog **oldjl,
                 const struct layout *nl, struct jlog **jl)
{
  for (size_t i = 0; i < nl->n_fs; i++)
    for (size_t k = 0; jl[i] && old && oldjl && k < old->n_fs; k++)
      if (!oldjl[k] && layout_same_journal (&old->fs[k], &nl->fs[i]))
        {
          oldjl[k] = jl[i];
          jl[i] = NULL;
        }
  absorb_jlogs_free (jl, nl->n_fs);
}

/* Read the store for jlog_new: nothing of a journal without a jlog is
 * held, so the store has what the client wrote there.
 */
static int
read_store (void *opaque, void *buf, size_t len, uint64_t off)
{
  return backend_pread (opaque, buf, len, off);
}

int
absorb_jlogs_new (struct engine *e, const struct layout *old,
                  struct jlog **oldjl, const struct layout *nl,
                  struct jlog ***out)
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

      jl[i] = take_jlog (old, oldjl, &nl->fs[i]);
      if (jl[i])
        continue;
      r = jlog_new (&nl->fs[i], read_store, e->store, &jl[i]);
      if (r < 0)
        {
          give_back_jlogs (old, oldjl, nl, jl);
          return r;
        }
    }
  *out = jl;
  return 0;
}

bool
absorb_journal_moved (const struct engine *e, const struct layout *old,
                      const struct layout *nl)
{
  for (size_t k = 0; e->jl && k < old->n_fs; k++)
    {
      bool found = false;

      if (!e->jl[k])
        continue;
      for (size_t i = 0; i < nl->n_fs && !found; i++)
        found = layout_same_journal (&old->fs[k], &nl->fs[i]);
      if (!found)
        return true;
    }
  return false;
}
