/* SPDX-License-Identifier: BSD-3-Clause */
/* layout.h --- where the ext2/3/4 filesystems on a device keep their
 * inode tables, superblock, group descriptors and journal: what the
 * engine needs to tell an inode-table or journal write from any other.
 *
 * layout_discover reads the partition table (partition.h), opens each
 * candidate region with libext2fs through a read-only io_manager
 * (ext2io.h) and records, as device byte offsets, what the engine needs
 * to classify client writes, with the journal superblock as jbd2.h
 * parses it.  The lookups below answer "what is at this offset",
 * layout_check_write tells whether a client write to watched metadata
 * changed the layout, and layout_same_* whether a re-read layout moved
 * what the engine holds writes for.  Nothing of libext2fs outlives the call:
 * the returned layout is plain data, immutable and safe to share
 * between threads.  layout_discover itself serialises its libext2fs use
 * under an internal lock.
 *
 * Bad on-disk data never fails discovery: a region that does not hold
 * a filesystem that passes the sanity checks is pass-through (no
 * ext4_fs for it) and one log_notice says why.
 *
 * Checksums: the superblock checksum and the journal inode's checksum
 * are verified (libext2fs is opened without EXT2_FLAG_IGNORE_CSUM_ERRORS,
 * so a failure makes the region pass-through, as the kernel would
 * refuse to mount it).  Group descriptor checksums are not verified;
 * every location read from a descriptor is instead bounds-checked
 * against the filesystem and against the other metadata.
 */
#ifndef EXT4LAZY_LAYOUT_H
#define EXT4LAZY_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jbd2.h"

struct part;

/* Read exactly len bytes at device offset off into buf.  Returns 0, or
 * -errno (a short read is an error).
 */
typedef int (*layout_read_fn) (void *opaque, void *buf, size_t len,
                               uint64_t off);

/* Contiguous inode-table bytes.  first_ino is the inode number of the
 * record at off; the record at off + k * inode_size is first_ino + k.
 */
struct itable_run
{
  uint64_t off, len;
  uint32_t first_ino;
};

struct dev_extent
{
  uint64_t off, len;
};

/* Device bytes [off, off+len) hold journal blocks lblk, lblk+1, ... */
struct journal_extent
{
  uint64_t off, len;
  uint64_t lblk;
};

struct ext4_fs
{
  uint64_t start, size; /* device byte offset of fs block 0, fs size in
                         * bytes (blocks_count * block_size) */
  uint64_t part_len;    /* bytes of the region (partition or whole
                         * device) the fs was found in; >= size */
  uint32_t block_size, inode_size, inodes_per_group, group_count, first_ino;
  uint32_t feature_compat, feature_incompat, feature_ro_compat;
  uint16_t extra_isize_min; /* s_min_extra_isize, informational */
  uint32_t desc_size;       /* bytes per group descriptor */
  uint32_t csum_seed;       /* metadata_csum crc32c seed (s_checksum_seed or
                             * crc32c(~0, uuid)), else 0 */
  /* Sorted by off, merged where contiguous and consecutive in inode
   * numbers; the runs never overlap each other or meta.
   */
  struct itable_run *itable;
  size_t n_itable;
  /* Sorted and merged: the primary superblock's block, the group
   * descriptor blocks (meta_bg locations included), the reserved GDT
   * blocks and the journal inode's mapping blocks (extent index or
   * indirect blocks).  A client write here is checked against the
   * layout (layout_check_write).
   */
  struct dev_extent *meta;
  size_t n_meta;
  /* Device offsets of the primary group-descriptor blocks, in order:
   * desc[i] describes groups i * (block_size / desc_size) onwards.
   */
  uint64_t *desc;
  size_t n_desc;
  /* The primary superblock as read at discovery.  layout_check_write
   * compares only its layout-defining fields with what a client writes.
   */
  unsigned char sb[1024];
  bool has_journal;      /* COMPAT_HAS_JOURNAL */
  bool journal_external; /* has_journal with s_journal_inum == 0: no
                          * journal extents, the journal is elsewhere */
  /* Sorted by off; lblk 0 is the journal superblock. */
  struct journal_extent *journal;
  size_t n_journal;
  uint64_t journal_blocks; /* journal inode size in blocks (i_size / bs) */
  bool jsb_valid;          /* jsb holds a v1/v2 jbd2 superblock whose
                            * block size matches the fs */
  struct jbd2_sb jsb;      /* journal block 0 as read at discovery, with
                            * its device offset in jsb.dev_off */
};

struct layout
{
  struct ext4_fs *fs; /* sorted by start, never overlapping */
  size_t n_fs;
  uint64_t dev_size;
  /* Sorted and merged: every region whose write is checked:
   * partition table sectors (LBA 0, EBRs, GPT header and entry array at
   * both ends), each fs's meta, and for each candidate region without a
   * valid fs its superblock location (start+1024, 1024 bytes).
   */
  struct dev_extent *watch;
  size_t n_watch;
  /* The partition scan as discovery saw it (partition.h): its regions
   * and the sectors that describe the table.
   */
  struct part *parts;
  size_t n_parts;
  struct dev_extent *ptable;
  size_t n_ptable;
};

/* Discover the layout of a device of dev_size bytes read through read.
 * Returns 0 and *out (possibly with n_fs == 0: pass-through), or
 * -ENOMEM, or the -errno of a failed read.  Never fails for bad
 * on-disk data.
 */
extern int layout_discover (layout_read_fn read, void *opaque,
                            uint64_t dev_size, struct layout **out);
extern void layout_free (struct layout *);
/* Release what libext2fs keeps for the process (its error table); call
 * once, when no discovery can run any more (plugin unload).
 */
extern void layout_unload (void);

/* The fs whose [start, start+size) contains device offset off, or NULL. */
extern const struct ext4_fs *layout_fs_at (const struct layout *, uint64_t off);
/* The inode-table run containing device offset off, or NULL. */
extern const struct itable_run *layout_itable_at (const struct ext4_fs *,
                                                  uint64_t off);
/* Inode number of the record containing device offset off, or 0 if off
 * is not in an inode table.
 */
extern uint32_t layout_ino_at (const struct ext4_fs *, uint64_t off);
extern bool layout_overlaps_watch (const struct layout *, uint64_t off,
                                   uint64_t len);
extern bool layout_overlaps_meta (const struct ext4_fs *, uint64_t off,
                                  uint64_t len);
extern bool layout_overlaps_journal (const struct ext4_fs *, uint64_t off,
                                     uint64_t len);
/* Device offset of journal block lblk, or UINT64_MAX if unmapped. */
extern uint64_t layout_journal_off (const struct ext4_fs *, uint64_t lblk);
/* The journal extent containing device offset off, or NULL. */
extern const struct journal_extent *layout_journal_at (const struct ext4_fs *,
                                                       uint64_t off);
/* Journal block number at device offset off, or UINT64_MAX if off is not
 * in the journal.
 */
extern uint64_t layout_journal_lblk (const struct ext4_fs *, uint64_t off);
/* Where the first inode-table run or journal extent that begins after
 * device offset off begins, or the filesystem's end.
 */
extern uint64_t layout_next_region (const struct ext4_fs *, uint64_t off);

/* After a client write to [off, off+len) that overlaps the watch list
 * has reached the store, does the layout need a full re-read?  Only the
 * watched metadata the write touched is read back and compared, field
 * by field, with what discovery saw:
 *  - partition-table sectors: the table is scanned again and its
 *    regions and sectors compared;
 *  - a filesystem's primary superblock: the fields that define the
 *    layout (geometry, counts of blocks and inodes, inode and descriptor
 *    sizes, the layout features, the journal inode, the UUID and
 *    checksum seed) and, with metadata_csum, the checksum;
 *  - a group-descriptor block: each group's inode-table location;
 *  - anything else watched (reserved GDT blocks, the journal's mapping
 *    blocks, where a filesystem may appear in a pass-through region):
 *    always a re-read.
 * Free counts, flags, checksums of descriptors and the superblock's
 * times and counters cost the read-back and nothing more.  Returns 1 if
 * the layout must be re-read, 0 if not, or the -errno of a failed read.
 */
extern int layout_check_write (const struct layout *, layout_read_fn,
                               void *opaque, uint64_t off, uint64_t len);

/* Re-read the journal superblock (the kernel rewrites it at mount with
 * new feature flags).  Returns 0 and *out, -ENOENT if the fs has no
 * internal journal, -EINVAL if the block read is not a jbd2 superblock
 * matching the fs, or the -errno of a failed read.
 */
extern int layout_read_jsb (const struct ext4_fs *, layout_read_fn,
                            void *opaque, struct jbd2_sb *out);

/* Do a and b have the same filesystems at the same places, with the
 * same block and inode sizes and the same inode-table runs?
 */
extern bool layout_same_itables (const struct layout *a,
                                 const struct layout *b);
/* Are a's and b's journals the same blocks: same fs start, block size
 * and journal extents?
 */
extern bool layout_same_journal (const struct ext4_fs *a,
                                 const struct ext4_fs *b);

#endif /* EXT4LAZY_LAYOUT_H */
