/* SPDX-License-Identifier: BSD-3-Clause */
/* testjournal.c --- helpers shared by test-jbd2.c and test-journal.c:
 * images whose journals debugfs writes, logdump, and a checked parse of
 * one block (see testjournal.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testjournal.h"
#include "testutil.h"

/* ---- shell helpers ---------------------------------------------------- */

void
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

int
jimg_read (void *opaque, void *buf, size_t len, uint64_t off)
{
  struct jimg *im = opaque;
  ssize_t n = pread (im->fd, buf, len, off);

  if (n < 0)
    return -errno;
  return (size_t)n == len ? 0 : -EIO;
}

void
jimg_open (struct jimg *im)
{
  struct stat st;
  unsigned char sb[1024];
  int r;

  im->fd = open (im->path, O_RDONLY);
  cr_assert_geq (im->fd, 0);
  cr_assert_eq (fstat (im->fd, &st), 0);
  im->size = st.st_size;
  r = layout_discover (jimg_read, im, im->size, &im->lay);
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

void
jimg_close (struct jimg *im)
{
  if (im->lay)
    layout_free (im->lay);
  im->lay = NULL;
  if (im->fd >= 0)
    close (im->fd);
  im->fd = -1;
}

void
run_debugfs (struct jimg *im, const char *script)
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
void
jimg_make (struct jimg *im, const char *opts, unsigned size_k,
           const char *script)
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
  jimg_open (im);
}

void
jimg_del (struct jimg *im)
{
  jimg_close (im);
  sh ("rm -rf %s", im->dir);
}

void
read_jblock (struct jimg *im, uint64_t lblk, void *buf)
{
  uint64_t off = layout_journal_off (im->fs, lblk);

  cr_assert_neq (off, UINT64_MAX, "journal block %" PRIu64, lblk);
  cr_assert_eq (pread (im->fd, buf, im->bs, off), (ssize_t)im->bs);
}

/* A file of n blocks of pseudo-random data for jw; block esc (if < n)
 * starts with the jbd2 magic so that debugfs escapes it.
 */
void
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

struct ldump *
logdump (struct jimg *im)
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

/* ---- the standard transaction set ------------------------------------- */

/* Fs blocks the transactions log (all below the fs size used). */
#define T1 "300,301,302"
#define BIG_FIRST 1000

/* Script: tx A (3 blocks, the second escaped), tx B (revoke only), tx C
 * (enough blocks for two descriptors), tx D (data + revoke).  D is last:
 * debugfs places the transaction after one with data and revoke blocks
 * over that one's commit block.
 */
static char *
make_script (struct jimg *im0, const struct scenario *s, uint32_t bs,
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

const struct scenario scenarios[] = {
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
void
make_scenario (struct jimg *im, size_t i)
{
  const struct scenario *s = &scenarios[i];
  struct jimg tmp;
  unsigned bs;
  char *script;
  struct jfeatures f;
  size_t nbig;

  /* First a blank image to learn the tag format, then the real one. */
  jimg_make (&tmp, s->mkfs, s->size_k, NULL);
  bs = tmp.bs;
  f = tmp.f;
  f.csum_v3 = s->v3;
  f.csum_v2 = s->v2;
  f.bit64 = s->b64;
  nbig = jbd2_max_tags (&f) + 30;
  script = make_script (&tmp, s, bs, nbig);
  jimg_close (&tmp);
  run_debugfs (&tmp, script);
  *im = tmp;
  jimg_open (im);
  cr_assert_eq (im->f.csum_v1, s->v1, "csum v1");
  cr_assert_eq (im->f.csum_v2, s->v2, "csum v2");
  cr_assert_eq (im->f.csum_v3, s->v3, "csum v3");
  cr_assert_eq (im->f.bit64, s->b64, "64bit");
  cr_assert_eq (jbd2_tag_bytes (&im->f), s->tag_bytes);
}

/* ---- one block --------------------------------------------------------- */

void
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
int
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
