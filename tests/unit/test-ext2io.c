/* SPDX-License-Identifier: BSD-3-Clause */
/* test-ext2io.c --- the read-only io_manager over a layout_read_fn: a
 * filesystem made here with mkfs.ext4, placed at an offset inside a
 * larger file, opens through it with ext2fs_open2 and reads back (the
 * superblock as dumpe2fs sees it, a file's content); reads past the
 * region's limit are refused without reaching the callback; read errors
 * pass through; writes are refused; device names round-trip.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <ext2fs/ext2fs.h>

#include "ext2io.h"
#include "testutil.h"

#define BASE (1 << 20)    /* the filesystem's offset in the file */
#define FS_SIZE (8 << 20) /* its size */
#define TAIL (64 << 10)   /* bytes after it */
#define LABEL "ext2io-test"
#define UUID "6b1e3c1a-2f4d-4e8b-9c3a-0d5e7f9a1b2c"
#define CONTENT "hello, ext2io\n"

/* The device behind the callback: a file, and counters. */
struct dev
{
  char dir[256];
  int fd;
  uint64_t lo, hi; /* reads outside [lo, hi) are counted */
  unsigned reads, outside;
  int fail; /* if non-zero, reads fail with -fail */
};

static int
read_cb (void *opaque, void *buf, size_t len, uint64_t off)
{
  struct dev *d = opaque;
  char *p = buf;

  d->reads++;
  if (off < d->lo || off + len > d->hi || off + len < off)
    d->outside++;
  if (d->fail)
    return -d->fail;
  while (len)
    {
      ssize_t n = pread (d->fd, p, len, off);

      if (n < 0)
        return -errno;
      if (n == 0)
        return -EIO;
      p += n;
      len -= n;
      off += n;
    }
  return 0;
}

static void
need (const char *prog)
{
  if (sh ("command -v %s", prog) != 0)
    cr_skip_test ("%s is not installed", prog);
}

/* The scratch directory of the running test, removed by fini even when
 * the test fails.
 */
static char scratch[256];

static void
dev_del (struct dev *d)
{
  close (d->fd);
  d->fd = -1;
  sh ("rm -rf '%s'", d->dir);
  scratch[0] = 0;
}

static void
fini (void)
{
  if (scratch[0])
    sh ("rm -rf '%s'", scratch);
}

TestSuite (ext2io, .fini = fini);

/* Make dir/disk.img: BASE bytes of 0xff, a FS_SIZE ext4 filesystem with
 * block size bs holding /hello.txt, then TAIL bytes of 0xff.  If blank,
 * the filesystem is all zeros instead.
 */
static void
dev_make (struct dev *d, unsigned bs, int blank)
{
  const char *t = getenv ("TMPDIR");
  char img[300];

  memset (d, 0, sizeof *d);
  d->fd = -1;
  snprintf (d->dir, sizeof d->dir, "%s/ext4lazy-ext2io-XXXXXX",
            t && *t ? t : "/tmp");
  cr_assert_not_null (mkdtemp (d->dir));
  strcpy (scratch, d->dir);
  if (blank)
    cr_assert_eq (sh ("truncate -s %d '%s/fs.img'", FS_SIZE, d->dir), 0);
  else
    {
      need ("mkfs.ext4");
      cr_assert_eq (sh ("cd '%s' && mkdir root && printf '%s' >root/hello.txt"
                        " && mkfs.ext4 -q -F -b %u -L %s -U %s -d root"
                        " fs.img %dk",
                        d->dir, CONTENT, bs, LABEL, UUID, FS_SIZE >> 10),
                    0, "mkfs.ext4 failed");
    }
  /* In a subshell: sh () sends the command's own output to /dev/null. */
  cr_assert_eq (sh ("(cd '%s' && { head -c %d /dev/zero | tr '\\0' '\\377';"
                    " cat fs.img; head -c %d /dev/zero | tr '\\0' '\\377'; }"
                    " >disk.img)",
                    d->dir, BASE, TAIL),
                0);
  snprintf (img, sizeof img, "%s/disk.img", d->dir);
  d->fd = open (img, O_RDONLY);
  cr_assert_geq (d->fd, 0);
  cr_assert_eq (lseek (d->fd, 0, SEEK_END), BASE + FS_SIZE + TAIL);
  d->lo = BASE;
  d->hi = BASE + FS_SIZE;
}

static struct ext2io_source
source (struct dev *d)
{
  return (struct ext2io_source){
    .read = read_cb, .opaque = d, .base = BASE, .limit = FS_SIZE
  };
}

/* A value dumpe2fs -h prints for "key:". */
static char *
dumpe2fs_value (struct dev *d, const char *key)
{
  char *out = capture ("dumpe2fs -h '%s/fs.img' 2>/dev/null | sed -n "
                       "'s/^%s: *//p'",
                       d->dir, key);
  char *nl = strchr (out, '\n');

  if (nl)
    *nl = 0;
  cr_assert_neq (out[0], 0, "dumpe2fs has no \"%s\"", key);
  return out;
}

static uint64_t
dumpe2fs_u64 (struct dev *d, const char *key)
{
  char *s = dumpe2fs_value (d, key), *end;
  uint64_t v = strtoull (s, &end, 10);

  cr_assert_eq (*end, 0, "%s: \"%s\"", key, s);
  free (s);
  return v;
}

static void
check_open (unsigned bs)
{
  struct dev d;
  struct ext2io_source src;
  char name[64], uuid[40], *want;
  ext2_filsys fs = NULL;
  ext2_ino_t ino;
  ext2_file_t file;
  char buf[64] = { 0 };
  unsigned got = 0;
  const unsigned char *u;
  errcode_t e;

  need ("dumpe2fs");
  dev_make (&d, bs, 0);
  src = source (&d);
  cr_assert_eq (ext2io_format_name (&src, name, sizeof name), 0);
  e = ext2fs_open2 (name, NULL, EXT2_FLAG_64BITS, 0, 0, ext2io_manager, &fs);
  cr_assert_eq (e, 0, "ext2fs_open2: %ld", (long)e);

  /* The superblock, as dumpe2fs reads it from the bare image. */
  cr_assert_eq (fs->super->s_magic, EXT2_SUPER_MAGIC);
  cr_assert_eq (fs->blocksize, bs);
  cr_assert_eq (ext2fs_blocks_count (fs->super), (uint64_t)FS_SIZE / bs);
  cr_assert_eq (ext2fs_blocks_count (fs->super),
                dumpe2fs_u64 (&d, "Block count"));
  cr_assert_eq (fs->super->s_inodes_count, dumpe2fs_u64 (&d, "Inode count"));
  cr_assert_eq (fs->super->s_first_data_block,
                dumpe2fs_u64 (&d, "First block"));
  cr_assert_eq (strncmp ((char *)fs->super->s_volume_name, LABEL,
                         sizeof fs->super->s_volume_name),
                0);
  u = fs->super->s_uuid;
  snprintf (uuid, sizeof uuid,
            "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
            "%02x%02x%02x%02x%02x%02x",
            u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
            u[11], u[12], u[13], u[14], u[15]);
  cr_assert_str_eq (uuid, UUID);
  want = dumpe2fs_value (&d, "Filesystem UUID");
  cr_assert_str_eq (uuid, want);
  free (want);

  /* A file's content, through the directory and the extent tree. */
  e = ext2fs_namei (fs, EXT2_ROOT_INO, EXT2_ROOT_INO, "hello.txt", &ino);
  cr_assert_eq (e, 0, "namei: %ld", (long)e);
  cr_assert_eq (ext2fs_file_open (fs, ino, 0, &file), 0);
  cr_assert_eq (ext2fs_file_read (file, buf, sizeof buf - 1, &got), 0);
  cr_assert_eq (ext2fs_file_close (file), 0);
  cr_assert_eq (got, strlen (CONTENT));
  cr_assert_str_eq (buf, CONTENT);

  cr_assert_gt (d.reads, 0);
  cr_assert_eq (d.outside, 0, "%u reads outside the region", d.outside);
  cr_assert_eq (src.refused, 0);
  cr_assert_eq (src.read_errno, 0);
  cr_assert_eq (ext2fs_close_free (&fs), 0);
  cr_assert_null (fs);
  dev_del (&d);
}

Test (ext2io, opens_4k_filesystem_at_base)
{
  check_open (4096);
}

Test (ext2io, opens_1k_filesystem_at_base)
{
  check_open (1024);
}

Test (ext2io, blank_region_is_not_a_filesystem)
{
  struct dev d;
  struct ext2io_source src;
  char name[64];
  ext2_filsys fs = NULL;

  dev_make (&d, 4096, 1);
  src = source (&d);
  cr_assert_eq (ext2io_format_name (&src, name, sizeof name), 0);
  cr_assert_eq (ext2fs_open2 (name, NULL, 0, 0, 0, ext2io_manager, &fs),
                EXT2_ET_BAD_MAGIC);
  cr_assert_gt (d.reads, 0);
  cr_assert_eq (d.outside, 0);
  dev_del (&d);
}

/* A region too short for the superblock: refused before reading. */
Test (ext2io, region_smaller_than_the_superblock)
{
  struct dev d;
  struct ext2io_source src;
  char name[64];
  ext2_filsys fs = NULL;

  dev_make (&d, 4096, 0);
  src = source (&d);
  src.limit = 1536;
  d.hi = BASE + 1536;
  cr_assert_eq (ext2io_format_name (&src, name, sizeof name), 0);
  cr_assert_neq (ext2fs_open2 (name, NULL, 0, 0, 0, ext2io_manager, &fs), 0);
  cr_assert_gt (src.refused, 0);
  cr_assert_eq (d.outside, 0, "a read went past the limit");
  dev_del (&d);
}

Test (ext2io, reads_past_the_limit_are_refused)
{
  struct dev d;
  struct ext2io_source src;
  char name[64];
  io_channel io;
  unsigned char *buf = malloc (3 * 4096), want[4096];
  unsigned long long last = FS_SIZE / 4096 - 1;
  unsigned reads;

  cr_assert_not_null (buf);
  dev_make (&d, 4096, 0);
  src = source (&d);
  cr_assert_eq (ext2io_format_name (&src, name, sizeof name), 0);
  cr_assert_eq (ext2io_manager->open (name, 0, &io), 0);

  /* The default block size is 1024: block 1 is the superblock. */
  cr_assert_eq (io_channel_read_blk64 (io, 1, 1, buf), 0);
  cr_assert_eq (buf[56] | buf[57] << 8, EXT2_SUPER_MAGIC);
  cr_assert_eq (pread (d.fd, want, 1024, BASE + 1024), 1024);
  cr_assert_eq (memcmp (buf, want, 1024), 0, "base not applied");

  cr_assert_eq (io_channel_set_blksize (io, 4096), 0);
  /* The last block of the region reads; the offset is base + block. */
  cr_assert_eq (io_channel_read_blk64 (io, last, 1, buf), 0);
  cr_assert_eq (pread (d.fd, want, 4096, BASE + last * 4096), 4096);
  cr_assert_eq (memcmp (buf, want, 4096), 0);
  cr_assert_eq (src.refused, 0);

  reads = d.reads;
  /* Wholly past the end. */
  cr_assert_eq (io_channel_read_blk64 (io, last + 1, 1, buf),
                EXT2_ET_SHORT_READ);
  cr_assert_eq (src.refused, 1);
  /* Further past the end: the arithmetic must not wrap. */
  cr_assert_eq (io_channel_read_blk64 (io, last + 2, 1, buf),
                EXT2_ET_SHORT_READ);
  cr_assert_eq (io_channel_read_blk64 (io, last + 1000, -1, buf),
                EXT2_ET_SHORT_READ);
  cr_assert_eq (src.refused, 3);
  /* Straddling the end. */
  cr_assert_eq (io_channel_read_blk64 (io, last, 2, buf), EXT2_ET_SHORT_READ);
  cr_assert_eq (src.refused, 4);
  /* A negative count is bytes: one byte past the end is refused. */
  cr_assert_eq (io_channel_read_blk64 (io, last, -4097, buf),
                EXT2_ET_SHORT_READ);
  cr_assert_eq (src.refused, 5);
  /* Blocks whose offset overflows 64 bits. */
  cr_assert_eq (io_channel_read_blk64 (io, UINT64_MAX / 4096 + 1, 1, buf),
                EXT2_ET_SHORT_READ);
  cr_assert_eq (io_channel_read_blk64 (io, ULLONG_MAX, 1, buf),
                EXT2_ET_SHORT_READ);
  cr_assert_eq (src.refused, 7);
  /* The 32-bit entry point is refused the same way. */
  cr_assert_eq (io_channel_read_blk (io, last + 1, 1, buf), EXT2_ET_SHORT_READ);
  cr_assert_eq (src.refused, 8);
  cr_assert_eq (d.reads, reads, "a refused read reached the callback");

  /* Bytes up to the end exactly are fine; nothing is read for 0. */
  cr_assert_eq (io_channel_read_blk64 (io, last, -4096, buf), 0);
  cr_assert_eq (memcmp (buf, want, 4096), 0);
  cr_assert_eq (io_channel_read_blk64 (io, last, 0, buf), 0);
  cr_assert_eq (d.reads, reads + 1);
  cr_assert_eq (d.outside, 0);

  cr_assert_eq (io_channel_close (io), 0);
  free (buf);
  dev_del (&d);
}

Test (ext2io, read_errors_pass_through)
{
  struct dev d;
  struct ext2io_source src;
  char name[64], buf[1024];
  io_channel io;
  ext2_filsys fs = NULL;

  dev_make (&d, 4096, 0);
  src = source (&d);
  cr_assert_eq (ext2io_format_name (&src, name, sizeof name), 0);
  cr_assert_eq (ext2io_manager->open (name, 0, &io), 0);
  cr_assert_eq (io_channel_read_blk64 (io, 1, 1, buf), 0);
  cr_assert_eq (src.read_errno, 0);
  d.fail = EIO;
  cr_assert_eq (io_channel_read_blk64 (io, 1, 1, buf), EIO);
  cr_assert_eq (src.read_errno, EIO);
  cr_assert_eq (src.refused, 0, "a failed read counted as refused");
  cr_assert_eq (io_channel_close (io), 0);

  /* And through ext2fs_open2. */
  src.read_errno = 0;
  d.fail = ENXIO;
  cr_assert_neq (ext2fs_open2 (name, NULL, 0, 0, 0, ext2io_manager, &fs), 0);
  cr_assert_eq (src.read_errno, ENXIO);
  dev_del (&d);
}

Test (ext2io, writes_are_refused)
{
  struct dev d;
  struct ext2io_source src;
  char name[64], buf[4096] = { 0 };
  io_channel io;
  ext2_filsys fs = NULL;
  unsigned reads;

  dev_make (&d, 4096, 0);
  src = source (&d);
  cr_assert_eq (ext2io_format_name (&src, name, sizeof name), 0);

  /* Opening for writing is refused, by the manager and so by ext2fs. */
  cr_assert_eq (ext2io_manager->open (name, IO_FLAG_RW, &io),
                EXT2_ET_RO_FILSYS);
  cr_assert_eq (
      ext2fs_open2 (name, NULL, EXT2_FLAG_RW, 0, 0, ext2io_manager, &fs),
      EXT2_ET_RO_FILSYS);
  cr_assert_null (fs);

  /* A read-only channel refuses every kind of write. */
  cr_assert_eq (ext2io_manager->open (name, 0, &io), 0);
  cr_assert_eq (io_channel_set_blksize (io, 4096), 0);
  reads = d.reads;
  cr_assert_eq (io_channel_write_blk64 (io, 0, 1, buf), EXT2_ET_RO_FILSYS);
  cr_assert_eq (io_channel_write_blk (io, 1, 1, buf), EXT2_ET_RO_FILSYS);
  cr_assert_eq (io_channel_write_blk64 (io, 2, -100, buf), EXT2_ET_RO_FILSYS);
  cr_assert_eq (io_channel_write_byte (io, 1024, 4, buf), EXT2_ET_RO_FILSYS);
  cr_assert_eq (d.reads, reads);
  /* Flushing a read-only channel has nothing to do and succeeds. */
  cr_assert_eq (io_channel_flush (io), 0);
  cr_assert_eq (io_channel_close (io), 0);
  dev_del (&d);
}

Test (ext2io, set_blksize_checks_its_argument)
{
  struct ext2io_source src = { 0 };
  char name[64];
  io_channel io;

  cr_assert_eq (ext2io_format_name (&src, name, sizeof name), 0);
  cr_assert_eq (ext2io_manager->open (name, 0, &io), 0);
  cr_assert_eq (io->block_size, 1024);
  cr_assert_eq (io_channel_set_blksize (io, 0), EXT2_ET_INVALID_ARGUMENT);
  cr_assert_eq (io_channel_set_blksize (io, -4096), EXT2_ET_INVALID_ARGUMENT);
  cr_assert_eq (io->block_size, 1024);
  cr_assert_eq (io_channel_set_blksize (io, 2048), 0);
  cr_assert_eq (io->block_size, 2048);
  cr_assert_eq (io_channel_close (io), 0);
}

Test (ext2io, names_round_trip)
{
  struct ext2io_source a = { 0 }, b = { 0 };
  char na[64], nb[64], small[sizeof na + 2];
  io_channel io;
  size_t len;

  cr_assert_eq (ext2io_format_name (&a, na, sizeof na), 0);
  cr_assert_eq (ext2io_format_name (&b, nb, sizeof nb), 0);
  cr_assert_str_neq (na, nb, "two sources, one name");
  len = strlen (na);
  cr_assert_lt (len, 40, "\"%s\" does not fit the 40 bytes promised", na);

  /* The name opens a channel on the very source it was made for. */
  cr_assert_eq (ext2io_manager->open (na, 0, &io), 0);
  cr_assert_eq (io->magic, EXT2_ET_MAGIC_IO_CHANNEL);
  cr_assert_eq (io->manager, ext2io_manager);
  cr_assert_eq (io->private_data, &a);
  cr_assert_str_eq (io->name, na);
  cr_assert_eq (io_channel_close (io), 0);
  cr_assert_eq (ext2io_manager->open (nb, 0, &io), 0);
  cr_assert_eq (io->private_data, &b);
  cr_assert_eq (io_channel_close (io), 0);

  /* Room for the name and its NUL, and no less. */
  cr_assert_eq (ext2io_format_name (&a, small, len + 1), 0);
  cr_assert_str_eq (small, na);
  cr_assert_eq (ext2io_format_name (&a, small, len), -ENAMETOOLONG);
  cr_assert_eq (ext2io_format_name (&a, small, 1), -ENAMETOOLONG);
  cr_assert_eq (ext2io_format_name (&a, small, 40), 0);

  /* Anything after the pointer makes it another name. */
  snprintf (small, sizeof small, "%sx", na);
  io = NULL;
  cr_assert_eq (ext2io_manager->open (small, 0, &io), EXT2_ET_BAD_DEVICE_NAME,
                "\"%s\" was taken", small);
  snprintf (small, sizeof small, "%s ", na);
  cr_assert_eq (ext2io_manager->open (small, 0, &io), EXT2_ET_BAD_DEVICE_NAME,
                "\"%s\" was taken", small);
  cr_assert_null (io);
}

Test (ext2io, foreign_names_are_refused)
{
  static const char *const bad[] = {
    "",
    "/dev/sda",
    "ext4lazy-src:",
    "ext4lazy-src:zz",
    "ext4lazy-src:0x0",
    "ext4lazy-src:(nil)",
    "EXT4LAZY-SRC:0x1000",
  };
  io_channel io = NULL;

  cr_assert_eq (ext2io_manager->open (NULL, 0, &io), EXT2_ET_BAD_DEVICE_NAME);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_assert_eq (ext2io_manager->open (bad[i], 0, &io),
                  EXT2_ET_BAD_DEVICE_NAME, "\"%s\" was taken", bad[i]);
  cr_assert_null (io);
}
