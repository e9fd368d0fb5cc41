/* SPDX-License-Identifier: BSD-3-Clause */
/* testutil.c --- shell helpers shared by the unit tests. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "log.h"
#include "testimg.h"
#include "testutil.h"

char notices[8192];

static void
sink (enum log_level level, const char *msg)
{
  if (level == LOG_LEVEL_NOTICE
      && strlen (notices) + strlen (msg) + 2 < sizeof notices)
    {
      strcat (notices, msg);
      strcat (notices, "\n");
    }
}

void
img_new (struct img *im, const char *prefix, uint64_t size)
{
  snprintf (im->dir, sizeof im->dir, "/tmp/%s-XXXXXX", prefix);
  cr_assert_not_null (mkdtemp (im->dir));
  snprintf (im->path, sizeof im->path, "%s/disk.img", im->dir);
  im->fd = open (im->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq (im->fd, 0);
  cr_assert_eq (ftruncate (im->fd, size), 0);
  im->size = size;
  notices[0] = 0;
  log_set_sink (sink);
}

void
img_del (struct img *im)
{
  close (im->fd);
  unlink (im->path);
  rmdir (im->dir);
  log_set_sink (NULL);
}

int
sh (const char *fmt, ...)
{
  char cmd[2048];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (cmd, sizeof cmd, fmt, ap);
  va_end (ap);
  strncat (cmd, " >/dev/null 2>&1", sizeof cmd - strlen (cmd) - 1);
  int r = system (cmd);
  return WIFEXITED (r) ? WEXITSTATUS (r) : -1;
}

char *
capture (const char *fmt, ...)
{
  char cmd[2048];
  va_list ap;
  size_t len = 0, cap = 65536;
  char *out = malloc (cap);
  FILE *f;

  va_start (ap, fmt);
  vsnprintf (cmd, sizeof cmd, fmt, ap);
  va_end (ap);
  cr_assert_not_null (out);
  f = popen (cmd, "r");
  cr_assert_not_null (f, "popen %s", cmd);
  for (;;)
    {
      if (cap - len < 4096)
        {
          cap *= 2;
          out = realloc (out, cap);
          cr_assert_not_null (out);
        }
      size_t n = fread (out + len, 1, cap - len - 1, f);
      if (n == 0)
        break;
      len += n;
    }
  out[len] = 0;
  pclose (f);
  return out;
}
