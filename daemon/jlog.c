/* jlog.c --- the live and absorbed transactions of one journal, and the
 * follower that finds them (see jlog.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <ext2fs/ext2_fs.h>

#include "jlog.h"
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

int
jlog_new (const struct ext4_fs *fs, struct jlog **out)
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
