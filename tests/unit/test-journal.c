/* SPDX-License-Identifier: BSD-3-Clause */
/* test-journal.c --- the jbd2 log follower checked against journals that
 * debugfs writes at test time (feature matrix, arrival orders, wrap-around,
 * fast commit), against debugfs logdump, and against corrupt input.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "jlog.h"
#include "journal.h"
#include "layout.h"
#include "testjournal.h"

/* ---- recorded events -------------------------------------------------- */

struct rev
{
  enum jevent_type type;
  uint32_t seq;
  uint64_t lblk;
  size_t n, npos;
  uint64_t *targets, *lblks, *pos;
  bool has_revoke, has_unknown;
  uint64_t first_lblk, end_lblk;
};

struct evlog
{
  struct rev ev[256];
  size_t n;
  size_t nconfused;
};

static uint64_t *
dup64 (const uint64_t *v, size_t n)
{
  uint64_t *r = malloc (n ? n * sizeof *r : 1);

  cr_assert_not_null (r);
  if (n)
    memcpy (r, v, n * sizeof *r);
  return r;
}

static void
record (struct evlog *L, const struct jevent *ev, int n)
{
  for (int i = 0; i < n; i++)
    {
      struct rev *r;

      cr_assert_neq (ev[i].type, JE_NONE);
      if (ev[i].type == JE_CONFUSED)
        L->nconfused++;
      cr_assert_lt (L->n, 256);
      r = &L->ev[L->n++];
      r->type = ev[i].type;
      r->seq = ev[i].seq;
      r->lblk = ev[i].lblk;
      r->n = ev[i].nblocks;
      r->npos = ev[i].npos;
      r->targets = dup64 (ev[i].targets, ev[i].nblocks);
      r->lblks = dup64 (ev[i].lblks, ev[i].nblocks);
      r->pos = dup64 (ev[i].pos, ev[i].npos);
      r->has_revoke = ev[i].has_revoke;
      r->has_unknown = ev[i].has_unknown;
      r->first_lblk = ev[i].first_lblk;
      r->end_lblk = ev[i].end_lblk;
    }
}

static void
evlog_free (struct evlog *L)
{
  for (size_t i = 0; i < L->n; i++)
    {
      free (L->ev[i].targets);
      free (L->ev[i].lblks);
      free (L->ev[i].pos);
    }
  L->n = 0;
  L->nconfused = 0;
}

static const struct rev *
find_ev (const struct evlog *L, enum jevent_type type, uint32_t seq)
{
  for (size_t i = 0; i < L->n; i++)
    if (L->ev[i].type == type && L->ev[i].seq == seq)
      return &L->ev[i];
  return NULL;
}

static size_t
count_ev (const struct evlog *L, enum jevent_type type)
{
  size_t n = 0;

  for (size_t i = 0; i < L->n; i++)
    n += L->ev[i].type == type;
  return n;
}

/* Feed one block to the follower and record its events. */
static int
feed_buf (struct jfollow *jf, uint64_t lblk, const void *buf, size_t len,
          struct evlog *L)
{
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  int n = jfollow_write (jf, lblk, buf, len, ev, JFOLLOW_MAX_EVENTS);

  cr_assert_geq (n, 0, "jfollow_write %" PRIu64 ": %s", lblk, strerror (-n));
  cr_assert_leq (n, JFOLLOW_MAX_EVENTS);
  record (L, ev, n);
  return n;
}

/* Feed journal block src of the image as journal block dst. */
static void
feed (struct jfollow *jf, struct jimg *im, uint64_t src, uint64_t dst,
      struct evlog *L)
{
  unsigned char *b = malloc (im->bs);

  cr_assert_not_null (b);
  read_jblock (im, src, b);
  feed_buf (jf, dst, b, im->bs, L);
  free (b);
}

/* Rotation of log positions by shift (0: identity). */
static uint64_t
rot (const struct jfeatures *f, uint64_t x, uint64_t shift)
{
  uint64_t len = jbd2_log_end (f) - f->first;

  return f->first + (x - f->first + shift) % len;
}

/* Compare the committed events with logdump: same transactions, targets
 * and positions (rotated by shift), revoke flags; nothing unknown.
 */
static void
check_against_logdump (const struct jimg *im, const struct ldump *d,
                       const struct evlog *L, uint64_t shift)
{
  size_t ncommitted = 0;

  cr_assert_eq (L->nconfused, 0, "unexpected JE_CONFUSED");
  for (size_t i = 0; i < d->ntx; i++)
    {
      const struct ltx *t = &d->tx[i];
      const struct rev *r = find_ev (L, JE_TX_COMMITTED, t->seq);

      if (!t->committed)
        {
          cr_assert_null (r, "seq %u has no commit but was reported", t->seq);
          continue;
        }
      ncommitted++;
      cr_assert_not_null (r, "no JE_TX_COMMITTED for seq %u", t->seq);
      cr_assert (!r->has_unknown, "seq %u has_unknown", t->seq);
      cr_assert_eq (r->has_revoke, t->nrevoke > 0, "seq %u has_revoke", t->seq);
      cr_assert_eq (r->n, t->n, "seq %u: %zu blocks, logdump %zu", t->seq, r->n,
                    t->n);
      for (size_t k = 0; k < t->n; k++)
        {
          cr_assert_eq (r->targets[k], t->targets[k],
                        "seq %u tag %zu: target %" PRIu64 " vs %" PRIu64,
                        t->seq, k, r->targets[k], t->targets[k]);
          cr_assert_eq (r->lblks[k], rot (&im->f, t->lblks[k], shift),
                        "seq %u tag %zu: lblk", t->seq, k);
        }
      cr_assert_eq (r->first_lblk, rot (&im->f, t->first_lblk, shift));
      cr_assert_eq (r->end_lblk, rot (&im->f, t->commit_lblk + 1, shift));
      cr_assert_eq (r->npos, t->commit_lblk - t->first_lblk + 1);
      for (size_t k = 0; k < r->npos; k++)
        cr_assert_eq (r->pos[k], rot (&im->f, t->first_lblk + k, shift));
    }
  cr_assert_eq (count_ev (L, JE_TX_COMMITTED), ncommitted);
  cr_assert_eq (count_ev (L, JE_TX_ABORTED), 0);
}

/* ---- the standard transactions through the follower ------------------- */

enum order
{
  IN_ORDER,
  REVERSED,     /* per transaction: every block backwards, commit last */
  SHUFFLED,     /* per transaction: random order, commit last */
  COMMIT_FIRST, /* async_commit: the commit, then the rest shuffled */
};

static void
shuffle (uint64_t *v, size_t n, unsigned *seed)
{
  for (size_t i = n; i > 1; i--)
    {
      size_t k = rand_r (seed) % i;
      uint64_t t = v[i - 1];

      v[i - 1] = v[k];
      v[k] = t;
    }
}

/* Feed the whole log of im (from first to logdump's end) in the given
 * order, positions rotated by shift.
 */
static void
feed_log (struct jfollow *jf, struct jimg *im, const struct ldump *d,
          enum order order, uint64_t shift, struct evlog *L)
{
  uint64_t first = im->f.first;
  unsigned seed = 42;

  if (order == IN_ORDER)
    {
      for (uint64_t x = first; x < d->end_block; x++)
        feed (jf, im, x, rot (&im->f, x, shift), L);
      return;
    }
  for (size_t i = 0; i < d->ntx; i++)
    {
      const struct ltx *t = &d->tx[i];
      uint64_t last = t->committed     ? t->commit_lblk
                      : i + 1 < d->ntx ? d->tx[i + 1].first_lblk
                                       : d->end_block;
      size_t n = last - t->first_lblk;
      uint64_t *v = malloc ((n + 1) * sizeof *v);

      cr_assert_not_null (v);
      for (size_t k = 0; k < n; k++)
        v[k] = order == REVERSED ? last - 1 - k : t->first_lblk + k;
      if (order == SHUFFLED || order == COMMIT_FIRST)
        shuffle (v, n, &seed);
      if (order == COMMIT_FIRST && t->committed)
        feed (jf, im, last, rot (&im->f, last, shift), L);
      for (size_t k = 0; k < n; k++)
        feed (jf, im, v[k], rot (&im->f, v[k], shift), L);
      if (order != COMMIT_FIRST && t->committed)
        feed (jf, im, last, rot (&im->f, last, shift), L);
      free (v);
    }
}

static void
run_scenario (size_t i, enum order order, uint64_t shift)
{
  struct jimg im;
  struct ldump *d;
  struct jfollow *jf;
  struct jfeatures f;
  static struct evlog L;
  int r;

  need_tools ();
  make_scenario (&im, i);
  d = logdump (&im);
  cr_assert_eq (d->ntx, 4, "logdump saw %zu transactions", d->ntx);
  f = im.f;
  if (order == COMMIT_FIRST)
    f.async_commit = true;
  /* The log tail (where the first transaction starts) moves too. */
  cr_assert_eq (f.start, d->tx[0].first_lblk);
  f.start = rot (&f, f.start, shift);
  r = jfollow_new (&f, im.fs->journal_blocks, &jf);
  cr_assert_eq (r, 0);
  feed_log (jf, &im, d, order, shift, &L);
  check_against_logdump (&im, d, &L, shift);

  /* What each position is now. */
  for (size_t k = 0; k < d->ntx; k++)
    {
      const struct ltx *t = &d->tx[k];
      struct jslot s;

      for (size_t m = 0; m < t->n; m++)
        {
          cr_assert_eq (jfollow_lookup (jf, rot (&f, t->lblks[m], shift), &s),
                        0);
          cr_assert_eq (s.kind, JS_DATA);
          cr_assert_eq (s.seq, t->seq);
          cr_assert_eq (s.target, t->targets[m]);
          cr_assert (s.written);
          cr_assert_eq (s.state, t->committed ? JTX_COMMITTED : JTX_OPEN);
        }
      cr_assert_eq (jfollow_lookup (jf, rot (&f, t->first_lblk, shift), &s), 0);
      cr_assert (s.kind == JS_DESCRIPTOR || s.kind == JS_REVOKE);
      if (t->committed)
        {
          cr_assert_eq (
              jfollow_lookup (jf, rot (&f, t->commit_lblk, shift), &s), 0);
          cr_assert_eq (s.kind, JS_COMMIT);
          cr_assert_eq (s.seq, t->seq);
        }
    }
  {
    struct jslot s;

    cr_assert_eq (jfollow_lookup (jf, 0, &s), 0);
    cr_assert_eq (s.kind, JS_SUPERBLOCK);
    cr_assert_eq (jfollow_lookup (jf, im.fs->journal_blocks, &s), -EINVAL);
  }

  /* The escaped block: zeroed in the log, the magic once unescaped. */
  {
    const struct ltx *a = &d->tx[0];
    unsigned char *b = malloc (im.bs);
    struct jslot s;

    cr_assert_eq (a->n, 3);
    cr_assert_eq (jfollow_lookup (jf, rot (&f, a->lblks[1], shift), &s), 0);
    cr_assert (s.escaped);
    cr_assert_eq (jfollow_lookup (jf, rot (&f, a->lblks[0], shift), &s), 0);
    cr_assert (!s.escaped);
    read_jblock (&im, a->lblks[1], b);
    cr_assert_eq (b[0] | b[1] | b[2] | b[3], 0);
    jbd2_unescape (b);
    cr_assert_eq (b[0], 0xC0);
    cr_assert_eq (b[3], 0x98);
    free (b);
  }
  jfollow_free (jf);
  evlog_free (&L);
  free (d);
  jimg_del (&im);
}

#define SCENARIO_TESTS(i, name)                                                \
  Test (journal, in_order_##name)                                              \
  {                                                                            \
    run_scenario (i, IN_ORDER, 0);                                             \
  }                                                                            \
  Test (journal, reversed_##name)                                              \
  {                                                                            \
    run_scenario (i, REVERSED, 0);                                             \
  }                                                                            \
  Test (journal, shuffled_##name)                                              \
  {                                                                            \
    run_scenario (i, SHUFFLED, 0);                                             \
  }                                                                            \
  Test (journal, async_commit_first_##name)                                    \
  {                                                                            \
    run_scenario (i, COMMIT_FIRST, 0);                                         \
  }

SCENARIO_TESTS (0, plain32)
SCENARIO_TESTS (1, plain64)
SCENARIO_TESTS (2, csum_v1)
SCENARIO_TESTS (3, csum_v2_32)
SCENARIO_TESTS (4, csum_v2_64)
SCENARIO_TESTS (5, csum_v3_32)
SCENARIO_TESTS (6, csum_v3_64)

/* ---- wrap-around ------------------------------------------------------ */

/* The same log moved so that the big transaction straddles the end of
 * the log: positions wrap from end-1 back to first.
 */
static void
wrap_test (size_t i)
{
  struct jimg im;
  struct ldump *d;
  uint64_t len, shift;

  need_tools ();
  make_scenario (&im, i);
  d = logdump (&im);
  len = jbd2_log_end (&im.f) - im.f.first;
  /* Put the middle of transaction C on the last log block. */
  shift = len - (d->tx[2].first_lblk + d->tx[2].n / 2 - im.f.first) - 1;
  free (d);
  jimg_del (&im);
  run_scenario (i, IN_ORDER, shift);
  run_scenario (i, SHUFFLED, shift);
  run_scenario (i, REVERSED, shift);
}

Test (journal, wrap_plain32)
{
  wrap_test (0);
}
Test (journal, wrap_csum_v3_64)
{
  wrap_test (6);
}
Test (journal, wrap_csum_v2_64)
{
  wrap_test (4);
}

/* A 1 MiB journal (the minimum with 1K blocks: 1024 blocks), filled
 * several times over by shifting the same transactions around the log.
 */
Test (journal, wrap_small_journal_many_laps)
{
  struct jimg im;
  struct ldump *d;
  struct jfollow *jf;
  static struct evlog L;
  char script[4096];
  size_t o = 0;
  uint64_t first, end, len, pos;
  uint32_t seq;

  need_tools ();
  jimg_make (&im, "-b 1024 -O metadata_csum,^64bit -J size=1", 16384, NULL);
  jimg_close (&im);
  write_data (im.dir, "a", 1024, 200, 50, 7);
  o += snprintf (script + o, sizeof script - o, "jo -c\njw -b ");
  for (int k = 0; k < 200; k++)
    o += snprintf (script + o, sizeof script - o, "%s%d", k ? "," : "",
                   2000 + k);
  o += snprintf (script + o, sizeof script - o, " %s/a\njc\n", im.dir);
  run_debugfs (&im, script);
  jimg_open (&im);
  cr_assert_eq (im.f.maxlen, 1024);
  d = logdump (&im);
  cr_assert_eq (d->ntx, 1);
  cr_assert (d->tx[0].committed);
  /* The copies get new sequence numbers, so their checksums no longer
   * match: follow without the UUID (checksums not checked).
   */
  im.f.has_uuid = false;
  cr_assert_eq (jfollow_new (&im.f, im.fs->journal_blocks, &jf), 0);
  first = im.f.first;
  end = jbd2_log_end (&im.f);
  len = end - first;
  /* The one transaction, replayed back to back 20 times (about four
   * laps of the log): sequence and descriptor patched for each copy.
   */
  pos = first;
  seq = d->tx[0].seq;
  for (int lap = 0; lap < 20; lap++, seq++)
    {
      size_t ntx = d->tx[0].commit_lblk - d->tx[0].first_lblk + 1;
      unsigned char *b = malloc (im.bs);
      struct jblock blk;
      size_t before = L.n;

      for (size_t k = 0; k < ntx; k++)
        {
          read_jblock (&im, d->tx[0].first_lblk + k, b);
          memset (&blk, 0, sizeof blk);
          if (jbd2_parse_block (&im.f, b, im.bs, &blk) == 0
              && blk.kind != JB_NONE)
            {
              /* New sequence. */
              b[8] = seq >> 24;
              b[9] = seq >> 16;
              b[10] = seq >> 8;
              b[11] = seq;
            }
          feed_buf (jf, (pos - first + k) % len + first, b, im.bs, &L);
        }
      free (b);
      cr_assert_eq (L.n, before + 1, "lap %d: %zu events", lap, L.n - before);
      const struct rev *r = &L.ev[L.n - 1];
      cr_assert_eq (r->type, JE_TX_COMMITTED);
      cr_assert_eq (r->seq, seq);
      cr_assert (!r->has_unknown);
      cr_assert_eq (r->n, 200);
      for (size_t k = 0; k < r->n; k++)
        {
          cr_assert_eq (r->targets[k], 2000 + k);
          cr_assert_eq (
              r->lblks[k],
              (pos - first + (d->tx[0].lblks[k] - d->tx[0].first_lblk)) % len
                  + first);
        }
      cr_assert_eq (r->first_lblk, pos);
      pos = (pos - first + ntx) % len + first;
      cr_assert_eq (r->end_lblk, pos);
      /* The old copy at the overwritten positions is gone. */
      struct jslot s;
      cr_assert_eq (jfollow_lookup (jf, r->lblks[0], &s), 0);
      cr_assert_eq (s.seq, seq);
    }
  cr_assert_eq (L.nconfused, 0);
  jfollow_free (jf);
  evlog_free (&L);
  free (d);
  jimg_del (&im);
}

/* ---- the log the store holds at start (jlog_new) ---------------------- */

struct copy_at
{
  uint64_t lblk;
  bool found;
};

static int
find_copy (void *opaque, uint64_t lblk, bool escaped)
{
  struct copy_at *c = opaque;

  (void)escaped;
  c->found |= lblk == c->lblk;
  return 0;
}

/* Every format: the log debugfs wrote (s_start != 0), read from the
 * store as recovery reads it, is known, with every logged copy logdump
 * lists live, and nothing fed past logdump's end of the log.
 */
Test (journal, start_scan_every_format)
{
  need_tools ();
  for (size_t i = 0; i < sizeof scenarios / sizeof *scenarios; i++)
    {
      struct jimg im;
      struct ldump *d;
      struct jlog *jl = NULL;
      struct jslot s;

      make_scenario (&im, i);
      d = logdump (&im);
      cr_assert_neq (im.fs->jsb.start, 0);
      cr_assert_eq (jlog_new (im.fs, jimg_read, &im, &jl), 0);
      cr_assert_not_null (jl);
      cr_assert (jlog_known (jl), "scenario %zu: known", i);
      for (size_t t = 0; t < d->ntx; t++)
        for (size_t k = 0; k < d->tx[t].n; k++)
          {
            struct copy_at c = { .lblk = d->tx[t].lblks[k] };

            cr_assert_eq (
                jlog_live_copies (jl, d->tx[t].targets[k], find_copy, &c), 0);
            cr_assert (c.found, "scenario %zu seq %u: copy %zu live", i,
                       d->tx[t].seq, k);
            cr_assert_eq (jlog_lookup (jl, c.lblk, &s), 0);
            cr_assert_eq (s.kind, JS_DATA);
            cr_assert_eq (s.state, JTX_COMMITTED);
          }
      cr_assert_eq (jlog_lookup (jl, d->end_block, &s), 0);
      cr_assert_eq (s.kind, JS_UNSEEN, "nothing past the end of the log");
      jlog_free (jl);
      free (d);
      jimg_del (&im);
    }
}

/* ---- fast commit ------------------------------------------------------- */

Test (journal, fast_commit_area)
{
  struct jimg im;
  struct jfollow *jf;
  struct jfeatures f;
  static struct evlog L;
  unsigned char *b;
  struct jslot s;

  need_tools ();
  jimg_make (&im, "-b 4096 -O fast_commit -J size=4", 65536, NULL);
  cr_assert (im.fs->feature_compat & 0x400, "no COMPAT_FAST_COMMIT");
  /* mke2fs leaves the jbd2 feature off: the ext4 feature turns it on. */
  cr_assert (im.f.fast_commit);
  cr_assert_gt (im.f.num_fc_blks, 0);
  cr_assert_eq (jbd2_log_end (&im.f), im.f.maxlen - im.f.num_fc_blks);
  cr_assert_eq (jbd2_features_from_sb (&im.fs->jsb, false, &f), 0);
  cr_assert (!f.fast_commit);
  cr_assert_eq (jbd2_features_set_fast_commit (&f, im.f.num_fc_blks), 0);
  cr_assert_eq (jbd2_log_end (&f), jbd2_log_end (&im.f));
  /* The ext4 feature turns it on from the parsed superblock too. */
  cr_assert_eq (jbd2_features_from_sb (&im.fs->jsb, true, &f), 0);
  cr_assert (f.fast_commit);
  cr_assert_eq (f.num_fc_blks, im.f.num_fc_blks);
  cr_assert_eq (jbd2_features_set_fast_commit (&f, im.f.maxlen), -EINVAL);

  cr_assert_eq (jfollow_new (&im.f, im.fs->journal_blocks, &jf), 0);
  b = calloc (1, im.bs);
  cr_assert_not_null (b);
  /* Fast-commit blocks: a TLV stream, or even the jbd2 magic: never a
   * transaction, never confusion.
   */
  for (uint64_t x = jbd2_log_end (&im.f); x < im.f.maxlen; x++)
    {
      b[0] = x & 0xff;
      if (x % 2)
        jbd2_unescape (b);
      cr_assert_eq (feed_buf (jf, x, b, im.bs, &L), 0);
      cr_assert_eq (jfollow_lookup (jf, x, &s), 0);
      cr_assert_eq (s.kind, JS_FAST_COMMIT);
    }
  cr_assert_eq (L.n, 0);
  free (b);
  jfollow_free (jf);
  jimg_del (&im);
}

/* A transaction across the wrap point of a fast-commit journal: the log
 * wraps at maxlen - num_fc_blks, not at maxlen.
 */
Test (journal, fast_commit_wrap_point)
{
  struct jimg im;
  struct ldump *d;
  struct jfollow *jf;
  static struct evlog L;
  char script[1024];
  uint64_t len, shift;

  need_tools ();
  jimg_make (&im, "-b 4096 -O fast_commit,^metadata_csum -J size=4", 65536,
             NULL);
  jimg_close (&im);
  write_data (im.dir, "a", 4096, 6, 9, 5);
  snprintf (script, sizeof script,
            "jo\njw -b 900,901,902,903,904,905 %s/a\njc\n", im.dir);
  run_debugfs (&im, script);
  jimg_open (&im);
  d = logdump (&im);
  cr_assert_eq (d->ntx, 1);
  len = jbd2_log_end (&im.f) - im.f.first;
  shift = len - 3; /* descriptor and two data blocks before the wrap */
  im.f.start = rot (&im.f, im.f.start, shift);
  cr_assert_eq (jfollow_new (&im.f, im.fs->journal_blocks, &jf), 0);
  feed_log (jf, &im, d, IN_ORDER, shift, &L);
  check_against_logdump (&im, d, &L, shift);
  cr_assert_eq (L.ev[0].lblks[2], im.f.first);
  cr_assert_lt (L.ev[0].end_lblk, L.ev[0].first_lblk);
  jfollow_free (jf);
  evlog_free (&L);
  free (d);
  jimg_del (&im);
}

/* ---- transactions that do not fit -------------------------------------- */

struct fixture
{
  struct jimg im;
  struct ldump *d;
  struct jfollow *jf;
  struct evlog L;
};

static struct fixture fx;

static void
fx_make (size_t scenario)
{
  need_tools ();
  memset (&fx, 0, sizeof fx);
  make_scenario (&fx.im, scenario);
  fx.d = logdump (&fx.im);
  cr_assert_eq (jfollow_new (&fx.im.f, fx.im.fs->journal_blocks, &fx.jf), 0);
}

static void
fx_free (void)
{
  jfollow_free (fx.jf);
  evlog_free (&fx.L);
  free (fx.d);
  jimg_del (&fx.im);
}

static void
fx_feed_range (uint64_t from, uint64_t to)
{
  for (uint64_t x = from; x < to; x++)
    feed (fx.jf, &fx.im, x, x, &fx.L);
}

Test (journal, abort_on_newer_sequence)
{
  fx_make (5);
  const struct ltx *a = &fx.d->tx[0], *b = &fx.d->tx[1];
  /* Transaction A without its commit, then all of B. */
  fx_feed_range (a->first_lblk, a->commit_lblk);
  cr_assert_eq (fx.L.n, 0);
  fx_feed_range (b->first_lblk, b->commit_lblk + 1);
  const struct rev *ab = find_ev (&fx.L, JE_TX_ABORTED, a->seq);
  cr_assert_not_null (ab);
  cr_assert_eq (ab->n, 3);
  for (size_t k = 0; k < 3; k++)
    cr_assert_eq (ab->targets[k], a->targets[k]);
  cr_assert_eq (ab->npos, 4);
  cr_assert_eq (ab->pos[0], a->first_lblk);
  struct jslot s;
  cr_assert_eq (jfollow_lookup (fx.jf, a->lblks[0], &s), 0);
  cr_assert_eq (s.state, JTX_ABORTED);
  const struct rev *bc = find_ev (&fx.L, JE_TX_COMMITTED, b->seq);
  cr_assert_not_null (bc);
  cr_assert (bc->has_revoke);
  cr_assert_eq (fx.L.nconfused, 0);
  fx_free ();
}

/* Start following where transaction k starts (the superblock's tail). */
static void
fx_start_at (size_t k)
{
  struct jfeatures f = fx.im.f;

  f.start = fx.d->tx[k].first_lblk;
  jfollow_free (fx.jf);
  cr_assert_eq (jfollow_new (&f, fx.im.fs->journal_blocks, &fx.jf), 0);
}

Test (journal, sequence_backwards)
{
  fx_make (5);
  const struct ltx *a = &fx.d->tx[0], *b = &fx.d->tx[1];
  fx_start_at (1);
  fx_feed_range (b->first_lblk, b->commit_lblk + 1);
  cr_assert_not_null (find_ev (&fx.L, JE_TX_COMMITTED, b->seq));
  /* A's descriptor (older sequence) after B committed. */
  feed (fx.jf, &fx.im, a->first_lblk, b->commit_lblk + 1, &fx.L);
  cr_assert_eq (fx.L.nconfused, 1);
  cr_assert_eq (fx.L.ev[fx.L.n - 1].type, JE_CONFUSED);
  cr_assert_eq (fx.L.ev[fx.L.n - 1].lblk, b->commit_lblk + 1);
  struct jslot s;
  cr_assert_eq (jfollow_lookup (fx.jf, b->commit_lblk + 1, &s), 0);
  cr_assert_eq (s.kind, JS_UNKNOWN);
  fx_free ();
}

Test (journal, commit_for_unknown_sequence)
{
  fx_make (5);
  const struct ltx *a = &fx.d->tx[0], *c = &fx.d->tx[2];
  fx_feed_range (a->first_lblk, a->commit_lblk + 1);
  /* C's commit block, away from where the next transaction starts and
   * without its descriptors.
   */
  feed (fx.jf, &fx.im, c->commit_lblk, c->commit_lblk, &fx.L);
  cr_assert_eq (fx.L.nconfused, 1);
  cr_assert_null (find_ev (&fx.L, JE_TX_COMMITTED, c->seq));
  /* The follower resynchronises on it: D follows C in the image, and
   * D fed in order commits cleanly.
   */
  const struct ltx *dd = &fx.d->tx[3];
  fx_feed_range (dd->first_lblk, dd->commit_lblk + 1);
  const struct rev *r = find_ev (&fx.L, JE_TX_COMMITTED, dd->seq);
  cr_assert_not_null (r);
  cr_assert (!r->has_unknown);
  cr_assert (r->has_revoke);
  fx_free ();
}

Test (journal, empty_transaction_is_only_a_commit)
{
  fx_make (0);
  const struct ltx *a = &fx.d->tx[0], *b = &fx.d->tx[1];
  unsigned char *blk = malloc (fx.im.bs);
  fx_feed_range (a->first_lblk, a->commit_lblk + 1);
  /* B's commit block at the head: a transaction with no blocks. */
  read_jblock (&fx.im, b->commit_lblk, blk);
  feed_buf (fx.jf, a->commit_lblk + 1, blk, fx.im.bs, &fx.L);
  const struct rev *r = find_ev (&fx.L, JE_TX_COMMITTED, b->seq);
  cr_assert_not_null (r);
  cr_assert_eq (r->n, 0);
  cr_assert (!r->has_unknown);
  cr_assert_eq (r->first_lblk, a->commit_lblk + 1);
  cr_assert_eq (fx.L.nconfused, 0);
  free (blk);
  fx_free ();
}

Test (journal, magic_in_data_position)
{
  fx_make (1);
  const struct ltx *a = &fx.d->tx[0], *b = &fx.d->tx[1];
  unsigned char *blk = malloc (fx.im.bs);
  /* A's descriptor, then B's revoke block where A's first logged copy
   * goes, then the rest of A.
   */
  feed (fx.jf, &fx.im, a->first_lblk, a->first_lblk, &fx.L);
  read_jblock (&fx.im, b->first_lblk, blk);
  feed_buf (fx.jf, a->lblks[0], blk, fx.im.bs, &fx.L);
  cr_assert_eq (fx.L.nconfused, 1);
  fx_feed_range (a->lblks[1], a->commit_lblk + 1);
  const struct rev *r = find_ev (&fx.L, JE_TX_COMMITTED, a->seq);
  cr_assert_not_null (r);
  cr_assert (r->has_unknown);
  free (blk);
  fx_free ();
}

Test (journal, escaped_tag_with_nonzero_copy)
{
  fx_make (1);
  const struct ltx *a = &fx.d->tx[0];
  unsigned char *blk = malloc (fx.im.bs);
  fx_feed_range (a->first_lblk, a->lblks[1]);
  read_jblock (&fx.im, a->lblks[1], blk);
  blk[2] = 0x55; /* the escaped copy must start with four zero bytes */
  feed_buf (fx.jf, a->lblks[1], blk, fx.im.bs, &fx.L);
  fx_feed_range (a->lblks[2], a->commit_lblk + 1);
  cr_assert_eq (fx.L.nconfused, 1);
  const struct rev *r = find_ev (&fx.L, JE_TX_COMMITTED, a->seq);
  cr_assert_not_null (r);
  cr_assert (r->has_unknown);
  free (blk);
  fx_free ();
}

Test (journal, commit_before_data_without_async_commit)
{
  fx_make (1);
  const struct ltx *a = &fx.d->tx[0];
  /* Descriptor and commit, the logged copies missing. */
  feed (fx.jf, &fx.im, a->first_lblk, a->first_lblk, &fx.L);
  feed (fx.jf, &fx.im, a->commit_lblk, a->commit_lblk, &fx.L);
  cr_assert_eq (fx.L.nconfused, 1);
  const struct rev *r = find_ev (&fx.L, JE_TX_COMMITTED, a->seq);
  cr_assert_not_null (r);
  cr_assert (r->has_unknown);
  struct jslot s;
  cr_assert_eq (jfollow_lookup (fx.jf, a->lblks[0], &s), 0);
  cr_assert_eq (s.kind, JS_DATA);
  cr_assert (!s.written);
  fx_free ();
}

Test (journal, async_commit_waits_for_data)
{
  struct jfeatures f;

  fx_make (6);
  const struct ltx *a = &fx.d->tx[0];
  f = fx.im.f;
  f.async_commit = true;
  jfollow_free (fx.jf);
  cr_assert_eq (jfollow_new (&f, fx.im.fs->journal_blocks, &fx.jf), 0);
  feed (fx.jf, &fx.im, a->commit_lblk, a->commit_lblk, &fx.L);
  feed (fx.jf, &fx.im, a->lblks[2], a->lblks[2], &fx.L);
  feed (fx.jf, &fx.im, a->first_lblk, a->first_lblk, &fx.L);
  feed (fx.jf, &fx.im, a->lblks[0], a->lblks[0], &fx.L);
  cr_assert_eq (fx.L.n, 0, "committed before all blocks arrived");
  feed (fx.jf, &fx.im, a->lblks[1], a->lblks[1], &fx.L);
  cr_assert_eq (fx.L.n, 1);
  cr_assert_eq (fx.L.ev[0].type, JE_TX_COMMITTED);
  cr_assert (!fx.L.ev[0].has_unknown);
  /* A newer transaction while an async commit waits for its data. */
  const struct ltx *c = &fx.d->tx[2], *dd = &fx.d->tx[3];
  feed (fx.jf, &fx.im, c->commit_lblk, c->commit_lblk, &fx.L);
  fx_feed_range (dd->first_lblk, dd->commit_lblk + 1);
  const struct rev *r = find_ev (&fx.L, JE_TX_COMMITTED, c->seq);
  cr_assert_not_null (r);
  cr_assert (r->has_unknown);
  fx_free ();
}

Test (journal, tags_beyond_journal)
{
  struct jfeatures f;
  struct jfollow *jf;

  fx_make (5);
  const struct ltx *c = &fx.d->tx[2];
  /* A log of 8 blocks cannot hold a descriptor of ~60 tags. */
  f = fx.im.f;
  f.maxlen = f.first + 8;
  cr_assert_eq (jfollow_new (&f, fx.im.fs->journal_blocks, &jf), 0);
  feed (jf, &fx.im, c->first_lblk, f.first, &fx.L);
  cr_assert_eq (fx.L.nconfused, 1);
  jfollow_free (jf);
  fx_free ();
}

Test (journal, data_over_own_descriptor)
{
  fx_make (0);
  const struct ltx *a = &fx.d->tx[0];
  unsigned char *blk = calloc (1, fx.im.bs);
  fx_feed_range (a->first_lblk, a->commit_lblk);
  blk[0] = 1;
  feed_buf (fx.jf, a->first_lblk, blk, fx.im.bs, &fx.L);
  cr_assert_eq (fx.L.nconfused, 1);
  feed (fx.jf, &fx.im, a->commit_lblk, a->commit_lblk, &fx.L);
  const struct rev *r = find_ev (&fx.L, JE_TX_COMMITTED, a->seq);
  cr_assert_not_null (r);
  cr_assert (r->has_unknown);
  free (blk);
  fx_free ();
}

Test (journal, stale_pending_reported)
{
  fx_make (0);
  const struct ltx *a = &fx.d->tx[0];
  unsigned char *blk = calloc (1, fx.im.bs);
  /* A block nobody describes, written between two transactions. */
  blk[0] = 7;
  feed_buf (fx.jf, a->commit_lblk + 40, blk, fx.im.bs, &fx.L);
  struct jslot s;
  cr_assert_eq (jfollow_lookup (fx.jf, a->commit_lblk + 40, &s), 0);
  cr_assert_eq (s.kind, JS_PENDING);
  fx_feed_range (a->first_lblk, a->commit_lblk + 1);
  cr_assert_eq (jfollow_lookup (fx.jf, a->commit_lblk + 40, &s), 0);
  cr_assert_eq (s.kind, JS_STALE);
  cr_assert_eq (fx.L.nconfused, 1);
  free (blk);
  fx_free ();
}

/* ---- reset ------------------------------------------------------------- */

Test (journal, reset_keeps_state_on_tail_update)
{
  struct jfeatures f;
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  struct jslot s;

  fx_make (6);
  const struct ltx *a = &fx.d->tx[0], *b = &fx.d->tx[1];
  fx_feed_range (a->first_lblk, a->commit_lblk + 1);
  fx_feed_range (b->first_lblk, b->commit_lblk);
  /* Tail update in the middle of B, with REVOKE appearing. */
  f = fx.im.f;
  f.start = a->commit_lblk + 1;
  f.sequence = b->seq;
  f.revoke = !f.revoke;
  cr_assert_eq (jfollow_reset (fx.jf, &f, ev, JFOLLOW_MAX_EVENTS), 0);
  cr_assert_eq (jfollow_lookup (fx.jf, a->lblks[0], &s), 0);
  cr_assert_eq (s.kind, JS_DATA);
  fx_feed_range (b->commit_lblk, b->commit_lblk + 1);
  cr_assert_not_null (find_ev (&fx.L, JE_TX_COMMITTED, b->seq));
  cr_assert_eq (fx.L.nconfused, 0);

  /* s_start = 0 (unmount) with a transaction open: it is abandoned and
   * every position forgotten.
   */
  const struct ltx *c = &fx.d->tx[2];
  fx_feed_range (c->first_lblk, c->first_lblk + 5);
  f.start = 0;
  int n = jfollow_reset (fx.jf, &f, ev, JFOLLOW_MAX_EVENTS);
  cr_assert_eq (n, 1);
  cr_assert_eq (ev[0].type, JE_TX_ABORTED);
  cr_assert_eq (ev[0].seq, c->seq);
  cr_assert_eq (ev[0].nblocks, 4);
  cr_assert_eq (jfollow_lookup (fx.jf, a->lblks[0], &s), 0);
  cr_assert_eq (s.kind, JS_UNSEEN);
  /* Bad features change nothing. */
  f.maxlen = 0;
  cr_assert_eq (jfollow_reset (fx.jf, &f, ev, JFOLLOW_MAX_EVENTS), -EINVAL);
  cr_assert_eq (jfollow_reset (fx.jf, &fx.im.f, ev, 1), -EINVAL);
  /* After the reset the follower starts over at any sequence. */
  fx_feed_range (a->first_lblk, a->commit_lblk + 1);
  cr_assert_not_null (find_ev (&fx.L, JE_TX_COMMITTED, a->seq));
  fx_free ();
}

/* ---- bad arguments ----------------------------------------------------- */

Test (journal, new_rejects_bad_arguments)
{
  struct jbd2_sb jsb = { .blocksize = 1024, .maxlen = 1024, .first = 1 };
  struct jfeatures f;
  struct jfollow *jf;
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  unsigned char b[1024] = { 0 };

  cr_assert_eq (jbd2_features_from_sb (&jsb, false, &f), 0);
  cr_assert_eq (jfollow_new (&f, 1000, &jf), -EINVAL);
  cr_assert_eq (jfollow_new (&f, 2048, &jf), 0);
  cr_assert_eq (jfollow_write (jf, 2048, b, sizeof b, ev, JFOLLOW_MAX_EVENTS),
                -EINVAL);
  cr_assert_eq (jfollow_write (jf, 5, b, sizeof b, ev, 2), -EINVAL);
  cr_assert_eq (jfollow_write (jf, 5, b, 0, ev, JFOLLOW_MAX_EVENTS), -EINVAL);
  /* Beyond maxlen but inside the journal inode. */
  cr_assert_eq (jfollow_write (jf, 1500, b, sizeof b, ev, JFOLLOW_MAX_EVENTS),
                0);
  struct jslot s;
  cr_assert_eq (jfollow_lookup (jf, 1500, &s), 0);
  cr_assert_eq (s.kind, JS_OUTSIDE);
  cr_assert_eq (jfollow_lookup (jf, 7, &s), 0);
  cr_assert_eq (s.kind, JS_UNSEEN);
  jfollow_free (jf);
  jfollow_free (NULL);
}

/* ---- robustness -------------------------------------------------------- */

/* Every single-byte corruption of a real descriptor and commit block:
 * no crash, no read past the block, and with csum v3 every change is
 * caught (parse error, another kind, or a bad checksum).
 */
static void
corrupt_each_byte (size_t scenario)
{
  struct jtag *tags;
  unsigned char *orig, *b;
  struct jblock blk;
  uint64_t which[2];
  const uint8_t xors[] = { 0x01, 0x80, 0xff };

  fx_make (scenario);
  const struct ltx *a = &fx.d->tx[0];
  bool csum = fx.im.f.csum_v3 || fx.im.f.csum_v2;
  size_t bs = fx.im.bs, cap = jbd2_max_tags (&fx.im.f);

  tags = calloc (cap, sizeof *tags);
  orig = malloc (bs);
  b = malloc (bs);
  cr_assert (tags && orig && b);
  which[0] = a->first_lblk;
  which[1] = a->commit_lblk;
  for (int w = 0; w < 2; w++)
    {
      read_jblock (&fx.im, which[w], orig);
      for (size_t i = 0; i < bs; i++)
        for (size_t x = 0; x < sizeof xors; x++)
          {
            int r;
            memcpy (b, orig, bs);
            b[i] ^= xors[x];
            r = parse_exact (&fx.im.f, b, bs, &blk, tags, cap);
            if (csum)
              cr_assert (r < 0 || blk.kind != (w ? JB_COMMIT : JB_DESCRIPTOR)
                             || blk.csum == JCSUM_BAD,
                         "byte %zu of block %d not caught", i, w);
            if (i % 61 == 0 || i < 64)
              {
                /* Through a fresh follower, with the rest of the
                 * transaction: whatever happens, nothing crashes and a
                 * caught change is never a clean commit.
                 */
                struct jfollow *jf;
                static struct evlog L;

                cr_assert_eq (
                    jfollow_new (&fx.im.f, fx.im.fs->journal_blocks, &jf), 0);
                for (uint64_t y = a->first_lblk; y <= a->commit_lblk; y++)
                  if (y == which[w])
                    feed_buf (jf, y, b, bs, &L);
                  else
                    feed (jf, &fx.im, y, y, &L);
                if (csum && (r < 0 || blk.csum == JCSUM_BAD))
                  for (size_t e = 0; e < L.n; e++)
                    cr_assert (L.ev[e].type != JE_TX_COMMITTED
                                   || L.ev[e].has_unknown,
                               "byte %zu: clean commit of a bad block", i);
                jfollow_free (jf);
                evlog_free (&L);
              }
          }
    }
  free (tags);
  free (orig);
  free (b);
  fx_free ();
}

Test (journal, corrupt_each_byte_v3)
{
  corrupt_each_byte (6);
}
Test (journal, corrupt_each_byte_v2)
{
  corrupt_each_byte (3);
}
Test (journal, corrupt_each_byte_plain)
{
  corrupt_each_byte (0);
}

/* Random blocks, with and without a plausible header, through the parser
 * and a follower at random positions.
 */
Test (journal, random_blocks)
{
  const uint32_t incompat[] = { 0, 0x2, 0x8, 0xA, 0x10, 0x12, 0x14 };
  unsigned seed = 1234;

  for (size_t fi = 0; fi < sizeof incompat / sizeof *incompat; fi++)
    {
      struct jbd2_sb jsb = { .blocksize = 1024,
                             .maxlen = 64,
                             .first = 1,
                             .feature_incompat = incompat[fi] };
      struct jfeatures f;
      struct jfollow *jf;
      struct jtag tags[256];
      struct jblock blk;
      unsigned char b[1024];
      static struct evlog L;

      cr_assert_eq (jbd2_features_from_sb (&jsb, false, &f), 0);
      cr_assert_eq (jfollow_new (&f, 64, &jf), 0);
      for (int it = 0; it < 3000; it++)
        {
          for (size_t k = 0; k < sizeof b; k++)
            b[k] = rand_r (&seed);
          if (it % 4 != 0)
            {
              jbd2_unescape (b);
              put32 (b + 4, 1 + rand_r (&seed) % 6);
              put32 (b + 8, rand_r (&seed) % 8);
              if (it % 3 == 0)
                put32 (b + 12, rand_r (&seed) % 1100);
              if (it % 5 == 0)
                /* Mostly SAME_UUID tags, some LAST. */
                for (size_t k = 12 + 7; k < sizeof b; k += jbd2_tag_bytes (&f))
                  b[k] = (rand_r (&seed) % 20 ? 0x2 : 0xA)
                         | (rand_r (&seed) % 2);
            }
          else if (it % 8 == 0)
            memset (b, 0, 4);
          (void)parse_exact (&f, b, sizeof b, &blk, tags, 256);
          feed_buf (jf, rand_r (&seed) % 64, b, sizeof b, &L);
          if (L.n > 200)
            evlog_free (&L);
        }
      for (size_t e = 0; e < L.n; e++)
        cr_assert (L.ev[e].type != JE_NONE);
      evlog_free (&L);
      jfollow_free (jf);
    }
}
