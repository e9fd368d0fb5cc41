/* SPDX-License-Identifier: BSD-3-Clause */
/* test-classify.c --- time-only classification of inode-table writes.
 *
 * Two halves.  Synthetic records built byte by byte check every offset
 * of a record against an independent statement of the rule, including
 * bogus i_extra_isize values and unused records.  Real images made
 * with mkfs.ext4 and changed one field at a time with debugfs (which
 * recomputes the checksum as the kernel does) check that what a real
 * writer produces classifies as the rule says, over inode sizes, block
 * sizes, metadata_csum, 64bit/huge_file and i_extra_isize values.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <spawn.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "classify.h"

/* ------------------------------------------------------------------ */
/* Synthetic records.                                                 */

#define MAXREC 1024

static void
put16 (uint8_t *p, uint16_t v)
{
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void
put32 (uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

/* A plausible used inode: every byte non-zero except where a field
 * needs a given value, so that flipping any byte changes the record.
 */
static void
make_record (uint8_t *p, uint32_t isz, uint16_t extra)
{
  uint32_t i;

  for (i = 0; i < isz; i++)
    p[i] = (uint8_t)((i * 7 + 3) | 1);
  put16 (p + 0x00, 0100644); /* i_mode */
  put16 (p + 0x1A, 1);       /* i_links_count */
  put32 (p + 0x20, 0x80000); /* i_flags: EXTENTS only */
  if (isz > 128)
    put16 (p + 0x80, extra); /* i_extra_isize */
}

/* The rule as this test reads it: the class of a record whose single
 * byte at off (and nothing else) differs from the reference.
 */
static enum tclass
expect_single (uint32_t isz, uint16_t extra, uint32_t off)
{
  static const struct
  {
    uint32_t off, size;
    enum tclass cls;
  } extra_fields[] = {
    { 0x82, 2, TCLASS_REAL },  /* i_checksum_hi alone */
    { 0x84, 4, TCLASS_TIME },  /* i_ctime_extra */
    { 0x88, 4, TCLASS_TIME },  /* i_mtime_extra */
    { 0x8C, 4, TCLASS_ATIME }, /* i_atime_extra */
    { 0x90, 4, TCLASS_TIME },  /* i_crtime */
    { 0x94, 4, TCLASS_TIME },  /* i_crtime_extra */
    { 0x98, 4, TCLASS_TIME },  /* i_version_hi */
  };
  size_t i;

  if (off >= 0x08 && off < 0x0C)
    return TCLASS_ATIME;
  if (off >= 0x0C && off < 0x14)
    return TCLASS_TIME;
  if (off >= 0x24 && off < 0x28)
    return TCLASS_TIME;
  if (off < 128)
    return TCLASS_REAL; /* includes i_checksum_lo alone */
  if (extra % 4 != 0 || 128u + extra > isz)
    return TCLASS_REAL;
  for (i = 0; i < sizeof extra_fields / sizeof extra_fields[0]; i++)
    if (off >= extra_fields[i].off
        && off < extra_fields[i].off + extra_fields[i].size)
      return extra_fields[i].off + extra_fields[i].size <= 128u + extra
                 ? extra_fields[i].cls
                 : TCLASS_REAL;
  return TCLASS_REAL;
}

/* Is off a checksum byte that exists for this extra_isize? */
static bool
is_csum_byte (uint32_t isz, uint16_t extra, uint32_t off)
{
  if (off == 0x7C || off == 0x7D)
    return true;
  return (off == 0x82 || off == 0x83) && isz > 128 && extra % 4 == 0
         && extra >= 4 && 128u + extra <= isz;
}

static const uint32_t isizes[] = { 128, 256, 512, 1024 };

static void
check_every_byte (size_t misalign)
{
  uint8_t rbuf[MAXREC + 8], nbuf[MAXREC + 8];
  uint8_t *r = rbuf + misalign, *n = nbuf + (misalign * 3) % 8;
  size_t s;

  for (s = 0; s < sizeof isizes / sizeof isizes[0]; s++)
    {
      uint32_t isz = isizes[s];
      const uint16_t extras[] = { 0,
                                  2,
                                  4,
                                  6,
                                  8,
                                  12,
                                  16,
                                  20,
                                  24,
                                  28,
                                  30,
                                  32,
                                  33,
                                  36,
                                  64,
                                  96,
                                  (uint16_t)(isz - 128),
                                  (uint16_t)(isz - 124),
                                  0xFFFF };
      size_t e;

      for (e = 0; e < sizeof extras / sizeof extras[0]; e++)
        {
          uint16_t extra = extras[e];
          uint32_t off;

          if (isz == 128 && e > 0)
            break; /* no i_extra_isize in a 128-byte record */
          make_record (r, isz, extra);
          cr_assert_eq (classify_record (isz, r, r), TCLASS_SAME);

          for (off = 0; off < isz; off++)
            {
              enum tclass want = expect_single (isz, extra, off);
              enum tclass got;

              /* The byte alone. */
              memcpy (n, r, isz);
              n[off] ^= 0x5A;
              got = classify_record (isz, r, n);
              cr_assert_eq (got, want,
                            "isz=%u extra=%u off=0x%x: got %s, want %s", isz,
                            extra, off, tclass_name (got), tclass_name (want));
              cr_assert_eq (classify_block (isz, r, n, isz), want);

              /* The byte together with an atime change: a checksum
               * byte then rides along with the atime class.
               */
              if (off >= 0x08 && off < 0x0C)
                continue;
              n[0x09] ^= 0x33;
              if (is_csum_byte (isz, extra, off))
                want = TCLASS_ATIME;
              else if (want < TCLASS_ATIME)
                want = TCLASS_ATIME;
              got = classify_record (isz, r, n);
              cr_assert_eq (
                  got, want, "isz=%u extra=%u off=0x%x +atime: got %s, want %s",
                  isz, extra, off, tclass_name (got), tclass_name (want));
            }
        }
    }
}

Test (classify, every_byte_aligned)
{
  check_every_byte (0);
}

Test (classify, every_byte_misaligned)
{
  check_every_byte (1);
  check_every_byte (3);
}

Test (classify, identical_is_same)
{
  uint8_t a[4096], b[4096];
  size_t s;

  memset (a, 0, sizeof a);
  memset (b, 0, sizeof b);
  for (s = 0; s < sizeof isizes / sizeof isizes[0]; s++)
    {
      cr_assert_eq (classify_record (isizes[s], a, b), TCLASS_SAME);
      make_record (a, isizes[s], 32);
      make_record (b, isizes[s], 32);
      cr_assert_eq (classify_record (isizes[s], a, b), TCLASS_SAME);
      cr_assert_eq (classify_block (isizes[s], a, b, isizes[s]), TCLASS_SAME);
    }
  cr_assert_eq (classify_block (256, a, b, 0), TCLASS_SAME);
}

Test (classify, zeroed_record_is_real)
{
  uint8_t z[256], r[256];

  memset (z, 0, sizeof z);
  make_record (r, 256, 32);
  cr_assert_eq (classify_record (256, r, z), TCLASS_REAL); /* lazy-init */
  cr_assert_eq (classify_record (256, z, r), TCLASS_REAL); /* allocation */
  cr_assert_eq (classify_block (256, r, z, 256), TCLASS_REAL);
  make_record (r, 128, 0);
  memset (z, 0, sizeof z);
  cr_assert_eq (classify_record (128, r, z), TCLASS_REAL);
}

/* Records that are unused, freed or EA_INODE stay REAL even when
 * only atime (or ctime) differs and both versions agree on the rest.
 */
Test (classify, special_records_are_real)
{
  uint8_t r[256], n[256];
  struct
  {
    uint32_t off, size, value;
  } const specials[] = {
    { 0x00, 2, 0 },        /* i_mode 0: unused */
    { 0x1A, 2, 0 },        /* i_links_count 0: freed or orphan */
    { 0x20, 4, 0x200000 }, /* EA_INODE */
    { 0x20, 4, 0x280000 }, /* EA_INODE | EXTENTS */
  };
  const uint32_t changed[] = { 0x08, 0x0C, 0x10, 0x24, 0x8C, 0x90 };
  size_t i, j;

  for (i = 0; i < sizeof specials / sizeof specials[0]; i++)
    for (j = 0; j < sizeof changed / sizeof changed[0]; j++)
      {
        make_record (r, 256, 32);
        if (specials[i].size == 2)
          put16 (r + specials[i].off, (uint16_t)specials[i].value);
        else
          put32 (r + specials[i].off, specials[i].value);
        memcpy (n, r, sizeof n);
        n[changed[j]] ^= 1;
        cr_assert_eq (classify_record (256, r, n), TCLASS_REAL,
                      "special %zu, change at 0x%x", i, changed[j]);
      }

  /* Only one side special: still REAL. */
  make_record (r, 256, 32);
  memcpy (n, r, sizeof n);
  put32 (n + 0x20, 0x280000);
  cr_assert_eq (classify_record (256, r, n), TCLASS_REAL);
  cr_assert_eq (classify_record (256, n, r), TCLASS_REAL);

  /* Identical special records are SAME. */
  cr_assert_eq (classify_record (256, n, n), TCLASS_SAME);
}

Test (classify, combinations)
{
  uint8_t r[256], n[256];

  make_record (r, 256, 32);

  memcpy (n, r, sizeof n); /* atime + atime_extra + both checksums */
  n[0x08] ^= 1, n[0x8C] ^= 4, n[0x7C] ^= 9, n[0x82] ^= 9;
  cr_assert_eq (classify_record (256, r, n), TCLASS_ATIME);

  memcpy (n, r, sizeof n); /* mtime + ctime + version + checksums */
  n[0x10] ^= 1, n[0x0C] ^= 1, n[0x24] ^= 1, n[0x98] ^= 1, n[0x7D] ^= 1,
      n[0x83] ^= 1;
  cr_assert_eq (classify_record (256, r, n), TCLASS_TIME);

  memcpy (n, r, sizeof n); /* atime and version_hi */
  n[0x08] ^= 1, n[0x9B] ^= 1;
  cr_assert_eq (classify_record (256, r, n), TCLASS_TIME);

  memcpy (n, r, sizeof n); /* checksums only */
  n[0x7C] ^= 1, n[0x82] ^= 1;
  cr_assert_eq (classify_record (256, r, n), TCLASS_REAL);

  memcpy (n, r, sizeof n); /* a time change plus i_dtime */
  n[0x0C] ^= 1, n[0x14] ^= 1;
  cr_assert_eq (classify_record (256, r, n), TCLASS_REAL);

  memcpy (n, r, sizeof n); /* a time change plus i_extra_isize */
  n[0x08] ^= 1;
  put16 (n + 0x80, 28);
  cr_assert_eq (classify_record (256, r, n), TCLASS_REAL);

  /* extra_isize 16: atime_extra is covered, crtime is not. */
  make_record (r, 256, 16);
  memcpy (n, r, sizeof n);
  n[0x8C] ^= 1, n[0x7C] ^= 1, n[0x82] ^= 1;
  cr_assert_eq (classify_record (256, r, n), TCLASS_ATIME);
  n[0x90] ^= 1;
  cr_assert_eq (classify_record (256, r, n), TCLASS_REAL);

  /* extra_isize 0: checksum_hi is not covered. */
  make_record (r, 256, 0);
  memcpy (n, r, sizeof n);
  n[0x08] ^= 1, n[0x7C] ^= 1;
  cr_assert_eq (classify_record (256, r, n), TCLASS_ATIME);
  n[0x82] ^= 1;
  cr_assert_eq (classify_record (256, r, n), TCLASS_REAL);

  /* Bogus extra_isize: even checksum_hi must not move. */
  make_record (r, 256, 30);
  memcpy (n, r, sizeof n);
  n[0x08] ^= 1, n[0x7C] ^= 1;
  cr_assert_eq (classify_record (256, r, n), TCLASS_ATIME);
  n[0x82] ^= 1;
  cr_assert_eq (classify_record (256, r, n), TCLASS_REAL);

  /* 128-byte record: checksum_lo rides along, 0x7E does not. */
  make_record (r, 128, 0);
  memcpy (n, r, 128);
  n[0x10] ^= 1, n[0x7C] ^= 1, n[0x7D] ^= 1;
  cr_assert_eq (classify_record (128, r, n), TCLASS_TIME);
  n[0x7E] ^= 1;
  cr_assert_eq (classify_record (128, r, n), TCLASS_REAL);
}

Test (classify, block_is_max_over_records)
{
  uint8_t r[1024], n[1024];
  uint32_t i;

  for (i = 0; i < 4; i++)
    make_record (r + i * 256, 256, 32);
  memcpy (n, r, sizeof n);
  cr_assert_eq (classify_block (256, r, n, sizeof r), TCLASS_SAME);

  n[1 * 256 + 0x08] ^= 1; /* record 1: atime */
  cr_assert_eq (classify_block (256, r, n, sizeof r), TCLASS_ATIME);
  n[3 * 256 + 0x0C] ^= 1; /* record 3: ctime */
  cr_assert_eq (classify_block (256, r, n, sizeof r), TCLASS_TIME);
  n[2 * 256 + 0x04] ^= 1; /* record 2: size */
  cr_assert_eq (classify_block (256, r, n, sizeof r), TCLASS_REAL);
  n[2 * 256 + 0x04] ^= 1;
  n[0 * 256 + 0x14] ^= 1; /* record 0: dtime, before the others */
  cr_assert_eq (classify_block (256, r, n, sizeof r), TCLASS_REAL);
  n[0 * 256 + 0x14] ^= 1;
  cr_assert_eq (classify_block (256, r, n, sizeof r), TCLASS_TIME);

  /* The same bytes seen as 128-byte records: 0x80.. of each 256-byte
   * record is then the base of another record, still only times move.
   */
  cr_assert_eq (classify_block (128, r, n, sizeof r), TCLASS_TIME);
}

Test (classify, bad_arguments_are_real)
{
  uint8_t r[1024], n[1024];
  const uint32_t bad[] = { 0, 1, 64, 100, 127, 129, 192, 384, 131072 };
  size_t i;

  make_record (r, 1024, 32);
  memcpy (n, r, sizeof n);
  n[0x08] ^= 1;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      if (bad[i] <= sizeof r)
        cr_assert_eq (classify_record (bad[i], r, n), TCLASS_REAL, "%u",
                      bad[i]);
      cr_assert_eq (classify_block (bad[i], r, n, sizeof r), TCLASS_REAL, "%u",
                    bad[i]);
      /* Identical bytes are SAME whatever the record size. */
      cr_assert_eq (classify_block (bad[i], r, r, sizeof r), TCLASS_SAME);
    }
  /* len not a multiple of the record size. */
  cr_assert_eq (classify_block (256, r, n, 300), TCLASS_REAL);
  cr_assert_eq (classify_block (256, r, n, 256), TCLASS_ATIME);
}

Test (classify, names)
{
  cr_assert_str_eq (tclass_name (TCLASS_SAME), "same");
  cr_assert_str_eq (tclass_name (TCLASS_ATIME), "atime");
  cr_assert_str_eq (tclass_name (TCLASS_TIME), "time");
  cr_assert_str_eq (tclass_name (TCLASS_REAL), "real");
  cr_assert_str_eq (tclass_name ((enum tclass)42), "invalid");
  cr_assert (TCLASS_SAME < TCLASS_ATIME && TCLASS_ATIME < TCLASS_TIME
             && TCLASS_TIME < TCLASS_REAL);
}

/* ------------------------------------------------------------------ */
/* Real images.                                                       */

struct fsconf
{
  uint32_t bs, isz;
  int csum; /* metadata_csum */
  int feat; /* 64bit and huge_file */
};

#define NFILES 8
#define MAXBS 65536

static char tmpdir[256];
static char base_img[300], ref_img[300], new_img[300], cmd_file[300];

/* Where each file's inode lives (same in every copy of the image). */
static uint64_t file_blk[NFILES];
static uint32_t file_off[NFILES];

static uint8_t ref_blk[MAXBS], new_blk[MAXBS];

static int sh (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

/* Run a shell command quietly; its exit status, or -1. */
static int
sh (const char *fmt, ...)
{
  char cmd[2048];
  va_list ap;
  int n, st;

  va_start (ap, fmt);
  n = vsnprintf (cmd, sizeof cmd - 32, fmt, ap);
  va_end (ap);
  cr_assert (n > 0 && (size_t)n < sizeof cmd - 32);
  memmove (cmd + 2, cmd, (size_t)n + 1);
  memcpy (cmd, "{ ", 2);
  strcat (cmd, "; } >/dev/null 2>&1");
  st = system (cmd);
  if (st == -1 || !WIFEXITED (st))
    return -1;
  return WEXITSTATUS (st);
}

/* Run a program with stdout and stderr discarded, no shell in
 * between (this runs thousands of times); its exit status, or -1.
 */
static int
run_quiet (const char *const argv[])
{
  posix_spawn_file_actions_t fa;
  pid_t pid;
  int st, rc;

  cr_assert (posix_spawn_file_actions_init (&fa) == 0);
  cr_assert (posix_spawn_file_actions_addopen (&fa, 1, "/dev/null", O_WRONLY, 0)
             == 0);
  cr_assert (posix_spawn_file_actions_adddup2 (&fa, 1, 2) == 0);
  rc = posix_spawnp (&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy (&fa);
  if (rc != 0)
    return -1;
  if (waitpid (pid, &st, 0) != pid || !WIFEXITED (st))
    return -1;
  return WEXITSTATUS (st);
}

static void
cleanup_tmp (void)
{
  if (tmpdir[0])
    sh ("rm -rf '%s'", tmpdir);
  tmpdir[0] = '\0';
}

/* Copy src to dst, leaving holes where src has holes (found with
 * SEEK_DATA / SEEK_HOLE; a file system without them is copied whole).
 */
static void
sparse_copy (const char *src, const char *dst)
{
  static uint8_t buf[65536];
  int in, out;
  off_t size, pos = 0, hole;
  struct stat st;

  in = open (src, O_RDONLY);
  cr_assert (in >= 0, "open %s: %s", src, strerror (errno));
  out = open (dst, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert (out >= 0, "open %s: %s", dst, strerror (errno));
  cr_assert (fstat (in, &st) == 0);
  size = st.st_size;
  cr_assert (ftruncate (out, size) == 0);
  while (pos < size)
    {
      pos = lseek (in, pos, SEEK_DATA);
      if (pos < 0)
        {
          cr_assert (errno == ENXIO || errno == EINVAL);
          if (errno == ENXIO)
            break;
          pos = 0;
          hole = size;
        }
      else
        {
          hole = lseek (in, pos, SEEK_HOLE);
          cr_assert (hole > pos);
        }
      while (pos < hole)
        {
          size_t len = hole - pos < (off_t)sizeof buf ? (size_t)(hole - pos)
                                                      : sizeof buf;
          ssize_t r = pread (in, buf, len, pos);

          cr_assert (r > 0);
          cr_assert_eq (pwrite (out, buf, (size_t)r, pos), r);
          pos += r;
        }
    }
  close (in);
  close (out);
}

static void
read_at (const char *img, uint64_t pos, void *buf, size_t len)
{
  int fd = open (img, O_RDONLY);

  cr_assert (fd >= 0, "open %s: %s", img, strerror (errno));
  cr_assert_eq (pread (fd, buf, len, (off_t)pos), (ssize_t)len);
  close (fd);
}

static void
zero_at (const char *img, uint64_t pos, size_t len)
{
  static const uint8_t zero[MAXBS];
  int fd = open (img, O_WRONLY);

  cr_assert (fd >= 0);
  cr_assert_eq (pwrite (fd, zero, len, (off_t)pos), (ssize_t)len);
  close (fd);
}

/* debugfs "imap": which block and offset hold the inode of path. */
static void
imap (const char *img, const char *path, uint64_t *blk, uint32_t *off)
{
  char cmd[512], line[256];
  FILE *fp;
  bool found = false;
  unsigned long long b;
  unsigned o;

  snprintf (cmd, sizeof cmd, "debugfs -R 'imap %s' '%s' 2>/dev/null", path,
            img);
  fp = popen (cmd, "r");
  cr_assert (fp != NULL);
  while (fgets (line, sizeof line, fp))
    if (sscanf (line, " located at block %llu, offset 0x%x", &b, &o) == 2)
      {
        *blk = b;
        *off = o;
        found = true;
      }
  pclose (fp);
  cr_assert (found, "imap %s failed", path);
}

static bool
have_tools (void)
{
  return sh ("command -v mkfs.ext4 && command -v debugfs") == 0;
}

/* Make the populated base image for a configuration. */
static void
make_base (const struct fsconf *c)
{
  const char *t = getenv ("TMPDIR");
  char src[300];
  int i;

  snprintf (tmpdir, sizeof tmpdir, "%s/test-classify-XXXXXX",
            t && *t ? t : "/tmp");
  cr_assert (mkdtemp (tmpdir) != NULL, "mkdtemp: %s", strerror (errno));
  snprintf (src, sizeof src, "%s/src", tmpdir);
  snprintf (base_img, sizeof base_img, "%s/base.img", tmpdir);
  snprintf (ref_img, sizeof ref_img, "%s/ref.img", tmpdir);
  snprintf (new_img, sizeof new_img, "%s/new.img", tmpdir);
  snprintf (cmd_file, sizeof cmd_file, "%s/cmds", tmpdir);
  cr_assert (mkdir (src, 0755) == 0);
  for (i = 0; i < NFILES; i++)
    cr_assert (sh ("echo content-%d > '%s/f%d'", i, src, i) == 0);

  if (sh ("mkfs.ext4 -q -F -b %u -I %u -O %smetadata_csum,%s64bit,%shuge_file "
          "-d '%s' '%s' %s",
          c->bs, c->isz, c->csum ? "" : "^", c->feat ? "" : "^",
          c->feat ? "" : "^", src, base_img, c->bs > 4096 ? "32M" : "8M")
      != 0)
    {
      if (c->bs > 4096)
        cr_skip_test ("mkfs.ext4 cannot make a %u-byte-block filesystem here",
                      c->bs);
      cr_assert_fail ("mkfs.ext4 failed: bs=%u isz=%u csum=%d feat=%d", c->bs,
                      c->isz, c->csum, c->feat);
    }

  for (i = 0; i < NFILES; i++)
    {
      char p[16];

      snprintf (p, sizeof p, "/f%d", i);
      imap (base_img, p, &file_blk[i], &file_off[i]);
      cr_assert (file_off[i] + c->isz <= c->bs);
    }
}

/* Apply debugfs commands (one per line, may be NULL) to an image. */
static void
debugfs_w (const char *img, const char *cmds)
{
  FILE *fp;

  if (!cmds)
    return;
  fp = fopen (cmd_file, "w");
  cr_assert (fp != NULL);
  fputs (cmds, fp);
  fputc ('\n', fp);
  fclose (fp);
  cr_assert (
      run_quiet ((const char *[]){ "debugfs", "-w", "-f", cmd_file, img, NULL })
      == 0);
}

/* ref = base + pre. */
static void
make_ref (const char *pre)
{
  sparse_copy (base_img, ref_img);
  debugfs_w (ref_img, pre);
}

/* new = ref + cmds; then read file fi's inode-table block of both. */
static void
make_new (const struct fsconf *c, const char *cmds, int fi)
{
  sparse_copy (ref_img, new_img);
  debugfs_w (new_img, cmds);
  read_at (ref_img, file_blk[fi] * c->bs, ref_blk, c->bs);
  read_at (new_img, file_blk[fi] * c->bs, new_blk, c->bs);
}

/* Classify the block of file fi and its record, which must agree. */
static enum tclass
classify_file (const struct fsconf *c, int fi, const char *what)
{
  enum tclass b = classify_block (c->isz, ref_blk, new_blk, c->bs);
  enum tclass r = classify_record (c->isz, ref_blk + file_off[fi],
                                   new_blk + file_off[fi]);

  cr_assert_eq (b, r, "%s: block %s but record %s", what, tclass_name (b),
                tclass_name (r));
  return b;
}

#define CFG_FMT "bs=%u isz=%u csum=%d 64bit/huge_file=%d"
#define CFG_ARGS(c) (c)->bs, (c)->isz, (c)->csum, (c)->feat

/* One field of /f0 changed alone. */
struct fcase
{
  const char *cmd;
  enum tclass cls;    /* class when the field exists (and, for an extra
                         time field, is covered by i_extra_isize) */
  uint16_t min_extra; /* 0: base field; else smallest covering extra_isize */
  bool time_field;
};

static const struct fcase cases[] = {
  /* Timestamps and version. */
  { "set_inode_field /f0 atime 20200101", TCLASS_ATIME, 0, true },
  { "set_inode_field /f0 atime_extra 0x1000", TCLASS_ATIME, 16, true },
  { "set_inode_field /f0 ctime 20200101", TCLASS_TIME, 0, true },
  { "set_inode_field /f0 mtime 20200101", TCLASS_TIME, 0, true },
  { "set_inode_field /f0 ctime_extra 0x1000", TCLASS_TIME, 8, true },
  { "set_inode_field /f0 mtime_extra 0x1000", TCLASS_TIME, 12, true },
  { "set_inode_field /f0 crtime 20200101", TCLASS_TIME, 20, true },
  { "set_inode_field /f0 crtime_extra 0x1000", TCLASS_TIME, 24, true },
  { "set_inode_field /f0 version_lo 5", TCLASS_TIME, 0, true },
  { "set_inode_field /f0 version_hi 5", TCLASS_TIME, 28, true },
  /* Everything else. */
  { "set_inode_field /f0 mode 0100600", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 mode 0", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 uid 1000", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 uid_hi 1", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 gid 1000", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 gid_hi 1", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 size 4096", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 size_hi 1", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 links_count 3", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 links_count 0", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 blocks_lo 99", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 blocks_hi 1", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 flags 0x80080", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 flags 0x280000", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 block[5] 12345", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 block[IND] 12345", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 generation 42", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 file_acl 1234", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 file_acl_hi 1", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 dtime 20200101", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 faddr 7", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 frag 1", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 fsize 2", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 author 0x55667788", TCLASS_REAL, 0, false },
  /* A new checksum with no field change (checksum_hi follows the
   * "checksum" write; checksum_hi alone exists only in large inodes).
   */
  { "set_inode_field /f0 checksum 0x1234", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 checksum_lo 0x1234", TCLASS_REAL, 0, false },
  { "set_inode_field /f0 checksum_hi 0x1234", TCLASS_REAL, 4, false },
  { "set_inode_field /f0 extra_isize 16", TCLASS_REAL, 2, false },
  { "set_inode_field /f0 extra_isize 28", TCLASS_REAL, 2, false },
  { "set_inode_field /f0 projid 7", TCLASS_REAL, 32, false },
  { "ea_set /f0 user.x val", TCLASS_REAL, 0, false },
};

#define NCASES (sizeof cases / sizeof cases[0])

/* What the rule says for case k on a record with this extra_isize
 * (extra < 0: the image's own value).  Fields that a 128-byte inode
 * does not have are left alone by debugfs, so the block stays SAME.
 */
static enum tclass
expected (const struct fsconf *c, const struct fcase *k, int extra,
          bool csum_hi_moved)
{
  bool valid;

  if (k->min_extra > 0 && c->isz == 128)
    return TCLASS_SAME;
  if (k->cls == TCLASS_REAL || c->isz == 128)
    return k->cls;
  valid = extra % 4 == 0 && 128u + (unsigned)extra <= c->isz;
  if (!valid)
    return csum_hi_moved || k->min_extra > 0 ? TCLASS_REAL : k->cls;
  return k->min_extra <= extra ? k->cls : TCLASS_REAL;
}

static void
run_cases (const struct fsconf *c, int extra, bool gated_only,
           const char *label)
{
  size_t i;

  for (i = 0; i < NCASES; i++)
    {
      const struct fcase *k = &cases[i];
      enum tclass got, want;
      bool moved;
      const uint8_t *r = ref_blk + file_off[0], *n = new_blk + file_off[0];

      if (gated_only && !k->time_field
          && strncmp (k->cmd, "set_inode_field /f0 checksum", 28) != 0
          && strncmp (k->cmd, "set_inode_field /f0 projid", 26) != 0)
        continue; /* the extra_isize runs need only the fields it gates */

      make_new (c, k->cmd, 0);
      moved = c->isz > 128 && memcmp (r + 0x82, n + 0x82, 2) != 0;
      want = expected (c, k, extra, moved);
      got = classify_file (c, 0, k->cmd);
      if (want != TCLASS_SAME)
        cr_assert_neq (memcmp (ref_blk, new_blk, c->bs), 0,
                       CFG_FMT " %s: '%s' did not change the block",
                       CFG_ARGS (c), label, k->cmd);
      cr_assert_eq (got, want, CFG_FMT " %s: '%s': got %s, want %s",
                    CFG_ARGS (c), label, k->cmd, tclass_name (got),
                    tclass_name (want));
    }
}

/* Changes made on top of an already changed reference. */
struct pcase
{
  const char *pre, *cmd;
  enum tclass cls;
  uint32_t min_isz; /* 0: any inode size */
};

static const struct pcase pre_cases[] = {
  /* EA_INODE: the "time" fields are xattr data. */
  { "set_inode_field /f0 flags 0x280000", "set_inode_field /f0 atime 20200101",
    TCLASS_REAL, 0 },
  { "set_inode_field /f0 flags 0x280000", "set_inode_field /f0 ctime 20200101",
    TCLASS_REAL, 0 },
  /* Unused or freed records. */
  { "set_inode_field /f0 links_count 0", "set_inode_field /f0 atime 20200101",
    TCLASS_REAL, 0 },
  { "set_inode_field /f0 mode 0", "set_inode_field /f0 atime 20200101",
    TCLASS_REAL, 0 },
  /* A set but unchanged i_dtime does not matter. */
  { "set_inode_field /f0 dtime 20200101", "set_inode_field /f0 atime 20200101",
    TCLASS_ATIME, 0 },
  { "set_inode_field /f0 dtime 20200101", "set_inode_field /f0 dtime 20210101",
    TCLASS_REAL, 0 },
  /* An inode with xattrs: times still move alone, xattrs do not. */
  { "ea_set /f0 user.x val", "set_inode_field /f0 atime 20200101", TCLASS_ATIME,
    0 },
  { "ea_set /f0 user.x val", "set_inode_field /f0 mtime 20200101", TCLASS_TIME,
    0 },
  /* (a 128-byte inode keeps them in an xattr block, not in the inode) */
  { "ea_set /f0 user.x val", "ea_set /f0 user.x other", TCLASS_REAL, 256 },
  { "ea_set /f0 user.x val", "ea_rm /f0 user.x", TCLASS_REAL, 256 },
};

static void
run_pre_cases (const struct fsconf *c)
{
  size_t i;

  for (i = 0; i < sizeof pre_cases / sizeof pre_cases[0]; i++)
    {
      const struct pcase *k = &pre_cases[i];
      enum tclass got;

      if (c->isz < k->min_isz)
        continue;
      make_ref (k->pre);
      make_new (c, k->cmd, 0);
      cr_assert_neq (memcmp (ref_blk, new_blk, c->bs), 0,
                     CFG_FMT ": '%s' then '%s' did not change the block",
                     CFG_ARGS (c), k->pre, k->cmd);
      got = classify_file (c, 0, k->cmd);
      cr_assert_eq (got, k->cls, CFG_FMT ": '%s' then '%s': got %s, want %s",
                    CFG_ARGS (c), k->pre, k->cmd, tclass_name (got),
                    tclass_name (k->cls));
    }
}

/* Two inodes of one block changed together. */
static void
run_pair_cases (const struct fsconf *c)
{
  static const struct
  {
    const char *a, *b;
    enum tclass cls;
  } pairs[] = {
    { "atime 20200101", "atime 20200101", TCLASS_ATIME },
    { "atime 20200101", "ctime 20200101", TCLASS_TIME },
    { "mtime 20200101", "uid 1000", TCLASS_REAL },
    { "atime 20200101", "links_count 0", TCLASS_REAL },
  };
  int fa = -1, fb = -1, i, j;
  size_t p;
  char cmds[256];

  for (i = 0; i < NFILES && fa < 0; i++)
    for (j = i + 1; j < NFILES; j++)
      if (file_blk[i] == file_blk[j])
        {
          fa = i;
          fb = j;
          break;
        }
  if (fa < 0)
    {
      cr_assert_eq (c->isz, c->bs, "no two of %d inodes share a block", NFILES);
      return; /* one record per block */
    }

  make_ref (NULL);
  for (p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
    {
      enum tclass got;

      snprintf (cmds, sizeof cmds,
                "set_inode_field /f%d %s\nset_inode_field /f%d %s", fa,
                pairs[p].a, fb, pairs[p].b);
      make_new (c, cmds, fa);
      cr_assert_neq (
          memcmp (ref_blk + file_off[fb], new_blk + file_off[fb], c->isz), 0);
      got = classify_block (c->isz, ref_blk, new_blk, c->bs);
      cr_assert_eq (got, pairs[p].cls,
                    CFG_FMT ": f%d %s + f%d %s: got %s, want %s", CFG_ARGS (c),
                    fa, pairs[p].a, fb, pairs[p].b, tclass_name (got),
                    tclass_name (pairs[p].cls));
    }
}

/* Lazy-init zeroing of a block that holds a used inode. */
static void
run_zeroing (const struct fsconf *c)
{
  make_ref (NULL);
  sparse_copy (ref_img, new_img);
  zero_at (new_img, file_blk[0] * c->bs, c->bs);
  read_at (ref_img, file_blk[0] * c->bs, ref_blk, c->bs);
  read_at (new_img, file_blk[0] * c->bs, new_blk, c->bs);
  cr_assert_eq (classify_file (c, 0, "zeroing"), TCLASS_REAL);
}

static struct fsconf confs[4 * 4 * 2 * 2];

ParameterizedTestParameters (classify_image, fields)
{
  static const uint32_t bss[] = { 1024, 2048, 4096, 65536 };
  size_t n = 0, b, s;
  int csum, feat;

  for (b = 0; b < 4; b++)
    for (s = 0; s < 4; s++)
      for (csum = 0; csum < 2; csum++)
        for (feat = 0; feat < 2; feat++)
          if (isizes[s] <= bss[b])
            confs[n++] = (struct fsconf){ bss[b], isizes[s], csum, feat };
  return cr_make_param_array (struct fsconf, confs, n);
}

ParameterizedTest (struct fsconf *c, classify_image, fields,
                   .fini = cleanup_tmp)
{
  uint32_t max_extra;
  const int extras[] = { 0, 4, 8, 12, 16, 20, 24, 28, 32, 64, 6, 30, -1, -2 };
  size_t e;

  if (!have_tools ())
    cr_skip_test ("mkfs.ext4 or debugfs not found");
  make_base (c);

  /* Each field alone, with the i_extra_isize mkfs chose (32). */
  make_ref (NULL);
  run_cases (c, c->isz > 128 ? 32 : 0, false, "default extra_isize");

  run_pre_cases (c);
  run_pair_cases (c);
  run_zeroing (c);

  /* The i_extra_isize rule depends on neither the block size nor
   * 64bit/huge_file: run its variations on 4096-byte blocks with those
   * features on only, to keep the suite short.
   */
  if (c->isz == 128 || c->bs != 4096 || !c->feat)
    return;

  /* i_extra_isize variations on the reference, valid and bogus. */
  max_extra = c->isz - 128;
  for (e = 0; e < sizeof extras / sizeof extras[0]; e++)
    {
      int extra = extras[e];
      char pre[80], label[40];

      if (extra == -1)
        extra = (int)max_extra; /* valid, no room for xattrs */
      else if (extra == -2)
        extra = (int)max_extra + 4; /* too big */
      else if ((uint32_t)extra > max_extra)
        continue;
      snprintf (pre, sizeof pre, "set_inode_field /f0 extra_isize %d", extra);
      snprintf (label, sizeof label, "extra_isize=%d", extra);
      make_ref (pre);
      read_at (ref_img, file_blk[0] * c->bs, ref_blk, c->bs);
      cr_assert_eq (ref_blk[file_off[0] + 0x80]
                        | (ref_blk[file_off[0] + 0x81] << 8),
                    extra, "debugfs did not set extra_isize %d", extra);
      run_cases (c, extra, true, label);
    }
}

/* ---- the superblock's block ------------------------------------------ */

/* A superblock-like block: every byte non-zero and distinct enough that
 * a change of any one is a change.
 */
static void
sb_fill (uint8_t *b, size_t n)
{
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t)(i * 7 + 1);
}

static bool
sb_informational (size_t at)
{
  return (at >= 0x2C && at < 0x34)      /* s_mtime, s_wtime */
         || (at >= 0x88 && at < 0xC8)   /* s_last_mounted */
         || (at >= 0x178 && at < 0x180) /* s_kbytes_written */
         || at == 0x274 || at == 0x275; /* s_wtime_hi, s_mtime_hi */
}

/* Every byte of the block, alone and with the checksum, for each block
 * size: ATIME exactly for the informational fields, REAL elsewhere.
 */
Test (classify, superblock_every_byte)
{
  static uint8_t ref[4096], nw[4096];

  for (uint32_t bs = 1024; bs <= 4096; bs *= 2)
    {
      uint32_t sb = 1024 % bs;

      sb_fill (ref, bs);
      cr_assert_eq (classify_superblock (ref, ref, bs, sb), TCLASS_SAME);
      for (size_t i = 0; i < bs; i++)
        for (int csum = 0; csum < 2; csum++)
          {
            bool info = i >= sb && i - sb < 1024 && sb_informational (i - sb);
            enum tclass want = info ? TCLASS_ATIME : TCLASS_REAL;

            memcpy (nw, ref, bs);
            nw[i] ^= 0x5A;
            if (csum)
              nw[sb + 0x3FC] ^= 0x11;
            cr_assert_eq (classify_superblock (ref, nw, bs, sb), want,
                          "block %u, byte %zu (0x%zx in the superblock), "
                          "checksum %s",
                          bs, i, i - sb, csum ? "changed" : "kept");
          }
    }
}

/* What the kernel's first file open after a mount logs: a new
 * s_last_mounted and checksum.
 */
Test (classify, superblock_last_mounted)
{
  static uint8_t ref[4096], nw[4096];

  sb_fill (ref, 4096);
  memcpy (nw, ref, 4096);
  memcpy (nw + 1024 + 0x88, "/mnt/data\0", 10);
  memset (nw + 1024 + 0x3FC, 0xEE, 4);
  cr_assert_eq (classify_superblock (ref, nw, 4096, 1024), TCLASS_ATIME);
  nw[1024 + 0x3A] ^= 1; /* s_state too: real */
  cr_assert_eq (classify_superblock (ref, nw, 4096, 1024), TCLASS_REAL);
}

/* A superblock that does not fit in the block is never classified. */
Test (classify, superblock_outside_the_block)
{
  static uint8_t ref[2048], nw[2048];

  sb_fill (ref, 2048);
  memcpy (nw, ref, 2048);
  nw[0x30 + 1536] ^= 1;
  cr_assert_eq (classify_superblock (ref, nw, 2048, 1536), TCLASS_REAL);
  nw[10] ^= 1;
  cr_assert_eq (classify_superblock (ref, nw, 1024, 4096), TCLASS_REAL);
  cr_assert_eq (classify_superblock (ref, ref, 2048, 1536), TCLASS_SAME);
}
