/* SPDX-License-Identifier: BSD-3-Clause */
/* test-ctl-export.c --- the export behind an attached NBD device: the
 * block size the kernel is given, the identity check a new server's
 * export must pass (each change named), and the backend identifier that
 * records the export.
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ctl-attach.h"

#define FLUSH (1u << 2)
#define FUA (1u << 3)
#define READ_ONLY (1u << 1)
#define FAST_ZERO (1u << 11)

Test (ctl_export, block_size)
{
  struct nbd_export e = { 0 };

  cr_assert_eq (export_block_size (&e, 0), 512);
  e.preferred = 4096;
  cr_assert_eq (export_block_size (&e, 0), 4096);
  e.preferred = 65536;
  cr_assert_eq (export_block_size (&e, 0), 4096);
  e.preferred = 1024;
  cr_assert_eq (export_block_size (&e, 0), 1024);
  cr_assert_eq (export_block_size (&e, 2048), 2048);
  e.minimum = 4096;
  cr_assert_eq (export_block_size (&e, 0), 0);
  cr_assert_eq (export_block_size (&e, 512), 0);
  cr_assert_eq (export_block_size (&e, 4096), 4096);
  e.minimum = 8192;
  cr_assert_eq (export_block_size (&e, 0), 0);
}

Test (ctl_export, same)
{
  struct nbd_export was = { .size = 1 << 20, .flags = 1 | FLUSH | FUA };
  struct nbd_export now = was;
  char why[256] = "";

  now.preferred = 512; /* (block sizes are not the export's identity) */
  cr_assert (export_same (&was, &now, why, sizeof why));
  cr_assert_str_eq (why, "");

  now.size += 4096; /* a grown export */
  cr_assert (export_same (&was, &now, why, sizeof why));
  now.size = was.size - 4096;
  cr_assert_not (export_same (&was, &now, why, sizeof why));
  cr_assert_str_eq (why, "the size was 1048576 bytes, now 1044480");

  now = was;
  now.flags = (was.flags & ~FUA) | READ_ONLY | FAST_ZERO;
  cr_assert_not (export_same (&was, &now, why, sizeof why));
  cr_assert_str_eq (why, "read-only was off, now on; FUA was on, now off; "
                         "fast-zero was off, now on");

  now = was;
  now.flags |= 1u << 20; /* a flag without a name */
  cr_assert_not (export_same (&was, &now, why, sizeof why));
  cr_assert_str_eq (why, "the flags were 0xd, now 0x10000d");

  char tiny[8];
  now.size = 0;
  cr_assert_not (export_same (&was, &now, tiny, sizeof tiny));
}

Test (ctl_export, ident)
{
  struct nbd_export e = { .size = 268435456, .flags = 0xd6d }, back;
  char id[80], small[20];

  cr_assert_eq (export_ident_format (&e, 0x9957a8c494af80bfull, id, sizeof id),
                0);
  cr_assert_str_eq (id, "ext4lazy:9957a8c494af80bf:268435456:3437");
  cr_assert_eq (export_ident_parse (id, &back), 0);
  cr_assert_eq (back.size, e.size);
  cr_assert_eq (back.flags, e.flags);
  cr_assert_eq (export_ident_format (&e, 1, small, sizeof small), -EINVAL);

  const char *bad[] = { "",
                        "rbd-nbd:abc",
                        "ext4lazy:9957a8c494af80bf:268435456",
                        "ext4lazy:9957a8c4:268435456:3437",
                        "ext4lazy:9957a8c494af80bf:268435456:3437x",
                        "ext4lazy:9957a8c494af80bfa:1:1" };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    cr_assert_eq (export_ident_parse (bad[k], &back), -EINVAL, "%s", bad[k]);
}
