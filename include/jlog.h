/* SPDX-License-Identifier: BSD-3-Clause */
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
 * The live log is known when the engine started on an empty log
 * (s_start = 0), or read the log the store holds from s_start as
 * recovery would (jlog_new with a read function), or has since seen
 * the log empty.  Otherwise older transactions it never saw may be
 * live: then jlog_known is false and nothing is absorbed.
 *
 * It owns the journal's follower (journal.h): the engine feeds every
 * journal block write through jlog_write and asks what a position
 * holds through jlog_lookup.
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

struct jlog;

/* A jlog for fs's internal journal.  *out is NULL (no error) when the
 * journal cannot be followed: external journal, no valid jbd2
 * superblock (or a csum v2/v3 one with a bad checksum), journal block
 * size different from the fs block size, async_commit.  The features
 * come from fs->jsb (UUID included) and the ext4 fast_commit feature,
 * as jlog_superblock makes them from the raw block, so a tail update
 * the client writes later keeps the follower's state.
 *
 * A log that needs recovery (s_start != 0) is read through read
 * (opaque passed on; journal blocks at layout_journal_off) from s_start
 * as jbd2 recovery's scan pass reads it: every committed transaction up
 * to where recovery would stop is fed to the follower in log order and
 * recorded live, an uncommitted last one is not fed, and the log is
 * known.  Doubt (a read error, a block that does not parse, a v2/v3
 * checksum of a block or logged copy that does not match, more blocks
 * than the log holds, a transaction the follower does not understand)
 * leaves it not known, with a notice, and the follower as if nothing
 * had been read.  read NULL: not known either.  -ENOMEM.
 */
extern int jlog_new (const struct ext4_fs *fs, layout_read_fn read,
                     void *opaque, struct jlog **out);
extern void jlog_free (struct jlog *);

/* Is the live log fully known (absorption allowed)? */
extern bool jlog_known (const struct jlog *);

/* Feed one journal block write to the follower (jfollow_write): the
 * events it produced, or -errno.
 */
extern int jlog_write (struct jlog *, uint64_t lblk, const void *blk,
                       size_t len, struct jevent *ev, size_t nev);
/* What journal block lblk holds now (jfollow_lookup). */
extern int jlog_lookup (const struct jlog *, uint64_t lblk, struct jslot *out);
/* Does journal block lblk belong to a transaction whose commit has not
 * come: a block no descriptor claims yet, or a descriptor, logged copy
 * or revoke of an open transaction?
 */
extern bool jlog_in_open_tx (const struct jlog *, uint64_t lblk);
/* Is journal block lblk in the journal superblock's area? */
extern bool jlog_is_superblock (const struct jlog *, uint64_t lblk);

/* The client wrote the journal superblock sb (len bytes); fs_fast_commit
 * as jbd2_features_from_raw.  If it can be followed, the follower
 * starts again from it (jfollow_reset: the events it produced are
 * returned) and *sequence and *start are what it records (for
 * jlog_tail_written once it is in the store).  -EINVAL if it cannot be
 * followed (not a superblock this module understands, or async_commit),
 * -ENOMEM: the caller must treat the log as lost (jlog_forget).
 */
extern int jlog_superblock (struct jlog *, const void *sb, size_t len,
                            bool fs_fast_commit, struct jevent *ev, size_t nev,
                            uint32_t *sequence, uint32_t *start);

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
