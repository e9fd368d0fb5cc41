/* SPDX-License-Identifier: BSD-3-Clause */
/* testjournal.h --- helpers shared by test-jbd2.c and test-journal.c
 * (implemented in testjournal.c): ext4 images whose journals debugfs
 * writes at test time, in every jbd2 format, debugfs logdump as the
 * independent reading of such a journal, and a checked parse of one
 * block.
 */
#ifndef EXT4LAZY_TESTJOURNAL_H
#define EXT4LAZY_TESTJOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jbd2.h"
#include "layout.h"

/* Skip the test unless mkfs.ext4 and a debugfs that writes journal
 * transactions are installed.
 */
extern void need_tools (void);

/* ---- images ----------------------------------------------------------- */

/* A scratch ext4 image in its own directory, open read-only, with its
 * layout and its journal's features.
 */
struct jimg
{
  char dir[256];
  char path[300];
  int fd;
  uint64_t size;
  uint32_t bs;
  struct layout *lay;
  const struct ext4_fs *fs;
  struct jfeatures f;
};

/* mkfs with opts (size in KiB), then run the debugfs script (may be
 * NULL) and open the result.
 */
extern void jimg_make (struct jimg *im, const char *opts, unsigned size_k,
                       const char *script);
/* (Re)open im->path: its layout and journal features. */
extern void jimg_open (struct jimg *im);
extern void jimg_close (struct jimg *im);
/* A layout_read_fn over the image (opaque: the struct jimg). */
extern int jimg_read (void *opaque, void *buf, size_t len, uint64_t off);
/* Close and remove the image and its directory. */
extern void jimg_del (struct jimg *im);
/* Run a debugfs script on the (closed) image, writable. */
extern void run_debugfs (struct jimg *im, const char *script);
/* Read journal block lblk (im->bs bytes). */
extern void read_jblock (struct jimg *im, uint64_t lblk, void *buf);
/* A file dir/name of n blocks of pseudo-random data for jw; block esc
 * (if < n) starts with the jbd2 magic so that debugfs escapes it.
 */
extern void write_data (const char *dir, const char *name, uint32_t bs,
                        size_t n, size_t esc, unsigned seed);

/* ---- logdump: the independent reading of the journal ------------------ */

#define MAXT 1024
#define MAXTX 16

struct ltx
{
  uint32_t seq;
  size_t n;
  uint64_t targets[MAXT], lblks[MAXT];
  size_t nrevoke;
  uint64_t revoked[64];
  bool committed;
  uint64_t first_lblk, commit_lblk;
};

struct ldump
{
  struct ltx tx[MAXTX];
  size_t ntx;
  uint64_t end_block; /* where logdump found the end of the log */
};

/* The transactions debugfs logdump finds in im's journal (free it). */
extern struct ldump *logdump (struct jimg *im);

/* ---- the standard transaction set ------------------------------------- */

struct scenario
{
  const char *mkfs;     /* mkfs.ext4 options */
  const char *jo;       /* journal_open options */
  unsigned size_k;      /* fs size */
  size_t tag_bytes;     /* expected jbd2_tag_bytes */
  bool v1, v2, v3, b64; /* expected features */
};

/* One per journal format: plain 32 and 64-bit, csum v1, csum v2 32 and
 * 64-bit, csum v3 32 and 64-bit.
 */
extern const struct scenario scenarios[7];

/* Make the image of scenario i with the standard transactions: tx A (3
 * blocks, the second escaped), tx B (revoke only), tx C (enough blocks
 * for two descriptors), tx D (data + revoke).
 */
extern void make_scenario (struct jimg *im, size_t i);

/* ---- one block --------------------------------------------------------- */

/* Store v big-endian at p. */
extern void put32 (unsigned char *p, uint32_t v);

/* Parse into an exactly-sized heap copy (so that valgrind and ASan see
 * any read past the block) and check the result is self-consistent.
 */
extern int parse_exact (const struct jfeatures *f, const unsigned char *src,
                        size_t len, struct jblock *blk, struct jtag *tags,
                        size_t cap);

#endif /* EXT4LAZY_TESTJOURNAL_H */
