/* SPDX-License-Identifier: BSD-3-Clause */
/* refcache.h --- what the backing store holds for recently used
 * inode-table blocks, so that classifying a client write of one needs no
 * store read.
 *
 * A write to an inode-table block is classified against the block as the
 * store has it (the reference).  Reading it costs a store read per write
 * (a syscall, or a round trip to a remote store); the engine keeps here
 * the content of the blocks it last read from, or wrote to, the store,
 * and tells the cache whenever a block's store content changes or stops
 * being known.  The cache never reads or writes the store itself.
 *
 * Direct-mapped: a block goes in the slot of its number (offset / length)
 * modulo the slot count, replacing what was there.  A slot's buffer is
 * allocated the first time it is used, so memory follows the inode-table
 * traffic: at most slots x the largest block length put.
 *
 * Locking: none; the engine calls it under its hold lock.
 */
#ifndef EXT4LAZY_REFCACHE_H
#define EXT4LAZY_REFCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct refcache;

/* A cache of slots slots (a power of two).  Returns 0 or -errno. */
extern int refcache_new (size_t slots, struct refcache **out);
extern void refcache_free (struct refcache *c);

/* If the store content of the block [off, off + len) is known, copy it
 * to buf and return true.
 */
extern bool refcache_get (struct refcache *c, uint64_t off, uint32_t len,
                          void *buf);

/* The store now holds data in the block [off, off + len).  (Without
 * memory for it the block is simply not cached.)
 */
extern void refcache_put (struct refcache *c, uint64_t off, uint32_t len,
                          const void *data);

/* The store content of [off, off + len) is no longer known. */
extern void refcache_forget (struct refcache *c, uint64_t off, uint64_t len);

/* Nothing is known any more. */
extern void refcache_clear (struct refcache *c);

/* Lookups that found the block, and that did not. */
extern void refcache_counts (const struct refcache *c, uint64_t *hits,
                             uint64_t *misses);

#endif /* EXT4LAZY_REFCACHE_H */
