/* SPDX-License-Identifier: BSD-3-Clause */
/* classify.c --- tell time-only inode-table writes from real ones.
 *
 * Each inode record is cut into fixed byte ranges: ranges that must be
 * equal are compared with one memcmp each, and the few ranges that may
 * differ (timestamps, i_version, checksum) decide the class.  Offsets
 * are those of struct ext2_inode_large (ondisk.h); see docs/classify.md.  The
 * superblock's block is compared the same way, around its informational
 * fields.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <ext2fs/ext2_fs.h>

#include "byteorder.h"
#include "classify.h"
#include "ondisk.h"

/* Base (128-byte) record. */
#define OFF_MODE INODE_AT (i_mode)
#define OFF_ATIME INODE_AT (i_atime)
#define OFF_CTIME INODE_AT (i_ctime) /* followed by i_mtime */
#define OFF_MTIME INODE_AT (i_mtime)
#define OFF_DTIME INODE_AT (i_dtime) /* start of i_dtime..i_flags */
#define OFF_LINKS_COUNT INODE_AT (i_links_count)
#define OFF_FLAGS INODE_AT (i_flags)
#define OFF_VERSION INODE_AT (osd1.linux1.l_i_version)
#define OFF_BLOCK INODE_AT (i_block) /* start of i_block..l_i_gid_high */
#define OFF_CSUM_LO INODE_AT (osd2.linux2.l_i_checksum_lo)
#define OFF_RESERVED INODE_AT (osd2.linux2.l_i_reserved)
#define GOOD_OLD_SIZE EXT2_GOOD_OLD_INODE_SIZE

/* Large-inode fields, present when 128 + i_extra_isize covers them. */
#define OFF_EXTRA_ISIZE INODE_AT (i_extra_isize)
#define OFF_CSUM_HI INODE_AT (i_checksum_hi)
/* i_ctime_extra, followed by i_mtime_extra. */
#define OFF_CTIME_EXTRA INODE_AT (i_ctime_extra)
#define OFF_MTIME_EXTRA INODE_AT (i_mtime_extra)
#define OFF_ATIME_EXTRA INODE_AT (i_atime_extra)
/* i_crtime, then i_crtime_extra and i_version_hi. */
#define OFF_CRTIME INODE_AT (i_crtime)
#define OFF_VERSION_HI INODE_AT (i_version_hi)
#define OFF_PROJID INODE_AT (i_projid) /* first field never time-only */

#define EA_INODE_FL EXT4_EA_INODE_FL

static inline bool
valid_inode_size (uint32_t inode_size)
{
  return inode_size >= CLASSIFY_MIN_INODE_SIZE
         && inode_size <= CLASSIFY_MAX_INODE_SIZE
         && (inode_size & (inode_size - 1)) == 0;
}

/* Do bytes [off, off + len) differ? */
static inline bool
differ (const uint8_t *r, const uint8_t *n, size_t off, size_t len)
{
  return memcmp (r + off, n + off, len) != 0;
}

/* Same, with the range cut at end (the end of the covered extra
 * fields).  i_extra_isize is a multiple of 4 here, so every 4-byte
 * field is either wholly covered or not at all.
 */
static inline bool
differ_upto (const uint8_t *r, const uint8_t *n, size_t off, size_t len,
             size_t end)
{
  if (off >= end)
    return false;
  if (off + len > end)
    len = end - off;
  return differ (r, n, off, len);
}

/* A record whose "timestamps" must not be treated as such: unused or
 * freed (i_mode 0, i_links_count 0, which includes an all-zero
 * record) or an EA_INODE, whose time fields hold xattr data.
 */
static inline bool
record_is_special (const uint8_t *p)
{
  return le16 (p + OFF_MODE) == 0 || le16 (p + OFF_LINKS_COUNT) == 0
         || (le32 (p + OFF_FLAGS) & EA_INODE_FL) != 0;
}

/* Classify two records already known to differ somewhere. */
static enum tclass
classify_differing (uint32_t inode_size, const uint8_t *r, const uint8_t *n)
{
  enum tclass c = TCLASS_SAME;

  /* Base fields that must be equal: i_mode..i_size_lo;
   * i_dtime..i_flags; i_block..l_i_gid_high; l_i_reserved.
   */
  if (differ (r, n, OFF_MODE, OFF_ATIME - OFF_MODE)
      || differ (r, n, OFF_DTIME, OFF_VERSION - OFF_DTIME)
      || differ (r, n, OFF_BLOCK, OFF_CSUM_LO - OFF_BLOCK)
      || differ (r, n, OFF_RESERVED, GOOD_OLD_SIZE - OFF_RESERVED))
    return TCLASS_REAL;

  /* i_mode, i_links_count and i_flags are equal by now; both sides
   * are checked anyway so that this test never depends on the order.
   */
  if (record_is_special (r) || record_is_special (n))
    return TCLASS_REAL;

  if (differ (r, n, OFF_ATIME, 4))
    c = TCLASS_ATIME;
  if (differ (r, n, OFF_CTIME, 8) || differ (r, n, OFF_VERSION, 4))
    c = TCLASS_TIME;

  if (inode_size > GOOD_OLD_SIZE)
    {
      uint16_t extra = le16 (r + OFF_EXTRA_ISIZE);
      size_t end;

      if (extra != le16 (n + OFF_EXTRA_ISIZE))
        return TCLASS_REAL;

      if ((extra & 3) != 0 || extra > inode_size - GOOD_OLD_SIZE)
        {
          /* Bogus i_extra_isize (the kernel refuses such an inode):
           * nothing past the base record is a time field, not even
           * i_checksum_hi.
           */
          if (differ (r, n, OFF_CSUM_HI, inode_size - OFF_CSUM_HI))
            return TCLASS_REAL;
        }
      else
        {
          end = GOOD_OLD_SIZE + extra;
          /* In-inode xattrs (or unused space) after the extra fields. */
          if (differ (r, n, end, inode_size - end))
            return TCLASS_REAL;
          /* i_projid and any field after it. */
          if (end > OFF_PROJID && differ (r, n, OFF_PROJID, end - OFF_PROJID))
            return TCLASS_REAL;
          /* i_checksum_hi is free when covered (extra >= 4);
           * when extra == 0 the tail compare above included it.
           */
          if (c < TCLASS_TIME
              && (differ_upto (r, n, OFF_CTIME_EXTRA, 8, end)
                  || differ_upto (r, n, OFF_CRTIME, OFF_PROJID - OFF_CRTIME,
                                  end)))
            c = TCLASS_TIME;
          if (c < TCLASS_ATIME && differ_upto (r, n, OFF_ATIME_EXTRA, 4, end))
            c = TCLASS_ATIME;
        }
    }

  /* Only the checksum differs: not something a timestamp update
   * writes (see classify.h).
   */
  if (c == TCLASS_SAME)
    return TCLASS_REAL;
  return c;
}

enum tclass
classify_record (uint32_t inode_size, const void *ref, const void *nw)
{
  if (!valid_inode_size (inode_size))
    return TCLASS_REAL;
  if (memcmp (ref, nw, inode_size) == 0)
    return TCLASS_SAME;
  return classify_differing (inode_size, ref, nw);
}

enum tclass
classify_block (uint32_t inode_size, const void *ref, const void *nw,
                size_t len)
{
  const uint8_t *r = ref;
  const uint8_t *n = nw;
  enum tclass worst = TCLASS_SAME;
  size_t off;

  if (len == 0 || memcmp (r, n, len) == 0)
    return TCLASS_SAME;
  if (!valid_inode_size (inode_size) || len % inode_size != 0)
    return TCLASS_REAL;

  for (off = 0; off < len; off += inode_size)
    {
      enum tclass c;

      if (memcmp (r + off, n + off, inode_size) == 0)
        continue;
      c = classify_differing (inode_size, r + off, n + off);
      if (c == TCLASS_REAL)
        return TCLASS_REAL;
      if (c > worst)
        worst = c;
    }
  return worst;
}

/* Where each time field lives: bytes in the base record (none for
 * crtime) and in the extra fields.
 */
static const struct
{
  unsigned field;
  uint8_t off, len, extra_off, extra_len;
} time_fields[TFIELD_COUNT] = {
  { TFIELD_ATIME, OFF_ATIME, 4, OFF_ATIME_EXTRA, 4 },
  { TFIELD_CTIME, OFF_CTIME, 4, OFF_CTIME_EXTRA, 4 },
  { TFIELD_MTIME, OFF_MTIME, 4, OFF_MTIME_EXTRA, 4 },
  { TFIELD_CRTIME, 0, 0, OFF_CRTIME, 8 }, /* i_crtime, i_crtime_extra */
  { TFIELD_VERSION, OFF_VERSION, 4, OFF_VERSION_HI, 4 },
};

/* The end of the extra fields both records have, GOOD_OLD_SIZE when
 * they have none in common.
 */
static size_t
common_extra_end (uint32_t inode_size, const uint8_t *r, const uint8_t *n)
{
  uint16_t extra;

  if (!valid_inode_size (inode_size) || inode_size <= GOOD_OLD_SIZE)
    return GOOD_OLD_SIZE;
  extra = le16 (r + OFF_EXTRA_ISIZE);
  if (extra != le16 (n + OFF_EXTRA_ISIZE) || (extra & 3) != 0
      || extra > inode_size - GOOD_OLD_SIZE)
    return GOOD_OLD_SIZE;
  return GOOD_OLD_SIZE + extra;
}

unsigned
classify_time_fields (uint32_t inode_size, const void *ref, const void *nw)
{
  const uint8_t *r = ref;
  const uint8_t *n = nw;
  size_t end = common_extra_end (inode_size, r, n);
  unsigned mask = 0;

  if (inode_size < GOOD_OLD_SIZE)
    return 0;
  for (size_t i = 0; i < TFIELD_COUNT; i++)
    if ((time_fields[i].len
         && differ (r, n, time_fields[i].off, time_fields[i].len))
        || differ_upto (r, n, time_fields[i].extra_off,
                        time_fields[i].extra_len, end))
      mask |= time_fields[i].field;
  return mask;
}

const char *
tfield_name (unsigned field)
{
  switch (field)
    {
    case TFIELD_ATIME:
      return "atime";
    case TFIELD_CTIME:
      return "ctime";
    case TFIELD_MTIME:
      return "mtime";
    case TFIELD_CRTIME:
      return "crtime";
    case TFIELD_VERSION:
      return "version";
    }
  return NULL;
}

const char *
tclass_name (enum tclass c)
{
  switch (c)
    {
    case TCLASS_SAME:
      return "same";
    case TCLASS_ATIME:
      return "atime";
    case TCLASS_TIME:
      return "time";
    case TCLASS_REAL:
      return "real";
    }
  return "invalid";
}

/* The superblock's informational fields: [offset, offset + length). */
static const struct
{
  uint16_t off, len;
} sb_info[] = {
#define SB_FIELD(f) { SB_AT (f), SB_LEN (f) }
  SB_FIELD (s_mtime),          SB_FIELD (s_wtime),    SB_FIELD (s_last_mounted),
  SB_FIELD (s_kbytes_written), SB_FIELD (s_wtime_hi), SB_FIELD (s_mtime_hi),
#undef SB_FIELD
};
#define SB_CHECKSUM SB_AT (s_checksum)

enum tclass
classify_superblock (const void *ref, const void *nw, uint32_t block_size,
                     uint32_t sb_off)
{
  const uint8_t *r = ref;
  const uint8_t *n = nw;
  bool info = false;
  size_t at = 0;

  if (memcmp (r, n, block_size) == 0)
    return TCLASS_SAME;
  if (sb_off > block_size || block_size - sb_off < SB_SIZE)
    return TCLASS_REAL;
  if (memcmp (r, n, sb_off) != 0
      || memcmp (r + sb_off + SB_SIZE, n + sb_off + SB_SIZE,
                 block_size - sb_off - SB_SIZE)
             != 0)
    return TCLASS_REAL;
  r += sb_off;
  n += sb_off;
  /* Between the informational fields (sorted), nothing may differ. */
  for (size_t i = 0; i < sizeof sb_info / sizeof sb_info[0]; i++)
    {
      if (memcmp (r + at, n + at, sb_info[i].off - at) != 0)
        return TCLASS_REAL;
      at = sb_info[i].off + sb_info[i].len;
      info |= memcmp (r + sb_info[i].off, n + sb_info[i].off, sb_info[i].len)
              != 0;
    }
  if (memcmp (r + at, n + at, SB_CHECKSUM - at) != 0)
    return TCLASS_REAL;
  return info ? TCLASS_ATIME : TCLASS_REAL;
}
