/* SPDX-License-Identifier: BSD-3-Clause */
/* reconnect.h --- what the NBD backend needs to reconnect to a remote
 * honestly, with no libnbd in it: whether a new connection offers what
 * the old one did, the backoff between attempts, and the replay log of
 * writes the remote acknowledged since its last successful flush.
 *
 * The replay log.  A remote with a volatile cache may lose, when it
 * dies, writes it acknowledged but had not yet flushed.  The backend
 * keeps a copy of each such write (and zero) in acknowledgement order,
 * up to a bound; a flush that succeeds drops what was acknowledged
 * before it was issued.  On a reconnect the backend writes the log to
 * the new connection before anything else.  Past the bound the log
 * stops copying and remembers that it lost something: the reconnect
 * then cannot restore every acknowledged write, and the backend fails
 * the next FLUSH instead (the error sequence, backend.h).
 *
 * Thread model: replay_log's own lock protects everything in it; the
 * callback of replay_run is called with it held (the backend replays
 * while no request runs).
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

/* Does now offer everything before did (the same size, at least the
 * same flags, no larger minimum block, no smaller maximum)?  Returns
 * NULL if so, else a reason, written to buf.
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
};

struct replay_entry
{
  enum replay_op op;
  uint64_t seq; /* acknowledgement order, from 1 */
  uint64_t off, len;
  uint32_t flags; /* REPLAY_ZERO: the zero's NBD flags */
  struct replay_entry *next;
  unsigned char data[]; /* REPLAY_WRITE: len bytes */
};

struct replay_log
{
  pthread_mutex_t lock; /* protects every member below */
  struct replay_entry *head, *tail;
  size_t count;
  uint64_t bytes, max_bytes; /* data copied, and the bound */
  uint64_t seq;              /* the seq of the latest acknowledgement */
  uint64_t lost_upto;        /* writes up to this seq were not copied */
  uint64_t lost_bytes;       /* how many bytes those were */
};

extern void replay_init (struct replay_log *log, uint64_t max_bytes);
extern void replay_destroy (struct replay_log *log);

/* An acknowledged write of len bytes at off (copied), or zero. */
extern void replay_note_write (struct replay_log *log, uint64_t off,
                               uint64_t len, const void *buf);
extern void replay_note_zero (struct replay_log *log, uint64_t off,
                              uint64_t len, uint32_t flags);

/* Before issuing a flush: the mark to give replay_flushed when it
 * succeeds.  It then covers every write acknowledged before.
 */
extern uint64_t replay_mark (struct replay_log *log);
extern void replay_flushed (struct replay_log *log, uint64_t mark);

/* Does the log lack an acknowledged write that no flush covered? */
extern bool replay_lost (struct replay_log *log);

/* Call fn for each entry, oldest first, while it returns 0.  Returns 0
 * or fn's result.  *lost (may be NULL) says whether the log lacks an
 * acknowledged write (replay_lost); the log is left as it is.
 */
typedef int (*replay_fn) (void *opaque, const struct replay_entry *e);
extern int replay_run (struct replay_log *log, replay_fn fn, void *opaque,
                       bool *lost);

/* After a reconnect reported the loss (the error sequence): forget it,
 * so that only one FLUSH fails for it.  Returns the bytes lost.
 */
extern uint64_t replay_forget_lost (struct replay_log *log);

#endif /* EXT4LAZY_RECONNECT_H */
