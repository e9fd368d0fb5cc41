/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz-classify.c --- libFuzzer target for the inode-table write
 * classifier (classify.h).
 *
 * Input: one flags byte, then
 *   - pair mode (flags bit 2 clear): the rest split in two halves, the
 *     reference block and the block being written;
 *   - patch mode (bit 2 set): a count byte (1 + (b & 3) records), the
 *     reference records, then (offset le16, xor) triples that make the
 *     written version from a copy of the reference: a few bytes apart,
 *     as a timestamp update is.
 * Flags bits 0-1 pick the inode size, 128 << (b & 3); with bit 3 the
 * inode size is instead the le16 after the flags byte masked to
 * 0..2047, mostly not a valid one (pair mode only).
 *
 * Checked: the class is in the enum; identical buffers are SAME; a
 * block is the maximum of its records; a bad inode size or length gives
 * REAL for buffers that differ.  The same pair goes to
 * classify_superblock as the block holding a superblock (at byte 0 and
 * at byte 1024, the block length as the block size): SAME exactly for
 * equal bytes, never TIME, the same class both ways round, REAL when
 * the superblock does not fit.  Buffers are exact heap copies.
 */
#include <stdbool.h>

#include "classify.h"
#include "fuzz.h"

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  fuzz_quiet ();
  return 0;
}

static bool
valid_isize (uint32_t isz)
{
  return isz >= CLASSIFY_MIN_INODE_SIZE && isz <= CLASSIFY_MAX_INODE_SIZE
         && (isz & (isz - 1)) == 0;
}

static void
check_class (enum tclass c)
{
  FUZZ_CHECK (c >= TCLASS_SAME && c <= TCLASS_REAL);
  FUZZ_CHECK (tclass_name (c) != NULL);
}

static void
classify_pair (uint32_t isz, const unsigned char *ref, const unsigned char *nw,
               size_t len)
{
  enum tclass c = classify_block (isz, ref, nw, len);
  bool same = memcmp (ref, nw, len) == 0;

  check_class (c);
  FUZZ_CHECK ((c == TCLASS_SAME) == same);
  FUZZ_CHECK (classify_block (isz, ref, ref, len) == TCLASS_SAME);
  FUZZ_CHECK (classify_block (isz, nw, nw, len) == TCLASS_SAME);

  if (!valid_isize (isz) || len % isz != 0)
    {
      if (!same)
        FUZZ_CHECK (c == TCLASS_REAL);
      if (isz > 0 && isz <= len)
        {
          enum tclass r = classify_record (isz, ref, nw);

          check_class (r);
          if (!valid_isize (isz) && memcmp (ref, nw, isz) != 0)
            FUZZ_CHECK (r == TCLASS_REAL);
        }
      return;
    }

  enum tclass max = TCLASS_SAME;
  for (size_t off = 0; off < len; off += isz)
    {
      enum tclass r = classify_record (isz, ref + off, nw + off);

      check_class (r);
      FUZZ_CHECK ((r == TCLASS_SAME)
                  == (memcmp (ref + off, nw + off, isz) == 0));
      FUZZ_CHECK (classify_record (isz, ref + off, ref + off) == TCLASS_SAME);
      if (r > max)
        max = r;
    }
  FUZZ_CHECK (c == max);
}

static void
check_superblock (const unsigned char *a, const unsigned char *b, size_t len)
{
  if (len > UINT32_MAX)
    return;
  for (uint32_t sb = 0; sb <= 1024; sb += 1024)
    {
      enum tclass c = classify_superblock (a, b, len, sb);

      FUZZ_CHECK ((c == TCLASS_SAME) == (memcmp (a, b, len) == 0));
      FUZZ_CHECK (c == TCLASS_SAME || c == TCLASS_ATIME || c == TCLASS_REAL);
      FUZZ_CHECK (classify_superblock (b, a, len, sb) == c);
      if (len < sb + 1024u && c != TCLASS_SAME)
        FUZZ_CHECK (c == TCLASS_REAL);
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  unsigned char *ref, *nw;
  uint32_t isz;
  size_t len;

  if (size < 2)
    return 0;
  isz = 128u << (data[0] & 3);
  if (data[0] & 4)
    {
      size_t k = 1 + (data[1] & 3);
      const uint8_t *p;

      len = k * isz;
      if (size < 2 + len)
        return 0;
      ref = malloc (len);
      nw = malloc (len);
      FUZZ_CHECK (ref && nw);
      memcpy (ref, data + 2, len);
      memcpy (nw, ref, len);
      for (p = data + 2 + len; p + 3 <= data + size; p += 3)
        nw[fuzz_le16 (p) % len] ^= p[2];
    }
  else
    {
      if (data[0] & 8)
        {
          if (size < 3)
            return 0;
          isz = fuzz_le16 (data + 1) & 2047;
          data += 2;
          size -= 2;
        }
      len = (size - 1) / 2;
      ref = malloc (len ? len : 1);
      nw = malloc (len ? len : 1);
      FUZZ_CHECK (ref && nw);
      memcpy (ref, data + 1, len);
      memcpy (nw, data + 1 + len, len);
    }
  classify_pair (isz, ref, nw, len);
  check_superblock (ref, nw, len);
  free (ref);
  free (nw);
  FUZZ_CHECK (tclass_name ((enum tclass)data[size - 1]) != NULL);
  return 0;
}
