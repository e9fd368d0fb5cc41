/* testutil.c --- shell helpers shared by the unit tests. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "testutil.h"

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
