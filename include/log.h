/* SPDX-License-Identifier: BSD-3-Clause */
/* log.h --- how the engine reports what it notices.
 *
 * The engine never prints by itself and never calls nbdkit: it hands
 * each message to a sink that whoever drives the engine installs (the
 * plugin maps it to nbdkit_debug and stderr; tests may capture it).
 * Errors are not logged here: they travel as -errno to the edge.
 */
#ifndef EXT4LAZY_LOG_H
#define EXT4LAZY_LOG_H

#include <stdarg.h>

enum log_level
{
  LOG_LEVEL_DEBUG,  /* only useful with nbdkit -v */
  LOG_LEVEL_NOTICE, /* something the operator should see once */
};

typedef void (*log_sink_fn) (enum log_level level, const char *msg);

/* Install the sink; NULL restores the default (stderr for notices,
 * debug messages dropped).  Not thread-safe: call before serving.
 */
extern void log_set_sink (log_sink_fn sink);

extern void log_msg (enum log_level level, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

#define log_debug(...) log_msg (LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_notice(...) log_msg (LOG_LEVEL_NOTICE, __VA_ARGS__)

#endif /* EXT4LAZY_LOG_H */
