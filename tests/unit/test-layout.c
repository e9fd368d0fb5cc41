/* SPDX-License-Identifier: BSD-3-Clause */
/* test-layout.c --- layout discovery checked against dumpe2fs and debugfs
 * on images made at test time (feature matrix, partitions, bad input).
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

#include "testimg.h"
#include "testutil.h"
#include "layout.h"
#include "log.h"

/* ---- helpers ---------------------------------------------------------- */

static void
need (const char *prog)
{
  if (sh ("command -v %s", prog) != 0)
    cr_skip_test ("%s is not installed", prog);
}

static int
pread_cb (void *opaque, void *buf, size_t len, uint64_t off)
{
  struct img *im = opaque;
  char *p = buf;

  cr_assert_leq (off + len, im->size, "read past the device: %" PRIu64 "+%zu",
                 off, len);
  while (len)
    {
      ssize_t n = pread (im->fd, p, len, off);
      if (n < 0)
        return -errno;
      if (n == 0)
        return -EIO;
      p += n;
      len -= n;
      off += n;
    }
  return 0;
}

static void
pwrite_at (struct img *im, const void *buf, size_t len, uint64_t off)
{
  cr_assert_eq (pwrite (im->fd, buf, len, off), (ssize_t)len);
}

static void
pread_at (struct img *im, void *buf, size_t len, uint64_t off)
{
  cr_assert_eq (pread (im->fd, buf, len, off), (ssize_t)len);
}

static struct layout *
discover (struct img *im)
{
  struct layout *L = NULL;
  int r = layout_discover (pread_cb, im, im->size, &L);
  cr_assert_eq (r, 0, "layout_discover: %s", strerror (-r));
  cr_assert_not_null (L);
  return L;
}

/* crc32c without final inversion (the ext4 convention), for the seed. */
static uint32_t
crc32c_raw (uint32_t crc, const unsigned char *p, size_t len)
{
  while (len--)
    {
      crc ^= *p++;
      for (int k = 0; k < 8; k++)
        crc = (crc >> 1) ^ (0x82F63B78u & -(crc & 1));
    }
  return crc;
}

static uint64_t
field (const char *text, const char *name, uint64_t dflt)
{
  const char *p = strstr (text, name);
  if (!p)
    return dflt;
  p += strlen (name);
  while (*p == ' ' || *p == ':')
    p++;
  return strtoull (p, NULL, 0);
}

static bool
has_feature (const char *dump, const char *feat)
{
  const char *p = strstr (dump, "Filesystem features:");
  char word[64];
  int n;

  cr_assert_not_null (p);
  p += strlen ("Filesystem features:");
  while (sscanf (p, " %63s%n", word, &n) == 1)
    {
      if (strcmp (word, feat) == 0)
        return true;
      p += n;
      if (*p == '\n')
        break;
    }
  return false;
}

/* ---- the independent check -------------------------------------------- */

/* Next "Group N:" line of dumpe2fs output after p. */
static const char *
next_group (const char *p)
{
  while ((p = strstr (p, "\nGroup ")) != NULL)
    {
      if (p[7] >= '0' && p[7] <= '9')
        return p;
      p++;
    }
  return NULL;
}

/* The file dumpe2fs and debugfs read for spec: the file itself, or for
 * "file?offset=N" a sparse copy of file from N on, in file.part (from
 * e2fsprogs 1.47.1 on, a name with '=' is a NAME=VALUE tag to resolve:
 * "Unable to resolve").  Returns whether it made the copy.
 */
static bool
spec_file (const char *spec, char *buf, size_t len)
{
  const char *q = strstr (spec, "?offset=");
  int n = q ? (int)(q - spec) : (int)strlen (spec);

  snprintf (buf, len, "%.*s%s", n, spec, q ? ".part" : "");
  if (q)
    cr_assert_eq (sh ("dd if='%.*s' of='%s' bs=64k iflag=skip_bytes skip=%s "
                      "conv=sparse status=none",
                      n, spec, buf, q + strlen ("?offset=")),
                  0);
  return q != NULL;
}

/* Check fs against dumpe2fs / debugfs run on spec ("file" or
 * "file?offset=N").
 */
static void
check_fs (const struct layout *L, const struct ext4_fs *fs, const char *spec)
{
  char file[512];
  bool copied = spec_file (spec, file, sizeof file);
  char *dump = capture ("dumpe2fs '%s' 2>/dev/null", file);
  uint64_t bs = field (dump, "Block size:", 0);
  uint64_t isz = field (dump, "Inode size:", 128);
  uint64_t ipg = field (dump, "Inodes per group:", 0);
  uint64_t blocks = field (dump, "Block count:", 0);
  uint64_t dsize = field (dump, "Group descriptor size:", 32);
  uint64_t first_meta_bg = field (dump, "First meta block group:", 0);
  bool meta_bg = has_feature (dump, "meta_bg");
  uint64_t dpb, desc_blocks, groups = 0, itable_bytes = 0;
  uint64_t reserved = 0, expected_meta_blocks;
  const char *p;

  cr_assert_gt (bs, 0, "dumpe2fs gave no block size for %s", spec);
  cr_assert_eq (fs->block_size, bs);
  cr_assert_eq (fs->inode_size, isz);
  cr_assert_eq (fs->inodes_per_group, ipg);
  cr_assert_eq (fs->size, blocks * bs);
  cr_assert_eq (layout_fs_at (L, fs->start), fs);
  cr_assert_eq (layout_fs_at (L, fs->start + fs->size - 1), fs);
  cr_assert (fs->start == 0 || layout_fs_at (L, fs->start - 1) != fs);
  cr_assert_null (layout_fs_at (L, fs->start + fs->size));
  cr_assert (layout_overlaps_watch (L, fs->start + 1024, 1));
  cr_assert_eq (fs->has_journal, has_feature (dump, "has_journal"));
  cr_assert_eq ((fs->feature_incompat & 0x80) != 0,
                has_feature (dump, "64bit"));
  cr_assert_eq ((fs->feature_ro_compat & 0x400) != 0,
                has_feature (dump, "metadata_csum"));
  cr_assert_eq ((fs->feature_incompat & 0x10) != 0, meta_bg);
  dpb = bs / dsize;

  /* Walk the per-group lines. */
  for (p = next_group (dump); p; p = next_group (p + 1))
    {
      unsigned long g = strtoul (p + 7, NULL, 10);
      const char *end = next_group (p + 1);
      const char *q;
      unsigned long long x, y;

      cr_assert_eq (g, groups, "group lines out of order");
      groups++;

      q = strstr (p, "Inode table at ");
      cr_assert (q && (!end || q < end), "group %lu: no inode table", g);
      cr_assert_eq (sscanf (q, "Inode table at %llu-%llu", &x, &y), 2);
      uint64_t off = fs->start + x * bs, len = (y - x + 1) * bs;
      cr_assert_eq (len, ipg * isz, "group %lu table length", g);
      const struct itable_run *r = layout_itable_at (fs, off);
      cr_assert_not_null (r, "group %lu: table at block %llu not found", g, x);
      cr_assert_leq (off + len, r->off + r->len);
      cr_assert_eq (r->first_ino + (off - r->off) / isz, g * ipg + 1);
      cr_assert_eq (layout_ino_at (fs, off), g * ipg + 1);
      cr_assert_eq (layout_ino_at (fs, off + len - 1), (g + 1) * ipg);
      cr_assert_not (layout_overlaps_meta (fs, off, len));
      cr_assert_not (layout_overlaps_journal (fs, off, len));
      itable_bytes += len;

      /* Primary descriptors: group 0, and with meta_bg the first group
       * of each meta group past s_first_meta_bg.
       */
      bool primary
          = g == 0 || (meta_bg && g % dpb == 0 && g / dpb >= first_meta_bg);
      q = strstr (p, "Group descriptor");
      if (primary && q && (!end || q < end))
        {
          q = strstr (q, " at ");
          int n = sscanf (q, " at %llu-%llu", &x, &y);
          cr_assert_geq (n, 1);
          if (n == 1)
            y = x;
          for (unsigned long long b = x; b <= y; b++)
            cr_assert (layout_overlaps_meta (fs, fs->start + b * bs, bs),
                       "group %lu: descriptor block %llu not in meta", g, b);
        }
      q = strstr (p, "Reserved GDT blocks at ");
      if (g == 0 && q && (!end || q < end))
        {
          cr_assert_eq (sscanf (q, "Reserved GDT blocks at %llu-%llu", &x, &y),
                        2);
          reserved = y - x + 1;
          cr_assert (layout_overlaps_meta (fs, fs->start + x * bs, 1));
          cr_assert (layout_overlaps_meta (fs, fs->start + y * bs + bs - 1, 1));
        }
      if (g == 0)
        {
          q = strstr (p, "Primary superblock at ");
          cr_assert (q && (!end || q < end));
          cr_assert_eq (sscanf (q, "Primary superblock at %llu", &x), 1);
          cr_assert (layout_overlaps_meta (fs, fs->start + x * bs, bs));
        }
    }
  cr_assert_eq (fs->group_count, groups);
  cr_assert_gt (groups, 0);
  uint64_t run_bytes = 0;
  for (size_t i = 0; i < fs->n_itable; i++)
    {
      run_bytes += fs->itable[i].len;
      if (i)
        cr_assert_gt (fs->itable[i].off,
                      fs->itable[i - 1].off + fs->itable[i - 1].len - 1);
    }
  cr_assert_eq (run_bytes, itable_bytes, "inode-table runs cover extra bytes");
  desc_blocks = (groups + dpb - 1) / dpb;
  expected_meta_blocks = 1 + desc_blocks + reserved;

  /* metadata_csum seed. */
  if (fs->feature_ro_compat & 0x400)
    {
      unsigned char uuid[16];
      const char *u = strstr (dump, "Filesystem UUID:");
      cr_assert_not_null (u);
      u += strlen ("Filesystem UUID:");
      while (*u == ' ')
        u++;
      for (int i = 0; i < 16; i++)
        {
          if (*u == '-')
            u++;
          unsigned v;
          cr_assert_eq (sscanf (u, "%2x", &v), 1);
          uuid[i] = v;
          u += 2;
        }
      uint32_t seed = has_feature (dump, "metadata_csum_seed")
                          ? (uint32_t)field (dump, "Checksum seed:", 0)
                          : crc32c_raw (~0u, uuid, 16);
      cr_assert_eq (fs->csum_seed, seed);
    }
  else
    cr_assert_eq (fs->csum_seed, 0);

  /* Journal. */
  if (fs->has_journal && field (dump, "Journal inode:", 0) == 0)
    {
      cr_assert (fs->journal_external);
      cr_assert_not_null (strstr (dump, "Journal UUID:"));
      cr_assert_eq (fs->n_journal, 0);
    }
  else if (fs->has_journal)
    {
      uint64_t jblocks = field (dump, "Total journal blocks:", 0);
      char *stat = capture ("debugfs -R 'stat <8>' '%s' 2>/dev/null", file);
      const char *s = strstr (stat, "EXTENTS:");
      uint64_t data = 0, mapping = 0;

      cr_assert (!fs->journal_external);
      if (!s)
        s = strstr (stat, "BLOCKS:");
      cr_assert_not_null (s, "no block map in debugfs stat <8>");
      cr_assert_eq (fs->journal_blocks, jblocks);
      for (s = strchr (s, '('); s; s = strchr (s + 1, '('))
        {
          unsigned long long a, b, x, y;
          char tag[16];
          if (sscanf (s, "(%llu-%llu):%llu-%llu", &a, &b, &x, &y) == 4)
            ;
          else if (sscanf (s, "(%llu):%llu", &a, &x) == 2)
            b = a, y = x;
          else if (sscanf (s, "(%15[A-Z0-9]):%llu", tag, &x) == 2)
            {
              if (strcmp (tag, "TOTAL") == 0)
                continue;
              cr_assert (layout_overlaps_meta (fs, fs->start + x * bs, bs),
                         "journal mapping block %llu (%s) not in meta", x, tag);
              cr_assert_not (
                  layout_overlaps_journal (fs, fs->start + x * bs, bs));
              mapping++;
              continue;
            }
          else
            continue;
          cr_assert_eq (b - a, y - x);
          cr_assert_eq (layout_journal_off (fs, a), fs->start + x * bs,
                        "journal block %llu", a);
          cr_assert_eq (layout_journal_off (fs, b), fs->start + y * bs,
                        "journal block %llu", b);
          cr_assert (layout_overlaps_journal (fs, fs->start + x * bs, 1));
          cr_assert (layout_overlaps_journal (fs, fs->start + y * bs, bs));
          data += b - a + 1;
        }
      cr_assert_eq (data, jblocks,
                    "debugfs listed %" PRIu64 " of %" PRIu64 " journal blocks",
                    data, jblocks);
      uint64_t jbytes = 0;
      for (size_t i = 0; i < fs->n_journal; i++)
        jbytes += fs->journal[i].len;
      cr_assert_eq (jbytes, jblocks * bs);
      cr_assert_eq (layout_journal_off (fs, jblocks), UINT64_MAX);
      expected_meta_blocks += mapping;

      cr_assert (fs->jsb_valid);
      cr_assert_eq (fs->jsb.blocksize, bs);
      cr_assert_eq (fs->jsb.maxlen, jblocks);
      cr_assert_eq (fs->jsb.sequence, field (dump, "Journal sequence:", 0));
      cr_assert_eq (fs->jsb.start, field (dump, "Journal start:", 0));
      cr_assert_eq (fs->jsb.dev_off, layout_journal_off (fs, 0));
      /* The fast-commit area is in use only once the journal has the
       * FAST_COMMIT feature (the kernel sets it at mount; dumpe2fs does
       * not name that flag, fast_commit_enabled_in_journal checks it). */
      bool jfc = (fs->jsb.feature_incompat & 0x20) != 0;
      cr_assert_eq (fs->jsb.num_fc_blks,
                    jfc ? field (dump, "Fast commit length:", 0) : 0);
      free (stat);
    }
  else
    {
      cr_assert_eq (fs->n_journal, 0);
      cr_assert_not (fs->jsb_valid);
    }

  uint64_t meta_bytes = 0;
  for (size_t i = 0; i < fs->n_meta; i++)
    meta_bytes += fs->meta[i].len;
  cr_assert_eq (meta_bytes, expected_meta_blocks * bs,
                "meta covers %" PRIu64 " blocks, expected %" PRIu64,
                meta_bytes / bs, expected_meta_blocks);
  free (dump);
  if (copied)
    unlink (file);
}

/* mkfs a whole-device image with the given mke2fs options and check it.
 * Revision 0 ("-r 0"), which e2fsprogs 1.47.2 no longer makes, is made
 * there as mke2fs -r 0 makes it: no feature, 128-byte inodes, no default
 * mount options, then the revision set to 0.
 */
static void
check_config (uint64_t size, const char *opts)
{
  struct img im;
  struct layout *L;

  need ("mke2fs");
  need ("dumpe2fs");
  need ("debugfs");
  img_new (&im, "ext4lazy-layout", size);
  int r = sh ("mke2fs -q -F %s '%s'", opts, im.path);
  if (r != 0 && strstr (opts, "-r 0"))
    r = sh ("mke2fs -q -F -t ext2 -O none -I 128 '%s' && "
            "printf 'ssv rev_level 0\nssv default_mount_opts 0\n' "
            "| debugfs -w -f - '%s' >/dev/null 2>&1 && dumpe2fs -h '%s' "
            "2>/dev/null | grep -q '^Filesystem revision #: *0 '",
            im.path, im.path, im.path);
  cr_assert_eq (r, 0, "mke2fs %s failed", opts);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 1, "%s: no fs found; notices:\n%s", opts, notices);
  cr_assert_eq (L->fs[0].start, 0);
  check_fs (L, &L->fs[0], im.path);
  layout_free (L);
  img_del (&im);
}

#define MiB (1024ull * 1024)

/* ---- feature matrix ---------------------------------------------------- */

Test (matrix, ext4_1k_i128)
{
  check_config (64 * MiB, "-t ext4 -b 1024 -I 128");
}
Test (matrix, ext4_2k_i256)
{
  check_config (128 * MiB, "-t ext4 -b 2048 -I 256");
}
Test (matrix, ext4_4k_i512)
{
  check_config (300 * MiB, "-t ext4 -b 4096 -I 512");
}
Test (matrix, ext4_4k_i1024)
{
  check_config (300 * MiB, "-t ext4 -b 4096 -I 1024");
}
Test (matrix, ext4_1k_i1024)
{
  check_config (64 * MiB, "-t ext4 -b 1024 -I 1024");
}
Test (matrix, ext4_64k)
{
  check_config (1024 * MiB, "-t ext4 -b 65536");
}
Test (matrix, no_metadata_csum)
{
  check_config (300 * MiB, "-t ext4 -O ^metadata_csum");
}
Test (matrix, csum_seed)
{
  check_config (64 * MiB, "-t ext4 -b 1024 -O metadata_csum_seed");
}
Test (matrix, no_64bit)
{
  check_config (300 * MiB, "-t ext4 -O ^64bit,^metadata_csum");
}
Test (matrix, no_flex_bg)
{
  check_config (64 * MiB, "-t ext4 -b 1024 -O ^flex_bg");
}
Test (matrix, meta_bg)
{
  check_config (256 * MiB, "-t ext4 -b 1024 -O meta_bg,^resize_inode");
}
Test (matrix, meta_bg_32bit)
{
  check_config (
      256 * MiB,
      "-t ext4 -b 1024 -O meta_bg,^resize_inode,^64bit,^metadata_csum");
}
Test (matrix, sparse_super2)
{
  check_config (64 * MiB, "-t ext4 -b 1024 -O sparse_super2");
}
Test (matrix, no_journal)
{
  check_config (64 * MiB, "-t ext4 -O ^has_journal");
}
Test (matrix, fast_commit)
{
  check_config (256 * MiB, "-t ext4 -O fast_commit");
}

/* Once the journal superblock carries FAST_COMMIT (as after a mount),
 * its fast-commit length is reported, and re-reading the jbd2
 * superblock picks up the change. */
Test (matrix, fast_commit_enabled_in_journal)
{
  struct img im;
  struct layout *L;
  struct jbd2_sb j;
  unsigned char b[4];

  need ("mke2fs");
  need ("dumpe2fs");
  need ("debugfs");
  img_new (&im, "ext4lazy-layout", 256 * MiB);
  cr_assert_eq (
      sh ("mke2fs -q -F -t ext4 -O fast_commit,^metadata_csum '%s'", im.path),
      0);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 1);
  const struct ext4_fs *fs = &L->fs[0];
  cr_assert (fs->jsb_valid);
  cr_assert_eq (fs->jsb.num_fc_blks, 0);
  pread_at (&im, b, 4, fs->jsb.dev_off + 0x28);
  b[3] |= 0x20; /* big-endian JBD2_FEATURE_INCOMPAT_FAST_COMMIT */
  pwrite_at (&im, b, 4, fs->jsb.dev_off + 0x28);
  cr_assert_eq (layout_read_jsb (fs, pread_cb, &im, &j), 0);
  cr_assert_eq (j.feature_incompat & 0x20, 0x20);
  char *dump = capture ("dumpe2fs -h '%s' 2>/dev/null", im.path);
  uint64_t fcl = field (dump, "Fast commit length:", 0);
  cr_assert_gt (fcl, 0);
  cr_assert_eq (j.num_fc_blks, fcl);
  free (dump);
  layout_free (L);
  L = discover (&im);
  check_fs (L, &L->fs[0], im.path);
  layout_free (L);
  img_del (&im);
}
Test (matrix, bigalloc)
{
  check_config (512 * MiB, "-t ext4 -b 4096 -O bigalloc -C 65536");
}
Test (matrix, bigalloc_1k)
{
  check_config (256 * MiB, "-t ext4 -b 1024 -O bigalloc -C 16384");
}
Test (matrix, ext2)
{
  check_config (64 * MiB, "-t ext2");
}
Test (matrix, ext2_rev0)
{
  check_config (64 * MiB, "-t ext2 -r 0");
}
Test (matrix, ext3_1k)
{
  check_config (64 * MiB, "-t ext3 -b 1024");
}
Test (matrix, ext3_4k)
{
  check_config (300 * MiB, "-t ext3 -b 4096 -I 128");
}
Test (matrix, deep_journal_extents)
{
  /* 256 MiB of 1 KiB blocks spans many groups: the extent tree needs an
   * index block, which belongs to meta. */
  check_config (1024 * MiB,
                "-t ext4 -b 1024 -J size=256 -E lazy_journal_init=1");
}

/* has_journal with s_journal_inum 0: an external journal (set up with
 * debugfs, since mke2fs wants a block device for -J device=). */
Test (matrix, external_journal)
{
  struct img im;
  struct layout *L;
  struct jbd2_sb j;

  need ("mke2fs");
  need ("debugfs");
  img_new (&im, "ext4lazy-layout", 64 * MiB);
  cr_assert_eq (sh ("mke2fs -q -F -t ext4 -O ^has_journal '%s'", im.path), 0);
  cr_assert_eq (sh ("debugfs -w -R 'feature has_journal' '%s'", im.path), 0);
  cr_assert_eq (sh ("debugfs -w -R 'ssv journal_inum 0' '%s'", im.path), 0);
  cr_assert_eq (sh ("debugfs -w -R 'ssv journal_uuid "
                    "01234567-89ab-cdef-0123-456789abcdef' '%s'",
                    im.path),
                0);
  cr_assert_eq (sh ("debugfs -w -R 'ssv journal_dev 0x801' '%s'", im.path), 0);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 1, "notices:\n%s", notices);
  cr_assert (L->fs[0].has_journal);
  cr_assert (L->fs[0].journal_external);
  cr_assert_eq (L->fs[0].n_journal, 0);
  cr_assert_not (L->fs[0].jsb_valid);
  cr_assert_eq (layout_read_jsb (&L->fs[0], pread_cb, &im, &j), -ENOENT);
  check_fs (L, &L->fs[0], im.path);
  layout_free (L);
  img_del (&im);
}

/* The external journal device itself is served as pass-through. */
Test (matrix, journal_device_is_passthrough)
{
  struct img im;
  struct layout *L;

  need ("mke2fs");
  img_new (&im, "ext4lazy-layout", 32 * MiB);
  cr_assert_eq (sh ("mke2fs -q -F -O journal_dev '%s'", im.path), 0);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 0);
  cr_assert (strstr (notices, "external journal device"), "notices:\n%s",
             notices);
  cr_assert (layout_overlaps_watch (L, 1024, 1024));
  layout_free (L);
  img_del (&im);
}

/* ---- partitions -------------------------------------------------------- */

static void
need_part_tools (void)
{
  need ("sfdisk");
  need ("mke2fs");
  need ("dumpe2fs");
  need ("debugfs");
}

Test (partitions, mbr_two_ext4)
{
  struct img im;
  struct layout *L;
  char spec[256];

  need_part_tools ();
  img_new (&im, "ext4lazy-layout", 200 * MiB);
  cr_assert_eq (sh ("printf 'label: dos\\nstart=2048, size=81920, type=83\\n"
                    "start=100000, size=200000, type=83\\n' | sfdisk -q '%s'",
                    im.path),
                0);
  cr_assert_eq (sh ("mke2fs -q -F -t ext4 -b 1024 -E offset=%llu '%s' 40960k",
                    2048ull * 512, im.path),
                0);
  cr_assert_eq (sh ("mke2fs -q -F -t ext4 -b 4096 -E offset=%llu '%s' 100000k",
                    100000ull * 512, im.path),
                0);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 2, "notices:\n%s", notices);
  cr_assert_eq (L->fs[0].start, 2048ull * 512);
  cr_assert_eq (L->fs[1].start, 100000ull * 512);
  cr_assert_eq (L->fs[0].part_len, 81920ull * 512);
  snprintf (spec, sizeof spec, "%s?offset=%llu", im.path, 2048ull * 512);
  check_fs (L, &L->fs[0], spec);
  snprintf (spec, sizeof spec, "%s?offset=%llu", im.path, 100000ull * 512);
  check_fs (L, &L->fs[1], spec);
  /* The MBR itself is watched; the gap between partitions is not. */
  cr_assert (layout_overlaps_watch (L, 0, 512));
  cr_assert_not (layout_overlaps_watch (L, 1024 * 1024 - 512, 512));
  cr_assert_null (layout_fs_at (L, 2048ull * 512 + 40960 * 1024));
  layout_free (L);
  img_del (&im);
}

Test (partitions, gpt_one_ext4)
{
  struct img im;
  struct layout *L;
  char spec[256];

  need_part_tools ();
  img_new (&im, "ext4lazy-layout", 100 * MiB);
  cr_assert_eq (sh ("printf 'label: gpt\\nstart=4096, size=100000, "
                    "type=0FC63DAF-8483-4772-8E79-3D69D8477DE4\\n' "
                    "| sfdisk -q '%s'",
                    im.path),
                0);
  cr_assert_eq (sh ("mke2fs -q -F -t ext4 -E offset=%llu '%s' 50000k",
                    4096ull * 512, im.path),
                0);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 1, "notices:\n%s", notices);
  cr_assert_eq (L->fs[0].start, 4096ull * 512);
  snprintf (spec, sizeof spec, "%s?offset=%llu", im.path, 4096ull * 512);
  check_fs (L, &L->fs[0], spec);
  /* Protective MBR, both GPT headers and entry arrays are watched. */
  cr_assert (layout_overlaps_watch (L, 0, 1));
  cr_assert (layout_overlaps_watch (L, 512, 1));
  cr_assert (layout_overlaps_watch (L, 2 * 512, 1));
  cr_assert (layout_overlaps_watch (L, im.size - 512, 1));
  cr_assert (layout_overlaps_watch (L, im.size - 33 * 512, 1));
  layout_free (L);
  img_del (&im);
}

Test (partitions, logical_in_extended_chain)
{
  struct img im;
  struct layout *L;
  char spec[256];
  uint64_t off;

  need_part_tools ();
  img_new (&im, "ext4lazy-layout", 200 * MiB);
  cr_assert_eq (sh ("printf 'label: dos\\nstart=2048, size=20480, type=83\\n"
                    "start=30000, size=300000, type=5\\n"
                    "start=32048, size=20480, type=83\\n"
                    "start=60000, size=100000, type=83\\n' | sfdisk -q '%s'",
                    im.path),
                0);
  char *d = capture ("sfdisk -d '%s'", im.path);
  unsigned long long start;
  const char *l6 = strstr (d, "disk.img6 :");
  cr_assert_not_null (l6, "sfdisk made no partition 6:\n%s", d);
  cr_assert_eq (sscanf (strstr (l6, "start=") + 6, "%llu", &start), 1);
  free (d);
  off = start * 512;
  cr_assert_eq (sh ("mke2fs -q -F -t ext3 -b 2048 -E offset=%llu '%s' 40000k",
                    (unsigned long long)off, im.path),
                0);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 1, "notices:\n%s", notices);
  cr_assert_eq (L->fs[0].start, off);
  snprintf (spec, sizeof spec, "%s?offset=%llu", im.path,
            (unsigned long long)off);
  check_fs (L, &L->fs[0], spec);
  /* The other partitions are pass-through; their superblock locations
   * are watched. */
  cr_assert (layout_overlaps_watch (L, 2048ull * 512 + 1024, 1024));
  cr_assert (layout_overlaps_watch (L, 32048ull * 512 + 1024, 1024));
  layout_free (L);
  img_del (&im);
}

/* Two MBR entries whose regions overlap, both holding the same ext4
 * superblock: neither can be trusted. */
Test (partitions, overlapping_filesystems)
{
  struct img im;
  struct layout *L;

  need_part_tools ();
  img_new (&im, "ext4lazy-layout", 100 * MiB);
  cr_assert_eq (sh ("mke2fs -q -F -t ext4 -E offset=%llu '%s' 20000k",
                    2048ull * 512, im.path),
                0);
  /* Entry 1 at 2048 (40960 sectors); entry 2 at 2048 as well but
   * longer, written by hand since sfdisk refuses overlaps. */
  unsigned char sec[512] = { 0 };
  uint32_t v;
  sec[446 + 4] = 0x83;
  v = 2048;
  memcpy (sec + 446 + 8, &v, 4);
  v = 40960;
  memcpy (sec + 446 + 12, &v, 4);
  sec[462 + 4] = 0x83;
  v = 2048;
  memcpy (sec + 462 + 8, &v, 4);
  v = 81920;
  memcpy (sec + 462 + 12, &v, 4);
  sec[510] = 0x55;
  sec[511] = 0xAA;
  pwrite_at (&im, sec, sizeof sec, 0);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 0, "overlapping filesystems trusted");
  cr_assert (strstr (notices, "overlap"), "notices:\n%s", notices);
  cr_assert (layout_overlaps_watch (L, 2048ull * 512 + 1024, 1024));
  layout_free (L);
  img_del (&im);
}

/* ---- bad input -------------------------------------------------------- */

static void
expect_passthrough (struct img *im, uint64_t region)
{
  struct layout *L = discover (im);
  cr_assert_eq (L->n_fs, 0, "fs found in bad input");
  cr_assert_null (layout_fs_at (L, region + 4096));
  cr_assert (layout_overlaps_watch (L, region + 1024, 1024),
             "superblock location not watched");
  cr_assert_neq (notices[0], 0, "no notice given");
  layout_free (L);
}

Test (bad, blank)
{
  struct img im;
  img_new (&im, "ext4lazy-layout", 16 * MiB);
  expect_passthrough (&im, 0);
  img_del (&im);
}

Test (bad, tiny_devices)
{
  struct img im;
  struct layout *L;
  const uint64_t sizes[] = { 0, 1, 511, 512, 1500, 2048, 4096 };

  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    {
      img_new (&im, "ext4lazy-layout", sizes[i]);
      L = discover (&im);
      cr_assert_eq (L->n_fs, 0);
      layout_free (L);
      img_del (&im);
    }
}

Test (bad, random_bytes)
{
  struct img im;
  static unsigned char buf[65536];

  img_new (&im, "ext4lazy-layout", 16 * MiB);
  srand (12345);
  for (uint64_t off = 0; off < 4 * MiB; off += sizeof buf)
    {
      for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = rand ();
      pwrite_at (&im, buf, sizeof buf, off);
    }
  expect_passthrough (&im, 0);
  /* Random bytes with the magic planted still fail the other checks. */
  for (int round = 0; round < 200; round++)
    {
      unsigned char sb[1024];
      struct layout *L;
      for (size_t i = 0; i < sizeof sb; i++)
        sb[i] = rand ();
      sb[0x38] = 0x53;
      sb[0x39] = 0xEF;
      sb[0x18] = rand () % 3;
      sb[0x19] = sb[0x1a] = sb[0x1b] = 0;
      pwrite_at (&im, sb, sizeof sb, 1024);
      L = discover (&im);
      cr_assert_eq (L->n_fs, 0);
      layout_free (L);
    }
  img_del (&im);
}

Test (bad, vfat)
{
  struct img im;

  need ("mkfs.vfat");
  img_new (&im, "ext4lazy-layout", 64 * MiB);
  cr_assert_eq (sh ("mkfs.vfat '%s'", im.path), 0);
  expect_passthrough (&im, 0);
  img_del (&im);
}

/* Make a plain ext4 image (1K blocks, no metadata_csum so that field
 * corruption is seen by the sanity checks rather than by the checksum).
 */
static void
make_plain (struct img *im)
{
  need ("mke2fs");
  img_new (im, "ext4lazy-layout", 64 * MiB);
  cr_assert_eq (
      sh ("mke2fs -q -F -t ext4 -b 1024 -O ^metadata_csum '%s'", im->path), 0);
  struct layout *L = discover (im);
  cr_assert_eq (L->n_fs, 1);
  layout_free (L);
}

static void
poke32 (struct img *im, uint64_t off, uint32_t v)
{
  unsigned char b[4] = { v, v >> 8, v >> 16, v >> 24 };
  pwrite_at (im, b, 4, off);
}

static void
poke16 (struct img *im, uint64_t off, uint16_t v)
{
  unsigned char b[2] = { v, v >> 8 };
  pwrite_at (im, b, 2, off);
}

#define CORRUPT_SB_TEST(name, poke)                                            \
  Test (bad, name)                                                             \
  {                                                                            \
    struct img im;                                                             \
    make_plain (&im);                                                          \
    poke;                                                                      \
    expect_passthrough (&im, 0);                                               \
    img_del (&im);                                                             \
  }

CORRUPT_SB_TEST (log_block_size, poke32 (&im, 1024 + 0x18, 7))
CORRUPT_SB_TEST (log_block_size_huge, poke32 (&im, 1024 + 0x18, 0xFFFFFFFF))
CORRUPT_SB_TEST (inode_size_100, poke16 (&im, 1024 + 0x58, 100))
CORRUPT_SB_TEST (inode_size_above_block, poke16 (&im, 1024 + 0x58, 2048))
CORRUPT_SB_TEST (blocks_count_beyond_device,
                 poke32 (&im, 1024 + 0x04, 64 * 1024 + 1))
CORRUPT_SB_TEST (inodes_per_group_absurd, poke32 (&im, 1024 + 0x28, 0xFFFFFFF0))
CORRUPT_SB_TEST (blocks_per_group_zero, poke32 (&im, 1024 + 0x20, 0))
CORRUPT_SB_TEST (inode_count_inconsistent, poke32 (&im, 1024 + 0x00, 12345))
CORRUPT_SB_TEST (desc_size_bad, poke16 (&im, 1024 + 0xFE, 48))
CORRUPT_SB_TEST (unknown_incompat, poke32 (&im, 1024 + 0x60, 0x80000002 | 0x40))
CORRUPT_SB_TEST (journal_device, poke32 (&im, 1024 + 0x60, 0x8 | 0x2))
/* s_creator_os: anything but Linux (0) lays out inode fields otherwise. */
CORRUPT_SB_TEST (creator_os_freebsd, poke32 (&im, 1024 + 0x48, 3))

/* A filesystem made for the Hurd, as mke2fs makes it. */
Test (bad, created_for_hurd)
{
  struct img im;

  need ("mke2fs");
  img_new (&im, "ext4lazy-layout", 64 * MiB);
  cr_assert_eq (sh ("mke2fs -q -F -t ext2 -o hurd '%s'", im.path), 0);
  expect_passthrough (&im, 0);
  img_del (&im);
}

/* The descriptor of group 1 points its inode table past the end. */
Test (bad, itable_beyond_device)
{
  struct img im;
  unsigned char sb[1024];

  make_plain (&im);
  pread_at (&im, sb, sizeof sb, 1024);
  uint32_t desc_size = (sb[0x60] & 0x80) ? (sb[0xFE] | sb[0xFF] << 8) : 32;
  /* 1K blocks: GDT at block 2. */
  poke32 (&im, 2048 + desc_size + 0x08, 10 * 1024 * 1024);
  expect_passthrough (&im, 0);
  img_del (&im);
}

/* An inode table pointing at the superblock/GDT. */
Test (bad, itable_over_gdt)
{
  struct img im;
  unsigned char sb[1024];

  make_plain (&im);
  pread_at (&im, sb, sizeof sb, 1024);
  uint32_t desc_size = (sb[0x60] & 0x80) ? (sb[0xFE] | sb[0xFF] << 8) : 32;
  poke32 (&im, 2048 + 0x08, 1);
  if (desc_size >= 64)
    poke32 (&im, 2048 + 0x28, 0);
  (void)desc_size;
  expect_passthrough (&im, 0);
  img_del (&im);
}

/* Superblock checksum wrong with metadata_csum: refused like the kernel. */
Test (bad, superblock_checksum)
{
  struct img im;

  need ("mke2fs");
  img_new (&im, "ext4lazy-layout", 64 * MiB);
  cr_assert_eq (sh ("mke2fs -q -F -t ext4 -O metadata_csum '%s'", im.path), 0);
  poke32 (&im, 1024 + 0x3FC, 0x12345678);
  expect_passthrough (&im, 0);
  img_del (&im);
}

/* A journal superblock with a bad magic leaves the fs usable, jsb
 * invalid; layout_read_jsb sees the repaired one. */
Test (bad, journal_superblock)
{
  struct img im;
  struct layout *L;
  struct jbd2_sb j;
  unsigned char saved[4];

  make_plain (&im);
  L = discover (&im);
  uint64_t off = L->fs[0].jsb.dev_off;
  cr_assert (L->fs[0].jsb_valid);
  layout_free (L);
  pread_at (&im, saved, 4, off);
  poke32 (&im, off, 0);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 1);
  cr_assert_not (L->fs[0].jsb_valid);
  cr_assert_eq (layout_read_jsb (&L->fs[0], pread_cb, &im, &j), -EINVAL);
  pwrite_at (&im, saved, 4, off);
  cr_assert_eq (layout_read_jsb (&L->fs[0], pread_cb, &im, &j), 0);
  cr_assert_eq (j.dev_off, off);
  cr_assert_eq (j.blocksize, 1024);
  layout_free (L);
  img_del (&im);
}

/* A later mkfs on a blank device writes the watched superblock. */
Test (bad, mkfs_after_blank_is_noticed)
{
  struct img im;
  struct layout *L;

  need ("mke2fs");
  img_new (&im, "ext4lazy-layout", 32 * MiB);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 0);
  cr_assert (layout_overlaps_watch (L, 1024, 1024));
  layout_free (L);
  cr_assert_eq (sh ("mke2fs -q -F -t ext4 '%s'", im.path), 0);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 1);
  layout_free (L);
  img_del (&im);
}

Test (bad, gpt_both_headers_bad)
{
  struct img im;
  unsigned char b[1];

  need_part_tools ();
  img_new (&im, "ext4lazy-layout", 100 * MiB);
  cr_assert_eq (sh ("printf 'label: gpt\\nstart=4096, size=100000\\n' "
                    "| sfdisk -q '%s'",
                    im.path),
                0);
  cr_assert_eq (sh ("mke2fs -q -F -t ext4 -E offset=%llu '%s' 50000k",
                    4096ull * 512, im.path),
                0);
  /* Primary bad: the backup still finds the partition. */
  pread_at (&im, b, 1, 512 + 20);
  b[0] ^= 0xFF;
  pwrite_at (&im, b, 1, 512 + 20);
  struct layout *L = discover (&im);
  cr_assert_eq (L->n_fs, 1, "notices:\n%s", notices);
  cr_assert (strstr (notices, "backup"), "no notice of the fallback");
  layout_free (L);
  /* Backup bad too: no table, the whole device holds no fs. */
  pread_at (&im, b, 1, im.size - 512 + 20);
  b[0] ^= 0xFF;
  pwrite_at (&im, b, 1, im.size - 512 + 20);
  notices[0] = 0;
  expect_passthrough (&im, 0);
  img_del (&im);
}

/* The io_manager refuses reads past the region: a filesystem whose
 * partition is shorter than its blocks count is refused before any such
 * read reaches the device. */
Test (bad, fs_larger_than_partition)
{
  struct img im;
  struct layout *L;

  need_part_tools ();
  img_new (&im, "ext4lazy-layout", 100 * MiB);
  cr_assert_eq (sh ("printf 'label: dos\\nstart=2048, size=20480, type=83\\n'"
                    " | sfdisk -q '%s'",
                    im.path),
                0);
  cr_assert_eq (sh ("mke2fs -q -F -t ext4 -E offset=%llu '%s' 40000k",
                    2048ull * 512, im.path),
                0);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 0);
  cr_assert (layout_overlaps_watch (L, 2048 * 512 + 1024, 1));
  layout_free (L);
  img_del (&im);
}

/* Read errors are returned, not hidden. */
static int
failing_read (void *opaque, void *buf, size_t len, uint64_t off)
{
  int *calls = opaque;
  (void)buf;
  (void)len;
  (void)off;
  (*calls)++;
  return -EIO;
}

Test (bad, read_error_propagates)
{
  struct layout *L = (struct layout *)1;
  int calls = 0;
  cr_assert_eq (layout_discover (failing_read, &calls, 64 * MiB, &L), -EIO);
  cr_assert_null (L);
  cr_assert_gt (calls, 0);
}

/* A read error inside libext2fs (past the superblock) also propagates. */
struct flaky
{
  struct img *im;
  uint64_t bad_from;
};

static int
flaky_read (void *opaque, void *buf, size_t len, uint64_t off)
{
  struct flaky *f = opaque;
  if (off + len > f->bad_from)
    return -EIO;
  return pread_cb (f->im, buf, len, off);
}

Test (bad, read_error_in_libext2fs)
{
  struct img im;
  struct layout *L = NULL;

  make_plain (&im);
  struct flaky f = { &im, 2048 };
  cr_assert_eq (layout_discover (flaky_read, &f, im.size, &L), -EIO);
  cr_assert_null (L);
  img_del (&im);
}

/* Mutation fuzzing: random byte changes in the superblock, descriptors,
 * bitmaps and the first inode-table blocks (journal inode included) of a
 * small ext3 (block-mapped journal) and ext4 (extent-mapped journal)
 * image.  Nothing may crash or read past the device; whatever is found
 * must be self-consistent.
 */
static void
check_invariants (const struct layout *L)
{
  for (size_t i = 0; i < L->n_fs; i++)
    {
      const struct ext4_fs *fs = &L->fs[i];
      cr_assert_leq (fs->start + fs->size, L->dev_size);
      for (size_t k = 0; k < fs->n_itable; k++)
        {
          const struct itable_run *r = &fs->itable[k];
          cr_assert_geq (r->off, fs->start);
          cr_assert_leq (r->off + r->len, fs->start + fs->size);
          cr_assert_not (layout_overlaps_meta (fs, r->off, r->len));
          cr_assert_not (layout_overlaps_journal (fs, r->off, r->len));
          if (k)
            cr_assert_geq (r->off,
                           fs->itable[k - 1].off + fs->itable[k - 1].len);
        }
      for (size_t k = 0; k < fs->n_journal; k++)
        {
          cr_assert_geq (fs->journal[k].off, fs->start);
          cr_assert_leq (fs->journal[k].off + fs->journal[k].len,
                         fs->start + fs->size);
        }
    }
}

static void
fuzz (const char *mkfs_opts, unsigned seed)
{
  struct img im;
  static unsigned char orig[320 * 1024], buf[320 * 1024];

  need ("mke2fs");
  img_new (&im, "ext4lazy-layout", 16 * MiB);
  cr_assert_eq (sh ("mke2fs -q -F -b 1024 -N 512 %s '%s'", mkfs_opts, im.path),
                0);
  pread_at (&im, orig, sizeof orig, 0);
  struct layout *L0 = discover (&im);
  cr_assert_eq (L0->n_fs, 1);
  srand (seed);
  int found = 0, refused = 0, kept = 0;
  const char *env = getenv ("EXT4LAZY_FUZZ_ROUNDS"); /* longer runs */
  int rounds = env ? atoi (env) : 300;
  for (int round = 0; round < rounds; round++)
    {
      memcpy (buf, orig, sizeof buf);
      int n = 1 + rand () % 8;
      size_t at[8];
      for (int k = 0; k < n; k++)
        {
          /* Bias towards the superblock and descriptors. */
          size_t off = rand () % 2 ? (size_t)(1024 + rand () % 2048)
                                   : (size_t)rand () % sizeof buf;
          buf[off] = rand () % 3 ? rand () : (rand () % 2 ? 0 : 0xFF);
          at[k] = off;
        }
      pwrite_at (&im, buf, sizeof buf, 0);
      /* The check of the writes of the changed blocks against the
       * layout before them: when it says "unchanged", a full re-read
       * must agree.  (Changes outside what the layout watches, such as
       * the journal inode's record, are never checked: left out.)
       */
      int c = 0;
      bool watched = true;
      for (int k = 0; k < n && c == 0; k++)
        {
          watched &= layout_overlaps_watch (L0, at[k], 1);
          c = layout_check_write (L0, pread_cb, &im, at[k] / 1024 * 1024, 1024);
        }
      cr_assert_geq (c, 0);
      notices[0] = '\0';
      struct layout *L = discover (&im);
      check_invariants (L);
      if (c == 0 && watched)
        {
          kept++;
          cr_assert_eq (L->n_fs, 1,
                        "round %d: checked unchanged, but the re-read "
                        "finds no filesystem: %s",
                        round, notices);
          cr_assert (layout_same_itables (L0, L), "round %d", round);
          cr_assert (layout_same_journal (&L0->fs[0], &L->fs[0]), "round %d",
                     round);
        }
      if (L->n_fs)
        found++;
      else
        refused++;
      layout_free (L);
    }
  /* Both paths were exercised (mutations in unused bytes keep the fs). */
  cr_log_info ("%s: %d found, %d refused, %d checked unchanged", mkfs_opts,
               found, refused, kept);
  cr_assert_gt (found, 0);
  cr_assert_gt (refused, 0);
  cr_assert_gt (kept, 0);
  layout_free (L0);
  img_del (&im);
}

Test (fuzz, ext4_mutations, .timeout = 600)
{
  fuzz ("-t ext4 -O ^metadata_csum", 1);
}
Test (fuzz, ext4_csum_mutations, .timeout = 600)
{
  fuzz ("-t ext4", 2);
}
Test (fuzz, ext3_mutations, .timeout = 600)
{
  fuzz ("-t ext3", 3);
}

/* ---- comparing layouts ------------------------------------------------ */

/* Two filesystems of two inode-table runs and two journal extents each,
 * built by hand.  Every byte is first set to fill, so that the padding
 * of two such layouts differs and only a field-by-field comparison
 * finds them equal.
 */
struct hand_layout
{
  struct itable_run it[2][2];
  struct journal_extent j[2][2];
  struct ext4_fs fs[2];
  struct layout L;
};

static void
hand_layout (struct hand_layout *h, unsigned char fill)
{
  memset (h, fill, sizeof *h);
  for (int i = 0; i < 2; i++)
    {
      uint64_t start = (uint64_t)(i + 1) << 30;

      for (int k = 0; k < 2; k++)
        {
          h->it[i][k].off = start + ((uint64_t)(k + 1) << 20);
          h->it[i][k].len = 1 << 16;
          h->it[i][k].first_ino = 1 + k * 256;
          h->j[i][k].off = start + ((uint64_t)(k + 8) << 20);
          h->j[i][k].len = 1 << 20;
          h->j[i][k].lblk = k * 256;
        }
      h->fs[i].start = start;
      h->fs[i].block_size = 4096;
      h->fs[i].inode_size = 256;
      h->fs[i].itable = h->it[i];
      h->fs[i].n_itable = 2;
      h->fs[i].journal = h->j[i];
      h->fs[i].n_journal = 2;
    }
  h->L.fs = h->fs;
  h->L.n_fs = 2;
}

/* Change field by one: same must then be false, and true again once the
 * field is back.
 */
#define EXPECT_COMPARED(same, field)                                           \
  do                                                                           \
    {                                                                          \
      __typeof__ (field) saved_ = (field);                                     \
      (field)++;                                                               \
      cr_assert_not ((same), "%s is not compared", #field);                    \
      (field) = saved_;                                                        \
      cr_assert ((same));                                                      \
    }                                                                          \
  while (0)

Test (compare, same_itables)
{
  struct hand_layout a, b;

  hand_layout (&a, 0xAA);
  hand_layout (&b, 0x55);
  cr_assert (layout_same_itables (&a.L, &b.L));
  EXPECT_COMPARED (layout_same_itables (&a.L, &b.L), b.L.n_fs);
  for (int i = 0; i < 2; i++)
    {
      EXPECT_COMPARED (layout_same_itables (&a.L, &b.L), b.fs[i].start);
      EXPECT_COMPARED (layout_same_itables (&a.L, &b.L), b.fs[i].block_size);
      EXPECT_COMPARED (layout_same_itables (&a.L, &b.L), b.fs[i].inode_size);
      EXPECT_COMPARED (layout_same_itables (&a.L, &b.L), b.fs[i].n_itable);
      for (int k = 0; k < 2; k++)
        {
          EXPECT_COMPARED (layout_same_itables (&a.L, &b.L), b.it[i][k].off);
          EXPECT_COMPARED (layout_same_itables (&a.L, &b.L), b.it[i][k].len);
          EXPECT_COMPARED (layout_same_itables (&a.L, &b.L),
                           b.it[i][k].first_ino);
        }
    }
  /* The journal is not part of it. */
  b.j[1][1].lblk++;
  b.fs[1].n_journal = 1;
  cr_assert (layout_same_itables (&a.L, &b.L));
}

Test (compare, same_journal)
{
  struct hand_layout a, b;

  hand_layout (&a, 0xAA);
  hand_layout (&b, 0x55);
  for (int i = 0; i < 2; i++)
    {
      cr_assert (layout_same_journal (&a.fs[i], &b.fs[i]));
      EXPECT_COMPARED (layout_same_journal (&a.fs[i], &b.fs[i]), b.fs[i].start);
      EXPECT_COMPARED (layout_same_journal (&a.fs[i], &b.fs[i]),
                       b.fs[i].block_size);
      EXPECT_COMPARED (layout_same_journal (&a.fs[i], &b.fs[i]),
                       b.fs[i].n_journal);
      for (int k = 0; k < 2; k++)
        {
          EXPECT_COMPARED (layout_same_journal (&a.fs[i], &b.fs[i]),
                           b.j[i][k].off);
          EXPECT_COMPARED (layout_same_journal (&a.fs[i], &b.fs[i]),
                           b.j[i][k].len);
          EXPECT_COMPARED (layout_same_journal (&a.fs[i], &b.fs[i]),
                           b.j[i][k].lblk);
        }
      /* Inode tables are not part of it. */
      b.it[i][1].first_ino++;
      b.fs[i].inode_size = 128;
      cr_assert (layout_same_journal (&a.fs[i], &b.fs[i]));
    }
  cr_assert_not (layout_same_journal (&a.fs[0], &b.fs[1]));
}

/* ---- checking client writes against the layout ------------------------ */

/* A filesystem made with mkfs_opts on a fresh image, its pristine copy
 * beside it (to undo each change) and its layout.
 */
struct checked
{
  struct img im;
  char pristine[160];
  struct layout *L;
};

static void
checked_new (struct checked *c, uint64_t size, const char *mkfs_opts)
{
  need ("mke2fs");
  need ("debugfs");
  img_new (&c->im, "ext4lazy-layout", size);
  cr_assert_eq (sh ("mke2fs -q -F %s '%s'", mkfs_opts, c->im.path), 0);
  snprintf (c->pristine, sizeof c->pristine, "%s.pristine", c->im.path);
  cr_assert_eq (sh ("cp --sparse=always '%s' '%s'", c->im.path, c->pristine),
                0);
  c->L = discover (&c->im);
  cr_assert_eq (c->L->n_fs, 1);
}

static void
checked_del (struct checked *c)
{
  layout_free (c->L);
  unlink (c->pristine);
  img_del (&c->im);
}

/* Undo every change: the image as mkfs left it (same inode, so the
 * open descriptor sees it).
 */
static void
checked_reset (struct checked *c)
{
  cr_assert_eq (sh ("dd if='%s' of='%s' bs=1M conv=notrunc,sparse status=none",
                    c->pristine, c->im.path),
                0);
}

/* Run debugfs -w with the request on the image (as if the client had
 * written what it changes), then check a write of [off, off+len).
 */
static int
check_after (struct checked *c, const char *request, uint64_t off, uint64_t len)
{
  int r;

  checked_reset (c);
  /* libext2fs sets s_wtime to the time it writes the superblock back,
   * over an `ssv wtime`, and within the second mkfs ran that is the
   * time mkfs wrote: the image would then not change at all.  A fixed
   * time of its own for debugfs makes such a write a change.
   */
  cr_assert_eq (sh ("E2FSPROGS_FAKE_TIME=1700000000 "
                    "debugfs -w -R '%s' '%s' >/dev/null 2>&1",
                    request, c->im.path),
                0, "debugfs -R '%s'", request);
  cr_assert_neq (sh ("cmp -s '%s' '%s'", c->im.path, c->pristine), 0,
                 "debugfs -R '%s' changed nothing", request);
  r = layout_check_write (c->L, pread_cb, &c->im, off, len);
  cr_assert_geq (r, 0, "%s: %s", request, strerror (-r));
  return r;
}

/* The primary superblock and the descriptor blocks of fs 0. */
static uint64_t
sb_block_off (const struct ext4_fs *fs)
{
  return fs->start + 1024 / fs->block_size * fs->block_size;
}

static void
expect_no_reread (struct checked *c, const char *request, uint64_t off,
                  uint64_t len)
{
  cr_assert_eq (check_after (c, request, off, len), 0,
                "%s: a re-read asked for", request);
}

static void
expect_reread (struct checked *c, const char *request, uint64_t off,
               uint64_t len)
{
  cr_assert_eq (check_after (c, request, off, len), 1,
                "%s: no re-read asked for", request);
}

/* Counts, flags, times and checksums: no re-read, whatever the
 * geometry.
 */
static void
counters_only (const char *mkfs_opts, uint64_t size)
{
  struct checked c;
  const struct ext4_fs *fs;
  uint64_t sb, d0, dlast, bs;
  char req[128];

  checked_new (&c, size, mkfs_opts);
  fs = &c.L->fs[0];
  bs = fs->block_size;
  sb = sb_block_off (fs);
  cr_assert_geq (fs->n_desc, 1);
  d0 = fs->desc[0];
  dlast = fs->desc[fs->n_desc - 1];

  expect_no_reread (&c, "set_bg 0 free_blocks_count 17", d0, bs);
  expect_no_reread (&c, "set_bg 0 free_inodes_count 3", d0, bs);
  expect_no_reread (&c, "set_bg 0 used_dirs_count 9", d0, bs);
  expect_no_reread (&c, "set_bg 0 itable_unused 5", d0, bs);
  expect_no_reread (&c, "set_bg 0 flags 7", d0, bs);
  expect_no_reread (&c, "set_bg 0 checksum 0x1234", d0, bs);
  snprintf (req, sizeof req, "set_bg %u free_blocks_count 1",
            fs->group_count - 1);
  expect_no_reread (&c, req, dlast, bs);
  /* Every descriptor block at once, and a 512-byte piece of one. */
  expect_no_reread (&c, "set_bg 0 free_blocks_count 5", d0,
                    dlast + bs - d0 <= 1 << 20 ? dlast + bs - d0 : bs);
  expect_no_reread (&c, "set_bg 0 free_blocks_count 5", d0 + 512, 512);

  expect_no_reread (&c, "ssv mtime 20260101", sb, bs);
  expect_no_reread (&c, "ssv wtime 20260101", sb, bs);
  expect_no_reread (&c, "ssv last_mounted /mnt/elsewhere", sb, bs);
  expect_no_reread (&c, "ssv kbytes_written 123456", sb, bs);
  expect_no_reread (&c, "ssv free_blocks_count 11", sb, bs);
  expect_no_reread (&c, "ssv free_inodes_count 11", sb, bs);
  expect_no_reread (&c, "ssv mnt_count 7", sb, bs);
  expect_no_reread (&c, "ssv state 0", sb, bs);
  expect_no_reread (&c, "ssv last_orphan 13", sb, bs);
  expect_no_reread (&c, "ssv volume_name data", sb, bs);
  /* What the kernel sets while mounted. */
  expect_no_reread (&c, "feature needs_recovery", sb, bs);
  expect_no_reread (&c, "feature large_file dir_nlink", sb, bs);
  /* The superblock alone, as a 1 KiB write. */
  expect_no_reread (&c, "ssv wtime 20270101", fs->start + 1024, 1024);
  checked_del (&c);
}

Test (check_write, counters_4k_64bit_csum)
{
  counters_only ("-t ext4 -b 4096 -O 64bit,metadata_csum", 256 * MiB);
}

Test (check_write, counters_1k_32bit)
{
  counters_only ("-t ext4 -b 1024 -O ^64bit,^metadata_csum", 64 * MiB);
}

Test (check_write, counters_meta_bg)
{
  counters_only ("-t ext4 -b 1024 -O meta_bg,^resize_inode", 64 * MiB);
}

Test (check_write, counters_bigalloc)
{
  counters_only ("-t ext4 -b 4096 -O bigalloc -C 16384", 256 * MiB);
}

Test (check_write, counters_ext3)
{
  counters_only ("-t ext3 -b 4096", 64 * MiB);
}

/* A moved inode table, a changed geometry or feature, a bad checksum:
 * a re-read.
 */
Test (check_write, layout_changes)
{
  struct checked c;
  const struct ext4_fs *fs;
  uint64_t sb, d0, bs;
  char req[160];

  checked_new (&c, 256 * MiB, "-t ext4 -b 4096 -O 64bit,metadata_csum");
  fs = &c.L->fs[0];
  bs = fs->block_size;
  sb = sb_block_off (fs);
  d0 = fs->desc[0];
  cr_assert_gt (fs->group_count, 1);

  /* Group 1's table where group 0's is, past the end, at 0, and one
   * block on (inside its own run, but not where group 1 starts).
   */
  snprintf (req, sizeof req, "set_bg 1 inode_table %" PRIu64,
            (fs->itable[0].off - fs->start) / bs);
  expect_reread (&c, req, d0, bs);
  snprintf (req, sizeof req, "set_bg 1 inode_table %" PRIu64,
            fs->size / bs + 10);
  expect_reread (&c, req, d0, bs);
  expect_reread (&c, "set_bg 1 inode_table 0", d0, bs);
  {
    char out[64];
    uint64_t t1;
    char *p = capture ("debugfs -R 'show_super_stats' '%s' 2>/dev/null | "
                       "sed -n 's/^ Group  *1: .*inode table at "
                       "\\([0-9]*\\).*/\\1/p'",
                       c.pristine);
    cr_assert_eq (sscanf (p, "%" SCNu64, &t1), 1, "group 1's table: %s", p);
    free (p);
    snprintf (out, sizeof out, "set_bg 1 inode_table %" PRIu64, t1 + 1);
    expect_reread (&c, out, d0, bs);
    /* Group 1's descriptor rewritten with its table where it was: a
     * count changes, so that the descriptor block does (setting the
     * table to its own value changes no byte of it, and the image only
     * by s_wtime, not at all within the second mkfs ran).
     */
    expect_no_reread (&c, "set_bg 1 free_blocks_count 7", d0, bs);
  }

  expect_reread (&c, "ssv blocks_count 60000", sb, bs);
  expect_reread (&c, "ssv inodes_count 1024", sb, bs);
  expect_reread (&c, "ssv inodes_per_group 4096", sb, bs);
  expect_reread (&c, "ssv inode_size 128", sb, bs);
  expect_reread (&c, "ssv desc_size 128", sb, bs);
  expect_reread (&c, "ssv first_data_block 1", sb, bs);
  expect_reread (&c, "ssv reserved_gdt_blocks 3", sb, bs);
  expect_reread (&c, "ssv journal_inum 9", sb, bs);
  expect_reread (&c, "ssv first_ino 12", sb, bs);
  expect_reread (&c, "ssv uuid random", sb, bs);
  expect_reread (&c, "ssv checksum_seed 77", sb, bs);
  expect_reread (&c, "feature ^has_journal", sb, bs);
  expect_reread (&c, "feature fast_commit", sb, bs);
  expect_reread (&c, "feature ^metadata_csum", sb, bs);
  expect_reread (&c, "feature meta_bg", sb, bs);
  /* A superblock checksum that does not match (debugfs would fix it). */
  {
    unsigned char raw[1024];

    checked_reset (&c);
    pread_at (&c.im, raw, sizeof raw, fs->start + 1024);
    raw[0x3FC] ^= 1;
    pwrite_at (&c.im, raw, sizeof raw, fs->start + 1024);
    cr_assert_eq (layout_check_write (c.L, pread_cb, &c.im, sb, bs), 1);
  }
  checked_del (&c);
}

/* Reserved GDT blocks and the journal's mapping blocks: always. */
Test (check_write, other_metadata_always_rereads)
{
  struct checked c;
  const struct ext4_fs *fs;
  uint64_t rgdt;

  checked_new (&c, 256 * MiB, "-t ext4 -b 1024 -O ^flex_bg");
  fs = &c.L->fs[0];
  rgdt = fs->desc[fs->n_desc - 1] + fs->block_size;
  cr_assert (layout_overlaps_meta (fs, rgdt, fs->block_size),
             "a reserved GDT block follows the descriptors");
  cr_assert_eq (layout_check_write (c.L, pread_cb, &c.im, rgdt, 1024), 1);
  checked_del (&c);
}

/* A write of block 0 of a 4 KiB-block filesystem covers the partition
 * sectors (LBA 0 and 1) and the superblock: as they are, no re-read;
 * the bytes after the superblock are not watched for anything.  A new
 * partition table is a re-read.
 */
Test (check_write, block_zero_and_partition_table)
{
  struct checked c;
  unsigned char b[4096], z[512];

  checked_new (&c, 64 * MiB, "-t ext4 -b 4096");
  pread_at (&c.im, b, sizeof b, 0);
  cr_assert_eq (layout_check_write (c.L, pread_cb, &c.im, 0, 4096), 0);
  cr_assert_eq (layout_check_write (c.L, pread_cb, &c.im, 0, 512), 0);
  cr_assert_eq (layout_check_write (c.L, pread_cb, &c.im, 2048, 2048), 0);
  /* The last sector: data of the filesystem; junk there is no GPT. */
  memset (z, 0xA5, sizeof z);
  pwrite_at (&c.im, z, sizeof z, c.im.size - 512);
  cr_assert_eq (layout_check_write (c.L, pread_cb, &c.im, c.im.size - 512, 512),
                0);
  /* An MBR with one partition. */
  cr_assert_eq (sh ("printf 'label: dos\\nstart=2048, type=83\\n' | "
                    "sfdisk -q --no-reread '%s' >/dev/null 2>&1",
                    c.im.path),
                0);
  cr_assert_eq (layout_check_write (c.L, pread_cb, &c.im, 0, 512), 1);
  checked_del (&c);
}

/* Where no filesystem was found, a write to where one would be is a
 * re-read, as is a resize or a new mkfs of the filesystem.
 */
Test (check_write, new_or_resized_filesystem)
{
  struct checked c;
  struct img im;
  struct layout *L;

  img_new (&im, "ext4lazy-layout", 32 * MiB);
  L = discover (&im);
  cr_assert_eq (L->n_fs, 0);
  cr_assert_eq (layout_check_write (L, pread_cb, &im, 1024, 1024), 1);
  layout_free (L);
  img_del (&im);

  need ("resize2fs");
  checked_new (&c, 256 * MiB, "-t ext4 -b 4096");
  cr_assert_eq (sh ("resize2fs '%s' 200M >/dev/null 2>&1", c.im.path), 0);
  cr_assert_eq (layout_check_write (c.L, pread_cb, &c.im, 0, 4096), 1);
  checked_reset (&c);
  cr_assert_eq (layout_check_write (c.L, pread_cb, &c.im, 0, 4096), 0);
  cr_assert_eq (sh ("mke2fs -q -F -t ext4 -b 4096 -I 128 '%s'", c.im.path), 0);
  cr_assert_eq (layout_check_write (c.L, pread_cb, &c.im, 0, 4096), 1);
  checked_del (&c);
}

/* A read error while checking is returned. */
Test (check_write, read_error)
{
  struct checked c;
  struct flaky f;

  checked_new (&c, 64 * MiB, "-t ext4 -b 4096");
  f = (struct flaky){ &c.im, 0 };
  cr_assert_eq (layout_check_write (c.L, flaky_read, &f, 0, 4096), -EIO);
  cr_assert_eq (
      layout_check_write (c.L, flaky_read, &f, c.L->fs[0].desc[0], 4096), -EIO);
  checked_del (&c);
}
