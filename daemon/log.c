/* SPDX-License-Identifier: BSD-3-Clause */
/* log.c --- route engine messages to the installed sink. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "log.h"

static void
default_sink (enum log_level level, const char *msg)
{
  if (level >= LOG_LEVEL_NOTICE)
    fprintf (stderr, "ext4lazy: %s\n", msg);
}

static log_sink_fn sink = default_sink;

void
log_set_sink (log_sink_fn s)
{
  sink = s ? s : default_sink;
}

void
log_msg (enum log_level level, const char *fmt, ...)
{
  char buf[512];
  va_list ap;
  int saved_errno = errno; /* keep %m and callers' errno intact */

  va_start (ap, fmt);
  vsnprintf (buf, sizeof buf, fmt, ap);
  va_end (ap);
  sink (level, buf);
  errno = saved_errno;
}
