/* SPDX-License-Identifier: BSD-3-Clause */
/* ctl.h --- what ext4lazyctl's files share: asking the control socket
 * one command, and the live view.
 *
 * Exit statuses, documented in docs/ext4lazyctl.pod: CTL_OK,
 * CTL_FAILED (the server answered an error or could not be reached:
 * the message, naming the socket, is on stderr), CTL_USAGE.
 */
#ifndef EXT4LAZY_CTL_H
#define EXT4LAZY_CTL_H

#include <stddef.h>

enum
{
  CTL_OK = 0,
  CTL_FAILED = 1,
  CTL_USAGE = 2,
};

/* Send cmd (one line, without its newline) to the control socket at
 * path and read the whole reply.  On "ok", *body (NUL-terminated,
 * free it) holds the rest of the reply and CTL_OK is returned; else
 * the reason is printed on stderr and CTL_FAILED returned.
 */
extern int ctl_ask (const char *path, const char *cmd, char **body,
                    size_t *len);

/* The live view: a frame every interval seconds, count frames (0: until
 * q, Ctrl-C, SIGTERM or SIGHUP).  Returns an exit status.
 */
extern int ctl_watch (const char *path, double interval, long count);

#endif /* EXT4LAZY_CTL_H */
