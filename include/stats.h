/* SPDX-License-Identifier: BSD-3-Clause */
/* stats.h --- the engine's counters, what it holds, and how both are
 * printed.
 *
 * Counters are kept per filesystem instance (plus one for the regions
 * that are not ext4) and read as a snapshot.  The snapshot is printed as
 * text for people, JSON for programs and Prometheus exposition text.
 * The held blocks are listed one by one (engine_holds) as text or JSON.
 */
#ifndef EXT4LAZY_STATS_H
#define EXT4LAZY_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "classify.h"
#include "hold.h"

/* Why held blocks were written back. */
enum wb_trigger
{
  WB_FLUSH,      /* NBD FLUSH */
  WB_FUA,        /* a FUA write to a held block */
  WB_REAL,       /* a real change to a held block */
  WB_DEADLINE,   /* max-age passed */
  WB_EXPLICIT,   /* control socket / ext4lazyctl flush */
  WB_DISCONNECT, /* the last client left */
  WB_SHUTDOWN,   /* nbdkit shut down or unloaded the plugin */
  WB_MEMORY,     /* max-held exceeded */
  WB_LAYOUT,     /* the filesystem layout changed under the holds */
  WB_JOURNAL,    /* a real journal write had to follow the holds */
  WB_NTRIGGERS
};

extern const char *const wb_trigger_names[WB_NTRIGGERS];

/* What made the engine write to the store or flush it: a write-back
 * trigger above, or a client request passed through.
 */
enum st_trigger
{
  ST_PASS = WB_NTRIGGERS, /* client writes, zeroes, trims passed through */
  ST_JPASS,               /* client journal writes passed through */
  ST_NTRIGGERS
};

extern const char *const st_trigger_names[ST_NTRIGGERS];

/* Only uint64_t members: the engine reads the struct word by word with
 * atomic loads (engine-impl.h, stats_load).
 */
struct fs_stats
{
  uint64_t client_writes;   /* write requests that touched this instance */
  uint64_t itable_writes;   /* inode-table block writes seen */
  uint64_t real_writes;     /* of which classified real */
  uint64_t held;            /* of which held (time-only) */
  uint64_t unchanged;       /* of which identical to the store: elided */
  uint64_t superseded;      /* holds replaced in memory: writes saved */
  uint64_t dropped;         /* holds dropped by WRITE_ZEROES/TRIM */
  uint64_t journal_writes;  /* journal block writes seen (atime, lazy) */
  uint64_t journal_held;    /* of which held */
  uint64_t tx_absorbed;     /* journal transactions absorbed */
  uint64_t tx_real;         /* journal transactions written (real) */
  uint64_t discarded;       /* dead journal holds discarded */
  uint64_t deadline_met;    /* absorbed journal holds whose deadline was met
                             * by writing their targets in place */
  uint64_t deadline_copied; /* of those targets, written from the newest
                             * absorbed logged copy (no newer one known) */
  uint64_t writeback[WB_NTRIGGERS]; /* blocks written back, by trigger */
  uint64_t writeback_batches;
};

/* Blocks the store did not have to write: holds superseded in memory,
 * inode-table writes identical to the store, dead journal holds
 * discarded.  Holds still held count once they are superseded or
 * discarded, never before.
 */
static inline uint64_t
stats_saved_blocks (const struct fs_stats *c)
{
  return c->superseded + c->unchanged + c->discarded;
}

struct fs_snapshot
{
  char name[64]; /* "ext4@OFFSET" or "other" */
  uint64_t start, size;
  uint32_t block_size;
  int journal; /* has an internal journal */
  struct fs_stats c;
  uint64_t held_blocks, held_bytes;
  double oldest_age_s; /* 0 when nothing is held (met holds left out) */
};

/* The instances are the filesystems of the layout, then "other" only
 * when no filesystem was found or something outside every filesystem
 * was written or held.
 */
struct stats_snapshot
{
  const char *policy;
  uint64_t client_writes, client_reads, client_flushes;
  /* Client writes to partition tables, superblocks or group
   * descriptors, each checked against the layout; and the full re-reads
   * of the layout that found a change in what it defines.
   */
  uint64_t layout_checks, layout_rereads;
  uint64_t max_held, max_age_s;
  size_t n;
  struct fs_snapshot *fs;
  /* Requests the store failed, write-backs that failed, and when the
   * latest of either did (seconds since the epoch, 0: never).
   */
  uint64_t store_errors, writeback_errors, last_error_time;
  /* Drains (gate.h) that failed: the server served on. */
  uint64_t drain_failures;
  /* NULL, or why the server is fenced (engine_fence): it serves
   * nothing and never writes to the store again.
   */
  const char *fenced;
  /* Store requests by trigger (enum st_trigger): writes, zeroes and
   * trims (a run of adjacent writes of one batch counts once), and
   * flushes; and client or write-back flushes skipped because the store
   * had nothing to flush.
   */
  uint64_t store_writes[ST_NTRIGGERS], store_flushes[ST_NTRIGGERS];
  uint64_t store_flushes_skipped;
  /* 0: the hold figures (held blocks, bytes, oldest age) are current.
   * Else the hold table was busy (a write-back under its lock waits on
   * the store) and they are as of this many seconds ago; -1: unknown.
   */
  double holds_stale_s;
};

/* Besides the counters, each instance's saved bytes:
 * stats_saved_blocks times its block size.
 */
extern void stats_print_text (FILE *f, const struct stats_snapshot *s);
extern void stats_print_json (FILE *f, const struct stats_snapshot *s);
extern void stats_print_prometheus (FILE *f, const struct stats_snapshot *s);

/* ---- what is held ---------------------------------------------------- */

/* An inode record of an in-place hold that differs from the store's. */
struct held_inode
{
  uint32_t ino;    /* 0 if the layout does not place the record */
  unsigned fields; /* which time fields differ: enum tfield bits */
};

/* One held block as engine_holds shows it. */
struct held_block
{
  char fs[64];  /* the instance, named as in struct fs_snapshot */
  uint64_t off; /* device offset */
  uint32_t len; /* bytes (the block size) */
  enum hold_kind kind;
  enum tclass cls; /* of the held delta */
  uint32_t seq;    /* journal holds: the transaction's sequence */
  bool met;        /* absorbed journal holds: deadline met in place */
  double age_s;    /* since the block's first hold */
  /* Until first hold + max-age, when the deadline thread writes it
   * back (a little below 0 while that is under way), and that moment
   * on the server's wall clock.
   */
  double deadline_in_s;
  int64_t deadline_unix;
  /* In-place holds: the records that differ from the store's block,
   * read without the hold lock; store_err is the -errno of that read
   * (then n_inodes is 0), -EAGAIN when it was not made because a
   * write-back is on its way or just failed (the store may not answer).
   */
  int store_err;
  size_t n_inodes;
  const struct held_inode *inodes;
};

/* "inplace", "journal-pending", "journal-absorbed", "journal-commit". */
extern const char *stats_hold_kind_name (enum hold_kind k);

/* Print a list of held blocks: begin, then holds_print_one for each
 * (an engine_hold_fn with the printer as opaque), then end.  Text is a
 * table with a header and a summary line; JSON is one object,
 * {"holds":[...],"held_blocks":N,"held_bytes":N} (docs/ext4lazyctl.pod).
 */
struct holds_printer
{
  FILE *f;
  bool json;
  uint64_t blocks, bytes;
};

extern void holds_print_begin (struct holds_printer *p, FILE *f, bool json);
extern int holds_print_one (void *printer, const struct held_block *hb);
extern void holds_print_end (struct holds_printer *p);

#endif /* EXT4LAZY_STATS_H */
