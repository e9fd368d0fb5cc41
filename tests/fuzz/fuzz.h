/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz.h --- what the libFuzzer targets in tests/fuzz share: the
 * entry points libFuzzer calls, an invariant check that crashes (so
 * that libFuzzer records the input), a silent log sink, and the jbd2
 * features a target builds from a few input bytes.
 */
#ifndef EXT4LAZY_FUZZ_H
#define EXT4LAZY_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ext2fs/ext2fs.h>

#include "jbd2.h"
#include "log.h"

extern int LLVMFuzzerInitialize (int *argc, char ***argv);
extern int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* A promise of the header under test was broken: abort, which
 * libFuzzer reports as a crash with the input saved.
 */
#define FUZZ_CHECK(cond)                                                       \
  do                                                                           \
    {                                                                          \
      if (!(cond))                                                             \
        {                                                                      \
          fprintf (stderr, "%s:%d: invariant broken: %s\n", __FILE__,          \
                   __LINE__, #cond);                                           \
          abort ();                                                            \
        }                                                                      \
    }                                                                          \
  while (0)

/* Notices are expected for almost every input: formatting them is
 * exercised, printing them would only slow the run down.
 */
static inline void
fuzz_quiet_sink (enum log_level level, const char *msg)
{
  (void)level;
  (void)msg;
}

static inline void
fuzz_quiet (void)
{
  log_set_sink (fuzz_quiet_sink);
}

/* Bytes fuzz_features reads. */
#define FUZZ_FEATURES_BYTES 32

static inline uint32_t
fuzz_le16 (const uint8_t *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static inline uint32_t
fuzz_le32 (const uint8_t *p)
{
  return fuzz_le16 (p) | fuzz_le16 (p + 2) << 16;
}

/* jbd2 features from FUZZ_FEATURES_BYTES bytes at p, kept within what
 * jbd2_features_check accepts, and small: maxlen below 256 + 16, a log
 * that wraps often.  Bytes:
 *
 *   0      flags: csum_v1, csum_v2, csum_v3, 64bit, async_commit,
 *          fast_commit, revoke, has_uuid (bit 0 to 7)
 *   1      block size 1024 << (b & 3)
 *   2..3   log length (maxlen - first), 4 + (v % 256)
 *   4      first, 1 + (b % 8)
 *   5..6   fast-commit blocks, 1 + v % (log length - 4), with fast_commit
 *          (none if the log length is 4)
 *   7..10  sequence
 *   11..14 start
 *   15     (the caller's: e.g. spare journal blocks)
 *   16..31 UUID, with has_uuid
 */
static inline void
fuzz_features (const uint8_t *p, struct jfeatures *f)
{
  uint32_t loglen = 4 + fuzz_le16 (p + 2) % 256;

  memset (f, 0, sizeof *f);
  f->csum_v1 = p[0] & 1;
  f->csum_v2 = p[0] & 2;
  f->csum_v3 = (p[0] & 4) && !f->csum_v2;
  if (f->csum_v2 || f->csum_v3)
    f->csum_v1 = false;
  f->bit64 = p[0] & 8;
  f->async_commit = p[0] & 16;
  f->revoke = p[0] & 64;
  f->blocksize = 1024u << (p[1] & 3);
  f->first = 1 + p[4] % 8;
  f->maxlen = f->first + loglen;
  if ((p[0] & 32) && loglen > 4)
    {
      f->fast_commit = true;
      f->num_fc_blks = 1 + fuzz_le16 (p + 5) % (loglen - 4);
    }
  f->sequence = fuzz_le32 (p + 7);
  f->start = fuzz_le32 (p + 11);
  if (p[0] & 128)
    {
      f->has_uuid = true;
      memcpy (f->uuid, p + 16, sizeof f->uuid);
      f->csum_seed = ext2fs_crc32c_le (~0u, f->uuid, sizeof f->uuid);
    }
}

#endif /* EXT4LAZY_FUZZ_H */
