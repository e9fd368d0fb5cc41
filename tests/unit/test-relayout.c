/* SPDX-License-Identifier: BSD-3-Clause */
/* test-relayout.c --- re-reading the layout under injected allocation
 * failures.
 *
 * After a client write that may change the layout (a reserved GDT
 * block here, a new filesystem), the next write re-reads the layout:
 * discovery, new counters, the jlogs of the journals followed.  Whatever
 * allocation fails on that path, the engine keeps its previous layout,
 * counters, jlogs and holds, and the next write tries again.
 *
 * This test is linked with -Wl,--wrap=malloc,--wrap=calloc,
 * --wrap=realloc: the allocations of the engine's objects and of the
 * test's own go through the wrappers below, which fail the N-th one
 * once the test arms them (libext2fs's own allocations are not
 * wrapped).  Each test runs rounds N = 0, 1, 2, ... from the same
 * state until a round's write makes fewer than N + 1 allocations.
 *
 * Journal transactions come from debugfs (jo/jw/jc) on standalone
 * copies of filesystem A: T1 logs an atime change of /f1's inode-table
 * block, T1b another atime change after it, T2 a mode change (real)
 * after that.  The client writes their journal blocks through the
 * engine, as the kernel would.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "engine.h"
#include "log.h"
#include "stats.h"
#include "testutil.h"

/* ---- allocations that fail on demand -------------------------------- */

void *__real_malloc (size_t size);
void *__real_calloc (size_t n, size_t size);
void *__real_realloc (void *p, size_t size);
void *__wrap_malloc (size_t size);
void *__wrap_calloc (size_t n, size_t size);
void *__wrap_realloc (void *p, size_t size);

/* Allocations to let through before one fails; -1: disarmed.  The
 * engine runs on the test's thread only (no engine_start), so no lock.
 */
static long alloc_countdown = -1;
static bool alloc_failed;

static bool
fail_this_one (void)
{
  if (alloc_countdown < 0)
    return false;
  if (alloc_countdown-- > 0)
    return false;
  /* The countdown is at -1 again: only this one fails. */
  alloc_failed = true;
  return true;
}

void *
__wrap_malloc (size_t size)
{
  return fail_this_one () ? NULL : __real_malloc (size);
}

void *
__wrap_calloc (size_t n, size_t size)
{
  return fail_this_one () ? NULL : __real_calloc (n, size);
}

void *
__wrap_realloc (void *p, size_t size)
{
  return fail_this_one () ? NULL : __real_realloc (p, size);
}

/* Fail the n-th allocation from now (0: the next one). */
static void
arm (long n)
{
  alloc_failed = false;
  alloc_countdown = n;
}

/* Disarm; did an allocation fail? */
static bool
disarm (void)
{
  alloc_countdown = -1;
  return alloc_failed;
}

/* ---- images --------------------------------------------------------- */

#define BS 4096
#define MiB (1024 * 1024ull)
#define MAX_TX_BLOCKS 8
#define MAX_ROUNDS 5000

static char dir[96];
static char a0[128], a1[128], a2[128], a3[128]; /* filesystem A, by stage */
static char bimg[128];                          /* filesystem B, standalone */
static char pristine[128]; /* the disk every round starts from */
static char disk[128];     /* the served disk */
static uint64_t base;      /* device offset of A */
static uint64_t quiet;     /* a free block of A: the trigger write */

/* The journal blocks a transaction wrote: device offsets, and the
 * content before and after.
 */
struct tx
{
  int n;
  uint64_t off[MAX_TX_BLOCKS];
  char old[MAX_TX_BLOCKS][BS];
  char blk[MAX_TX_BLOCKS][BS];
};

static struct tx T1, T1b, T2;

/* The engine's notices (out of memory, ...) would flood stderr. */
static void
drop_notices (enum log_level level, const char *msg)
{
  (void)level;
  (void)msg;
}

static void
sh_ok (const char *cmd)
{
  cr_assert_eq (sh ("%s", cmd), 0, "command failed: %s", cmd);
}

static void
need_tools (void)
{
  if (sh ("command -v mkfs.ext4 debugfs sfdisk") != 0)
    cr_skip_test ("mkfs.ext4, debugfs or sfdisk not installed");
}

static void
pread_file (const char *path, void *buf, size_t len, uint64_t off)
{
  int fd = open (path, O_RDONLY);

  cr_assert_geq (fd, 0, "open %s", path);
  cr_assert_eq (pread (fd, buf, len, off), (ssize_t)len);
  close (fd);
}

static void
pwrite_file (const char *path, const void *buf, size_t len, uint64_t off)
{
  int fd = open (path, O_WRONLY);

  cr_assert_geq (fd, 0, "open %s", path);
  cr_assert_eq (pwrite (fd, buf, len, off), (ssize_t)len);
  close (fd);
}

/* The first unsigned number in the output of cmd. */
static unsigned long long
number_from (const char *cmd)
{
  char *out = capture ("%s", cmd);
  unsigned long long v;

  cr_assert_eq (sscanf (out, "%llu", &v), 1, "no number from: %s", cmd);
  free (out);
  return v;
}

/* Offset in A of the inode-table block holding /name's inode. */
static uint64_t
inode_block (const char *name)
{
  char cmd[1024];

  snprintf (cmd, sizeof cmd,
            "debugfs -R 'imap /%s' %s 2>/dev/null | "
            "sed -n 's/.*located at block \\([0-9]*\\),.*/\\1/p'",
            name, a0);
  return number_from (cmd) * BS;
}

/* `to` = `from` plus one journal transaction logging the block at off
 * (an offset in the image) as debugfs leaves it after field_cmd.
 */
static void
journal_tx (const char *from, const char *to, const char *field_cmd,
            uint64_t off)
{
  char cmd[1024], blk[BS], scratch[128], txblock[128];

  snprintf (scratch, sizeof scratch, "%s/scratch.img", dir);
  snprintf (txblock, sizeof txblock, "%s/txblock", dir);
  snprintf (cmd, sizeof cmd, "cp %s %s && debugfs -w -R '%s' %s", from, scratch,
            field_cmd, scratch);
  sh_ok (cmd);
  pread_file (scratch, blk, BS, off);
  snprintf (cmd, sizeof cmd, "cp %s %s && : > %s", from, to, txblock);
  sh_ok (cmd);
  pwrite_file (txblock, blk, BS, 0);
  snprintf (cmd, sizeof cmd,
            "printf 'jo\\njw -b %llu %s\\njc\\n' > %s/txscript && "
            "debugfs -w -f %s/txscript %s",
            (unsigned long long)(off / BS), txblock, dir, dir, to);
  sh_ok (cmd);
}

/* A's journal blocks, in logical order. */
static unsigned long long jblk[2048];
static int njblk;

static void
journal_blocks (void)
{
  char *out = capture ("debugfs -R 'blocks <8>' %s 2>/dev/null", a0);
  char *p = out, *end;

  njblk = 0;
  for (;;)
    {
      unsigned long long v = strtoull (p, &end, 10);

      if (end == p || njblk == 2048)
        break;
      jblk[njblk++] = v;
      p = end;
    }
  free (out);
  cr_assert_gt (njblk, 16, "journal blocks from debugfs");
}

/* The journal blocks (the superblock left out) where from and to
 * differ: the transaction that made to.
 */
static void
diff_tx (const char *from, const char *to, struct tx *t)
{
  t->n = 0;
  for (int i = 1; i < njblk; i++)
    {
      char a[BS], b[BS];

      pread_file (from, a, BS, jblk[i] * BS);
      pread_file (to, b, BS, jblk[i] * BS);
      if (memcmp (a, b, BS) == 0)
        continue;
      cr_assert_lt (t->n, MAX_TX_BLOCKS);
      t->off[t->n] = base + jblk[i] * BS;
      memcpy (t->old[t->n], a, BS);
      memcpy (t->blk[t->n], b, BS);
      t->n++;
    }
  cr_assert_geq (t->n, 3, "descriptor, logged copy and commit");
}

/* A: 32 MiB, 4 KiB blocks, a journal, 40 small files; the stages a0
 * to a3 with T1, T1b and T2 logged.  A sits at device offset a_off.
 */
static void
make_a (uint64_t a_off)
{
  char cmd[1024];
  uint64_t off;

  need_tools ();
  snprintf (dir, sizeof dir, "%s/ext4lazy-relayout-XXXXXX",
            getenv ("TMPDIR") ? getenv ("TMPDIR") : "/tmp");
  cr_assert_not_null (mkdtemp (dir));
  snprintf (a0, sizeof a0, "%s/a0.img", dir);
  snprintf (a1, sizeof a1, "%s/a1.img", dir);
  snprintf (a2, sizeof a2, "%s/a2.img", dir);
  snprintf (a3, sizeof a3, "%s/a3.img", dir);
  snprintf (bimg, sizeof bimg, "%s/b.img", dir);
  snprintf (pristine, sizeof pristine, "%s/pristine.img", dir);
  snprintf (disk, sizeof disk, "%s/disk.img", dir);
  snprintf (cmd, sizeof cmd,
            "mkdir %s/root && for i in $(seq 1 40); do echo file $i > "
            "%s/root/f$i; done && mkfs.ext4 -q -F -b 4096 -I 256 -O "
            "has_journal -d %s/root %s 32M",
            dir, dir, dir, a0);
  sh_ok (cmd);
  base = a_off;

  off = inode_block ("f1");
  journal_tx (a0, a1, "set_inode_field /f1 atime 20200101", off);
  journal_tx (a1, a2, "set_inode_field /f1 atime 20210101", off);
  journal_tx (a2, a3, "set_inode_field /f1 mode 0100600", off);
  journal_blocks ();
  diff_tx (a0, a1, &T1);
  diff_tx (a1, a2, &T1b);
  diff_tx (a2, a3, &T2);

  /* The last block of A is free: neither inode table nor journal nor
   * anything watched.
   */
  snprintf (cmd, sizeof cmd,
            "debugfs -R 'testb %llu' %s 2>&1 | grep -q 'not in use'",
            32 * MiB / BS - 1, a0);
  sh_ok (cmd);
  quiet = a_off + 32 * MiB - BS;
  log_set_sink (drop_notices);
}

/* B: 16 MiB with a journal. */
static void
make_b (void)
{
  char cmd[1024];

  snprintf (cmd, sizeof cmd,
            "mkfs.ext4 -q -F -b 4096 -I 256 -O has_journal %s 16M", bimg);
  sh_ok (cmd);
}

/* B's journal says async_commit, which the engine does not follow: its
 * jlog is NULL, and each re-read tries (and allocates) again.
 */
static void
b_async_commit (void)
{
  char cmd[1024];
  unsigned char sb[BS];
  uint64_t at;

  snprintf (cmd, sizeof cmd, "debugfs -R 'bmap <8> 0' %s 2>/dev/null", bimg);
  at = number_from (cmd) * BS;
  pread_file (bimg, sb, BS, at);
  cr_assert_eq ((uint32_t)sb[0] << 24 | (uint32_t)sb[1] << 16
                    | (uint32_t)sb[2] << 8 | sb[3],
                0xc03b3998u, "a jbd2 superblock");
  cr_assert_eq (sb[0xfc] | sb[0xfd] | sb[0xfe] | sb[0xff], 0,
                "no superblock checksum to fix");
  sb[0x2b] |= 0x04; /* s_feature_incompat: ASYNC_COMMIT */
  pwrite_file (bimg, sb, BS, at);
}

/* An MBR with A at 1 MiB (32 MiB) and a 16 MiB partition at 33 MiB
 * holding B, or nothing if b is NULL.
 */
static void
make_two_partitions (const char *b)
{
  char cmd[1024];

  snprintf (cmd, sizeof cmd,
            "truncate -s 50M %s && printf 'label: dos\\nstart=2048, "
            "size=65536, type=83\\nstart=67584, size=32768, type=83\\n' | "
            "sfdisk -q %s && dd if=%s of=%s bs=1M seek=1 conv=notrunc",
            pristine, pristine, a0, pristine);
  sh_ok (cmd);
  if (b)
    {
      snprintf (cmd, sizeof cmd, "dd if=%s of=%s bs=1M seek=33 conv=notrunc", b,
                pristine);
      sh_ok (cmd);
    }
}

static void
setup_one_fs (void)
{
  char cmd[1024];

  make_a (0);
  snprintf (cmd, sizeof cmd, "cp %s %s", a0, pristine);
  sh_ok (cmd);
}

static void
setup_two_fs_async (void)
{
  make_a (MiB);
  make_b ();
  b_async_commit ();
  make_two_partitions (bimg);
}

static void
setup_two_fs_blank (void)
{
  make_a (MiB);
  make_b ();
  make_two_partitions (NULL);
}

static void
teardown (void)
{
  char cmd[1024];

  log_set_sink (NULL);
  if (!dir[0])
    return;
  snprintf (cmd, sizeof cmd, "rm -rf %s", dir);
  if (sh ("%s", cmd) != 0)
    fprintf (stderr, "cleanup of %s failed\n", dir);
}

/* ---- the engine ----------------------------------------------------- */

static struct engine *
open_atime (void)
{
  struct engine_config cfg = {
    .store = { .path = disk, .kind = BACKEND_URING },
    .policy = POLICY_ATIME,
    .max_age_ns = ENGINE_DEFAULT_MAX_AGE_NS,
    .max_held = ENGINE_DEFAULT_MAX_HELD,
  };
  struct engine *e;
  int r = engine_open (&cfg, &e);

  cr_assert_eq (r, 0, "engine_open: %s", strerror (-r));
  return e;
}

/* What engine_stats says, per instance ("other" last). */
struct snap
{
  size_t n;
  struct fs_stats c[4];
  uint64_t held[4];
  bool journal[4];
};

static struct snap
snap (struct engine *e)
{
  struct stats_snapshot s;
  struct snap out = { 0 };

  cr_assert_eq (engine_stats (e, &s), 0);
  cr_assert_leq (s.n, 4);
  out.n = s.n;
  for (size_t i = 0; i < s.n; i++)
    {
      out.c[i] = s.fs[i].c;
      out.held[i] = s.fs[i].held_blocks;
      out.journal[i] = s.fs[i].journal;
    }
  engine_stats_free (&s);
  return out;
}

/* The counters of a and b agree but for what the trigger write and a
 * write-back for the layout may add.
 */
static bool
same_counters (struct fs_stats a, struct fs_stats b)
{
  a.client_writes = b.client_writes = 0;
  a.writeback[WB_LAYOUT] = b.writeback[WB_LAYOUT] = 0;
  a.writeback_batches = b.writeback_batches = 0;
  return memcmp (&a, &b, sizeof a) == 0;
}

static void
replay (struct engine *e, const struct tx *t)
{
  for (int i = 0; i < t->n; i++)
    {
      int r = engine_pwrite (e, t->blk[i], BS, t->off[i], 0);

      cr_assert_eq (r, 0, "journal write at %" PRIu64 ": %s", t->off[i],
                    strerror (-r));
    }
}

/* The client reads what it wrote; in_store: so does the store. */
static void
check_tx_content (struct engine *e, const struct tx *t, bool in_store)
{
  char back[BS];

  for (int i = 0; i < t->n; i++)
    {
      if (e)
        {
          cr_assert_eq (engine_pread (e, back, BS, t->off[i]), 0);
          cr_assert_eq (memcmp (back, t->blk[i], BS), 0,
                        "the client reads the journal block it wrote");
        }
      pread_file (disk, back, BS, t->off[i]);
      cr_assert_eq (memcmp (back, in_store ? t->blk[i] : t->old[i], BS), 0,
                    "the store %s the journal block at %" PRIu64,
                    in_store ? "has" : "does not have yet", t->off[i]);
    }
}

/* A round starts from the pristine disk with an engine (policy=atime)
 * that absorbed T1.
 */
static struct engine *
round_start (void)
{
  char cmd[1024];
  struct engine *e;
  struct snap s;

  snprintf (cmd, sizeof cmd, "cp --sparse=always %s %s", pristine, disk);
  sh_ok (cmd);
  e = open_atime ();
  replay (e, &T1);
  s = snap (e);
  cr_assert_eq (s.c[0].tx_absorbed, 1, "an atime-only transaction");
  cr_assert_eq (s.held[0], (uint64_t)T1.n);
  return e;
}

/* The trigger: the client rewrites A's free last block as it is.  The
 * write itself allocates nothing; the re-read before it does.
 */
static int
trigger (struct engine *e)
{
  static char blk[BS];

  pread_file (disk, blk, BS, quiet);
  return engine_pwrite (e, blk, BS, quiet, 0);
}

/* ---- the layout does not change ------------------------------------- */

/* Offset in A of its first reserved GDT block: a write there always
 * makes the engine re-read the layout, whatever it writes.
 */
static uint64_t
reserved_gdt (void)
{
  char cmd[1024];

  snprintf (cmd, sizeof cmd,
            "dumpe2fs %s 2>/dev/null | sed -n 's/.*Reserved GDT blocks at "
            "\\([0-9]*\\)-.*/\\1/p' | head -1",
            a0);
  return number_from (cmd) * BS;
}

/* One round: T1 absorbed, the client rewrites a reserved GDT block of
 * A with its own bytes (the layout is stale), and the next write
 * re-reads it with allocation n failing.  Returns whether one failed.
 */
static bool
unchanged_round (long n)
{
  char gdt[BS];
  struct engine *e = round_start ();
  struct snap s0, s;
  bool failed;
  int r;

  pread_file (disk, gdt, sizeof gdt, base + reserved_gdt ());
  cr_assert_eq (engine_pwrite (e, gdt, sizeof gdt, base + reserved_gdt (), 0),
                0);
  s0 = snap (e);

  arm (n);
  r = trigger (e);
  failed = disarm ();
  cr_assert (r == 0 || r == -ENOMEM, "round %ld: %s", n, strerror (-r));
  cr_assert (failed || r == 0, "round %ld: -ENOMEM with no failed allocation",
             n);

  /* Same filesystems, counters and holds. */
  s = snap (e);
  cr_assert_eq (s.n, s0.n, "round %ld: the filesystems", n);
  for (size_t i = 0; i < s.n; i++)
    {
      cr_assert (same_counters (s.c[i], s0.c[i]),
                 "round %ld: the counters of instance %zu", n, i);
      cr_assert_eq (s.held[i], s0.held[i], "round %ld: holds of %zu", n, i);
      cr_assert_eq (s.c[i].writeback[WB_LAYOUT], 0, "round %ld", n);
    }

  /* The held blocks read back; a FLUSH keeps the absorbed transaction
   * under policy=atime.
   */
  check_tx_content (e, &T1, false);
  cr_assert_eq (engine_flush (e), 0);
  check_tx_content (e, &T1, false);
  cr_assert_eq (snap (e).held[0], (uint64_t)T1.n, "round %ld", n);

  /* The engine still follows A's journal where it was: the next
   * atime-only transaction (which re-reads the layout first if the
   * round's write could not) is understood and absorbed, and a real
   * one writes both absorbed ones first, with its own blocks held
   * until its commit.
   */
  replay (e, &T1b);
  s = snap (e);
  cr_assert_eq (s.c[0].tx_absorbed, 2,
                "round %ld: T1b not absorbed (tx_real %" PRIu64
                "): A's journal is no longer followed from where it was",
                n, s.c[0].tx_real);
  replay (e, &T2);
  s = snap (e);
  cr_assert_eq (s.c[0].tx_real, 1, "round %ld", n);
  cr_assert_eq (s.c[0].writeback[WB_JOURNAL],
                (uint64_t)(T1.n + T1b.n + T2.n - 1),
                "round %ld: the absorbed transactions went first (%" PRIu64
                " blocks written back, %d + %d absorbed)",
                n, s.c[0].writeback[WB_JOURNAL], T1.n, T1b.n);
  cr_assert_eq (s.held[0], 0, "round %ld", n);
  check_tx_content (e, &T1, true);
  check_tx_content (e, &T1b, true);
  check_tx_content (e, &T2, true);
  engine_close (e);
  return failed;
}

static void
unchanged_rounds (void)
{
  long n;

  for (n = 0; n < MAX_ROUNDS && unchanged_round (n); n++)
    ;
  cr_assert_lt (n, MAX_ROUNDS);
  cr_assert_gt (n, 0, "the re-read allocates");
  cr_log_info ("allocations failed in turn: 0 to %ld", n - 1);
}

TestSuite (relayout, .fini = teardown, .timeout = 300);

/* One journaled filesystem over the whole device. */
Test (relayout, unchanged_layout, .init = setup_one_fs)
{
  unchanged_rounds ();
}

/* A, then B whose journal is not followed (async_commit): each re-read
 * takes A's jlog over, then allocates for B.  A failure there gives
 * A's jlog back.
 */
Test (relayout, unchanged_layout_second_fs, .init = setup_two_fs_async)
{
  char cmd[1024];
  struct engine *e;
  struct snap s;

  /* Both are filesystems with a journal. */
  snprintf (cmd, sizeof cmd, "cp --sparse=always %s %s", pristine, disk);
  sh_ok (cmd);
  e = open_atime ();
  s = snap (e);
  cr_assert_eq (s.n, 2, "A and B (no \"other\": nothing was written there)");
  cr_assert (s.journal[0] && s.journal[1]);
  engine_close (e);
  unchanged_rounds ();
}

/* ---- the layout changes --------------------------------------------- */

/* One round: T1 absorbed, the client makes a filesystem (B, with a
 * journal) in the blank second partition, and the next write re-reads
 * the layout with allocation n failing: a new filesystem, so the holds
 * are written back, new counters made and B's jlog too.  Returns
 * whether an allocation failed.
 */
static bool
new_fs_round (long n, const char *b, size_t blen)
{
  struct engine *e = round_start ();
  struct snap s0, s;
  bool failed, absorbs = true;
  uint64_t real;
  int r;

  cr_assert_eq (engine_pwrite (e, b, blen, 33 * MiB, 0), 0);
  s0 = snap (e);
  cr_assert_eq (s0.n, 2, "A and other");

  arm (n);
  r = trigger (e);
  failed = disarm ();
  cr_assert (r == 0 || r == -ENOMEM, "round %ld: %s", n, strerror (-r));
  cr_assert (failed || r == 0, "round %ld: -ENOMEM with no failed allocation",
             n);
  s = snap (e);
  if (r < 0)
    {
      /* The old layout and its counters, intact; the holds are either
       * still held or written back for the new layout.
       */
      cr_assert_eq (s.n, 2, "round %ld: the old filesystems", n);
      for (size_t i = 0; i < s.n; i++)
        cr_assert (same_counters (s.c[i], s0.c[i]),
                   "round %ld: the counters of instance %zu", n, i);
      cr_assert_eq (s.c[0].tx_absorbed, 1, "round %ld", n);
      cr_assert_eq (s.held[0] + s.c[0].writeback[WB_LAYOUT], (uint64_t)T1.n,
                    "round %ld: held or written back", n);
      check_tx_content (e, &T1, s.held[0] == 0);
      if (s.held[0] > 0)
        {
          cr_assert_eq (engine_flush (e), 0);
          check_tx_content (e, &T1, false);
        }
      /* The next write re-reads the layout. */
      cr_assert_eq (trigger (e), 0, "round %ld", n);
      s = snap (e);
    }
  else if (failed)
    {
      /* A failure the re-read survives by design: making T1 live after
       * its write-back for the layout (jlog_absorbed_to_live; the jlog
       * forgets the live log and absorbs nothing until it is empty).
       */
      cr_log_info ("round %ld: the re-read went on after the failure", n);
      absorbs = false;
    }
  cr_assert_eq (s.n, 3, "round %ld: A, B and other", n);
  cr_assert (s.journal[1], "round %ld: B has a journal", n);
  cr_assert_eq (s.held[0], 0, "round %ld: written back for the layout", n);
  cr_assert_eq (s.c[2].writeback_batches, s0.c[1].writeback_batches + 1,
                "round %ld: other's counters carry over", n);
  check_tx_content (e, &T1, true);

  /* A's journal is still followed where it was. */
  replay (e, &T1b);
  s = snap (e);
  if (absorbs)
    cr_assert_eq (s.c[0].tx_absorbed, 1,
                  "round %ld: T1b not absorbed (tx_real %" PRIu64
                  "): A's journal is no longer followed from where it was",
                  n, s.c[0].tx_real);
  else
    cr_assert_eq (s.c[0].tx_absorbed + s.c[0].tx_real, 1, "round %ld", n);
  real = s.c[0].tx_real;
  replay (e, &T2);
  s = snap (e);
  cr_assert_eq (s.c[0].tx_real, real + 1, "round %ld", n);
  if (absorbs)
    cr_assert_eq (s.c[0].writeback[WB_JOURNAL], (uint64_t)(T1b.n + T2.n - 1),
                  "round %ld: the absorbed transaction went first (%" PRIu64
                  " blocks written back, %d held)",
                  n, s.c[0].writeback[WB_JOURNAL], T1b.n);
  cr_assert_eq (s.held[0], 0, "round %ld", n);
  check_tx_content (e, &T1b, true);
  check_tx_content (e, &T2, true);
  engine_close (e);
  return failed;
}

Test (relayout, new_filesystem, .init = setup_two_fs_blank)
{
  size_t blen = 16 * MiB;
  char *b = malloc (blen);
  long n;

  cr_assert_not_null (b);
  pread_file (bimg, b, blen, 0);
  for (n = 0; n < MAX_ROUNDS && new_fs_round (n, b, blen); n++)
    ;
  free (b);
  cr_assert_lt (n, MAX_ROUNDS);
  cr_assert_gt (n, 0, "the re-read allocates");
  cr_log_info ("allocations failed in turn: 0 to %ld", n - 1);
}
