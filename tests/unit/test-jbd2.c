/* SPDX-License-Identifier: BSD-3-Clause */
/* test-jbd2.c --- the jbd2 on-disk format: superblock parsing, features,
 * tag sizes, hand-made blocks that lie (bad counts, truncation, unknown
 * types), and every block of the journals debugfs writes in each format,
 * against debugfs logdump.  Corrupt and random blocks, which also go
 * through the follower, are checked in test-journal.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <ext2fs/ext2fs.h>

#include "jbd2.h"
#include "testjournal.h"

/* A v2 superblock of 1024 blocks of 1 KiB, log from block 1, with the
 * given incompat features.
 */
static void
make_sb (unsigned char *sb, uint32_t incompat)
{
  memset (sb, 0, JBD2_SUPERBLOCK_BYTES);
  jbd2_unescape (sb);
  put32 (sb + 0x04, JBD2_SUPERBLOCK_V2);
  put32 (sb + 0x0C, 1024);
  put32 (sb + 0x10, 1024);
  put32 (sb + 0x14, 1);
  put32 (sb + 0x18, 77);
  put32 (sb + 0x1C, 5);
  put32 (sb + 0x28, incompat);
  for (int i = 0; i < 16; i++)
    sb[0x30 + i] = 0x10 + i;
  put32 (sb + 0x40, 1);
}

/* Give sb the crc32c checksum type and its checksum. */
static void
seal_sb (unsigned char *sb)
{
  sb[0x50] = JBD2_CRC32C_CHKSUM;
  put32 (sb + 0xFC, 0);
  put32 (sb + 0xFC, ext2fs_crc32c_le (~0u, sb, JBD2_SUPERBLOCK_BYTES));
}

/* ---- the superblock ---------------------------------------------------- */

Test (jbd2, sb_parse)
{
  unsigned char sb[JBD2_SUPERBLOCK_BYTES];
  struct jbd2_sb j, before;

  make_sb (sb, JBD2_FEATURE_INCOMPAT_64BIT | JBD2_FEATURE_INCOMPAT_FAST_COMMIT);
  cr_assert_eq (jbd2_sb_parse (sb, sizeof sb, &j), 0);
  cr_assert_eq (j.version, 2);
  cr_assert_eq (j.blocksize, 1024);
  cr_assert_eq (j.maxlen, 1024);
  cr_assert_eq (j.first, 1);
  cr_assert_eq (j.sequence, 77);
  cr_assert_eq (j.start, 5);
  cr_assert_eq (j.feature_incompat, 0x22);
  cr_assert_eq (j.nr_users, 1);
  cr_assert_eq (j.num_fc_blks, JBD2_DEFAULT_FAST_COMMIT_BLOCKS);
  cr_assert_eq (j.dev_off, 0);
  put32 (sb + 0x54, 100);
  cr_assert_eq (jbd2_sb_parse (sb, sizeof sb, &j), 0);
  cr_assert_eq (j.num_fc_blks, 100);
  cr_assert (j.has_uuid);
  cr_assert_eq (memcmp (j.uuid, sb + 0x30, 16), 0);
  cr_assert_not (j.csum_bad, "no csum v2/v3: not looked at");
  /* Without the FAST_COMMIT feature, num_fc_blks is 0 and s_num_fc_blks
   * as on disk.
   */
  put32 (sb + 0x28, 0);
  cr_assert_eq (jbd2_sb_parse (sb, sizeof sb, &j), 0);
  cr_assert_eq (j.num_fc_blks, 0);
  cr_assert_eq (j.s_num_fc_blks, 100);
  /* csum v3 without a valid checksum. */
  put32 (sb + 0x28, JBD2_FEATURE_INCOMPAT_CSUM_V3);
  cr_assert_eq (jbd2_sb_parse (sb, sizeof sb, &j), 0);
  cr_assert (j.csum_bad);
  seal_sb (sb);
  cr_assert_eq (jbd2_sb_parse (sb, sizeof sb, &j), 0);
  cr_assert_not (j.csum_bad);
  /* v1: no feature fields. */
  put32 (sb + 0x28, 0x2);
  put32 (sb + 0x04, JBD2_SUPERBLOCK_V1);
  cr_assert_eq (jbd2_sb_parse (sb, sizeof sb, &j), 0);
  cr_assert_eq (j.version, 1);
  cr_assert_eq (j.feature_incompat, 0);
  cr_assert_eq (j.nr_users, 0);
  cr_assert_eq (j.start, 5);
  cr_assert_not (j.has_uuid, "v1 has no UUID");
  cr_assert_not (j.csum_bad);
  /* Not a superblock: refused, out unchanged. */
  before = j;
  put32 (sb + 0x04, JBD2_DESCRIPTOR_BLOCK);
  cr_assert_eq (jbd2_sb_parse (sb, sizeof sb, &j), -EINVAL);
  put32 (sb + 0x04, JBD2_SUPERBLOCK_V2);
  cr_assert_eq (jbd2_sb_parse (sb, sizeof sb - 1, &j), -EINVAL);
  sb[0] = 0;
  cr_assert_eq (jbd2_sb_parse (sb, sizeof sb, &j), -EINVAL);
  cr_assert_eq (memcmp (&j, &before, sizeof j), 0);
}

/* ---- features ---------------------------------------------------------- */

/* Superblocks jbd2_features_from_sb refuses: each differs from 4096-byte
 * blocks, maxlen 1024 and first 1 in what makes it unusable.
 */
static const struct jbd2_sb refused_sb[] = {
  /* csum v2 and v3 together */
  { .blocksize = 4096, .maxlen = 1024, .first = 1, .feature_incompat = 0x18 },
  /* csum v1 and v3 together */
  { .blocksize = 4096,
    .maxlen = 1024,
    .first = 1,
    .feature_compat = 1,
    .feature_incompat = 0x10 },
  /* an unknown incompat feature */
  { .blocksize = 4096, .maxlen = 1024, .first = 1, .feature_incompat = 0x40 },
  /* an unknown ro_compat feature */
  { .blocksize = 4096, .maxlen = 1024, .first = 1, .feature_ro_compat = 1 },
  /* block size not a power of two */
  { .blocksize = 3000, .maxlen = 1024, .first = 1 },
  /* first 0: the log over the superblock */
  { .blocksize = 4096, .maxlen = 1024, .first = 0 },
  /* maxlen not beyond first */
  { .blocksize = 4096, .maxlen = 1, .first = 1 },
  /* a fast-commit area that leaves no log */
  { .blocksize = 4096,
    .maxlen = 1024,
    .first = 1,
    .feature_incompat = 0x20,
    .num_fc_blks = 1023 },
};

Test (jbd2, features_rejected)
{
  struct jbd2_sb jsb = { .blocksize = 4096, .maxlen = 1024, .first = 1 };
  struct jfeatures f;
  unsigned char sb[1024];

  cr_assert_eq (jbd2_features_from_sb (&jsb, false, &f), 0);
  cr_assert_eq (jbd2_tag_bytes (&f), 8);
  cr_assert_eq (jbd2_max_tags (&f), (4096 - 12) / 8);
  for (size_t i = 0; i < sizeof refused_sb / sizeof *refused_sb; i++)
    cr_assert_eq (jbd2_features_from_sb (&refused_sb[i], false, &f), -EINVAL,
                  "refused_sb[%zu] accepted", i);
  jsb.feature_incompat = 0x20;
  jsb.num_fc_blks = 0; /* the default, 256 */
  cr_assert_eq (jbd2_features_from_sb (&jsb, false, &f), 0);
  cr_assert_eq (f.num_fc_blks, 256);
  cr_assert_eq (jbd2_log_end (&f), 1024 - 256);
  /* Raw: v1 superblocks and short buffers are refused. */
  memset (sb, 0, sizeof sb);
  jbd2_unescape (sb);
  sb[7] = 3;
  cr_assert_eq (jbd2_features_from_raw (sb, sizeof sb, false, &f), -EINVAL);
  sb[7] = 4;
  cr_assert_eq (jbd2_features_from_raw (sb, 512, false, &f), -EINVAL);
  /* Tag sizes of every format (the kernel's journal_tag_bytes). */
  memset (&f, 0, sizeof f);
  f.blocksize = 1024;
  cr_assert_eq (jbd2_tag_bytes (&f), 8);
  f.bit64 = true;
  cr_assert_eq (jbd2_tag_bytes (&f), 12);
  f.csum_v2 = true;
  cr_assert_eq (jbd2_tag_bytes (&f), 14);
  f.bit64 = false;
  cr_assert_eq (jbd2_tag_bytes (&f), 10);
  f.csum_v2 = false;
  f.csum_v3 = true;
  cr_assert_eq (jbd2_tag_bytes (&f), 16);
  f.bit64 = true;
  cr_assert_eq (jbd2_tag_bytes (&f), 16);
  cr_assert_eq (jbd2_max_tags (&f), (1024 - 12 - 4) / 16);
}

Test (jbd2, features_from_raw)
{
  unsigned char sb[JBD2_SUPERBLOCK_BYTES];
  struct jfeatures f;

  make_sb (sb, JBD2_FEATURE_INCOMPAT_CSUM_V3);
  seal_sb (sb);
  cr_assert_eq (jbd2_features_from_raw (sb, sizeof sb, false, &f), 0);
  cr_assert (f.csum_v3 && !f.fast_commit);
  cr_assert_eq (f.sequence, 77);
  cr_assert_eq (f.start, 5);
  cr_assert (f.has_uuid);
  cr_assert_eq (memcmp (f.uuid, sb + 0x30, 16), 0);
  cr_assert_eq (f.csum_seed, ext2fs_crc32c_le (~0u, sb + 0x30, 16));
  /* The ext4 fast-commit feature turns the area on. */
  cr_assert_eq (jbd2_features_from_raw (sb, sizeof sb, true, &f), 0);
  cr_assert (f.fast_commit);
  cr_assert_eq (f.num_fc_blks, JBD2_DEFAULT_FAST_COMMIT_BLOCKS);
  put32 (sb + 0x54, 64);
  seal_sb (sb);
  cr_assert_eq (jbd2_features_from_raw (sb, sizeof sb, true, &f), 0);
  cr_assert_eq (f.num_fc_blks, 64);
  cr_assert_eq (jbd2_log_end (&f), 1024 - 64);
  /* A bad checksum, or another checksum type, as the kernel refuses. */
  sb[0x100] ^= 1; /* s_users: inside the checksummed 1024 bytes */
  cr_assert_eq (jbd2_features_from_raw (sb, sizeof sb, false, &f), -EINVAL);
  seal_sb (sb);
  sb[0x50] = JBD2_CRC32_CHKSUM;
  cr_assert_eq (jbd2_features_from_raw (sb, sizeof sb, false, &f), -EINVAL);
  /* Without csum v2/v3 the checksum is not looked at. */
  make_sb (sb, 0);
  cr_assert_eq (jbd2_features_from_raw (sb, sizeof sb, false, &f), 0);
  cr_assert (f.has_uuid);
}

static void
assert_same_features (const struct jfeatures *a, const struct jfeatures *b)
{
  cr_assert (a->csum_v1 == b->csum_v1 && a->csum_v2 == b->csum_v2
             && a->csum_v3 == b->csum_v3 && a->bit64 == b->bit64
             && a->async_commit == b->async_commit
             && a->fast_commit == b->fast_commit && a->revoke == b->revoke);
  cr_assert (a->blocksize == b->blocksize && a->maxlen == b->maxlen
             && a->first == b->first && a->num_fc_blks == b->num_fc_blks);
  cr_assert (a->sequence == b->sequence && a->start == b->start);
  cr_assert (a->has_uuid == b->has_uuid);
  cr_assert_eq (memcmp (a->uuid, b->uuid, sizeof a->uuid), 0);
  cr_assert_eq (a->csum_seed, b->csum_seed);
}

/* The parsed superblock gives what the raw one gives, whatever it says:
 * both are the same function of the same block.
 */
Test (jbd2, features_from_sb_agree_with_raw)
{
  const uint32_t incompat[] = { 0,
                                JBD2_FEATURE_INCOMPAT_64BIT,
                                JBD2_FEATURE_INCOMPAT_CSUM_V2,
                                JBD2_FEATURE_INCOMPAT_CSUM_V3 | 0x2,
                                JBD2_FEATURE_INCOMPAT_FAST_COMMIT,
                                JBD2_FEATURE_INCOMPAT_CSUM_V3 | 0x20 };
  unsigned char sb[JBD2_SUPERBLOCK_BYTES];

  for (size_t i = 0; i < sizeof incompat / sizeof *incompat; i++)
    for (int variant = 0; variant < 4; variant++)
      for (int fc = 0; fc < 2; fc++)
        {
          struct jfeatures a, b;
          struct jbd2_sb js;
          int ra, rb;

          make_sb (sb, incompat[i]);
          if (variant & 1)
            put32 (sb + 0x54, 100); /* s_num_fc_blks */
          seal_sb (sb);
          if (variant & 2)
            sb[0x100] ^= 1; /* a bad superblock checksum */
          memset (&a, 0, sizeof a);
          memset (&b, 0, sizeof b);
          cr_assert_eq (jbd2_sb_parse (sb, sizeof sb, &js), 0);
          cr_assert (js.has_uuid);
          cr_assert_eq (js.s_num_fc_blks, variant & 1 ? 100 : 0);
          ra = jbd2_features_from_raw (sb, sizeof sb, fc, &a);
          rb = jbd2_features_from_sb (&js, fc, &b);
          cr_assert_eq (ra, rb, "features %#x variant %d fc %d: %d vs %d",
                        incompat[i], variant, fc, ra, rb);
          cr_assert_eq (js.csum_bad,
                        (variant & 2) && (incompat[i] & 0x18) != 0);
          if (ra == 0)
            assert_same_features (&a, &b);
        }
}

/* The data-block tag checksum, as the kernel computes it: crc32c from
 * the journal's seed over the big-endian sequence, then the block.
 */
Test (jbd2, tag_checksum)
{
  unsigned char sb[JBD2_SUPERBLOCK_BYTES], blk[1024], be[4];
  struct jfeatures f;
  struct jtag tag = { .target = 42 };
  uint32_t c;

  make_sb (sb, JBD2_FEATURE_INCOMPAT_CSUM_V3);
  seal_sb (sb);
  cr_assert_eq (jbd2_features_from_raw (sb, sizeof sb, false, &f), 0);
  for (size_t k = 0; k < sizeof blk; k++)
    blk[k] = (unsigned char)(k * 7);
  put32 (be, 1234);
  c = ext2fs_crc32c_le (f.csum_seed, be, 4);
  c = ext2fs_crc32c_le (c, blk, sizeof blk);
  tag.csum = c;
  cr_assert (jbd2_tag_csum_ok (&f, &tag, 1234, blk));
  cr_assert_not (jbd2_tag_csum_ok (&f, &tag, 1235, blk), "another sequence");
  blk[500] ^= 1;
  cr_assert_not (jbd2_tag_csum_ok (&f, &tag, 1234, blk), "a changed block");
  blk[500] ^= 1;
  /* csum v2: the low 16 bits. */
  f.csum_v3 = false;
  f.csum_v2 = true;
  cr_assert_not (jbd2_tag_csum_ok (&f, &tag, 1234, blk));
  tag.csum = c & 0xffff;
  cr_assert (jbd2_tag_csum_ok (&f, &tag, 1234, blk));
  /* Nothing to check without the UUID or without csum v2/v3. */
  tag.csum = ~c;
  f.has_uuid = false;
  cr_assert (jbd2_tag_csum_ok (&f, &tag, 1234, blk));
  f.has_uuid = true;
  f.csum_v2 = false;
  cr_assert (jbd2_tag_csum_ok (&f, &tag, 1234, blk));
}

/* ---- one block --------------------------------------------------------- */

Test (jbd2, unescape_and_revoke_records)
{
  const struct jfeatures f32
      = { .blocksize = 1024, .maxlen = 1024, .first = 1 };
  struct jfeatures f64 = f32;
  unsigned char b[1024];
  struct jblock blk = { 0 };

  memset (b, 0, sizeof b);
  jbd2_unescape (b);
  cr_assert (b[0] == 0xC0 && b[1] == 0x3B && b[2] == 0x39 && b[3] == 0x98);
  put32 (b + 4, JBD2_REVOKE_BLOCK);
  put32 (b + 12, 16 + 3 * 8);
  put32 (b + 16, 0x11);
  put32 (b + 20, 0x22);
  put32 (b + 24, 0x33);
  put32 (b + 28, 0x44);
  cr_assert_eq (jbd2_parse_block (&f32, b, sizeof b, &blk), 0);
  cr_assert_eq (blk.kind, JB_REVOKE);
  cr_assert_eq (blk.nrevoke, 6);
  cr_assert_eq (jbd2_revoke_record (&blk, 0), 0x11);
  cr_assert_eq (jbd2_revoke_record (&blk, 3), 0x44);
  cr_assert_eq (jbd2_revoke_record (&blk, 6), 0);
  f64.bit64 = true;
  cr_assert_eq (jbd2_parse_block (&f64, b, sizeof b, &blk), 0);
  cr_assert_eq (blk.nrevoke, 3);
  cr_assert_eq (jbd2_revoke_record (&blk, 0), 0x1100000022ull);
  cr_assert_eq (jbd2_revoke_record (&blk, 1), 0x3300000044ull);
  cr_assert_eq (jbd2_revoke_record (&blk, 3), 0);
  blk.kind = JB_COMMIT;
  cr_assert_eq (jbd2_revoke_record (&blk, 0), 0);
}

Test (jbd2, lying_blocks)
{
  struct jbd2_sb jsb = { .blocksize = 1024,
                         .maxlen = 1024,
                         .first = 1,
                         .feature_incompat = 0x2 | 0x10 };
  struct jfeatures f;
  unsigned char b[1024];
  struct jtag tags[128];
  struct jblock blk;

  cr_assert_eq (jbd2_features_from_sb (&jsb, false, &f), 0);
  /* Revoke r_count beyond the block, below the header, at the tail. */
  memset (b, 0, sizeof b);
  jbd2_unescape (b);
  put32 (b + 4, 5);
  put32 (b + 12, 0xFFFFFFF0);
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 128), -EINVAL);
  put32 (b + 12, 8);
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 128), -EINVAL);
  put32 (b + 12, 1024);
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 128), -EINVAL);
  put32 (b + 12, 1020);
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 128), 0);
  cr_assert_eq (blk.nrevoke, (1020 - 16) / 8);
  /* A descriptor whose tags have no LAST_TAG and zero-filled space
   * after the first: not understood.
   */
  memset (b, 0, sizeof b);
  jbd2_unescape (b);
  put32 (b + 4, 1);
  put32 (b + 12, 77);
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 128), -EINVAL);
  /* With LAST_TAG on the first tag: one tag. */
  b[12 + 7] = JBD2_FLAG_LAST_TAG;
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 128), 0);
  cr_assert_eq (blk.ntags, 1);
  cr_assert_eq (blk.tags[0].target, 77);
  cr_assert (!blk.unterminated);
  /* Every tag SAME_UUID without LAST_TAG: the list ends at the tail, as
   * the kernel reads it, and is flagged.
   */
  for (size_t off = 12; off + 16 <= 1020; off += 16)
    b[off + 7] = JBD2_FLAG_SAME_UUID;
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 128), 0);
  cr_assert_eq (blk.ntags, (1020 - 12) / 16);
  cr_assert (blk.unterminated);
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 10), -ENOSPC);
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, NULL, 0), 0);
  cr_assert_eq (blk.ntags, (1020 - 12) / 16);
  /* A UUID that runs past the tag area: the last tag has no SAME_UUID. */
  b[12 + 62 * 16 + 7] = 0;
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 128), -EINVAL);
  /* Truncated blocks. */
  for (size_t len = 0; len < sizeof b; len++)
    {
      int r = parse_exact (&f, b, len, &blk, tags, 128);
      cr_assert (len < 4 ? r == 0 && blk.kind == JB_NONE : r == -EINVAL);
    }
  /* Unknown types and superblocks inside the log. */
  put32 (b + 4, 6);
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 128), 0);
  cr_assert_eq (blk.kind, JB_UNKNOWN);
  put32 (b + 4, 4);
  cr_assert_eq (parse_exact (&f, b, sizeof b, &blk, tags, 128), 0);
  cr_assert_eq (blk.kind, JB_SUPERBLOCK_V2);
}

/* ---- journals debugfs writes, against logdump -------------------------- */

/* Every block of the standard transactions of scenario i, parsed, against
 * what logdump read.
 */
static void
parse_scenario (size_t i)
{
  struct jimg im;
  struct ldump *d;
  unsigned char *b;
  struct jtag *tags;
  struct jblock blk;

  need_tools ();
  make_scenario (&im, i);
  d = logdump (&im);
  b = malloc (im.bs);
  tags = calloc (jbd2_max_tags (&im.f), sizeof *tags);
  cr_assert (b && tags);
  for (size_t k = 0; k < d->ntx; k++)
    {
      const struct ltx *t = &d->tx[k];
      size_t tagi = 0, nrev = 0;
      uint64_t end = t->committed     ? t->commit_lblk + 1
                     : k + 1 < d->ntx ? d->tx[k + 1].first_lblk
                                      : d->end_block;

      for (uint64_t x = t->first_lblk; x < end; x++)
        {
          int r;

          read_jblock (&im, x, b);
          memset (&blk, 0, sizeof blk);
          blk.tags = tags;
          blk.tags_cap = jbd2_max_tags (&im.f);
          r = jbd2_parse_block (&im.f, b, im.bs, &blk);
          cr_assert_eq (r, 0, "block %" PRIu64 ": %s", x, strerror (-r));
          if (blk.kind == JB_NONE)
            continue;
          cr_assert_eq (blk.seq, t->seq);
          if (im.f.csum_v2 || im.f.csum_v3)
            cr_assert_eq (blk.csum, JCSUM_OK, "checksum of block %" PRIu64, x);
          else
            cr_assert_eq (blk.csum, JCSUM_NONE);
          if (blk.kind == JB_DESCRIPTOR)
            for (size_t m = 0; m < blk.ntags; m++, tagi++)
              {
                cr_assert_lt (tagi, t->n);
                cr_assert_eq (blk.tags[m].target, t->targets[tagi]);
                cr_assert_eq (x + 1 + m, t->lblks[tagi]);
                cr_assert_eq (blk.tags[m].same_uuid, m > 0);
              }
          else if (blk.kind == JB_REVOKE)
            for (size_t m = 0; m < blk.nrevoke; m++, nrev++)
              {
                cr_assert_lt (nrev, t->nrevoke);
                cr_assert_eq (jbd2_revoke_record (&blk, m), t->revoked[nrev]);
              }
          else
            {
              cr_assert_eq (blk.kind, JB_COMMIT);
              if (im.f.csum_v1)
                cr_assert (blk.chksum_type == 1 && blk.chksum_size == 4);
            }
        }
      cr_assert_eq (tagi, t->n, "seq %u: parsed %zu tags, logdump %zu", t->seq,
                    tagi, t->n);
      cr_assert_eq (nrev, t->nrevoke);
    }
  /* The big transaction needed a second descriptor. */
  cr_assert_gt (d->tx[2].n, jbd2_max_tags (&im.f) - 1);
  free (tags);
  free (b);
  free (d);
  jimg_del (&im);
}

#define PARSE_TEST(i, name)                                                    \
  Test (jbd2, parse_##name)                                                    \
  {                                                                            \
    parse_scenario (i);                                                        \
  }

PARSE_TEST (0, plain32)
PARSE_TEST (1, plain64)
PARSE_TEST (2, csum_v1)
PARSE_TEST (3, csum_v2_32)
PARSE_TEST (4, csum_v2_64)
PARSE_TEST (5, csum_v3_32)
PARSE_TEST (6, csum_v3_64)

Test (jbd2, features_from_jsb_match_raw)
{
  need_tools ();
  for (size_t i = 0; i < sizeof scenarios / sizeof *scenarios; i++)
    {
      struct jimg im;
      struct jfeatures f;

      make_scenario (&im, i);
      /* The parsed superblock carries what the raw one gives: the same
       * features, UUID and checksum seed included.
       */
      memset (&f, 0xa5, sizeof f);
      cr_assert_eq (jbd2_features_from_sb (&im.fs->jsb,
                                           im.fs->feature_compat & 0x400, &f),
                    0);
      cr_assert_eq (f.blocksize, im.f.blocksize);
      cr_assert_eq (f.maxlen, im.f.maxlen);
      cr_assert_eq (f.first, im.f.first);
      cr_assert_eq (f.csum_v1, im.f.csum_v1);
      cr_assert_eq (f.csum_v2, im.f.csum_v2);
      cr_assert_eq (f.csum_v3, im.f.csum_v3);
      cr_assert_eq (f.bit64, im.f.bit64);
      cr_assert_eq (f.sequence, im.f.sequence);
      cr_assert_eq (f.start, im.f.start);
      cr_assert (f.has_uuid);
      cr_assert (im.f.has_uuid);
      cr_assert_eq (memcmp (f.uuid, im.f.uuid, sizeof f.uuid), 0);
      cr_assert_eq (f.csum_seed, im.f.csum_seed);
      cr_assert_eq (jbd2_tag_bytes (&f), scenarios[i].tag_bytes);
      jimg_del (&im);
    }
}
