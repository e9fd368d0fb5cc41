/* SPDX-License-Identifier: BSD-3-Clause */
/* jbd2.h --- the jbd2 on-disk format: the journal superblock, the
 * features it declares, and one journal block (descriptor, commit,
 * revoke) as the kernel and e2fsprogs write them.
 *
 * Pure functions over bytes: no I/O, no state, no lock.  They never
 * read past the length they are given and check every count and
 * offset: a block that carries the jbd2 magic but does not make sense
 * gives -EINVAL ("real, not understood").  Every field is big-endian
 * on disk.
 *
 * Users: layout.c parses the journal superblock at discovery
 * (jbd2_sb_parse), jlog.c makes the features from it and scans the log
 * the store holds at start, journal.c follows the log block by block,
 * and the engine re-reads the superblock the client writes
 * (jbd2_features_from_raw).  docs/journal.md describes what is
 * understood.
 */
#ifndef EXT4LAZY_JBD2_H
#define EXT4LAZY_JBD2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The format's constants, under the names of the kernel's
 * include/linux/jbd2.h.  e2fsprogs has them in lib/ext2fs/kernel-jbd.h,
 * which libext2fs-dev does not install, so they are spelt out here.
 */
#define JBD2_MAGIC_NUMBER 0xC03B3998u

/* Block types (h_blocktype). */
#define JBD2_DESCRIPTOR_BLOCK 1
#define JBD2_COMMIT_BLOCK 2
#define JBD2_SUPERBLOCK_V1 3
#define JBD2_SUPERBLOCK_V2 4
#define JBD2_REVOKE_BLOCK 5
#define JBD2_FC_BLOCK 6

/* Feature bits of the superblock. */
#define JBD2_FEATURE_COMPAT_CHECKSUM 0x1
#define JBD2_FEATURE_INCOMPAT_REVOKE 0x1
#define JBD2_FEATURE_INCOMPAT_64BIT 0x2
#define JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT 0x4
#define JBD2_FEATURE_INCOMPAT_CSUM_V2 0x8
#define JBD2_FEATURE_INCOMPAT_CSUM_V3 0x10
#define JBD2_FEATURE_INCOMPAT_FAST_COMMIT 0x20

/* Tag flags (descriptor blocks). */
#define JBD2_FLAG_ESCAPE 0x1
#define JBD2_FLAG_SAME_UUID 0x2
#define JBD2_FLAG_DELETED 0x4
#define JBD2_FLAG_LAST_TAG 0x8

/* Checksum types (commit h_chksum_type, superblock s_checksum_type). */
#define JBD2_CRC32_CHKSUM 1
#define JBD2_MD5_CHKSUM 2
#define JBD2_SHA1_CHKSUM 3
#define JBD2_CRC32C_CHKSUM 4
#define JBD2_CRC32_CHKSUM_SIZE 4

/* Fast-commit blocks when s_num_fc_blks is 0. */
#define JBD2_DEFAULT_FAST_COMMIT_BLOCKS 256

/* Bytes of the block header every metadata block starts with: magic,
 * block type, sequence.
 */
#define JBD2_HEADER_BYTES 12

/* Bytes of the superblock that are read. */
#define JBD2_SUPERBLOCK_BYTES 1024

/* ---- the superblock --------------------------------------------------- */

/* The journal superblock as read. */
struct jbd2_sb
{
  uint32_t version; /* 1 or 2 (block type 3 or 4) */
  uint32_t blocksize, maxlen, first, sequence, start, errno_, feature_compat,
      feature_incompat, feature_ro_compat;
  uint32_t nr_users;
  uint32_t num_fc_blks;   /* fast-commit blocks: 0 without the FAST_COMMIT
                           * journal feature; s_num_fc_blks, or the default
                           * 256 when that is 0, with it */
  uint32_t s_num_fc_blks; /* s_num_fc_blks as on disk (v2), whatever the
                           * features: the size of the area the ext4
                           * fast_commit feature turns on */
  bool has_uuid;          /* v2: s_uuid was read */
  uint8_t uuid[16];       /* s_uuid, the journal UUID */
  bool csum_bad;          /* v2 with csum v2/v3: s_checksum_type is not
                           * crc32c or s_checksum does not match */
  uint64_t dev_off;       /* not on disk: the device offset the block was
                           * read from, for the reader to fill (0 here) */
};

/* Parse a journal superblock (len >= JBD2_SUPERBLOCK_BYTES).  Returns
 * 0 and *out, or -EINVAL (out unchanged) if buf is too short, lacks the
 * magic or is not a v1 or v2 superblock.  The feature fields, UUID and
 * checksum of a v1 superblock are 0 / false.  Nothing is checked beyond
 * the block type: see jbd2_features_from_sb.
 */
extern int jbd2_sb_parse (const void *buf, size_t len, struct jbd2_sb *out);

/* ---- features --------------------------------------------------------- */

struct jfeatures
{
  bool csum_v1;      /* COMPAT_CHECKSUM: crc32 over the transaction in
                      * the commit block */
  bool csum_v2;      /* INCOMPAT_CSUM_V2 */
  bool csum_v3;      /* INCOMPAT_CSUM_V3 */
  bool bit64;        /* INCOMPAT_64BIT: tags carry t_blocknr_high,
                      * revoke records are 8 bytes */
  bool async_commit; /* INCOMPAT_ASYNC_COMMIT: the commit block may
                      * arrive before the blocks it commits */
  bool fast_commit;  /* the last num_fc_blks blocks are the fast-commit
                      * area, outside the log */
  bool revoke;       /* INCOMPAT_REVOKE (informational) */
  uint32_t blocksize, maxlen, first, num_fc_blks;
  /* Log state the superblock records (not features): s_sequence and
   * s_start (0: the log is empty, after unmount or a flush).
   */
  uint32_t sequence, start;
  /* The journal UUID, when known (a v2 superblock): with csum
   * v2/v3 it seeds the block checksums, which are then verified for
   * descriptor, revoke and commit blocks.
   */
  bool has_uuid;
  uint8_t uuid[16];
  uint32_t csum_seed; /* crc32c_raw (~0, uuid), valid with has_uuid */
};

/* From a parsed superblock.  fs_fast_commit: the ext4 superblock has
 * COMPAT_FAST_COMMIT (0x400), which turns the fast-commit area on
 * (s_num_fc_blks, or 256 when 0, blocks) even when the jbd2 superblock
 * lacks FAST_COMMIT.  Returns -EINVAL if it is not a superblock this
 * module can follow: block size not a power of two in 1024..65536,
 * s_first or s_maxlen impossible, csum v2 and v3 together or with v1,
 * an incompat feature bit it does not know, a fast-commit area that
 * leaves no log, or (csum v2/v3) csum_bad, as the kernel refuses.  The
 * UUID and checksum seed are taken when the superblock has them (v2),
 * so the block checksums are then verified.
 *
 * Fast commit: mke2fs does not set the jbd2 FAST_COMMIT feature (the
 * kernel sets it at mount and clears it at unmount) and the superblock
 * then reports num_fc_blks = 0.  While the filesystem is mounted with
 * the ext4 COMPAT_FAST_COMMIT feature, the log wraps before the
 * fast-commit area even if the superblock lacks the bit.
 */
extern int jbd2_features_from_sb (const struct jbd2_sb *, bool fs_fast_commit,
                                  struct jfeatures *out);

/* From the raw on-disk jbd2 superblock (len >= 1024, big-endian):
 * jbd2_sb_parse, then jbd2_features_from_sb, so both give the same
 * features for the same block.  -EINVAL as those, or if the block is
 * not a v2 jbd2 superblock.
 */
extern int jbd2_features_from_raw (const void *sb, size_t len,
                                   bool fs_fast_commit, struct jfeatures *out);

/* 0 if f describes a log this module can follow, else -EINVAL (the
 * checks of jbd2_features_from_sb on the geometry and features).
 */
extern int jbd2_features_check (const struct jfeatures *f);

/* Turn the fast-commit area on with num_fc_blks blocks (0: the default
 * 256).  -EINVAL (f unchanged) if that leaves no log.
 */
extern int jbd2_features_set_fast_commit (struct jfeatures *f,
                                          uint32_t num_fc_blks);

/* Size of one descriptor tag (the kernel's journal_tag_bytes): 16 with
 * csum v3; otherwise 12, +2 with csum v2, -4 without 64bit (8, 10, 12
 * or 14).
 */
extern size_t jbd2_tag_bytes (const struct jfeatures *);
/* The most tags a descriptor block can hold (size a tag array with it). */
extern size_t jbd2_max_tags (const struct jfeatures *);
/* The exclusive end of the circular log: maxlen, or maxlen - num_fc_blks
 * with fast commit (the kernel's j_last).  The log is [first, end).
 */
extern uint32_t jbd2_log_end (const struct jfeatures *);

/* ---- one block -------------------------------------------------------- */

enum jblock_kind
{
  JB_NONE,       /* not a journal metadata block: data, or garbage */
  JB_DESCRIPTOR, /* 1 */
  JB_COMMIT,     /* 2 */
  JB_REVOKE,     /* 5 */
  JB_SUPERBLOCK_V1,
  JB_SUPERBLOCK_V2,
  JB_UNKNOWN, /* magic ok, type unknown (including 6, FC_BLOCK) */
};

enum jcsum
{
  JCSUM_NONE, /* nothing checked: no csum v2/v3, or no UUID, or v1 */
  JCSUM_OK,
  JCSUM_BAD, /* v2/v3 block checksum mismatch, or a v1 commit block
              * without the crc32 type and size */
};

struct jtag
{
  uint64_t target; /* fs block number of the home location */
  uint32_t csum;   /* t_checksum: low 16 bits with v2, 32 with v3 */
  bool escaped;    /* the logged copy's first 4 bytes were zeroed */
  bool same_uuid;
  bool last;
};

struct jblock
{
  enum jblock_kind kind;
  uint32_t seq; /* h_sequence */
  /* Descriptor.  Set tags to an array of jbd2_max_tags() entries
   * before parsing (or to NULL: ntags is still counted).  Each tag's
   * logged copy follows the descriptor in the log, in tag order.
   */
  struct jtag *tags;
  size_t tags_cap;
  size_t ntags;
  bool unterminated; /* the list ended by running out of space, without
                      * LAST_TAG (e2fsprogs writes full descriptors so;
                      * the kernel always sets LAST_TAG) */
  /* Commit. */
  uint64_t commit_sec;
  uint32_t commit_nsec;
  uint8_t chksum_type, chksum_size;
  uint32_t chksum0; /* h_chksum[0] */
  /* Revoke: r_count bytes used (header included), nrevoke records of
   * rec_size (4 or 8) bytes at records (pointing into the parsed
   * buffer).
   */
  uint32_t r_count;
  size_t nrevoke;
  unsigned rec_size;
  const unsigned char *records;
  enum jcsum csum;
};

/* Parse one journal block of len bytes (len should be the block size).
 * Returns 0 with out->kind (JB_NONE if the block does not start with the
 * magic), or -EINVAL if it has the magic but is not understood:
 * truncated (len < blocksize), a descriptor whose tags do not fit (a
 * UUID running past the tag area, a tag after the first without
 * SAME_UUID — what a zero-filled area without LAST_TAG looks like),
 * a revoke r_count below the header or beyond the block (less the
 * checksum tail).  -ENOSPC if out->tags is set and the descriptor has
 * more than out->tags_cap tags.  Never reads past len.
 */
extern int jbd2_parse_block (const struct jfeatures *, const void *buf,
                             size_t len, struct jblock *out);

/* Revoke record i (i < nrevoke) of a parsed revoke block. */
extern uint64_t jbd2_revoke_record (const struct jblock *, size_t i);

/* Does the logged copy blk (one block, as in the log: escaped) match
 * the t_checksum of its tag in a descriptor of transaction seq?  The
 * kernel's jbd2_block_tag_csum_verify: crc32c over the big-endian
 * sequence, then the block, from the journal's seed; the low 16 bits
 * with csum v2.  True when nothing can be checked (no csum v2/v3, or
 * no UUID).
 */
extern bool jbd2_tag_csum_ok (const struct jfeatures *, const struct jtag *,
                              uint32_t seq, const void *blk);

/* Restore the magic jbd2 zeroed in an escaped logged copy (first 4
 * bytes := big-endian 0xC03B3998).  blk must have at least 4 bytes.
 */
extern void jbd2_unescape (void *blk);

#endif /* EXT4LAZY_JBD2_H */
