/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz-layout.c --- libFuzzer target for layout discovery (layout.h)
 * and the partition-table scanner (partition.h).
 *
 * The input is a device, in one of two forms.  Raw: the input is the
 * whole device.  Sparse (the seeds' form, so that an execution costs
 * what discovery costs and not what copying a megabyte does): the magic
 * "EXT4LAZY-SPARSE\n", a flags byte, the device size (u32 LE, at most
 * SPARSE_MAX), then records of an offset (u32 LE), a length (u16 LE)
 * and that many bytes, laid over zeros in order; a record that runs
 * past the device is cut, a short record ends the input.  The read
 * callback serves the device's bytes and fails a read that runs past
 * its end (a short read is an error).
 * Discovery goes through the superblock and descriptor sanity checks,
 * libext2fs with the project's read-only io_manager, the journal
 * mapping and the MBR/EBR/GPT scanner.
 *
 * So that the fuzzer need not find checksums, the device is a copy of
 * the input in which, unless bit 0 of the flags (raw: of byte 0, boot
 * code, never looked at) is set, the GPT header and entry-array CRC32s (primary
 * at LBA 1 and backup at the last LBA, 512- and 4096-byte sectors) and the
 * crc32c of every metadata_csum ext4 superblock on a 512-byte boundary
 * are recomputed.
 *
 * Checked: the layout is sorted, disjoint and inside the device as
 * layout.h describes it, the lookups agree with a linear search, and
 * discovery again with a read that fails at some point returns that
 * error (or succeeds) and leaks nothing.  partition_scan_table is
 * called directly, and partition_scan too when bit 1 of the flags (raw:
 * bit 0 of byte 1) is set.
 */
#include <errno.h>
#include <stdbool.h>

#include "byteorder.h"
#include "fuzz.h"
#include "layout.h"
#include "partition.h"

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  fuzz_quiet ();
  return 0;
}

struct dev
{
  const unsigned char *p;
  size_t n;
  unsigned reads;   /* reads so far */
  unsigned fail_at; /* this read fails with EIO (0: none) */
};

static int
dev_read (void *opaque, void *buf, size_t len, uint64_t off)
{
  struct dev *d = opaque;

  if (++d->reads == d->fail_at)
    return -EIO;
  if (off > d->n || len > d->n - off)
    return -EIO;
  memcpy (buf, d->p + off, len);
  return 0;
}

static void
put_le32 (unsigned char *p, uint32_t v)
{
  p[0] = v;
  p[1] = v >> 8;
  p[2] = v >> 16;
  p[3] = v >> 24;
}

/* CRC-32 as partition_crc32, a table at a time: the fix-up below must
 * not cost more than the scan it prepares.
 */
static uint32_t
crc32_fast (const unsigned char *p, size_t n)
{
  static uint32_t table[256];
  uint32_t crc = ~0u;

  if (!table[1])
    for (uint32_t i = 0; i < 256; i++)
      {
        uint32_t c = i;

        for (int k = 0; k < 8; k++)
          c = (c >> 1) ^ (0xEDB88320u & -(c & 1));
        table[i] = c;
      }
  while (n--)
    crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

/* Recompute the CRCs of a GPT header at LBA lba (sector size ss). */
static void
fix_gpt (unsigned char *d, size_t n, uint64_t lba, uint32_t ss)
{
  unsigned char *h;
  uint32_t hsize, count, esize;
  uint64_t alba, bytes;

  if (lba > n / ss - 1)
    return;
  h = d + lba * ss;
  if (memcmp (h, "EFI PART", 8) != 0)
    return;
  hsize = le32 (h + 12);
  alba = le64 (h + 72);
  count = le32 (h + 80);
  esize = le32 (h + 84);
  bytes = (uint64_t)count * esize;
  if (alba < n / ss && bytes <= (1u << 20) && bytes <= n - alba * ss)
    put_le32 (h + 88, crc32_fast (d + alba * ss, bytes));
  if (hsize >= 92 && hsize <= ss)
    {
      put_le32 (h + 16, 0);
      put_le32 (h + 16, crc32_fast (h, hsize));
    }
}

static void
fix_checksums (unsigned char *d, size_t n)
{
  for (uint32_t ss = 512; ss <= 4096; ss *= 8)
    if (n / ss >= 4)
      {
        fix_gpt (d, n, 1, ss);
        fix_gpt (d, n, n / ss - 1, ss);
      }
  /* ext4 superblocks: magic 0xEF53 at 0x38, RO_COMPAT_METADATA_CSUM. */
  for (size_t off = 1024; off + 1024 <= n; off += 512)
    {
      unsigned char *sb = d + off;

      if (le16 (sb + 0x38) == 0xEF53 && (le32 (sb + 0x64) & 0x400))
        put_le32 (sb + 0x3FC, ext2fs_crc32c_le (~0u, sb, 0x3FC));
    }
}

static bool
is_pow2 (uint64_t x)
{
  return x && !(x & (x - 1));
}

/* Extents (off, len first) sorted, non-empty, disjoint (merged: not
 * even adjacent), inside [lo, hi).
 */
static void
check_extents (const void *base, size_t n, size_t stride, uint64_t lo,
               uint64_t hi, bool merged)
{
  uint64_t prev_end = 0;

  for (size_t i = 0; i < n; i++)
    {
      uint64_t e[2];

      memcpy (e, (const char *)base + i * stride, sizeof e);
      FUZZ_CHECK (e[1] > 0);
      FUZZ_CHECK (e[0] >= lo && e[0] <= hi && e[1] <= hi - e[0]);
      if (i > 0)
        FUZZ_CHECK (merged ? e[0] > prev_end : e[0] >= prev_end);
      prev_end = e[0] + e[1];
    }
}

/* Does one of n extents (off, len first) contain off? */
static bool
linear_hit (const void *base, size_t n, size_t stride, uint64_t off)
{
  for (size_t i = 0; i < n; i++)
    {
      uint64_t e[2];

      memcpy (e, (const char *)base + i * stride, sizeof e);
      if (off >= e[0] && off - e[0] < e[1])
        return true;
    }
  return false;
}

static const struct itable_run *
linear_itable (const struct ext4_fs *fs, uint64_t off)
{
  for (size_t i = 0; i < fs->n_itable; i++)
    if (off >= fs->itable[i].off && off - fs->itable[i].off < fs->itable[i].len)
      return &fs->itable[i];
  return NULL;
}

static const struct journal_extent *
linear_journal (const struct ext4_fs *fs, uint64_t off)
{
  for (size_t i = 0; i < fs->n_journal; i++)
    if (off >= fs->journal[i].off
        && off - fs->journal[i].off < fs->journal[i].len)
      return &fs->journal[i];
  return NULL;
}

/* Probe offset off of fs: the lookups against linear searches. */
static void
probe (const struct layout *L, const struct ext4_fs *fs, uint64_t off)
{
  const struct itable_run *r = linear_itable (fs, off);
  const struct journal_extent *x = linear_journal (fs, off);
  uint64_t next;

  if (off >= fs->start && off - fs->start < fs->size)
    FUZZ_CHECK (layout_fs_at (L, off) == fs);
  FUZZ_CHECK (layout_itable_at (fs, off) == r);
  FUZZ_CHECK (layout_ino_at (fs, off)
              == (r ? r->first_ino + (off - r->off) / fs->inode_size : 0));
  FUZZ_CHECK (layout_overlaps_meta (fs, off, 1)
              == linear_hit (fs->meta, fs->n_meta, sizeof *fs->meta, off));
  FUZZ_CHECK (layout_overlaps_watch (L, off, 1)
              == linear_hit (L->watch, L->n_watch, sizeof *L->watch, off));
  FUZZ_CHECK (layout_journal_at (fs, off) == x);
  FUZZ_CHECK (layout_overlaps_journal (fs, off, 1) == (x != NULL));
  FUZZ_CHECK (layout_overlaps_journal (fs, off, 0) == false);
  if (x)
    {
      uint64_t lblk = x->lblk + (off - x->off) / fs->block_size;

      FUZZ_CHECK (layout_journal_lblk (fs, off) == lblk);
      FUZZ_CHECK (layout_journal_off (fs, lblk)
                  == off - (off - x->off) % fs->block_size);
    }
  else
    FUZZ_CHECK (layout_journal_lblk (fs, off) == UINT64_MAX);
  next = layout_next_region (fs, off);
  FUZZ_CHECK (next > off || next == fs->start + fs->size);
  FUZZ_CHECK (next <= fs->start + fs->size);
}

static void
check_fs (const struct layout *L, const struct ext4_fs *fs, struct dev *d)
{
  uint64_t lo = fs->start, hi = fs->start + fs->size;
  struct jbd2_sb jsb;
  int r;

  FUZZ_CHECK (fs->size > 0 && fs->size <= fs->part_len);
  FUZZ_CHECK (fs->start <= L->dev_size
              && fs->part_len <= L->dev_size - fs->start);
  FUZZ_CHECK (is_pow2 (fs->block_size) && fs->block_size >= 1024
              && fs->block_size <= 65536);
  FUZZ_CHECK (fs->size % fs->block_size == 0);
  FUZZ_CHECK (is_pow2 (fs->inode_size) && fs->inode_size >= 128
              && fs->inode_size <= fs->block_size);
  check_extents (fs->itable, fs->n_itable, sizeof *fs->itable, lo, hi, false);
  check_extents (fs->meta, fs->n_meta, sizeof *fs->meta, lo, hi, true);
  check_extents (fs->journal, fs->n_journal, sizeof *fs->journal, lo, hi,
                 false);
  for (size_t i = 0; i < fs->n_itable; i++)
    {
      const struct itable_run *t = &fs->itable[i];

      FUZZ_CHECK (t->len % fs->inode_size == 0);
      FUZZ_CHECK (t->first_ino >= 1);
      FUZZ_CHECK (!layout_overlaps_meta (fs, t->off, t->len));
      FUZZ_CHECK (!layout_overlaps_journal (fs, t->off, t->len));
      probe (L, fs, t->off);
      probe (L, fs, t->off + t->len - 1);
      probe (L, fs, t->off + t->len);
    }
  for (size_t i = 0; i < fs->n_journal; i++)
    {
      const struct journal_extent *x = &fs->journal[i];

      FUZZ_CHECK (x->len % fs->block_size == 0);
      FUZZ_CHECK (x->lblk + x->len / fs->block_size <= fs->journal_blocks);
      FUZZ_CHECK (!layout_overlaps_meta (fs, x->off, x->len));
      probe (L, fs, x->off);
      probe (L, fs, x->off + x->len - 1);
    }
  for (size_t i = 0; i < fs->n_meta; i++)
    FUZZ_CHECK (layout_overlaps_watch (L, fs->meta[i].off, fs->meta[i].len));
  if (fs->n_journal)
    FUZZ_CHECK (fs->has_journal && !fs->journal_external
                && layout_journal_off (fs, 0) != UINT64_MAX);
  probe (L, fs, fs->start);
  probe (L, fs, hi - 1);
  FUZZ_CHECK (layout_same_journal (fs, fs));

  r = layout_read_jsb (fs, dev_read, d, &jsb);
  FUZZ_CHECK (r == 0 || r == -ENOENT || r == -EINVAL);
  if (fs->n_journal == 0)
    FUZZ_CHECK (r == -ENOENT);
  else
    FUZZ_CHECK ((r == 0) == fs->jsb_valid);
  if (r == 0)
    FUZZ_CHECK (jsb.blocksize == fs->block_size
                && jsb.dev_off == fs->jsb.dev_off
                && jsb.maxlen == fs->jsb.maxlen
                && jsb.feature_incompat == fs->jsb.feature_incompat);
}

static void
check_layout (const struct layout *L, struct dev *d)
{
  FUZZ_CHECK (L->dev_size == d->n);
  check_extents (L->watch, L->n_watch, sizeof *L->watch, 0, L->dev_size, true);
  for (size_t i = 0; i < L->n_fs; i++)
    {
      const struct ext4_fs *fs = &L->fs[i];

      if (i > 0)
        FUZZ_CHECK (fs->start >= L->fs[i - 1].start + L->fs[i - 1].size);
      check_fs (L, fs, d);
    }
  FUZZ_CHECK (layout_same_itables (L, L));
}

/* The scan, straight; with also, partition_scan too (it scans again,
 * and the CRCs of a GPT are most of the time the scan takes).
 */
static void
check_partitions (struct dev *d, bool also)
{
  struct part_table t;
  struct part *parts;
  size_t n;
  int r;

  r = partition_scan_table (dev_read, d, d->n, &t);
  FUZZ_CHECK (r == 0);
  for (size_t i = 0; i < t.n_parts; i++)
    {
      const struct part *p = &t.parts[i];

      FUZZ_CHECK (p->off <= d->n && p->len <= d->n - p->off);
      FUZZ_CHECK (p->scheme >= PART_WHOLE && p->scheme <= PART_GPT);
      FUZZ_CHECK ((p->scheme == PART_WHOLE) == (p->index == 0));
      if (p->scheme == PART_WHOLE)
        FUZZ_CHECK (t.n_parts == 1 && p->off == 0 && p->len == d->n);
      else
        FUZZ_CHECK (p->len > 0);
      if (i > 0)
        FUZZ_CHECK (p->off >= t.parts[i - 1].off);
    }
  for (size_t i = 0; i < t.n_sectors; i++)
    FUZZ_CHECK (t.sectors[i].len > 0 && t.sectors[i].off < d->n
                && t.sectors[i].len <= d->n - t.sectors[i].off);

  if (!also)
    {
      partition_table_free (&t);
      return;
    }
  r = partition_scan (dev_read, d, d->n, &parts, &n);
  FUZZ_CHECK (r == 0 && n == t.n_parts);
  for (size_t i = 0; i < n; i++)
    FUZZ_CHECK (parts[i].off == t.parts[i].off && parts[i].len == t.parts[i].len
                && parts[i].scheme == t.parts[i].scheme
                && parts[i].index == t.parts[i].index);
  free (parts);
  partition_table_free (&t);
  FUZZ_CHECK (t.parts == NULL && t.n_parts == 0);
}

#define SPARSE_MAGIC "EXT4LAZY-SPARSE\n"
#define SPARSE_MAX (16u << 20)

/* The device, kept from one input to the next (a fresh megabyte each
 * time costs more than discovery): its first dev_dirty bytes are all
 * the last input may have written, the checksum fix-up included (it
 * writes at most a sector past bytes the input gave).  Nothing reads it
 * but dev_read, which checks the bounds.
 */
static unsigned char *dev_buf;
static size_t dev_cap, dev_dirty;

static unsigned char *
dev_reserve (size_t n)
{
  if (n > dev_cap || !dev_buf)
    {
      free (dev_buf);
      dev_cap = n > 4096 ? n : 4096;
      dev_buf = calloc (1, dev_cap);
      FUZZ_CHECK (dev_buf != NULL);
      dev_dirty = 0;
    }
  memset (dev_buf, 0, dev_dirty);
  dev_dirty = 0;
  return dev_buf;
}

static void
dev_wrote (size_t end)
{
  end = dev_cap - end < 4096 ? dev_cap : end + 4096;
  if (end > dev_dirty)
    dev_dirty = end;
}

/* Lay a sparse input out as a device; false if it is not one. */
static bool
sparse_device (const uint8_t *data, size_t size, struct dev *d, unsigned *flags)
{
  const size_t hdr = sizeof SPARSE_MAGIC - 1;
  unsigned char *p;
  size_t at;
  uint32_t n;

  if (size < hdr + 5 || memcmp (data, SPARSE_MAGIC, hdr) != 0)
    return false;
  *flags = data[hdr];
  n = le32 (data + hdr + 1);
  if (n > SPARSE_MAX)
    n = SPARSE_MAX;
  p = dev_reserve (n);
  for (at = hdr + 5; at + 6 <= size;)
    {
      uint32_t off = le32 (data + at);
      size_t len = le16 (data + at + 4);

      at += 6;
      if (len > size - at)
        len = size - at;
      if (off < n)
        {
          size_t cut = len < n - off ? len : n - off;

          memcpy (p + off, data + at, cut);
          dev_wrote (off + cut);
        }
      at += len;
    }
  d->p = p;
  d->n = n;
  return true;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  struct dev d = { .n = size };
  struct layout *L = NULL;
  unsigned reads, flags = 0;
  int r;

  if (!sparse_device (data, size, &d, &flags))
    {
      unsigned char *p = dev_reserve (size);

      if (size)
        memcpy (p, data, size);
      dev_dirty = size;
      d.p = p;
      flags
          = (size > 0 ? data[0] & 1 : 0) | (size > 1 ? (data[1] & 1) << 1 : 0);
    }
  if (!(flags & 1))
    fix_checksums ((unsigned char *)d.p, d.n);

  check_partitions (&d, flags & 2);

  d.reads = 0;
  r = layout_discover (dev_read, &d, d.n, &L);
  FUZZ_CHECK (r == 0 && L != NULL);
  reads = d.reads;
  check_layout (L, &d);
  layout_free (L);

  /* Again with read number k failing: EIO or, if whatever needed that
   * read coped without it, a layout.  Nothing may leak either way.
   */
  if (reads > 0)
    {
      d.reads = 0;
      d.fail_at = 1 + (size * 2654435761u) % reads;
      L = NULL;
      r = layout_discover (dev_read, &d, d.n, &L);
      FUZZ_CHECK (r == 0 || r == -EIO);
      FUZZ_CHECK ((r == 0) == (L != NULL));
      layout_free (L);
    }
  return 0;
}
