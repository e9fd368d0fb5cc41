/* SPDX-License-Identifier: BSD-3-Clause */
/* test-jlog.c --- what the engine knows of one journal (jlog.h): when a
 * jlog can be made, transactions fed through its follower, the live and
 * absorbed transactions, and the durable tail, on ext4 images made at
 * test time.
 *
 * Transactions are hand-built (one descriptor with one tag, the logged
 * copy, the commit block) in the format of the image's journal; one
 * test also feeds the blocks of a transaction debugfs wrote.  The
 * journal is made without checksums so that a raw superblock can be
 * edited without re-checksumming it.
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

#include "testutil.h"
#include "jlog.h"
#include "journal.h"
#include "layout.h"

/* 1 KiB blocks, the 1 MiB minimum journal, no journal checksums. */
#define MKFS_OPTS "-b 1024 -O ^metadata_csum,^64bit -J size=1"
#define INCOMPAT_ASYNC_COMMIT 0x4

/* ---- images ----------------------------------------------------------- */

struct img
{
  char path[320];
  int fd;
  uint64_t size;
  struct layout *lay;
  const struct ext4_fs *fs;
};

static char dir[256];
static struct img im; /* the fixture's image: a fresh, empty journal */
static struct jlog *j;
static uint32_t bs, first, seq0;

static int
pread_cb (void *opaque, void *buf, size_t len, uint64_t off)
{
  struct img *m = opaque;
  ssize_t n = pread (m->fd, buf, len, off);

  if (n < 0)
    return -errno;
  return (size_t)n == len ? 0 : -EIO;
}

/* Open m->path (read-write: tests edit the journal) and discover its
 * layout: one filesystem.
 */
static void
img_open (struct img *m)
{
  struct stat st;
  int r;

  m->fd = open (m->path, O_RDWR);
  cr_assert_geq (m->fd, 0);
  cr_assert_eq (fstat (m->fd, &st), 0);
  m->size = st.st_size;
  r = layout_discover (pread_cb, m, m->size, &m->lay);
  cr_assert_eq (r, 0, "layout_discover: %s", strerror (-r));
  cr_assert_eq (m->lay->n_fs, 1, "one filesystem in %s", m->path);
  m->fs = &m->lay->fs[0];
}

/* mkfs.ext4 opts into dir/name, run the debugfs script (may be NULL),
 * open it.
 */
static void
img_make (struct img *m, const char *name, const char *opts, const char *script)
{
  memset (m, 0, sizeof *m);
  m->fd = -1;
  snprintf (m->path, sizeof m->path, "%s/%s", dir, name);
  cr_assert_eq (sh ("mkfs.ext4 -q -F %s %s 8192k", opts, m->path), 0,
                "mkfs.ext4 %s", opts);
  if (script)
    {
      char sp[300];
      FILE *f;

      snprintf (sp, sizeof sp, "%s/script", dir);
      f = fopen (sp, "w");
      cr_assert_not_null (f);
      fputs (script, f);
      fclose (f);
      cr_assert_eq (sh ("debugfs -w -f %s %s", sp, m->path), 0, "debugfs");
    }
  img_open (m);
}

/* An image whose log holds transactions debugfs committed (jw_cmds:
 * one or more "jw ..." lines, each one transaction, where $B names a
 * file of three blocks of 0x33) and which therefore needs recovery
 * (s_start = s_first).  opts and jo as for mkfs.ext4 and debugfs's jo.
 */
static void
img_logged (struct img *w, const char *name, const char *opts, const char *jo,
            const char *jw_cmds)
{
  char path[300], script[1024];
  unsigned char *b = malloc (3 * 4096);
  size_t o = 0;
  FILE *f;

  cr_assert_not_null (b);
  memset (b, 0x33, 3 * 4096);
  snprintf (path, sizeof path, "%s/blk", dir);
  f = fopen (path, "w");
  cr_assert_not_null (f);
  cr_assert_eq (fwrite (b, 3 * 4096, 1, f), 1);
  fclose (f);
  free (b);
  o += snprintf (script + o, sizeof script - o, "jo %s\n", jo);
  for (const char *p = jw_cmds; *p; p++)
    if (p[0] == '$' && p[1] == 'B')
      o += snprintf (script + o, sizeof script - o, "%s", path), p++;
    else
      script[o++] = *p;
  snprintf (script + o, sizeof script - o, "jc\n");
  img_make (w, name, opts, script);
  cr_assert_eq (w->fs->jsb.start, w->fs->jsb.first,
                "debugfs left the log at s_first");
}

static void
img_close (struct img *m)
{
  layout_free (m->lay);
  m->lay = NULL;
  m->fs = NULL;
  if (m->fd >= 0)
    close (m->fd);
  m->fd = -1;
}

static void
read_jblock (const struct img *m, uint64_t lblk, void *buf)
{
  uint64_t off = layout_journal_off (m->fs, lblk);

  cr_assert_neq (off, UINT64_MAX, "journal block %" PRIu64 " mapped", lblk);
  cr_assert_eq (pread (m->fd, buf, m->fs->block_size, off),
                (ssize_t)m->fs->block_size);
}

static void
setup (void)
{
  const char *tmp = getenv ("TMPDIR");

  im.fd = -1;
  dir[0] = 0;
  if (sh ("command -v mkfs.ext4") != 0 || sh ("command -v debugfs") != 0)
    cr_skip_test ("mkfs.ext4 or debugfs is not installed");
  snprintf (dir, sizeof dir, "%s/ext4lazy-jlog-XXXXXX",
            tmp && *tmp ? tmp : "/tmp");
  cr_assert_not_null (mkdtemp (dir));
  img_make (&im, "disk.img", MKFS_OPTS, NULL);
  cr_assert (im.fs->has_journal && im.fs->jsb_valid, "a valid journal");
  bs = im.fs->block_size;
  first = im.fs->jsb.first;
  seq0 = im.fs->jsb.sequence;
  cr_assert_eq (im.fs->jsb.start, 0, "mkfs leaves the log empty");
  cr_assert_eq (im.fs->jsb.blocksize, bs);
  cr_assert_eq (jlog_new (im.fs, pread_cb, &im, &j), 0);
  cr_assert_not_null (j, "a jlog for the image's journal");
}

/* The scratch directory goes first: nothing below depends on it. */
static void
teardown (void)
{
  img_close (&im);
  if (dir[0])
    sh ("rm -rf %s", dir);
  jlog_free (j);
  j = NULL;
}

TestSuite (jlog, .init = setup, .fini = teardown, .timeout = 120);

/* ---- journal blocks --------------------------------------------------- */

static void
put32 (unsigned char *p, uint32_t v)
{
  p[0] = v >> 24;
  p[1] = v >> 16;
  p[2] = v >> 8;
  p[3] = v;
}

static void
header (unsigned char *b, uint32_t type, uint32_t seq)
{
  memset (b, 0, bs);
  put32 (b, JBD2_MAGIC_NUMBER);
  put32 (b + 4, type);
  put32 (b + 8, seq);
}

/* A descriptor with one tag for target: the tag (flags as a big-endian
 * u16 at tag offset 6 in every format), then the 16-byte UUID the first
 * tag carries (zero).
 */
static void
descriptor (unsigned char *b, uint32_t seq, uint64_t target, bool escaped)
{
  unsigned flags = JBD2_FLAG_LAST_TAG | (escaped ? JBD2_FLAG_ESCAPE : 0);

  header (b, 1, seq);
  put32 (b + 12, (uint32_t)target);
  b[12 + 6] = flags >> 8;
  b[12 + 7] = flags & 0xff;
}

static void
commit_block (unsigned char *b, uint32_t seq)
{
  header (b, 2, seq);
}

/* A logged copy: escaped, its first 4 bytes are zero. */
static void
data_block (unsigned char *b, unsigned char fill, bool escaped)
{
  memset (b, fill, bs);
  if (escaped)
    memset (b, 0, 4);
}

/* jlog_write of b at lblk to x; the number of events. */
static int
feed_in (struct jlog *x, uint64_t lblk, const unsigned char *b,
         struct jevent *ev)
{
  int n = jlog_write (x, lblk, b, bs, ev, JFOLLOW_MAX_EVENTS);

  cr_assert_geq (n, 0, "jlog_write %" PRIu64 ": %s", lblk, strerror (-n));
  return n;
}

static int
feed (uint64_t lblk, const unsigned char *b, struct jevent *ev)
{
  return feed_in (j, lblk, b, ev);
}

static const struct jevent *
find_ev (const struct jevent *ev, int n, enum jevent_type type, uint32_t seq)
{
  for (int i = 0; i < n; i++)
    if (ev[i].type == type && ev[i].seq == seq)
      return &ev[i];
  return NULL;
}

/* Feed x a whole transaction at lblk at (descriptor, copy, commit) and
 * return its JE_TX_COMMITTED event (valid until the next jlog_write).
 */
static const struct jevent *
commit_tx_in (struct jlog *x, struct jevent *ev, uint64_t at, uint32_t seq,
              uint64_t target, bool escaped)
{
  unsigned char *b = malloc (bs);
  const struct jevent *c;
  int n;

  cr_assert_not_null (b);
  descriptor (b, seq, target, escaped);
  cr_assert_eq (feed_in (x, at, b, ev), 0);
  data_block (b, 0x5a, escaped);
  cr_assert_eq (feed_in (x, at + 1, b, ev), 0);
  commit_block (b, seq);
  n = feed_in (x, at + 2, b, ev);
  free (b);
  c = find_ev (ev, n, JE_TX_COMMITTED, seq);
  cr_assert_not_null (c, "transaction %" PRIu32 " committed", seq);
  cr_assert (!c->has_unknown, "transaction %" PRIu32 " understood", seq);
  return c;
}

static const struct jevent *
commit_tx (struct jevent *ev, uint64_t at, uint32_t seq, uint64_t target,
           bool escaped)
{
  return commit_tx_in (j, ev, at, seq, target, escaped);
}

/* Record a synthetic committed transaction: one copy of target at lblk. */
static void
add_tx (uint32_t seq, uint64_t target, uint64_t lblk, bool absorbed)
{
  struct jevent ev = { .type = JE_TX_COMMITTED,
                       .seq = seq,
                       .nblocks = 1,
                       .targets = &target,
                       .lblks = &lblk };

  cr_assert_eq (jlog_add (j, &ev, absorbed), 0);
}

/* ---- live copies ------------------------------------------------------ */

struct seen
{
  size_t n;
  int stop; /* what the callback returns */
  uint64_t lblk[8];
  bool escaped[8];
};

static int
record_copy (void *opaque, uint64_t lblk, bool escaped)
{
  struct seen *s = opaque;

  cr_assert_lt (s->n, 8);
  s->lblk[s->n] = lblk;
  s->escaped[s->n++] = escaped;
  return s->stop;
}

static struct seen
copies_in (const struct jlog *x, uint64_t target)
{
  struct seen s = { 0 };

  cr_assert_eq (jlog_live_copies (x, target, record_copy, &s), 0);
  return s;
}

static struct seen
copies (uint64_t target)
{
  return copies_in (j, target);
}

#define T1 300
#define T2 301

/* ---- jlog_new --------------------------------------------------------- */

Test (jlog, new_without_journal)
{
  struct img nj;
  struct jlog *x = j; /* not NULL: jlog_new must clear it */

  img_make (&nj, "nojournal.img", "-b 1024 -O ^has_journal", NULL);
  cr_assert (!nj.fs->has_journal, "mkfs -O ^has_journal");
  cr_assert_eq (jlog_new (nj.fs, pread_cb, &nj, &x), 0);
  cr_assert_null (x, "no jlog without a journal");
  img_close (&nj);
}

Test (jlog, new_refuses_what_it_cannot_follow)
{
  struct ext4_fs c;
  struct jlog *x;

  c = *im.fs;
  c.jsb.blocksize = c.block_size * 2;
  x = j;
  cr_assert_eq (jlog_new (&c, pread_cb, &im, &x), 0);
  cr_assert_null (x, "journal block size differs from the fs block size");

  c = *im.fs;
  c.jsb_valid = false;
  x = j;
  cr_assert_eq (jlog_new (&c, pread_cb, &im, &x), 0);
  cr_assert_null (x, "no valid jbd2 superblock");

  c = *im.fs;
  c.journal_external = true;
  x = j;
  cr_assert_eq (jlog_new (&c, pread_cb, &im, &x), 0);
  cr_assert_null (x, "external journal");

  c = *im.fs;
  c.jsb.feature_incompat |= INCOMPAT_ASYNC_COMMIT;
  x = j;
  cr_assert_eq (jlog_new (&c, pread_cb, &im, &x), 0);
  cr_assert_null (x, "async_commit");

  /* The unchanged copy gives a jlog: the changes above made the
   * difference.
   */
  c = *im.fs;
  x = NULL;
  cr_assert_eq (jlog_new (&c, pread_cb, &im, &x), 0);
  cr_assert_not_null (x, "the image's own journal can be followed");
  jlog_free (x);
}

Test (jlog, new_on_real_journal)
{
  struct jslot s;

  cr_assert (jlog_known (j), "s_start = 0: the live log is known (empty)");
  cr_assert (jlog_is_superblock (j, 0), "lblk 0 is the superblock");
  cr_assert (!jlog_is_superblock (j, first), "the first log block is not");
  cr_assert_eq (jlog_lookup (j, 0, &s), 0);
  cr_assert_eq (s.kind, JS_SUPERBLOCK);
  cr_assert_eq (jlog_lookup (j, first, &s), 0);
  cr_assert_eq (s.kind, JS_UNSEEN, "nothing written yet");
  cr_assert (!jlog_in_open_tx (j, first), "an unseen block is in no tx");
  /* No durable tail seen yet: nothing is behind it. */
  cr_assert (!jlog_behind_tail (j, seq0), "no tail yet");
  cr_assert (!jlog_behind_tail (j, 0xffffffffu), "no tail yet");
}

/* w: one transaction debugfs committed; its jlog made without reading
 * the store.
 */
static struct jlog *
one_tx_unread (struct img *w)
{
  struct jlog *x = NULL;

  img_logged (w, "written.img", MKFS_OPTS, "", "jw -b 100 $B\n");
  cr_assert_eq (jlog_new (w->fs, NULL, NULL, &x), 0);
  cr_assert_not_null (x);
  return x;
}

/* A transaction debugfs wrote: s_start != 0, so older transactions may
 * be live and the log is not known until the superblock says it is
 * empty.
 */
Test (jlog, log_not_empty_is_not_known)
{
  unsigned char *b = malloc (1024);
  unsigned char sb[1024];
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  const struct jevent *c = NULL;
  struct img w;
  struct jlog *x;
  struct jslot s;
  struct seen seen = { 0 };
  uint32_t sq = 0xdeadbeef, st = 0xdeadbeef;
  int n;

  cr_assert_not_null (b);
  x = one_tx_unread (&w);
  cr_assert (!jlog_known (x), "s_start != 0: the live log is not known");

  /* Its own raw superblock: what it records. */
  read_jblock (&w, 0, sb);
  n = jlog_superblock (x, sb, sizeof sb, false, ev, JFOLLOW_MAX_EVENTS, &sq,
                       &st);
  cr_assert_eq (n, 0, "nothing open, no event (%d)", n);
  cr_assert_eq (sq, w.fs->jsb.sequence, "sequence recorded");
  cr_assert_eq (st, first, "start recorded");

  /* Its blocks fed as the client would write them. */
  for (uint64_t k = first; k < first + 3; k++)
    {
      read_jblock (&w, k, b);
      n = jlog_write (x, k, b, 1024, ev, JFOLLOW_MAX_EVENTS);
      cr_assert_geq (n, 0);
      if (k == first + 2)
        c = find_ev (ev, n, JE_TX_COMMITTED, w.fs->jsb.sequence);
    }
  cr_assert_not_null (c, "debugfs's transaction committed");
  cr_assert (!c->has_unknown);
  cr_assert_eq (c->nblocks, 1);
  cr_assert_eq (c->targets[0], 100);
  cr_assert_eq (c->lblks[0], first + 1);
  cr_assert_eq (jlog_add (x, c, false), 0);
  cr_assert (!jlog_known (x), "following one tx does not make it known");

  /* The same superblock again: a tail update, the follower keeps its
   * state.
   */
  n = jlog_superblock (x, sb, sizeof sb, false, ev, JFOLLOW_MAX_EVENTS, &sq,
                       &st);
  cr_assert_eq (n, 0, "a tail update produces no event (%d)", n);
  cr_assert_eq (jlog_lookup (x, first + 1, &s), 0);
  cr_assert_eq (s.kind, JS_DATA, "kept across a tail update");
  cr_assert_eq (s.target, 100);

  /* The durable superblock says the log is empty: known, nothing live. */
  cr_assert_eq (jlog_live_copies (x, 100, record_copy, &seen), 0);
  cr_assert_eq (seen.n, 1);
  jlog_tail (x, w.fs->jsb.sequence + 1, 0);
  cr_assert (jlog_known (x), "s_start = 0 makes the live log known");
  seen.n = 0;
  cr_assert_eq (jlog_live_copies (x, 100, record_copy, &seen), 0);
  cr_assert_eq (seen.n, 0, "nothing live in an empty log");
  jlog_free (x);
  img_close (&w);
  free (b);
}

/* The features jlog_new makes from the parsed superblock are those the
 * raw block gives (the UUID too): the first tail update the client
 * writes after start keeps the follower's state, an open transaction
 * included.
 */
Test (jlog, first_tail_update_keeps_state)
{
  unsigned char *b = malloc (1024);
  unsigned char sb[1024];
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  struct img w;
  struct jlog *x;
  struct jslot s;
  uint32_t sq, st;
  int n;

  cr_assert_not_null (b);
  x = one_tx_unread (&w);
  read_jblock (&w, first, b);
  cr_assert_eq (jlog_write (x, first, b, 1024, ev, JFOLLOW_MAX_EVENTS), 0);
  cr_assert (jlog_in_open_tx (x, first), "its descriptor opens a tx");
  read_jblock (&w, 0, sb);
  n = jlog_superblock (x, sb, sizeof sb, false, ev, JFOLLOW_MAX_EVENTS, &sq,
                       &st);
  cr_assert_eq (n, 0, "a tail update: no event (%d)", n);
  cr_assert_eq (jlog_lookup (x, first, &s), 0);
  cr_assert_eq (s.kind, JS_DESCRIPTOR, "the follower kept its state");
  cr_assert_eq (s.state, JTX_OPEN);
  cr_assert (jlog_in_open_tx (x, first + 1));
  jlog_free (x);
  img_close (&w);
  free (b);
}

/* ---- feeding transactions --------------------------------------------- */

Test (jlog, transaction_events_and_open_tx)
{
  unsigned char *b = malloc (bs);
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  const struct jevent *c;
  struct jslot s;
  int n;

  cr_assert_not_null (b);
  descriptor (b, seq0, T1, false);
  cr_assert_eq (feed (first, b, ev), 0);
  cr_assert (jlog_in_open_tx (j, first), "descriptor of an open tx");
  cr_assert (jlog_in_open_tx (j, first + 1), "described copy of an open tx");
  cr_assert_eq (jlog_lookup (j, first + 1, &s), 0);
  cr_assert_eq (s.kind, JS_DATA);
  cr_assert (!s.written, "the copy has not arrived");

  data_block (b, 0x5a, false);
  cr_assert_eq (feed (first + 1, b, ev), 0);
  cr_assert (jlog_in_open_tx (j, first + 1), "copy of an open tx");
  cr_assert_eq (jlog_lookup (j, first + 1, &s), 0);
  cr_assert_eq (s.kind, JS_DATA);
  cr_assert (s.written);
  cr_assert_eq (s.target, T1);
  cr_assert_eq (s.seq, seq0);
  cr_assert_eq (s.state, JTX_OPEN);

  commit_block (b, seq0);
  n = feed (first + 2, b, ev);
  c = find_ev (ev, n, JE_TX_COMMITTED, seq0);
  cr_assert_not_null (c, "JE_TX_COMMITTED for sequence %" PRIu32, seq0);
  cr_assert (!c->has_unknown);
  cr_assert_eq (c->nblocks, 1);
  cr_assert_eq (c->targets[0], T1);
  cr_assert_eq (c->lblks[0], first + 1);
  for (uint64_t k = first; k < first + 3; k++)
    cr_assert (!jlog_in_open_tx (j, k), "block %" PRIu64 " committed", k);
  cr_assert_eq (jlog_lookup (j, first + 1, &s), 0);
  cr_assert_eq (s.kind, JS_DATA);
  cr_assert_eq (s.target, T1);
  cr_assert_eq (s.state, JTX_COMMITTED);
  cr_assert_eq (jlog_lookup (j, first + 2, &s), 0);
  cr_assert_eq (s.kind, JS_COMMIT);

  /* A block no descriptor claims yet may belong to the next tx. */
  data_block (b, 0x66, false);
  cr_assert_eq (feed (first + 3, b, ev), 0);
  cr_assert_eq (jlog_lookup (j, first + 3, &s), 0);
  cr_assert_eq (s.kind, JS_PENDING);
  cr_assert (jlog_in_open_tx (j, first + 3), "a pending block");
  free (b);
}

/* ---- live and absorbed ------------------------------------------------ */

Test (jlog, live_copies_by_target)
{
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  struct seen s;

  cr_assert_eq (jlog_add (j, commit_tx (ev, first, seq0, T1, false), false), 0);
  s = copies (T1);
  cr_assert_eq (s.n, 1, "one live copy of T1");
  cr_assert_eq (s.lblk[0], first + 1);
  cr_assert (!s.escaped[0]);
  cr_assert_eq (copies (T2).n, 0, "no copy of another target");

  /* A second transaction, its copy escaped: newest last. */
  cr_assert_eq (
      jlog_add (j, commit_tx (ev, first + 3, seq0 + 1, T1, true), false), 0);
  s = copies (T1);
  cr_assert_eq (s.n, 2);
  cr_assert_eq (s.lblk[0], first + 1);
  cr_assert_eq (s.lblk[1], first + 4);
  cr_assert (!s.escaped[0]);
  cr_assert (s.escaped[1], "the escaped flag from the follower");

  /* fn != 0 stops the walk and is returned. */
  memset (&s, 0, sizeof s);
  s.stop = 7;
  cr_assert_eq (jlog_live_copies (j, T1, record_copy, &s), 7);
  cr_assert_eq (s.n, 1, "the walk stopped at the first copy");
  cr_assert_eq (s.lblk[0], first + 1);
}

Test (jlog, absorbed_is_live_once_written_back)
{
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  struct seen s;

  cr_assert_eq (jlog_add (j, commit_tx (ev, first, seq0, T1, false), true), 0);
  cr_assert_eq (copies (T1).n, 0, "absorbed is not live");
  cr_assert_eq (jlog_absorbed_to_live (j), 0);
  s = copies (T1);
  cr_assert_eq (s.n, 1, "live after write-back");
  cr_assert_eq (s.lblk[0], first + 1);
  cr_assert_eq (jlog_absorbed_to_live (j), 0);
  cr_assert_eq (copies (T1).n, 1, "moved once, not again");
}

/* ---- the durable tail ------------------------------------------------- */

Test (jlog, tail_forgets_what_is_behind_it)
{
  add_tx (10, T1, first + 1, false);
  add_tx (10, T2, first + 2, true);
  jlog_tail (j, 10, first);
  cr_assert_eq (copies (T1).n, 1, "a tx at the tail is live");
  cr_assert (!jlog_behind_tail (j, 10));
  cr_assert (jlog_behind_tail (j, 9));
  jlog_tail (j, 11, first);
  cr_assert_eq (copies (T1).n, 0, "a tx behind the tail is forgotten");
  cr_assert (jlog_behind_tail (j, 10));
  cr_assert (!jlog_behind_tail (j, 11));
  cr_assert_eq (jlog_absorbed_to_live (j), 0);
  cr_assert_eq (copies (T2).n, 0, "an absorbed tx behind the tail too");
}

Test (jlog, tail_written_waits_for_flush)
{
  cr_assert (!jlog_flushed (j), "nothing pending");
  add_tx (10, T1, first + 1, false);
  jlog_tail_written (j, 11, first, false);
  cr_assert_eq (copies (T1).n, 1, "not durable yet");
  cr_assert (!jlog_behind_tail (j, 10));
  cr_assert (jlog_flushed (j), "the flush moved the tail");
  cr_assert_eq (copies (T1).n, 0, "forgotten once durable");
  cr_assert (jlog_behind_tail (j, 10));
  cr_assert (!jlog_flushed (j), "only once");

  add_tx (20, T1, first + 1, false);
  jlog_tail_written (j, 21, first, true);
  cr_assert_eq (copies (T1).n, 0, "a FUA superblock is durable at once");
  cr_assert (jlog_behind_tail (j, 20));
  cr_assert (!jlog_flushed (j), "nothing left pending");

  /* A durable superblock replaces one still waiting for a flush. */
  add_tx (30, T1, first + 1, false);
  jlog_tail_written (j, 31, first, false);
  jlog_tail_written (j, 30, first, true);
  cr_assert (!jlog_flushed (j), "the pending tail was superseded");
  cr_assert_eq (copies (T1).n, 1, "tail 30 keeps tx 30");
}

Test (jlog, empty_log_clears_live)
{
  jlog_forget (j);
  cr_assert (!jlog_known (j));
  add_tx (10, T1, first + 1, false);
  jlog_tail (j, 5, first);
  cr_assert_eq (copies (T1).n, 1, "tx 10 is after tail 5");
  cr_assert (!jlog_known (j), "a tail update does not make it known");
  jlog_tail (j, 5, 0);
  cr_assert_eq (copies (T1).n, 0, "s_start = 0: nothing can be replayed");
  cr_assert (jlog_known (j), "s_start = 0: the live log is known");
}

Test (jlog, sequence_wraps)
{
  struct seen s;

  jlog_tail (j, 0xfffffff0u, first);
  add_tx (0xfffffff0u, T1, first + 1, false);
  add_tx (0xffffffffu, T1, first + 2, false);
  add_tx (3, T1, first + 3, false);
  jlog_tail (j, 0xfffffff0u, first);
  cr_assert_eq (copies (T1).n, 3, "3 is after 0xfffffff0");
  cr_assert (!jlog_behind_tail (j, 3));
  cr_assert (!jlog_behind_tail (j, 0xffffffffu));
  cr_assert (jlog_behind_tail (j, 0xffffffefu));

  jlog_tail (j, 3, first);
  s = copies (T1);
  cr_assert_eq (s.n, 1, "0xfffffff0 and 0xffffffff are before 3");
  cr_assert_eq (s.lblk[0], first + 3);
  cr_assert (jlog_behind_tail (j, 0xffffffffu));
  cr_assert (jlog_behind_tail (j, 0xfffffff0u));
  cr_assert (!jlog_behind_tail (j, 3));
  cr_assert (!jlog_behind_tail (j, 4));
}

Test (jlog, forget)
{
  add_tx (10, T1, first + 1, false);
  cr_assert (jlog_known (j));
  cr_assert_eq (copies (T1).n, 1);
  jlog_forget (j);
  cr_assert (!jlog_known (j), "forgotten: not known");
  cr_assert_eq (copies (T1).n, 0, "forgotten: nothing live");
}

/* ---- the journal superblock ------------------------------------------- */

Test (jlog, superblock)
{
  unsigned char *b = malloc (bs), *sb = malloc (bs);
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  uint32_t sq = 0xdeadbeef, st = 0xdeadbeef;
  unsigned seed = 1;
  struct jslot s;
  int n;

  cr_assert_not_null (b);
  cr_assert_not_null (sb);
  read_jblock (&im, 0, sb);

  /* An open transaction, then the image's own superblock (s_start = 0):
   * the follower starts again and reports the tx abandoned.
   */
  descriptor (b, seq0, T1, false);
  cr_assert_eq (feed (first, b, ev), 0);
  data_block (b, 0x5a, false);
  cr_assert_eq (feed (first + 1, b, ev), 0);
  cr_assert (jlog_in_open_tx (j, first));
  n = jlog_superblock (j, sb, bs, false, ev, JFOLLOW_MAX_EVENTS, &sq, &st);
  cr_assert_geq (n, 0, "jlog_superblock: %s", strerror (-n));
  cr_assert_eq (sq, seq0, "the sequence it records");
  cr_assert_eq (st, 0, "the start it records");
  cr_assert_not_null (find_ev (ev, n, JE_TX_ABORTED, seq0),
                      "the open tx is abandoned");
  cr_assert_eq (jlog_lookup (j, first + 1, &s), 0);
  cr_assert_eq (s.kind, JS_UNSEEN, "every position forgotten");
  cr_assert (!jlog_in_open_tx (j, first));

  /* Not a superblock. */
  for (uint32_t k = 0; k < bs; k++)
    b[k] = rand_r (&seed);
  b[0] = 0x11;
  cr_assert_eq (
      jlog_superblock (j, b, bs, false, ev, JFOLLOW_MAX_EVENTS, &sq, &st),
      -EINVAL, "garbage");
  memcpy (b, sb, bs);
  b[0x28 + 3] |= INCOMPAT_ASYNC_COMMIT;
  cr_assert_eq (
      jlog_superblock (j, b, bs, false, ev, JFOLLOW_MAX_EVENTS, &sq, &st),
      -EINVAL, "async_commit");
  cr_assert_eq (
      jlog_superblock (j, sb, 512, false, ev, JFOLLOW_MAX_EVENTS, &sq, &st),
      -EINVAL, "truncated");
  free (b);
  free (sb);
}

static int
count_copy (void *opaque, uint64_t lblk, bool escaped)
{
  (void)lblk;
  (void)escaped;
  ++*(size_t *)opaque;
  return 0;
}

/* Live logged copies of fs blocks [1000, 1000 + n). */
static size_t
live_count (uint64_t n)
{
  size_t c = 0;

  for (uint64_t t = 1000; t < 1000 + n; t++)
    cr_assert_eq (jlog_live_copies (j, t, count_copy, &c), 0);
  return c;
}

/* Tails that never become durable (barrier=0: no FUA, no FLUSH) must
 * not let the live log grow without bound: past the log's size in
 * logged copies it is forgotten, and absorption stops.
 */
Test (jlog, live_log_bounded_by_the_log)
{
  const uint64_t logblocks = im.fs->jsb.maxlen - first;
  uint32_t seq = seq0;

  cr_assert (jlog_known (j));
  jlog_tail_written (j, seq0, first, false); /* never flushed */
  for (uint64_t i = 0; i < logblocks; i++)
    add_tx (seq++, 1000 + i, first + i, false);
  cr_assert (jlog_known (j), "a log's worth is still known");
  cr_assert_eq (live_count (logblocks), logblocks);
  add_tx (seq++, 1000, first, false);
  cr_assert (!jlog_known (j), "one copy more than the log holds");
  cr_assert_eq (live_count (logblocks), 0, "the live log is forgotten");

  /* Absorbed transactions made live count too. */
  jlog_tail (j, seq, 0);
  cr_assert (jlog_known (j));
  for (uint64_t i = 0; i <= logblocks; i++)
    add_tx (seq++, 1000 + i, first + i % logblocks, true);
  cr_assert (jlog_known (j));
  cr_assert_eq (jlog_absorbed_to_live (j), 0);
  cr_assert (!jlog_known (j), "over the bound once live");
  cr_assert_eq (live_count (logblocks + 1), 0);
}

/* ---- a server restarted under a mounted guest ------------------------- */

/* The durable log the store holds at start is read as recovery reads it
 * (jlog_new with a read function).
 */

static void
write_jblock (const struct img *m, uint64_t lblk, const void *buf)
{
  uint64_t off = layout_journal_off (m->fs, lblk);

  cr_assert_neq (off, UINT64_MAX, "journal block %" PRIu64 " mapped", lblk);
  cr_assert_eq (pwrite (m->fd, buf, m->fs->block_size, off),
                (ssize_t)m->fs->block_size);
}

/* A jlog for w made as the engine makes it at start: reading the store. */
static struct jlog *
restarted (struct img *w)
{
  struct jlog *x = NULL;

  cr_assert_eq (jlog_new (w->fs, pread_cb, w, &x), 0);
  cr_assert_not_null (x);
  return x;
}

/* Is there a transaction in ev[0..n) that committed understood? */
static bool
clean_commit (const struct jevent *ev, int n)
{
  for (int i = 0; i < n; i++)
    if (ev[i].type == JE_TX_COMMITTED && !ev[i].has_unknown)
      return true;
  return false;
}

/* Let the raw journal superblock of w say s_sequence seq, s_start start
 * (no journal checksum in MKFS_OPTS to update), then discover it again.
 */
static void
set_log_start (struct img *w, uint32_t seq, uint32_t start)
{
  unsigned char sb[1024];

  read_jblock (w, 0, sb);
  put32 (sb + 0x18, seq);
  put32 (sb + 0x1C, start);
  write_jblock (w, 0, sb);
  img_close (w);
  img_open (w);
  cr_assert_eq (w->fs->jsb.start, start);
}

/* Committed transactions debugfs wrote, s_start != 0: every one is fed
 * and live, the log is known, and the follower's head is right after
 * the last commit.
 */
Test (jlog, restart_follows_the_log)
{
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  unsigned char sb[1024];
  struct img w;
  struct jlog *x;
  struct jslot s;
  struct seen c;
  uint32_t seq, sq, st;

  /* tx 1: descriptor, 100, commit; tx 2: descriptor, 101..103, commit;
   * tx 3: revoke, commit.
   */
  img_logged (&w, "written.img", MKFS_OPTS, "",
              "jw -b 100 $B\njw -b 101,102,103 $B\njw -r 50\n");
  seq = w.fs->jsb.sequence;
  x = restarted (&w);
  cr_assert (jlog_known (x), "the log the store holds was read: known");
  c = copies_in (x, 100);
  cr_assert_eq (c.n, 1, "tx 1 is live");
  cr_assert_eq (c.lblk[0], first + 1);
  for (uint64_t t = 101; t <= 103; t++)
    {
      c = copies_in (x, t);
      cr_assert_eq (c.n, 1, "tx 2's copy of %" PRIu64 " is live", t);
      cr_assert_eq (c.lblk[0], first + 4 + (t - 101));
    }
  cr_assert_eq (jlog_lookup (x, first + 5, &s), 0);
  cr_assert_eq (s.kind, JS_DATA);
  cr_assert_eq (s.target, 102);
  cr_assert_eq (s.state, JTX_COMMITTED);
  cr_assert_eq (jlog_lookup (x, first + 9, &s), 0);
  cr_assert_eq (s.kind, JS_COMMIT, "tx 3's commit");
  for (uint64_t k = first; k < first + 11; k++)
    cr_assert (!jlog_in_open_tx (x, k), "nothing open at %" PRIu64, k);

  /* The client's next transaction, at the head: understood. */
  commit_tx_in (x, ev, first + 10, seq + 3, T1, false);
  cr_assert_eq (copies_in (x, T1).n, 0, "not recorded until jlog_add");

  /* Its superblock written again: a tail update, state kept. */
  read_jblock (&w, 0, sb);
  cr_assert_eq (jlog_superblock (x, sb, sizeof sb, false, ev,
                                 JFOLLOW_MAX_EVENTS, &sq, &st),
                0);
  cr_assert_eq (jlog_lookup (x, first + 1, &s), 0);
  cr_assert_eq (s.kind, JS_DATA, "kept across the first tail update");
  cr_assert (jlog_known (x));
  jlog_free (x);
  img_close (&w);
}

/* A transaction whose commit is not in the store is not fed (recovery
 * would not replay it): the log is known, and when its commit arrives
 * the follower has not seen it start, so it is not understood.
 */
Test (jlog, restart_leaves_an_uncommitted_tx)
{
  unsigned char *b = malloc (bs);
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  struct img w;
  struct jlog *x;
  struct jslot s;
  uint32_t seq;
  int n;

  cr_assert_not_null (b);
  img_logged (&w, "written.img", MKFS_OPTS, "", "jw -b 100 $B\n");
  seq = w.fs->jsb.sequence;
  descriptor (b, seq + 1, T1, false);
  write_jblock (&w, first + 3, b);
  data_block (b, 0x5a, false);
  write_jblock (&w, first + 4, b);
  x = restarted (&w);
  cr_assert (jlog_known (x));
  cr_assert_eq (copies_in (x, 100).n, 1, "the committed tx is live");
  cr_assert_eq (copies_in (x, T1).n, 0, "the uncommitted one is not");
  cr_assert_eq (jlog_lookup (x, first + 3, &s), 0);
  cr_assert_eq (s.kind, JS_UNSEEN, "not fed");
  commit_block (b, seq + 1);
  n = feed_in (x, first + 5, b, ev);
  cr_assert_not (clean_commit (ev, n), "a commit it did not see start");
  /* The next one is understood again. */
  commit_tx_in (x, ev, first + 6, seq + 2, T2, false);
  jlog_free (x);
  img_close (&w);
  free (b);
}

/* At s_start: a block that does not parse, or of a type that has no
 * place in the log, with the expected sequence, is doubt; a block
 * without the magic is where recovery stops (the kernel leaves the tail
 * at its head once everything is checkpointed): known, nothing live.
 */
Test (jlog, restart_at_s_start)
{
  unsigned char *b = malloc (bs);
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  unsigned seed = 7;
  struct img w;
  struct jlog *x;
  struct jslot s;
  uint32_t seq;

  cr_assert_not_null (b);
  img_logged (&w, "written.img", MKFS_OPTS, "", "jw -b 100 $B\n");
  seq = w.fs->jsb.sequence;

  header (b, JBD2_DESCRIPTOR_BLOCK, seq); /* zero tags: not a tag list */
  write_jblock (&w, first, b);
  x = restarted (&w);
  cr_assert_not (jlog_known (x), "a descriptor that does not parse");
  cr_assert_eq (copies_in (x, 100).n, 0);
  cr_assert_eq (jlog_lookup (x, first + 2, &s), 0);
  cr_assert_eq (s.kind, JS_UNSEEN, "the follower starts afresh");
  jlog_free (x);

  header (b, 7, seq);
  write_jblock (&w, first, b);
  x = restarted (&w);
  cr_assert_not (jlog_known (x), "a block type with no place in the log");
  jlog_free (x);

  for (uint32_t k = 0; k < bs; k++)
    b[k] = rand_r (&seed);
  b[0] = 0x11;
  write_jblock (&w, first, b);
  x = restarted (&w);
  cr_assert (jlog_known (x), "no magic: the log ends at s_start");
  cr_assert_eq (copies_in (x, 100).n, 0, "recovery replays nothing");
  commit_tx_in (x, ev, first, seq, T1, false);
  jlog_free (x);
  img_close (&w);
  free (b);
}

/* csum v3: debugfs's checksums verify (descriptor, commit, each logged
 * copy against its tag); a logged copy whose tag checksum does not
 * match makes the log not known.  Recovery's scan pass would not stop
 * there (it does not read logged copies), but its replay pass skips the
 * copy and fails with -EFSBADCRC, and the mount fails: a log recovery
 * refuses is not one to absorb against.  A bad descriptor checksum is
 * doubt too.
 */
Test (jlog, restart_csum_v3)
{
  unsigned char *b = malloc (bs), *keep = malloc (bs);
  struct img w;
  struct jlog *x;

  cr_assert_not_null (b);
  cr_assert_not_null (keep);
  img_logged (&w, "v3.img", "-b 1024 -O metadata_csum,^64bit -J size=1", "-c",
              "jw -b 100 $B\njw -b 101,102 $B\n");
  cr_assert (w.fs->jsb.feature_incompat & JBD2_FEATURE_INCOMPAT_CSUM_V3);
  x = restarted (&w);
  cr_assert (jlog_known (x), "debugfs's checksums verify");
  cr_assert_eq (copies_in (x, 100).n, 1);
  cr_assert_eq (copies_in (x, 102).n, 1);
  jlog_free (x);

  read_jblock (&w, first + 5, keep); /* tx 2's copy of 102 */
  memcpy (b, keep, bs);
  b[100] ^= 0x40;
  write_jblock (&w, first + 5, b);
  x = restarted (&w);
  cr_assert_not (jlog_known (x), "a logged copy that fails its tag csum");
  cr_assert_eq (copies_in (x, 100).n, 0, "nothing live");
  jlog_free (x);
  write_jblock (&w, first + 5, keep);

  read_jblock (&w, first + 3, keep); /* tx 2's descriptor */
  memcpy (b, keep, bs);
  b[12 + 12] ^= 1; /* the first tag's t_checksum */
  write_jblock (&w, first + 3, b);
  x = restarted (&w);
  cr_assert_not (jlog_known (x), "a descriptor that fails its checksum");
  jlog_free (x);
  write_jblock (&w, first + 3, keep);
  x = restarted (&w);
  cr_assert (jlog_known (x), "restored");
  jlog_free (x);
  img_close (&w);
  free (b);
  free (keep);
}

/* A log that wraps from the end of the journal to s_first. */
Test (jlog, restart_wraps)
{
  unsigned char *b = malloc (bs);
  struct jevent ev[JFOLLOW_MAX_EVENTS];
  const uint32_t seq = 1000;
  uint64_t end;
  struct img w;
  struct jlog *x;
  struct seen c;

  cr_assert_not_null (b);
  img_make (&w, "wrap.img", MKFS_OPTS, NULL);
  end = w.fs->jsb.maxlen;
  descriptor (b, seq, T1, true);
  write_jblock (&w, end - 2, b);
  data_block (b, 0x5a, true);
  write_jblock (&w, end - 1, b);
  commit_block (b, seq);
  write_jblock (&w, first, b);
  descriptor (b, seq + 1, T2, false);
  write_jblock (&w, first + 1, b);
  data_block (b, 0x5b, false);
  write_jblock (&w, first + 2, b);
  commit_block (b, seq + 1);
  write_jblock (&w, first + 3, b);
  set_log_start (&w, seq, end - 2);
  x = restarted (&w);
  cr_assert (jlog_known (x));
  c = copies_in (x, T1);
  cr_assert_eq (c.n, 1);
  cr_assert_eq (c.lblk[0], end - 1);
  cr_assert (c.escaped[0], "the escaped flag from the descriptor");
  c = copies_in (x, T2);
  cr_assert_eq (c.n, 1);
  cr_assert_eq (c.lblk[0], first + 2);
  commit_tx_in (x, ev, first + 4, seq + 2, 302, false);
  jlog_free (x);
  img_close (&w);
  free (b);
}

/* Blocks that continue the log all the way round (nothing the kernel
 * writes: it never reuses the tail's space) are doubt, and the scan
 * ends after one lap.
 */
Test (jlog, restart_more_than_the_log)
{
  unsigned char *b = malloc (bs);
  const uint32_t seq = 5000;
  struct img w;
  struct jlog *x;
  uint64_t end;

  cr_assert_not_null (b);
  img_make (&w, "full.img", MKFS_OPTS, NULL);
  end = w.fs->jsb.maxlen;
  for (uint64_t k = first; k < end; k++)
    {
      commit_block (b, seq + (uint32_t)(k - first));
      write_jblock (&w, k, b);
    }
  set_log_start (&w, seq, first);
  x = restarted (&w);
  cr_assert_not (jlog_known (x), "more blocks than the log holds");
  jlog_free (x);
  img_close (&w);
  free (b);
}

/* A read error is doubt. */
struct failing
{
  struct img *m;
  uint64_t off; /* the read that fails */
};

static int
failing_read (void *opaque, void *buf, size_t len, uint64_t off)
{
  struct failing *f = opaque;

  if (off == f->off)
    return -EIO;
  return pread_cb (f->m, buf, len, off);
}

Test (jlog, restart_read_error)
{
  struct img w;
  struct jlog *x = NULL;
  struct failing f = { .m = &w };

  img_logged (&w, "written.img", MKFS_OPTS, "", "jw -b 100 $B\n");
  for (uint64_t k = first; k < first + 4; k++)
    {
      f.off = layout_journal_off (w.fs, k);
      cr_assert_eq (jlog_new (w.fs, failing_read, &f, &x), 0);
      cr_assert_not_null (x);
      cr_assert_not (jlog_known (x), "a read error at %" PRIu64, k);
      cr_assert_eq (copies_in (x, 100).n, 0);
      jlog_free (x);
    }
  jlog_free (restarted (&w));
  img_close (&w);
}
