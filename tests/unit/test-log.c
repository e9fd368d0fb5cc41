/* SPDX-License-Identifier: BSD-3-Clause */
/* test-log.c --- the log sink receives formatted messages and errno survives.
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "log.h"

static char last[512];
static enum log_level last_level;

static void
capture (enum log_level level, const char *msg)
{
  last_level = level;
  strncpy (last, msg, sizeof last - 1);
  errno = EBADF; /* a sink that clobbers errno must not leak it */
}

Test (log, formats_and_keeps_errno)
{
  log_set_sink (capture);
  errno = ENOSPC;
  log_notice ("x=%d %s", 42, "y");
  cr_assert_eq (errno, ENOSPC);
  cr_assert_str_eq (last, "x=42 y");
  cr_assert_eq (last_level, LOG_LEVEL_NOTICE);
  log_debug ("d");
  cr_assert_eq (last_level, LOG_LEVEL_DEBUG);
  log_set_sink (NULL);
}
