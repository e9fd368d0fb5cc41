/* ext4lazyctl.c --- talk to a running ext4lazy plugin's control socket. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void
usage (FILE *f)
{
  fprintf (f, "usage: ext4lazyctl [-s SOCKET] flush\n"
              "       ext4lazyctl [-s SOCKET] stats [--json|--prometheus]\n"
              "\n"
              "SOCKET is the control=PATH given to the plugin (default: "
              "$EXT4LAZY_CONTROL).\n"
              "  flush   write back everything held; returns once it is "
              "durable\n"
              "  stats   print the counters\n");
}

static int
connect_to (const char *path)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  int fd;

  if (strlen (path) >= sizeof sa.sun_path)
    {
      fprintf (stderr, "ext4lazyctl: %s: socket path too long\n", path);
      return -1;
    }
  strcpy (sa.sun_path, path);
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd == -1)
    {
      perror ("ext4lazyctl: socket");
      return -1;
    }
  if (connect (fd, (struct sockaddr *)&sa, sizeof sa) == 0)
    return fd;
  switch (errno)
    {
    case ENOENT:
      fprintf (stderr,
               "ext4lazyctl: %s: no such socket (is nbdkit running with "
               "control=%s?)\n",
               path, path);
      break;
    case EACCES:
    case EPERM:
      fprintf (stderr,
               "ext4lazyctl: %s: permission denied (the socket is mode "
               "0600: run as the user that started nbdkit)\n",
               path);
      break;
    case ECONNREFUSED:
      fprintf (stderr,
               "ext4lazyctl: %s: nothing is listening (the server has "
               "exited)\n",
               path);
      break;
    default:
      fprintf (stderr, "ext4lazyctl: %s: %s\n", path, strerror (errno));
    }
  close (fd);
  return -1;
}

/* What the command line asks for. */
struct request
{
  const char *path;   /* the control socket */
  const char *cmd;    /* "flush" or "stats" */
  const char *format; /* "", " json" or " prometheus" */
};

/* Parse the command line into *rq.  Returns -1 when the command is to
 * be sent, else the exit status (0 after --help, 2 on a usage error).
 */
static int
parse_args (int argc, char *argv[], struct request *rq)
{
  static const struct option opts[] = {
    { "socket", required_argument, NULL, 's' },
    { "json", no_argument, NULL, 'j' },
    { "prometheus", no_argument, NULL, 'p' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  int c;

  rq->path = getenv ("EXT4LAZY_CONTROL");
  rq->format = "";
  while ((c = getopt_long (argc, argv, "s:h", opts, NULL)) != -1)
    switch (c)
      {
      case 's':
        rq->path = optarg;
        break;
      case 'j':
        rq->format = " json";
        break;
      case 'p':
        rq->format = " prometheus";
        break;
      case 'h':
        usage (stdout);
        return 0;
      default:
        usage (stderr);
        return 2;
      }
  if (optind != argc - 1
      || (strcmp (argv[optind], "flush") != 0
          && strcmp (argv[optind], "stats") != 0)
      || (*rq->format && strcmp (argv[optind], "stats") != 0))
    {
      usage (stderr);
      return 2;
    }
  rq->cmd = argv[optind];
  if (!rq->path || !*rq->path)
    {
      fprintf (stderr, "ext4lazyctl: no socket: use -s PATH or set "
                       "EXT4LAZY_CONTROL\n");
      return 2;
    }
  return -1;
}

/* One line: the command and its format. */
static void
send_command (int fd, const struct request *rq)
{
  dprintf (fd, "%s%s\n", rq->cmd, rq->format);
}

/* Copy the server's answer: the first line is "ok" or "error: ...",
 * reported on stderr unless it is "ok"; the body goes to stdout.
 * Returns the exit status: 0, or 1 for an error or no answer.
 */
static int
relay_reply (int fd, const char *path)
{
  char line[512], buf[4096];
  size_t llen = 0;
  ssize_t n;
  int status = 0;
  int first = 1;

  while ((n = read (fd, buf, sizeof buf)) > 0)
    {
      ssize_t i = 0;

      if (first)
        {
          for (; i < n && first; i++)
            {
              if (buf[i] == '\n')
                {
                  line[llen] = '\0';
                  first = 0;
                  if (strncmp (line, "ok", 2) != 0)
                    {
                      fprintf (stderr, "ext4lazyctl: %s\n", line);
                      status = 1;
                    }
                }
              else if (llen < sizeof line - 1)
                line[llen++] = buf[i];
            }
        }
      if (i < n)
        fwrite (buf + i, 1, n - i, stdout);
    }
  if (first)
    {
      fprintf (stderr,
               "ext4lazyctl: %s: the server closed the connection "
               "without answering\n",
               path);
      status = 1;
    }
  return status;
}

int
main (int argc, char *argv[])
{
  struct request rq;
  int fd, status;

  status = parse_args (argc, argv, &rq);
  if (status >= 0)
    return status;
  fd = connect_to (rq.path);
  if (fd == -1)
    return 1;
  send_command (fd, &rq);
  status = relay_reply (fd, rq.path);
  close (fd);
  return status;
}
