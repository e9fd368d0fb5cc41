/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz-jbd2.c --- libFuzzer target for the jbd2 format module (jbd2.h):
 * the superblock parsers and one journal block.
 *
 * The input is first read as a journal superblock (jbd2_sb_parse,
 * jbd2_features_from_sb, jbd2_features_from_raw with and without the
 * filesystem's fast-commit feature).  The features used to parse a
 * block are those of the superblock when it gives some (the block is
 * then what follows the superblock's first block: seeds are "journal
 * block 0 + one journal block"), else those fuzz_features makes of the
 * first FUZZ_FEATURES_BYTES bytes (the block is the rest).  The block
 * is parsed with a full tag array, without one and with a one-entry
 * array, from an exactly-sized heap copy so that ASan sees any read
 * past it.
 */
#include <errno.h>
#include <stdbool.h>

#include "fuzz.h"

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  fuzz_quiet ();
  return 0;
}

/* What jbd2.h promises of any features it hands out or accepts. */
static void
check_features (const struct jfeatures *f)
{
  size_t tb = jbd2_tag_bytes (f);
  uint32_t end = jbd2_log_end (f);

  FUZZ_CHECK (jbd2_features_check (f) == 0);
  FUZZ_CHECK (f->blocksize >= 1024 && f->blocksize <= 65536);
  FUZZ_CHECK ((f->blocksize & (f->blocksize - 1)) == 0);
  FUZZ_CHECK (!(f->csum_v2 && f->csum_v3));
  FUZZ_CHECK (!(f->csum_v1 && (f->csum_v2 || f->csum_v3)));
  FUZZ_CHECK (tb == 8 || tb == 10 || tb == 12 || tb == 14 || tb == 16);
  FUZZ_CHECK (tb
              == (f->csum_v3   ? 16
                  : f->bit64   ? (f->csum_v2 ? 14u : 12u)
                  : f->csum_v2 ? 10u
                               : 8u));
  FUZZ_CHECK (jbd2_max_tags (f) >= 1);
  FUZZ_CHECK (jbd2_max_tags (f) * tb <= f->blocksize - JBD2_HEADER_BYTES);
  FUZZ_CHECK (end > f->first && end <= f->maxlen);
  FUZZ_CHECK (end - f->first >= 4);
  FUZZ_CHECK (f->fast_commit ? end == f->maxlen - f->num_fc_blks
                             : end == f->maxlen);
}

/* Parse blk[0..len) (an exact heap copy) with tags tags[0..cap). */
static int
parse (const struct jfeatures *f, const unsigned char *blk, size_t len,
       struct jtag *tags, size_t cap, struct jblock *out)
{
  memset (out, 0xA5, sizeof *out); /* the parser must set every field */
  out->tags = tags;
  out->tags_cap = cap;
  int r = jbd2_parse_block (f, blk, len, out);

  FUZZ_CHECK (r == 0 || r == -EINVAL || r == -ENOSPC);
  FUZZ_CHECK (out->tags == tags && out->tags_cap == cap);
  if (r == -ENOSPC)
    FUZZ_CHECK (tags != NULL && out->kind == JB_DESCRIPTOR);
  if (r < 0)
    return r;
  FUZZ_CHECK (out->kind >= JB_NONE && out->kind <= JB_UNKNOWN);
  FUZZ_CHECK (out->csum >= JCSUM_NONE && out->csum <= JCSUM_BAD);
  if (out->kind == JB_NONE)
    FUZZ_CHECK (len < 4 || memcmp (blk, "\xC0\x3B\x39\x98", 4) != 0);
  else
    FUZZ_CHECK (len >= f->blocksize);
  /* A block checksum is only ever good when it can be checked. */
  if (out->csum == JCSUM_OK)
    FUZZ_CHECK ((f->csum_v2 || f->csum_v3) && f->has_uuid);
  if (out->csum == JCSUM_BAD && !(f->csum_v2 || f->csum_v3))
    FUZZ_CHECK (f->csum_v1 && out->kind == JB_COMMIT);
  switch (out->kind)
    {
    case JB_DESCRIPTOR:
      FUZZ_CHECK (out->ntags >= 1 && out->ntags <= jbd2_max_tags (f));
      if (tags)
        {
          FUZZ_CHECK (out->ntags <= cap);
          for (size_t i = 0; i < out->ntags; i++)
            {
              FUZZ_CHECK (i == 0 || tags[i].same_uuid);
              FUZZ_CHECK (!tags[i].last || i == out->ntags - 1);
              if (!f->bit64)
                FUZZ_CHECK (tags[i].target <= UINT32_MAX);
            }
          FUZZ_CHECK (out->unterminated != tags[out->ntags - 1].last);
        }
      break;
    case JB_REVOKE:
      {
        uint64_t sum = 0;

        FUZZ_CHECK (out->rec_size == (f->bit64 ? 8u : 4u));
        FUZZ_CHECK (out->r_count >= 16 && out->r_count <= f->blocksize);
        FUZZ_CHECK (out->records == blk + 16);
        FUZZ_CHECK (16 + out->nrevoke * out->rec_size <= out->r_count);
        for (size_t i = 0; i < out->nrevoke; i++)
          sum += jbd2_revoke_record (out, i);
        FUZZ_CHECK (jbd2_revoke_record (out, out->nrevoke) == 0);
        (void)sum;
      }
      break;
    default:
      FUZZ_CHECK (out->ntags == 0 && out->nrevoke == 0);
      break;
    }
  return r;
}

static void
fuzz_block (const struct jfeatures *f, const uint8_t *src, size_t len)
{
  size_t max = jbd2_max_tags (f);
  unsigned char *blk = malloc (len ? len : 1);
  struct jtag *tags = malloc (max * sizeof *tags);
  struct jtag one[1];
  struct jblock a, b, c;
  int ra, rb, rc;

  FUZZ_CHECK (blk && tags);
  memcpy (blk, src, len);
  ra = parse (f, blk, len, tags, max, &a);
  rb = parse (f, blk, len, NULL, 0, &b);
  rc = parse (f, blk, len, one, 1, &c);
  /* A full array never runs out; without one the tags are only
   * counted, with the same answer.
   */
  FUZZ_CHECK (ra != -ENOSPC && rb != -ENOSPC);
  FUZZ_CHECK (ra == rb);
  if (ra == 0)
    {
      FUZZ_CHECK (a.kind == b.kind && a.ntags == b.ntags);
      FUZZ_CHECK (a.csum == b.csum && a.seq == b.seq);
      if (a.kind == JB_DESCRIPTOR)
        FUZZ_CHECK (a.ntags > 1 ? rc == -ENOSPC
                                : rc == 0 && one[0].target == tags[0].target);
      else
        FUZZ_CHECK (rc == 0 && c.kind == a.kind);
    }
  else
    /* Not understood; with room for one tag only, running out of it
     * may come first.
     */
    FUZZ_CHECK (rc == ra || (rc == -ENOSPC && c.kind == JB_DESCRIPTOR));
  if (len >= 4)
    {
      jbd2_unescape (blk);
      FUZZ_CHECK (memcmp (blk, "\xC0\x3B\x39\x98", 4) == 0);
    }
  free (tags);
  free (blk);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  struct jbd2_sb sb;
  struct jfeatures f, g;
  bool have = false;
  size_t off = 0;

  if (jbd2_sb_parse (data, size, &sb) == 0)
    {
      FUZZ_CHECK (size >= JBD2_SUPERBLOCK_BYTES);
      FUZZ_CHECK (sb.version == 1 || sb.version == 2);
      FUZZ_CHECK (sb.dev_off == 0);
      if (sb.version == 1)
        FUZZ_CHECK (sb.feature_compat == 0 && sb.feature_incompat == 0
                    && sb.feature_ro_compat == 0 && sb.num_fc_blks == 0);
      if (jbd2_features_from_sb (&sb, false, &f) == 0)
        {
          check_features (&f);
          FUZZ_CHECK (f.has_uuid == sb.has_uuid);
          FUZZ_CHECK (f.blocksize == sb.blocksize && f.maxlen == sb.maxlen
                      && f.first == sb.first && f.start == sb.start
                      && f.sequence == sb.sequence);
          have = true;
        }
    }
  else
    FUZZ_CHECK (
        size < JBD2_SUPERBLOCK_BYTES
        || memcmp (data, "\xC0\x3B\x39\x98", 4) != 0
        || (data[4] | data[5] | data[6]) != 0
        || (data[7] != JBD2_SUPERBLOCK_V1 && data[7] != JBD2_SUPERBLOCK_V2));

  for (int fc = 0; fc < 2; fc++)
    if (jbd2_features_from_raw (data, size, fc, &g) == 0)
      {
        check_features (&g);
        FUZZ_CHECK (g.has_uuid);
        FUZZ_CHECK (g.csum_seed
                    == ext2fs_crc32c_le (~0u, g.uuid, sizeof g.uuid));
        FUZZ_CHECK (memcmp (g.uuid, data + 0x30, sizeof g.uuid) == 0);
        if (fc)
          FUZZ_CHECK (g.fast_commit);
        if (!have || !f.has_uuid)
          f = g;
        have = true;
      }

  if (have)
    {
      struct jfeatures h = f;
      uint32_t n = size > 0x57 ? fuzz_le16 (data + 0x56) : 0;

      off = f.blocksize;
      /* Fast commit turned on afterwards: all or nothing. */
      if (jbd2_features_set_fast_commit (&h, n) == 0)
        {
          check_features (&h);
          FUZZ_CHECK (h.fast_commit);
          FUZZ_CHECK (h.num_fc_blks == (n ? n : 256));
        }
      else
        FUZZ_CHECK (h.fast_commit == f.fast_commit
                    && h.num_fc_blks == f.num_fc_blks);
    }
  else
    {
      if (size < FUZZ_FEATURES_BYTES)
        return 0;
      fuzz_features (data, &f);
      check_features (&f);
      off = FUZZ_FEATURES_BYTES;
    }
  if (off <= size)
    fuzz_block (&f, data + off, size - off);
  return 0;
}
