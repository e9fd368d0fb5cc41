/* SPDX-License-Identifier: BSD-3-Clause */
/* byteorder.h --- read little- and big-endian integers from on-disk
 * bytes, whatever the host's byte order and the pointer's alignment.
 */
#ifndef EXT4LAZY_BYTEORDER_H
#define EXT4LAZY_BYTEORDER_H

#include <stdint.h>

static inline uint16_t
le16 (const void *v)
{
  const unsigned char *p = v;

  return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t
le32 (const void *v)
{
  const unsigned char *p = v;

  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
         | (uint32_t)p[3] << 24;
}

static inline uint64_t
le64 (const void *v)
{
  const unsigned char *p = v;

  return (uint64_t)le32 (p) | (uint64_t)le32 (p + 4) << 32;
}

static inline uint32_t
be32 (const void *v)
{
  const unsigned char *p = v;

  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8
         | (uint32_t)p[3];
}

static inline uint64_t
be64 (const void *v)
{
  const unsigned char *p = v;

  return (uint64_t)be32 (p) << 32 | be32 (p + 4);
}

#endif /* EXT4LAZY_BYTEORDER_H */
