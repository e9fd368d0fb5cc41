/* SPDX-License-Identifier: BSD-3-Clause */
/* test-nbdremote.c --- the NBD URI shape check and the errno a remote's
 * failure becomes.
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "nbdremote.h"

Test (nbdremote, accepts_the_uris_libnbd_connects_to)
{
  static const char *const good[] = {
    "nbd://example.com",
    "nbd://example.com:10809/export",
    "nbd://[::1]:10809/",
    "nbds://alice@example.com/disk",
    "nbd:///",
    "nbd+unix:///?socket=/tmp/nbd.sock",
    "nbd+unix:///export?socket=/run/x.sock",
    "nbds+unix://alice@/?socket=/tmp/s&tls-certificates=certs",
    "nbds+unix:///?tls-psk-file=k&socket=/tmp/s",
    "nbd+vsock:///",
    "nbds+vsock://2:10809/",
  };

  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    cr_expect_null (nbdremote_uri_check (good[i]), "%s", good[i]);
}

Test (nbdremote, rejects_what_is_not_an_nbd_uri)
{
  static const struct
  {
    const char *uri, *why;
  } bad[] = {
    { "", "not a URI" },
    { "/var/lib/disk.img", "not a URI" },
    { ":foo", "not a URI" },
    { "http://example.com/", "unknown scheme" },
    { "nbd+tcp://example.com/", "unknown scheme" },
    { "NBD://example.com/", "unknown scheme" },
    { "nbdx://example.com/", "unknown scheme" },
    { "nbd:example.com", "expected \"//\"" },
    { "nbd+unix:///", "needs ?socket=" },
    { "nbd+unix:///export?tls=on", "needs ?socket=" },
    { "nbd://localhost/?socket=/tmp/s", "only for the +unix" },
    { "nbd+vsock:///?socket=/tmp/s", "only for the +unix" },
  };

  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      const char *why = nbdremote_uri_check (bad[i].uri);

      cr_assert_not_null (why, "%s accepted", bad[i].uri);
      cr_expect (strstr (why, bad[i].why) != NULL, "%s: %s", bad[i].uri, why);
    }
}

Test (nbdremote, socket_is_a_parameter_not_a_substring)
{
  cr_expect_not_null (nbdremote_uri_check ("nbd+unix:///socket=x"));
  cr_expect_not_null (nbdremote_uri_check ("nbd+unix:///?mysocket=/x"));
  cr_expect_null (nbdremote_uri_check ("nbd+unix:///?a=b&socket=/x"));
}

Test (nbdremote, errno_of_a_failure)
{
  cr_expect_eq (nbdremote_errno (0), EIO, "unknown: EIO");
  cr_expect_eq (nbdremote_errno (ENOTCONN), EIO, "connection lost");
  cr_expect_eq (nbdremote_errno (ECONNRESET), EIO);
  cr_expect_eq (nbdremote_errno (EPIPE), EIO);
  cr_expect_eq (nbdremote_errno (ESHUTDOWN), EIO, "remote shutting down");
  cr_expect_eq (nbdremote_errno (EIO), EIO);
  cr_expect_eq (nbdremote_errno (ENOSPC), ENOSPC, "the remote's own");
  cr_expect_eq (nbdremote_errno (EPERM), EPERM);
  cr_expect_eq (nbdremote_errno (ENOTSUP), ENOTSUP);
  cr_expect_eq (nbdremote_errno (EINVAL), EINVAL);
}

Test (nbdremote, query_param_as_libnbd_reads_it)
{
  char buf[64];

  cr_assert_eq (nbdremote_query_param ("nbds://u@h/e?tls-psk-file=/etc/k.psk",
                                       "tls-psk-file", buf, sizeof buf),
                0);
  cr_expect_str_eq (buf, "/etc/k.psk");
  cr_assert_eq (nbdremote_query_param ("nbds://h/e?a=b&tls-psk-file=/x%20y%2"
                                       "&c=d#tls-psk-file=/frag",
                                       "tls-psk-file", buf, sizeof buf),
                0);
  cr_expect_str_eq (buf, "/x y%2", "decoded; a short escape kept");
  cr_assert_eq (nbdremote_query_param ("nbds://h/e?tls-psk-file=/a"
                                       "&tls-psk-file=/b",
                                       "tls-psk-file", buf, sizeof buf),
                0);
  cr_expect_str_eq (buf, "/b", "the last one");
  cr_expect_eq (nbdremote_query_param ("nbds://h/e?my-tls-psk-file=/a"
                                       "&tls-psk-filex=/b&tls-psk-file",
                                       "tls-psk-file", buf, sizeof buf),
                -ENOENT);
  cr_expect_eq (nbdremote_query_param ("nbds://h/tls-psk-file=/a",
                                       "tls-psk-file", buf, sizeof buf),
                -ENOENT, "not in the query");
  cr_expect_eq (nbdremote_query_param ("nbds://h/e#?tls-psk-file=/a",
                                       "tls-psk-file", buf, sizeof buf),
                -ENOENT, "in the fragment");
  cr_expect_eq (nbdremote_query_param ("nbds://h/e?tls-psk-file=/abcdef",
                                       "tls-psk-file", buf, 7),
                -ENAMETOOLONG);
}
