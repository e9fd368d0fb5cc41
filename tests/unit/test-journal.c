/* test-journal.c --- the jbd2 log follower checked against journals that
 * debugfs writes at test time (feature matrix, arrival orders, wrap-around,
 * fast commit), against debugfs logdump, and against corrupt input.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testutil.h"
#include "jlog.h"
#include "journal.h"
#include "layout.h"

/* ---- shell helpers ---------------------------------------------------- */

static void
need_tools (void)
{
  if (sh ("command -v mkfs.ext4") != 0 || sh ("command -v debugfs") != 0)
    cr_skip_test ("mkfs.ext4 or debugfs is not installed");
  char *v = capture ("debugfs -R help /dev/null 2>&1");
  bool ok = strstr (v, "journal_write") && strstr (v, "logdump");
  free (v);
  if (!ok)
    cr_skip_test ("this debugfs cannot write journal transactions "
                  "(e2fsprogs >= 1.43 needed)");
}

/* ---- images ----------------------------------------------------------- */

struct img
{
  char dir[256];
  char path[300];
  int fd;
  uint64_t size;
  uint32_t bs;
  struct layout *lay;
  const struct ext4_fs *fs;
  struct jfeatures f;
};

static int
pread_cb (void *opaque, void *buf, size_t len, uint64_t off)
{
  struct img *im = opaque;
  ssize_t n = pread (im->fd, buf, len, off);

  if (n < 0)
    return -errno;
  return (size_t)n == len ? 0 : -EIO;
}

static void
img_open (struct img *im)
{
  struct stat st;
  unsigned char sb[1024];
  int r;

  im->fd = open (im->path, O_RDONLY);
  cr_assert_geq (im->fd, 0);
  cr_assert_eq (fstat (im->fd, &st), 0);
  im->size = st.st_size;
  r = layout_discover (pread_cb, im, im->size, &im->lay);
  cr_assert_eq (r, 0, "layout_discover: %s", strerror (-r));
  cr_assert_eq (im->lay->n_fs, 1);
  im->fs = &im->lay->fs[0];
  cr_assert (im->fs->has_journal && !im->fs->journal_external);
  cr_assert (im->fs->jsb_valid);
  im->bs = im->fs->block_size;
  uint64_t off = layout_journal_off (im->fs, 0);
  cr_assert_neq (off, UINT64_MAX);
  cr_assert_eq (pread (im->fd, sb, sizeof sb, off), (ssize_t)sizeof sb);
  r = jbd2_features_from_raw (sb, sizeof sb, im->fs->feature_compat & 0x400,
                              &im->f);
  cr_assert_eq (r, 0, "jbd2_features_from_raw: %s", strerror (-r));
}

static void
img_close (struct img *im)
{
  if (im->lay)
    layout_free (im->lay);
  im->lay = NULL;
  if (im->fd >= 0)
    close (im->fd);
  im->fd = -1;
}

static void
run_debugfs (struct img *im, const char *script)
{
  char sp[320];
  FILE *f;

  snprintf (sp, sizeof sp, "%s/script", im->dir);
  f = fopen (sp, "w");
  cr_assert_not_null (f);
  fputs (script, f);
  fclose (f);
  cr_assert_eq (sh ("debugfs -w -f %s %s", sp, im->path), 0);
}

/* mkfs with opts (size in KiB), then run the debugfs script (may be
 * NULL) and open the result.
 */
static void
img_make (struct img *im, const char *opts, unsigned size_k, const char *script)
{
  const char *tmp = getenv ("TMPDIR");

  memset (im, 0, sizeof *im);
  im->fd = -1;
  snprintf (im->dir, sizeof im->dir, "%s/ext4lazy-journal-XXXXXX",
            tmp && *tmp ? tmp : "/tmp");
  cr_assert_not_null (mkdtemp (im->dir));
  snprintf (im->path, sizeof im->path, "%s/disk.img", im->dir);
  cr_assert_eq (sh ("mkfs.ext4 -q -F %s %s %uk", opts, im->path, size_k), 0,
                "mkfs.ext4 %s", opts);
  if (script)
    run_debugfs (im, script);
  img_open (im);
}

static void
img_del (struct img *im)
{
  img_close (im);
  sh ("rm -rf %s", im->dir);
}

static void
read_jblock (struct img *im, uint64_t lblk, void *buf)
{
  uint64_t off = layout_journal_off (im->fs, lblk);

  cr_assert_neq (off, UINT64_MAX, "journal block %" PRIu64, lblk);
  cr_assert_eq (pread (im->fd, buf, im->bs, off), (ssize_t)im->bs);
}

/* A file of n blocks of pseudo-random data for jw; block esc (if < n)
 * starts with the jbd2 magic so that debugfs escapes it.
 */
static void
write_data (const char *dir, const char *name, uint32_t bs, size_t n,
            size_t esc, unsigned seed)
{
  char p[320];
  FILE *f;
  unsigned char *b = malloc (bs);

  cr_assert_not_null (b);
  snprintf (p, sizeof p, "%s/%s", dir, name);
  f = fopen (p, "w");
  cr_assert_not_null (f);
  srand (seed);
  for (size_t i = 0; i < n; i++)
    {
      for (uint32_t k = 0; k < bs; k++)
        b[k] = rand () & 0xff;
      if (b[0] == 0xC0)
        b[0] = 0x11;
      if (i == esc)
        jbd2_unescape (b);
      cr_assert_eq (fwrite (b, bs, 1, f), 1);
    }
  fclose (f);
  free (b);
}

/* ---- logdump: the independent reading of the journal ------------------ */

#define MAXT 1024
#define MAXTX 16

struct ltx
{
  uint32_t seq;
  size_t n;
  uint64_t targets[MAXT], lblks[MAXT];
  size_t nrevoke;
  uint64_t revoked[64];
  bool committed;
  uint64_t first_lblk, commit_lblk;
};

struct ldump
{
  struct ltx tx[MAXTX];
  size_t ntx;
  uint64_t end_block; /* where logdump found the end of the log */
};

static struct ldump *
logdump (struct img *im)
{
  struct ldump *d = calloc (1, sizeof *d);
  char *out = capture ("debugfs -R 'logdump -a' %s 2>/dev/null", im->path);
  char *save = NULL;
  struct ltx *t = NULL;

  cr_assert_not_null (d);
  for (char *line = strtok_r (out, "\n", &save); line;
       line = strtok_r (NULL, "\n", &save))
    {
      unsigned seq, type, flags;
      uint64_t a, b;
      char *at = strstr (line, " at block ");

      if (sscanf (line, "Found expected sequence %u, type %u", &seq, &type) == 2
          && at)
        {
          uint64_t blk = strtoull (at + strlen (" at block "), NULL, 10);

          if (!t || t->seq != seq)
            {
              cr_assert_lt (d->ntx, MAXTX);
              t = &d->tx[d->ntx++];
              t->seq = seq;
              t->first_lblk = blk;
            }
          if (type == 2)
            {
              t->committed = true;
              t->commit_lblk = blk;
            }
        }
      else if (sscanf (line,
                       " FS block %" SCNu64 " logged at journal block %" SCNu64
                       " (flags 0x%x)",
                       &a, &b, &flags)
                   == 3
               && t)
        {
          cr_assert_lt (t->n, MAXT);
          t->targets[t->n] = a;
          t->lblks[t->n++] = b;
        }
      else if (sscanf (line, " Revoke FS block %" SCNu64, &a) == 1 && t)
        {
          cr_assert_lt (t->nrevoke, 64);
          t->revoked[t->nrevoke++] = a;
        }
      else if (strstr (line, "end of journal") && at)
        d->end_block = strtoull (at + strlen (" at block "), NULL, 10);
    }
  free (out);
  cr_assert_gt (d->end_block, 0, "logdump found no end of the log");
  return d;
}

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
feed (struct jfollow *jf, struct img *im, uint64_t src, uint64_t dst,
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
check_against_logdump (const struct img *im, const struct ldump *d,
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

/* ---- the standard transaction set ------------------------------------- */

/* Fs blocks the transactions log (all below the fs size used). */
#define T1 "300,301,302"
#define BIG_FIRST 1000

struct scenario
{
  const char *mkfs;     /* mkfs.ext4 options */
  const char *jo;       /* journal_open options */
  unsigned size_k;      /* fs size */
  size_t tag_bytes;     /* expected jbd2_tag_bytes */
  bool v1, v2, v3, b64; /* expected features */
};

/* Script: tx A (3 blocks, the second escaped), tx B (revoke only), tx C
 * (enough blocks for two descriptors), tx D (data + revoke).  D is last:
 * debugfs places the transaction after one with data and revoke blocks
 * over that one's commit block.
 */
static char *
make_script (struct img *im0, const struct scenario *s, uint32_t bs,
             size_t nbig)
{
  static char script[65536];
  size_t o = 0;

  write_data (im0->dir, "a", bs, 3, 1, 1);
  write_data (im0->dir, "big", bs, nbig, 7, 2);
  write_data (im0->dir, "d", bs, 1, 9, 3);
  o += snprintf (script + o, sizeof script - o, "jo %s\n", s->jo);
  o += snprintf (script + o, sizeof script - o, "jw -b " T1 " %s/a\n",
                 im0->dir);
  o += snprintf (script + o, sizeof script - o, "jw -r 400,401,402\n");
  o += snprintf (script + o, sizeof script - o, "jw -b ");
  for (size_t i = 0; i < nbig; i++)
    o += snprintf (script + o, sizeof script - o, "%s%zu", i ? "," : "",
                   BIG_FIRST + i);
  o += snprintf (script + o, sizeof script - o, " %s/big\n", im0->dir);
  o += snprintf (script + o, sizeof script - o, "jw -b 500 -r 600 %s/d\njc\n",
                 im0->dir);
  return script;
}

static const struct scenario scenarios[] = {
  { "-b 1024 -O ^metadata_csum,^64bit -J size=4", "", 32768, 8, 0, 0, 0, 0 },
  { "-b 4096 -O ^metadata_csum,64bit -J size=8", "", 65536, 12, 0, 0, 0, 1 },
  { "-b 1024 -O ^metadata_csum,^64bit -J size=4", "-c", 32768, 8, 1, 0, 0, 0 },
  { "-b 1024 -O metadata_csum,^64bit -J size=4", "-c -v 2", 32768, 10, 0, 1, 0,
    0 },
  { "-b 4096 -O metadata_csum,64bit -J size=8", "-c -v 2", 65536, 14, 0, 1, 0,
    1 },
  { "-b 1024 -O metadata_csum,^64bit -J size=4", "-c", 32768, 16, 0, 0, 1, 0 },
  { "-b 2048 -O metadata_csum,64bit -J size=4", "-c", 65536, 16, 0, 0, 1, 1 },
};

/* Make the image of scenario i with the standard transactions. */
static void
make_scenario (struct img *im, size_t i)
{
  const struct scenario *s = &scenarios[i];
  struct img tmp;
  unsigned bs;
  char *script;
  struct jfeatures f;
  size_t nbig;

  /* First a blank image to learn the tag format, then the real one. */
  img_make (&tmp, s->mkfs, s->size_k, NULL);
  bs = tmp.bs;
  f = tmp.f;
  f.csum_v3 = s->v3;
  f.csum_v2 = s->v2;
  f.bit64 = s->b64;
  nbig = jbd2_max_tags (&f) + 30;
  script = make_script (&tmp, s, bs, nbig);
  img_close (&tmp);
  run_debugfs (&tmp, script);
  *im = tmp;
  img_open (im);
  cr_assert_eq (im->f.csum_v1, s->v1, "csum v1");
  cr_assert_eq (im->f.csum_v2, s->v2, "csum v2");
  cr_assert_eq (im->f.csum_v3, s->v3, "csum v3");
  cr_assert_eq (im->f.bit64, s->b64, "64bit");
  cr_assert_eq (jbd2_tag_bytes (&im->f), s->tag_bytes);
}

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
feed_log (struct jfollow *jf, struct img *im, const struct ldump *d,
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
  struct img im;
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
  img_del (&im);
}

/* ---- parse-level checks against logdump --------------------------------- */

static void
parse_scenario (size_t i)
{
  struct img im;
  struct ldump *d;
  unsigned char *b;
  struct jtag *tags;
  struct jblock blk;

  need_tools ();
  make_scenario (&im, i);
  d = logdump (&im);
  b = malloc (im.bs);
  tags = calloc (jbd2_max_tags (&im.f), sizeof *tags);
  cr_assert (b && tags);
  for (size_t k = 0; k < d->ntx; k++)
    {
      const struct ltx *t = &d->tx[k];
      size_t tagi = 0, nrev = 0;
      uint64_t end = t->committed     ? t->commit_lblk + 1
                     : k + 1 < d->ntx ? d->tx[k + 1].first_lblk
                                      : d->end_block;

      for (uint64_t x = t->first_lblk; x < end; x++)
        {
          int r;

          read_jblock (&im, x, b);
          memset (&blk, 0, sizeof blk);
          blk.tags = tags;
          blk.tags_cap = jbd2_max_tags (&im.f);
          r = jbd2_parse_block (&im.f, b, im.bs, &blk);
          cr_assert_eq (r, 0, "block %" PRIu64 ": %s", x, strerror (-r));
          if (blk.kind == JB_NONE)
            continue;
          cr_assert_eq (blk.seq, t->seq);
          if (im.f.csum_v2 || im.f.csum_v3)
            cr_assert_eq (blk.csum, JCSUM_OK, "checksum of block %" PRIu64, x);
          else
            cr_assert_eq (blk.csum, JCSUM_NONE);
          if (blk.kind == JB_DESCRIPTOR)
            for (size_t m = 0; m < blk.ntags; m++, tagi++)
              {
                cr_assert_lt (tagi, t->n);
                cr_assert_eq (blk.tags[m].target, t->targets[tagi]);
                cr_assert_eq (x + 1 + m, t->lblks[tagi]);
                cr_assert_eq (blk.tags[m].same_uuid, m > 0);
              }
          else if (blk.kind == JB_REVOKE)
            for (size_t m = 0; m < blk.nrevoke; m++, nrev++)
              {
                cr_assert_lt (nrev, t->nrevoke);
                cr_assert_eq (jbd2_revoke_record (&blk, m), t->revoked[nrev]);
              }
          else
            {
              cr_assert_eq (blk.kind, JB_COMMIT);
              if (im.f.csum_v1)
                cr_assert (blk.chksum_type == 1 && blk.chksum_size == 4);
            }
        }
      cr_assert_eq (tagi, t->n, "seq %u: parsed %zu tags, logdump %zu", t->seq,
                    tagi, t->n);
      cr_assert_eq (nrev, t->nrevoke);
    }
  /* The big transaction needed a second descriptor. */
  cr_assert_gt (d->tx[2].n, jbd2_max_tags (&im.f) - 1);
  free (tags);
  free (b);
  free (d);
  img_del (&im);
}

#define SCENARIO_TESTS(i, name)                                                \
  Test (journal, parse_##name)                                                 \
  {                                                                            \
    parse_scenario (i);                                                        \
  }                                                                            \
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
  struct img im;
  struct ldump *d;
  uint64_t len, shift;

  need_tools ();
  make_scenario (&im, i);
  d = logdump (&im);
  len = jbd2_log_end (&im.f) - im.f.first;
  /* Put the middle of transaction C on the last log block. */
  shift = len - (d->tx[2].first_lblk + d->tx[2].n / 2 - im.f.first) - 1;
  free (d);
  img_del (&im);
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
  struct img im;
  struct ldump *d;
  struct jfollow *jf;
  static struct evlog L;
  char script[4096];
  size_t o = 0;
  uint64_t first, end, len, pos;
  uint32_t seq;

  need_tools ();
  img_make (&im, "-b 1024 -O metadata_csum,^64bit -J size=1", 16384, NULL);
  img_close (&im);
  write_data (im.dir, "a", 1024, 200, 50, 7);
  o += snprintf (script + o, sizeof script - o, "jo -c\njw -b ");
  for (int k = 0; k < 200; k++)
    o += snprintf (script + o, sizeof script - o, "%s%d", k ? "," : "",
                   2000 + k);
  o += snprintf (script + o, sizeof script - o, " %s/a\njc\n", im.dir);
  run_debugfs (&im, script);
  img_open (&im);
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
  img_del (&im);
}

Test (journal, features_from_jsb_match_raw)
{
  need_tools ();
  for (size_t i = 0; i < sizeof scenarios / sizeof *scenarios; i++)
    {
      struct img im;
      struct jfeatures f;

      make_scenario (&im, i);
      /* The parsed superblock carries what the raw one gives: the same
       * features, UUID and checksum seed included.
       */
      memset (&f, 0xa5, sizeof f);
      cr_assert_eq (jbd2_features_from_sb (&im.fs->jsb,
                                           im.fs->feature_compat & 0x400, &f),
                    0);
      cr_assert_eq (f.blocksize, im.f.blocksize);
      cr_assert_eq (f.maxlen, im.f.maxlen);
      cr_assert_eq (f.first, im.f.first);
      cr_assert_eq (f.csum_v1, im.f.csum_v1);
      cr_assert_eq (f.csum_v2, im.f.csum_v2);
      cr_assert_eq (f.csum_v3, im.f.csum_v3);
      cr_assert_eq (f.bit64, im.f.bit64);
      cr_assert_eq (f.sequence, im.f.sequence);
      cr_assert_eq (f.start, im.f.start);
      cr_assert (f.has_uuid);
      cr_assert (im.f.has_uuid);
      cr_assert_eq (memcmp (f.uuid, im.f.uuid, sizeof f.uuid), 0);
      cr_assert_eq (f.csum_seed, im.f.csum_seed);
      cr_assert_eq (jbd2_tag_bytes (&f), scenarios[i].tag_bytes);
      img_del (&im);
    }
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
      struct img im;
      struct ldump *d;
      struct jlog *jl = NULL;
      struct jslot s;

      make_scenario (&im, i);
      d = logdump (&im);
      cr_assert_neq (im.fs->jsb.start, 0);
      cr_assert_eq (jlog_new (im.fs, pread_cb, &im, &jl), 0);
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
      img_del (&im);
    }
}

/* ---- fast commit ------------------------------------------------------- */

Test (journal, fast_commit_area)
{
  struct img im;
  struct jfollow *jf;
  struct jfeatures f;
  static struct evlog L;
  unsigned char *b;
  struct jslot s;

  need_tools ();
  img_make (&im, "-b 4096 -O fast_commit -J size=4", 65536, NULL);
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
  img_del (&im);
}

/* A transaction across the wrap point of a fast-commit journal: the log
 * wraps at maxlen - num_fc_blks, not at maxlen.
 */
Test (journal, fast_commit_wrap_point)
{
  struct img im;
  struct ldump *d;
  struct jfollow *jf;
  static struct evlog L;
  char script[1024];
  uint64_t len, shift;

  need_tools ();
  img_make (&im, "-b 4096 -O fast_commit,^metadata_csum -J size=4", 65536,
            NULL);
  img_close (&im);
  write_data (im.dir, "a", 4096, 6, 9, 5);
  snprintf (script, sizeof script,
            "jo\njw -b 900,901,902,903,904,905 %s/a\njc\n", im.dir);
  run_debugfs (&im, script);
  img_open (&im);
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
  img_del (&im);
}

/* ---- transactions that do not fit -------------------------------------- */

struct fixture
{
  struct img im;
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
  img_del (&fx.im);
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

static void
put32 (unsigned char *p, uint32_t v)
{
  p[0] = v >> 24;
  p[1] = v >> 16;
  p[2] = v >> 8;
  p[3] = v;
}

/* Parse into an exactly-sized heap copy (so that valgrind and ASan see
 * any read past the block) and check the result is self-consistent.
 */
static int
parse_exact (const struct jfeatures *f, const unsigned char *src, size_t len,
             struct jblock *blk, struct jtag *tags, size_t cap)
{
  unsigned char *b = malloc (len ? len : 1);
  int r;

  cr_assert_not_null (b);
  memcpy (b, src, len);
  memset (blk, 0, sizeof *blk);
  blk->tags = tags;
  blk->tags_cap = cap;
  r = jbd2_parse_block (f, b, len, blk);
  cr_assert (r == 0 || r == -EINVAL || r == -ENOSPC);
  if (r == 0 && blk->kind == JB_DESCRIPTOR)
    {
      cr_assert_geq (blk->ntags, 1);
      cr_assert_leq (blk->ntags, jbd2_max_tags (f));
    }
  if (r == 0 && blk->kind == JB_REVOKE)
    {
      cr_assert_geq (blk->r_count, 16);
      cr_assert_leq (blk->r_count, f->blocksize);
      for (size_t i = 0; i < blk->nrevoke; i++)
        (void)jbd2_revoke_record (blk, i);
    }
  free (b);
  return r;
}

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
