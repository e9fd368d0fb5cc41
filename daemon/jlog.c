/* jlog.c --- the live and absorbed transactions of one journal. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jlog.h"

int
jlog_new (const struct ext4_fs *fs, struct jlog **out)
{
  struct jlog *j;
  int r;

  *out = NULL;
  if (!fs->has_journal || fs->journal_external || !fs->jsb_valid
      || fs->n_journal == 0 || fs->jsb.blocksize != fs->block_size)
    return 0;
  j = calloc (1, sizeof *j);
  if (!j)
    return -ENOMEM;
  if (jbd2_features_from_sb (&fs->jsb, &j->feat) < 0 || j->feat.async_commit)
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
  j->enabled = true;
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

static void
clear (struct jlog_tx *v, size_t *n)
{
  for (size_t i = 0; i < *n; i++)
    tx_free (&v[i]);
  *n = 0;
}

void
jlog_free (struct jlog *j)
{
  if (!j)
    return;
  clear (j->live, &j->nlive);
  clear (j->absorbed, &j->nabsorbed);
  free (j->live);
  free (j->absorbed);
  jfollow_free (j->follow);
  free (j);
}

static int
push (struct jlog_tx **v, size_t *n, size_t *cap, struct jlog_tx *t)
{
  if (*n == *cap)
    {
      size_t c = *cap ? *cap * 2 : 16;
      struct jlog_tx *nv = realloc (*v, c * sizeof *nv);

      if (!nv)
        return -ENOMEM;
      *v = nv;
      *cap = c;
    }
  (*v)[(*n)++] = *t;
  return 0;
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
  r = absorbed ? push (&j->absorbed, &j->nabsorbed, &j->absorbed_cap, &t)
               : push (&j->live, &j->nlive, &j->live_cap, &t);
  if (r < 0)
    tx_free (&t);
  return r;
}

int
jlog_absorbed_to_live (struct jlog *j)
{
  for (size_t i = 0; i < j->nabsorbed; i++)
    {
      int r = push (&j->live, &j->nlive, &j->live_cap, &j->absorbed[i]);

      if (r < 0)
        {
          /* Cannot say which copies recovery may replay any more. */
          clear (j->absorbed + i, &(size_t){ j->nabsorbed - i });
          j->nabsorbed = 0;
          j->known = false;
          return r;
        }
    }
  j->nabsorbed = 0;
  return 0;
}

/* Keep the transactions of v at or after sequence. */
static void
prune (struct jlog_tx *v, size_t *n, uint32_t sequence)
{
  size_t k = 0;

  for (size_t i = 0; i < *n; i++)
    {
      /* Sequence numbers wrap: compare as the kernel's tid_gt does. */
      if ((int32_t)(v[i].seq - sequence) < 0)
        tx_free (&v[i]);
      else
        v[k++] = v[i];
    }
  *n = k;
}

void
jlog_tail (struct jlog *j, uint32_t sequence, uint32_t start)
{
  /* With s_start = 0 jbd2 records the next transaction's sequence, so
   * everything before it is behind the tail too.
   */
  j->tail_set = true;
  j->tail_seq = sequence;
  prune (j->absorbed, &j->nabsorbed, sequence);
  if (start == 0)
    {
      /* The log is empty: nothing can be replayed. */
      clear (j->live, &j->nlive);
      j->known = true;
      return;
    }
  prune (j->live, &j->nlive, sequence);
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
  clear (j->live, &j->nlive);
  j->known = false;
}

int
jlog_live_copies (const struct jlog *j, uint64_t target, jlog_copy_fn fn,
                  void *opaque)
{
  for (size_t i = 0; i < j->nlive; i++)
    for (size_t k = 0; k < j->live[i].n; k++)
      if (j->live[i].targets[k] == target)
        {
          int r = fn (opaque, j->live[i].lblks[k], j->live[i].escaped[k]);

          if (r)
            return r;
        }
  return 0;
}
