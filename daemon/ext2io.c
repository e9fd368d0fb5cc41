/* SPDX-License-Identifier: BSD-3-Clause */
/* ext2io.c --- read-only libext2fs io_manager reading through a
 * layout_read_fn (the shape of an io_manager follows e2fsprogs'
 * lib/ext2fs/unix_io.c: open/close/set_blksize/read_blk/read_blk64
 * with a negative count meaning a byte count).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ext2fs/ext2fs.h>

#include "ext2io.h"

#define NAME_PREFIX "ext4lazy-src:"

int
ext2io_format_name (const struct ext2io_source *src, char *buf, size_t len)
{
  int n = snprintf (buf, len, NAME_PREFIX "%p", (const void *)src);
  if (n < 0 || (size_t)n >= len)
    return -ENAMETOOLONG;
  return 0;
}

static errcode_t
ext2io_open (const char *name, int flags, io_channel *channel)
{
  struct ext2io_source *src = NULL;
  io_channel io;
  int end = 0;

  /* Exactly the name ext2io_name made: nothing after the pointer. */
  if (!name || strncmp (name, NAME_PREFIX, strlen (NAME_PREFIX)) != 0
      || sscanf (name + strlen (NAME_PREFIX), "%p%n", (void **)&src, &end) != 1
      || !src || name[strlen (NAME_PREFIX) + end] != '\0')
    return EXT2_ET_BAD_DEVICE_NAME;
  if (flags & IO_FLAG_RW)
    return EXT2_ET_RO_FILSYS;

  io = calloc (1, sizeof *io);
  if (!io)
    return EXT2_ET_NO_MEMORY;
  io->name = strdup (name);
  if (!io->name)
    {
      free (io);
      return EXT2_ET_NO_MEMORY;
    }
  io->magic = EXT2_ET_MAGIC_IO_CHANNEL;
  io->manager = ext2io_manager;
  io->block_size = 1024;
  io->refcount = 1;
  io->private_data = src;
  *channel = io;
  return 0;
}

static errcode_t
ext2io_close (io_channel io)
{
  if (io->magic != EXT2_ET_MAGIC_IO_CHANNEL)
    return EXT2_ET_MAGIC_IO_CHANNEL;
  if (--io->refcount > 0)
    return 0;
  free (io->name);
  free (io);
  return 0;
}

static errcode_t
ext2io_set_blksize (io_channel io, int blksize)
{
  if (blksize <= 0)
    return EXT2_ET_INVALID_ARGUMENT;
  io->block_size = blksize;
  return 0;
}

static errcode_t
ext2io_read_blk64 (io_channel io, unsigned long long block, int count,
                   void *data)
{
  struct ext2io_source *src = io->private_data;
  uint64_t size, off;
  int r;

  if (count < 0)
    size = (uint64_t)-(int64_t)count;
  else
    size = (uint64_t)count * (uint64_t)io->block_size;
  if (size == 0)
    return 0;
  if (block > UINT64_MAX / (uint64_t)io->block_size)
    goto refuse;
  off = block * (uint64_t)io->block_size;
  if (off > src->limit || size > src->limit - off || size > SIZE_MAX)
    goto refuse;
  r = src->read (src->opaque, data, size, src->base + off);
  if (r < 0)
    {
      src->read_errno = -r;
      return -r;
    }
  return 0;

refuse:
  src->refused++;
  return EXT2_ET_SHORT_READ;
}

static errcode_t
ext2io_read_blk (io_channel io, unsigned long block, int count, void *data)
{
  return ext2io_read_blk64 (io, block, count, data);
}

static errcode_t
ext2io_write_blk64 (io_channel io, unsigned long long block, int count,
                    const void *data)
{
  (void)io;
  (void)block;
  (void)count;
  (void)data;
  return EXT2_ET_RO_FILSYS;
}

static errcode_t
ext2io_write_blk (io_channel io, unsigned long block, int count,
                  const void *data)
{
  return ext2io_write_blk64 (io, block, count, data);
}

static errcode_t
ext2io_write_byte (io_channel io, unsigned long offset, int count,
                   const void *data)
{
  (void)offset;
  return ext2io_write_blk64 (io, 0, count, data);
}

static errcode_t
ext2io_flush (io_channel io)
{
  (void)io;
  return 0;
}

static errcode_t
ext2io_set_option (io_channel io, const char *option, const char *arg)
{
  (void)io;
  (void)option;
  (void)arg;
  return EXT2_ET_INVALID_ARGUMENT;
}

/* libext2fs's method table for this I/O manager. */
static struct struct_io_manager manager = {
  .magic = EXT2_ET_MAGIC_IO_MANAGER,
  .name = "ext4lazy read-only I/O manager",
  .open = ext2io_open,
  .close = ext2io_close,
  .set_blksize = ext2io_set_blksize,
  .read_blk = ext2io_read_blk,
  .write_blk = ext2io_write_blk,
  .flush = ext2io_flush,
  .write_byte = ext2io_write_byte,
  .set_option = ext2io_set_option,
  .read_blk64 = ext2io_read_blk64,
  .write_blk64 = ext2io_write_blk64,
};

io_manager ext2io_manager = &manager;
