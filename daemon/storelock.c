/* SPDX-License-Identifier: BSD-3-Clause */
/* storelock.c --- OFD locks on the qemu lock bytes of a file or block
 * device (storelock.h).  No state: the kernel keeps the locks, on the
 * open file description.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "storelock.h"

/* The permissions a holder uses, and those it does not share. */
#define PERM_BIT(p) (1u << (p))
#define USED(writer)                                                           \
  (PERM_BIT (STORELOCK_READ) | ((writer) ? PERM_BIT (STORELOCK_WRITE) : 0))
#define NOT_SHARED PERM_BIT (STORELOCK_WRITE)
#define NPERM 4

/* What a failed fcntl on a lock means here. */
static int
lock_errno (int err)
{
  if (err == EAGAIN || err == EACCES)
    return -EBUSY;
  /* No OFD locks on this filesystem (or kernel). */
  if (err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK)
    return -ENOLCK;
  return -err;
}

static int
lock_byte (int fd, short type, int cmd, off_t off, struct flock *fl)
{
  memset (fl, 0, sizeof *fl);
  fl->l_type = type;
  fl->l_whence = SEEK_SET;
  fl->l_start = off;
  fl->l_len = 1;
  return fcntl (fd, cmd, fl) == -1 ? lock_errno (errno) : 0;
}

/* Is byte off locked by another open file description? */
static int
test_byte (int fd, off_t off)
{
  struct flock fl;
  int r = lock_byte (fd, F_WRLCK, F_OFD_GETLK, off, &fl);

  if (r < 0)
    return r;
  return fl.l_type == F_UNLCK ? 0 : -EBUSY;
}

int
storelock_test (int fd, bool writer)
{
  const unsigned used = USED (writer);
  int r = 0;

  for (int p = 0; p < NPERM && r == 0; p++)
    if (used & PERM_BIT (p))
      r = test_byte (fd, STORELOCK_SHARED_BASE + p);
  for (int p = 0; p < NPERM && r == 0; p++)
    if (NOT_SHARED & PERM_BIT (p))
      r = test_byte (fd, STORELOCK_PERM_BASE + p);
  return r;
}

int
storelock_take (int fd, bool writer)
{
  const unsigned used = USED (writer);
  struct flock fl;
  int r = 0;

  for (int p = 0; p < NPERM && r == 0; p++)
    if (used & PERM_BIT (p))
      r = lock_byte (fd, F_RDLCK, F_OFD_SETLK, STORELOCK_PERM_BASE + p, &fl);
  for (int p = 0; p < NPERM && r == 0; p++)
    if (NOT_SHARED & PERM_BIT (p))
      r = lock_byte (fd, F_RDLCK, F_OFD_SETLK, STORELOCK_SHARED_BASE + p, &fl);
  if (r == 0)
    r = storelock_test (fd, writer);
  if (r < 0)
    storelock_release (fd);
  return r;
}

void
storelock_release (int fd)
{
  struct flock fl;
  const int saved = errno;

  for (int p = 0; p < NPERM; p++)
    {
      lock_byte (fd, F_UNLCK, F_OFD_SETLK, STORELOCK_PERM_BASE + p, &fl);
      lock_byte (fd, F_UNLCK, F_OFD_SETLK, STORELOCK_SHARED_BASE + p, &fl);
    }
  errno = saved;
}
