/* SPDX-License-Identifier: BSD-3-Clause */
/* testutil.c --- shell helpers shared by the unit tests, and the gate. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "engine.h"
#include "log.h"
#include "stats.h"
#include "testimg.h"
#include "testutil.h"

char notices[8192];

static void
sink (enum log_level level, const char *msg)
{
  if (level == LOG_LEVEL_NOTICE
      && strlen (notices) + strlen (msg) + 2 < sizeof notices)
    {
      strcat (notices, msg);
      strcat (notices, "\n");
    }
}

void
img_new (struct img *im, const char *prefix, uint64_t size)
{
  snprintf (im->dir, sizeof im->dir, "/tmp/%s-XXXXXX", prefix);
  cr_assert_not_null (mkdtemp (im->dir));
  snprintf (im->path, sizeof im->path, "%s/disk.img", im->dir);
  im->fd = open (im->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq (im->fd, 0);
  cr_assert_eq (ftruncate (im->fd, size), 0);
  im->size = size;
  notices[0] = 0;
  log_set_sink (sink);
}

void
img_del (struct img *im)
{
  close (im->fd);
  unlink (im->path);
  rmdir (im->dir);
  log_set_sink (NULL);
}

void
img_fs_new (struct img *im, const char *prefix, uint64_t size, unsigned nfiles)
{
  if (sh ("{ command -v mkfs.ext4 && command -v debugfs; }") != 0)
    cr_skip_test ("mkfs.ext4/debugfs not installed");
  img_new (im, prefix, size);
  cr_assert_eq (sh ("mkdir %s/root && for i in $(seq 1 %u); do echo $i > "
                    "%s/root/f$i; done && mkfs.ext4 -q -F -b 4096 -I 256 "
                    "-O ^has_journal -d %s/root %s 16M",
                    im->dir, nfiles, im->dir, im->dir, im->path),
                0);
}

void
img_fs_del (struct img *im)
{
  sh ("rm -rf %s/root %s/copy.img", im->dir, im->dir);
  img_del (im);
}

uint32_t
img_fs_imap (const struct img *im, const char *name, uint64_t *off)
{
  char *out = capture ("debugfs -R 'imap /%s' %s 2>/dev/null", name, im->path);
  unsigned ino = 0;
  unsigned long long blk = 0;
  char *at = strstr (out, "located at block ");

  cr_assert (sscanf (out, "Inode %u is part", &ino) == 1 && at
                 && sscanf (at, "located at block %llu,", &blk) == 1,
             "debugfs imap: %s", out);
  free (out);
  *off = blk * 4096;
  return ino;
}

void
img_fs_changed (const struct img *im, const char *cmds, uint64_t off, char *out)
{
  char copy[sizeof im->dir + 16];

  snprintf (copy, sizeof copy, "%s/copy.img", im->dir);
  cr_assert_eq (sh ("cp %s %s && printf '%s' | debugfs -w -f - %s", im->path,
                    copy, cmds, copy),
                0);
  file_block (copy, off, out);
}

struct engine *
img_fs_engine (const struct img *im, int (*fault) (const struct bio *))
{
  return img_fs_engine_cap (im, fault, ENGINE_DEFAULT_MAX_HELD);
}

struct engine *
img_fs_engine_cap (const struct img *im, int (*fault) (const struct bio *),
                   uint64_t max_held)
{
  struct engine_config cfg = {
    .store = { .path = im->path, .kind = BACKEND_PSYNC, .fault = fault },
    .policy = POLICY_STRICT,
    .max_age_ns = 3600ull * 1000000000,
    .max_held = max_held,
  };
  struct engine *e;
  int r = engine_open (&cfg, &e);

  cr_assert_eq (r, 0, "engine_open: %s", strerror (-r));
  return e;
}

void
file_block (const char *path, uint64_t off, char *out)
{
  FILE *f = fopen (path, "rb");

  cr_assert_not_null (f, "%s", path);
  cr_assert_eq (fseek (f, (long)off, SEEK_SET), 0);
  cr_assert_eq (fread (out, 1, 4096, f), 4096);
  fclose (f);
}

int
sh (const char *fmt, ...)
{
  char cmd[2048];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (cmd, sizeof cmd, fmt, ap);
  va_end (ap);
  strncat (cmd, " >/dev/null 2>&1", sizeof cmd - strlen (cmd) - 1);
  int r = system (cmd);
  return WIFEXITED (r) ? WEXITSTATUS (r) : -1;
}

char *
capture (const char *fmt, ...)
{
  char cmd[2048];
  va_list ap;
  size_t len = 0, cap = 65536;
  char *out = malloc (cap);
  FILE *f;

  va_start (ap, fmt);
  vsnprintf (cmd, sizeof cmd, fmt, ap);
  va_end (ap);
  cr_assert_not_null (out);
  f = popen (cmd, "r");
  cr_assert_not_null (f, "popen %s", cmd);
  for (;;)
    {
      if (cap - len < 4096)
        {
          cap *= 2;
          out = realloc (out, cap);
          cr_assert_not_null (out);
        }
      size_t n = fread (out + len, 1, cap - len - 1, f);
      if (n == 0)
        break;
      len += n;
    }
  out[len] = 0;
  pclose (f);
  return out;
}

void
gate_pass (struct gate *g)
{
  pthread_mutex_lock (&g->lock);
  g->in++;
  pthread_cond_broadcast (&g->cond);
  while (!g->open)
    pthread_cond_wait (&g->cond, &g->lock);
  pthread_mutex_unlock (&g->lock);
}

void
gate_wait (struct gate *g, int n)
{
  pthread_mutex_lock (&g->lock);
  while (g->in < n)
    pthread_cond_wait (&g->cond, &g->lock);
  pthread_mutex_unlock (&g->lock);
}

void
gate_open (struct gate *g)
{
  pthread_mutex_lock (&g->lock);
  g->open = true;
  pthread_cond_broadcast (&g->cond);
  pthread_mutex_unlock (&g->lock);
}

void
gate_close (struct gate *g)
{
  pthread_mutex_lock (&g->lock);
  g->in = 0;
  g->open = false;
  pthread_mutex_unlock (&g->lock);
}

void *
call_flush (void *p)
{
  struct call *c = p;

  c->r = engine_flush (c->e);
  atomic_store (&c->done, true);
  return NULL;
}

void *
call_write (void *p)
{
  struct call *c = p;

  c->r = engine_pwrite (c->e, c->buf, 4096, c->off, 0);
  atomic_store (&c->done, true);
  return NULL;
}

void *
call_zero (void *p)
{
  struct call *c = p;

  c->r = engine_zero (c->e, 4096, c->off, BIO_FUA);
  atomic_store (&c->done, true);
  return NULL;
}

void *
call_read_stats_flush (void *p)
{
  struct call *c = p;
  struct stats_snapshot s;

  c->r = engine_pread (c->e, c->buf, 4096, c->off);
  if (c->r == 0)
    c->r = engine_stats (c->e, &s);
  if (c->r == 0)
    {
      c->r = s.holds_stale_s == 0 ? 0 : -EBUSY;
      engine_stats_free (&s);
    }
  if (c->r == 0)
    c->r = engine_flush (c->e);
  atomic_store (&c->done, true);
  return NULL;
}

bool
call_done_within (struct call *c, int secs)
{
  for (int i = 0; i < secs * 100 && !atomic_load (&c->done); i++)
    usleep (10000);
  return atomic_load (&c->done);
}

uint64_t
layout_rereads (struct engine *e)
{
  struct stats_snapshot st;
  uint64_t n;

  cr_assert_eq (engine_stats (e, &st), 0);
  n = st.layout_rereads;
  engine_stats_free (&st);
  return n;
}
