/* SPDX-License-Identifier: BSD-3-Clause */
/* testengine.c --- what the engine's tests share: a scratch ext4 image
 * made with mkfs.ext4, its inode-table blocks changed with debugfs, the
 * store read behind the engine's back, and an engine opened on it.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testengine.h"
#include "testimg.h"

char dir[64];
char img[96];  /* served */
char copy[96]; /* debugfs scratch */
char loop[64]; /* a loop device over img, detached at teardown */
/* The store's fault injection for open_engine (NULL: none). */
backend_fault_fn fault_hook;

void
sh_ok (const char *fmt, ...)
{
  char cmd[1024];
  va_list ap;
  int r;

  va_start (ap, fmt);
  vsnprintf (cmd, sizeof cmd, fmt, ap);
  va_end (ap);
  r = system (cmd);
  cr_assert_eq (r, 0, "command failed: %s", cmd);
}

void
need_tools (void)
{
  if (system ("command -v mkfs.ext4 debugfs >/dev/null 2>&1") != 0)
    cr_skip_test ("mkfs.ext4/debugfs not installed");
}

/* A 32 MiB ext4 with 4 KiB blocks, no journal, and 40 small files. */
void
setup (void)
{
  need_tools ();
  strcpy (dir, "/var/tmp/ext4lazy-engine-XXXXXX");
  cr_assert_not_null (mkdtemp (dir));
  snprintf (img, sizeof img, "%s/disk.img", dir);
  snprintf (copy, sizeof copy, "%s/copy.img", dir);
  sh_ok ("mkdir %s/root && for i in $(seq 1 40); do echo file $i > %s/root/f$i;"
         " done",
         dir, dir);
  sh_ok ("mkfs.ext4 -q -F -b 4096 -I 256 -O ^has_journal -d %s/root %s 32M",
         dir, img);
}

void
teardown (void)
{
  char cmd[128];

  if (loop[0] == '/')
    {
      snprintf (cmd, sizeof cmd, "losetup -d %s", loop);
      if (system (cmd) != 0)
        fprintf (stderr, "detaching %s failed\n", loop);
      loop[0] = '\0';
    }

  snprintf (cmd, sizeof cmd, "rm -rf %s", dir);
  if (system (cmd) != 0)
    fprintf (stderr, "cleanup of %s failed\n", dir);
}

/* img_fs_imap on the served image. */
static uint32_t
imap (const char *name, uint64_t *off)
{
  struct img im = { .fd = -1 };

  snprintf (im.path, sizeof im.path, "%s", img);
  return img_fs_imap (&im, name, off);
}

/* Device offset of the inode-table block holding /name's inode. */
uint64_t
inode_block (const char *name)
{
  uint64_t off;

  imap (name, &off);
  return off;
}

/* Inode number of /name. */
unsigned
inode_number (const char *name)
{
  uint64_t off;

  return imap (name, &off);
}

/* The block at off after `debugfs -w -R "set_inode_field ..."` on a copy
 * of the current image.
 */
void
changed_block (const char *field_cmd, uint64_t off, char *out)
{
  int fd;

  sh_ok ("cp %s %s && debugfs -w -R '%s' %s >/dev/null 2>&1", img, copy,
         field_cmd, copy);
  fd = open (copy, O_RDONLY);
  cr_assert_geq (fd, 0);
  cr_assert_eq (pread (fd, out, 4096, off), 4096);
  close (fd);
}

void
store_block (uint64_t off, char *out)
{
  int fd = open (img, O_RDONLY);

  cr_assert_geq (fd, 0);
  cr_assert_eq (pread (fd, out, 4096, off), 4096);
  close (fd);
}

struct engine *
open_engine_at (const char *path, enum policy p, uint64_t max_age_ns,
                uint64_t max_held)
{
  struct engine_config cfg = {
    .store = { .path = path, .kind = BACKEND_URING, .fault = fault_hook },
    .policy = p,
    .max_age_ns = max_age_ns ? max_age_ns : ENGINE_DEFAULT_MAX_AGE_NS,
    .max_held = max_held ? max_held : ENGINE_DEFAULT_MAX_HELD,
  };
  struct engine *e;
  int r = engine_open (&cfg, &e);

  cr_assert_eq (r, 0, "engine_open: %s", strerror (-r));
  return e;
}

struct engine *
open_engine (uint64_t max_age_ns, uint64_t max_held)
{
  return open_engine_at (img, POLICY_STRICT, max_age_ns, max_held);
}

struct fs_stats
stats0 (struct engine *e, uint64_t *held_blocks)
{
  struct stats_snapshot s;
  struct fs_stats c;

  cr_assert_eq (engine_stats (e, &s), 0);
  cr_assert_geq (s.n, 1);
  cr_assert_str_eq (s.fs[0].name, "ext4@0");
  c = s.fs[0].c;
  if (held_blocks)
    *held_blocks = s.fs[0].held_blocks;
  engine_stats_free (&s);
  return c;
}

/* Hold an atime change to f1's block; check it is held and visible. */
uint64_t
hold_atime (struct engine *e, const char *file, char *nw, char *orig)
{
  char cmd[128], back[4096];
  uint64_t off = inode_block (file);

  snprintf (cmd, sizeof cmd, "set_inode_field /%s atime 20200101", file);
  store_block (off, orig);
  changed_block (cmd, off, nw);
  cr_assert_neq (memcmp (nw, orig, 4096), 0);
  cr_assert_eq (engine_pwrite (e, nw, 4096, off, 0), 0);
  store_block (off, back);
  cr_assert_eq (memcmp (back, orig, 4096), 0, "the store must not change");
  cr_assert_eq (engine_pread (e, back, 4096, off), 0);
  cr_assert_eq (memcmp (back, nw, 4096), 0, "reads must see the hold");
  return off;
}
