/* SPDX-License-Identifier: BSD-3-Clause */
/* e2e-guest.c --- static helper run inside the end-to-end test guest (and on
   the host to prepare and check trees): writes, modifies, scans and verifies
   files with deterministic contents, and reads window marker blocks.

   Every file's contents are a function of (seed, file number, size), so any
   side can recompute what a file must hold.  Results are printed as
   "E2E-RESULT: ..." lines, which the host harness parses.  */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FILES_PER_DIR 100
#define MARKER_SIZE 4096

/* What "modify" does to original file I (and what "verify modified"
   expects): one file in seven is deleted, one is rewritten shorter with
   another pattern, one is renamed; one new file per four originals.  */
enum fate
{
  FATE_KEEP,
  FATE_DELETE,
  FATE_REWRITE,
  FATE_RENAME,
};

static enum fate
fate_of (unsigned long i)
{
  switch (i % 7)
    {
    case 3:
      return FATE_DELETE;
    case 5:
      return FATE_REWRITE;
    case 6:
      return FATE_RENAME;
    default:
      return FATE_KEEP;
    }
}

#define REWRITE_SEED(seed) ((seed) ^ 0x5a5a5a5aUL)
#define NEW_SEED(seed) ((seed) + 7)
#define REWRITE_SIZE(size) ((size) / 2 + 1)
#define NEW_SIZE(size) ((size) * 2 + 17)

/* Problems reported so far: after MAX_REPORTS, only the summary line
   counts them, so that a broken tree does not flood a slow console.  */
#define MAX_REPORTS 20
static unsigned reports;

static void
report (const char *what, const char *path)
{
  if (++reports <= MAX_REPORTS)
    printf ("E2E-RESULT: mismatch %s%s\n", path, what);
}

static void
fail (const char *what, const char *path)
{
  if (++reports > MAX_REPORTS)
    return;
  printf ("E2E-RESULT: error %s %s: %s\n", what, path ? path : "",
          strerror (errno));
  fflush (stdout);
}

static unsigned long
parse_ul (const char *s, const char *name)
{
  char *end;
  unsigned long v;

  errno = 0;
  v = strtoul (s, &end, 0);
  if (errno || *s == '\0' || *end != '\0')
    {
      fprintf (stderr, "e2e-guest: bad %s: %s\n", name, s);
      exit (2);
    }
  return v;
}

/* Fill BUF (LEN bytes) with the pattern of file I under SEED: a xorshift64
   stream seeded from both, so that files and positions all differ.  */
static void
pattern_fill (unsigned char *buf, size_t len, unsigned long seed,
              unsigned long i)
{
  uint64_t x = ((uint64_t)seed << 32) ^ (i * 0x9e3779b97f4a7c15ULL) ^ 1;
  size_t p;

  for (p = 0; p < len; p++)
    {
      if (p % 8 == 0)
        {
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
        }
      buf[p] = (unsigned char)(x >> (8 * (p % 8)));
    }
}

static void
orig_path (char *out, size_t n, const char *dir, unsigned long i)
{
  snprintf (out, n, "%s/d%03lu/f%05lu", dir, i / FILES_PER_DIR, i);
}

static void
renamed_path (char *out, size_t n, const char *dir, unsigned long i)
{
  snprintf (out, n, "%s/d%03lu/f%05lu.renamed", dir, i / FILES_PER_DIR, i);
}

static void
new_path (char *out, size_t n, const char *dir, unsigned long i)
{
  snprintf (out, n, "%s/new/n%05lu", dir, i);
}

static int
mkdir_p1 (const char *path)
{
  if (mkdir (path, 0755) == -1 && errno != EEXIST)
    {
      fail ("mkdir", path);
      return -1;
    }
  return 0;
}

/* Create PATH holding SIZE bytes of the pattern of file I under SEED.  */
static int
write_file (const char *path, size_t size, unsigned long seed, unsigned long i)
{
  unsigned char *buf = malloc (size ? size : 1);
  int fd, r = -1;
  size_t done = 0;

  if (!buf)
    return -1;
  pattern_fill (buf, size, seed, i);
  fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd == -1)
    {
      fail ("open", path);
      goto out;
    }
  while (done < size)
    {
      ssize_t w = write (fd, buf + done, size - done);
      if (w <= 0)
        {
          fail ("write", path);
          close (fd);
          goto out;
        }
      done += (size_t)w;
    }
  if (close (fd) == -1)
    {
      fail ("close", path);
      goto out;
    }
  r = 0;
out:
  free (buf);
  return r;
}

/* Read PATH whole.  If EXPECT_SIZE is not (size_t)-1, check that the file
   holds exactly the pattern of file I under SEED.  Adds the bytes read to
   *TOTAL.  Returns 0, -1 on an I/O error, 1 on a content mismatch.  */
static int
read_file (const char *path, size_t expect_size, unsigned long seed,
           unsigned long i, uint64_t *total)
{
  unsigned char buf[16384];
  unsigned char *want = NULL;
  int fd, r = 0;
  size_t off = 0;

  if (expect_size != (size_t)-1)
    {
      want = malloc (expect_size ? expect_size : 1);
      if (!want)
        return -1;
      pattern_fill (want, expect_size, seed, i);
    }
  fd = open (path, O_RDONLY);
  if (fd == -1)
    {
      fail ("open", path);
      free (want);
      return -1;
    }
  for (;;)
    {
      ssize_t n = read (fd, buf, sizeof buf);
      if (n < 0)
        {
          fail ("read", path);
          r = -1;
          break;
        }
      if (n == 0)
        break;
      if (want
          && (off + (size_t)n > expect_size
              || memcmp (want + off, buf, (size_t)n) != 0))
        {
          r = 1;
          break;
        }
      off += (size_t)n;
      *total += (uint64_t)n;
    }
  close (fd);
  if (r == 0 && want && off != expect_size)
    r = 1;
  if (r == 1)
    report ("", path);
  free (want);
  return r;
}

static bool
exists (const char *path)
{
  struct stat st;
  return lstat (path, &st) == 0;
}

static int
sync_tree (const char *dir)
{
  int fd = open (dir, O_RDONLY | O_DIRECTORY);

  if (fd == -1)
    {
      fail ("open", dir);
      return -1;
    }
  if (syncfs (fd) == -1)
    {
      fail ("syncfs", dir);
      close (fd);
      return -1;
    }
  close (fd);
  sync ();
  return 0;
}

static int
cmd_populate (const char *dir, unsigned long n, size_t size, unsigned long seed)
{
  char path[4096];
  unsigned long i;

  if (mkdir_p1 (dir) == -1)
    return 1;
  for (i = 0; i < n; i++)
    {
      if (i % FILES_PER_DIR == 0)
        {
          snprintf (path, sizeof path, "%s/d%03lu", dir, i / FILES_PER_DIR);
          if (mkdir_p1 (path) == -1)
            return 1;
        }
      orig_path (path, sizeof path, dir, i);
      if (write_file (path, size, seed, i) == -1)
        return 1;
    }
  if (sync_tree (dir) == -1)
    return 1;
  printf ("E2E-RESULT: populate files=%lu size=%zu\n", n, size);
  return 0;
}

static int
cmd_modify (const char *dir, unsigned long n, size_t size, unsigned long seed)
{
  char path[4096], to[4096];
  unsigned long i, changed = 0;

  for (i = 0; i < n; i++)
    {
      orig_path (path, sizeof path, dir, i);
      switch (fate_of (i))
        {
        case FATE_KEEP:
          continue;
        case FATE_DELETE:
          if (unlink (path) == -1)
            {
              fail ("unlink", path);
              return 1;
            }
          break;
        case FATE_REWRITE:
          if (write_file (path, REWRITE_SIZE (size), REWRITE_SEED (seed), i)
              == -1)
            return 1;
          break;
        case FATE_RENAME:
          renamed_path (to, sizeof to, dir, i);
          if (rename (path, to) == -1)
            {
              fail ("rename", path);
              return 1;
            }
          break;
        }
      changed++;
    }
  snprintf (path, sizeof path, "%s/new", dir);
  if (mkdir_p1 (path) == -1)
    return 1;
  for (i = 0; i < n / 4; i++)
    {
      new_path (path, sizeof path, dir, i);
      if (write_file (path, NEW_SIZE (size), NEW_SEED (seed), i) == -1)
        return 1;
    }
  if (sync_tree (dir) == -1)
    return 1;
  printf ("E2E-RESULT: modify changed=%lu created=%lu\n", changed, n / 4);
  return 0;
}

/* Check the tree: as "populate" left it, or (MODIFIED) as "modify" left
   it.  Prints one summary line; returns 0 when all is as expected.  */
static int
cmd_verify (const char *dir, unsigned long n, size_t size, unsigned long seed,
            bool modified)
{
  char path[4096];
  unsigned long i, files = 0, bad = 0;
  uint64_t bytes = 0;
  int r;

  for (i = 0; i < n; i++)
    {
      enum fate f = modified ? fate_of (i) : FATE_KEEP;

      orig_path (path, sizeof path, dir, i);
      switch (f)
        {
        case FATE_KEEP:
          r = read_file (path, size, seed, i, &bytes);
          break;
        case FATE_DELETE:
          r = exists (path) ? 1 : 0;
          if (r)
            report (" still exists", path);
          break;
        case FATE_REWRITE:
          r = read_file (path, REWRITE_SIZE (size), REWRITE_SEED (seed), i,
                         &bytes);
          break;
        case FATE_RENAME:
          r = exists (path) ? 1 : 0;
          if (r)
            report (" still exists", path);
          else
            {
              renamed_path (path, sizeof path, dir, i);
              r = read_file (path, size, seed, i, &bytes);
            }
          break;
        default:
          r = -1;
        }
      if (f != FATE_DELETE)
        files++;
      if (r != 0)
        bad++;
    }
  if (modified)
    for (i = 0; i < n / 4; i++)
      {
        new_path (path, sizeof path, dir, i);
        if (read_file (path, NEW_SIZE (size), NEW_SEED (seed), i, &bytes) != 0)
          bad++;
        files++;
      }
  printf ("E2E-RESULT: verify %s files=%lu bytes=%" PRIu64 " bad=%lu\n",
          bad ? "FAIL" : "ok", files, bytes, bad);
  return bad ? 1 : 0;
}

/* Read every original file SCANS times, PAUSE seconds apart.  */
static int
cmd_readscan (const char *dir, unsigned long n, unsigned long scans,
              unsigned long pause)
{
  char path[4096];
  unsigned long s, i;
  uint64_t bytes = 0;

  for (s = 0; s < scans; s++)
    {
      if (s > 0)
        sleep ((unsigned)pause);
      for (i = 0; i < n; i++)
        {
          orig_path (path, sizeof path, dir, i);
          if (read_file (path, (size_t)-1, 0, 0, &bytes) != 0)
            return 1;
        }
    }
  printf ("E2E-RESULT: readscan files=%lu scans=%lu bytes=%" PRIu64 "\n", n,
          scans, bytes);
  return 0;
}

/* O_DIRECT read of one block at OFFSET of DEV: the host sees it in the
   server's request log and cuts its measurement window there.  */
static int
cmd_marker (const char *dev, unsigned long offset)
{
  void *buf;
  int fd;
  ssize_t r;

  if (posix_memalign (&buf, MARKER_SIZE, MARKER_SIZE) != 0)
    return 1;
  fd = open (dev, O_RDONLY | O_DIRECT);
  if (fd == -1)
    {
      fail ("open", dev);
      free (buf);
      return 1;
    }
  r = pread (fd, buf, MARKER_SIZE, (off_t)offset);
  if (r != MARKER_SIZE)
    {
      fail ("pread", dev);
      close (fd);
      free (buf);
      return 1;
    }
  close (fd);
  free (buf);
  printf ("E2E-RESULT: marker offset=%lu\n", offset);
  return 0;
}

/* ---- crash workload ------------------------------------------------- */

/* SHA-256 (FIPS 180-4), for the durability declarations: the host
   compares the files it finds in a crash state with sha256sum.  */
struct sha256
{
  uint32_t h[8];
  unsigned char buf[64];
  size_t used;
  uint64_t total;
};

static const uint32_t sha256_k[64] = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
  0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
  0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
  0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
  0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
  0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR32(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void
sha256_block (struct sha256 *s, const unsigned char *p)
{
  uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
  int i;

  for (i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16
           | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (i = 16; i < 64; i++)
    w[i] = (ROR32 (w[i - 2], 17) ^ ROR32 (w[i - 2], 19) ^ (w[i - 2] >> 10))
           + w[i - 7]
           + (ROR32 (w[i - 15], 7) ^ ROR32 (w[i - 15], 18) ^ (w[i - 15] >> 3))
           + w[i - 16];
  a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
  e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
  for (i = 0; i < 64; i++)
    {
      t1 = h + (ROR32 (e, 6) ^ ROR32 (e, 11) ^ ROR32 (e, 25))
           + ((e & f) ^ (~e & g)) + sha256_k[i] + w[i];
      t2 = (ROR32 (a, 2) ^ ROR32 (a, 13) ^ ROR32 (a, 22))
           + ((a & b) ^ (a & c) ^ (b & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
  s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
  s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static void
sha256_init (struct sha256 *s)
{
  static const uint32_t h0[8]
      = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
          0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
  memcpy (s->h, h0, sizeof h0);
  s->used = 0;
  s->total = 0;
}

static void
sha256_update (struct sha256 *s, const unsigned char *p, size_t n)
{
  s->total += n;
  while (n > 0)
    {
      size_t take = 64 - s->used < n ? 64 - s->used : n;
      memcpy (s->buf + s->used, p, take);
      s->used += take, p += take, n -= take;
      if (s->used == 64)
        {
          sha256_block (s, s->buf);
          s->used = 0;
        }
    }
}

static void
sha256_hex (struct sha256 *s, char out[65])
{
  uint64_t bits = s->total * 8;
  unsigned char pad = 0x80, len[8];
  int i;

  sha256_update (s, &pad, 1);
  pad = 0;
  while (s->used != 56)
    sha256_update (s, &pad, 1);
  for (i = 0; i < 8; i++)
    len[i] = (unsigned char)(bits >> (56 - 8 * i));
  sha256_update (s, len, 8);
  for (i = 0; i < 8; i++)
    sprintf (out + 8 * i, "%08" PRIx32, s->h[i]);
}

/* The crash workload's state: a xorshift stream for its choices, the
   next durability marker, and the device that holds the marker blocks.  */
struct crash
{
  const char *dir; /* DIR: paths are printed relative to its parent */
  size_t skip;     /* strlen of the mount point prefix to drop */
  const char *dev;
  unsigned long mstart, seq, nmarkers;
  uint64_t rng;
  bool sync_only; /* every durability point is a sync() */
};

static uint64_t
crash_rand (struct crash *c)
{
  c->rng ^= c->rng << 13;
  c->rng ^= c->rng >> 7;
  c->rng ^= c->rng << 17;
  return c->rng;
}

static const char *
crash_rel (const struct crash *c, const char *path)
{
  return path + c->skip;
}

/* About to change PATH: changes between durability points are not
   promised, so the host does not check PATH in crash states that may hold
   part of this change.  */
static void
crash_touch (const struct crash *c, const char *path)
{
  printf ("E2E-TOUCH: %lu %s\n", c->seq, crash_rel (c, path));
}

static int
crash_fsync_path (const char *path, bool data_only)
{
  int fd = open (path, O_RDONLY);
  int r;

  if (fd == -1)
    {
      fail ("open", path);
      return -1;
    }
  r = data_only ? fdatasync (fd) : fsync (fd);
  if (r == -1)
    fail (data_only ? "fdatasync" : "fsync", path);
  close (fd);
  return r;
}

/* Declare PATH durable as it reads now (size and SHA-256), and, when TIMES
   (the file itself was fsync'ed or the whole filesystem synced), its mtime
   and ctime: "SEC.NSEC", or "-" when they were not made durable (an
   fdatasync, or only the directories fsync'ed).  The read also updates its
   atime, which is never declared.  */
static int
crash_declare (const struct crash *c, const char *path, bool times)
{
  struct stat st;
  char mt[48] = "-", ct[48] = "-";
  unsigned char buf[16384];
  struct sha256 s;
  char hex[65];
  uint64_t size = 0;
  int fd = open (path, O_RDONLY);

  if (fd == -1)
    {
      fail ("open", path);
      return -1;
    }
  sha256_init (&s);
  for (;;)
    {
      ssize_t n = read (fd, buf, sizeof buf);
      if (n < 0)
        {
          fail ("read", path);
          close (fd);
          return -1;
        }
      if (n == 0)
        break;
      sha256_update (&s, buf, (size_t)n);
      size += (uint64_t)n;
    }
  if ((times || c->sync_only) && fstat (fd, &st) == 0)
    {
      snprintf (mt, sizeof mt, "%lld.%09ld", (long long)st.st_mtim.tv_sec,
                st.st_mtim.tv_nsec);
      snprintf (ct, sizeof ct, "%lld.%09ld", (long long)st.st_ctim.tv_sec,
                st.st_ctim.tv_nsec);
    }
  close (fd);
  sha256_hex (&s, hex);
  printf ("E2E-DURABLE: %lu %s %" PRIu64 " %s %s %s\n", c->seq,
          crash_rel (c, path), size, hex, mt, ct);
  return 0;
}

static void
crash_declare_gone (const struct crash *c, const char *path)
{
  printf ("E2E-DELETED: %lu %s\n", c->seq, crash_rel (c, path));
}

/* End of a durability point: the O_DIRECT read of marker block SEQ puts
   it into the server's log, after everything declared durable.  */
static int
crash_marker (struct crash *c)
{
  void *buf;
  int fd, r = -1;

  if (c->seq >= c->nmarkers)
    {
      printf ("E2E-RESULT: error out of marker blocks at %lu\n", c->seq);
      return -1;
    }
  if (posix_memalign (&buf, MARKER_SIZE, MARKER_SIZE) != 0)
    return -1;
  fd = open (c->dev, O_RDONLY | O_DIRECT);
  if (fd == -1)
    fail ("open", c->dev);
  else
    {
      if (pread (fd, buf, MARKER_SIZE,
                 (off_t)(c->mstart + c->seq * MARKER_SIZE))
          == MARKER_SIZE)
        r = 0;
      else
        fail ("pread", c->dev);
      close (fd);
    }
  free (buf);
  c->seq++;
  return r;
}

/* sync(), then syncfs(): sync() writes the block device's buffers (the
   metadata of ext4 without a journal: directory blocks, bitmaps) after
   the filesystem's flush and issues none after them, so those writes are
   not durable when it returns; syncfs() ends with a flush.  */
static int
crash_sync (const struct crash *c)
{
  int fd;

  sync ();
  fd = open (c->dir, O_RDONLY | O_DIRECTORY);
  if (fd == -1 || syncfs (fd) == -1)
    {
      fail ("syncfs", c->dir);
      if (fd != -1)
        close (fd);
      return -1;
    }
  close (fd);
  return 0;
}

/* Make PATH's change durable: fsync (or fdatasync) of the file and, for
   a change of names, of DIR; or sync() in sync_only mode.  */
static int
crash_persist (const struct crash *c, const char *path, const char *dir,
               bool data_only)
{
  if (c->sync_only)
    return crash_sync (c);
  if (path && crash_fsync_path (path, data_only) == -1)
    return -1;
  if (dir && crash_fsync_path (dir, false) == -1)
    return -1;
  return 0;
}

/* Freeze and thaw the filesystem: the kernel writes every logged block in
   place and empties its journal.  */
static int
crash_checkpoint (const struct crash *c)
{
  int fd = open (c->dir, O_RDONLY | O_DIRECTORY);

  if (fd == -1 || ioctl (fd, FIFREEZE, 0) == -1 || ioctl (fd, FITHAW, 0) == -1)
    {
      fail ("freeze", c->dir);
      if (fd != -1)
        close (fd);
      return -1;
    }
  close (fd);
  return 0;
}

/* A quiet spell: a checkpoint, then only reads, and a wait past a
   journal commit (mounted commit=1): jbd2 commits a transaction of atime
   updates alone.  The first one waits 6 s, past the crash suites'
   max-age (4 s): that transaction's deadline falls while its blocks are
   in the log only (the kernel writes them in place 30 s later, or at the
   next checkpoint).  */
static int
crash_quiet (const struct crash *c, const char *path, uint64_t *bytes)
{
  static bool waited_long;

  if (crash_checkpoint (c) == -1
      || read_file (path, (size_t)-1, 0, 0, bytes) != 0)
    return -1;
  usleep (waited_long ? 1300 * 1000 : 6000 * 1000);
  waited_long = true;
  return 0;
}

/* The first transaction after the mount, made of time-only changes: reads
   of the files the host left in MOUNT/seed/s0, s1, ... (if there are none,
   nothing happens) under strictatime dirty their atimes, the first open of
   a file sets the superblock's s_last_mounted, and sync_tree commits that
   transaction alone.  The host reads the server's transaction counters at
   the E2E-FIRSTTX line, in the pause after it, before the workload changes
   anything.  */
static int
crash_first_tx (const struct crash *c)
{
  char path[4096];
  uint64_t bytes = 0;
  unsigned k;

  for (k = 0;; k++)
    {
      snprintf (path, sizeof path, "%.*s/seed/s%u", (int)c->skip, c->dir, k);
      if (access (path, F_OK) == -1)
        break;
      if (read_file (path, (size_t)-1, 0, 0, &bytes) != 0)
        return -1;
    }
  if (k == 0)
    return 0;
  snprintf (path, sizeof path, "%.*s/seed", (int)c->skip, c->dir);
  if (sync_tree (path) == -1)
    return -1;
  printf ("E2E-FIRSTTX: %u files read\n", k);
  sleep (3);
  return 0;
}

#define CRASH_MAXF 64
#define CRASH_MANY 600

/* Files the workload knows, by slot: the name of slot I is
   "DIR/SUBDIR/fI" where SUBDIR is the slot's directory.  */
struct crash_files
{
  bool live[CRASH_MAXF];
  unsigned dirno[CRASH_MAXF];
};

static const char *const crash_dirs[] = { "a", "b", "many" };

static void
crash_fpath (const struct crash *c, char *out, size_t n, unsigned dirno,
             unsigned i)
{
  snprintf (out, n, "%s/%s/f%02u", c->dir, crash_dirs[dirno], i);
}

static int
crash_write_new (struct crash *c, const char *path, size_t size)
{
  return write_file (path, size, c->rng & 0xffff, crash_rand (c) & 0xffff);
}

/* Appends, overwrites, creates, renames (of files and of a directory),
   unlinks, mtime changes, quiet spells and reads, each followed by the
   fsync, fdatasync or sync that makes it durable, the declarations and a
   marker.  */
static int
cmd_crash (const char *dir, const char *dev, unsigned long mstart,
           unsigned long nmarkers, unsigned long steps, unsigned long seed,
           bool sync_only)
{
  struct crash c = { .dir = dir,
                     .dev = dev,
                     .mstart = mstart,
                     .nmarkers = nmarkers,
                     .rng = seed * 2654435761UL + 1,
                     .sync_only = sync_only };
  struct crash_files f = { 0 };
  char path[4096], to[2048], sub[2048], log[4096], pre[4096];
  const char *slash = strrchr (dir, '/');
  unsigned long step, dmove = 0;
  unsigned i, k;
  uint64_t bytes = 0;
  unsigned char *buf = malloc (65536);
  int fd;

  if (!buf)
    return 1;
  c.skip = slash ? (size_t)(slash - dir) : 0;
  if (crash_first_tx (&c) == -1 || mkdir_p1 (dir) == -1)
    goto err;
  for (k = 0; k < 3; k++)
    {
      snprintf (path, sizeof path, "%s/%s", dir, crash_dirs[k]);
      if (mkdir_p1 (path) == -1)
        goto err;
    }
  /* A preallocated file for overwrites, a log for appends, and a
     directory that is renamed back and forth with its three files.  */
  snprintf (pre, sizeof pre, "%s/pre", dir);
  snprintf (log, sizeof log, "%s/log", dir);
  snprintf (sub, sizeof sub, "%s/dmove0", dir);
  if (write_file (pre, 256 * 1024, seed, 1000) == -1
      || write_file (log, 100, seed, 1001) == -1 || mkdir_p1 (sub) == -1)
    goto err;
  for (k = 0; k < 3; k++)
    {
      snprintf (path, sizeof path, "%s/g%u", sub, k);
      if (write_file (path, 3000 + k, seed, 1002 + k) == -1)
        goto err;
    }
  /* Many files in one directory: "many" grows past one block into an
     indexed (htree) directory, which the slot files then change.  */
  for (k = 0; k < CRASH_MANY; k++)
    {
      snprintf (path, sizeof path, "%s/many/m%03u", dir, k);
      if (write_file (path, 1 + k * 37 % 2000, seed, 2000 + k) == -1)
        goto err;
    }
  if (crash_sync (&c) == -1 || crash_declare (&c, pre, true)
      || crash_declare (&c, log, true))
    goto err;
  for (k = 0; k < CRASH_MANY; k += 20)
    {
      snprintf (path, sizeof path, "%s/many/m%03u", dir, k);
      if (crash_declare (&c, path, true))
        goto err;
    }
  for (k = 0; k < 3; k++)
    {
      snprintf (path, sizeof path, "%s/g%u", sub, k);
      if (crash_declare (&c, path, true))
        goto err;
    }
  if (crash_marker (&c))
    goto err;

  for (step = 0; step < steps; step++)
    {
      unsigned op = (unsigned)(crash_rand (&c) % 10);
      i = (unsigned)(crash_rand (&c) % CRASH_MAXF);

      /* Reads between changes: atime traffic under strictatime.  */
      if (f.live[(i + 1) % CRASH_MAXF])
        {
          crash_fpath (&c, path, sizeof path, f.dirno[(i + 1) % CRASH_MAXF],
                       (i + 1) % CRASH_MAXF);
          if (read_file (path, (size_t)-1, 0, 0, &bytes) != 0)
            goto err;
        }
      if (read_file (log, (size_t)-1, 0, 0, &bytes) != 0)
        goto err;

      switch (op)
        {
        case 0: /* create (or rewrite) a file, fsync it and its dir */
        case 1:
          if (!f.live[i])
            f.dirno[i] = (unsigned)(crash_rand (&c) % 3);
          crash_fpath (&c, path, sizeof path, f.dirno[i], i);
          snprintf (to, sizeof to, "%s/%s", dir, crash_dirs[f.dirno[i]]);
          crash_touch (&c, path);
          if (crash_write_new (&c, path, 1 + crash_rand (&c) % 20000) == -1
              || crash_persist (&c, path, to, false) == -1
              || crash_declare (&c, path, true) == -1)
            goto err;
          f.live[i] = true;
          break;
        case 2: /* append to the log, fdatasync */
          crash_touch (&c, log);
          fd = open (log, O_WRONLY | O_APPEND);
          k = 1 + (unsigned)(crash_rand (&c) % 6000);
          pattern_fill (buf, k, seed, step);
          if (fd == -1 || write (fd, buf, k) != (ssize_t)k)
            {
              fail ("append", log);
              if (fd != -1)
                close (fd);
              goto err;
            }
          close (fd);
          if (crash_persist (&c, log, NULL, true) == -1
              || crash_declare (&c, log, false) == -1)
            goto err;
          break;
        case 3: /* overwrite part of the preallocated file, fdatasync */
          crash_touch (&c, pre);
          fd = open (pre, O_WRONLY);
          k = 1 + (unsigned)(crash_rand (&c) % 12000);
          pattern_fill (buf, k, seed + 1, step);
          if (fd == -1
              || pwrite (fd, buf, k,
                         (off_t)(crash_rand (&c) % (256 * 1024 - k)))
                     != (ssize_t)k)
            {
              fail ("overwrite", pre);
              if (fd != -1)
                close (fd);
              goto err;
            }
          close (fd);
          if (crash_persist (&c, pre, NULL, true) == -1
              || crash_declare (&c, pre, false) == -1)
            goto err;
          break;
        case 4: /* rename a file to another directory */
          if (!f.live[i])
            continue;
          k = (f.dirno[i] + 1 + (unsigned)(crash_rand (&c) % 2)) % 3;
          crash_fpath (&c, path, sizeof path, f.dirno[i], i);
          crash_fpath (&c, to, sizeof to, k, i);
          crash_touch (&c, path);
          crash_touch (&c, to);
          if (rename (path, to) == -1)
            {
              fail ("rename", path);
              goto err;
            }
          snprintf (sub, sizeof sub, "%s/%s", dir, crash_dirs[f.dirno[i]]);
          if (crash_persist (&c, NULL, sub, false) == -1)
            goto err;
          snprintf (sub, sizeof sub, "%s/%s", dir, crash_dirs[k]);
          if (crash_persist (&c, NULL, sub, false) == -1
              || crash_declare (&c, to, false) == -1)
            goto err;
          crash_declare_gone (&c, path);
          f.dirno[i] = k;
          break;
        case 5: /* unlink, fsync the directory */
          if (!f.live[i])
            continue;
          crash_fpath (&c, path, sizeof path, f.dirno[i], i);
          snprintf (sub, sizeof sub, "%s/%s", dir, crash_dirs[f.dirno[i]]);
          crash_touch (&c, path);
          if (unlink (path) == -1)
            {
              fail ("unlink", path);
              goto err;
            }
          if (crash_persist (&c, NULL, sub, false) == -1)
            goto err;
          crash_declare_gone (&c, path);
          f.live[i] = false;
          break;
        case 6: /* rename the directory dmoveN to dmove(1-N) */
          snprintf (sub, sizeof sub, "%s/dmove%lu", dir, dmove);
          snprintf (to, sizeof to, "%s/dmove%lu", dir, 1 - dmove);
          for (k = 0; k < 3; k++)
            {
              snprintf (path, sizeof path, "%s/g%u", sub, k);
              crash_touch (&c, path);
              snprintf (path, sizeof path, "%s/g%u", to, k);
              crash_touch (&c, path);
            }
          if (rename (sub, to) == -1)
            {
              fail ("rename", sub);
              goto err;
            }
          if (crash_persist (&c, NULL, dir, false) == -1)
            goto err;
          for (k = 0; k < 3; k++)
            {
              /* Their times have not changed since the first sync.  */
              snprintf (path, sizeof path, "%s/g%u", to, k);
              if (crash_declare (&c, path, true) == -1)
                goto err;
              snprintf (path, sizeof path, "%s/g%u", sub, k);
              crash_declare_gone (&c, path);
            }
          dmove = 1 - dmove;
          break;
        case 7: /* after a checkpoint, set a file's mtime and fsync it:
                   a transaction of a time-only change */
          {
            const char *tp = pre;
            struct timespec ts[2];
            int tfd;

            if (f.live[i])
              {
                crash_fpath (&c, path, sizeof path, f.dirno[i], i);
                tp = path;
              }
            if (crash_checkpoint (&c) == -1)
              goto err;
            crash_touch (&c, tp);
            ts[0].tv_nsec = UTIME_OMIT;
            ts[1].tv_sec = 1600000000 + (time_t)(crash_rand (&c) % 100000000);
            ts[1].tv_nsec = (long)(crash_rand (&c) % 1000000000);
            tfd = open (tp, O_RDONLY);
            if (tfd == -1 || futimens (tfd, ts) == -1)
              {
                fail ("futimens", tp);
                if (tfd != -1)
                  close (tfd);
                goto err;
              }
            close (tfd);
            if (crash_persist (&c, tp, NULL, false) == -1
                || crash_declare (&c, tp, true) == -1)
              goto err;
          }
          break;
        case 8: /* checkpoint, then reads only across a journal commit */
          if (crash_quiet (&c, log, &bytes) == -1)
            goto err;
          break;
        default: /* a sync() with nothing new: timestamps only */
          sync ();
          break;
        }
      if (crash_marker (&c))
        goto err;
    }
  printf ("E2E-RESULT: crash steps=%lu markers=%lu read=%" PRIu64 "\n", steps,
          c.seq, bytes);
  free (buf);
  return 0;
err:
  printf ("E2E-RESULT: crash FAIL at marker %lu\n", c.seq);
  free (buf);
  return 1;
}

/* ---- database workload ---------------------------------------------- */

#define DB_BLOCK 4096
#define DB_FILL_CHUNK (1024 * 1024)

/* Write FILE (created if absent) whole, SIZE_MIB MiB of pattern, and fsync
   it: the preallocation that "db" then overwrites in place.  */
static int
cmd_dbfill (const char *path, unsigned long size_mib)
{
  unsigned char *buf;
  unsigned long i;
  int fd;

  buf = malloc (DB_FILL_CHUNK);
  if (buf == NULL)
    return 1;
  fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd == -1)
    {
      fail ("open", path);
      free (buf);
      return 1;
    }
  for (i = 0; i < size_mib; i++)
    {
      pattern_fill (buf, DB_FILL_CHUNK, 0xdb, i);
      if (pwrite (fd, buf, DB_FILL_CHUNK, (off_t)i * DB_FILL_CHUNK)
          != DB_FILL_CHUNK)
        {
          fail ("pwrite", path);
          goto err;
        }
    }
  if (fsync (fd) == -1)
    {
      fail ("fsync", path);
      goto err;
    }
  if (close (fd) == -1)
    {
      fail ("close", path);
      free (buf);
      return 1;
    }
  free (buf);
  printf ("E2E-RESULT: dbfill mib=%lu\n", size_mib);
  return 0;
err:
  close (fd);
  free (buf);
  return 1;
}

static double
db_now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* For SECONDS, overwrite 4 KiB blocks of the preallocated FILE
   (SIZE_MIB MiB) at offsets drawn from a xorshift64 stream under SEED,
   with an fdatasync after every SYNC_EVERY writes and one at the end if
   writes are left unsynced: the write pattern of a database's pages.  The
   blocks written between two fdatasyncs are distinct (a block drawn twice
   is drawn again), so every write reaches the device as 4 KiB of its own
   and the host can subtract the data from what it counts.  */
static int
cmd_db (const char *path, unsigned long size_mib, unsigned long seconds,
        unsigned long sync_every, unsigned long seed)
{
  uint64_t x = ((uint64_t)seed << 32) ^ 0x9e3779b97f4a7c15ULL;
  uint64_t nblocks = (uint64_t)size_mib * (1024 * 1024 / DB_BLOCK);
  unsigned long writes = 0, syncs = 0, pending = 0, k;
  unsigned char *buf, *used;
  uint64_t *group;
  struct stat st;
  double t0, t;
  int fd;

  if (nblocks == 0 || sync_every == 0 || sync_every > nblocks / 2)
    {
      fprintf (stderr, "e2e-guest: db needs SIZE_MIB > 0 and SYNC_EVERY in "
                       "1..half the blocks of the file\n");
      return 2;
    }
  buf = malloc (DB_BLOCK);
  used = calloc (nblocks / 8 + 1, 1);
  group = calloc (sync_every, sizeof *group);
  if (buf == NULL || used == NULL || group == NULL)
    goto nomem;
  fd = open (path, O_RDWR);
  if (fd == -1)
    {
      fail ("open", path);
      goto nomem;
    }
  if (fstat (fd, &st) == -1)
    {
      fail ("fstat", path);
      goto err;
    }
  if ((uint64_t)st.st_size < nblocks * DB_BLOCK)
    {
      errno = EINVAL;
      fail ("too small (run dbfill first)", path);
      goto err;
    }
  t0 = db_now ();
  do
    {
      uint64_t block;

      do
        {
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
          block = x % nblocks;
        }
      while (used[block / 8] & (1u << (block % 8)));
      used[block / 8] |= (unsigned char)(1u << (block % 8));
      group[pending] = block;
      pattern_fill (buf, DB_BLOCK, seed, writes);
      if (pwrite (fd, buf, DB_BLOCK, (off_t)(block * DB_BLOCK)) != DB_BLOCK)
        {
          fail ("pwrite", path);
          goto err;
        }
      writes++;
      if (++pending == sync_every)
        {
          if (fdatasync (fd) == -1)
            {
              fail ("fdatasync", path);
              goto err;
            }
          syncs++;
          for (k = 0; k < pending; k++)
            used[group[k] / 8] = 0;
          pending = 0;
        }
      t = db_now ();
    }
  while (t - t0 < (double)seconds);
  if (pending > 0)
    {
      if (fdatasync (fd) == -1)
        {
          fail ("fdatasync", path);
          goto err;
        }
      syncs++;
      t = db_now ();
    }
  if (close (fd) == -1)
    {
      fail ("close", path);
      goto nomem;
    }
  free (group);
  free (used);
  free (buf);
  printf ("E2E-RESULT: db writes=%lu syncs=%lu seconds=%.2f\n", writes, syncs,
          t - t0);
  return 0;
err:
  close (fd);
nomem:
  free (group);
  free (used);
  free (buf);
  printf ("E2E-RESULT: db FAIL after writes=%lu\n", writes);
  return 1;
}

/* "now": CLOCK_MONOTONIC in seconds, the clock "durable" logs with.  */
static double
mono_now (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* "listen PATH PROG ARGS...": a Unix socket listening at PATH on
   descriptor 3, then PROG, which hands it to one server after another
   (LISTEN_FDS=1): a connection made between two servers waits in the
   backlog, as with a systemd socket unit.  */
static int
cmd_listen (const char *path, char *argv[])
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  int fd;

  if (strlen (path) >= sizeof sa.sun_path)
    return 2;
  strcpy (sa.sun_path, path);
  unlink (path);
  fd = socket (AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0 || bind (fd, (struct sockaddr *)&sa, sizeof sa) < 0
      || listen (fd, 16) < 0 || (fd != 3 && dup2 (fd, 3) < 0))
    {
      perror ("e2e-guest listen");
      return 1;
    }
  if (fd != 3)
    close (fd);
  execvp (argv[0], argv);
  perror (argv[0]);
  return 1;
}

/* "durable DIR LOG STOP PAUSE": until the file STOP exists, write
   DIR/dNNNNNN (4096 bytes: its name and a newline, repeated), fsync it
   and the directory, and append "N START END" (CLOCK_MONOTONIC) to LOG
   once it is durable; while the file PAUSE exists, wait instead.  Files
   are numbered from 0, one after another: when the last line of LOG
   says N, every file up to N was declared durable.  */
static int
cmd_durable (const char *dir, const char *log, const char *stop,
             const char *pause)
{
  char name[32], path[4096], buf[4096];
  unsigned long n = 0;
  FILE *lf = fopen (log, "a");
  int dfd = open (dir, O_RDONLY | O_DIRECTORY);

  if (!lf || dfd < 0)
    {
      printf ("E2E-RESULT: durable FAIL open %s\n", strerror (errno));
      return 1;
    }
  setvbuf (lf, NULL, _IOLBF, 0);
  while (access (stop, F_OK) != 0)
    {
      double t0;
      int fd;
      if (access (pause, F_OK) == 0)
        {
          usleep (20000);
          continue;
        }
      snprintf (name, sizeof name, "d%06lu\n", n);
      for (size_t i = 0; i < sizeof buf; i += 8)
        memcpy (buf + i, name, 8);
      name[7] = '\0';
      snprintf (path, sizeof path, "%s/%s", dir, name);
      t0 = mono_now ();
      fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || write (fd, buf, sizeof buf) != (ssize_t)sizeof buf
          || fsync (fd) < 0 || close (fd) < 0 || fsync (dfd) < 0)
        {
          printf ("E2E-RESULT: durable FAIL %s: %s\n", name, strerror (errno));
          return 1;
        }
      fprintf (lf, "%lu %.6f %.6f\n", n, t0, mono_now ());
      n++;
      usleep (20000);
    }
  printf ("E2E-RESULT: durable files=%lu\n", n);
  return 0;
}

static void
usage (void)
{
  fprintf (stderr, "usage: e2e-guest populate DIR NFILES SIZE SEED\n"
                   "       e2e-guest modify DIR NFILES SIZE SEED\n"
                   "       e2e-guest verify DIR NFILES SIZE SEED [modified]\n"
                   "       e2e-guest readscan DIR NFILES SCANS PAUSE\n"
                   "       e2e-guest marker DEVICE OFFSET\n"
                   "       e2e-guest crash DIR DEVICE MSTART NMARKERS STEPS "
                   "SEED [sync]\n"
                   "       e2e-guest dbfill FILE SIZE_MIB\n"
                   "       e2e-guest db FILE SIZE_MIB SECONDS SYNC_EVERY SEED\n"
                   "       e2e-guest listen PATH PROG [ARGS...]\n"
                   "       e2e-guest durable DIR LOG STOP PAUSE\n"
                   "       e2e-guest now\n");
  exit (2);
}

int
main (int argc, char *argv[])
{
  const char *cmd;
  int r;

  setvbuf (stdout, NULL, _IOLBF, 0);
  if (argc < 2)
    usage ();
  cmd = argv[1];
  if (strcmp (cmd, "marker") == 0 && argc == 4)
    r = cmd_marker (argv[2], parse_ul (argv[3], "offset"));
  else if (strcmp (cmd, "crash") == 0 && (argc == 8 || argc == 9))
    {
      bool sync_only = argc == 9 && strcmp (argv[8], "sync") == 0;
      if (argc == 9 && !sync_only)
        usage ();
      r = cmd_crash (argv[2], argv[3], parse_ul (argv[4], "mstart"),
                     parse_ul (argv[5], "nmarkers"),
                     parse_ul (argv[6], "steps"), parse_ul (argv[7], "seed"),
                     sync_only);
    }
  else if (strcmp (cmd, "dbfill") == 0 && argc == 4)
    r = cmd_dbfill (argv[2], parse_ul (argv[3], "size_mib"));
  else if (strcmp (cmd, "db") == 0 && argc == 7)
    r = cmd_db (argv[2], parse_ul (argv[3], "size_mib"),
                parse_ul (argv[4], "seconds"), parse_ul (argv[5], "sync_every"),
                parse_ul (argv[6], "seed"));
  else if (strcmp (cmd, "now") == 0 && argc == 2)
    r = printf ("%.6f\n", mono_now ()) < 0;
  else if (strcmp (cmd, "listen") == 0 && argc >= 4)
    r = cmd_listen (argv[2], argv + 3);
  else if (strcmp (cmd, "durable") == 0 && argc == 6)
    r = cmd_durable (argv[2], argv[3], argv[4], argv[5]);
  else if (argc < 6)
    usage ();
  else if (strcmp (cmd, "populate") == 0 && argc == 6)
    r = cmd_populate (argv[2], parse_ul (argv[3], "nfiles"),
                      parse_ul (argv[4], "size"), parse_ul (argv[5], "seed"));
  else if (strcmp (cmd, "modify") == 0 && argc == 6)
    r = cmd_modify (argv[2], parse_ul (argv[3], "nfiles"),
                    parse_ul (argv[4], "size"), parse_ul (argv[5], "seed"));
  else if (strcmp (cmd, "verify") == 0 && (argc == 6 || argc == 7))
    {
      bool modified = argc == 7 && strcmp (argv[6], "modified") == 0;
      if (argc == 7 && !modified)
        usage ();
      r = cmd_verify (argv[2], parse_ul (argv[3], "nfiles"),
                      parse_ul (argv[4], "size"), parse_ul (argv[5], "seed"),
                      modified);
    }
  else if (strcmp (cmd, "readscan") == 0 && argc == 6)
    r = cmd_readscan (argv[2], parse_ul (argv[3], "nfiles"),
                      parse_ul (argv[4], "scans"), parse_ul (argv[5], "pause"));
  else
    usage ();
  return r;
}
