/* SPDX-License-Identifier: BSD-3-Clause */
/* partition.c --- MBR (with extended/logical chains) and GPT scanning.
 *
 * Facts used: the MBR holds four 16-byte entries at byte 446 (boot
 * flag, type at +4, LE32 start LBA at +8, LE32 sector count at +12) and
 * the signature 0x55 0xAA at 510.  Types 0x05, 0x0F and 0x85 are
 * extended containers: each EBR in the chain has the logical partition
 * in entry 0 (start relative to the EBR) and the link to the next EBR
 * in entry 1 (start relative to the container).  A type 0xEE entry is a
 * protective MBR: the GPT header is at LBA 1 ("EFI PART", header CRC32
 * over header_size bytes with the CRC field zeroed, entry array CRC32),
 * and its backup at the last LBA.  Sector size 512 is tried first, then
 * 4096.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "byteorder.h"
#include "log.h"
#include "partition.h"
#include "vector.h"

#define MBR_SECTOR 512
#define MAX_LOGICAL 128          /* EBRs followed before giving up */
#define GPT_MAX_ARRAY (1u << 20) /* bytes of GPT entry array we accept */
#define GPT_DEFAULT_ARRAY 16384  /* the usual 128 entries x 128 bytes */

DEFINE_VECTOR (part_vec, struct part)
DEFINE_VECTOR (extent_vec, struct dev_extent)

/* One scan: what it reads, and what it has found so far (handed to the
 * caller's struct part_table at the end).
 */
struct scan
{
  layout_read_fn read;
  void *opaque;
  uint64_t dev_size;
  struct part_vec parts;
  struct extent_vec sectors;
};

uint32_t
partition_crc32 (uint32_t crc, const void *buf, size_t len)
{
  return (uint32_t)crc32_z (crc, buf, len);
}

/* Read len bytes at off.  Returns 0, 1 if the range is not inside the
 * device (nothing read), or -errno.
 */
static int
scan_read (struct scan *s, void *buf, size_t len, uint64_t off)
{
  if (off > s->dev_size || len > s->dev_size - off)
    return 1;
  return s->read (s->opaque, buf, len, off);
}

static int
add_part (struct scan *s, uint64_t off, uint64_t len, enum part_scheme scheme,
          unsigned index)
{
  return part_vec_append (&s->parts, (struct part){ .off = off,
                                                    .len = len,
                                                    .scheme = scheme,
                                                    .index = index });
}

static int
add_sector (struct scan *s, uint64_t off, uint64_t len)
{
  if (off >= s->dev_size || len == 0)
    return 0;
  if (len > s->dev_size - off)
    len = s->dev_size - off;
  return extent_vec_append (&s->sectors,
                            (struct dev_extent){ .off = off, .len = len });
}

static bool
is_extended (unsigned type)
{
  return type == 0x05 || type == 0x0F || type == 0x85;
}

/* Does the region [lba, lba+n) of 512-byte sectors lie inside the
 * device?
 */
static bool
sectors_inside (const struct scan *s, uint64_t lba, uint64_t n)
{
  uint64_t dev_sectors = s->dev_size / MBR_SECTOR;
  return n > 0 && lba < dev_sectors && n <= dev_sectors - lba;
}

/* Follow an extended partition's EBR chain.  A looping or overlong
 * chain loses all its logical partitions (the chain cannot be trusted).
 */
static int
scan_logical (struct scan *s, uint64_t ext_lba, uint64_t ext_n)
{
  unsigned char ebr[MBR_SECTOR];
  uint64_t visited[MAX_LOGICAL];
  size_t n_visited = 0, keep = s->parts.n;
  uint64_t cur = ext_lba;
  unsigned index = 5;
  int r;

  for (;;)
    {
      if (n_visited == MAX_LOGICAL)
        {
          log_notice ("extended partition at sector %" PRIu64
                      ": more than %d logical partitions, ignoring them",
                      ext_lba, MAX_LOGICAL);
          s->parts.n = keep;
          return 0;
        }
      for (size_t i = 0; i < n_visited; i++)
        if (visited[i] == cur)
          {
            log_notice ("extended partition at sector %" PRIu64
                        ": EBR chain loops at sector %" PRIu64
                        ", ignoring its logical partitions",
                        ext_lba, cur);
            s->parts.n = keep;
            return 0;
          }
      visited[n_visited++] = cur;
      if (cur < ext_lba || cur - ext_lba >= ext_n
          || !sectors_inside (s, cur, 1))
        {
          log_notice ("extended partition at sector %" PRIu64
                      ": EBR link to sector %" PRIu64
                      " is outside the container, chain ends",
                      ext_lba, cur);
          return 0;
        }
      r = scan_read (s, ebr, sizeof ebr, cur * MBR_SECTOR);
      if (r < 0)
        return r;
      r = add_sector (s, cur * MBR_SECTOR, MBR_SECTOR);
      if (r < 0)
        return r;
      if (ebr[510] != 0x55 || ebr[511] != 0xAA)
        return 0; /* end of chain (or an empty container) */

      const unsigned char *e0 = ebr + 446, *e1 = ebr + 446 + 16;
      uint64_t start = le32 (e0 + 8), n = le32 (e0 + 12);
      if (e0[4] != 0 && n != 0)
        {
          uint64_t lba = cur + start;
          if (start != 0 && lba - ext_lba < ext_n
              && n <= ext_n - (lba - ext_lba) && sectors_inside (s, lba, n))
            {
              r = add_part (s, lba * MBR_SECTOR, n * MBR_SECTOR, PART_LOGICAL,
                            index);
              if (r < 0)
                return r;
            }
          else
            log_notice ("logical partition %u (sector %" PRIu64 ", %" PRIu64
                        " sectors) is outside its container or"
                        " the device, ignored",
                        index, lba, n);
        }
      index++;
      if (!is_extended (e1[4]) || le32 (e1 + 12) == 0)
        return 0;
      cur = ext_lba + le32 (e1 + 8);
    }
}

/* A GPT header's facts, and its entry array once read and verified. */
struct gpt
{
  uint64_t array_lba, first, last; /* entry array; usable LBA range */
  uint32_t count, esize, array_crc;
  unsigned char *entries; /* count * esize bytes, or NULL */
};

/* Check the GPT header hdr (ss bytes read from LBA lba; this zeroes its
 * CRC field) and fill g but g->entries.  NULL if valid, else why not.
 */
static const char *
gpt_check_header (unsigned char *hdr, uint64_t lba, uint32_t ss,
                  uint64_t dev_sectors, struct gpt *g)
{
  uint32_t hsize = le32 (hdr + 12), crc = le32 (hdr + 16);
  uint64_t nsect;

  if (memcmp (hdr, "EFI PART", 8) != 0)
    return "no signature";
  if (hsize < 92 || hsize > ss)
    return "bad header size";
  memset (hdr + 16, 0, 4);
  if (partition_crc32 (0, hdr, hsize) != crc)
    return "bad header CRC";
  if (le64 (hdr + 24) != lba)
    return "header LBA mismatch";
  g->first = le64 (hdr + 40);
  g->last = le64 (hdr + 48);
  g->array_lba = le64 (hdr + 72);
  g->count = le32 (hdr + 80);
  g->esize = le32 (hdr + 84);
  g->array_crc = le32 (hdr + 88);
  if (g->first > g->last || g->last >= dev_sectors)
    return "usable range outside the device";
  if (g->esize < 128 || (g->esize & (g->esize - 1)) != 0 || g->count == 0
      || (uint64_t)g->count * g->esize > GPT_MAX_ARRAY)
    return "bad entry size or count";
  nsect = ((uint64_t)g->count * g->esize + ss - 1) / ss;
  if (g->array_lba < 2 || g->array_lba >= dev_sectors
      || nsect > dev_sectors - g->array_lba)
    return "entry array outside the device";
  return NULL;
}

/* Read and verify the entry array of a valid header into g->entries.
 * Returns 0, 1 if unreadable or corrupt (*why says which), or -errno.
 */
static int
gpt_read_array (struct scan *s, uint32_t ss, struct gpt *g, const char **why)
{
  uint64_t bytes = (uint64_t)g->count * g->esize;
  unsigned char *arr = malloc (bytes);
  int r;

  if (!arr)
    return -ENOMEM;
  r = scan_read (s, arr, bytes, g->array_lba * ss);
  if (r != 0)
    *why = "entry array not readable";
  else if (partition_crc32 (0, arr, bytes) != g->array_crc)
    {
      *why = "bad entry array CRC";
      r = 1;
    }
  if (r != 0)
    {
      free (arr);
      return r;
    }
  g->entries = arr;
  return 0;
}

/* Read the GPT header at LBA lba with sector size ss and its entry
 * array.  Returns 0 with *g filled (free g->entries), 1 if invalid
 * (*why says why; the caller gives the notice), or -errno.
 */
static int
gpt_read (struct scan *s, uint64_t lba, uint32_t ss, struct gpt *g,
          const char **why)
{
  unsigned char *hdr;
  const char *bad;
  int r;

  g->entries = NULL;
  hdr = malloc (ss);
  if (!hdr)
    return -ENOMEM;
  r = scan_read (s, hdr, ss, lba * ss);
  if (r != 0)
    *why = "header not readable";
  else if ((bad = gpt_check_header (hdr, lba, ss, s->dev_size / ss, g)))
    {
      *why = bad;
      r = 1;
    }
  free (hdr);
  if (r != 0)
    return r;
  return gpt_read_array (s, ss, g, why);
}

/* Watch the GPT header at LBA lba and its entry array (g valid), or
 * where they usually are (g NULL).  The primary's array follows its
 * header at LBA 1; the backup's precedes it at the last LBA.
 */
static int
gpt_watch (struct scan *s, uint64_t lba, uint32_t ss, const struct gpt *g)
{
  bool primary = lba == 1;
  uint64_t end = (lba + 1) * ss, len = GPT_DEFAULT_ARRAY + ss;
  int r = 0;

  if (!g && primary)
    return add_sector (s, lba * ss, len);
  if (!g)
    {
      if (len > end)
        len = end;
      return add_sector (s, end - len, len);
    }
  if (primary)
    r = add_sector (s, lba * ss, ss);
  if (r == 0)
    r = add_sector (s, g->array_lba * ss, (uint64_t)g->count * g->esize);
  if (r == 0 && !primary)
    r = add_sector (s, lba * ss, ss);
  return r;
}

/* Add the partitions of a valid GPT with sector size ss. */
static int
gpt_add_parts (struct scan *s, uint32_t ss, const struct gpt *g)
{
  static const unsigned char zero[16];

  for (uint32_t i = 0; i < g->count; i++)
    {
      const unsigned char *e = g->entries + (size_t)i * g->esize;
      uint64_t pf = le64 (e + 32), pl = le64 (e + 40);
      int r;

      if (memcmp (e, zero, 16) == 0)
        continue;
      if (pf > pl || pf < g->first || pl > g->last)
        {
          log_notice ("GPT partition %u (LBA %" PRIu64 "-%" PRIu64
                      ") outside the usable range, ignored",
                      i + 1, pf, pl);
          continue;
        }
      r = add_part (s, pf * ss, (pl - pf + 1) * ss, PART_GPT, i + 1);
      if (r < 0)
        return r;
    }
  return 0;
}

/* Try a GPT with sector size ss: the primary header, else the backup,
 * whose sectors are watched either way.  Returns 0 if found (partitions
 * and sectors added), 1 if not, or -errno.
 */
static int
scan_gpt (struct scan *s, uint32_t ss)
{
  uint64_t last_lba = s->dev_size / ss - 1;
  struct gpt pri = { 0 }, bak = { 0 };
  const char *why1 = "", *why2 = "";
  int r1, r2, r;

  if (s->dev_size / ss < 4)
    return 1;
  r1 = gpt_read (s, 1, ss, &pri, &why1);
  if (r1 < 0)
    return r1;
  r = gpt_watch (s, 1, ss, r1 == 0 ? &pri : NULL);
  if (r < 0)
    goto out;
  r2 = gpt_read (s, last_lba, ss, &bak, &why2);
  r = r2 < 0 ? r2 : gpt_watch (s, last_lba, ss, r2 == 0 ? &bak : NULL);
  if (r < 0)
    goto out;
  if (r1 == 0)
    r = gpt_add_parts (s, ss, &pri);
  else if (r2 == 0)
    {
      if (ss == 512 || strcmp (why1, "no signature") != 0)
        log_notice ("primary GPT (sector size %u) invalid (%s), using the "
                    "backup header",
                    ss, why1);
      r = gpt_add_parts (s, ss, &bak);
    }
  else
    {
      if (ss == 4096 || strcmp (why1, "no signature") != 0)
        log_notice ("no valid GPT with %u-byte sectors (primary: %s, "
                    "backup: %s)",
                    ss, why1, why2);
      r = 1;
    }
out:
  free (pri.entries);
  free (bak.entries);
  return r;
}

static int
scan_mbr (struct scan *s, const unsigned char *mbr, bool *found)
{
  bool protective = false, any = false;
  int r;

  *found = false;
  if (mbr[510] != 0x55 || mbr[511] != 0xAA)
    return 0;
  for (int i = 0; i < 4; i++)
    {
      const unsigned char *e = mbr + 446 + 16 * i;
      if (e[0] != 0 && e[0] != 0x80)
        return 0; /* boot code or a volume boot record, not a table */
      if (e[4] == 0 || le32 (e + 12) == 0)
        continue;
      if (le32 (e + 8) == 0)
        return 0;
      any = true;
      if (e[4] == 0xEE)
        protective = true;
    }
  if (!any)
    return 0;

  if (protective)
    {
      r = scan_gpt (s, 512);
      if (r == 1)
        r = scan_gpt (s, 4096);
      if (r < 0)
        return r;
      if (r == 1)
        return 0; /* no valid GPT: caller falls back to the whole disk */
      *found = true;
      return 0;
    }

  *found = true;
  for (int i = 0; i < 4; i++)
    {
      const unsigned char *e = mbr + 446 + 16 * i;
      uint64_t lba = le32 (e + 8), n = le32 (e + 12);
      if (e[4] == 0 || n == 0)
        continue;
      if (!sectors_inside (s, lba, n))
        {
          log_notice ("MBR partition %d (sector %" PRIu64 ", %" PRIu64
                      " sectors) is outside the device, ignored",
                      i + 1, lba, n);
          continue;
        }
      if (is_extended (e[4]))
        r = scan_logical (s, lba, n);
      else
        r = add_part (s, lba * MBR_SECTOR, n * MBR_SECTOR, PART_MBR, i + 1);
      if (r < 0)
        return r;
    }
  return 0;
}

static int
cmp_part (const void *a, const void *b)
{
  const struct part *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* Sort the regions; entries describing the very same region (hybrid or
 * duplicated tables) are one candidate.
 */
static void
sort_parts (struct part_vec *parts)
{
  size_t w = 0;

  if (parts->n == 0)
    return; /* parts->v may be NULL, which qsort may not be given */
  qsort (parts->v, parts->n, sizeof *parts->v, cmp_part);
  for (size_t i = 1; i < parts->n; i++)
    if (parts->v[i].off != parts->v[w].off
        || parts->v[i].len != parts->v[w].len)
      parts->v[++w] = parts->v[i];
  if (parts->n)
    parts->n = w + 1;
}

int
partition_scan_table (layout_read_fn read, void *opaque, uint64_t dev_size,
                      struct part_table *out)
{
  struct scan s = { .read = read, .opaque = opaque, .dev_size = dev_size };
  unsigned char mbr[MBR_SECTOR];
  bool found = false;
  int r;

  memset (out, 0, sizeof *out);
  r = add_sector (&s, 0, MBR_SECTOR);
  if (r < 0)
    goto err;
  if (dev_size >= 2 * MBR_SECTOR)
    {
      r = scan_read (&s, mbr, sizeof mbr, 0);
      if (r < 0)
        goto err;
      r = scan_mbr (&s, mbr, &found);
      if (r < 0)
        goto err;
    }
  if (!found)
    {
      /* No table: the whole device is the candidate.  Still watch where
       * a table would be written (LBA 0, GPT header at LBA 1, backup
       * header at the last sector).
       */
      s.parts.n = 0;
      r = add_part (&s, 0, dev_size, PART_WHOLE, 0);
      if (r == 0)
        r = add_sector (&s, MBR_SECTOR, MBR_SECTOR);
      if (r == 0 && dev_size >= 4 * MBR_SECTOR)
        r = add_sector (&s, dev_size / MBR_SECTOR * MBR_SECTOR - MBR_SECTOR,
                        MBR_SECTOR);
      if (r < 0)
        goto err;
    }
  sort_parts (&s.parts);
  out->parts = s.parts.v;
  out->n_parts = s.parts.n;
  out->sectors = s.sectors.v;
  out->n_sectors = s.sectors.n;
  return 0;

err:
  part_vec_reset (&s.parts);
  extent_vec_reset (&s.sectors);
  return r;
}

void
partition_table_free (struct part_table *t)
{
  free (t->parts);
  free (t->sectors);
  memset (t, 0, sizeof *t);
}

int
partition_scan (layout_read_fn read, void *opaque, uint64_t dev_size,
                struct part **out, size_t *n)
{
  struct part_table t;
  int r = partition_scan_table (read, opaque, dev_size, &t);

  if (r < 0)
    return r;
  free (t.sectors);
  *out = t.parts;
  *n = t.n_parts;
  return 0;
}
