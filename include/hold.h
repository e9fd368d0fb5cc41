/* SPDX-License-Identifier: BSD-3-Clause */
/* hold.h --- the hold table: inode-table blocks acknowledged to the client
 * but not yet written to the backing store.
 *
 * One table serves every connection.  Entries are keyed by the device
 * offset of the block and kept on a list in order of their first hold,
 * which is the order deadlines and the memory cap consume them in.
 * Replacing the content of a held block keeps its first-hold time: the
 * deadline runs from the first hold of that block.
 *
 * Locking: the table has no lock of its own; the engine serialises all
 * calls with its hold lock (see engine-impl.h).
 */
#ifndef EXT4LAZY_HOLD_H
#define EXT4LAZY_HOLD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <unistd.h>

#include "classify.h"

/* What a hold is (journal holds exist only under policy=atime|lazy). */
enum hold_kind
{
  HOLD_INPLACE,   /* an inode-table block, time-only against the store */
  HOLD_JPENDING,  /* a journal block of a transaction not yet committed */
  HOLD_JABSORBED, /* a journal block of an absorbed transaction */
  HOLD_JCOMMIT,   /* the commit block of an absorbed transaction */
};

/* What is held, besides the bytes: given to hold_put. */
struct hold_info
{
  uint32_t fs; /* index of the filesystem instance */
  enum hold_kind kind;
  enum tclass cls; /* class of the held delta */
  uint32_t seq;    /* journal holds: the transaction's sequence */
};

/* Where an entry's content starts: a write-back of held blocks may go
 * to an O_DIRECT store (or a remote with a minimum block size) as it
 * is, without a bounce buffer.
 */
#define HOLD_ALIGN 4096

#define HOLD_KINDS (HOLD_JCOMMIT + 1)
#define HOLD_CLASSES (TCLASS_REAL + 1)

/* A caller changes an entry's kind and class only through hold_put or
 * hold_redescribe: the table counts its entries by both.
 */
struct hold
{
  uint64_t off; /* device offset of the block */
  uint32_t len; /* block size */
  uint32_t fs;  /* as in struct hold_info */
  enum hold_kind kind;
  enum tclass cls;
  uint32_t seq;
  /* Absorbed journal holds: their deadline was met by writing their
   * targets' newer in-place holds (writeback.c); they stay until dead,
   * needed first, or the cap.  Set by the engine, cleared by hold_put.
   */
  bool met;
  uint64_t first_ns; /* CLOCK_MONOTONIC time of the first hold */
  uint64_t gen;      /* the table's generation at the last hold_put:
                      * new content means a new generation */
  /* The write-back in flight numbered stored_by writes (or has
   * written) a copy of generation stored_gen (0: none) to the store,
   * begun when the store's error sequence was stored_seq, and waits for
   * its sync: the engine's (writeback.c).
   */
  uint64_t stored_gen, stored_by, stored_seq;
  struct hold *chain;     /* hash bucket chain */
  TAILQ_ENTRY (hold) age; /* the table's age list, oldest first */
  unsigned char *data;    /* len bytes, aligned to HOLD_ALIGN */
};

#define HOLD_HOT 4096 /* counters of hold_table.hot, a power of two */
#define HOLD_SPARE 64 /* dropped entries kept for reuse, at most */

struct hold_table
{
  struct hold **buckets;
  size_t nbuckets; /* a power of two */
  size_t count;
  size_t journal_count; /* entries of a kind other than HOLD_INPLACE */
  /* Entries of each kind and class: a caller learns without a walk
   * whether any hold of a kind and class exists (a FLUSH, writeback.c).
   */
  size_t by_kind[HOLD_KINDS][HOLD_CLASSES];
  /* Content bytes held: each entry's data is an allocation of its own
   * (aligned, so it costs at least len), beside its header.
   */
  uint64_t bytes;
  uint64_t gen; /* hold_put calls so far */
  /* hold_drop calls so far: changed under the table's lock, read
   * without it (engine_pread); raised before hot falls.
   */
  _Atomic uint64_t drops;
  TAILQ_HEAD (hold_age, hold) age; /* the age list */
  /* Dropped entries kept for the next hold_put of the same block size
   * (linked by chain), at most HOLD_SPARE: most holds are given and
   * dropped again and again (a FLUSH writes back every one), and an
   * aligned allocation and its two frees cost more than the rest of
   * hold_put.  Not counted in bytes; freed by hold_fini.
   */
  struct hold *spare;
  size_t nspare;
  /* How many entries cover each 4 KiB granule of the device, hashed
   * into HOLD_HOT counters: changed under the table's lock, read without
   * it (hold_maybe_in).
   */
  atomic_uint hot[HOLD_HOT];
};

extern int hold_init (struct hold_table *t);
extern void hold_fini (struct hold_table *t); /* frees every entry */

extern struct hold *hold_find (const struct hold_table *t, uint64_t off);

/* Hold len bytes of data for the block at off, described by what.  An
 * existing hold of that block of the same length takes the new content
 * and description and keeps its first-hold time.  Either way the entry
 * gets the table's next generation.
 * Returns the entry, or NULL with -ENOMEM in *err.
 */
extern struct hold *hold_put (struct hold_table *t, uint64_t off, uint32_t len,
                              const struct hold_info *what, const void *data,
                              uint64_t now_ns, int *err);

/* Give the entry h a new kind, class and sequence in place, keeping its
 * content, first-hold time and generation (a journal block whose
 * transaction is absorbed).  Only from one journal kind to another.
 */
extern void hold_redescribe (struct hold_table *t, struct hold *h,
                             enum hold_kind kind, enum tclass cls,
                             uint32_t seq);

/* Take the entry out of the table and free it. */
extern void hold_drop (struct hold_table *t, struct hold *h);

/* May an entry cover a byte of [off, off + len)?  False only if none
 * does at the moment of the call.  Needs no lock: a caller without the
 * table's lock learns only what was true at some moment during the call.
 */
extern bool hold_maybe_in (const struct hold_table *t, uint64_t off,
                           uint64_t len);

/* How many entries are of kind k and class c. */
static inline size_t
hold_count_of (const struct hold_table *t, enum hold_kind k, enum tclass c)
{
  return t->by_kind[k][c];
}

static inline struct hold *
hold_oldest (const struct hold_table *t)
{
  return TAILQ_FIRST (&t->age);
}

static inline struct hold *
hold_next (const struct hold_table *t, const struct hold *h)
{
  (void)t;
  return TAILQ_NEXT (h, age);
}

/* The calling thread's id, for the assertions that the table's lock is
 * held (engine-impl.h): gettid () is a system call each time, and they
 * ask several times per request, so it is kept per thread.  A forked
 * child, whose one thread has a new id, starts again from 0: an atfork
 * handler that hold_tid_setup registers (once, before any fork).
 */
extern _Thread_local pid_t hold_tid;
extern void hold_tid_setup (void);

static inline pid_t
hold_self_tid (void)
{
  if (hold_tid == 0)
    hold_tid = gettid ();
  return hold_tid;
}

#endif /* EXT4LAZY_HOLD_H */
