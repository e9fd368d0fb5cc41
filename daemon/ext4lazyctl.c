/* SPDX-License-Identifier: BSD-3-Clause */
/* ext4lazyctl.c --- talk to a running ext4lazy plugin's control socket:
 * the command line, and one command's answer relayed.  Asking is in
 * ctl-ask.c, the live view (watch) in ctl-watch.c.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"
#include "ctl-attach.h"

static void
usage (FILE *f)
{
  fprintf (f, "usage: ext4lazyctl [-s SOCKET] flush\n"
              "       ext4lazyctl [-s SOCKET] drain [--timeout=SECONDS]\n"
              "       ext4lazyctl [-s SOCKET] stats [--json|--prometheus]\n"
              "       ext4lazyctl [-s SOCKET] holds [--json]\n"
              "       ext4lazyctl [-s SOCKET] watch [-n COUNT] [-d SECONDS]\n"
              "       ext4lazyctl attach /dev/nbdN SERVER [options]\n"
              "       ext4lazyctl detach /dev/nbdN\n"
              "       ext4lazyctl --help | --version\n"
              "\n"
              "SOCKET is the control=PATH given to the plugin (default: "
              "$EXT4LAZY_CONTROL).\n"
              "  flush   write back everything held; returns once it is "
              "durable\n"
              "  drain   stop serving without an error reply, write back "
              "and flush, release\n"
              "          the store and end the server (clients re-send "
              "what was not\n"
              "          answered to the next server); if it fails, the "
              "server serves on\n"
              "          --timeout=SECS       wait at most SECS for the "
              "requests in the\n"
              "                               server (default 30)\n"
              "  stats   print the counters\n"
              "  holds   list every held block: kind, filesystem, offset, "
              "age, deadline,\n"
              "          and the inodes whose times differ from the store\n"
              "  watch   a live view, refreshed every second; q or Ctrl-C "
              "quits\n"
              "          -n, --count=N        stop after N refreshes\n"
              "          -d, --interval=SECS  refresh every SECS seconds "
              "(0.1 to 3600)\n"
              "  attach  connect the kernel's NBD device to SERVER, and again "
              "after\n"
              "          each server restart (ext4lazyctl attach --help)\n"
              "  detach  disconnect it\n"
              "\n"
              "Exit status: 0 success, 1 the server reported an error or "
              "could not be\n"
              "reached, 2 usage error.\n");
}

/* What the command line asks for. */
struct request
{
  const char *path;   /* the control socket */
  const char *cmd;    /* flush, stats, holds or watch */
  const char *format; /* NULL, "json" or "prometheus" */
  long count;         /* watch: refreshes, 0 for no limit */
  double interval;    /* watch: seconds between refreshes */
  bool watch_opts;    /* -n or -d given */
  long timeout;       /* drain: --timeout, 0 for the server's default */
};

static int
parse_number (const char *opt, const char *arg, double lo, double hi,
              double *out)
{
  char *end;

  errno = 0;
  *out = strtod (arg, &end);
  if (errno || end == arg || *end || !(*out >= lo && *out <= hi))
    {
      fprintf (stderr, "ext4lazyctl: %s %s: expected a number from %g to %g\n",
               opt, arg, lo, hi);
      return -1;
    }
  return 0;
}

/* The options, into *rq.  Returns -1 to go on, else an exit status. */
static int
parse_options (int argc, char *argv[], struct request *rq)
{
  static const struct option opts[] = {
    { "socket", required_argument, NULL, 's' },
    { "json", no_argument, NULL, 'j' },
    { "prometheus", no_argument, NULL, 'p' },
    { "count", required_argument, NULL, 'n' },
    { "interval", required_argument, NULL, 'd' },
    { "timeout", required_argument, NULL, 't' },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
  };
  double v;
  int c;

  while ((c = getopt_long (argc, argv, "s:n:d:hV", opts, NULL)) != -1)
    switch (c)
      {
      case 's':
        rq->path = optarg;
        break;
      case 'j':
        rq->format = "json";
        break;
      case 'p':
        rq->format = "prometheus";
        break;
      case 'n':
        if (parse_number ("--count", optarg, 1, 1e9, &v) < 0 || v != (long)v)
          return CTL_USAGE;
        rq->count = (long)v;
        rq->watch_opts = true;
        break;
      case 'd':
        if (parse_number ("--interval", optarg, 0.1, 3600, &rq->interval) < 0)
          return CTL_USAGE;
        rq->watch_opts = true;
        break;
      case 't':
        if (parse_number ("--timeout", optarg, 1, 86400, &v) < 0
            || v != (long)v)
          return CTL_USAGE;
        rq->timeout = (long)v;
        break;
      case 'h':
        usage (stdout);
        return CTL_OK;
      case 'V':
        printf ("ext4lazyctl %s\n", PACKAGE_VERSION);
        return CTL_OK;
      default:
        usage (stderr);
        return CTL_USAGE;
      }
  return -1;
}

/* Is the command known, and are the options given its own? */
static bool
command_ok (const struct request *rq)
{
  const char *f = rq->format;

  if (rq->timeout && strcmp (rq->cmd, "drain") != 0)
    return false;
  if (strcmp (rq->cmd, "drain") == 0)
    return !rq->watch_opts && !f;
  if (strcmp (rq->cmd, "stats") == 0)
    return !rq->watch_opts;
  if (strcmp (rq->cmd, "holds") == 0)
    return !rq->watch_opts && (!f || strcmp (f, "json") == 0);
  if (strcmp (rq->cmd, "flush") == 0)
    return !rq->watch_opts && !f;
  if (strcmp (rq->cmd, "watch") == 0)
    return !f;
  return false;
}

/* Parse the command line into *rq.  Returns -1 when there is a
 * command to carry out, else the exit status (0 after --help or
 * --version, 2 on a usage error).
 */
static int
parse_args (int argc, char *argv[], struct request *rq)
{
  int r;

  *rq = (struct request){ .path = getenv ("EXT4LAZY_CONTROL"), .interval = 1 };
  r = parse_options (argc, argv, rq);
  if (r >= 0)
    return r;
  if (optind != argc - 1)
    {
      usage (stderr);
      return CTL_USAGE;
    }
  rq->cmd = argv[optind];
  if (!command_ok (rq))
    {
      usage (stderr);
      return CTL_USAGE;
    }
  if (!rq->path || !*rq->path)
    {
      fprintf (stderr, "ext4lazyctl: no socket: use -s PATH or set "
                       "EXT4LAZY_CONTROL\n");
      return CTL_USAGE;
    }
  return -1;
}

/* "drain": the body says whether it drained. */
static int
drain (const struct request *rq)
{
  char line[64], *body;
  size_t len;
  int status;

  if (rq->timeout)
    snprintf (line, sizeof line, "drain %ld", rq->timeout);
  else
    snprintf (line, sizeof line, "drain");
  status = ctl_ask (rq->path, line, &body, &len);
  if (status != CTL_OK)
    return status;
  if (strcmp (body, "drained\n") != 0)
    {
      fprintf (stderr, "ext4lazyctl: %s: %s", rq->path, body);
      status = CTL_FAILED;
    }
  else
    fputs (body, stdout);
  free (body);
  return status;
}

int
main (int argc, char *argv[])
{
  struct request rq;
  char line[64], *body;
  size_t len;
  int status;

  if (argc >= 2
      && (strcmp (argv[1], "attach") == 0 || strcmp (argv[1], "detach") == 0))
    {
#ifdef HAVE_ATTACH
      return ctl_attach_main (argc - 1, argv + 1);
#else
      fprintf (stderr,
               "ext4lazyctl: %s: built without netlink (libnl-genl-3) "
               "or libnbd\n",
               argv[1]);
      return CTL_FAILED;
#endif
    }
  status = parse_args (argc, argv, &rq);
  if (status >= 0)
    return status;
  if (strcmp (rq.cmd, "watch") == 0)
    return ctl_watch (rq.path, rq.interval, rq.count);
  if (strcmp (rq.cmd, "drain") == 0)
    return drain (&rq);
  snprintf (line, sizeof line, "%s%s%s", rq.cmd, rq.format ? " " : "",
            rq.format ? rq.format : "");
  status = ctl_ask (rq.path, line, &body, &len);
  if (status == CTL_OK)
    {
      fwrite (body, 1, len, stdout);
      free (body);
      if (fflush (stdout) != 0)
        {
          perror ("ext4lazyctl: stdout");
          status = CTL_FAILED;
        }
    }
  return status;
}
