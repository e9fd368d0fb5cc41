/* SPDX-License-Identifier: BSD-3-Clause */
/* control.h --- the control socket: a Unix socket (mode 0600) on which
 * ext4lazyctl asks the engine to flush, to report its counters or to
 * list what it holds.
 *
 * Protocol: the client sends one line, a command with arguments.  The
 * server answers "ok" or "error: MESSAGE" on the first line, then the
 * reply body, then closes the connection.  One thread owns the
 * listening socket; each client is served on a thread of its own, up to
 * 8 at once (beyond: "error: Device or resource busy" at once), and
 * must send its line within 5 s.
 */
#ifndef EXT4LAZY_CONTROL_H
#define EXT4LAZY_CONTROL_H

#include <stdio.h>

/* Carry out cmd, writing the body of the reply to out.  Returns 0 or
 * -errno (then the client gets "error: strerror").
 */
typedef int (*control_fn) (void *opaque, const char *cmd, FILE *out);

struct control;

/* The commands ext4lazyctl sends, carried out on the struct engine
 * given as opaque: "flush" (engine_writeback_all: returns once
 * durable); "stats", "stats json", "stats prometheus" (the counters
 * in that format); "holds", "holds json" (every held block, as
 * holds_print_one prints it); "drain", "drain SECONDS" (drain_run,
 * waiting at most SECONDS for the requests in flight: the body is
 * "drained" once the store is released, and the caller's hook then
 * ends the process; else "not drained: WHY", the server serving on).
 * A control_fn; -EINVAL for anything else.
 */
extern int control_engine_cmd (void *engine, const char *cmd, FILE *out);

/* Create, bind and listen (before serving, so errors reach the user).
 * A stale socket at path is replaced; a live one is -EADDRINUSE.
 */
extern int control_open (const char *path, control_fn fn, void *opaque,
                         struct control **out);
/* Start the serving thread (in the serving process). */
extern int control_start (struct control *c);
/* Stop listening: stop the thread, close and unlink the listening
 * socket (another server may then take its path); the clients being
 * served go on.  control_close still frees the rest.
 */
extern void control_unlisten (struct control *c);
/* Stop the thread, close and unlink the socket. */
extern void control_close (struct control *c);

#endif /* EXT4LAZY_CONTROL_H */
