/* journal.h --- the jbd2 log follower: parses journal blocks and
 * assembles transactions from the client writes that land in the
 * journal area, in arrival order.
 *
 * Two layers:
 *
 * - pure functions (journal_features_*, journal_parse_block,
 *   journal_unescape, ...) that decode one superblock or one journal
 *   block.  They never read past the length they are given and check
 *   every count and offset: a block that carries the jbd2 magic but
 *   does not make sense gives -EINVAL ("real, not understood").
 *
 * - a small state object (struct jfollow) fed every journal block
 *   write.  It tracks what each journal position holds now and emits
 *   an event when a transaction commits, is abandoned, or when
 *   something does not fit the kernel's way of writing the log.
 *
 * The module only parses and tracks: it does no I/O and decides no
 * policy.  It has no lock; the engine serialises every call on one
 * follower.  docs/journal.md describes what is understood.
 */
#ifndef EXT4LAZY_JOURNAL_H
#define EXT4LAZY_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"

#define JOURNAL_MAGIC 0xC03B3998u

/* Tag flags (descriptor blocks). */
#define JOURNAL_FLAG_ESCAPE 0x1
#define JOURNAL_FLAG_SAME_UUID 0x2
#define JOURNAL_FLAG_DELETED 0x4
#define JOURNAL_FLAG_LAST_TAG 0x8

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
  /* The journal UUID, when known (journal_features_from_raw): with
   * csum v2/v3 it seeds the block checksums, which are then verified
   * for descriptor, revoke and commit blocks.
   */
  bool has_uuid;
  uint8_t uuid[16];
  uint32_t csum_seed; /* crc32c_raw (~0, uuid), valid with has_uuid */
};

/* From the superblock layout.h keeps.  Returns -EINVAL if it is not a
 * superblock this module can follow: block size not a power of two in
 * 1024..65536, s_first or s_maxlen impossible, csum v2 and v3 together
 * or with v1, an incompat feature bit it does not know, or a
 * fast-commit area that leaves no log.  jsb_info has no UUID, so
 * checksums are not verified (has_uuid false).
 *
 * Fast commit: mke2fs does not set the jbd2 FAST_COMMIT feature (the
 * kernel sets it at mount and clears it at unmount) and jsb_info then
 * reports num_fc_blks = 0.  While the filesystem is mounted with the
 * ext4 COMPAT_FAST_COMMIT feature (0x400), the log wraps before the
 * fast-commit area even if the superblock lacks the bit: call
 * journal_features_set_fast_commit after this in that case.
 */
extern int journal_features_from_jsb (const struct jsb_info *,
                                      struct jfeatures *out);

/* From the raw on-disk jbd2 superblock (len >= 1024, big-endian).
 * fs_fast_commit: the ext4 superblock has COMPAT_FAST_COMMIT, which
 * turns the fast-commit area on even when the jbd2 superblock does not
 * have FAST_COMMIT (s_num_fc_blks, or 256 when 0, blocks).  Fills the
 * UUID and checksum seed.  -EINVAL as journal_features_from_jsb, or if
 * the block is not a v2 jbd2 superblock.
 */
extern int journal_features_from_raw (const void *sb, size_t len,
                                      bool fs_fast_commit,
                                      struct jfeatures *out);

/* Turn the fast-commit area on with num_fc_blks blocks (0: the default
 * 256).  -EINVAL (f unchanged) if that leaves no log.
 */
extern int journal_features_set_fast_commit (struct jfeatures *f,
                                             uint32_t num_fc_blks);

/* Size of one descriptor tag (the kernel's journal_tag_bytes): 16 with
 * csum v3; otherwise 12, +2 with csum v2, -4 without 64bit (8, 10, 12
 * or 14).
 */
extern size_t journal_tag_bytes (const struct jfeatures *);
/* The most tags a descriptor block can hold (size a tag array with it). */
extern size_t journal_max_tags (const struct jfeatures *);
/* The exclusive end of the circular log: maxlen, or maxlen - num_fc_blks
 * with fast commit (the kernel's j_last).  The log is [first, end).
 */
extern uint32_t journal_log_end (const struct jfeatures *);

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
  /* Descriptor.  Set tags to an array of journal_max_tags() entries
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
extern int journal_parse_block (const struct jfeatures *, const void *buf,
                                size_t len, struct jblock *out);

/* Revoke record i (i < nrevoke) of a parsed revoke block. */
extern uint64_t journal_revoke_record (const struct jblock *, size_t i);

/* Restore the magic jbd2 zeroed in an escaped logged copy (first 4
 * bytes := big-endian 0xC03B3998).  blk must have at least 4 bytes.
 */
extern void journal_unescape (void *blk);

/* ---- the follower ----------------------------------------------------- */

struct jfollow;

/* Most events one jfollow_write or jfollow_reset call produces: pass an
 * array at least this long.
 */
#define JFOLLOW_MAX_EVENTS 6

enum jevent_type
{
  JE_NONE,
  /* A commit block with the transaction's sequence arrived and every
   * block between the transaction's start and its commit has arrived.
   * With has_unknown, the transaction was not understood (blocks
   * missing at the commit, blocks that did not fit, a checksum failure,
   * a confusion in its window): treat it as real.
   */
  JE_TX_COMMITTED,
  /* The transaction will not commit as far as the follower can tell: a
   * newer sequence started without its commit, or the superblock reset
   * the log.  Its blocks are still part of the log the kernel wrote.
   */
  JE_TX_ABORTED,
  /* A write that does not fit the kernel's way of writing the log
   * (lblk says which).  The open transaction, if any, is flagged
   * has_unknown.
   */
  JE_CONFUSED,
};

struct jevent
{
  enum jevent_type type;
  uint32_t seq;
  uint64_t lblk; /* JE_CONFUSED: the journal block that did not fit */
  /* JE_TX_COMMITTED / JE_TX_ABORTED.  For a complete commit (no
   * has_unknown from missing blocks) these are every block from the
   * transaction's start to its commit; otherwise only the blocks that
   * arrived and are still the transaction's, ordered from where it was
   * expected to start.
   */
  size_t nblocks;
  uint64_t *targets; /* fs blocks logged, in log order */
  uint64_t *lblks;   /* journal block of each logged copy */
  size_t npos;
  uint64_t *pos; /* every journal block of the transaction (revoke,
                  * descriptor, data, commit), in log order */
  bool has_revoke, has_unknown;
  /* Journal blocks the transaction occupies, [first_lblk, end_lblk)
   * in log order: end_lblk < first_lblk when it wraps; end_lblk is
   * the block after the commit.  Best effort without a complete
   * commit.
   */
  uint64_t first_lblk, end_lblk;
  uint64_t commit_sec; /* JE_TX_COMMITTED: from the commit block */
  uint32_t commit_nsec;
};

/* journal_blocks: blocks of the journal area the engine maps (the
 * journal inode size); f->maxlen must not exceed it.  The first
 * transaction is expected at f->start, or at f->first when the log is
 * clean (start 0); a transaction that does not start where the previous
 * one ended (or there) is not understood.  -EINVAL, -ENOMEM.
 */
extern int jfollow_new (const struct jfeatures *f, uint64_t journal_blocks,
                        struct jfollow **out);
extern void jfollow_free (struct jfollow *);

/* Feed one journal block write: lblk is the journal logical block
 * number, blk one journal block (len bytes, normally the block size).
 * Returns the number of events written to ev[] (0..JFOLLOW_MAX_EVENTS),
 * or -EINVAL (lblk beyond the journal, nev < JFOLLOW_MAX_EVENTS, len
 * 0), or -ENOMEM: the follower could not record the write and has
 * forgotten everything as jfollow_reset does, and the events of this
 * call are lost: treat every journal block held so far as real.
 * Event memory (targets, lblks, pos) belongs to the follower until
 * its next call.  Writes to the
 * superblock area (lblk < first), to the fast-commit area and beyond
 * maxlen produce no events: see jfollow_lookup for what they are.
 */
extern int jfollow_write (struct jfollow *, uint64_t lblk, const void *blk,
                          size_t len, struct jevent *ev, size_t nev);

enum jslot_kind
{
  JS_UNSEEN,      /* in the log, not written since the follower started
                   * (or reset): older content */
  JS_OUTSIDE,     /* at or beyond maxlen: not part of the journal */
  JS_SUPERBLOCK,  /* below first: the journal superblock */
  JS_FAST_COMMIT, /* in the fast-commit area: never part of a
                   * transaction, pass it through */
  JS_PENDING,     /* written, no descriptor claims it yet */
  JS_STALE,       /* written, and the transaction it could belong to
                   * ended without claiming it */
  JS_DESCRIPTOR,
  JS_DATA, /* a logged copy of fs block target */
  JS_REVOKE,
  JS_COMMIT,
  JS_UNKNOWN, /* magic, but not understood or out of place */
};

enum jtx_state
{
  JTX_OPEN,
  JTX_COMMITTED,
  JTX_ABORTED,
};

struct jslot
{
  enum jslot_kind kind;
  uint32_t seq;         /* DESCRIPTOR, DATA, REVOKE, COMMIT */
  uint64_t target;      /* DATA */
  bool written;         /* DATA: the logged copy has arrived (false:
                         * described, the position still holds older
                         * content) */
  bool escaped;         /* DATA: restore the magic to compare content */
  enum jtx_state state; /* of transaction seq */
};

/* What the follower thinks journal block lblk holds now (after the
 * jfollow_write of that block, what that write was understood as).
 * -EINVAL if lblk is beyond the journal.
 */
extern int jfollow_lookup (const struct jfollow *, uint64_t lblk,
                           struct jslot *out);

/* The journal superblock was written.  If the log format (block size,
 * first, maxlen, fast-commit area, tag and checksum features) is
 * unchanged and f->start != 0 (a tail update), the follower keeps its
 * state and only records sequence and start.  Otherwise (features
 * changed at mount, s_start = 0 after unmount or flush) it forgets
 * everything: an open transaction is reported JE_TX_ABORTED (or
 * JE_TX_COMMITTED with has_unknown if its commit had arrived), and
 * every log position becomes JS_UNSEEN.  Returns the number of events,
 * or -EINVAL (bad features or nev, nothing changed), -ENOMEM.
 */
extern int jfollow_reset (struct jfollow *, const struct jfeatures *f,
                          struct jevent *ev, size_t nev);

#endif /* EXT4LAZY_JOURNAL_H */
