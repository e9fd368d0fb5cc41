/* SPDX-License-Identifier: BSD-3-Clause */
/* testpoint.h --- points in the engine where a test can stop a thread
 * to widen a race window, compiled in only when the test suite is built
 * (EXT4LAZY_TEST_POINTS, set by meson): the plugin a package installs
 * has none.
 */
#ifndef EXT4LAZY_TESTPOINT_H
#define EXT4LAZY_TESTPOINT_H

enum test_point
{
  /* hold_drop: between counting the drop and lowering the counters
   * that hold_maybe_in reads.
   */
  TP_HOLD_DROP,
  /* engine_pread: after its store read without the hold lock, before
   * it looks whether a hold covers what it read.
   */
  TP_PREAD_READ,
  /* engine_extents: the store tells an extent, its query under way. */
  TP_EXTENTS,
  /* jstate: about to wait for a journal write on its way. */
  TP_PASS_WAIT,
};

#ifdef EXT4LAZY_TEST_POINTS
#include <stdatomic.h>

/* Set by a test (NULL: none); any thread may call it. */
extern void (*_Atomic test_point_hook) (enum test_point p);
#define TEST_POINT(p)                                                          \
  do                                                                           \
    {                                                                          \
      void (*hook_) (enum test_point) = atomic_load (&test_point_hook);        \
      if (hook_)                                                               \
        hook_ (p);                                                             \
    }                                                                          \
  while (0)
#else
#define TEST_POINT(p) ((void)0)
#endif

#endif /* EXT4LAZY_TESTPOINT_H */
