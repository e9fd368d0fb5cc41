/* SPDX-License-Identifier: BSD-3-Clause */
/* record.h --- a log of what the server received and what it issued to
 * the backing store, for crash-consistency testing.
 *
 * The log is a sequence of records, each a fixed header followed, for
 * writes to the store, by the data written.  All integers are little-
 * endian.  Store operations are logged when they complete, in completion
 * order; client requests when they arrive.  A crash state is any prefix
 * of the store writes up to a flush, plus any subset of the writes that
 * completed after it.
 *
 *   struct record_hdr  (32 bytes)
 *     uint32_t magic   RECORD_MAGIC
 *     uint16_t kind    enum record_kind
 *     uint16_t flags   BIO_* flags
 *     uint64_t seq     position in the log, from 0
 *     uint64_t offset
 *     uint64_t len     (data follows for REC_STORE_WRITE)
 *
 * Thread model: records are appended under one lock, so each is whole.
 */
#ifndef EXT4LAZY_RECORD_H
#define EXT4LAZY_RECORD_H

#include <stdint.h>

#include "backend.h"

#define RECORD_MAGIC 0x4c34584fu /* "OX4L" */

enum record_kind
{
  REC_STORE_READ = 1,
  REC_STORE_WRITE = 2,
  REC_STORE_FLUSH = 3,
  REC_STORE_ZERO = 4,
  REC_STORE_TRIM = 5,
  REC_CLIENT_READ = 16,
  REC_CLIENT_WRITE = 17,
  REC_CLIENT_FLUSH = 18,
  REC_CLIENT_ZERO = 19,
  REC_CLIENT_TRIM = 20,
};

struct record_hdr
{
  uint32_t magic;
  uint16_t kind;
  uint16_t flags;
  uint64_t seq;
  uint64_t offset;
  uint64_t len;
};

/* Start logging to path (created or truncated).  Returns 0 or -errno. */
extern int record_open (const char *path);
extern void record_close (void);
extern int record_active (void);

/* A completed backing-store operation (the backend's trace callback). */
extern void record_store (const struct bio *bio);
/* A request as the client sent it. */
extern void record_client (enum record_kind kind, uint64_t offset, uint64_t len,
                           uint32_t flags);

#endif /* EXT4LAZY_RECORD_H */
