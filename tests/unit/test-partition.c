/* SPDX-License-Identifier: BSD-3-Clause */
/* test-partition.c --- MBR/GPT scanning against tables written by sfdisk,
 * and hand-made bad tables (looping EBR chain, bad CRCs, out-of-range
 * entries).
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
#include "log.h"
#include "partition.h"

static void
need_sfdisk (void)
{
  if (sh ("command -v sfdisk") != 0)
    cr_skip_test ("sfdisk (package fdisk) is not installed");
}

static int
pread_cb (void *opaque, void *buf, size_t len, uint64_t off)
{
  struct img *img = opaque;
  cr_assert_leq (off + len, img->size, "read past the device");
  ssize_t n = pread (img->fd, buf, len, off);
  if (n < 0)
    return -errno;
  return (size_t)n == len ? 0 : -EIO;
}

/* The image and table of the running test (each test runs in its own
 * process); the suite's fini frees them when the test passes or fails
 * (a test that skips calls teardown itself).
 */
static struct img im;
static struct part_table t;

static void
pwrite_at (const void *buf, size_t len, uint64_t off)
{
  cr_assert_eq (pwrite (im.fd, buf, len, off), (ssize_t)len);
}

static void
teardown (void)
{
  partition_table_free (&t);
  if (im.path[0])
    img_del (&im);
  im.path[0] = 0;
}

TestSuite (partition, .fini = teardown);

/* Scan im into t, which must then hold n_parts regions. */
static void
scan_expect (size_t n_parts)
{
  int r = partition_scan_table (pread_cb, &im, im.size, &t);

  cr_assert_eq (r, 0, "partition_scan_table: %s", strerror (-r));
  cr_assert_eq (t.n_parts, n_parts, "%zu regions; notices:\n%s", t.n_parts,
                notices);
}

/* Scan im: no valid table, the whole device is the one region. */
static void
scan_expect_whole_device (void)
{
  scan_expect (1);
  cr_assert_eq (t.parts[0].scheme, PART_WHOLE);
}

static bool
watched (uint64_t off)
{
  for (size_t i = 0; i < t.n_sectors; i++)
    if (off >= t.sectors[i].off && off - t.sectors[i].off < t.sectors[i].len)
      return true;
  return false;
}

/* A new image of size bytes, partitioned by sfdisk with script (the
 * printf format of sfdisk's input).
 */
static void
sfdisk_image (uint64_t size, const char *script)
{
  need_sfdisk ();
  img_new (&im, "ext4lazy-part", size);
  cr_assert_eq (sh ("printf '%s' | sfdisk -q '%s'", script, im.path), 0);
}

/* Compare with sfdisk's own dump: each "start=, size=" line (skipping
 * extended containers) must be one of our parts, in order.
 */
static void
check_against_sfdisk (uint32_t ss)
{
  char cmd[256];
  char line[512];
  size_t k = 0;

  snprintf (cmd, sizeof cmd, "sfdisk -d '%s' 2>/dev/null", im.path);
  FILE *f = popen (cmd, "r");
  cr_assert_not_null (f);
  while (fgets (line, sizeof line, f))
    {
      unsigned long long start, size;
      char *p = strstr (line, "start=");
      char *q = strstr (line, "size=");
      if (!p || !q || strstr (line, "sector-size"))
        continue;
      if (strstr (line, "type=5") || strstr (line, "type=f,")
          || strstr (line, "type=85"))
        continue;
      cr_assert_eq (sscanf (p + 6, "%llu", &start), 1);
      cr_assert_eq (sscanf (q + 5, "%llu", &size), 1);
      cr_assert_lt (k, t.n_parts, "sfdisk lists more partitions");
      cr_assert_eq (t.parts[k].off, start * ss, "partition %zu offset", k);
      cr_assert_eq (t.parts[k].len, size * ss, "partition %zu size", k);
      k++;
    }
  pclose (f);
  cr_assert_eq (k, t.n_parts, "we found partitions sfdisk did not list");
}

/* One entry of a hand-made MBR or EBR. */
struct entry
{
  int slot;      /* 0..3 */
  unsigned type; /* 0 ends a list of entries */
  uint32_t start, n;
};

/* Write at sector lba a table sector holding the entries of e (up to
 * the one of type 0) and the 0x55 0xAA signature.
 */
static void
write_table (uint64_t lba, const struct entry *e)
{
  unsigned char sec[512];

  memset (sec, 0, sizeof sec);
  for (; e->type; e++)
    {
      unsigned char *p = sec + 446 + 16 * e->slot;

      p[4] = e->type;
      memcpy (p + 8, &e->start, 4); /* little-endian host assumed */
      memcpy (p + 12, &e->n, 4);
    }
  sec[510] = 0x55;
  sec[511] = 0xAA;
  pwrite_at (sec, sizeof sec, lba * 512);
}

Test (partition, crc32_known_value)
{
  cr_assert_eq (partition_crc32 (0, "123456789", 9), 0xCBF43926u);
  /* Incremental use matches one pass. */
  uint32_t c = partition_crc32 (0, "1234", 4);
  cr_assert_eq (partition_crc32 (c, "56789", 5), 0xCBF43926u);
}

Test (partition, blank_is_whole_device)
{
  struct part *parts;
  size_t n;

  img_new (&im, "ext4lazy-part", 8 << 20);
  scan_expect_whole_device ();
  cr_assert_eq (t.parts[0].off, 0);
  cr_assert_eq (t.parts[0].len, im.size);
  cr_assert (watched (0));
  cr_assert_not (watched (1024)); /* a whole-disk superblock is not a
                                   * table sector */
  partition_table_free (&t);
  cr_assert_eq (partition_scan (pread_cb, &im, im.size, &parts, &n), 0);
  cr_assert_eq (n, 1);
  free (parts);
}

Test (partition, mbr_primaries)
{
  sfdisk_image (64 << 20, "label: dos\\nstart=2048, size=10000, type=83\\n"
                          "start=20000, size=30000, type=c\\n"
                          "start=60000, size=5000, type=83\\n");
  scan_expect (3);
  check_against_sfdisk (512);
  cr_assert_eq (t.parts[1].scheme, PART_MBR);
  cr_assert_eq (t.parts[1].index, 2);
}

Test (partition, mbr_logicals)
{
  sfdisk_image (128 << 20, "label: dos\\nstart=2048, size=10000, type=83\\n"
                           "start=20000, size=200000, type=5\\n"
                           "start=22048, size=10000, type=83\\n"
                           "start=40000, size=10000, type=83\\n"
                           "start=60000, size=10000, type=83\\n");
  scan_expect (4);
  check_against_sfdisk (512);
  for (size_t i = 1; i < 4; i++)
    {
      cr_assert_eq (t.parts[i].scheme, PART_LOGICAL);
      cr_assert_eq (t.parts[i].index, 4 + i);
    }
  /* The EBR of the first logical partition (at the container's start)
   * is a watched table sector. */
  cr_assert (watched (20000ull * 512));
}

/* An MBR whose extended chain loops back on itself. */
Test (partition, looping_ebr_chain)
{
  img_new (&im, "ext4lazy-part", 64 << 20);
  write_table (0, (const struct entry[]){ { 0, 0x83, 2048, 4096 },
                                          { 1, 0x05, 10000, 100000 },
                                          { 0 } });
  /* EBR at 10000 -> logical at 10000+63, next EBR at 10000+20000. */
  write_table (10000, (const struct entry[]){ { 0, 0x83, 63, 1000 },
                                              { 1, 0x05, 20000, 2000 },
                                              { 0 } });
  /* EBR at 30000 -> logical, next EBR back at 10000 (offset 0). */
  write_table (30000, (const struct entry[]){
                          { 0, 0x83, 63, 1000 }, { 1, 0x05, 0, 2000 }, { 0 } });
  scan_expect (1); /* the logical partitions of a looping chain go */
  cr_assert_eq (t.parts[0].off, 2048ull * 512);
  cr_assert (strstr (notices, "loops"), "no notice: %s", notices);
  cr_assert (watched (10000ull * 512));
  cr_assert (watched (30000ull * 512));
}

Test (partition, self_linked_ebr_chain)
{
  img_new (&im, "ext4lazy-part", 64 << 20);
  write_table (0, (const struct entry[]){ { 0, 0x0F, 10000, 100000 }, { 0 } });
  write_table (10000, (const struct entry[]){ { 0, 0x83, 63, 1000 },
                                              { 1, 0x05, 0, 2000 },
                                              { 0 } }); /* points at itself */
  scan_expect (0);
}

Test (partition, mbr_entry_outside_device_dropped)
{
  img_new (&im, "ext4lazy-part", 16 << 20);
  write_table (0, (const struct entry[]){ { 0, 0x83, 2048, 4096 },
                                          { 1, 0x83, 8192, 0xFFFFFF00u },
                                          { 0 } });
  scan_expect (1);
  cr_assert_eq (t.parts[0].off, 2048ull * 512);
  cr_assert (strstr (notices, "outside"));
}

/* A table whose only entry lies outside the device leaves no region
 * from the table: found by fuzzing, where the empty region array was
 * handed to qsort as NULL (undefined behaviour; the ASan+UBSan build of
 * this test catches it).
 */
Test (partition, mbr_with_no_region_inside)
{
  img_new (&im, "ext4lazy-part", 1024);
  write_table (0, (const struct entry[]){ { 0, 0x83, 1, 0xFFFFFFFFu }, { 0 } });
  cr_assert_eq (partition_scan_table (pread_cb, &im, im.size, &t), 0);
  for (size_t i = 0; i < t.n_parts; i++)
    cr_assert_leq (t.parts[i].off + t.parts[i].len, im.size,
                   "no region past the device");
  cr_assert (strstr (notices, "outside"));
}

Test (partition, duplicate_entries_are_one_region)
{
  img_new (&im, "ext4lazy-part", 16 << 20);
  write_table (0, (const struct entry[]){ { 0, 0x83, 2048, 4096 },
                                          { 2, 0x83, 2048, 4096 },
                                          { 3, 0x83, 8192, 4096 },
                                          { 0 } });
  scan_expect (2);
  cr_assert_eq (t.parts[0].off, 2048ull * 512);
  cr_assert_eq (t.parts[1].off, 8192ull * 512);
}

Test (partition, boot_code_is_not_a_table)
{
  unsigned char sec[512];

  img_new (&im, "ext4lazy-part", 16 << 20);
  for (size_t i = 0; i < sizeof sec; i++)
    sec[i] = (unsigned char)(i * 7 + 3);
  sec[510] = 0x55;
  sec[511] = 0xAA;
  pwrite_at (sec, sizeof sec, 0);
  scan_expect_whole_device ();
}

Test (partition, gpt)
{
  sfdisk_image (64 << 20, "label: gpt\\nstart=2048, size=10000\\n"
                          "start=20000, size=30000\\n");
  scan_expect (2);
  check_against_sfdisk (512);
  cr_assert_eq (t.parts[0].scheme, PART_GPT);
  cr_assert_eq (t.parts[1].index, 2);
  cr_assert (watched (0));
  cr_assert (watched (512));
  cr_assert (watched (2 * 512));
  cr_assert (watched (im.size - 512));
  cr_assert (watched (im.size - 33 * 512));
  cr_assert_not (watched (2048 * 512));
}

Test (partition, gpt_4096_sectors)
{
  need_sfdisk ();
  img_new (&im, "ext4lazy-part", 64 << 20);
  if (sh ("printf 'label: gpt\\nstart=256, size=4000\\n' | sfdisk -q "
          "--sector-size 4096 '%s'",
          im.path)
      != 0)
    {
      teardown (); /* a skipped test does not reach the suite's fini */
      cr_skip_test ("this sfdisk cannot write 4096-byte-sector tables");
    }
  scan_expect (1);
  cr_assert_eq (t.parts[0].off, 256ull * 4096);
  cr_assert_eq (t.parts[0].len, 4000ull * 4096);
  cr_assert (watched (4096));
  cr_assert (watched (im.size - 4096));
}

static void
flip (uint64_t off)
{
  unsigned char b;
  cr_assert_eq (pread (im.fd, &b, 1, off), 1);
  b ^= 0x5A;
  pwrite_at (&b, 1, off);
}

#define ONE_GPT_PARTITION "label: gpt\\nstart=2048, size=10000\\n"

Test (partition, gpt_primary_bad_uses_backup)
{
  sfdisk_image (64 << 20, ONE_GPT_PARTITION);
  flip (2 * 512 + 40); /* primary entry array: its CRC fails */
  scan_expect (1);
  cr_assert_eq (t.parts[0].off, 2048ull * 512);
  cr_assert (strstr (notices, "backup"));
}

Test (partition, gpt_both_bad)
{
  sfdisk_image (64 << 20, ONE_GPT_PARTITION);
  flip (512 + 16);           /* primary header CRC */
  flip (im.size - 512 + 16); /* backup header CRC */
  scan_expect_whole_device ();
  cr_assert (strstr (notices, "no valid GPT"));
  cr_assert (watched (512));
  cr_assert (watched (im.size - 512));
}

Test (partition, gpt_absurd_entry_count)
{
  unsigned char hdr[512];

  sfdisk_image (64 << 20, ONE_GPT_PARTITION);
  /* Rewrite both headers with a huge entry count and a valid header
   * CRC: the bounds check, not the CRC, must reject them.
   */
  for (int k = 0; k < 2; k++)
    {
      uint64_t off = k == 0 ? 512 : im.size - 512;
      cr_assert_eq (pread (im.fd, hdr, sizeof hdr, off), 512);
      uint32_t count = 0x7FFFFFFF, crc = 0;
      memcpy (hdr + 80, &count, 4);
      memcpy (hdr + 16, &crc, 4);
      crc = partition_crc32 (0, hdr, 92);
      memcpy (hdr + 16, &crc, 4);
      pwrite_at (hdr, sizeof hdr, off);
    }
  scan_expect_whole_device ();
}

static int
fail_read (void *opaque, void *buf, size_t len, uint64_t off)
{
  (void)opaque;
  (void)buf;
  (void)len;
  (void)off;
  return -EIO;
}

Test (partition, read_error)
{
  cr_assert_eq (partition_scan_table (fail_read, NULL, 1 << 20, &t), -EIO);
}
