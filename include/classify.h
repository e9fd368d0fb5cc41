/* SPDX-License-Identifier: BSD-3-Clause */
/* classify.h --- decide whether an inode-table write changes only
 * timestamps, or a logged superblock only its informational fields.
 *
 * The engine holds a write to an inode-table block only when every
 * inode record in it differs from the reference copy in timestamp
 * bytes alone.  This module compares two versions of a block (or of
 * one record) and says how far apart they are.  It is a pure
 * function of the bytes: no state, no allocation, no I/O, safe to
 * call from any thread.  docs/classify.md states the rule byte by
 * byte.
 *
 * The one rule under all others: when in doubt, TCLASS_REAL.
 *
 * Assumptions the caller must guarantee:
 *  - the filesystem's s_creator_os is Linux (0): the osd1/osd2 fields
 *    are read with their Linux meaning (l_i_version at 0x24,
 *    l_i_checksum_lo at 0x7C).  Other creator OSes must not be
 *    classified (serve them as pass-through);
 *  - inode_size is the superblock's s_inode_size.
 * Buffers may have any alignment; all fields are decoded as
 * little-endian bytes whatever the host byte order.
 */
#ifndef EXT4LAZY_CLASSIFY_H
#define EXT4LAZY_CLASSIFY_H

#include <stddef.h>
#include <stdint.h>

/* Ordered: the class of a block is the maximum over its records. */
enum tclass
{
  TCLASS_SAME = 0, /* byte-identical */
  TCLASS_ATIME,    /* only i_atime, i_atime_extra and the checksum differ */
  TCLASS_TIME,     /* only timestamps (atime, ctime, mtime, their _extra,
                      crtime, crtime_extra), l_i_version / i_version_hi
                      and the checksum differ */
  TCLASS_REAL,     /* anything else */
};

/* Smallest and largest record sizes accepted.  inode_size must be a
 * power of two in this range; classify_record gives TCLASS_REAL for
 * anything else (classify_block still reports identical buffers as
 * TCLASS_SAME).
 */
#define CLASSIFY_MIN_INODE_SIZE 128
#define CLASSIFY_MAX_INODE_SIZE 65536

/* Compare one inode record of inode_size bytes: ref is the reference
 * (durable) version, nw the version being written.
 *
 * Returns TCLASS_SAME if the records are byte-identical, otherwise the
 * smallest class whose allowed bytes cover every difference, with these
 * conservative rules (each gives TCLASS_REAL):
 *  - a difference only in i_checksum_lo / i_checksum_hi with no
 *    timestamp or version change (the kernel never writes that for a
 *    timestamp update; tune2fs and e2fsck do, together with other
 *    metadata that must reach the disk);
 *  - i_extra_isize differs, or is bogus (not a multiple of 4, or
 *    128 + i_extra_isize > inode_size): then no byte from 0x82 on
 *    may differ;
 *  - either version has i_mode == 0 or i_links_count == 0 (an unused,
 *    freed or orphaned record; this also covers lazy-init zeroing);
 *  - either version has EXT4_EA_INODE_FL (0x200000) in i_flags;
 *  - inode_size is not a power of two in
 *    [CLASSIFY_MIN_INODE_SIZE, CLASSIFY_MAX_INODE_SIZE].
 */
extern enum tclass classify_record (uint32_t inode_size, const void *ref,
                                    const void *nw);

/* Compare a run of len bytes of an inode table, len a multiple of
 * inode_size, record by record; the result is the maximum over the
 * records (TCLASS_SAME for len == 0).  Identical buffers classify
 * TCLASS_SAME whatever inode_size is (fast path).  Otherwise a bad
 * inode_size or a len that is not a multiple of it gives TCLASS_REAL.
 */
extern enum tclass classify_block (uint32_t inode_size, const void *ref,
                                   const void *nw, size_t len);

/* Compare two versions of the block that holds the primary superblock,
 * of block_size bytes, the superblock at byte sb_off of it (1024 for
 * 2048-byte blocks and up, 0 for 1024-byte blocks).  Returns
 * TCLASS_SAME if they are byte-identical; TCLASS_ATIME if they differ
 * only in the superblock's informational fields (s_mtime, s_wtime, their
 * _hi bytes, s_last_mounted, s_kbytes_written) and s_checksum, with at
 * least one informational field changed; TCLASS_REAL for anything else
 * (another byte of the superblock or of the block, s_checksum alone, or
 * sb_off + 1024 > block_size).  The kernel's first file open after a
 * mount logs such a change (s_last_mounted).
 */
extern enum tclass classify_superblock (const void *ref, const void *nw,
                                        uint32_t block_size, uint32_t sb_off);

/* Which time fields of an inode differ (classify_time_fields). */
enum tfield
{
  TFIELD_ATIME = 1 << 0,   /* i_atime, i_atime_extra */
  TFIELD_CTIME = 1 << 1,   /* i_ctime, i_ctime_extra */
  TFIELD_MTIME = 1 << 2,   /* i_mtime, i_mtime_extra */
  TFIELD_CRTIME = 1 << 3,  /* i_crtime, i_crtime_extra */
  TFIELD_VERSION = 1 << 4, /* l_i_version, i_version_hi (not a time, but
                            * what a time-only update may also change) */
};
#define TFIELD_COUNT 5

/* Say which of the fields above differ between two records of
 * inode_size bytes: a mask of enum tfield, 0 when none does (the
 * records may still differ elsewhere: this is not a classification).
 * An _extra field counts only where both records' i_extra_isize is the
 * same, valid and covers it; an inode_size that classify_record would
 * refuse compares the 128-byte base record only (nothing below 128).
 */
extern unsigned classify_time_fields (uint32_t inode_size, const void *ref,
                                      const void *nw);

/* "atime", "ctime", "mtime", "crtime", "version" for one bit of enum
 * tfield; NULL for anything else.
 */
extern const char *tfield_name (unsigned field);

/* "same", "atime", "time", "real"; "invalid" for a value outside the
 * enum.  Never NULL.
 */
extern const char *tclass_name (enum tclass c);

#endif /* EXT4LAZY_CLASSIFY_H */
