/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdremote.h --- pure helpers for the NBD backend: checking an NBD URI
 * before anything connects, a parameter of its query (the PSK file),
 * and the errno a remote's failure becomes.
 *
 * Nothing here needs libnbd, so the plugin can check nbd= in any build
 * and the unit tests can run without a server.
 */
#ifndef EXT4LAZY_NBDREMOTE_H
#define EXT4LAZY_NBDREMOTE_H

#include <stdbool.h>
#include <stddef.h>

/* Is uri shaped like an NBD URI that libnbd's nbd_connect_uri takes
 * (nbd, nbds, nbd+unix, nbds+unix, nbd+vsock, nbds+vsock)?  Returns
 * NULL if so, else a short reason ("unknown scheme ...").  Only the
 * shape is checked (scheme, "//", and socket= present exactly for the
 * +unix transports); libnbd parses the rest when it connects.
 */
extern const char *nbdremote_uri_check (const char *uri);

/* The value of the query parameter key of uri (after '?', before any
 * '#', in name=value pairs separated by '&'), percent-decoded as libnbd
 * (libxml2) decodes it, a '%' not followed by two hex digits kept as it
 * is, into buf: the last one when key is given more than once.  Returns
 * 0, -ENOENT when uri has no such parameter, -ENAMETOOLONG when the
 * value does not fit in size.
 */
extern int nbdremote_query_param (const char *uri, const char *key, char *buf,
                                  size_t size);

/* The errno to report for a failed NBD command or connection, from
 * libnbd's errno for it: EIO when it is unknown (0), and when the
 * connection itself failed (ENOTCONN, ECONNRESET, EPIPE, ESHUTDOWN),
 * which the client must not take for its own connection's state;
 * otherwise err itself.  Positive in, positive out.
 */
extern int nbdremote_errno (int err);

#endif /* EXT4LAZY_NBDREMOTE_H */
