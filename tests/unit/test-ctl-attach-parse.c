/* SPDX-License-Identifier: BSD-3-Clause */
/* test-ctl-attach-parse.c --- the command lines of ext4lazyctl attach
 * and detach: devices, addresses (Unix, TCP, IPv6, URIs, TLS refused),
 * defaults and options, and what is refused.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ctl.h"
#include "ctl-attach.h"

/* attach_parse on a command line given as words. */
static int
parse (struct attach_opts *o, const char *line)
{
  static char buf[512];
  char *argv[16];
  int argc = 0;

  snprintf (buf, sizeof buf, "%s", line);
  for (char *w = strtok (buf, " "); w && argc < 15; w = strtok (NULL, " "))
    argv[argc++] = w;
  argv[argc] = NULL;
  return attach_parse (argc, argv, o);
}

Test (ctl_attach_parse, devices)
{
  char dev[32];
  uint32_t i = 99;

  cr_assert_eq (attach_parse_device ("/dev/nbd0", dev, &i), 0);
  cr_assert_str_eq (dev, "nbd0");
  cr_assert_eq (i, 0);
  cr_assert_eq (attach_parse_device ("nbd15", dev, &i), 0);
  cr_assert_str_eq (dev, "nbd15");
  cr_assert_eq (i, 15);
  const char *bad[]
      = { "/dev/nbd",   "nbd",         "/dev/sda", "nbd01",      "nbd1x",
          "/dev/nbd-1", "nbd99999999", "",         "/dev/nbd0p1" };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    cr_assert_eq (attach_parse_device (bad[k], dev, &i), -EINVAL, "%s", bad[k]);
}

Test (ctl_attach_parse, unix_tcp_ipv6)
{
  struct attach_addr a;

  cr_assert_eq (attach_parse_address ("/run/ext4lazy/vol1.sock", &a), 0);
  cr_assert_eq (a.kind, ATTACH_UNIX);
  cr_assert_str_eq (a.path, "/run/ext4lazy/vol1.sock");
  cr_assert_eq (attach_parse_address ("./s", &a), 0);
  cr_assert_eq (a.kind, ATTACH_UNIX);

  cr_assert_eq (attach_parse_address ("server1", &a), 0);
  cr_assert_eq (a.kind, ATTACH_TCP);
  cr_assert_str_eq (a.host, "server1");
  cr_assert_str_eq (a.port, "10809");
  cr_assert_eq (attach_parse_address ("10.0.0.2:10900", &a), 0);
  cr_assert_str_eq (a.host, "10.0.0.2");
  cr_assert_str_eq (a.port, "10900");
  cr_assert_eq (attach_parse_address ("[fd00::2]:7000", &a), 0);
  cr_assert_str_eq (a.host, "fd00::2");
  cr_assert_str_eq (a.port, "7000");
  cr_assert_eq (attach_parse_address ("[fd00::2]", &a), 0);
  cr_assert_str_eq (a.port, "10809");

  const char *bad[]
      = { "fd00::2", "[fd00::2", "[fd00::2]x", "host:", ":1", "" };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    cr_assert_eq (attach_parse_address (bad[k], &a), -EINVAL, "%s", bad[k]);
  char longpath[200];
  memset (longpath, 'a', sizeof longpath - 1);
  longpath[0] = '/';
  longpath[sizeof longpath - 1] = '\0';
  cr_assert_eq (attach_parse_address (longpath, &a), -EINVAL);
}

Test (ctl_attach_parse, uris_and_tls)
{
  struct attach_addr a;

  cr_assert_eq (attach_parse_address ("nbd://server/vol", &a), 0);
  cr_assert_eq (a.kind, ATTACH_URI);
  cr_assert_str_eq (a.uri, "nbd://server/vol");
  cr_assert_eq (attach_parse_address ("nbd+unix:///?socket=/run/s", &a), 0);
  cr_assert_eq (a.kind, ATTACH_URI);
  const char *tls[] = { "nbds://server/vol", "nbds+unix:///?socket=/s",
                        "nbd://server/?tls-psk-file=/k" };
  for (size_t k = 0; k < sizeof tls / sizeof tls[0]; k++)
    cr_assert_eq (attach_parse_address (tls[k], &a), -EPROTONOSUPPORT, "%s",
                  tls[k]);
}

Test (ctl_attach_parse, defaults)
{
  struct attach_opts o;

  cr_assert_eq (parse (&o, "attach /dev/nbd2 /run/s"), -1);
  cr_assert_not (o.detach);
  cr_assert_str_eq (o.device, "nbd2");
  cr_assert_eq (o.index, 2);
  cr_assert_eq (o.addr.kind, ATTACH_UNIX);
  cr_assert_eq (o.dead_timeout, ATTACH_DEAD_TIMEOUT);
  cr_assert_eq (o.timeout, ATTACH_IO_TIMEOUT);
  cr_assert_eq (o.block_size, 0);
  cr_assert_str_eq (o.export_name, "");

  cr_assert_eq (parse (&o, "detach nbd4"), -1);
  cr_assert (o.detach);
  cr_assert_eq (o.index, 4);
}

Test (ctl_attach_parse, options)
{
  struct attach_opts o;

  cr_assert_eq (parse (&o, "attach --dead-timeout=60 /dev/nbd1 host:99 "
                           "--timeout=0 --block-size=1024 --export=vol"),
                -1);
  cr_assert_eq (o.dead_timeout, 60);
  cr_assert_eq (o.timeout, 0);
  cr_assert_eq (o.block_size, 1024);
  cr_assert_str_eq (o.export_name, "vol");
  cr_assert_str_eq (o.addr.host, "host");
  cr_assert_str_eq (o.addr.port, "99");
  /* A second parse starts over. */
  cr_assert_eq (parse (&o, "attach /dev/nbd1 /s"), -1);
  cr_assert_eq (o.dead_timeout, ATTACH_DEAD_TIMEOUT);
}

Test (ctl_attach_parse, refused)
{
  struct attach_opts o;
  const char *bad[] = {
    "attach",
    "attach /dev/nbd0",
    "attach /dev/nbd0 /s extra",
    "attach /dev/sda /s",
    "attach /dev/nbd0 nbds://h/",
    "attach /dev/nbd0 /s --dead-timeout=0",
    "attach /dev/nbd0 /s --dead-timeout=-5",
    "attach /dev/nbd0 /s --timeout=x",
    "attach /dev/nbd0 /s --block-size=3000",
    "attach /dev/nbd0 /s --block-size=8192",
    "attach /dev/nbd0 /s --bogus",
    "detach",
    "detach /dev/nbd0 /s",
    "detach /dev/nbd0 --timeout=5",
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    cr_assert_eq (parse (&o, bad[k]), CTL_USAGE, "%s", bad[k]);
  cr_assert_eq (parse (&o, "attach --help"), CTL_OK);
}
