/* SPDX-License-Identifier: BSD-3-Clause */
/* jbd2.c --- the jbd2 on-disk format: superblock, features and one
 * journal block (see jbd2.h and docs/journal.md).
 */
#include <errno.h>
#include <string.h>

#include <ext2fs/ext2fs.h>

#include "byteorder.h"
#include "jbd2.h"

/* Superblock field offsets. */
#define SB_BLOCKTYPE 0x04
#define SB_BLOCKSIZE 0x0C
#define SB_MAXLEN 0x10
#define SB_FIRST 0x14
#define SB_SEQUENCE 0x18
#define SB_START 0x1C
#define SB_ERRNO 0x20
#define SB_FEATURE_COMPAT 0x24
#define SB_FEATURE_INCOMPAT 0x28
#define SB_FEATURE_RO_COMPAT 0x2C
#define SB_UUID 0x30
#define SB_NR_USERS 0x40
#define SB_CHECKSUM_TYPE 0x50
#define SB_NUM_FC_BLKS 0x54
#define SB_CHECKSUM 0xFC

/* Features this module understands. */
#define KNOWN_INCOMPAT 0x3f
#define KNOWN_ROCOMPAT 0

#define TAIL_BYTES 4 /* the checksum tail of descriptor and revoke blocks */
#define UUID_BYTES 16
#define REVOKE_HDR_BYTES 16 /* header and r_count */
#define MIN_LOG_BLOCKS 4

/* byteorder.h has no be16: tag fields are the only 16-bit ones. */
static uint16_t
be16 (const unsigned char *p)
{
  return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t
crc32c_raw (uint32_t crc, const void *p, size_t len)
{
  return ext2fs_crc32c_le (crc, p, len);
}

/* ---- the superblock --------------------------------------------------- */

/* The kernel refuses other checksum types and a bad superblock checksum
 * (journal_check_superblock).
 */
static bool
sb_csum_ok (const unsigned char *b)
{
  unsigned char copy[JBD2_SUPERBLOCK_BYTES];

  if (b[SB_CHECKSUM_TYPE] != JBD2_CRC32C_CHKSUM)
    return false;
  memcpy (copy, b, sizeof copy);
  memset (copy + SB_CHECKSUM, 0, 4);
  return crc32c_raw (~0u, copy, sizeof copy) == be32 (b + SB_CHECKSUM);
}

static void
sb_parse_v2 (const unsigned char *b, struct jbd2_sb *j)
{
  const uint32_t csum_v23
      = JBD2_FEATURE_INCOMPAT_CSUM_V2 | JBD2_FEATURE_INCOMPAT_CSUM_V3;

  j->feature_compat = be32 (b + SB_FEATURE_COMPAT);
  j->feature_incompat = be32 (b + SB_FEATURE_INCOMPAT);
  j->feature_ro_compat = be32 (b + SB_FEATURE_RO_COMPAT);
  j->nr_users = be32 (b + SB_NR_USERS);
  j->s_num_fc_blks = be32 (b + SB_NUM_FC_BLKS);
  if (j->feature_incompat & JBD2_FEATURE_INCOMPAT_FAST_COMMIT)
    j->num_fc_blks
        = j->s_num_fc_blks ? j->s_num_fc_blks : JBD2_DEFAULT_FAST_COMMIT_BLOCKS;
  memcpy (j->uuid, b + SB_UUID, UUID_BYTES);
  j->has_uuid = true;
  j->csum_bad = (j->feature_incompat & csum_v23) && !sb_csum_ok (b);
}

int
jbd2_sb_parse (const void *buf, size_t len, struct jbd2_sb *out)
{
  const unsigned char *b = buf;
  uint32_t type;

  if (len < JBD2_SUPERBLOCK_BYTES || be32 (b) != JBD2_MAGIC_NUMBER)
    return -EINVAL;
  type = be32 (b + SB_BLOCKTYPE);
  if (type != JBD2_SUPERBLOCK_V1 && type != JBD2_SUPERBLOCK_V2)
    return -EINVAL;
  memset (out, 0, sizeof *out);
  out->version = type == JBD2_SUPERBLOCK_V2 ? 2 : 1;
  out->blocksize = be32 (b + SB_BLOCKSIZE);
  out->maxlen = be32 (b + SB_MAXLEN);
  out->first = be32 (b + SB_FIRST);
  out->sequence = be32 (b + SB_SEQUENCE);
  out->start = be32 (b + SB_START);
  out->errno_ = be32 (b + SB_ERRNO);
  if (out->version == 2)
    sb_parse_v2 (b, out);
  return 0;
}

/* ---- features --------------------------------------------------------- */

static bool
csum_v23 (const struct jfeatures *f)
{
  return f->csum_v2 || f->csum_v3;
}

uint32_t
jbd2_log_end (const struct jfeatures *f)
{
  return f->fast_commit ? f->maxlen - f->num_fc_blks : f->maxlen;
}

size_t
jbd2_tag_bytes (const struct jfeatures *f)
{
  size_t sz;

  if (f->csum_v3)
    return 16;
  sz = 12;
  if (f->csum_v2)
    sz += 2;
  return f->bit64 ? sz : sz - 4;
}

size_t
jbd2_max_tags (const struct jfeatures *f)
{
  size_t room
      = f->blocksize - JBD2_HEADER_BYTES - (csum_v23 (f) ? TAIL_BYTES : 0);

  return room / jbd2_tag_bytes (f);
}

int
jbd2_features_check (const struct jfeatures *f)
{
  if (f->blocksize < 1024 || f->blocksize > 65536
      || (f->blocksize & (f->blocksize - 1)) != 0)
    return -EINVAL;
  if (f->first < 1 || f->maxlen <= f->first)
    return -EINVAL;
  if ((f->csum_v2 && f->csum_v3) || (f->csum_v1 && csum_v23 (f)))
    return -EINVAL;
  if (f->fast_commit
      && (f->num_fc_blks == 0 || f->num_fc_blks >= f->maxlen
          || f->maxlen - f->num_fc_blks <= f->first))
    return -EINVAL;
  if (jbd2_log_end (f) - f->first < MIN_LOG_BLOCKS)
    return -EINVAL;
  return 0;
}

/* The features and geometry of sb, not checked.  -EINVAL for a feature
 * bit this module does not know.
 */
static int
features_of (const struct jbd2_sb *sb, struct jfeatures *f)
{
  uint32_t compat = sb->feature_compat, incompat = sb->feature_incompat;

  if ((incompat & ~KNOWN_INCOMPAT) || (sb->feature_ro_compat & ~KNOWN_ROCOMPAT))
    return -EINVAL;
  memset (f, 0, sizeof *f);
  f->csum_v1 = compat & JBD2_FEATURE_COMPAT_CHECKSUM;
  f->revoke = incompat & JBD2_FEATURE_INCOMPAT_REVOKE;
  f->bit64 = incompat & JBD2_FEATURE_INCOMPAT_64BIT;
  f->async_commit = incompat & JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT;
  f->csum_v2 = incompat & JBD2_FEATURE_INCOMPAT_CSUM_V2;
  f->csum_v3 = incompat & JBD2_FEATURE_INCOMPAT_CSUM_V3;
  f->fast_commit = incompat & JBD2_FEATURE_INCOMPAT_FAST_COMMIT;
  f->blocksize = sb->blocksize;
  f->maxlen = sb->maxlen;
  f->first = sb->first;
  f->sequence = sb->sequence;
  f->start = sb->start;
  if (f->fast_commit)
    f->num_fc_blks
        = sb->num_fc_blks ? sb->num_fc_blks : JBD2_DEFAULT_FAST_COMMIT_BLOCKS;
  if (sb->has_uuid)
    {
      memcpy (f->uuid, sb->uuid, UUID_BYTES);
      f->has_uuid = true;
      f->csum_seed = crc32c_raw (~0u, f->uuid, UUID_BYTES);
    }
  return 0;
}

int
jbd2_features_from_sb (const struct jbd2_sb *sb, bool fs_fast_commit,
                       struct jfeatures *out)
{
  struct jfeatures f;

  if (features_of (sb, &f) < 0 || (csum_v23 (&f) && sb->csum_bad)
      || jbd2_features_check (&f) < 0)
    return -EINVAL;
  if (fs_fast_commit && !f.fast_commit
      && jbd2_features_set_fast_commit (&f, sb->s_num_fc_blks) < 0)
    return -EINVAL;
  *out = f;
  return 0;
}

int
jbd2_features_from_raw (const void *sb, size_t len, bool fs_fast_commit,
                        struct jfeatures *out)
{
  struct jbd2_sb s;

  if (jbd2_sb_parse (sb, len, &s) < 0 || s.version != 2)
    return -EINVAL;
  return jbd2_features_from_sb (&s, fs_fast_commit, out);
}

int
jbd2_features_set_fast_commit (struct jfeatures *f, uint32_t num_fc_blks)
{
  struct jfeatures g = *f;

  g.fast_commit = true;
  g.num_fc_blks = num_fc_blks ? num_fc_blks : JBD2_DEFAULT_FAST_COMMIT_BLOCKS;
  if (jbd2_features_check (&g) < 0)
    return -EINVAL;
  *f = g;
  return 0;
}

/* ---- one block -------------------------------------------------------- */

/* crc32c_raw (seed, block) with the 4 bytes at zero_off taken as 0. */
static uint32_t
csum_zeroed (uint32_t seed, const unsigned char *b, size_t bs, size_t zero_off)
{
  static const unsigned char zero[4];
  uint32_t c = crc32c_raw (seed, b, zero_off);

  c = crc32c_raw (c, zero, 4);
  return crc32c_raw (c, b + zero_off + 4, bs - zero_off - 4);
}

static enum jcsum
tail_csum (const struct jfeatures *f, const unsigned char *b)
{
  size_t bs = f->blocksize;

  if (!csum_v23 (f) || !f->has_uuid)
    return JCSUM_NONE;
  return csum_zeroed (f->csum_seed, b, bs, bs - TAIL_BYTES)
                 == be32 (b + bs - TAIL_BYTES)
             ? JCSUM_OK
             : JCSUM_BAD;
}

/* Record tag n (at p, with flags) in out->tags.  -ENOSPC if full. */
static int
put_tag (const struct jfeatures *f, const unsigned char *p, uint16_t flags,
         size_t n, struct jblock *out)
{
  struct jtag *t;

  if (!out->tags)
    return 0;
  if (n >= out->tags_cap)
    return -ENOSPC;
  t = &out->tags[n];
  t->target = be32 (p);
  if (f->bit64)
    t->target |= (uint64_t)be32 (p + 8) << 32;
  t->csum = f->csum_v3 ? be32 (p + 12) : f->csum_v2 ? be16 (p + 4) : 0;
  t->escaped = flags & JBD2_FLAG_ESCAPE;
  t->same_uuid = flags & JBD2_FLAG_SAME_UUID;
  t->last = flags & JBD2_FLAG_LAST_TAG;
  return 0;
}

static int
parse_descriptor (const struct jfeatures *f, const unsigned char *b,
                  struct jblock *out)
{
  size_t tb = jbd2_tag_bytes (f);
  size_t size = f->blocksize - (csum_v23 (f) ? TAIL_BYTES : 0);
  size_t off = JBD2_HEADER_BYTES, n = 0;
  bool last = false;

  /* The kernel's loop (count_tags, do_one_pass): a tag is read while it
   * fits before the tail; a tag without SAME_UUID is followed by the
   * 16-byte UUID; LAST_TAG ends the list.
   */
  while (off + tb <= size && !last)
    {
      const unsigned char *p = b + off;
      uint16_t flags = be16 (p + 6);
      int r;

      /* Writers give the UUID to the first tag only: a later tag
       * without SAME_UUID is what zero-filled space looks like.
       */
      if (n > 0 && !(flags & JBD2_FLAG_SAME_UUID))
        return -EINVAL;
      off += tb;
      if (!(flags & JBD2_FLAG_SAME_UUID))
        {
          if (off + UUID_BYTES > size)
            return -EINVAL;
          off += UUID_BYTES;
        }
      r = put_tag (f, p, flags, n, out);
      if (r < 0)
        return r;
      n++;
      last = flags & JBD2_FLAG_LAST_TAG;
    }
  if (n == 0)
    return -EINVAL;
  out->ntags = n;
  out->unterminated = !last;
  out->csum = tail_csum (f, b);
  return 0;
}

static int
parse_revoke (const struct jfeatures *f, const unsigned char *b,
              struct jblock *out)
{
  uint32_t r_count = be32 (b + JBD2_HEADER_BYTES);
  size_t limit = f->blocksize - (csum_v23 (f) ? TAIL_BYTES : 0);

  if (r_count < REVOKE_HDR_BYTES || r_count > limit)
    return -EINVAL;
  out->r_count = r_count;
  out->rec_size = f->bit64 ? 8 : 4;
  out->nrevoke = (r_count - REVOKE_HDR_BYTES) / out->rec_size;
  out->records = b + REVOKE_HDR_BYTES;
  out->csum = tail_csum (f, b);
  return 0;
}

static void
parse_commit (const struct jfeatures *f, const unsigned char *b,
              struct jblock *out)
{
  out->chksum_type = b[0x0C];
  out->chksum_size = b[0x0D];
  out->chksum0 = be32 (b + 0x10);
  out->commit_sec = be64 (b + 0x30);
  out->commit_nsec = be32 (b + 0x38);
  if (csum_v23 (f))
    {
      if (f->has_uuid)
        out->csum
            = csum_zeroed (f->csum_seed, b, f->blocksize, 0x10) == out->chksum0
                  ? JCSUM_OK
                  : JCSUM_BAD;
    }
  else if (f->csum_v1)
    {
      /* The crc32 covers the whole transaction: not checked here. */
      if (out->chksum_type != JBD2_CRC32_CHKSUM
          || out->chksum_size != JBD2_CRC32_CHKSUM_SIZE)
        out->csum = JCSUM_BAD;
    }
}

int
jbd2_parse_block (const struct jfeatures *f, const void *buf, size_t len,
                  struct jblock *out)
{
  const unsigned char *b = buf;
  struct jtag *tags = out->tags;
  size_t cap = out->tags_cap;

  memset (out, 0, sizeof *out);
  out->tags = tags;
  out->tags_cap = cap;
  if (len < 4 || be32 (b) != JBD2_MAGIC_NUMBER)
    {
      out->kind = JB_NONE;
      return 0;
    }
  if (len < f->blocksize || f->blocksize < 1024)
    return -EINVAL;
  out->seq = be32 (b + 8);
  switch (be32 (b + 4))
    {
    case JBD2_DESCRIPTOR_BLOCK:
      out->kind = JB_DESCRIPTOR;
      return parse_descriptor (f, b, out);
    case JBD2_COMMIT_BLOCK:
      out->kind = JB_COMMIT;
      parse_commit (f, b, out);
      return 0;
    case JBD2_REVOKE_BLOCK:
      out->kind = JB_REVOKE;
      return parse_revoke (f, b, out);
    case JBD2_SUPERBLOCK_V1:
      out->kind = JB_SUPERBLOCK_V1;
      return 0;
    case JBD2_SUPERBLOCK_V2:
      out->kind = JB_SUPERBLOCK_V2;
      return 0;
    default:
      out->kind = JB_UNKNOWN;
      return 0;
    }
}

uint64_t
jbd2_revoke_record (const struct jblock *blk, size_t i)
{
  const unsigned char *p;

  if (blk->kind != JB_REVOKE || i >= blk->nrevoke)
    return 0;
  p = blk->records + i * blk->rec_size;
  return blk->rec_size == 8 ? be64 (p) : be32 (p);
}

bool
jbd2_tag_csum_ok (const struct jfeatures *f, const struct jtag *tag,
                  uint32_t seq, const void *blk)
{
  unsigned char be[4] = { seq >> 24, seq >> 16, seq >> 8, seq };
  uint32_t c;

  if (!csum_v23 (f) || !f->has_uuid)
    return true;
  c = crc32c_raw (f->csum_seed, be, sizeof be);
  c = crc32c_raw (c, blk, f->blocksize);
  return f->csum_v3 ? tag->csum == c : tag->csum == (c & 0xffff);
}

void
jbd2_unescape (void *blk)
{
  unsigned char *p = blk;

  p[0] = (JBD2_MAGIC_NUMBER >> 24) & 0xff;
  p[1] = (JBD2_MAGIC_NUMBER >> 16) & 0xff;
  p[2] = (JBD2_MAGIC_NUMBER >> 8) & 0xff;
  p[3] = JBD2_MAGIC_NUMBER & 0xff;
}
