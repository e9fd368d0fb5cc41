/* SPDX-License-Identifier: BSD-3-Clause */
/* test-rbdlib.c --- rbd= specs, and loading librbd at run time. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "rbdlib.h"

Test (rbdlib, pool_and_image)
{
  struct rbd_spec s;

  cr_assert_null (rbdlib_parse_spec ("rbd/disk", &s));
  cr_expect_str_eq (s.pool, "rbd");
  cr_expect_str_eq (s.ns, "");
  cr_expect_str_eq (s.image, "disk");
}

Test (rbdlib, pool_namespace_and_image)
{
  struct rbd_spec s;

  cr_assert_null (rbdlib_parse_spec ("volumes/tenant-a/vm-1.disk", &s));
  cr_expect_str_eq (s.pool, "volumes");
  cr_expect_str_eq (s.ns, "tenant-a");
  cr_expect_str_eq (s.image, "vm-1.disk");
}

Test (rbdlib, rejects_what_is_not_a_spec)
{
  static const struct
  {
    const char *spec, *why;
  } bad[] = {
    { "", "expected POOL/IMAGE" },         { "disk", "expected POOL/IMAGE" },
    { "/disk", "pool name is empty" },     { "rbd/", "image name is empty" },
    { "rbd//disk", "namespace is empty" }, { "rbd/ns/", "image name is empty" },
    { "a/b/c/d", "too many '/'" },         { "rbd/disk@snap", "snapshots" },
  };
  struct rbd_spec s;

  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      const char *why = rbdlib_parse_spec (bad[i].spec, &s);

      cr_expect_not_null (why, "'%s' accepted", bad[i].spec);
      if (why)
        cr_expect (strstr (why, bad[i].why), "'%s': '%s' lacks '%s'",
                   bad[i].spec, why, bad[i].why);
    }
}

Test (rbdlib, rejects_names_longer_than_their_field)
{
  struct rbd_spec s;
  char spec[600];

  memset (spec, 'p', 300);
  strcpy (spec + 300, "/disk");
  cr_expect_not_null (rbdlib_parse_spec (spec, &s));
  memset (spec, 'i', sizeof spec);
  memcpy (spec, "rbd/", 4);
  spec[4 + sizeof s.image] = '\0'; /* one byte too long for the field */
  cr_expect_not_null (rbdlib_parse_spec (spec, &s));
  spec[4 + sizeof s.image - 1] = '\0'; /* the longest that fits */
  cr_expect_null (rbdlib_parse_spec (spec, &s));
}

#ifdef HAVE_LIBRBD
Test (rbdlib, a_missing_library_is_said)
{
  struct rbdlib lib;
  char why[256] = "";

  cr_expect_eq (rbdlib_open ("libext4lazy-no-such-rados.so.2", "librbd.so.1",
                             &lib, why, sizeof why),
                -ENOENT);
  cr_expect (strstr (why, "libext4lazy-no-such-rados.so.2"), "%s", why);
}

Test (rbdlib, a_missing_function_is_said)
{
  struct rbdlib lib;
  char why[256] = "";

  /* libc has none of librados's functions. */
  cr_expect_eq (rbdlib_open ("libc.so.6", "libc.so.6", &lib, why, sizeof why),
                -ENOSYS);
  cr_expect (strstr (why, "rados_create"), "%s", why);
}

Test (rbdlib, loads_every_function)
{
  const struct rbdlib *R;
  char why[256] = "";

  R = rbdlib_get (why, sizeof why);
  if (!R)
    cr_skip_test ("librbd cannot be loaded here: %s", why);
  cr_expect (rbdlib_available (NULL, 0));
  cr_expect_eq (rbdlib_get (NULL, 0), R, "loaded once");
#define EXPECT_LOADED(fn) cr_expect_not_null (R->fn, #fn);
  RBDLIB_RADOS_FUNCTIONS (EXPECT_LOADED)
  RBDLIB_RBD_FUNCTIONS (EXPECT_LOADED)
#undef EXPECT_LOADED
}

/* io-timeout= sets the timeouts the configuration left alone, and
 * only those.
 */
Test (rbdlib, timeouts_leave_what_the_configuration_set)
{
  const struct rbdlib *R;
  struct rbdlib_timeouts builtin;
  rados_t cluster;
  char why[256] = "", v[64];
  int set;

  R = rbdlib_get (why, sizeof why);
  if (!R)
    cr_skip_test ("librbd cannot be loaded here: %s", why);
  cr_assert_eq (R->rados_create (&cluster, NULL), 0);
  rbdlib_timeouts_save (R, cluster, &builtin);
  for (int i = 0; i < RBDLIB_TIMEOUT_OPTIONS; i++)
    cr_expect_neq (builtin.builtin[i][0], '\0', "%s unread",
                   rbdlib_timeout_option[i]);
  /* As a ceph.conf would: the OSD timeout set, the others not. */
  cr_assert_eq (R->rados_conf_set (cluster, "rados_osd_op_timeout", "7"), 0);
  set = rbdlib_timeouts_apply (R, cluster, &builtin, 4500000000ull);
  cr_expect_eq (set, 6, "set mask %d", set);
  cr_assert_eq (
      R->rados_conf_get (cluster, "rados_osd_op_timeout", v, sizeof v), 0);
  cr_expect_eq (atof (v), 7.0, "rados_osd_op_timeout %s", v);
  cr_assert_eq (
      R->rados_conf_get (cluster, "rados_mon_op_timeout", v, sizeof v), 0);
  cr_expect_eq (atof (v), 5.0, "rados_mon_op_timeout %s (4.5 s up)", v);
  cr_assert_eq (
      R->rados_conf_get (cluster, "client_mount_timeout", v, sizeof v), 0);
  cr_expect_eq (atof (v), 5.0, "client_mount_timeout %s", v);
  R->rados_shutdown (cluster);
}
#else
Test (rbdlib, unavailable_without_librbd)
{
  char why[64] = "";

  cr_expect_not (rbdlib_available (why, sizeof why));
  cr_expect (strstr (why, "without librbd"), "%s", why);
}
#endif
