/* SPDX-License-Identifier: BSD-3-Clause */
/* journal.h --- the jbd2 log follower: assembles transactions from the
 * client writes that land in the journal area, in arrival order.
 *
 * A small state object (struct jfollow) is fed every journal block
 * write.  It parses each block with jbd2.h (the on-disk format), tracks
 * what each journal position holds now and emits an event when a
 * transaction commits, is abandoned, or when something does not fit the
 * kernel's way of writing the log.
 *
 * The module only tracks: it does no I/O and decides no policy.  It has
 * no lock; the engine serialises every call on one follower.
 * docs/journal.md describes what is understood.
 */
#ifndef EXT4LAZY_JOURNAL_H
#define EXT4LAZY_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jbd2.h"

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
