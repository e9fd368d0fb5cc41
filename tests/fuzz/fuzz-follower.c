/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz-follower.c --- libFuzzer target for the jbd2 log follower
 * (journal.h): a jfollow fed a sequence of journal block writes, with
 * lookups and superblock resets in between.
 *
 * Input: FUZZ_FEATURES_BYTES bytes of features (fuzz.h; byte 15 gives
 * journal_blocks = maxlen + b % 16), then operations, each one byte
 * whose low 3 bits say what follows:
 *
 *   0-4  write: lblk (le16, taken modulo journal_blocks + 2, so that
 *        some are beyond the journal), n (le16), n bytes: the start of
 *        the block, zero-filled to the block size.  Op bit 3: fix the
 *        v2/v3 checksum of a descriptor, revoke or commit block (so that
 *        the fuzzer need not find crc32c); bit 4: write only the n bytes
 *        given (1..block size), a short block.
 *   5    look up 16 blocks from lblk (le16, as for a write).
 *   6    reset with new features (FUZZ_FEATURES_BYTES bytes follow).
 *   7    reset with the same features but a new sequence and start (le32
 *        each): a tail update when start != 0.
 *
 * Checked, from journal.h: a call gives at most JFOLLOW_MAX_EVENTS
 * events and only -EINVAL for a block beyond the journal; lookups never
 * fail within the journal and say what a block written is; events name
 * journal blocks inside the journal, and a complete commit is every
 * block from its start to its commit block, in log order; a tail update
 * keeps the state, a reset to s_start = 0 forgets it.  Everything is
 * freed: LeakSanitizer checks it.
 *
 * Looking up every block costs hundreds of calls: the whole journal
 * is swept at the start, at the end and around the first SWEEPS
 * resets only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>

#include "fuzz.h"
#include "journal.h"

/* FUZZ_TRACE=1 in the environment: print each call and its events
 * (to see what an input does; run the target with the input as its
 * argument).
 */
static bool trace;

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  fuzz_quiet ();
  trace = getenv ("FUZZ_TRACE") != NULL;
  return 0;
}

static void
trace_events (const char *what, uint64_t lblk, int r, const struct jevent *ev)
{
  static const char *const names[]
      = { "none", "committed", "aborted", "confused" };

  fprintf (stderr, "%s %" PRIu64 ": %d\n", what, lblk, r);
  for (int i = 0; i < r; i++)
    fprintf (stderr,
             "  %s seq %" PRIu32 " lblk %" PRIu64 " blocks %zu pos %zu"
             "%s%s [%" PRIu64 ", %" PRIu64 ")\n",
             names[ev[i].type], ev[i].seq, ev[i].lblk, ev[i].nblocks,
             ev[i].npos, ev[i].has_revoke ? " revoke" : "",
             ev[i].has_unknown ? " unknown" : "", ev[i].first_lblk,
             ev[i].end_lblk);
}

#define SWEEPS 8

/* The input still to be read. */
struct in
{
  const uint8_t *p;
  size_t n;
};

static bool
take (struct in *in, size_t n, const uint8_t **out)
{
  if (in->n < n)
    return false;
  *out = in->p;
  in->p += n;
  in->n -= n;
  return true;
}

static uint32_t
get_be32 (const unsigned char *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8
         | p[3];
}

static void
put_be32 (unsigned char *p, uint32_t v)
{
  p[0] = v >> 24;
  p[1] = v >> 16;
  p[2] = v >> 8;
  p[3] = v;
}

/* Set the checksum a v2/v3 journal writes in block b (the block size),
 * as jbd2.c verifies it: crc32c from the UUID seed over the block with
 * the checksum field zeroed.
 */
static void
fix_csum (const struct jfeatures *f, unsigned char *b)
{
  size_t bs = f->blocksize, at;

  if (!(f->csum_v2 || f->csum_v3) || !f->has_uuid
      || get_be32 (b) != JBD2_MAGIC_NUMBER)
    return;
  switch (get_be32 (b + 4))
    {
    case JBD2_DESCRIPTOR_BLOCK:
    case JBD2_REVOKE_BLOCK:
      at = bs - 4;
      break;
    case JBD2_COMMIT_BLOCK:
      at = 0x10;
      break;
    default:
      return;
    }
  put_be32 (b + at, 0);
  put_be32 (b + at, ext2fs_crc32c_le (f->csum_seed, b, bs));
}

/* The fuzzer's own view of the log. */
struct geo
{
  uint64_t first, end, maxlen, journal_blocks;
};

static struct geo
geo_of (const struct jfeatures *f, uint64_t journal_blocks)
{
  return (struct geo){ .first = f->first,
                       .end = jbd2_log_end (f),
                       .maxlen = f->maxlen,
                       .journal_blocks = journal_blocks };
}

static uint64_t
next_pos (const struct geo *g, uint64_t x)
{
  return x + 1 == g->end ? g->first : x + 1;
}

/* The kind a lookup must give outside the log, or JS_UNSEEN inside. */
static enum jslot_kind
region_kind (const struct geo *g, uint64_t lblk)
{
  if (lblk >= g->maxlen)
    return JS_OUTSIDE;
  if (lblk < g->first)
    return JS_SUPERBLOCK;
  if (lblk >= g->end)
    return JS_FAST_COMMIT;
  return JS_UNSEEN;
}

static void
check_lookup (const struct jfollow *j, const struct geo *g, uint64_t lblk,
              struct jslot *s)
{
  int r = jfollow_lookup (j, lblk, s);

  if (lblk >= g->journal_blocks)
    {
      FUZZ_CHECK (r == -EINVAL);
      return;
    }
  FUZZ_CHECK (r == 0);
  FUZZ_CHECK (s->kind >= JS_UNSEEN && s->kind <= JS_UNKNOWN);
  FUZZ_CHECK (s->state >= JTX_OPEN && s->state <= JTX_ABORTED);
  if (region_kind (g, lblk) != JS_UNSEEN)
    FUZZ_CHECK (s->kind == region_kind (g, lblk));
  else
    FUZZ_CHECK (s->kind != JS_OUTSIDE && s->kind != JS_SUPERBLOCK
                && s->kind != JS_FAST_COMMIT);
}

static bool
slot_eq (const struct jslot *a, const struct jslot *b)
{
  return a->kind == b->kind && a->seq == b->seq && a->target == b->target
         && a->written == b->written && a->escaped == b->escaped
         && a->state == b->state;
}

/* Look up every block (and two beyond); if snap, fill it (or, with
 * compare, check it is unchanged).
 */
static void
sweep (const struct jfollow *j, const struct geo *g, struct jslot *snap,
       bool compare, bool all_unseen)
{
  for (uint64_t l = 0; l < g->journal_blocks + 2; l++)
    {
      struct jslot s;

      check_lookup (j, g, l, &s);
      if (l >= g->journal_blocks)
        continue;
      if (all_unseen && region_kind (g, l) == JS_UNSEEN)
        FUZZ_CHECK (s.kind == JS_UNSEEN);
      if (snap && compare)
        FUZZ_CHECK (slot_eq (&snap[l], &s));
      else if (snap)
        snap[l] = s;
    }
}

/* Where the event arrays are read, so that ASan checks their length. */
static volatile uint64_t touched;

static void
check_events (const struct jfollow *j, const struct geo *g, int n,
              const struct jevent *ev, bool in_log)
{
  FUZZ_CHECK (n >= 0 && n <= JFOLLOW_MAX_EVENTS);
  for (int i = 0; i < n; i++)
    {
      const struct jevent *e = &ev[i];

      FUZZ_CHECK (e->type == JE_TX_COMMITTED || e->type == JE_TX_ABORTED
                  || e->type == JE_CONFUSED);
      if (e->type == JE_CONFUSED)
        {
          FUZZ_CHECK (e->lblk < g->journal_blocks);
          continue;
        }
      FUZZ_CHECK (e->nblocks <= e->npos);
      for (size_t k = 0; k < e->npos; k++)
        {
          FUZZ_CHECK (e->pos[k] < g->journal_blocks);
          if (in_log)
            FUZZ_CHECK (region_kind (g, e->pos[k]) == JS_UNSEEN);
        }
      for (size_t k = 0; k < e->nblocks; k++)
        {
          bool found = false;

          for (size_t m = 0; m < e->npos && !found; m++)
            found = e->pos[m] == e->lblks[k];
          FUZZ_CHECK (found);
          touched += e->targets[k];
        }
      if (e->type != JE_TX_COMMITTED || e->has_unknown)
        continue;
      /* A complete commit: its start to its commit block, contiguous in
       * log order, and what the follower now holds there.
       */
      FUZZ_CHECK (in_log);
      FUZZ_CHECK (e->npos >= 1);
      FUZZ_CHECK (e->first_lblk == e->pos[0]);
      FUZZ_CHECK (e->end_lblk == next_pos (g, e->pos[e->npos - 1]));
      for (size_t k = 0, d = 0; k < e->npos; k++)
        {
          struct jslot s;

          if (k + 1 < e->npos)
            FUZZ_CHECK (e->pos[k + 1] == next_pos (g, e->pos[k]));
          check_lookup (j, g, e->pos[k], &s);
          FUZZ_CHECK (s.seq == e->seq && s.state == JTX_COMMITTED);
          FUZZ_CHECK (k + 1 < e->npos
                          ? s.kind == JS_DESCRIPTOR || s.kind == JS_DATA
                                || s.kind == JS_REVOKE
                          : s.kind == JS_COMMIT);
          if (s.kind == JS_DATA)
            {
              FUZZ_CHECK (s.written);
              FUZZ_CHECK (d < e->nblocks && e->lblks[d] == e->pos[k]
                          && e->targets[d] == s.target);
              d++;
            }
          if (k + 1 == e->npos)
            FUZZ_CHECK (d == e->nblocks);
        }
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  struct in in = { data, size };
  const uint8_t *p;
  struct jfeatures cur;
  struct jfollow *j = NULL;
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  struct jslot *snap = NULL;
  unsigned char *blk = NULL;
  uint64_t journal_blocks;
  unsigned sweeps = 0;
  struct geo g;
  int r;

  if (!take (&in, FUZZ_FEATURES_BYTES, &p))
    return 0;
  fuzz_features (p, &cur);
  FUZZ_CHECK (jbd2_features_check (&cur) == 0);
  journal_blocks = cur.maxlen + p[15] % 16;
  g = geo_of (&cur, journal_blocks);
  /* maxlen beyond the journal is refused. */
  FUZZ_CHECK (jfollow_new (&cur, cur.maxlen - 1, &j) == -EINVAL);
  r = jfollow_new (&cur, journal_blocks, &j);
  FUZZ_CHECK (r == 0 && j != NULL);
  snap = calloc (journal_blocks, sizeof *snap);
  blk = malloc (8192); /* the largest fuzz_features block */
  FUZZ_CHECK (snap && blk);
  /* Before any write, the log is unseen. */
  sweep (j, &g, NULL, false, true);

  while (take (&in, 1, &p))
    {
      unsigned op = p[0];

      switch (op & 7)
        {
        case 0:
        case 1:
        case 2:
        case 3:
        case 4:
          {
            uint64_t lblk;
            size_t n, len, bs = cur.blocksize;
            unsigned char *w;
            struct jslot s;

            if (!take (&in, 4, &p))
              goto out;
            lblk = fuzz_le16 (p) % (journal_blocks + 2);
            n = fuzz_le16 (p + 2);
            if (n > in.n)
              n = in.n;
            take (&in, n, &p);
            memset (blk, 0, bs);
            memcpy (blk, p, n < bs ? n : bs);
            if (op & 8)
              fix_csum (&cur, blk);
            len = bs;
            if (op & 16)
              len = n == 0 ? 1 : n < bs ? n : bs;
            /* An exact heap copy: ASan sees a read past len. */
            w = malloc (len);
            FUZZ_CHECK (w != NULL);
            memcpy (w, blk, len);
            r = jfollow_write (j, lblk, w, len, ev, JFOLLOW_MAX_EVENTS);
            if (trace)
              trace_events ("write", lblk, r, ev);
            if (lblk >= journal_blocks)
              FUZZ_CHECK (r == -EINVAL);
            else
              FUZZ_CHECK (r >= 0 || r == -ENOMEM);
            if (r < 0)
              {
                free (w);
                break;
              }
            check_events (j, &g, r, ev, true);
            /* The block written is what the write was understood as. */
            check_lookup (j, &g, lblk, &s);
            if (region_kind (&g, lblk) == JS_UNSEEN)
              {
                FUZZ_CHECK (s.kind != JS_UNSEEN);
                if (s.kind == JS_DATA)
                  FUZZ_CHECK (s.written);
              }
            /* Fewer events than room: the call must not write past
             * what it was told it has.
             */
            FUZZ_CHECK (
                jfollow_write (j, lblk, w, len, ev, JFOLLOW_MAX_EVENTS - 1)
                == -EINVAL);
            FUZZ_CHECK (jfollow_write (j, lblk, w, 0, ev, JFOLLOW_MAX_EVENTS)
                        == -EINVAL);
            free (w);
          }
          break;
        case 5:
          {
            uint64_t lblk;
            struct jslot s;

            if (!take (&in, 2, &p))
              goto out;
            lblk = fuzz_le16 (p) % (journal_blocks + 2);
            for (uint64_t l = lblk; l < lblk + 16 && l < journal_blocks + 2;
                 l++)
              check_lookup (j, &g, l, &s);
          }
          break;
        case 6:
        case 7:
          {
            struct jfeatures nf = cur;
            bool tail, check;

            if ((op & 7) == 6)
              {
                if (!take (&in, FUZZ_FEATURES_BYTES, &p))
                  goto out;
                fuzz_features (p, &nf);
              }
            else
              {
                if (!take (&in, 8, &p))
                  goto out;
                nf.sequence = fuzz_le32 (p);
                nf.start = fuzz_le32 (p + 4);
              }
            tail = (op & 7) == 7 && nf.start != 0;
            check = sweeps < SWEEPS;
            sweeps += check;
            if (tail && check)
              sweep (j, &g, snap, false, false);
            r = jfollow_reset (j, &nf, ev, JFOLLOW_MAX_EVENTS);
            if (trace)
              trace_events ("reset, start", nf.start, r, ev);
            if (nf.maxlen > journal_blocks)
              {
                /* Refused, nothing changed. */
                FUZZ_CHECK (r == -EINVAL);
                break;
              }
            FUZZ_CHECK (r >= 0 || r == -ENOMEM);
            if (r < 0)
              break;
            check_events (j, &g, r, ev, false);
            cur = nf;
            g = geo_of (&cur, journal_blocks);
            /* A tail update: no event, the state is kept. */
            if (tail)
              FUZZ_CHECK (r == 0);
            if (tail && check)
              sweep (j, &g, snap, true, false);
            else if (nf.start == 0 && check)
              sweep (j, &g, NULL, false, true);
          }
          break;
        }
    }
out:
  sweep (j, &g, NULL, false, false);
  jfollow_free (j);
  free (snap);
  free (blk);
  return 0;
}
