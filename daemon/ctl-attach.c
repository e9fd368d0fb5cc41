/* SPDX-License-Identifier: BSD-3-Clause */
/* ctl-attach.c --- ext4lazyctl attach and detach (ctl-attach.h).
 *
 * attach connects /dev/nbdN over netlink with a dead-connection timeout
 * and a backend identifier, then stays in the foreground: when the
 * kernel announces the link dead (a server restart drops the
 * connection), it connects again, checks that the export is the same and
 * hands the kernel the new socket (NBD_CMD_RECONFIGURE); the kernel
 * re-sends what the old server did not answer.  A run that finds the
 * device attached by an earlier run (its identifier in sysfs) takes it
 * over.  detach tells the attach process (an abstract Unix socket named
 * after the device), then disconnects the device; the process exits.
 * Single-threaded: no locks.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "ctl-attach.h"

#define STATUS_PERIOD 2.0 /* seconds between looks at the device's state */
#define BACKOFF_FIRST 0.05
#define BACKOFF_MAX 1.0

/* The attach process's state. */
struct attach
{
  struct attach_opts o;
  struct nbdnl *nl;
  struct nbd_export exp; /* what the device was connected to */
  char ident[80];        /* its backend identifier */
  int listen_fd;         /* the detach socket */
  int detach_fd;         /* a detach command's connection, or -1 */
  bool dead;             /* the link is dead: connecting again */
  bool offer;            /* taken over: a connection offered, maybe unused */
  double dead_since, next_try, backoff, next_status;
  unsigned tries;
};

static volatile sig_atomic_t stop_signal;

static void
on_signal (int sig)
{
  stop_signal = sig;
}

static double
now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void say (const struct attach *a, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

static void
say (const struct attach *a, const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "ext4lazyctl attach %s: ", a->o.device);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
}

/* The abstract socket that detach finds the attach process of a device
 * by.
 */
static socklen_t
detach_addr (const char *device, struct sockaddr_un *sa)
{
  int n;

  *sa = (struct sockaddr_un){ .sun_family = AF_UNIX };
  n = snprintf (sa->sun_path + 1, sizeof sa->sun_path - 1, "ext4lazy-attach/%s",
                device);
  return (socklen_t)(offsetof (struct sockaddr_un, sun_path) + 1 + n);
}

static int
listen_detach (struct attach *a)
{
  struct sockaddr_un sa;
  socklen_t len = detach_addr (a->o.device, &sa);

  a->listen_fd
      = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (a->listen_fd < 0 || bind (a->listen_fd, (struct sockaddr *)&sa, len) < 0
      || listen (a->listen_fd, 4) < 0)
    {
      if (errno == EADDRINUSE)
        say (a, "another ext4lazyctl attach process serves this device");
      else
        say (a, "detach socket: %s", strerror (errno));
      return -1;
    }
  return 0;
}

/* The identifier the device carries in sysfs (a connected device). */
static int
read_backend (const char *device, char *out, size_t len)
{
  char path[64];
  FILE *f;
  bool ok;

  snprintf (path, sizeof path, "/sys/block/%s/backend", device);
  f = fopen (path, "re");
  if (!f)
    return -1;
  ok = fgets (out, (int)len, f) != NULL;
  fclose (f);
  out[strcspn (out, "\n")] = '\0';
  return ok ? 0 : -1;
}

/* A number the device shows in sysfs (/sys/block/DEVICE/NAME), or 0. */
static uint64_t
read_sysfs (const char *device, const char *name)
{
  char path[96];
  unsigned long long v = 0;
  FILE *f;

  snprintf (path, sizeof path, "/sys/block/%s/%s", device, name);
  f = fopen (path, "re");
  if (!f)
    return 0;
  if (fscanf (f, "%llu", &v) != 1)
    v = 0;
  fclose (f);
  return v;
}

/* The device is connected already: take it over if an earlier attach
 * run connected it, and offer the kernel a fresh connection at once (the
 * link may have died meanwhile; if it has not, the kernel ignores it).
 * The identifier has the size the device was connected with; it may
 * have grown since.
 */
static int
adopt (struct attach *a)
{
  uint64_t size;

  if (read_backend (a->o.device, a->ident, sizeof a->ident) < 0
      || export_ident_parse (a->ident, &a->exp) < 0)
    {
      say (a, "the device is in use, not by ext4lazyctl attach");
      return -1;
    }
  size = read_sysfs (a->o.device, "size") * 512;
  if (size > a->exp.size)
    a->exp.size = size;
  say (a, "taking over the device (%s)", a->ident);
  a->dead = a->offer = true;
  a->dead_since = a->next_try = now ();
  a->backoff = BACKOFF_FIRST;
  return 0;
}

/* Connect the device for the first time. */
static int
connect_device (struct attach *a)
{
  char why[512];
  uint64_t rnd = 0;
  int fd, r;
  struct nbdnl_connect c = { .index = a->o.index,
                             .timeout = a->o.timeout,
                             .dead_timeout = a->o.dead_timeout,
                             .ident = a->ident };

  fd = export_connect (&a->o, &a->exp, why, sizeof why);
  if (fd < 0)
    {
      say (a, "cannot connect to the server: %s", why);
      return -1;
    }
  c.block_size = export_block_size (&a->exp, a->o.block_size);
  if (getrandom (&rnd, sizeof rnd, 0) != sizeof rnd)
    rnd = (uint64_t)time (NULL) ^ (uint64_t)getpid () << 32;
  export_ident_format (&a->exp, rnd, a->ident, sizeof a->ident);
  c.size = a->exp.size;
  c.flags = a->exp.flags;
  c.fd = fd;
  r = c.block_size ? nbdnl_connect (a->nl, &c) : -EINVAL;
  close (fd);
  if (r < 0)
    {
      say (a, "connect: %s",
           !c.block_size ? "no block size from 512 to 4096 suits the export"
           : r == -EBUSY ? "the device is in use"
                         : strerror (-r));
      return -1;
    }
  fprintf (stderr,
           "ext4lazyctl attach %s: attached, %llu bytes, block size %llu, "
           "flags 0x%llx, dead-connection timeout %llu s (%s)\n",
           a->o.device, (unsigned long long)c.size,
           (unsigned long long)c.block_size, (unsigned long long)c.flags,
           (unsigned long long)c.dead_timeout, a->ident);
  return 0;
}

/* The kernel took a new connection for a dead link (so it is live
 * again): if the export grew, give the device its new size, rounded
 * down to the device's block size.  In a reconfigure of its own, not
 * with the socket: since Linux 6.9 a size change freezes the queue
 * first, which waits for the requests that wait for a live socket.
 */
static void
grow (struct attach *a, uint64_t size)
{
  uint64_t bs = read_sysfs (a->o.device, "queue/logical_block_size");
  int r;

  if (bs >= 512)
    size -= size % bs;
  if (size <= a->exp.size)
    return;
  r = nbdnl_reconfigure (a->nl, a->o.index, a->ident, -1, size);
  if (r < 0)
    {
      say (a, "the export grew to %llu bytes; the device did not: %s",
           (unsigned long long)size, strerror (-r));
      return;
    }
  say (a, "the export grew from %llu to %llu bytes: the device now has %llu",
       (unsigned long long)a->exp.size, (unsigned long long)size,
       (unsigned long long)(read_sysfs (a->o.device, "size") * 512));
  a->exp.size = size;
}

/* One attempt to hand the kernel a new connection. */
static void
reconnect (struct attach *a)
{
  char why[1024], was[256];
  struct nbd_export e;
  int fd, r = -1;

  a->tries++;
  fd = export_connect (&a->o, &e, why, sizeof why);
  if (fd >= 0 && !export_same (&a->exp, &e, was, sizeof was))
    snprintf (why, sizeof why, "refused: the server's export changed: %s", was);
  else if (fd >= 0)
    {
      r = nbdnl_reconfigure (a->nl, a->o.index, a->ident, fd, 0);
      if (r < 0)
        snprintf (why, sizeof why, "reconfigure: %s", strerror (-r));
    }
  if (fd >= 0)
    close (fd);
  /* (An offered connection may go unused: the old one still serves.) */
  if (r == 0 && !a->offer)
    grow (a, e.size);
  if (r == 0)
    {
      if (a->offer)
        say (a, "offered the kernel a new connection (used if the link "
                "had died)");
      else
        say (a, "connected again after %.3f s (%u attempts)",
             now () - a->dead_since, a->tries);
      a->dead = a->offer = false;
      return;
    }
  if (a->tries == 1 || a->tries % 20 == 0)
    say (a, "attempt %u: %s", a->tries, why);
  a->next_try = now () + a->backoff;
  a->backoff = a->backoff * 2 < BACKOFF_MAX ? a->backoff * 2 : BACKOFF_MAX;
}

/* The events socket is readable: is it our device's dead link? */
static int
on_events (struct attach *a)
{
  int r = nbdnl_link_dead (a->nl, a->o.index);

  if (r < 0)
    {
      say (a, "netlink events: %s", strerror (-r));
      return -1;
    }
  if (r == 1 && !a->dead && a->detach_fd < 0)
    {
      say (a, "the link died: connecting again");
      a->dead = true;
      a->dead_since = a->next_try = now ();
      a->backoff = BACKOFF_FIRST;
      a->tries = 0;
    }
  return 0;
}

/* A detach command connected: it says "detach", we stop connecting
 * again and say "ok"; it disconnects the device and hangs up.
 */
static void
on_detach (struct attach *a)
{
  char line[16] = "";
  int fd = accept4 (a->listen_fd, NULL, NULL, SOCK_CLOEXEC);
  struct timeval tv = { .tv_sec = 5 };
  ssize_t n;

  if (fd < 0)
    return;
  setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  n = read (fd, line, sizeof line - 1);
  if (n > 0 && strncmp (line, "detach\n", 7) == 0 && a->detach_fd < 0
      && write (fd, "ok\n", 3) == 3)
    {
      say (a, "detaching on request");
      a->detach_fd = fd;
      a->dead = false;
      return;
    }
  close (fd);
}

/* Wait for the next thing to do; returns an exit status when done. */
static int
step (struct attach *a)
{
  struct pollfd p[3] = {
    { .fd = nbdnl_event_fd (a->nl), .events = POLLIN },
    { .fd = a->listen_fd, .events = POLLIN },
    { .fd = a->detach_fd, .events = POLLIN },
  };
  double t = now ();
  double until
      = a->dead && a->next_try < a->next_status ? a->next_try : a->next_status;
  int ms = until > t ? (int)((until - t) * 1000) + 1 : 0;
  char c;

  if (poll (p, 3, ms) < 0 && errno != EINTR)
    return CTL_FAILED;
  if ((p[0].revents & POLLIN) && on_events (a) < 0)
    return CTL_FAILED;
  if (p[1].revents & POLLIN)
    on_detach (a);
  if (a->detach_fd >= 0 && p[2].revents && read (a->detach_fd, &c, 1) <= 0)
    {
      say (a, "detached");
      return CTL_OK;
    }
  if (a->dead && now () >= a->next_try)
    reconnect (a);
  if (now () >= a->next_status)
    {
      a->next_status = now () + STATUS_PERIOD;
      if (nbdnl_status (a->nl, a->o.index) == 0)
        {
          say (a, "the device was disconnected: exiting");
          return CTL_OK;
        }
    }
  return -1;
}

static int
run (struct attach *a)
{
  int r = nbdnl_open (&a->nl, true);

  if (r < 0)
    {
      say (a, "netlink: %s",
           r == -ENOENT ? "no nbd family (load the module: modprobe nbd)"
                        : strerror (-r));
      return CTL_FAILED;
    }
  if (listen_detach (a) < 0)
    return CTL_FAILED;
  r = nbdnl_status (a->nl, a->o.index);
  if (r < 0)
    {
      say (a, "status: %s", strerror (-r));
      return CTL_FAILED;
    }
  if ((r == 1 ? adopt (a) : connect_device (a)) < 0)
    return CTL_FAILED;
  r = -1;
  while (r < 0 && !stop_signal)
    r = step (a);
  if (r < 0)
    say (a, "%s",
         "stopped by a signal: the device stays attached, with "
         "no one to connect it again");
  return r < 0 ? CTL_OK : r;
}

static int
attach (const struct attach_opts *o)
{
  struct attach a = { .o = *o, .listen_fd = -1, .detach_fd = -1 };
  struct sigaction sa = { .sa_handler = on_signal };
  int r;

  sigaction (SIGTERM, &sa, NULL);
  sigaction (SIGINT, &sa, NULL);
  sigaction (SIGHUP, &sa, NULL);
  signal (SIGPIPE, SIG_IGN);
  r = run (&a);
  nbdnl_close (a.nl);
  if (a.listen_fd >= 0)
    close (a.listen_fd);
  if (a.detach_fd >= 0)
    close (a.detach_fd);
  return r;
}

/* Tell the device's attach process, if there is one, that a detach
 * follows; returns the connection to hang up after it, or -1.
 */
static int
tell_attach (const char *device)
{
  struct sockaddr_un sa;
  socklen_t len = detach_addr (device, &sa);
  struct timeval tv = { .tv_sec = 10 };
  char ok[4] = "";
  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if (fd < 0 || connect (fd, (struct sockaddr *)&sa, len) < 0)
    {
      if (fd >= 0)
        close (fd);
      return -1;
    }
  setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (write (fd, "detach\n", 7) != 7 || read (fd, ok, 3) != 3
      || strcmp (ok, "ok\n") != 0)
    fprintf (stderr,
             "ext4lazyctl detach %s: the attach process did not "
             "answer; disconnecting anyway\n",
             device);
  return fd;
}

static int
detach (const struct attach_opts *o)
{
  struct nbdnl *nl;
  int fd, r;

  signal (SIGPIPE, SIG_IGN);
  r = nbdnl_open (&nl, false);
  if (r < 0)
    {
      fprintf (stderr, "ext4lazyctl detach %s: netlink: %s\n", o->device,
               r == -ENOENT ? "no nbd family (the module is not loaded)"
                            : strerror (-r));
      return CTL_FAILED;
    }
  fd = tell_attach (o->device);
  r = nbdnl_disconnect (nl, o->index);
  nbdnl_close (nl);
  if (fd >= 0)
    close (fd);
  if (r < 0)
    {
      fprintf (stderr, "ext4lazyctl detach %s: %s\n", o->device, strerror (-r));
      return CTL_FAILED;
    }
  return CTL_OK;
}

int
ctl_attach_main (int argc, char *argv[])
{
  struct attach_opts o;
  int r = attach_parse (argc, argv, &o);

  if (r >= 0)
    return r;
  return o.detach ? detach (&o) : attach (&o);
}
