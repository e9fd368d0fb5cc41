/* SPDX-License-Identifier: BSD-3-Clause */
/* journal.c --- the jbd2 log follower: transaction assembly from
 * journal writes in arrival order (see journal.h and docs/journal.md).
 * Blocks are parsed by jbd2.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "byteorder.h"
#include "journal.h"
#include "log.h"
#include "vector.h"

DEFINE_VECTOR (u64vec, uint64_t)

/* TID comparison with 32-bit wrap-around, as jbd2's tid_gt. */
static bool
tid_gt (uint32_t x, uint32_t y)
{
  return (int32_t)(x - y) > 0;
}

/* What one log position holds (kind is an enum jslot_kind, 0 = unseen). */
struct slot
{
  uint64_t target; /* DATA: fs block */
  uint32_t seq;    /* DESCRIPTOR, DATA, REVOKE, COMMIT, UNKNOWN */
  uint8_t kind;
  uint8_t flags;
};

enum
{
  F_WRITTEN = 1,   /* DATA: the logged copy arrived */
  F_ESCAPED = 2,   /* DATA: tag has ESCAPE */
  F_ZERO4 = 4,     /* PENDING, DATA: the block's first 4 bytes are 0 */
  F_COMMITTED = 8, /* its transaction committed */
  F_ABORTED = 16,  /* its transaction was abandoned */
};

struct jtx
{
  bool open;
  uint32_t seq;
  bool has_commit;
  uint64_t commit_lblk;
  uint64_t commit_sec;
  uint32_t commit_nsec;
  bool has_revoke, has_unknown;
  size_t nmissing;   /* described DATA positions not yet written */
  struct u64vec pos; /* positions claimed, in claim order */
};

struct evbuf
{
  struct u64vec targets, lblks, pos;
};

struct jfollow
{
  struct jfeatures f;
  uint64_t journal_blocks;
  uint64_t lfirst, lend, loglen; /* the log: [lfirst, lend) */
  struct slot *slots;            /* maxlen entries */
  struct jtx cur;
  bool head_known; /* head: where the next transaction starts */
  uint64_t head;
  bool seq_known; /* last_seq: the last transaction that ended */
  uint32_t last_seq;
  bool fresh;           /* nothing seen since jfollow_new or a reset */
  bool window_confused; /* a confusion since the last transaction end */
  struct u64vec pend;   /* positions made PENDING since then */
  struct jtag *tags;    /* jbd2_max_tags entries */
  size_t tags_cap;
  struct evbuf evb[JFOLLOW_MAX_EVENTS];
  /* Per call. */
  struct jevent *ev;
  size_t nout;
  bool confused_now; /* one JE_CONFUSED per call is enough */
  bool oom;
};

/* Append x to v; on failure, remember it for the end of the call. */
static void
vpush (struct jfollow *j, struct u64vec *v, uint64_t x)
{
  if (u64vec_append (v, x) < 0)
    j->oom = true;
}

static uint64_t
fwd (const struct jfollow *j, uint64_t x, uint64_t k)
{
  return j->lfirst + (x - j->lfirst + k % j->loglen) % j->loglen;
}

static uint64_t
back (const struct jfollow *j, uint64_t x, uint64_t k)
{
  return j->lfirst + (x - j->lfirst + j->loglen - k % j->loglen) % j->loglen;
}

static bool
in_log (const struct jfollow *j, uint64_t lblk)
{
  return lblk >= j->lfirst && lblk < j->lend;
}

/* Does the slot belong to the open transaction? */
static bool
mine (const struct jfollow *j, const struct slot *s)
{
  if (!j->cur.open || s->seq != j->cur.seq
      || (s->flags & (F_COMMITTED | F_ABORTED)))
    return false;
  return s->kind == JS_DESCRIPTOR || s->kind == JS_DATA || s->kind == JS_REVOKE
         || s->kind == JS_COMMIT;
}

static struct jevent *
emit (struct jfollow *j, enum jevent_type type, uint32_t seq)
{
  struct jevent *e;

  if (j->nout >= JFOLLOW_MAX_EVENTS)
    {
      /* Cannot happen: no path emits more. */
      log_debug ("journal: event dropped (type %d, seq %u)", (int)type, seq);
      return NULL;
    }
  e = &j->ev[j->nout];
  memset (e, 0, sizeof *e);
  e->type = type;
  e->seq = seq;
  j->evb[j->nout].targets.n = 0;
  j->evb[j->nout].lblks.n = 0;
  j->evb[j->nout].pos.n = 0;
  j->nout++;
  return e;
}

static void
confused (struct jfollow *j, uint64_t lblk, uint32_t seq)
{
  struct jevent *e;

  if (j->cur.open)
    j->cur.has_unknown = true;
  j->window_confused = true;
  if (j->confused_now)
    return;
  j->confused_now = true;
  e = emit (j, JE_CONFUSED, seq);
  if (e)
    e->lblk = lblk;
}

/* A transaction ended: positions written since the previous end that
 * no transaction claimed are stale, and a confusion among them is
 * reported.
 */
static void
end_window (struct jfollow *j)
{
  bool stale = false;
  uint64_t first_stale = 0;

  for (size_t i = 0; i < j->pend.n; i++)
    {
      struct slot *s = &j->slots[j->pend.v[i]];

      if (s->kind == JS_PENDING)
        {
          s->kind = JS_STALE;
          if (!stale)
            first_stale = j->pend.v[i];
          stale = true;
        }
    }
  j->pend.n = 0;
  if (stale)
    confused (j, first_stale, j->seq_known ? j->last_seq : 0);
  j->window_confused = false;
}

static void
cur_clear (struct jfollow *j)
{
  struct u64vec pos = j->cur.pos;

  memset (&j->cur, 0, sizeof j->cur);
  pos.n = 0;
  j->cur.pos = pos;
}

/* Order positions by their distance forward from a reference. */
struct sort_key
{
  uint64_t ref, first, len;
};

static int
cmp_from_ref (const void *a, const void *b, void *arg)
{
  const struct sort_key *k = arg;
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  uint64_t dx = (x - k->first + k->len - (k->ref - k->first)) % k->len;
  uint64_t dy = (y - k->first + k->len - (k->ref - k->first)) % k->len;

  return dx < dy ? -1 : dx > dy;
}

/* Is every position between the transaction's start and its commit
 * one of its own written blocks?  *start gets the first position.
 */
static bool
span_complete (const struct jfollow *j, uint64_t *start)
{
  size_t n;

  if (!j->cur.has_commit || j->cur.nmissing > 0 || j->cur.pos.n == 0)
    return false;
  n = j->cur.pos.n - 1; /* the commit itself is in pos */
  if (n + 1 > j->loglen)
    return false;
  /* It must reach back to where the transaction starts. */
  if (j->head_known
      && n
             != (j->cur.commit_lblk - j->lfirst + j->loglen
                 - (j->head - j->lfirst))
                    % j->loglen)
    return false;
  for (size_t i = 1; i <= n; i++)
    {
      const struct slot *s = &j->slots[back (j, j->cur.commit_lblk, i)];

      if (!mine (j, s) || s->kind == JS_COMMIT
          || (s->kind == JS_DATA && !(s->flags & F_WRITTEN)))
        return false;
    }
  *start = back (j, j->cur.commit_lblk, n);
  return true;
}

/* The positions of a complete transaction: every block from start to
 * its commit.
 */
static void
event_span (struct jfollow *j, struct evbuf *eb, struct jevent *e,
            uint64_t start)
{
  const struct jtx *t = &j->cur;

  for (size_t i = t->pos.n; i-- > 0;)
    vpush (j, &eb->pos, back (j, t->commit_lblk, i));
  e->first_lblk = start;
}

/* The positions of an incomplete transaction: what has arrived, ordered
 * from the expected start.
 */
static void
event_arrived (struct jfollow *j, struct evbuf *eb, struct jevent *e)
{
  const struct jtx *t = &j->cur;

  for (size_t i = 0; i < t->pos.n; i++)
    {
      const struct slot *s = &j->slots[t->pos.v[i]];

      if (mine (j, s) && (s->kind != JS_DATA || (s->flags & F_WRITTEN)))
        vpush (j, &eb->pos, t->pos.v[i]);
    }
  if (eb->pos.n > 0 && !j->oom)
    {
      struct sort_key k = { .ref = j->head_known ? j->head : eb->pos.v[0],
                            .first = j->lfirst,
                            .len = j->loglen };

      if (!in_log (j, k.ref))
        k.ref = j->lfirst;
      qsort_r (eb->pos.v, eb->pos.n, sizeof *eb->pos.v, cmp_from_ref, &k);
    }
  e->first_lblk = eb->pos.n ? eb->pos.v[0] : 0;
}

/* Fill the event of the open transaction, which is closing; its arrays
 * go in eb.
 */
static void
event_fill (struct jfollow *j, struct jevent *e, struct evbuf *eb,
            bool complete, uint64_t start)
{
  const struct jtx *t = &j->cur;

  e->has_revoke = t->has_revoke;
  e->has_unknown = t->has_unknown || j->window_confused || !complete;
  e->commit_sec = t->commit_sec;
  e->commit_nsec = t->commit_nsec;
  if (complete)
    event_span (j, eb, e, start);
  else
    event_arrived (j, eb, e);
  for (size_t i = 0; i < eb->pos.n; i++)
    {
      const struct slot *s = &j->slots[eb->pos.v[i]];

      if (s->kind == JS_DATA)
        {
          vpush (j, &eb->targets, s->target);
          vpush (j, &eb->lblks, eb->pos.v[i]);
        }
    }
  if (t->has_commit)
    e->end_lblk = fwd (j, t->commit_lblk, 1);
  else if (eb->pos.n)
    e->end_lblk = fwd (j, eb->pos.v[eb->pos.n - 1], 1);
  e->pos = eb->pos.v;
  e->npos = eb->pos.n;
  e->targets = eb->targets.v;
  e->lblks = eb->lblks.v;
  e->nblocks = eb->targets.n;
}

/* Close the open transaction with an event of type; complete: the span
 * check passed and start is its first block.
 */
static void
finish (struct jfollow *j, enum jevent_type type, bool complete, uint64_t start)
{
  struct jtx *t = &j->cur;
  size_t slot_ix = j->nout;
  struct jevent *e = emit (j, type, t->seq);
  uint8_t mark = type == JE_TX_COMMITTED ? F_COMMITTED : F_ABORTED;

  if (e)
    event_fill (j, e, &j->evb[slot_ix], complete, start);
  for (size_t i = 0; i < t->pos.n; i++)
    {
      struct slot *s = &j->slots[t->pos.v[i]];

      if (mine (j, s))
        s->flags |= mark;
    }
  j->last_seq = t->seq;
  j->seq_known = true;
  if (type == JE_TX_COMMITTED && t->has_commit)
    {
      j->head = fwd (j, t->commit_lblk, 1);
      j->head_known = true;
    }
  else
    j->head_known = false;
  cur_clear (j);
  end_window (j);
}

/* Close the open transaction because something newer arrived or the log
 * was reset.
 */
static void
finish_early (struct jfollow *j, uint64_t lblk)
{
  if (j->cur.has_commit)
    {
      /* async_commit: its commit arrived, some blocks never did. */
      confused (j, lblk, j->cur.seq);
      finish (j, JE_TX_COMMITTED, false, 0);
    }
  else
    finish (j, JE_TX_ABORTED, false, 0);
}

static void
try_complete (struct jfollow *j)
{
  uint64_t start;

  if (!j->cur.open || !j->cur.has_commit)
    return;
  if (span_complete (j, &start))
    {
      /* Where the transaction starts must be known: else blocks of it
       * may have come before the follower started, or (async_commit)
       * may still come.
       */
      if (!j->head_known)
        j->cur.has_unknown = true;
      finish (j, JE_TX_COMMITTED, true, start);
    }
  else if (!j->f.async_commit)
    {
      /* Without async_commit the kernel writes the commit block only
       * once every other block of the transaction has completed.
       */
      confused (j, j->cur.commit_lblk, j->cur.seq);
      finish (j, JE_TX_COMMITTED, false, 0);
    }
}

/* Make the open transaction the one with sequence seq, closing an older
 * one.  false: seq goes backwards (the block does not fit).
 */
static bool
tx_for (struct jfollow *j, uint32_t seq, uint64_t lblk)
{
  if (j->cur.open)
    {
      if (seq == j->cur.seq)
        return true;
      if (!tid_gt (seq, j->cur.seq))
        return false;
      finish_early (j, lblk);
    }
  if (j->seq_known && !tid_gt (seq, j->last_seq))
    return false;
  j->cur.open = true;
  j->cur.seq = seq;
  return true;
}

static void
set_slot (struct slot *s, enum jslot_kind kind, uint32_t seq, uint64_t target,
          uint8_t flags)
{
  s->kind = kind;
  s->seq = seq;
  s->target = target;
  s->flags = flags;
}

/* A block with the magic that is not understood or not in place. */
static void
bad_meta (struct jfollow *j, uint64_t lblk, uint32_t seq)
{
  struct slot *s = &j->slots[lblk];

  confused (j, lblk, seq);
  if (mine (j, s) && s->kind == JS_DATA)
    {
      /* Magic in a data position: logged copies never start with it. */
      if (!(s->flags & F_WRITTEN))
        {
          s->flags |= F_WRITTEN;
          j->cur.nmissing--;
        }
      s->flags &= ~F_ZERO4;
      try_complete (j);
      return;
    }
  set_slot (s, JS_UNKNOWN, seq, 0, 0);
  try_complete (j);
}

static void
on_data (struct jfollow *j, uint64_t lblk, const unsigned char *b, size_t len)
{
  struct slot *s = &j->slots[lblk];
  bool zero4 = len >= 4 && !(b[0] | b[1] | b[2] | b[3]);

  if (mine (j, s) && s->kind == JS_DATA)
    {
      if (!(s->flags & F_WRITTEN))
        {
          s->flags |= F_WRITTEN;
          j->cur.nmissing--;
        }
      s->flags = (uint8_t)((s->flags & ~F_ZERO4) | (zero4 ? F_ZERO4 : 0));
      if ((s->flags & F_ESCAPED) && !zero4)
        confused (j, lblk, j->cur.seq);
      try_complete (j);
      return;
    }
  if (mine (j, s))
    {
      /* Data over the transaction's own descriptor, revoke or commit. */
      confused (j, lblk, j->cur.seq);
    }
  if (s->kind != JS_PENDING)
    vpush (j, &j->pend, lblk);
  set_slot (s, JS_PENDING, 0, 0, zero4 ? F_ZERO4 : 0);
  try_complete (j);
}

/* Claim lblk for the open transaction as kind.  false if it already is
 * one of its blocks.
 */
static bool
claim (struct jfollow *j, uint64_t lblk, enum jslot_kind kind)
{
  struct slot *s = &j->slots[lblk];

  if (mine (j, s))
    return false;
  set_slot (s, kind, j->cur.seq, 0, 0);
  vpush (j, &j->cur.pos, lblk);
  return true;
}

static void
on_descriptor (struct jfollow *j, uint64_t lblk, const struct jblock *blk)
{
  if (!tx_for (j, blk->seq, lblk))
    {
      bad_meta (j, lblk, blk->seq);
      return;
    }
  if (!claim (j, lblk, JS_DESCRIPTOR))
    {
      bad_meta (j, lblk, blk->seq);
      return;
    }
  if (blk->ntags + 2 > j->loglen)
    {
      /* More blocks than the log holds. */
      confused (j, lblk, blk->seq);
      try_complete (j);
      return;
    }
  for (size_t i = 0; i < blk->ntags; i++)
    {
      uint64_t x = fwd (j, lblk, i + 1);
      struct slot *s = &j->slots[x];
      const struct jtag *t = &blk->tags[i];
      uint8_t flags = t->escaped ? F_ESCAPED : 0;

      if (mine (j, s))
        {
          confused (j, x, blk->seq);
          continue;
        }
      if (s->kind == JS_PENDING)
        {
          flags |= F_WRITTEN | (s->flags & F_ZERO4);
          if (t->escaped && !(s->flags & F_ZERO4))
            confused (j, x, blk->seq);
        }
      else
        j->cur.nmissing++;
      set_slot (s, JS_DATA, blk->seq, t->target, flags);
      vpush (j, &j->cur.pos, x);
    }
  try_complete (j);
}

static void
on_revoke (struct jfollow *j, uint64_t lblk, const struct jblock *blk)
{
  if (!tx_for (j, blk->seq, lblk) || !claim (j, lblk, JS_REVOKE))
    {
      bad_meta (j, lblk, blk->seq);
      return;
    }
  j->cur.has_revoke = true;
  try_complete (j);
}

static void
follow_commit_block (struct jfollow *j, uint64_t lblk, const struct jblock *blk)
{
  bool empty = !j->cur.open || j->cur.seq != blk->seq;

  if (j->cur.open && j->cur.seq == blk->seq && j->cur.has_commit)
    {
      /* A second commit block for the same transaction. */
      bad_meta (j, lblk, blk->seq);
      return;
    }
  if (empty)
    {
      bool at_head;

      if (j->cur.open && tid_gt (blk->seq, j->cur.seq))
        {
          /* The open transaction never committed and this commit is
           * for a later one: nothing in the kernel writes that.
           */
          confused (j, lblk, blk->seq);
          finish_early (j, lblk);
          j->window_confused = true;
        }
      if (j->cur.open || (j->seq_known && !tid_gt (blk->seq, j->last_seq)))
        {
          bad_meta (j, lblk, blk->seq);
          return;
        }
      /* A transaction without blocks is only a commit block, at the
       * head.  With async_commit the commit of a transaction with
       * blocks may come first: wait for them.  Anything else is a
       * commit for a transaction that was not seen.
       */
      at_head = j->head_known ? lblk == j->head : j->pend.n == 0;
      if (j->window_confused || (!at_head && !j->f.async_commit))
        {
          confused (j, lblk, blk->seq);
          set_slot (&j->slots[lblk], JS_COMMIT, blk->seq, 0, F_COMMITTED);
          j->head = fwd (j, lblk, 1);
          j->head_known = true;
          j->last_seq = blk->seq;
          j->seq_known = true;
          end_window (j);
          return;
        }
      j->cur.open = true;
      j->cur.seq = blk->seq;
    }
  if (!claim (j, lblk, JS_COMMIT))
    {
      bad_meta (j, lblk, blk->seq);
      return;
    }
  j->cur.has_commit = true;
  j->cur.commit_lblk = lblk;
  j->cur.commit_sec = blk->commit_sec;
  j->cur.commit_nsec = blk->commit_nsec;
  try_complete (j);
}

/* Forget everything (slots are left to the caller).  The next
 * transaction starts at s_start when the superblock has one (after
 * recovery and at the first commit after a mount, the kernel's tail and
 * head are the same block), else at s_first (a clean log; with the
 * v6.4+ journal_cycle_record option the kernel uses s_head instead,
 * which the follower then reports as a confusion: safe).
 */
static void
drop_state (struct jfollow *j)
{
  cur_clear (j);
  j->pend.n = 0;
  j->head_known = true;
  j->head = j->f.start && in_log (j, j->f.start) ? j->f.start : j->lfirst;
  j->seq_known = false;
  j->window_confused = false;
  j->fresh = true;
}

static int
geometry (struct jfollow *j, const struct jfeatures *f, uint64_t journal_blocks)
{
  if (jbd2_features_check (f) < 0 || f->maxlen > journal_blocks)
    return -EINVAL;
  j->lfirst = f->first;
  j->lend = jbd2_log_end (f);
  j->loglen = j->lend - j->lfirst;
  return 0;
}

int
jfollow_new (const struct jfeatures *f, uint64_t journal_blocks,
             struct jfollow **out)
{
  struct jfollow *j = calloc (1, sizeof *j);

  if (!j)
    return -ENOMEM;
  if (geometry (j, f, journal_blocks) < 0)
    {
      free (j);
      return -EINVAL;
    }
  j->f = *f;
  j->journal_blocks = journal_blocks;
  drop_state (j);
  /* calloc of a large array maps zero pages lazily: positions never
   * written cost no memory.
   */
  j->slots = calloc (f->maxlen, sizeof *j->slots);
  j->tags_cap = jbd2_max_tags (f);
  j->tags = calloc (j->tags_cap, sizeof *j->tags);
  if (!j->slots || !j->tags)
    {
      jfollow_free (j);
      return -ENOMEM;
    }
  *out = j;
  return 0;
}

void
jfollow_free (struct jfollow *j)
{
  if (!j)
    return;
  free (j->slots);
  free (j->tags);
  u64vec_reset (&j->cur.pos);
  u64vec_reset (&j->pend);
  for (size_t i = 0; i < JFOLLOW_MAX_EVENTS; i++)
    {
      u64vec_reset (&j->evb[i].targets);
      u64vec_reset (&j->evb[i].lblks);
      u64vec_reset (&j->evb[i].pos);
    }
  free (j);
}

static void
begin_call (struct jfollow *j, struct jevent *ev)
{
  j->ev = ev;
  j->nout = 0;
  j->confused_now = false;
  j->oom = false;
}

int
jfollow_write (struct jfollow *j, uint64_t lblk, const void *blk, size_t len,
               struct jevent *ev, size_t nev)
{
  struct jblock b;
  int r;

  if (nev < JFOLLOW_MAX_EVENTS || lblk >= j->journal_blocks || !blk || len == 0)
    return -EINVAL;
  begin_call (j, ev);
  if (!in_log (j, lblk))
    return 0;
  j->fresh = false;
  memset (&b, 0, sizeof b);
  b.tags = j->tags;
  b.tags_cap = j->tags_cap;
  r = jbd2_parse_block (&j->f, blk, len, &b);
  if (r < 0 || b.csum == JCSUM_BAD || b.kind == JB_SUPERBLOCK_V1
      || b.kind == JB_SUPERBLOCK_V2 || b.kind == JB_UNKNOWN)
    bad_meta (j, lblk,
              len >= JBD2_HEADER_BYTES ? be32 ((const unsigned char *)blk + 8)
                                       : 0);
  else if (b.kind == JB_NONE)
    on_data (j, lblk, blk, len);
  else
    {
      struct slot *s = &j->slots[lblk];

      if (mine (j, s) && s->kind == JS_DATA)
        bad_meta (j, lblk, b.seq); /* the magic in a data position */
      else if (b.kind == JB_DESCRIPTOR)
        on_descriptor (j, lblk, &b);
      else if (b.kind == JB_REVOKE)
        on_revoke (j, lblk, &b);
      else
        follow_commit_block (j, lblk, &b);
    }
  if (j->oom)
    {
      drop_state (j);
      j->head_known = false;
      memset (j->slots, 0, j->f.maxlen * sizeof *j->slots);
      return -ENOMEM;
    }
  return (int)j->nout;
}

int
jfollow_lookup (const struct jfollow *j, uint64_t lblk, struct jslot *out)
{
  const struct slot *s;

  if (lblk >= j->journal_blocks)
    return -EINVAL;
  memset (out, 0, sizeof *out);
  if (lblk >= j->f.maxlen)
    out->kind = JS_OUTSIDE;
  else if (lblk < j->lfirst)
    out->kind = JS_SUPERBLOCK;
  else if (lblk >= j->lend)
    out->kind = JS_FAST_COMMIT;
  else
    {
      s = &j->slots[lblk];
      out->kind = s->kind;
      out->seq = s->seq;
      out->target = s->target;
      out->written = s->flags & F_WRITTEN;
      out->escaped = s->flags & F_ESCAPED;
      out->state = (s->flags & F_COMMITTED) ? JTX_COMMITTED
                   : (s->flags & F_ABORTED) ? JTX_ABORTED
                                            : JTX_OPEN;
    }
  return 0;
}

/* Same log format: the follower's state stays valid. */
static bool
same_format (const struct jfeatures *a, const struct jfeatures *b)
{
  return a->blocksize == b->blocksize && a->maxlen == b->maxlen
         && a->first == b->first && a->fast_commit == b->fast_commit
         && a->num_fc_blks == b->num_fc_blks && a->csum_v1 == b->csum_v1
         && a->csum_v2 == b->csum_v2 && a->csum_v3 == b->csum_v3
         && a->bit64 == b->bit64 && a->async_commit == b->async_commit
         && a->has_uuid == b->has_uuid
         && (!a->has_uuid || memcmp (a->uuid, b->uuid, sizeof a->uuid) == 0);
}

int
jfollow_reset (struct jfollow *j, const struct jfeatures *f, struct jevent *ev,
               size_t nev)
{
  struct jfollow g;
  struct slot *slots;
  struct jtag *tags;
  size_t tags_cap;

  if (nev < JFOLLOW_MAX_EVENTS || geometry (&g, f, j->journal_blocks) < 0)
    return -EINVAL;
  begin_call (j, ev);
  if (same_format (&j->f, f) && f->start != 0)
    {
      /* A tail update (the REVOKE feature may also have appeared).
       * Before any transaction, it also says where the next one
       * starts.
       */
      j->f = *f;
      if (j->fresh && in_log (j, f->start))
        j->head = f->start;
      return 0;
    }
  slots = calloc (f->maxlen, sizeof *slots);
  tags_cap = jbd2_max_tags (f);
  tags = calloc (tags_cap, sizeof *tags);
  if (!slots || !tags)
    {
      free (slots);
      free (tags);
      return -ENOMEM;
    }
  if (j->cur.open)
    finish_early (j, j->cur.has_commit ? j->cur.commit_lblk : j->lfirst);
  free (j->slots);
  free (j->tags);
  j->slots = slots;
  j->tags = tags;
  j->tags_cap = tags_cap;
  j->f = *f;
  j->lfirst = g.lfirst;
  j->lend = g.lend;
  j->loglen = g.loglen;
  drop_state (j);
  if (j->oom)
    return -ENOMEM;
  return (int)j->nout;
}
