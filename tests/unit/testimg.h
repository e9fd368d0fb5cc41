/* SPDX-License-Identifier: BSD-3-Clause */
/* testimg.h --- scratch images for the layout and partition tests,
 * with the engine's notices collected (implemented in testutil.c).
 */
#ifndef EXT4LAZY_TESTIMG_H
#define EXT4LAZY_TESTIMG_H

#include <stdint.h>

/* A scratch image file in its own temporary directory. */
struct img
{
  char dir[64];
  char path[128];
  int fd;
  uint64_t size;
};

/* Notices the engine logged since the last img_new, one per line. */
extern char notices[8192];

/* Create a sparse image of size bytes under /tmp (directory named
 * after prefix) and collect the engine's notices; img_del undoes both.
 */
extern void img_new (struct img *im, const char *prefix, uint64_t size);
extern void img_del (struct img *im);

/* Make im a file of size bytes starting with an ext4 of 16 MiB (4 KiB
 * blocks, 256-byte inodes, no journal) holding the files f1..fN, each
 * with its number; a skip
 * where mkfs.ext4 or debugfs is missing.  img_fs_del removes what
 * img_fs_new and img_fs_changed made, and im.
 */
extern void img_fs_new (struct img *im, const char *prefix, uint64_t size,
                        unsigned nfiles);
extern void img_fs_del (struct img *im);

/* Inode number of /name in im, and the offset of its inode-table block. */
extern uint32_t img_fs_imap (const struct img *im, const char *name,
                             uint64_t *off);

/* The 4 KiB block at off of im after the debugfs commands cmds (one
 * per line) ran on a copy of it, into out; im itself is unchanged.
 */
extern void img_fs_changed (const struct img *im, const char *cmds,
                            uint64_t off, char *out);

/* An engine on im through psync, policy=strict, max-age 1 h, the
 * default memory cap; fault (or NULL) sees every store request (struct
 * backend_config's fault hook).
 */
struct engine;
struct bio;
extern struct engine *img_fs_engine (const struct img *im,
                                     int (*fault) (const struct bio *));
/* The same with a memory cap of max_held bytes. */
extern struct engine *img_fs_engine_cap (const struct img *im,
                                         int (*fault) (const struct bio *),
                                         uint64_t max_held);

/* The 4 KiB block at off of the file path, into out. */
extern void file_block (const char *path, uint64_t off, char *out);

#endif /* EXT4LAZY_TESTIMG_H */
