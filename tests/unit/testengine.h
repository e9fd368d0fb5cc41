/* SPDX-License-Identifier: BSD-3-Clause */
/* testengine.h --- what the engine's tests share (testengine.c). */
#ifndef EXT4LAZY_TESTENGINE_H
#define EXT4LAZY_TESTENGINE_H

#include <stdint.h>

#include "engine.h"
#include "stats.h"

extern char dir[64];  /* the test's scratch directory */
extern char img[96];  /* the served image, in dir */
extern char copy[96]; /* debugfs scratch */
extern char loop[64]; /* a loop device over img, detached at teardown */
/* The store's fault injection for open_engine (NULL: none). */
extern backend_fault_fn fault_hook;

/* Run a shell command; the test fails if it does. */
extern void sh_ok (const char *fmt, ...)
    __attribute__ ((format (printf, 1, 2)));
/* Skip the test without mkfs.ext4 and debugfs. */
extern void need_tools (void);
/* img: a 32 MiB ext4 with 4 KiB blocks, no journal, 40 small files
 * /f1../f40 (their contents in dir/root).
 */
extern void setup (void);
extern void teardown (void);
/* Device offset of the inode-table block holding /name's inode. */
extern uint64_t inode_block (const char *name);
/* Inode number of /name. */
extern unsigned inode_number (const char *name);
/* The 4 KiB block at off after `debugfs -w -R field_cmd` on a copy of
 * img.
 */
extern void changed_block (const char *field_cmd, uint64_t off, char *out);
/* The 4 KiB block at off of img, read behind the engine's back. */
extern void store_block (uint64_t off, char *out);
/* An engine on path (0: the default max-age, max-held). */
extern struct engine *open_engine_at (const char *path, enum policy p,
                                      uint64_t max_age_ns, uint64_t max_held);
/* An engine on img under policy=strict. */
extern struct engine *open_engine (uint64_t max_age_ns, uint64_t max_held);
/* The counters of the first filesystem (and its held blocks). */
extern struct fs_stats stats0 (struct engine *e, uint64_t *held_blocks);
/* Hold an atime change to file's block through e (nw: the new block,
 * orig: the store's); checks it is held and visible.  Returns its
 * offset.
 */
extern uint64_t hold_atime (struct engine *e, const char *file, char *nw,
                            char *orig);

#endif /* EXT4LAZY_TESTENGINE_H */
