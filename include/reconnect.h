/* SPDX-License-Identifier: BSD-3-Clause */
/* reconnect.h --- what the NBD backend needs to reconnect to a remote
 * honestly, with no libnbd in it: whether a new connection offers what
 * the old one did, the backoff between attempts, and the replay log of
 * writes the remote acknowledged since its last successful flush.
 *
 * The replay log.  A remote with a volatile cache may lose, when it
 * dies, writes it acknowledged but had not yet flushed.  The backend
 * notes every write, zero and trim the remote acknowledged, and on a
 * reconnect sends the log again, in order (below), before anything
 * else, then a flush.  The rule: after a reconnect every
 * range of the remote holds the newest content acknowledged for it, or
 * the next FLUSH fails.  So:
 *
 *  - a write, zero or trim without FUA is logged (a trim too: what the
 *    remote returned after it is what the engine's caches may hold, and
 *    the remote gives it again when the same commands are replayed);
 *  - a FUA one (or one followed by a flush) is durable: it is logged
 *    only when it overlaps an older entry, so that the replay of that
 *    entry is followed by it again, never left on top;
 *  - a flush that succeeds drops what was acknowledged before it was
 *    issued;
 *  - past the bound, or when a replayed command is refused, the log
 *    remembers the loss, and the backend fails the next FLUSH once
 *    (the error sequence, backend.h).
 *
 * Memory: one buffer of max_bytes, taken at the first note, used as a
 * ring: an entry (a header and its data) is reserved at the head under
 * the lock and copied into without it, by the backend while the write
 * is on its way (the entry is pending until the acknowledgement gives it
 * its place in the order); a flush drops entries without freeing
 * anything, their room comes back from the tail, and when the log is
 * empty the ring starts again at its start, so only what is outstanding
 * between two flushes is ever touched.  The ring is in the order of the
 * reservations: a write issued after another was acknowledged is
 * reserved after it, so writes the client ordered replay in order.
 *
 * Thread model: replay_log's own lock protects everything in it, except
 * the data of a pending entry (its writer's alone until replay_acked or
 * replay_cancel); the callback of replay_run is called with the lock
 * held (the backend replays while no request runs, so no entry is
 * pending then).
 */
#ifndef EXT4LAZY_RECONNECT_H
#define EXT4LAZY_RECONNECT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a connection to the remote offers. */
struct remote_caps
{
  uint64_t size;
  bool writable, can_flush, can_fua, can_zero, can_fast_zero, can_trim,
      can_cache, can_multi_conn, can_extents;
  uint64_t min_block; /* 1 when none is required */
  uint64_t max_block; /* 0 when unknown */
};

/* Does now offer everything before did (at least the same size: a
 * grown remote is served at the size it had, at least the same flags,
 * no larger minimum block, no smaller maximum)?  Returns NULL if so,
 * else a reason, written to buf.
 */
extern const char *reconnect_caps_check (const struct remote_caps *before,
                                         const struct remote_caps *now,
                                         char *buf, size_t size);

/* Milliseconds to wait before reconnect attempt number attempt (from
 * 0): 100 ms, doubling, at most 5 s.
 */
extern unsigned reconnect_backoff_ms (unsigned attempt);

enum replay_op
{
  REPLAY_WRITE,
  REPLAY_ZERO,
  REPLAY_TRIM,
};

/* Acknowledged, and durable already (FUA, or a flush after it): logged
 * only over an older entry (replay_note).
 */
#define REPLAY_DURABLE 0x1
/* REPLAY_ZERO: the zero may deallocate (NBD: no NO_HOLE). */
#define REPLAY_MAY_TRIM 0x2

/* One entry of the log, in its ring. */
struct replay_entry
{
  uint64_t seq; /* acknowledgement order, from 1 */
  uint64_t off, len;
  uint32_t size;        /* bytes in the ring, this header included */
  uint8_t op;           /* enum replay_op, or a pad at the ring's end */
  uint8_t flags;        /* REPLAY_MAY_TRIM */
  bool pending;         /* reserved, not yet acknowledged (replay_acked) */
  bool dead;            /* dropped, its space not yet reclaimed */
  unsigned char data[]; /* REPLAY_WRITE: len bytes */
};

struct replay_log
{
  pthread_mutex_t lock; /* protects every member below */
  unsigned char *ring;  /* max_bytes, taken at the first note */
  uint64_t max_bytes;   /* the bound: the ring's size */
  uint64_t head, tail;  /* where the next entry goes; the oldest */
  uint64_t used;        /* ring bytes from tail to head, pads included */
  size_t count;         /* live entries */
  unsigned pending;     /* entries reserved, not yet acknowledged */
  uint64_t bytes;       /* data bytes of the live entries */
  uint64_t lo, hi;      /* every live entry is within [lo, hi) */
  uint64_t seq;         /* the seq of the latest acknowledgement */
  uint64_t lost_upto;   /* writes up to this seq were not kept */
  uint64_t lost_bytes;  /* how many bytes those were */
};

extern void replay_init (struct replay_log *log, uint64_t max_bytes);
extern void replay_destroy (struct replay_log *log);

/* An entry for a write of len bytes at off, reserved before its
 * acknowledgement so that its data can be copied while the remote
 * works (into e->data, the caller's alone while pending), or NULL (no
 * room, or something is lost).  replay_acked or replay_cancel ends it.
 * Pending, it is not replayed, and holds its room past any flush.
 */
extern struct replay_entry *replay_reserve (struct replay_log *log,
                                            enum replay_op op, uint64_t off,
                                            uint64_t len);
/* The remote acknowledged op over [off, off + len) with flags
 * (REPLAY_DURABLE, REPLAY_MAY_TRIM); e, if not NULL, is its reserved
 * entry, data copied.  Without an entry where one is needed (the
 * write not durable, or durable over an older entry), the log loses.
 */
extern void replay_acked (struct replay_log *log, struct replay_entry *e,
                          enum replay_op op, uint64_t off, uint64_t len,
                          unsigned flags);
/* The write of the pending entry e failed: e is dropped. */
extern void replay_cancel (struct replay_log *log, struct replay_entry *e);

/* The acknowledgement of a write (data copied from buf once it must be
 * kept), or of a zero or trim (nothing to copy).
 */
extern void replay_note_write (struct replay_log *log, uint64_t off,
                               uint64_t len, const void *buf, unsigned flags);
extern void replay_note_other (struct replay_log *log, enum replay_op op,
                               uint64_t off, uint64_t len, unsigned flags);

/* Before issuing a flush: the mark to give replay_flushed when it
 * succeeds.  It then covers every write acknowledged before.
 */
extern uint64_t replay_mark (struct replay_log *log);
extern void replay_flushed (struct replay_log *log, uint64_t mark);

/* Does the log lack an acknowledged write that no flush covered? */
extern bool replay_lost (struct replay_log *log);

/* One command of the replay: an entry, split into pieces of at most
 * max_write (writes) or max_other (zeros, trims) bytes.  A zero
 * carries only REPLAY_MAY_TRIM: never FUA nor FAST_ZERO.
 */
struct replay_cmd
{
  enum replay_op op;
  uint64_t off, len;
  const unsigned char *data; /* REPLAY_WRITE */
  unsigned flags;            /* REPLAY_MAY_TRIM */
};

/* What fn returns when the connection is lost: the replay stops. */
#define REPLAY_GONE 1

/* Call fn for each command of the log, oldest first.  fn returns 0,
 * REPLAY_GONE (stop: the connection is lost, the log is kept for the
 * next one) or -errno (the remote refused it: the replay goes on, and
 * the loss is counted).  Returns -ENOTCONN when fn said REPLAY_GONE,
 * else 0 with *lost (may be NULL) saying whether the remote now lacks
 * an acknowledged write: the log lacked one (replay_lost), or a command
 * was refused; the log is left as it is.
 */
typedef int (*replay_fn) (void *opaque, const struct replay_cmd *c);
extern int replay_run (struct replay_log *log, uint64_t max_write,
                       uint64_t max_other, replay_fn fn, void *opaque,
                       bool *lost);

/* After a reconnect reported the loss (the error sequence): forget it,
 * so that only one FLUSH fails for it.  Returns the bytes lost.
 */
extern uint64_t replay_forget_lost (struct replay_log *log);

#endif /* EXT4LAZY_RECONNECT_H */
