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
  struct img *im = opaque;
  cr_assert_leq (off + len, im->size, "read past the device");
  ssize_t n = pread (im->fd, buf, len, off);
  if (n < 0)
    return -errno;
  return (size_t)n == len ? 0 : -EIO;
}

static void
pwrite_at (struct img *im, const void *buf, size_t len, uint64_t off)
{
  cr_assert_eq (pwrite (im->fd, buf, len, off), (ssize_t)len);
}

static void
scan (struct img *im, struct part_table *t)
{
  int r = partition_scan_table (pread_cb, im, im->size, t);
  cr_assert_eq (r, 0, "partition_scan_table: %s", strerror (-r));
}

static bool
watched (const struct part_table *t, uint64_t off)
{
  for (size_t i = 0; i < t->n_sectors; i++)
    if (off >= t->sectors[i].off && off - t->sectors[i].off < t->sectors[i].len)
      return true;
  return false;
}

/* Compare with sfdisk's own dump: each "start=, size=" line (skipping
 * extended containers) must be one of our parts, in order.
 */
static void
check_against_sfdisk (struct img *im, const struct part_table *t, uint32_t ss)
{
  char cmd[256];
  char line[512];
  size_t k = 0;

  snprintf (cmd, sizeof cmd, "sfdisk -d '%s' 2>/dev/null", im->path);
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
      cr_assert_lt (k, t->n_parts, "sfdisk lists more partitions");
      cr_assert_eq (t->parts[k].off, start * ss, "partition %zu offset", k);
      cr_assert_eq (t->parts[k].len, size * ss, "partition %zu size", k);
      k++;
    }
  pclose (f);
  cr_assert_eq (k, t->n_parts, "we found partitions sfdisk did not list");
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
  struct img im;
  struct part_table t;
  struct part *parts;
  size_t n;

  img_new (&im, "ext4lazy-part", 8 << 20);
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 1);
  cr_assert_eq (t.parts[0].scheme, PART_WHOLE);
  cr_assert_eq (t.parts[0].off, 0);
  cr_assert_eq (t.parts[0].len, im.size);
  cr_assert (watched (&t, 0));
  cr_assert_not (watched (&t, 1024)); /* a whole-disk superblock is not a
                                       * table sector */
  partition_table_free (&t);
  cr_assert_eq (partition_scan (pread_cb, &im, im.size, &parts, &n), 0);
  cr_assert_eq (n, 1);
  free (parts);
  img_del (&im);
}

Test (partition, mbr_primaries)
{
  struct img im;
  struct part_table t;

  need_sfdisk ();
  img_new (&im, "ext4lazy-part", 64 << 20);
  cr_assert_eq (sh ("printf 'label: dos\\nstart=2048, size=10000, type=83\\n"
                    "start=20000, size=30000, type=c\\n"
                    "start=60000, size=5000, type=83\\n' | sfdisk -q '%s'",
                    im.path),
                0);
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 3);
  check_against_sfdisk (&im, &t, 512);
  cr_assert_eq (t.parts[1].scheme, PART_MBR);
  cr_assert_eq (t.parts[1].index, 2);
  partition_table_free (&t);
  img_del (&im);
}

Test (partition, mbr_logicals)
{
  struct img im;
  struct part_table t;

  need_sfdisk ();
  img_new (&im, "ext4lazy-part", 128 << 20);
  cr_assert_eq (sh ("printf 'label: dos\\nstart=2048, size=10000, type=83\\n"
                    "start=20000, size=200000, type=5\\n"
                    "start=22048, size=10000, type=83\\n"
                    "start=40000, size=10000, type=83\\n"
                    "start=60000, size=10000, type=83\\n' | sfdisk -q '%s'",
                    im.path),
                0);
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 4, "notices:\n%s", notices);
  check_against_sfdisk (&im, &t, 512);
  for (size_t i = 1; i < 4; i++)
    {
      cr_assert_eq (t.parts[i].scheme, PART_LOGICAL);
      cr_assert_eq (t.parts[i].index, 4 + i);
    }
  /* The EBR of the first logical partition (at the container's start)
   * is a watched table sector. */
  cr_assert (watched (&t, 20000ull * 512));
  partition_table_free (&t);
  img_del (&im);
}

/* Build an MBR whose extended chain loops back on itself. */
static void
set_entry (unsigned char *sec, int i, unsigned type, uint32_t start, uint32_t n)
{
  unsigned char *e = sec + 446 + 16 * i;
  memset (e, 0, 16);
  e[4] = type;
  memcpy (e + 8, &start, 4); /* little-endian host assumed by the test */
  memcpy (e + 12, &n, 4);
  sec[510] = 0x55;
  sec[511] = 0xAA;
}

Test (partition, looping_ebr_chain)
{
  struct img im;
  struct part_table t;
  unsigned char sec[512];

  img_new (&im, "ext4lazy-part", 64 << 20);
  memset (sec, 0, sizeof sec);
  set_entry (sec, 0, 0x83, 2048, 4096);
  set_entry (sec, 1, 0x05, 10000, 100000);
  pwrite_at (&im, sec, sizeof sec, 0);
  /* EBR at 10000 -> logical at 10000+63, next EBR at 10000+20000. */
  memset (sec, 0, sizeof sec);
  set_entry (sec, 0, 0x83, 63, 1000);
  set_entry (sec, 1, 0x05, 20000, 2000);
  pwrite_at (&im, sec, sizeof sec, 10000ull * 512);
  /* EBR at 30000 -> logical, next EBR back at 10000 (offset 0). */
  memset (sec, 0, sizeof sec);
  set_entry (sec, 0, 0x83, 63, 1000);
  set_entry (sec, 1, 0x05, 0, 2000);
  pwrite_at (&im, sec, sizeof sec, 30000ull * 512);

  scan (&im, &t);
  cr_assert_eq (t.n_parts, 1, "logical partitions of a looping chain kept");
  cr_assert_eq (t.parts[0].off, 2048ull * 512);
  cr_assert (strstr (notices, "loops"), "no notice: %s", notices);
  cr_assert (watched (&t, 10000ull * 512));
  cr_assert (watched (&t, 30000ull * 512));
  partition_table_free (&t);
  img_del (&im);
}

Test (partition, self_linked_ebr_chain)
{
  struct img im;
  struct part_table t;
  unsigned char sec[512];

  img_new (&im, "ext4lazy-part", 64 << 20);
  memset (sec, 0, sizeof sec);
  set_entry (sec, 0, 0x0F, 10000, 100000);
  pwrite_at (&im, sec, sizeof sec, 0);
  memset (sec, 0, sizeof sec);
  set_entry (sec, 0, 0x83, 63, 1000);
  set_entry (sec, 1, 0x05, 0, 2000); /* points at itself */
  pwrite_at (&im, sec, sizeof sec, 10000ull * 512);
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 0);
  partition_table_free (&t);
  img_del (&im);
}

Test (partition, mbr_entry_outside_device_dropped)
{
  struct img im;
  struct part_table t;
  unsigned char sec[512];

  img_new (&im, "ext4lazy-part", 16 << 20);
  memset (sec, 0, sizeof sec);
  set_entry (sec, 0, 0x83, 2048, 4096);
  set_entry (sec, 1, 0x83, 8192, 0xFFFFFF00u);
  pwrite_at (&im, sec, sizeof sec, 0);
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 1);
  cr_assert_eq (t.parts[0].off, 2048ull * 512);
  cr_assert (strstr (notices, "outside"));
  partition_table_free (&t);
  img_del (&im);
}

Test (partition, duplicate_entries_are_one_region)
{
  struct img im;
  struct part_table t;
  unsigned char sec[512];

  img_new (&im, "ext4lazy-part", 16 << 20);
  memset (sec, 0, sizeof sec);
  set_entry (sec, 0, 0x83, 2048, 4096);
  set_entry (sec, 2, 0x83, 2048, 4096);
  set_entry (sec, 3, 0x83, 8192, 4096);
  pwrite_at (&im, sec, sizeof sec, 0);
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 2);
  cr_assert_eq (t.parts[0].off, 2048ull * 512);
  cr_assert_eq (t.parts[1].off, 8192ull * 512);
  partition_table_free (&t);
  img_del (&im);
}

Test (partition, boot_code_is_not_a_table)
{
  struct img im;
  struct part_table t;
  unsigned char sec[512];

  img_new (&im, "ext4lazy-part", 16 << 20);
  for (size_t i = 0; i < sizeof sec; i++)
    sec[i] = (unsigned char)(i * 7 + 3);
  sec[510] = 0x55;
  sec[511] = 0xAA;
  pwrite_at (&im, sec, sizeof sec, 0);
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 1);
  cr_assert_eq (t.parts[0].scheme, PART_WHOLE);
  partition_table_free (&t);
  img_del (&im);
}

Test (partition, gpt)
{
  struct img im;
  struct part_table t;

  need_sfdisk ();
  img_new (&im, "ext4lazy-part", 64 << 20);
  cr_assert_eq (sh ("printf 'label: gpt\\nstart=2048, size=10000\\n"
                    "start=20000, size=30000\\n' | sfdisk -q '%s'",
                    im.path),
                0);
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 2, "notices:\n%s", notices);
  check_against_sfdisk (&im, &t, 512);
  cr_assert_eq (t.parts[0].scheme, PART_GPT);
  cr_assert_eq (t.parts[1].index, 2);
  cr_assert (watched (&t, 0));
  cr_assert (watched (&t, 512));
  cr_assert (watched (&t, 2 * 512));
  cr_assert (watched (&t, im.size - 512));
  cr_assert (watched (&t, im.size - 33 * 512));
  cr_assert_not (watched (&t, 2048 * 512));
  partition_table_free (&t);
  img_del (&im);
}

Test (partition, gpt_4096_sectors)
{
  struct img im;
  struct part_table t;

  need_sfdisk ();
  img_new (&im, "ext4lazy-part", 64 << 20);
  if (sh ("printf 'label: gpt\\nstart=256, size=4000\\n' | sfdisk -q "
          "--sector-size 4096 '%s'",
          im.path)
      != 0)
    cr_skip_test ("this sfdisk cannot write 4096-byte-sector tables");
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 1, "notices:\n%s", notices);
  cr_assert_eq (t.parts[0].off, 256ull * 4096);
  cr_assert_eq (t.parts[0].len, 4000ull * 4096);
  cr_assert (watched (&t, 4096));
  cr_assert (watched (&t, im.size - 4096));
  partition_table_free (&t);
  img_del (&im);
}

static void
flip (struct img *im, uint64_t off)
{
  unsigned char b;
  cr_assert_eq (pread (im->fd, &b, 1, off), 1);
  b ^= 0x5A;
  pwrite_at (im, &b, 1, off);
}

Test (partition, gpt_primary_bad_uses_backup)
{
  struct img im;
  struct part_table t;

  need_sfdisk ();
  img_new (&im, "ext4lazy-part", 64 << 20);
  cr_assert_eq (sh ("printf 'label: gpt\\nstart=2048, size=10000\\n' "
                    "| sfdisk -q '%s'",
                    im.path),
                0);
  flip (&im, 2 * 512 + 40); /* primary entry array: its CRC fails */
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 1);
  cr_assert_eq (t.parts[0].off, 2048ull * 512);
  cr_assert (strstr (notices, "backup"));
  partition_table_free (&t);
  img_del (&im);
}

Test (partition, gpt_both_bad)
{
  struct img im;
  struct part_table t;

  need_sfdisk ();
  img_new (&im, "ext4lazy-part", 64 << 20);
  cr_assert_eq (sh ("printf 'label: gpt\\nstart=2048, size=10000\\n' "
                    "| sfdisk -q '%s'",
                    im.path),
                0);
  flip (&im, 512 + 16);           /* primary header CRC */
  flip (&im, im.size - 512 + 16); /* backup header CRC */
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 1);
  cr_assert_eq (t.parts[0].scheme, PART_WHOLE);
  cr_assert (strstr (notices, "no valid GPT"));
  cr_assert (watched (&t, 512));
  cr_assert (watched (&t, im.size - 512));
  partition_table_free (&t);
  img_del (&im);
}

Test (partition, gpt_absurd_entry_count)
{
  struct img im;
  struct part_table t;
  unsigned char hdr[512];

  need_sfdisk ();
  img_new (&im, "ext4lazy-part", 64 << 20);
  cr_assert_eq (sh ("printf 'label: gpt\\nstart=2048, size=10000\\n' "
                    "| sfdisk -q '%s'",
                    im.path),
                0);
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
      pwrite_at (&im, hdr, sizeof hdr, off);
    }
  scan (&im, &t);
  cr_assert_eq (t.n_parts, 1);
  cr_assert_eq (t.parts[0].scheme, PART_WHOLE);
  partition_table_free (&t);
  img_del (&im);
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
  struct part_table t;
  cr_assert_eq (partition_scan_table (fail_read, NULL, 1 << 20, &t), -EIO);
}
