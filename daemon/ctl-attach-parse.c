/* SPDX-License-Identifier: BSD-3-Clause */
/* ctl-attach-parse.c --- the command lines of ext4lazyctl attach and
 * detach (ctl-attach.h): the device, the server's address and the
 * options.  Nothing here touches the system.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "ctl-attach.h"

static void
attach_usage (FILE *f)
{
  fprintf (
      f,
      "usage: ext4lazyctl attach /dev/nbdN SOCKET|HOST[:PORT]|URI [options]\n"
      "       ext4lazyctl detach /dev/nbdN\n"
      "\n"
      "attach connects the kernel's NBD device to the server and stays in "
      "the\n"
      "foreground: whenever the connection drops (a server restart) it "
      "connects\n"
      "again and hands the kernel the new socket, which re-sends what was "
      "not\n"
      "answered.  detach disconnects the device; the attach process then "
      "exits.\n"
      "  --dead-timeout=SECONDS  how long the device waits for a new "
      "connection\n"
      "                          before it fails requests (default %d)\n"
      "  --timeout=SECONDS       I/O timeout: a request unanswered this long "
      "is\n"
      "                          re-sent on a new connection (default %d, 0: "
      "none)\n"
      "  --block-size=BYTES      512, 1024, 2048 or 4096 (default: the "
      "export's\n"
      "                          preferred block size)\n"
      "  --export=NAME           the export name (default \"\")\n",
      ATTACH_DEAD_TIMEOUT, ATTACH_IO_TIMEOUT);
}

int
attach_parse_device (const char *arg, char device[32], uint32_t *index)
{
  const char *p = arg;
  char *end;
  unsigned long n;

  if (strncmp (p, "/dev/", 5) == 0)
    p += 5;
  if (strncmp (p, "nbd", 3) != 0 || p[3] < '0' || p[3] > '9')
    return -EINVAL;
  errno = 0;
  n = strtoul (p + 3, &end, 10);
  if (errno || *end || n > 1000000 || (p[3] == '0' && p[4]))
    return -EINVAL;
  snprintf (device, 32, "nbd%lu", n);
  *index = (uint32_t)n;
  return 0;
}

/* Copy s (n bytes) into a NUL-terminated out[len]; -EINVAL if too long
 * or empty.
 */
static int
copy_part (char *out, size_t len, const char *s, size_t n)
{
  if (n == 0 || n >= len)
    return -EINVAL;
  memcpy (out, s, n);
  out[n] = '\0';
  return 0;
}

/* HOST[:PORT] or [IPV6][:PORT]. */
static int
parse_host_port (const char *arg, struct attach_addr *a)
{
  const char *colon, *host = arg;
  size_t hlen;

  if (*arg == '[')
    {
      const char *close = strchr (arg, ']');
      if (!close || (close[1] && close[1] != ':'))
        return -EINVAL;
      host = arg + 1;
      hlen = (size_t)(close - host);
      colon = close[1] ? close + 1 : NULL;
    }
  else
    {
      colon = strchr (arg, ':');
      if (colon && strchr (colon + 1, ':'))
        return -EINVAL; /* a bare IPv6 address: write [ADDR]:PORT */
      hlen = colon ? (size_t)(colon - arg) : strlen (arg);
    }
  a->kind = ATTACH_TCP;
  if (copy_part (a->host, sizeof a->host, host, hlen) < 0)
    return -EINVAL;
  if (!colon)
    {
      strcpy (a->port, ATTACH_PORT);
      return 0;
    }
  return copy_part (a->port, sizeof a->port, colon + 1, strlen (colon + 1));
}

int
attach_parse_address (const char *arg, struct attach_addr *a)
{
  memset (a, 0, sizeof *a);
  if (strncmp (arg, "nbds:", 5) == 0 || strncmp (arg, "nbds+", 5) == 0)
    return -EPROTONOSUPPORT;
  if (strncmp (arg, "nbd:", 4) == 0 || strncmp (arg, "nbd+", 4) == 0)
    {
      if (strstr (arg, "tls=require") || strstr (arg, "tls-"))
        return -EPROTONOSUPPORT;
      a->kind = ATTACH_URI;
      return copy_part (a->uri, sizeof a->uri, arg, strlen (arg));
    }
  if (strchr (arg, '/'))
    {
      a->kind = ATTACH_UNIX;
      return copy_part (a->path, sizeof a->path, arg, strlen (arg));
    }
  return parse_host_port (arg, a);
}

/* SECONDS or BYTES: a whole number from lo to hi. */
static int
parse_uint (const char *opt, const char *arg, uint64_t lo, uint64_t hi,
            uint64_t *out)
{
  char *end;
  unsigned long long v;

  errno = 0;
  v = strtoull (arg, &end, 10);
  if (errno || end == arg || *end || *arg == '-' || v < lo || v > hi)
    {
      fprintf (stderr,
               "ext4lazyctl: %s=%s: expected a whole number from %llu to "
               "%llu\n",
               opt, arg, (unsigned long long)lo, (unsigned long long)hi);
      return -1;
    }
  *out = v;
  return 0;
}

/* The options into *o.  Returns -1 to go on, else an exit status. */
static int
parse_options (int argc, char *argv[], struct attach_opts *o)
{
  static const struct option opts[] = {
    { "dead-timeout", required_argument, NULL, 'D' },
    { "timeout", required_argument, NULL, 't' },
    { "block-size", required_argument, NULL, 'b' },
    { "export", required_argument, NULL, 'e' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  uint64_t v;
  int c;

  optind = 0; /* (glibc: start over, also for a second call) */
  while ((c = getopt_long (argc, argv, "h", opts, NULL)) != -1)
    switch (c)
      {
      case 'D':
        if (parse_uint ("--dead-timeout", optarg, 1, 86400 * 365,
                        &o->dead_timeout)
            < 0)
          return CTL_USAGE;
        break;
      case 't':
        if (parse_uint ("--timeout", optarg, 0, 86400, &o->timeout) < 0)
          return CTL_USAGE;
        break;
      case 'b':
        if (parse_uint ("--block-size", optarg, 512, 4096, &v) < 0
            || (v & (v - 1)))
          {
            fprintf (stderr,
                     "ext4lazyctl: --block-size=%s: 512, 1024, 2048 "
                     "or 4096\n",
                     optarg);
            return CTL_USAGE;
          }
        o->block_size = (uint32_t)v;
        break;
      case 'e':
        o->export_name = optarg;
        break;
      case 'h':
        attach_usage (stdout);
        return CTL_OK;
      default:
        attach_usage (stderr);
        return CTL_USAGE;
      }
  return -1;
}

/* The operands: DEVICE, and for attach ADDRESS. */
static int
parse_operands (int n, char *argv[], struct attach_opts *o)
{
  int r;

  if (n != (o->detach ? 1 : 2))
    {
      attach_usage (stderr);
      return CTL_USAGE;
    }
  if (attach_parse_device (argv[0], o->device, &o->index) < 0)
    {
      fprintf (stderr, "ext4lazyctl: %s: not an NBD device (/dev/nbdN)\n",
               argv[0]);
      return CTL_USAGE;
    }
  if (o->detach)
    return -1;
  r = attach_parse_address (argv[1], &o->addr);
  if (r == -EPROTONOSUPPORT)
    {
      fprintf (stderr,
               "ext4lazyctl: %s: TLS is not supported: the kernel's NBD "
               "client sends and receives on a plain socket\n",
               argv[1]);
      return CTL_USAGE;
    }
  if (r < 0)
    {
      fprintf (stderr,
               "ext4lazyctl: %s: expected a socket path, HOST[:PORT], "
               "[IPV6][:PORT] or an nbd:// URI\n",
               argv[1]);
      return CTL_USAGE;
    }
  return -1;
}

int
attach_parse (int argc, char *argv[], struct attach_opts *o)
{
  int r;

  *o = (struct attach_opts){ .dead_timeout = ATTACH_DEAD_TIMEOUT,
                             .timeout = ATTACH_IO_TIMEOUT,
                             .export_name = "" };
  o->detach = strcmp (argv[0], "detach") == 0;
  r = parse_options (argc, argv, o);
  if (r >= 0)
    return r;
  if (o->detach
      && (o->dead_timeout != ATTACH_DEAD_TIMEOUT
          || o->timeout != ATTACH_IO_TIMEOUT || o->block_size
          || *o->export_name))
    {
      fprintf (stderr, "ext4lazyctl: detach takes no options\n");
      return CTL_USAGE;
    }
  return parse_operands (argc - optind, argv + optind, o);
}
