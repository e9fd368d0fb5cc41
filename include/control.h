/* SPDX-License-Identifier: BSD-3-Clause */
/* control.h --- the control socket: a Unix socket (mode 0600) on which
 * ext4lazyctl asks the engine to flush, to report its counters or to
 * list what it holds.
 *
 * Protocol: the client sends one line, a command with arguments.  The
 * server answers "ok" or "error: MESSAGE" on the first line, then the
 * reply body, then closes the connection.  One thread owns the
 * listening socket; each client is served on a thread of its own, up to
 * 8 at once (beyond: "error: Device or resource busy" at once).  A
 * client must send its whole line within 5 s of connecting (else
 * "error: Connection timed out") and take its whole reply within 5 s of
 * its first byte (else the connection is closed); the command itself
 * may take longer (a flush waiting on the store).
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
/* Set the deadlines of a request and of a reply to ms (5000 by
 * default), before control_start.
 */
extern void control_set_deadline (struct control *c, int ms);
/* Start the serving thread (in the serving process). */
extern int control_start (struct control *c);
/* Stop listening: stop the thread, close and unlink the listening
 * socket (another server may then take its path); the clients being
 * served go on.  control_close still ends them and frees the rest.
 */
extern void control_unlisten (struct control *c);
/* Wait until no client is being served (each ends within its
 * deadlines, or once its command has), without ending them: a reply
 * being sent is sent.  After control_unlisten, no client comes.
 */
extern void control_wait_served (struct control *c);
/* Stop the thread, end every client (their sockets shut down: one
 * sending its request or taking its reply ends at once; one whose
 * command runs, when the command ends, without its reply), close and
 * unlink the socket.  No command runs once it returned.
 */
extern void control_close (struct control *c);

#endif /* EXT4LAZY_CONTROL_H */
