/* SPDX-License-Identifier: BSD-3-Clause */
/* test-storelock.c --- the store lock: one writer, many readers, none
 * of them beside a writer, released on close, on qemu's lock bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "storelock.h"

static char path[256];

static void
setup (void)
{
  const char *dir = getenv ("TMPDIR");
  int fd;

  snprintf (path, sizeof path, "%s/storelock.XXXXXX", dir ? dir : "/tmp");
  fd = mkstemp (path);
  cr_assert_geq (fd, 0);
  cr_assert_eq (ftruncate (fd, 1 << 20), 0);
  close (fd);
}

static void
teardown (void)
{
  unlink (path);
}

static int
open_file (void)
{
  int fd = open (path, O_RDWR | O_CLOEXEC);

  cr_assert_geq (fd, 0);
  return fd;
}

/* Is byte off locked by an open file description other than fd's? */
static bool
byte_locked (int fd, off_t off)
{
  struct flock fl
      = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = off, .l_len = 1 };

  cr_assert_eq (fcntl (fd, F_OFD_GETLK, &fl), 0);
  return fl.l_type != F_UNLCK;
}

TestSuite (storelock, .init = setup, .fini = teardown);

Test (storelock, one_writer)
{
  int a = open_file (), b = open_file ();

  cr_assert_eq (storelock_take (a, true), 0);
  cr_assert_eq (storelock_take (b, true), -EBUSY);
  cr_assert_eq (storelock_take (b, false), -EBUSY);
  cr_assert_eq (storelock_test (b, true), -EBUSY);
  close (a);
  cr_assert_eq (storelock_take (b, true), 0, "the lock goes with the fd");
  close (b);
}

Test (storelock, readers_share)
{
  int a = open_file (), b = open_file (), c = open_file ();

  cr_assert_eq (storelock_take (a, false), 0);
  cr_assert_eq (storelock_take (b, false), 0);
  cr_assert_eq (storelock_take (c, true), -EBUSY);
  /* The refused writer left nothing behind: the readers still see
   * no writer, and another reader gets in.
   */
  cr_assert_not (byte_locked (a, STORELOCK_PERM_BASE + STORELOCK_WRITE));
  cr_assert_eq (storelock_take (c, false), 0);
  storelock_release (a);
  storelock_release (b);
  storelock_release (c);
  cr_assert_eq (storelock_take (c, true), 0, "released by hand");
  close (a);
  close (b);
  close (c);
}

/* qemu's bytes: a writer "uses" read (100) and write (101) and does
 * not share write (201); it leaves the others alone.
 */
Test (storelock, qemu_bytes)
{
  int a = open_file (), b = open_file ();

  cr_assert_eq (storelock_take (a, true), 0);
  cr_assert (byte_locked (b, 100));
  cr_assert (byte_locked (b, 101));
  cr_assert (byte_locked (b, 201));
  cr_assert_not (byte_locked (b, 200));
  cr_assert_not (byte_locked (b, 102));
  cr_assert_not (byte_locked (b, 203));
  close (a);
  close (b);
}

/* A lock someone else (qemu) holds on its "write" byte keeps a writer
 * out and lets a reader of the same kind as qemu's -U reader in.
 */
Test (storelock, foreign_writer)
{
  int q = open_file (), b = open_file ();
  struct flock fl = { .l_type = F_RDLCK,
                      .l_whence = SEEK_SET,
                      .l_start = STORELOCK_SHARED_BASE + STORELOCK_WRITE,
                      .l_len = 1 };

  cr_assert_eq (fcntl (q, F_OFD_SETLK, &fl), 0);
  cr_assert_eq (storelock_take (b, true), -EBUSY);
  close (q);
  cr_assert_eq (storelock_take (b, true), 0);
  close (b);
}
