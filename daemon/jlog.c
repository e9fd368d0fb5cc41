/* SPDX-License-Identifier: BSD-3-Clause */
/* jlog.c --- the live and absorbed transactions of one journal, and the
 * follower that finds them (see jlog.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <ext2fs/ext2_fs.h>

#include "byteorder.h"
#include "jlog.h"
#include "log.h"
#include "vector.h"

/* A committed transaction: its logged copies. */
struct jlog_tx
{
  uint32_t seq;
  size_t n;
  uint64_t *targets; /* fs blocks */
  uint64_t *lblks;   /* journal blocks of the logged copies */
  bool *escaped;
};

DEFINE_VECTOR (tx_vec, struct jlog_tx)

struct jlog
{
  struct jfeatures feat;
  struct jfollow *follow;
  bool known; /* the live log is fully known */
  struct tx_vec live;
  size_t live_copies; /* logged copies in live, bounded by the log's size */
  struct tx_vec absorbed;
  /* The durable journal superblock's tail: transactions with a lower
   * sequence are behind it (tail_set once one was seen durable).  A
   * superblock written without FUA waits in pend_* for a flush.
   */
  bool tail_set, pend;
  uint32_t tail_seq, pend_seq, pend_start;
};

/* ---- the log the store holds at start ------------------------------ */

/* A journal that needs recovery (s_start != 0) is read as the scan
 * pass of jbd2 recovery reads it (do_one_pass, PASS_SCAN): from s_start
 * with s_sequence, each block must carry the magic and the expected
 * sequence, a descriptor is followed by its tags' logged copies, a
 * commit with the expected sequence ends a transaction and the next one
 * expects the next sequence; the first block that does not continue the
 * log ends it.  The complete transactions are fed to the follower in
 * log order and recorded live.
 */
struct scan
{
  struct jlog *j;
  const struct ext4_fs *fs;
  layout_read_fn read;
  void *opaque;
  uint64_t lfirst, loglen; /* the log: [lfirst, lfirst + loglen) */
  unsigned char *blk;      /* one block */
  struct jtag *tags;       /* jbd2_max_tags entries */
  size_t tags_cap;
};

/* The journal block k blocks after pos in the log. */
static uint64_t
scan_pos (const struct scan *s, uint64_t pos, uint64_t k)
{
  return s->lfirst + (pos - s->lfirst + k % s->loglen) % s->loglen;
}

/* Read journal block lblk into s->blk. */
static int
scan_read (struct scan *s, uint64_t lblk)
{
  uint64_t off = layout_journal_off (s->fs, lblk);

  if (off == UINT64_MAX)
    return -EINVAL;
  return s->read (s->opaque, s->blk, s->fs->block_size, off);
}

/* Parse s->blk (tags into s->tags).  A block that does not parse, or
 * whose v2/v3 checksum does not match, is not understood: -EBADMSG.
 */
static int
scan_parse (struct scan *s, struct jblock *b)
{
  memset (b, 0, sizeof *b);
  b->tags = s->tags;
  b->tags_cap = s->tags_cap;
  if (jbd2_parse_block (&s->j->feat, s->blk, s->fs->block_size, b) < 0
      || b->csum == JCSUM_BAD)
    return -EBADMSG;
  return 0;
}

/* Does s->blk continue the log as a block of transaction seq (the magic
 * and that sequence, as recovery checks before anything else)?
 */
static bool
scan_continues (const struct scan *s, uint32_t seq)
{
  return be32 (s->blk) == JBD2_MAGIC_NUMBER && be32 (s->blk + 8) == seq;
}

/* The scan pass over transaction seq, which starts at journal block pos
 * after done blocks of the log.  Returns 1 and *len (its blocks, commit
 * included) if it commits; 0 if the log ends at pos or the transaction
 * has no commit (recovery replays neither); -errno when in doubt: a
 * read error, a block that does not parse or is not a descriptor,
 * revoke or commit, or more blocks than the log holds (-E2BIG).
 */
static int
scan_walk (struct scan *s, uint64_t pos, uint64_t done, uint32_t seq,
           uint64_t *len)
{
  uint64_t k = 0;

  for (;;)
    {
      struct jblock b;
      int r;

      if (done + k >= s->loglen)
        return -E2BIG;
      r = scan_read (s, scan_pos (s, pos, k));
      if (r < 0)
        return r;
      if (!scan_continues (s, seq))
        return 0;
      r = scan_parse (s, &b);
      if (r < 0)
        return r;
      if (b.kind == JB_DESCRIPTOR)
        k += 1 + b.ntags;
      else if (b.kind == JB_REVOKE)
        k++;
      else if (b.kind == JB_COMMIT)
        {
          *len = k + 1;
          return 1;
        }
      else
        return -EBADMSG;
    }
}

/* Feed the follower journal block lblk (in s->blk).  The last block of
 * a transaction (last) must make it commit, understood; no other block
 * may produce an event.  Returns 0 and *ev filled for the last block,
 * or -errno.
 */
static int
scan_feed_block (struct scan *s, uint64_t lblk, uint32_t seq, bool last,
                 struct jevent *ev)
{
  int n = jfollow_write (s->j->follow, lblk, s->blk, s->fs->block_size, ev,
                         JFOLLOW_MAX_EVENTS);

  if (n < 0)
    return n;
  if (!last)
    return n == 0 ? 0 : -EBADMSG;
  if (n != 1 || ev[0].type != JE_TX_COMMITTED || ev[0].seq != seq
      || ev[0].has_unknown)
    return -EBADMSG;
  return 0;
}

/* Feed transaction seq (len blocks from pos, found by scan_walk) to the
 * follower, block by block in log order, and record it live.  Each
 * logged copy must match its tag's checksum (v2/v3): recovery would
 * not replay it and would fail.  -errno when in doubt.
 */
static int
scan_feed (struct scan *s, uint64_t pos, uint64_t len, uint32_t seq)
{
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  size_t ntags = 0, t = 0; /* tags of the last descriptor, copies fed */

  for (uint64_t k = 0; k < len; k++)
    {
      uint64_t lblk = scan_pos (s, pos, k);
      struct jblock b;
      int r = scan_read (s, lblk);

      if (r == 0 && t < ntags)
        r = jbd2_tag_csum_ok (&s->j->feat, &s->tags[t++], seq, s->blk)
                ? 0
                : -EBADMSG;
      else if (r == 0)
        {
          r = scan_continues (s, seq) ? scan_parse (s, &b) : -EBADMSG;
          ntags = r == 0 && b.kind == JB_DESCRIPTOR ? b.ntags : 0;
          t = 0;
        }
      if (r == 0)
        r = scan_feed_block (s, lblk, seq, k + 1 == len, ev);
      if (r < 0)
        return r;
    }
  return jlog_add (s->j, &ev[0], false);
}

/* Scan the log from the superblock's s_start and feed it: 0 when the
 * log ended where recovery would stop, the follower's head right after
 * the last committed transaction; -errno when in doubt or out of
 * memory.
 */
static int
scan_log (struct jlog *j, const struct ext4_fs *fs, layout_read_fn read,
          void *opaque)
{
  struct scan s = { .j = j, .fs = fs, .read = read, .opaque = opaque };
  uint64_t pos = j->feat.start, done = 0, len = 0;
  uint32_t seq = j->feat.sequence;
  int r;

  s.lfirst = j->feat.first;
  s.loglen = jbd2_log_end (&j->feat) - s.lfirst;
  if (pos < s.lfirst || pos - s.lfirst >= s.loglen)
    return -EINVAL;
  s.tags_cap = jbd2_max_tags (&j->feat);
  s.blk = malloc (fs->block_size);
  s.tags = calloc (s.tags_cap, sizeof *s.tags);
  r = s.blk && s.tags ? 0 : -ENOMEM;
  while (r == 0 && (r = scan_walk (&s, pos, done, seq, &len)) == 1
         && (r = scan_feed (&s, pos, len, seq)) == 0)
    {
      pos = scan_pos (&s, pos, len);
      done += len;
      seq++;
    }
  free (s.blk);
  free (s.tags);
  if (r == 0)
    log_debug ("journal at offset %" PRIu64 ": %" PRIu32 " committed "
               "transactions from s_start %" PRIu32 " followed",
               fs->start, seq - j->feat.sequence, j->feat.start);
  return r;
}

/* Why a scan left doubt, for the notice. */
static const char *
doubt (int r)
{
  switch (r)
    {
    case -EBADMSG:
      return "a block or transaction it does not understand";
    case -E2BIG:
      return "more blocks than the log holds";
    case -EINVAL:
      return "s_start or a log block outside the journal";
    default:
      return strerror (-r);
    }
}

/* Start again from the superblock, knowing nothing (after a scan that
 * left doubt).
 */
static int
restart (struct jlog *j, uint64_t journal_blocks)
{
  jfollow_free (j->follow);
  j->follow = NULL;
  jlog_forget (j);
  return jfollow_new (&j->feat, journal_blocks, &j->follow);
}

int
jlog_new (const struct ext4_fs *fs, layout_read_fn read, void *opaque,
          struct jlog **out)
{
  const bool fc = fs->feature_compat & EXT4_FEATURE_COMPAT_FAST_COMMIT;
  struct jlog *j;
  int r;

  *out = NULL;
  if (!fs->has_journal || fs->journal_external || !fs->jsb_valid
      || fs->n_journal == 0 || fs->jsb.blocksize != fs->block_size)
    return 0;
  j = calloc (1, sizeof *j);
  if (!j)
    return -ENOMEM;
  if (jbd2_features_from_sb (&fs->jsb, fc, &j->feat) < 0
      || j->feat.async_commit)
    {
      free (j);
      return 0;
    }
  r = jfollow_new (&j->feat, fs->journal_blocks, &j->follow);
  if (r < 0)
    {
      free (j);
      return r == -EINVAL ? 0 : r;
    }
  j->known = fs->jsb.start == 0;
  if (!j->known && read)
    {
      r = scan_log (j, fs, read, opaque);
      j->known = r == 0;
      if (r < 0 && r != -ENOMEM)
        {
          log_notice ("journal at offset %" PRIu64 ": the log to "
                      "recover cannot be followed (%s): no absorption "
                      "until it is empty",
                      fs->start, doubt (r));
          r = restart (j, fs->journal_blocks);
        }
    }
  if (r < 0)
    {
      jlog_free (j);
      return r;
    }
  *out = j;
  return 0;
}

static void
tx_free (struct jlog_tx *t)
{
  free (t->targets);
  free (t->lblks);
  free (t->escaped);
}

/* Free the transactions v[from..] and keep v[..from). */
static void
truncate_txs (struct tx_vec *v, size_t from)
{
  for (size_t i = from; i < v->n; i++)
    tx_free (&v->v[i]);
  v->n = from;
}

static size_t
count_copies (const struct tx_vec *v)
{
  size_t n = 0;

  for (size_t i = 0; i < v->n; i++)
    n += v->v[i].n;
  return n;
}

/* The live log can hold no more logged copies than the log has blocks,
 * unless tails never become durable (a filesystem mounted barrier=0
 * sends neither FUA nor FLUSH): then the engine can no longer tell
 * which transactions recovery could replay.  It forgets them, which
 * stops absorption until the log is seen empty, and keeps memory
 * bounded by the journal's size.
 */
static void
bound_live (struct jlog *j)
{
  j->live_copies = count_copies (&j->live);
  if (j->live_copies > jbd2_log_end (&j->feat) - j->feat.first)
    jlog_forget (j);
}

void
jlog_free (struct jlog *j)
{
  if (!j)
    return;
  truncate_txs (&j->live, 0);
  truncate_txs (&j->absorbed, 0);
  tx_vec_reset (&j->live);
  tx_vec_reset (&j->absorbed);
  jfollow_free (j->follow);
  free (j);
}

bool
jlog_known (const struct jlog *j)
{
  return j->known;
}

int
jlog_write (struct jlog *j, uint64_t lblk, const void *blk, size_t len,
            struct jevent *ev, size_t nev)
{
  return jfollow_write (j->follow, lblk, blk, len, ev, nev);
}

int
jlog_lookup (const struct jlog *j, uint64_t lblk, struct jslot *out)
{
  return jfollow_lookup (j->follow, lblk, out);
}

bool
jlog_in_open_tx (const struct jlog *j, uint64_t lblk)
{
  struct jslot slot;

  if (jfollow_lookup (j->follow, lblk, &slot) < 0)
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

bool
jlog_is_superblock (const struct jlog *j, uint64_t lblk)
{
  return lblk < j->feat.first;
}

int
jlog_superblock (struct jlog *j, const void *sb, size_t len,
                 bool fs_fast_commit, struct jevent *ev, size_t nev,
                 uint32_t *sequence, uint32_t *start)
{
  struct jfeatures nf = { 0 };
  int n;

  if (jbd2_features_from_raw (sb, len, fs_fast_commit, &nf) < 0
      || nf.async_commit)
    return -EINVAL;
  n = jfollow_reset (j->follow, &nf, ev, nev);
  if (n < 0)
    return n;
  j->feat = nf;
  *sequence = nf.sequence;
  *start = nf.start;
  return n;
}

int
jlog_add (struct jlog *j, const struct jevent *ev, bool absorbed)
{
  struct jlog_tx t = { .seq = ev->seq, .n = ev->nblocks };
  int r;

  t.targets = malloc ((t.n ? t.n : 1) * sizeof *t.targets);
  t.lblks = malloc ((t.n ? t.n : 1) * sizeof *t.lblks);
  t.escaped = calloc (t.n ? t.n : 1, sizeof *t.escaped);
  if (!t.targets || !t.lblks || !t.escaped)
    {
      tx_free (&t);
      return -ENOMEM;
    }
  for (size_t i = 0; i < t.n; i++)
    {
      struct jslot s;

      t.targets[i] = ev->targets[i];
      t.lblks[i] = ev->lblks[i];
      if (jfollow_lookup (j->follow, ev->lblks[i], &s) == 0)
        t.escaped[i] = s.escaped;
    }
  r = tx_vec_append (absorbed ? &j->absorbed : &j->live, t);
  if (r < 0)
    tx_free (&t);
  else if (!absorbed)
    bound_live (j);
  return r;
}

int
jlog_absorbed_to_live (struct jlog *j)
{
  for (size_t i = 0; i < j->absorbed.n; i++)
    {
      int r = tx_vec_append (&j->live, j->absorbed.v[i]);

      if (r < 0)
        {
          /* Cannot say which copies recovery may replay any more. */
          truncate_txs (&j->absorbed, i);
          j->absorbed.n = 0;
          jlog_forget (j);
          return r;
        }
    }
  j->absorbed.n = 0;
  bound_live (j);
  return 0;
}

/* Keep the transactions of v at or after sequence. */
static void
prune (struct tx_vec *v, uint32_t sequence)
{
  size_t k = 0;

  for (size_t i = 0; i < v->n; i++)
    {
      /* Sequence numbers wrap: compare as the kernel's tid_gt does. */
      if ((int32_t)(v->v[i].seq - sequence) < 0)
        tx_free (&v->v[i]);
      else
        v->v[k++] = v->v[i];
    }
  v->n = k;
}

void
jlog_tail (struct jlog *j, uint32_t sequence, uint32_t start)
{
  /* With s_start = 0 jbd2 records the next transaction's sequence, so
   * everything before it is behind the tail too.
   */
  j->tail_set = true;
  j->tail_seq = sequence;
  prune (&j->absorbed, sequence);
  if (start == 0)
    {
      /* The log is empty: nothing can be replayed. */
      truncate_txs (&j->live, 0);
      j->live_copies = 0;
      j->known = true;
      return;
    }
  prune (&j->live, sequence);
  j->live_copies = count_copies (&j->live);
}

void
jlog_tail_written (struct jlog *j, uint32_t sequence, uint32_t start,
                   bool durable)
{
  if (durable)
    {
      j->pend = false;
      jlog_tail (j, sequence, start);
      return;
    }
  j->pend = true;
  j->pend_seq = sequence;
  j->pend_start = start;
}

bool
jlog_flushed (struct jlog *j)
{
  if (!j->pend)
    return false;
  j->pend = false;
  jlog_tail (j, j->pend_seq, j->pend_start);
  return true;
}

bool
jlog_behind_tail (const struct jlog *j, uint32_t seq)
{
  return j->tail_set && (int32_t)(seq - j->tail_seq) < 0;
}

void
jlog_forget (struct jlog *j)
{
  truncate_txs (&j->live, 0);
  j->live_copies = 0;
  j->known = false;
}

int
jlog_live_copies (const struct jlog *j, uint64_t target, jlog_copy_fn fn,
                  void *opaque)
{
  for (size_t i = 0; i < j->live.n; i++)
    {
      const struct jlog_tx *t = &j->live.v[i];

      for (size_t k = 0; k < t->n; k++)
        if (t->targets[k] == target)
          {
            int r = fn (opaque, t->lblks[k], t->escaped[k]);

            if (r)
              return r;
          }
    }
  return 0;
}
