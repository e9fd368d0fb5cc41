/* SPDX-License-Identifier: BSD-3-Clause */
/* drain-run.c --- the drain (drain_run, drain.h): close the engine's
 * gate, write back and flush, release the store, or serve on.  Apart
 * from drain.c so that the calls go one way: engine.c makes the gate,
 * this file drives the engine through it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "drain.h"
#include "engine.h"
#include "log.h"

/* The drain failed: serve on, say why, count it. */
static int
drain_failed (struct engine *e, int r, const char *why)
{
  struct drain *g = engine_gate (e);

  drain_open (g);
  drain_unclaim (g);
  engine_drain_failed (e);
  log_notice ("drain failed, serving on: %s", why);
  return r;
}

int
drain_run (struct engine *e, uint64_t timeout_ns, char *why, size_t size)
{
  struct drain *g = engine_gate (e);
  struct drain_hooks h;
  uint64_t left = 0;
  int r;

  if (!drain_claim (g, &h))
    {
      snprintf (why, size, "a drain is already under way");
      return -EALREADY;
    }
  if (timeout_ns == 0)
    timeout_ns = DRAIN_DEFAULT_TIMEOUT_NS;
  r = drain_close (g, timeout_ns, &left);
  if (r < 0)
    {
      snprintf (why, size,
                "%" PRIu64 " request%s still in the server after %g s", left,
                left == 1 ? "" : "s", timeout_ns / 1e9);
      return drain_failed (e, r, why);
    }
  r = engine_drain (e);
  if (r < 0)
    {
      snprintf (why, size, "writing back held blocks and flushing: %s",
                strerror (-r));
      return drain_failed (e, r, why);
    }
  if (h.handover)
    h.handover (h.opaque);
  engine_release (e);
  log_notice ("drained: every hold written back, the store flushed and "
              "released; exiting");
  if (h.drained)
    h.drained (h.opaque);
  return 0;
}
