/* SPDX-License-Identifier: BSD-3-Clause */
/* testutil.h --- shell helpers shared by the unit tests that make
 * images with mkfs.ext4, debugfs and sfdisk.
 */
#ifndef EXT4LAZY_TESTUTIL_H
#define EXT4LAZY_TESTUTIL_H

/* Run a shell command (output discarded); its exit status, or -1. */
extern int sh (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

/* Run a shell command and return its standard output (free it). */
extern char *capture (const char *fmt, ...)
    __attribute__ ((format (printf, 1, 2)));

#endif /* EXT4LAZY_TESTUTIL_H */
