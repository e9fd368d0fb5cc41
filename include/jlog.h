/* jlog.h --- what the engine knows of one filesystem's journal: the
 * follower, and the transactions whose logged copies recovery could
 * replay.
 *
 * A transaction may be absorbed only if its loss leaves nothing but
 * timestamps different, whatever recovery replays.  Recovery produces,
 * for each block, either the durable in-place block or a logged copy
 * from a durable transaction still in the live log.  jlog keeps those
 * transactions ("live": committed, durable, not yet behind the tail the
 * durable journal superblock records) so that a logged copy can be
 * compared with every version recovery could produce.  It also keeps
 * the absorbed transactions, which become live when they are written
 * back.
 *
 * If the engine has not followed the log since it was last empty
 * (s_start = 0), older transactions it never saw may be live: then
 * jlog_known is false and nothing is absorbed.
 *
 * No lock: the engine calls it under its hold lock.
 */
#ifndef EXT4LAZY_JLOG_H
#define EXT4LAZY_JLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "journal.h"
#include "layout.h"

struct jlog_tx
{
  uint32_t seq;
  size_t n;
  uint64_t *targets; /* fs blocks */
  uint64_t *lblks;   /* journal blocks of the logged copies */
  bool *escaped;
};

struct jlog
{
  struct jfeatures feat;
  struct jfollow *follow;
  bool known;   /* the live log is fully known */
  bool enabled; /* absorption possible for this journal at all */
  struct jlog_tx *live;
  size_t nlive, live_cap;
  struct jlog_tx *absorbed;
  size_t nabsorbed, absorbed_cap;
  /* The durable journal superblock's tail: transactions with a lower
   * sequence are behind it (tail_set once one was seen durable).  A
   * superblock written without FUA waits in pend_* for a flush.
   */
  bool tail_set, pend;
  uint32_t tail_seq, pend_seq, pend_start;
};

/* A jlog for fs's internal journal.  *out is NULL (no error) when the
 * journal cannot be followed: external journal, no valid jbd2
 * superblock, journal block size different from the fs block size,
 * async_commit.
 */
extern int jlog_new (const struct ext4_fs *fs, struct jlog **out);
extern void jlog_free (struct jlog *);

/* Record a committed transaction from a follower event (copies its
 * lists; escaped flags from jfollow_lookup) as live or absorbed.
 */
extern int jlog_add (struct jlog *, const struct jevent *ev, bool absorbed);
/* Written back: every absorbed transaction is now durable and live. */
extern int jlog_absorbed_to_live (struct jlog *);
/* The durable journal superblock now says: tail sequence seq, s_start
 * start (0: the log is empty).  Live and absorbed transactions behind
 * it are forgotten.
 */
extern void jlog_tail (struct jlog *, uint32_t sequence, uint32_t start);
/* The client wrote the journal superblock: with durable (a FUA write),
 * jlog_tail at once; else it waits for jlog_flushed.
 */
extern void jlog_tail_written (struct jlog *, uint32_t sequence, uint32_t start,
                               bool durable);
/* A flush completed: a superblock written before it is durable.  True
 * if that moved the tail.
 */
extern bool jlog_flushed (struct jlog *);
/* Is transaction seq behind the durable tail (recovery never replays
 * it, whatever the store holds of it)?
 */
extern bool jlog_behind_tail (const struct jlog *, uint32_t seq);
/* Forget the live log (the follower was reset and could not say). */
extern void jlog_forget (struct jlog *);

/* Call fn for every live logged copy of fs block target, newest last:
 * its journal block and whether it was escaped.  Stops at fn != 0.
 */
typedef int (*jlog_copy_fn) (void *opaque, uint64_t lblk, bool escaped);
extern int jlog_live_copies (const struct jlog *, uint64_t target,
                             jlog_copy_fn fn, void *opaque);

#endif /* EXT4LAZY_JLOG_H */
