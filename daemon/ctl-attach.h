/* SPDX-License-Identifier: BSD-3-Clause */
/* ctl-attach.h --- ext4lazyctl attach and detach: the kernel's NBD
 * device connected to a server through netlink, with a dead-connection
 * timeout, and connected again whenever the link dies (a server
 * restart), so that the kernel re-sends what was not answered.
 *
 * The parts: the command line (ctl-attach-parse.c), the export seen
 * through libnbd and whether a new server's export is the same
 * (ctl-export.c), the nbd generic netlink family (ctl-nbdnl.c), and the
 * command itself with its loop (ctl-attach.c).
 */
#ifndef EXT4LAZY_CTL_ATTACH_H
#define EXT4LAZY_CTL_ATTACH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Defaults: the dead-connection timeout (as ceph-csi uses with
 * rbd-nbd), the I/O timeout and the NBD port.
 */
#define ATTACH_DEAD_TIMEOUT 300
#define ATTACH_IO_TIMEOUT 10
#define ATTACH_PORT "10809"

/* Where the server is. */
enum attach_kind
{
  ATTACH_UNIX, /* path: a Unix socket */
  ATTACH_TCP,  /* host, port */
  ATTACH_URI,  /* uri: nbd:// or nbd+unix:// (libnbd parses it) */
};

struct attach_addr
{
  enum attach_kind kind;
  char path[108]; /* ATTACH_UNIX: the socket (sun_path's size) */
  char host[256]; /* ATTACH_TCP */
  char port[16];  /* ATTACH_TCP: a number or service name */
  char uri[1024]; /* ATTACH_URI */
};

/* The command line of attach and detach. */
struct attach_opts
{
  bool detach;             /* the detach command */
  char device[32];         /* "nbd0" */
  uint32_t index;          /* 0 for nbd0 */
  struct attach_addr addr; /* attach */
  const char *export_name; /* --export, default "" */
  uint64_t dead_timeout;   /* --dead-timeout, seconds */
  uint64_t timeout;        /* --timeout, seconds, 0: none */
  uint32_t block_size;     /* --block-size, 0: from the export */
};

/* What the kernel is told about an export, and what must not change
 * across a reconnection.
 */
struct nbd_export
{
  uint64_t size;      /* bytes */
  uint64_t flags;     /* NBD transmission flags (NBD_FLAG_*) */
  uint32_t preferred; /* the server's preferred block size, 0: none */
  uint32_t minimum;   /* its minimum block size, 0: none */
};

/* Parse "attach DEVICE ADDRESS [options]" or "detach DEVICE" (argv[0] is
 * the command) into *o.  Returns -1 when there is something to do,
 * else an exit status (CTL_OK after --help, CTL_USAGE with the reason
 * printed).
 */
extern int attach_parse (int argc, char *argv[], struct attach_opts *o);

/* "/dev/nbd3" or "nbd3" into "nbd3" and 3.  Returns 0 or -EINVAL. */
extern int attach_parse_device (const char *arg, char device[32],
                                uint32_t *index);

/* SOCKET, HOST[:PORT], [IPV6][:PORT] or an nbd:// / nbd+unix:// URI into
 * *a.  Returns 0, -EINVAL (malformed) or -EPROTONOSUPPORT (TLS: the
 * kernel cannot carry it).
 */
extern int attach_parse_address (const char *arg, struct attach_addr *a);

/* The block size the kernel is given: want if non-zero, else the
 * export's preferred size within 512..4096, at least its minimum.
 * Returns 0 when no power of two from 512 to 4096 fits.
 */
extern uint32_t export_block_size (const struct nbd_export *e, uint32_t want);

/* Is the export a new server offers the one the device was connected
 * to (the same flags, at least the same size: a grown export is the
 * same one)?  If not, why (one line) into why[len].
 */
extern bool export_same (const struct nbd_export *was,
                         const struct nbd_export *now, char *why, size_t len);

/* The backend identifier the device carries: "ext4lazy:RANDOM:SIZE:FLAGS"
 * (RANDOM 16 hex digits), so that a later attach run can take over the
 * device and still check the export.  Returns 0 or -EINVAL.
 */
extern int export_ident_format (const struct nbd_export *e, uint64_t random,
                                char *out, size_t len);
extern int export_ident_parse (const char *ident, struct nbd_export *e);

/* Connect to the server and do the handshake (simple replies only, no
 * meta contexts): *e gets the export, and the connected socket is
 * returned (blocking, close-on-exec, nothing more to be said on it by
 * libnbd), or -1 with the reason in why[len].
 */
extern int export_connect (const struct attach_opts *o, struct nbd_export *e,
                           char *why, size_t len);

/* The nbd generic netlink family (ctl-nbdnl.c).  Each returns 0 or
 * -errno; the kernel's reason is in the kernel log.
 */
struct nbdnl;
extern int nbdnl_open (struct nbdnl **nl, bool events);
extern void nbdnl_close (struct nbdnl *nl);
struct nbdnl_connect
{
  uint32_t index;
  uint64_t size, block_size, flags, timeout, dead_timeout;
  const char *ident;
  int fd;
};
extern int nbdnl_connect (struct nbdnl *nl, const struct nbdnl_connect *c);
/* Hand the device the connected socket fd (none when -1); with size
 * > 0, its new size in bytes (a grown export).
 */
extern int nbdnl_reconfigure (struct nbdnl *nl, uint32_t index,
                              const char *ident, int fd, uint64_t size);
extern int nbdnl_disconnect (struct nbdnl *nl, uint32_t index);
/* 1 connected, 0 not (or no such device), or -errno. */
extern int nbdnl_status (struct nbdnl *nl, uint32_t index);
/* The events socket's descriptor, to poll; and after it polls readable,
 * whether a dead link of device index was announced (1), or 0, or
 * -errno.
 */
extern int nbdnl_event_fd (struct nbdnl *nl);
extern int nbdnl_link_dead (struct nbdnl *nl, uint32_t index);

/* The commands (ctl-attach.c): an exit status. */
extern int ctl_attach_main (int argc, char *argv[]);

#endif /* EXT4LAZY_CTL_ATTACH_H */
