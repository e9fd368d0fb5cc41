/* SPDX-License-Identifier: BSD-3-Clause */
/* storelock.h --- one writer per volume: the lock a server holds on a
 * file or block device for as long as it has it open.
 *
 * ext4lazy writes held blocks back long after its client wrote them,
 * so a second writer on the same volume would have them overwrite its
 * newer metadata.  The lock is the one qemu's image locking uses
 * (block/file-posix.c), so that qemu, qemu-img and qemu-storage-daemon
 * see it and ext4lazy sees theirs: open file description (OFD) read
 * locks on single bytes, byte 100 + P for each permission P the holder
 * uses and byte 200 + P for each permission it does not share with
 * others, where P is
 *
 *   0  consistent read     1  write
 *   2  write unchanged     3  resize
 *
 * A writer uses read and write, and shares everything but write; a
 * reader uses read and shares everything but write (qemu's defaults
 * for a device that is not share-rw).  Taking the lock first sets
 * one's own bytes, then tests the bytes that conflict: the "not
 * shared" byte of each permission used, and the "used" byte of each
 * permission not shared.  Of two servers starting at once, at least
 * one sees the other.
 *
 * An OFD lock belongs to the open file description, not the process:
 * it survives fork (nbdkit forks into the background after the store
 * is open) and goes away when the last descriptor of it is closed,
 * or the process dies.
 */
#ifndef EXT4LAZY_STORELOCK_H
#define EXT4LAZY_STORELOCK_H

#include <stdbool.h>

/* The qemu lock bytes (see above). */
#define STORELOCK_PERM_BASE 100
#define STORELOCK_SHARED_BASE 200
#define STORELOCK_READ 0
#define STORELOCK_WRITE 1

/* Take the lock on fd: as a writer, or as a reader.  Returns 0;
 * -EBUSY when another open file description holds a conflicting lock
 * (another server, qemu); -ENOLCK when the filesystem cannot do OFD
 * locks; else -errno.  On failure the bytes taken are released.
 */
extern int storelock_take (int fd, bool writer);

/* Release the lock on fd (closing the last descriptor also does). */
extern void storelock_release (int fd);

/* Does some other open file description hold a lock on fd's bytes
 * that conflicts with the lock of a writer (or reader)?  Returns 0
 * (none), -EBUSY (one does) or -errno.
 */
extern int storelock_test (int fd, bool writer);

#endif /* EXT4LAZY_STORELOCK_H */
