/* SPDX-License-Identifier: BSD-3-Clause */
/* ctl-ask.c --- one command to a running ext4lazy plugin's control
 * socket and its whole reply (ctl.h), for ext4lazyctl's command line
 * and its live view.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"

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

/* Read everything the server sends until it closes the connection
 * into *buf (NUL-terminated; free it whatever the result).
 */
static int
read_all (int fd, const char *path, char **buf, size_t *len)
{
  size_t cap = 0;
  ssize_t n;

  *buf = NULL;
  *len = 0;
  do
    {
      if (*len + 1 >= cap)
        {
          char *b = realloc (*buf, cap = cap ? 2 * cap : 4096);

          if (!b)
            {
              fprintf (stderr, "ext4lazyctl: out of memory\n");
              return CTL_FAILED;
            }
          *buf = b;
        }
      n = read (fd, *buf + *len, cap - 1 - *len);
      if (n > 0)
        *len += n;
    }
  while (n > 0 || (n < 0 && errno == EINTR));
  (*buf)[*len] = '\0';
  if (n < 0)
    {
      fprintf (stderr, "ext4lazyctl: %s: %s\n", path, strerror (errno));
      return CTL_FAILED;
    }
  return CTL_OK;
}

/* The first line of the reply is "ok" or "error: ..."; the body
 * follows.
 */
int
ctl_ask (const char *path, const char *cmd, char **body, size_t *len)
{
  char *reply, *nl;
  size_t n;
  int fd = connect_to (path), status;

  *body = NULL;
  if (fd == -1)
    return CTL_FAILED;
  dprintf (fd, "%s\n", cmd);
  status = read_all (fd, path, &reply, &n);
  close (fd);
  nl = status == CTL_OK ? memchr (reply, '\n', n) : NULL;
  if (status == CTL_OK && !nl)
    fprintf (stderr,
             "ext4lazyctl: %s: the server closed the connection "
             "without answering\n",
             path);
  else if (status == CTL_OK && strncmp (reply, "ok\n", 3) != 0)
    fprintf (stderr, "ext4lazyctl: %s: %.*s\n", path, (int)(nl - reply), reply);
  else if (status == CTL_OK)
    {
      *len = n - (nl + 1 - reply);
      memmove (reply, nl + 1, *len + 1);
      *body = reply;
      return CTL_OK;
    }
  free (reply);
  return CTL_FAILED;
}
