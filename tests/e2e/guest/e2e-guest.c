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
#include <sys/stat.h>
#include <sys/types.h>
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
#define NEW_SIZE(size) ((size)*2 + 17)

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

static void
usage (void)
{
  fprintf (stderr, "usage: e2e-guest populate DIR NFILES SIZE SEED\n"
                   "       e2e-guest modify DIR NFILES SIZE SEED\n"
                   "       e2e-guest verify DIR NFILES SIZE SEED [modified]\n"
                   "       e2e-guest readscan DIR NFILES SCANS PAUSE\n"
                   "       e2e-guest marker DEVICE OFFSET\n");
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
