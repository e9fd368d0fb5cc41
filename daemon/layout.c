/* SPDX-License-Identifier: BSD-3-Clause */
/* layout.c --- discover the ext2/3/4 filesystems on a device and where
 * their inode tables, superblock, descriptors and journal live.
 *
 * For each candidate region (partition.h) the raw superblock is first
 * checked by hand (cheap bounds that keep libext2fs away from absurd
 * geometry), then the filesystem is opened read-only with libext2fs
 * through ext2io_manager, and every location it reports is checked to
 * lie inside the filesystem without overlapping other metadata.  The
 * result is copied into plain arrays and the ext2_filsys is closed.
 * Journal block 0 is read and parsed as a jbd2 superblock (jbd2.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <et/com_err.h>
#include <ext2fs/ext2_err.h>
#include <ext2fs/ext2fs.h>

#include "byteorder.h"
#include "ext2io.h"
#include "layout.h"
#include "log.h"
#include "ondisk.h"
#include "partition.h"
#include "vector.h"

/* libext2fs has no locking of its own; all use of it goes through here. */
static pthread_mutex_t ext2_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t et_once = PTHREAD_ONCE_INIT;

static bool et_loaded;

static void
et_init (void)
{
  /* add_error_table, unlike initialize_ext2_error_table, can be undone
   * by remove_error_table.
   */
  et_loaded = add_error_table (&et_ext2_error_table) == 0;
}

void
layout_unload (void)
{
  /* The table registration is the one allocation libext2fs keeps: give
   * it back before the plugin is unloaded.
   */
  if (et_loaded)
    remove_error_table (&et_ext2_error_table);
  et_loaded = false;
}

/* Growable arrays of the extent types and of filesystems. */
DEFINE_VECTOR (ext_vec, struct dev_extent)
DEFINE_VECTOR (run_vec, struct itable_run)
DEFINE_VECTOR (jext_vec, struct journal_extent)
DEFINE_VECTOR (fs_vec, struct ext4_fs)
DEFINE_VECTOR (off_vec, uint64_t)

static bool
is_pow2 (uint64_t x)
{
  return x && !(x & (x - 1));
}

/* All three extent structs begin with uint64_t off, len. */
static int
cmp_off (const void *a, const void *b)
{
  uint64_t x, y;
  memcpy (&x, a, sizeof x);
  memcpy (&y, b, sizeof y);
  return x < y ? -1 : x > y;
}

/* Sort and merge overlapping or adjacent extents in place. */
static void
merge_extents (struct ext_vec *a)
{
  size_t w = 0;

  if (a->n == 0)
    return;
  qsort (a->v, a->n, sizeof *a->v, cmp_off);
  for (size_t i = 1; i < a->n; i++)
    {
      struct dev_extent *p = &a->v[w], *e = &a->v[i];
      if (e->off <= p->off + p->len)
        {
          if (e->off + e->len > p->off + p->len)
            p->len = e->off + e->len - p->off;
        }
      else
        a->v[++w] = *e;
    }
  a->n = w + 1;
}

/* Index of the first extent (sorted, disjoint) ending after off, among
 * n of size stride at base.
 */
static size_t
first_ending_after (const void *base, size_t n, size_t stride, uint64_t off)
{
  size_t lo = 0, hi = n;

  while (lo < hi)
    {
      size_t mid = lo + (hi - lo) / 2;
      uint64_t e[2];
      memcpy (e, (const char *)base + mid * stride, sizeof e);
      if (e[0] + e[1] <= off)
        lo = mid + 1;
      else
        hi = mid;
    }
  return lo;
}

static bool
overlaps (const void *base, size_t n, size_t stride, uint64_t off, uint64_t len)
{
  size_t i;
  uint64_t e[2];

  if (len == 0)
    return false;
  i = first_ending_after (base, n, stride, off);
  if (i == n)
    return false;
  memcpy (e, (const char *)base + i * stride, sizeof e);
  return e[0] < off + len;
}

/* Where the candidate region is, for notices. */
static void
describe (const struct part *p, char *buf, size_t len)
{
  static const char *const names[] = { [PART_WHOLE] = "device",
                                       [PART_MBR] = "MBR partition",
                                       [PART_LOGICAL] = "logical partition",
                                       [PART_GPT] = "GPT partition" };

  if (p->scheme == PART_WHOLE)
    snprintf (buf, len, "whole device");
  else
    snprintf (buf, len, "%s %u at offset %" PRIu64, names[p->scheme], p->index,
              p->off);
}

/* Superblock facts checked by hand before libext2fs sees them. */
struct sb_geom
{
  uint32_t block_size, inode_size, ipg, bpg, first_data_block, groups;
  uint64_t blocks;
  uint64_t desc_blocks, reserved_gdt;
  bool meta_bg;
};

/* Cheap sanity checks on the raw primary superblock.  Returns NULL if
 * it looks sound, else why not.
 */
/* Blocks per group against what one bitmap block describes (in
 * clusters with bigalloc).
 */
static bool
group_blocks_ok (const unsigned char *sb, const struct sb_geom *g,
                 uint32_t log_bs, uint32_t ro_compat)
{
  uint32_t log_cs = le32 (sb + SB_AT (s_log_cluster_size)),
           cpg = le32 (sb + SB_AT (s_clusters_per_group));

  if (!(ro_compat & EXT4_FEATURE_RO_COMPAT_BIGALLOC))
    return g->bpg <= 8 * g->block_size;
  return log_cs >= log_bs && log_cs - log_bs <= 16 && cpg != 0
         && cpg <= 8 * g->block_size
         && (uint64_t)g->bpg == (uint64_t)cpg << (log_cs - log_bs);
}

static const char *
sb_check (const unsigned char *sb, uint64_t region_len, struct sb_geom *g)
{
  uint32_t log_bs = le32 (sb + SB_AT (s_log_block_size));
  uint32_t rev = le32 (sb + SB_AT (s_rev_level));
  uint32_t incompat = le32 (sb + SB_AT (s_feature_incompat)),
           ro_compat = le32 (sb + SB_AT (s_feature_ro_compat));

  if (le16 (sb + SB_AT (s_magic)) != EXT2_SUPER_MAGIC)
    return "no ext2/3/4 superblock (bad magic)";
  if (incompat & EXT3_FEATURE_INCOMPAT_JOURNAL_DEV)
    return "external journal device, not a filesystem";
  /* The classifier reads the inode's OS-dependent fields (i_version,
   * the checksum) as Linux lays them out.
   */
  if (le32 (sb + SB_AT (s_creator_os)) != EXT2_OS_LINUX)
    return "created by an OS other than Linux (s_creator_os), whose inode "
           "fields the classifier does not know";
  if (log_bs > 6)
    return "block size outside 1 KiB..64 KiB";
  g->block_size = 1024u << log_bs;
  if (rev == EXT2_GOOD_OLD_REV)
    g->inode_size = EXT2_GOOD_OLD_INODE_SIZE;
  else
    {
      g->inode_size = le16 (sb + SB_AT (s_inode_size));
      if (le32 (sb + SB_AT (s_first_ino)) < EXT2_GOOD_OLD_FIRST_INO)
        return "first inode number below 11";
    }
  if (!is_pow2 (g->inode_size) || g->inode_size < EXT2_GOOD_OLD_INODE_SIZE
      || g->inode_size > g->block_size)
    return "inode size not a power of two between 128 and the block size";
  g->blocks = le32 (sb + SB_AT (s_blocks_count));
  if (incompat & EXT4_FEATURE_INCOMPAT_64BIT)
    g->blocks |= (uint64_t)le32 (sb + SB_AT (s_blocks_count_hi)) << 32;
  if (g->blocks == 0 || g->blocks > region_len / g->block_size)
    return "block count beyond the end of the partition or device";
  g->first_data_block = le32 (sb + SB_AT (s_first_data_block));
  if (g->first_data_block > 1 || g->first_data_block >= g->blocks)
    return "bad first data block";
  g->bpg = le32 (sb + SB_AT (s_blocks_per_group));
  if (!group_blocks_ok (sb, g, log_bs, ro_compat))
    return (ro_compat & EXT4_FEATURE_RO_COMPAT_BIGALLOC)
               ? "bad bigalloc cluster geometry"
               : "blocks per group larger than a bitmap block can describe";
  if (g->bpg == 0)
    return "zero blocks per group";
  g->ipg = le32 (sb + SB_AT (s_inodes_per_group));
  if (g->ipg == 0 || g->ipg > 8 * g->block_size)
    return "inodes per group outside 1..8*block size";
  if (g->ipg % (g->block_size / g->inode_size) != 0)
    return "inodes per group not a whole number of inode-table blocks";
  uint64_t groups = (g->blocks - g->first_data_block + g->bpg - 1) / g->bpg;
  if (groups == 0 || groups > UINT32_MAX)
    return "bad group count";
  g->groups = (uint32_t)groups;
  if ((uint64_t)le32 (sb + SB_AT (s_inodes_count)) != groups * g->ipg)
    return "inode count inconsistent with group count";
  uint32_t desc_size = EXT2_MIN_DESC_SIZE;
  if (incompat & EXT4_FEATURE_INCOMPAT_64BIT)
    {
      desc_size = le16 (sb + SB_AT (s_desc_size));
      if (desc_size < EXT2_MIN_DESC_SIZE_64BIT || desc_size > EXT2_MAX_DESC_SIZE
          || !is_pow2 (desc_size) || desc_size > g->block_size)
        return "bad group descriptor size";
    }
  g->desc_blocks
      = (groups + g->block_size / desc_size - 1) / (g->block_size / desc_size);
  g->meta_bg = (incompat & EXT2_FEATURE_INCOMPAT_META_BG) != 0;
  if (g->meta_bg && le32 (sb + SB_AT (s_first_meta_bg)) > g->desc_blocks)
    return "first meta block group beyond the descriptor blocks";
  g->reserved_gdt = g->meta_bg ? 0 : le16 (sb + SB_AT (s_reserved_gdt_blocks));
  if (g->first_data_block + 1
          + (g->meta_bg ? le32 (sb + SB_AT (s_first_meta_bg)) : g->desc_blocks)
          + g->reserved_gdt
      > g->blocks)
    return "group descriptors beyond the end of the filesystem";
  return NULL;
}

/* Incompatible features that only ext4 has, to name the filesystem in
 * the debug log.
 */
#define EXT4_ONLY_INCOMPAT                                                     \
  (EXT3_FEATURE_INCOMPAT_EXTENTS | EXT4_FEATURE_INCOMPAT_64BIT                 \
   | EXT4_FEATURE_INCOMPAT_FLEX_BG)

/* State while probing one region. */
struct probe
{
  const struct part *part;
  char where[96];
  struct ext2io_source src;
  ext2_filsys efs;
  struct ext4_fs fs;
  struct run_vec itable;
  struct ext_vec meta;
  struct jext_vec journal;
  struct off_vec desc;
  int err;      /* -errno to return (ENOMEM, read error) */
  bool corrupt; /* set with a notice given */
};

static void
probe_release (struct probe *p)
{
  free (p->itable.v);
  free (p->meta.v);
  free (p->journal.v);
  free (p->desc.v);
  p->itable.v = NULL;
  p->meta.v = NULL;
  p->journal.v = NULL;
  p->desc.v = NULL;
}

/* Map a libext2fs failure: -errno for a read error or ENOMEM, else 1
 * with a notice (the region is pass-through).
 */
static int
ext2_failure (struct probe *p, const char *what, errcode_t e)
{
  if (p->src.read_errno)
    return -p->src.read_errno;
  if (e == EXT2_ET_NO_MEMORY || e == ENOMEM)
    return -ENOMEM;
  log_notice ("%s: %s: %s%s; serving it as pass-through", p->where, what,
              error_message (e),
              p->src.refused ? " (a read past its end was refused)" : "");
  return 1;
}

static int corrupt (struct probe *p, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

static int
corrupt (struct probe *p, const char *fmt, ...)
{
  char msg[200];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  log_notice ("%s: %s; serving it as pass-through", p->where, msg);
  return 1;
}

/* Is [blk, blk+n) inside the filesystem's blocks? */
static bool
blocks_inside (const struct probe *p, uint64_t blk, uint64_t n)
{
  uint64_t total = ext2fs_blocks_count (p->efs->super);
  return n > 0 && blk < total && n <= total - blk;
}

static int
add_meta_blocks (struct probe *p, uint64_t blk, uint64_t n)
{
  uint64_t bs = p->efs->blocksize;
  if (!blocks_inside (p, blk, n))
    return corrupt (
        p, "metadata block %" PRIu64 " (+%" PRIu64 ") outside the filesystem",
        blk, n);
  return ext_vec_append (
      &p->meta,
      (struct dev_extent){ .off = p->fs.start + blk * bs, .len = n * bs });
}

static int
collect_meta (struct probe *p)
{
  ext2_filsys efs = p->efs;
  struct ext2_super_block *sb = efs->super;
  uint64_t sb_blk = efs->blocksize == 1024 ? 1 : 0;
  int r;

  r = add_meta_blocks (p, sb_blk, 1);
  for (dgrp_t i = 0; r == 0 && i < efs->desc_blocks; i++)
    {
      uint64_t blk
          = ext2fs_descriptor_block_loc2 (efs, sb->s_first_data_block, i);
      r = add_meta_blocks (p, blk, 1);
      if (r == 0)
        r = off_vec_append (&p->desc, p->fs.start + blk * efs->blocksize);
    }
  if (r == 0 && !ext2fs_has_feature_meta_bg (sb)
      && sb->s_reserved_gdt_blocks > 0)
    r = add_meta_blocks (
        p,
        ext2fs_descriptor_block_loc2 (efs, sb->s_first_data_block, 0)
            + efs->desc_blocks,
        sb->s_reserved_gdt_blocks);
  return r;
}

static int
collect_itable (struct probe *p)
{
  ext2_filsys efs = p->efs;
  uint64_t bs = efs->blocksize;
  uint64_t itb = (uint64_t)p->fs.inodes_per_group * p->fs.inode_size / bs;
  size_t w = 0;
  int r;

  for (dgrp_t g = 0; g < efs->group_desc_count; g++)
    {
      uint64_t blk = ext2fs_inode_table_loc (efs, g);
      if (blk == 0 || !blocks_inside (p, blk, itb))
        return corrupt (p,
                        "group %u inode table at block %" PRIu64
                        " outside the filesystem",
                        (unsigned)g, blk);
      r = run_vec_append (
          &p->itable,
          (struct itable_run){ .off = p->fs.start + blk * bs,
                               .len = itb * bs,
                               .first_ino = g * p->fs.inodes_per_group + 1 });
      if (r < 0)
        return r;
    }
  if (p->itable.n == 0)
    return 0;
  qsort (p->itable.v, p->itable.n, sizeof *p->itable.v, cmp_off);
  for (size_t i = 1; i < p->itable.n; i++)
    {
      struct itable_run *a = &p->itable.v[w], *b = &p->itable.v[i];
      if (b->off < a->off + a->len)
        return corrupt (p,
                        "inode tables overlap at offset %" PRIu64 " (inode %u)",
                        b->off, b->first_ino);
      if (b->off == a->off + a->len
          && (uint64_t)a->first_ino + a->len / p->fs.inode_size == b->first_ino)
        a->len += b->len;
      else
        p->itable.v[++w] = *b;
    }
  p->itable.n = w + 1;
  return 0;
}

struct jwalk
{
  struct probe *p;
  bool bad;
  uint64_t bad_blk;
};

static int
journal_block (ext2_filsys efs, blk64_t *blocknr, e2_blkcnt_t blockcnt,
               blk64_t ref_blk, int ref_offset, void *priv)
{
  struct jwalk *w = priv;
  struct probe *p = w->p;
  uint64_t bs = efs->blocksize, blk = *blocknr;
  int r;

  (void)ref_blk;
  (void)ref_offset;
  if (!blocks_inside (p, blk, 1))
    {
      w->bad = true;
      w->bad_blk = blk;
      return BLOCK_ABORT;
    }
  if (blockcnt < 0)
    r = ext_vec_append (
        &p->meta,
        (struct dev_extent){ .off = p->fs.start + blk * bs, .len = bs });
  else if ((uint64_t)blockcnt >= p->fs.journal_blocks)
    return 0; /* past i_size: not part of the journal */
  else
    {
      struct journal_extent *last
          = p->journal.n ? &p->journal.v[p->journal.n - 1] : NULL;
      uint64_t off = p->fs.start + blk * bs;
      if (last && last->off + last->len == off
          && last->lblk + last->len / bs == (uint64_t)blockcnt)
        {
          last->len += bs;
          return 0;
        }
      r = jext_vec_append (
          &p->journal,
          (struct journal_extent){ .off = off, .len = bs, .lblk = blockcnt });
    }
  if (r < 0)
    {
      p->err = r;
      return BLOCK_ABORT;
    }
  return 0;
}

static int
collect_journal (struct probe *p)
{
  ext2_filsys efs = p->efs;
  struct ext2_super_block *sb = efs->super;
  struct ext2_inode inode;
  struct jwalk w = { .p = p };
  errcode_t e;

  p->fs.has_journal = ext2fs_has_feature_journal (sb);
  if (!p->fs.has_journal)
    return 0;
  if (sb->s_journal_inum == 0)
    {
      p->fs.journal_external = true;
      return 0;
    }
  if (sb->s_journal_inum >= p->fs.first_ino
      || sb->s_journal_inum > sb->s_inodes_count)
    return corrupt (p, "journal inode %u is not a reserved inode",
                    sb->s_journal_inum);
  e = ext2fs_read_inode (efs, sb->s_journal_inum, &inode);
  if (e)
    return ext2_failure (p, "reading the journal inode", e);
  if (!LINUX_S_ISREG (inode.i_mode) || inode.i_links_count == 0)
    return corrupt (p, "journal inode %u is not a regular file (mode %#o)",
                    sb->s_journal_inum, (unsigned)inode.i_mode);
  p->fs.journal_blocks = EXT2_I_SIZE (&inode) / efs->blocksize;
  if (p->fs.journal_blocks == 0)
    return corrupt (p, "journal inode %u is empty", sb->s_journal_inum);
  e = ext2fs_block_iterate3 (efs, sb->s_journal_inum, BLOCK_FLAG_READ_ONLY,
                             NULL, journal_block, &w);
  if (p->err)
    return p->err;
  if (w.bad)
    return corrupt (p, "journal block %" PRIu64 " outside the filesystem",
                    w.bad_blk);
  if (e)
    return ext2_failure (p, "mapping the journal", e);
  if (p->journal.n == 0 || p->journal.v[0].lblk != 0)
    return corrupt (p, "journal block 0 is not mapped");

  qsort (p->journal.v, p->journal.n, sizeof *p->journal.v, cmp_off);
  for (size_t i = 1; i < p->journal.n; i++)
    if (p->journal.v[i].off < p->journal.v[i - 1].off + p->journal.v[i - 1].len)
      return corrupt (p, "journal blocks mapped twice at offset %" PRIu64,
                      p->journal.v[i].off);
  return 0;
}

/* Read the jbd2 superblock at the device offset of journal block 0: it
 * must have the fs block size bs.
 */
static int
read_jsb_at (layout_read_fn read, void *opaque, uint64_t off, uint32_t bs,
             struct jbd2_sb *out)
{
  unsigned char b[JBD2_SUPERBLOCK_BYTES];
  int r = read (opaque, b, sizeof b, off);
  if (r < 0)
    return r;
  r = jbd2_sb_parse (b, sizeof b, out);
  if (r < 0)
    return r;
  out->dev_off = off;
  if (out->blocksize != bs)
    return -EINVAL;
  return 0;
}

/* Check that no inode-table run overlaps meta or the journal, and the
 * journal does not overlap meta.
 */
static int
check_disjoint (struct probe *p)
{
  for (size_t i = 0; i < p->itable.n; i++)
    {
      const struct itable_run *r = &p->itable.v[i];
      if (overlaps (p->meta.v, p->meta.n, sizeof *p->meta.v, r->off, r->len))
        return corrupt (p,
                        "inode table at offset %" PRIu64
                        " (inode %u) overlaps the superblock or "
                        "group descriptors",
                        r->off, r->first_ino);
      if (overlaps (p->journal.v, p->journal.n, sizeof *p->journal.v, r->off,
                    r->len))
        return corrupt (p,
                        "inode table at offset %" PRIu64
                        " (inode %u) overlaps the journal",
                        r->off, r->first_ino);
    }
  for (size_t i = 0; i < p->journal.n; i++)
    if (overlaps (p->meta.v, p->meta.n, sizeof *p->meta.v, p->journal.v[i].off,
                  p->journal.v[i].len))
      return corrupt (
          p, "journal at offset %" PRIu64 " overlaps filesystem metadata",
          p->journal.v[i].off);
  return 0;
}

/* Probe one region with libext2fs (lock held).  Returns 0 with p->fs
 * filled, 1 if the region is pass-through (notice given), or -errno.
 */
static int
probe_ext2fs (struct probe *p, layout_read_fn read, void *opaque)
{
  char name[64];
  errcode_t e;
  int r;

  p->src = (struct ext2io_source){
    .read = read, .opaque = opaque, .base = p->part->off, .limit = p->part->len
  };
  r = ext2io_format_name (&p->src, name, sizeof name);
  if (r < 0)
    return r;
  e = ext2fs_open2 (name, NULL, EXT2_FLAG_64BITS | EXT2_FLAG_SKIP_MMP, 0, 0,
                    ext2io_manager, &p->efs);
  if (e)
    {
      p->efs = NULL;
      return ext2_failure (p, "cannot open", e);
    }

  ext2_filsys efs = p->efs;
  struct ext2_super_block *sb = efs->super;
  struct ext4_fs *fs = &p->fs;

  fs->start = p->part->off;
  fs->part_len = p->part->len;
  fs->block_size = efs->blocksize;
  fs->size = ext2fs_blocks_count (sb) * (uint64_t)efs->blocksize;
  fs->inode_size = EXT2_INODE_SIZE (sb);
  fs->inodes_per_group = sb->s_inodes_per_group;
  fs->group_count = efs->group_desc_count;
  fs->first_ino = EXT2_FIRST_INO (sb);
  fs->feature_compat = sb->s_feature_compat;
  fs->feature_incompat = sb->s_feature_incompat;
  fs->feature_ro_compat = sb->s_feature_ro_compat;
  fs->extra_isize_min = sb->s_min_extra_isize;
  fs->desc_size = EXT2_DESC_SIZE (sb);
  fs->csum_seed = ext2fs_has_feature_metadata_csum (sb) ? efs->csum_seed : 0;
  if (fs->size > fs->part_len)
    return corrupt (p,
                    "filesystem of %" PRIu64 " bytes larger than its "
                    "region (%" PRIu64 " bytes)",
                    fs->size, fs->part_len);

  r = collect_meta (p);
  if (r == 0)
    r = collect_itable (p);
  if (r == 0)
    r = collect_journal (p);
  if (r != 0)
    return r;
  merge_extents (&p->meta);
  r = check_disjoint (p);
  if (r != 0)
    return r;

  if (p->journal.n)
    {
      struct ext4_fs view = *fs;
      view.journal = p->journal.v;
      view.n_journal = p->journal.n;
      r = read_jsb_at (read, opaque, layout_journal_off (&view, 0),
                       fs->block_size, &fs->jsb);
      if (r == -EINVAL)
        log_notice ("%s: no valid jbd2 superblock in journal block 0 "
                    "(re-read when it is written)",
                    p->where);
      else if (r < 0)
        return r;
      fs->jsb_valid = r == 0;
      if (!fs->jsb_valid)
        memset (&fs->jsb, 0, sizeof fs->jsb);
    }
  return 0;
}

/* Probe one candidate region.  Returns 0 with *fs filled (ownership of
 * its arrays passes to the caller), 1 for pass-through, or -errno.
 * For pass-through, *guard is what to watch beyond the superblock.
 */
static int
probe_region (const struct part *part, layout_read_fn read, void *opaque,
              struct ext4_fs *fs, struct dev_extent *guard)
{
  struct probe p = { .part = part };
  unsigned char sb[SB_SIZE];
  struct sb_geom g;
  const char *why;
  int r;

  describe (part, p.where, sizeof p.where);
  *guard = (struct dev_extent){ 0, 0 };
  if (part->len < SB_OFFSET + SB_SIZE)
    {
      log_notice ("%s: too small for a filesystem; serving it as "
                  "pass-through",
                  p.where);
      return 1;
    }
  r = read (opaque, sb, sizeof sb, part->off + SB_OFFSET);
  if (r < 0)
    return r;
  why = sb_check (sb, part->len, &g);
  if (why)
    {
      log_notice ("%s: %s; serving it as pass-through", p.where, why);
      return 1;
    }
  /* If the superblock is sane but the rest fails, also watch where its
   * primary descriptors should be, so that their repair is noticed (one
   * spare block covers the shift of 1 KiB bigalloc filesystems).
   */
  guard->off = part->off + (uint64_t)g.first_data_block * g.block_size;
  guard->len = (uint64_t)g.block_size
               * (2 + (g.meta_bg ? 1 : g.desc_blocks) + g.reserved_gdt);
  if (guard->len > part->len - (guard->off - part->off))
    guard->len = part->len - (guard->off - part->off);

  pthread_once (&et_once, et_init);
  pthread_mutex_lock (&ext2_lock);
  r = probe_ext2fs (&p, read, opaque);
  if (p.efs)
    ext2fs_close_free (&p.efs);
  pthread_mutex_unlock (&ext2_lock);

  if (r != 0)
    {
      probe_release (&p);
      return r;
    }
  *fs = p.fs;
  fs->itable = p.itable.v;
  fs->n_itable = p.itable.n;
  fs->meta = p.meta.v;
  fs->n_meta = p.meta.n;
  fs->journal = p.journal.v;
  fs->n_journal = p.journal.n;
  fs->desc = p.desc.v;
  fs->n_desc = p.desc.n;
  memcpy (fs->sb, sb, sizeof fs->sb);
  log_debug ("%s: ext%c filesystem, %" PRIu64 " bytes, block size %u, "
             "inode size %u, %u groups, %zu inode-table runs, %zu journal "
             "extents",
             p.where,
             fs->feature_incompat & EXT4_ONLY_INCOMPAT ? '4'
             : fs->has_journal                         ? '3'
                                                       : '2',
             fs->size, fs->block_size, fs->inode_size, fs->group_count,
             fs->n_itable, fs->n_journal);
  return 0;
}

static void
fs_release (struct ext4_fs *fs)
{
  free (fs->itable);
  free (fs->meta);
  free (fs->journal);
  free (fs->desc);
}

/* What discovery builds: the filesystems found and every region to
 * watch.
 */
struct discovery
{
  struct fs_vec fsv;
  struct ext_vec watch;
};

static void
discovery_release (struct discovery *d)
{
  for (size_t i = 0; i < d->fsv.n; i++)
    fs_release (&d->fsv.v[i]);
  fs_vec_reset (&d->fsv);
  ext_vec_reset (&d->watch);
}

/* Watch the superblock location of the region that starts at off. */
static int
watch_sb (struct discovery *d, uint64_t off)
{
  return ext_vec_append (
      &d->watch, (struct dev_extent){ .off = off + SB_OFFSET, .len = SB_SIZE });
}

/* Keep fs (its arrays pass to d, or are freed).  Partitions are sorted;
 * a filesystem that overlaps the previous one makes both pass-through.
 */
static int
keep_fs (struct discovery *d, struct ext4_fs *fs)
{
  struct ext4_fs *prev = d->fsv.n ? &d->fsv.v[d->fsv.n - 1] : NULL;
  int r;

  if (prev && fs->start < prev->start + prev->size)
    {
      log_notice ("filesystems at offsets %" PRIu64 " and %" PRIu64
                  " overlap; serving both as pass-through",
                  prev->start, fs->start);
      r = watch_sb (d, prev->start);
      if (r == 0)
        r = watch_sb (d, fs->start);
      fs_release (prev);
      fs_release (fs);
      d->fsv.n--;
      return r;
    }
  r = fs_vec_append (&d->fsv, *fs);
  if (r < 0)
    fs_release (fs);
  return r;
}

/* Probe one candidate region: keep its filesystem, or watch where one
 * would be.  Returns 0 or -errno.
 */
static int
discover_region (struct discovery *d, const struct part *part,
                 layout_read_fn read, void *opaque)
{
  struct ext4_fs fs;
  struct dev_extent guard;
  int r;

  r = probe_region (part, read, opaque, &fs, &guard);
  if (r < 0)
    return r;
  if (r == 0)
    return keep_fs (d, &fs);
  r = 0;
  if (part->len >= SB_OFFSET + SB_SIZE)
    r = watch_sb (d, part->off);
  if (r == 0 && guard.len)
    r = ext_vec_append (&d->watch, guard);
  return r;
}

/* Watch every fs's meta too and hand the arrays to a new layout. */
static int
discovery_finish (struct discovery *d, uint64_t dev_size, struct layout **out)
{
  struct layout *L;
  int r = 0;

  for (size_t i = 0; i < d->fsv.n && r == 0; i++)
    for (size_t j = 0; j < d->fsv.v[i].n_meta && r == 0; j++)
      r = ext_vec_append (&d->watch, d->fsv.v[i].meta[j]);
  if (r < 0)
    return r;
  merge_extents (&d->watch);
  L = calloc (1, sizeof *L);
  if (!L)
    return -ENOMEM;
  L->fs = d->fsv.v;
  L->n_fs = d->fsv.n;
  L->dev_size = dev_size;
  L->watch = d->watch.v;
  L->n_watch = d->watch.n;
  if (L->n_fs == 0)
    log_debug ("no usable ext2/3/4 filesystem found: the device is served "
               "as plain pass-through");
  *out = L;
  return 0;
}

/* The table sectors of t, sorted and merged (ownership passes). */
static struct dev_extent *
table_sectors (struct part_table *t, size_t *n)
{
  struct ext_vec v
      = { .v = t->sectors, .n = t->n_sectors, .cap = t->n_sectors };

  merge_extents (&v);
  t->sectors = NULL;
  t->n_sectors = 0;
  *n = v.n;
  return v.v;
}

int
layout_discover (layout_read_fn read, void *opaque, uint64_t dev_size,
                 struct layout **out)
{
  struct part_table t;
  struct discovery d = { 0 };
  int r;

  *out = NULL;
  r = partition_scan_table (read, opaque, dev_size, &t);
  if (r < 0)
    return r;
  for (size_t i = 0; i < t.n_sectors && r == 0; i++)
    r = ext_vec_append (&d.watch, t.sectors[i]);
  for (size_t i = 0; i < t.n_parts && r == 0; i++)
    r = discover_region (&d, &t.parts[i], read, opaque);
  if (r == 0)
    r = discovery_finish (&d, dev_size, out);
  if (r < 0)
    {
      discovery_release (&d);
      partition_table_free (&t);
      return r;
    }
  (*out)->parts = t.parts;
  (*out)->n_parts = t.n_parts;
  (*out)->ptable = table_sectors (&t, &(*out)->n_ptable);
  return 0;
}

void
layout_free (struct layout *L)
{
  if (!L)
    return;
  for (size_t i = 0; i < L->n_fs; i++)
    fs_release (&L->fs[i]);
  free (L->fs);
  free (L->watch);
  free (L->parts);
  free (L->ptable);
  free (L);
}

const struct ext4_fs *
layout_fs_at (const struct layout *L, uint64_t off)
{
  size_t lo = 0, hi = L->n_fs;

  while (lo < hi)
    {
      size_t mid = lo + (hi - lo) / 2;
      const struct ext4_fs *fs = &L->fs[mid];
      if (off < fs->start)
        hi = mid;
      else if (off - fs->start >= fs->size)
        lo = mid + 1;
      else
        return fs;
    }
  return NULL;
}

const struct itable_run *
layout_itable_at (const struct ext4_fs *fs, uint64_t off)
{
  size_t i
      = first_ending_after (fs->itable, fs->n_itable, sizeof *fs->itable, off);
  if (i < fs->n_itable && fs->itable[i].off <= off)
    return &fs->itable[i];
  return NULL;
}

uint32_t
layout_ino_at (const struct ext4_fs *fs, uint64_t off)
{
  const struct itable_run *r = layout_itable_at (fs, off);
  if (!r)
    return 0;
  return r->first_ino + (uint32_t)((off - r->off) / fs->inode_size);
}

bool
layout_overlaps_watch (const struct layout *L, uint64_t off, uint64_t len)
{
  return overlaps (L->watch, L->n_watch, sizeof *L->watch, off, len);
}

bool
layout_overlaps_meta (const struct ext4_fs *fs, uint64_t off, uint64_t len)
{
  return overlaps (fs->meta, fs->n_meta, sizeof *fs->meta, off, len);
}

bool
layout_overlaps_journal (const struct ext4_fs *fs, uint64_t off, uint64_t len)
{
  return overlaps (fs->journal, fs->n_journal, sizeof *fs->journal, off, len);
}

uint64_t
layout_journal_off (const struct ext4_fs *fs, uint64_t lblk)
{
  uint64_t bs = fs->block_size;

  /* Extents are sorted by device offset, not lblk: scan (few). */
  for (size_t i = 0; i < fs->n_journal; i++)
    {
      const struct journal_extent *e = &fs->journal[i];
      if (lblk >= e->lblk && lblk - e->lblk < e->len / bs)
        return e->off + (lblk - e->lblk) * bs;
    }
  return UINT64_MAX;
}

int
layout_read_jsb (const struct ext4_fs *fs, layout_read_fn read, void *opaque,
                 struct jbd2_sb *out)
{
  uint64_t off;

  if (!fs->has_journal || fs->journal_external || fs->n_journal == 0)
    return -ENOENT;
  off = layout_journal_off (fs, 0);
  if (off == UINT64_MAX)
    return -ENOENT;
  return read_jsb_at (read, opaque, off, fs->block_size, out);
}

const struct journal_extent *
layout_journal_at (const struct ext4_fs *fs, uint64_t off)
{
  size_t i = first_ending_after (fs->journal, fs->n_journal,
                                 sizeof *fs->journal, off);
  if (i < fs->n_journal && fs->journal[i].off <= off)
    return &fs->journal[i];
  return NULL;
}

uint64_t
layout_journal_lblk (const struct ext4_fs *fs, uint64_t off)
{
  const struct journal_extent *x = layout_journal_at (fs, off);

  if (!x)
    return UINT64_MAX;
  return x->lblk + (off - x->off) / fs->block_size;
}

uint64_t
layout_next_region (const struct ext4_fs *fs, uint64_t off)
{
  size_t i
      = first_ending_after (fs->itable, fs->n_itable, sizeof *fs->itable, off);
  size_t j = first_ending_after (fs->journal, fs->n_journal,
                                 sizeof *fs->journal, off);
  uint64_t next = fs->start + fs->size;

  if (i < fs->n_itable && fs->itable[i].off > off && fs->itable[i].off < next)
    next = fs->itable[i].off;
  if (j < fs->n_journal && fs->journal[j].off > off
      && fs->journal[j].off < next)
    next = fs->journal[j].off;
  return next;
}

/* layout_same_itables and layout_same_journal have the same shape over
 * two extent types: each compares field by field, never with memcmp,
 * because the extent structs have padding.
 */
bool
layout_same_itables (const struct layout *a, const struct layout *b)
{
  if (a->n_fs != b->n_fs)
    return false;
  for (size_t i = 0; i < a->n_fs; i++)
    {
      const struct ext4_fs *x = &a->fs[i], *y = &b->fs[i];

      if (x->start != y->start || x->block_size != y->block_size
          || x->inode_size != y->inode_size || x->n_itable != y->n_itable)
        return false;
      /* Field by field: struct itable_run has padding, which memcmp
       * would compare too.
       */
      for (size_t k = 0; k < x->n_itable; k++)
        if (x->itable[k].off != y->itable[k].off
            || x->itable[k].len != y->itable[k].len
            || x->itable[k].first_ino != y->itable[k].first_ino)
          return false;
    }
  return true;
}

bool
layout_same_journal (const struct ext4_fs *a, const struct ext4_fs *b)
{
  if (a->start != b->start || a->block_size != b->block_size
      || a->n_journal != b->n_journal)
    return false;
  for (size_t k = 0; k < a->n_journal; k++)
    if (a->journal[k].off != b->journal[k].off
        || a->journal[k].len != b->journal[k].len
        || a->journal[k].lblk != b->journal[k].lblk)
      return false;
  return true;
}

/* ---- checking a client write against the layout ---------------------- */

/* Superblock fields that define the layout or what the engine reads
 * from the filesystem, as (offset, size) pairs; the three feature words
 * are compared under the masks below instead.  Everything else (times,
 * free counts, mount counts, state, s_last_mounted, s_kbytes_written,
 * the orphan list, the checksum) may change freely.
 */
static const struct
{
  uint16_t off, len;
} sb_fields[] = {
#define SB_FIELD(f) { SB_AT (f), SB_LEN (f) }
  SB_FIELD (s_inodes_count),
  SB_FIELD (s_blocks_count),
  SB_FIELD (s_first_data_block),
  SB_FIELD (s_log_block_size),
  SB_FIELD (s_log_cluster_size),
  SB_FIELD (s_blocks_per_group),
  SB_FIELD (s_clusters_per_group),
  SB_FIELD (s_inodes_per_group),
  SB_FIELD (s_magic),
  SB_FIELD (s_creator_os),
  SB_FIELD (s_rev_level),
  SB_FIELD (s_first_ino),
  SB_FIELD (s_inode_size),
  SB_FIELD (s_block_group_nr),
  /* The checksum seed without csum_seed. */
  SB_FIELD (s_uuid),
  SB_FIELD (s_reserved_gdt_blocks),
  SB_FIELD (s_journal_inum),
  SB_FIELD (s_desc_size),
  SB_FIELD (s_first_meta_bg),
  SB_FIELD (s_blocks_count_hi),
  SB_FIELD (s_min_extra_isize),
  /* libext2fs checks it. */
  SB_FIELD (s_log_groups_per_flex),
  SB_FIELD (s_checksum_type),
  SB_FIELD (s_checksum_seed),
#undef SB_FIELD
};

/* Feature bits that move metadata or change how it is read.  The kernel
 * sets others while mounted (needs_recovery at every mount, ext_attr,
 * large_file, dir_nlink, orphan_present, ...): those change nothing here.
 */
#define LAYOUT_COMPAT                                                          \
  (EXT3_FEATURE_COMPAT_HAS_JOURNAL | EXT2_FEATURE_COMPAT_RESIZE_INODE          \
   | EXT4_FEATURE_COMPAT_SPARSE_SUPER2 | EXT4_FEATURE_COMPAT_FAST_COMMIT)
#define LAYOUT_INCOMPAT                                                        \
  (EXT3_FEATURE_INCOMPAT_JOURNAL_DEV | EXT2_FEATURE_INCOMPAT_META_BG           \
   | EXT3_FEATURE_INCOMPAT_EXTENTS | EXT4_FEATURE_INCOMPAT_64BIT               \
   | EXT4_FEATURE_INCOMPAT_FLEX_BG | EXT4_FEATURE_INCOMPAT_CSUM_SEED)
#define LAYOUT_RO_COMPAT                                                       \
  (EXT2_FEATURE_RO_COMPAT_SPARSE_SUPER | EXT4_FEATURE_RO_COMPAT_GDT_CSUM       \
   | EXT4_FEATURE_RO_COMPAT_EXTRA_ISIZE | EXT4_FEATURE_RO_COMPAT_BIGALLOC      \
   | EXT4_FEATURE_RO_COMPAT_METADATA_CSUM)

/* Does the superblock sb (as written) describe fs's layout?  A
 * superblock that fails the checks of discovery, or whose checksum is
 * wrong, does not: the re-read decides what it is.
 */
static bool
sb_same_layout (const struct ext4_fs *fs, const unsigned char *sb)
{
  static const struct
  {
    uint16_t off;
    uint32_t mask;
  } feat[] = { { SB_AT (s_feature_compat), LAYOUT_COMPAT },
               { SB_AT (s_feature_incompat), LAYOUT_INCOMPAT },
               { SB_AT (s_feature_ro_compat), LAYOUT_RO_COMPAT } };
  struct sb_geom g;

  if (sb_check (sb, fs->part_len, &g) != NULL)
    return false;
  /* libext2fs refuses to open what it does not know. */
  if (le32 (sb + SB_AT (s_feature_incompat)) & ~EXT2_LIB_FEATURE_INCOMPAT_SUPP)
    return false;
  if ((le32 (sb + SB_AT (s_feature_ro_compat))
       & EXT4_FEATURE_RO_COMPAT_METADATA_CSUM)
      && ext2fs_crc32c_le (~0u, sb, SB_AT (s_checksum))
             != le32 (sb + SB_AT (s_checksum)))
    return false;
  for (size_t i = 0; i < sizeof sb_fields / sizeof *sb_fields; i++)
    if (memcmp (sb + sb_fields[i].off, fs->sb + sb_fields[i].off,
                sb_fields[i].len)
        != 0)
      return false;
  for (size_t i = 0; i < sizeof feat / sizeof *feat; i++)
    if ((le32 (sb + feat[i].off) ^ le32 (fs->sb + feat[i].off)) & feat[i].mask)
      return false;
  return true;
}

/* Does descriptor block i (its bytes as written in b) put every group's
 * inode table where the layout has it?  The itable runs say where each
 * group's table starts: the run containing that offset must give it the
 * group's first inode number.
 */
static bool
desc_same_layout (const struct ext4_fs *fs, size_t i, const unsigned char *b)
{
  const uint32_t per_block = fs->block_size / fs->desc_size;
  const bool wide = (fs->feature_incompat & EXT4_FEATURE_INCOMPAT_64BIT)
                    && fs->desc_size >= EXT2_MIN_DESC_SIZE_64BIT;

  for (uint32_t k = 0; k < per_block; k++)
    {
      uint64_t g = (uint64_t)i * per_block + k;
      const unsigned char *d = b + (size_t)k * fs->desc_size;
      uint64_t blk, off;
      const struct itable_run *run;

      if (g >= fs->group_count)
        break;
      blk = le32 (d + GD_AT (bg_inode_table));
      if (wide)
        blk |= (uint64_t)le32 (d + GD_AT (bg_inode_table_hi)) << 32;
      if (blk == 0 || blk >= fs->size / fs->block_size)
        return false;
      off = fs->start + blk * fs->block_size;
      run = layout_itable_at (fs, off);
      if (!run || (off - run->off) % fs->inode_size != 0
          || run->first_ino + (off - run->off) / fs->inode_size
                 != g * fs->inodes_per_group + 1)
        return false;
    }
  return true;
}

/* Index of the descriptor block at device offset off, or SIZE_MAX. */
static size_t
desc_index (const struct ext4_fs *fs, uint64_t off)
{
  size_t lo = 0, hi = fs->n_desc;

  while (lo < hi)
    {
      size_t mid = lo + (hi - lo) / 2;
      if (fs->desc[mid] < off)
        lo = mid + 1;
      else
        hi = mid;
    }
  return lo < fs->n_desc && fs->desc[lo] == off ? lo : SIZE_MAX;
}

/* Has a write to the partition-table sectors changed the table? */
static int
ptable_moved (const struct layout *L, layout_read_fn read, void *opaque)
{
  struct part_table t;
  struct dev_extent *sec;
  size_t n_sec;
  bool same;
  int r = partition_scan_table (read, opaque, L->dev_size, &t);

  if (r < 0)
    return r;
  sec = table_sectors (&t, &n_sec);
  same = t.n_parts == L->n_parts && n_sec == L->n_ptable;
  for (size_t i = 0; same && i < t.n_parts; i++)
    same = t.parts[i].off == L->parts[i].off
           && t.parts[i].len == L->parts[i].len
           && t.parts[i].scheme == L->parts[i].scheme
           && t.parts[i].index == L->parts[i].index;
  for (size_t i = 0; same && i < n_sec; i++)
    same = sec[i].off == L->ptable[i].off && sec[i].len == L->ptable[i].len;
  free (sec);
  partition_table_free (&t);
  return !same;
}

/* Check the filesystem block at device offset blk_off (in fs's meta),
 * of which [off, end) was written.
 */
static int
check_meta_block (const struct ext4_fs *fs, layout_read_fn read, void *opaque,
                  uint64_t blk_off, uint64_t off, uint64_t end)
{
  const uint64_t sb_off = fs->start + SB_OFFSET;
  const uint64_t sb_blk
      = fs->start + (SB_OFFSET / fs->block_size) * fs->block_size;
  size_t i;
  int r;

  if (blk_off == sb_blk)
    {
      unsigned char sb[SB_SIZE];

      if (end <= sb_off || off >= sb_off + SB_SIZE)
        return 0; /* the rest of block 0: not the superblock */
      r = read (opaque, sb, sizeof sb, sb_off);
      if (r < 0)
        return r;
      return !sb_same_layout (fs, sb);
    }
  i = desc_index (fs, blk_off);
  if (i != SIZE_MAX)
    {
      unsigned char *b = malloc (fs->block_size);
      bool same;

      if (!b)
        return -ENOMEM;
      r = read (opaque, b, fs->block_size, blk_off);
      same = r == 0 && desc_same_layout (fs, i, b);
      free (b);
      return r < 0 ? r : !same;
    }
  return 1; /* reserved GDT blocks, journal mapping blocks */
}

/* [off, end) is watched and not a partition-table sector. */
static int
check_watched (const struct layout *L, layout_read_fn read, void *opaque,
               uint64_t off, uint64_t end)
{
  while (off < end)
    {
      const struct ext4_fs *fs = layout_fs_at (L, off);
      uint64_t bs, blk_off, stop;
      int r;

      if (!fs || !layout_overlaps_meta (fs, off, 1))
        return 1; /* where a filesystem may appear */
      bs = fs->block_size;
      blk_off = fs->start + (off - fs->start) / bs * bs;
      stop = blk_off + bs < end ? blk_off + bs : end;
      r = check_meta_block (fs, read, opaque, blk_off, off, stop);
      if (r != 0)
        return r;
      off = stop;
    }
  return 0;
}

int
layout_check_write (const struct layout *L, layout_read_fn read, void *opaque,
                    uint64_t off, uint64_t len)
{
  const uint64_t end = off + len;
  size_t i, j;
  int r;

  if (overlaps (L->ptable, L->n_ptable, sizeof *L->ptable, off, len))
    {
      r = ptable_moved (L, read, opaque);
      if (r != 0)
        return r;
    }
  /* Walk the watched parts of the write, leaving out table sectors. */
  for (i = first_ending_after (L->watch, L->n_watch, sizeof *L->watch, off);
       i < L->n_watch && L->watch[i].off < end; i++)
    {
      uint64_t a = L->watch[i].off > off ? L->watch[i].off : off;
      uint64_t b = L->watch[i].off + L->watch[i].len;

      if (b > end)
        b = end;
      while (a < b)
        {
          uint64_t stop = b;

          j = first_ending_after (L->ptable, L->n_ptable, sizeof *L->ptable, a);
          if (j < L->n_ptable && L->ptable[j].off <= a)
            {
              /* Table sectors: checked above. */
              a = L->ptable[j].off + L->ptable[j].len;
              continue;
            }
          if (j < L->n_ptable && L->ptable[j].off < stop)
            stop = L->ptable[j].off;
          r = check_watched (L, read, opaque, a, stop);
          if (r != 0)
            return r;
          a = stop;
        }
    }
  return 0;
}
