/* SPDX-License-Identifier: BSD-3-Clause */
/* test-classify-times.c --- classify_time_fields: which time fields of
 * two inode records differ.
 *
 * Every byte of a synthetic record is changed in turn, for inode sizes
 * 128 and 256 and i_extra_isize values that cover none, some or all of
 * the extra time fields, and the answer is checked against a statement
 * of the field offsets written out here.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "classify.h"

#define MAXREC 512

/* The fields of struct ext4_inode that hold times, as byte ranges. */
static const struct
{
  unsigned field;
  uint32_t lo, hi; /* [lo, hi) */
} ranges[] = {
  { TFIELD_ATIME, 0x08, 0x0C },   { TFIELD_CTIME, 0x0C, 0x10 },
  { TFIELD_MTIME, 0x10, 0x14 },   { TFIELD_VERSION, 0x24, 0x28 },
  { TFIELD_CTIME, 0x84, 0x88 },   { TFIELD_MTIME, 0x88, 0x8C },
  { TFIELD_ATIME, 0x8C, 0x90 },   { TFIELD_CRTIME, 0x90, 0x98 },
  { TFIELD_VERSION, 0x98, 0x9C },
};

/* What a change to byte b alone should give, with the extra fields
 * valid up to end (128 when there are none).
 */
static unsigned
expected (uint32_t b, uint32_t end)
{
  if (b >= end)
    return 0;
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
    if (b >= ranges[i].lo && b < ranges[i].hi)
      return ranges[i].field;
  return 0;
}

static void
make_record (uint8_t *p, uint32_t isz, uint16_t extra)
{
  for (uint32_t i = 0; i < isz; i++)
    p[i] = (uint8_t)((i * 7 + 3) | 1);
  if (isz > 128)
    {
      p[0x80] = (uint8_t)extra;
      p[0x81] = (uint8_t)(extra >> 8);
    }
}

static void
every_byte (uint32_t isz, uint16_t extra, uint32_t end)
{
  uint8_t ref[MAXREC], nw[MAXREC];

  make_record (ref, isz, extra);
  cr_assert_eq (classify_time_fields (isz, ref, ref), 0);
  for (uint32_t b = 0; b < isz; b++)
    {
      unsigned want = b == 0x80 || b == 0x81 ? 0 : expected (b, end);

      memcpy (nw, ref, isz);
      nw[b] ^= 0x40;
      cr_assert_eq (classify_time_fields (isz, ref, nw), want,
                    "inode size %u, extra %u, byte 0x%x: %#x, not %#x", isz,
                    extra, b, classify_time_fields (isz, ref, nw), want);
    }
}

Test (classify_times, base_record_only)
{
  every_byte (128, 0, 128);
}

Test (classify_times, extra_fields_as_covered)
{
  /* i_extra_isize 0, 4 (checksum_hi only), 16 (up to atime_extra),
   * 24 (crtime too), 28 and 32 (version_hi too).
   */
  static const uint16_t extras[] = { 0, 4, 16, 24, 28, 32 };

  for (size_t i = 0; i < sizeof extras / sizeof extras[0]; i++)
    every_byte (256, extras[i], 128 + extras[i]);
}

Test (classify_times, bogus_extra_isize_means_base_only)
{
  every_byte (256, 6, 128);   /* not a multiple of 4 */
  every_byte (256, 132, 128); /* past the record */
}

Test (classify_times, extra_isize_that_differs_means_base_only)
{
  uint8_t ref[256], nw[256];

  make_record (ref, 256, 32);
  memcpy (nw, ref, 256);
  nw[0x80] = 28;
  nw[0x90] ^= 1; /* crtime */
  nw[0x08] ^= 1; /* atime */
  cr_assert_eq (classify_time_fields (256, ref, nw), TFIELD_ATIME);
}

Test (classify_times, several_fields_at_once)
{
  uint8_t ref[256], nw[256];

  make_record (ref, 256, 32);
  memcpy (nw, ref, 256);
  nw[0x8C] ^= 1; /* atime_extra */
  nw[0x11] ^= 1; /* mtime */
  nw[0x95] ^= 1; /* crtime_extra */
  nw[0x40] ^= 1; /* i_block: not a time */
  cr_assert_eq (classify_time_fields (256, ref, nw),
                TFIELD_ATIME | TFIELD_MTIME | TFIELD_CRTIME);
}

Test (classify_times, odd_inode_sizes)
{
  uint8_t ref[MAXREC], nw[MAXREC];

  make_record (ref, 256, 32);
  memcpy (nw, ref, 256);
  nw[0x08] ^= 1;
  nw[0x90] ^= 1;
  /* Not a power of two: the base record only.  Below 128: nothing. */
  cr_assert_eq (classify_time_fields (200, ref, nw), TFIELD_ATIME);
  cr_assert_eq (classify_time_fields (64, ref, nw), 0);
}

Test (classify_times, names)
{
  cr_assert_str_eq (tfield_name (TFIELD_ATIME), "atime");
  cr_assert_str_eq (tfield_name (TFIELD_CTIME), "ctime");
  cr_assert_str_eq (tfield_name (TFIELD_MTIME), "mtime");
  cr_assert_str_eq (tfield_name (TFIELD_CRTIME), "crtime");
  cr_assert_str_eq (tfield_name (TFIELD_VERSION), "version");
  cr_assert_null (tfield_name (0));
  cr_assert_null (tfield_name (TFIELD_ATIME | TFIELD_CTIME));
  cr_assert_null (tfield_name (1u << TFIELD_COUNT));
}
