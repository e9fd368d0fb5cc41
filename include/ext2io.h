/* SPDX-License-Identifier: BSD-3-Clause */
/* ext2io.h --- a read-only libext2fs io_manager over a layout_read_fn.
 *
 * libext2fs opens a device by name through an io_manager.  This one
 * reads through a caller's layout_read_fn at a base offset and refuses
 * (with EXT2_ET_SHORT_READ, without reading) anything past the region's
 * limit.  Writes fail with EXT2_ET_RO_FILSYS.  The name handed to
 * ext2fs_open2 encodes the address of a struct ext2io_source, which
 * must outlive the open filesystem.
 */
#ifndef EXT4LAZY_EXT2IO_H
#define EXT4LAZY_EXT2IO_H

#include <stddef.h>
#include <stdint.h>

#include <ext2fs/ext2fs.h>

#include "layout.h"

struct ext2io_source
{
  layout_read_fn read;
  void *opaque;
  uint64_t base;    /* device offset of the region's byte 0 */
  uint64_t limit;   /* region length in bytes; reads past it are refused */
  int read_errno;   /* set to the errno of the last failed read, else 0 */
  unsigned refused; /* number of reads refused for being out of range */
};

extern io_manager ext2io_manager;

/* Write the device name for src into buf (at least 40 bytes).  Returns
 * 0, or -ENAMETOOLONG if buf is too small.
 */
extern int ext2io_format_name (const struct ext2io_source *src, char *buf,
                               size_t len);

#endif /* EXT4LAZY_EXT2IO_H */
