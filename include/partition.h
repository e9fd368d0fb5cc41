/* SPDX-License-Identifier: BSD-3-Clause */
/* partition.h --- find the regions of a device that may hold a filesystem.
 *
 * partition_scan reads the partition table at the start of the device
 * (MBR with its extended/logical chain, or a protective MBR followed by
 * a GPT with 512- or 4096-byte sectors, falling back to the backup GPT
 * header at the last LBA) and returns the candidate regions: one per
 * partition, or the whole device when LBA 0 holds no valid table.  It
 * also returns the sectors that describe the table, so that a client
 * writing them (repartitioning) can be noticed.
 *
 * Bad tables never fail the scan: a table that does not validate is
 * ignored with a notice (the whole device becomes the candidate), a
 * partition entry outside the device is dropped, and a looping or
 * overlong extended chain loses its logical partitions.
 */
#ifndef EXT4LAZY_PARTITION_H
#define EXT4LAZY_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

enum part_scheme
{
  PART_WHOLE,   /* no valid table: the whole device */
  PART_MBR,     /* MBR primary partition */
  PART_LOGICAL, /* MBR logical partition in an extended chain */
  PART_GPT,     /* GPT entry */
};

struct part
{
  uint64_t off, len; /* device bytes of the region */
  enum part_scheme scheme;
  unsigned index; /* 1-based partition number (as Linux numbers them);
                   * 0 for PART_WHOLE */
};

struct part_table
{
  struct part *parts;
  size_t n_parts;
  struct dev_extent *sectors; /* table sectors: LBA 0, EBRs, GPT headers
                               * and entry arrays */
  size_t n_sectors;
};

/* Scan the device.  Returns 0 and fills *out (free it with
 * partition_table_free), or -errno for ENOMEM or a read error.
 * dev_size is the device size in bytes; nothing at or past it is read.
 * parts are sorted by offset.
 */
extern int partition_scan_table (layout_read_fn read, void *opaque,
                                 uint64_t dev_size, struct part_table *out);
extern void partition_table_free (struct part_table *);

/* The same, returning only the regions: *out is a malloc'd array of *n
 * entries (free it with free).
 */
extern int partition_scan (layout_read_fn read, void *opaque, uint64_t dev_size,
                           struct part **out, size_t *n);

/* CRC-32 (IEEE 802.3, as GPT uses it; zlib's crc32):
 * crc = partition_crc32 (0, buf, len).
 */
extern uint32_t partition_crc32 (uint32_t crc, const void *buf, size_t len);

#endif /* EXT4LAZY_PARTITION_H */
