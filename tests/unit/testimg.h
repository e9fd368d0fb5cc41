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

#endif /* EXT4LAZY_TESTIMG_H */
