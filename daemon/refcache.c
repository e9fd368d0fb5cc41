/* SPDX-License-Identifier: BSD-3-Clause */
/* refcache.c --- the store content of recently used inode-table blocks
 * (include/refcache.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "refcache.h"

struct slot
{
  uint64_t off;
  uint32_t len; /* 0: empty */
  uint32_t cap; /* bytes allocated at data */
  unsigned char *data;
};

struct refcache
{
  struct slot *slots;
  size_t n; /* a power of two */
  uint64_t hits, misses;
};

int
refcache_new (size_t slots, struct refcache **out)
{
  struct refcache *c;

  if (slots == 0 || (slots & (slots - 1)) != 0)
    return -EINVAL;
  c = calloc (1, sizeof *c);
  if (!c || !(c->slots = calloc (slots, sizeof *c->slots)))
    {
      free (c);
      return -ENOMEM;
    }
  c->n = slots;
  *out = c;
  return 0;
}

void
refcache_free (struct refcache *c)
{
  if (!c)
    return;
  for (size_t i = 0; i < c->n; i++)
    free (c->slots[i].data);
  free (c->slots);
  free (c);
}

static struct slot *
slot_of (const struct refcache *c, uint64_t off, uint32_t len)
{
  return &c->slots[(off / len) & (c->n - 1)];
}

bool
refcache_get (struct refcache *c, uint64_t off, uint32_t len, void *buf)
{
  const struct slot *s;

  if (len == 0)
    return false;
  s = slot_of (c, off, len);
  if (s->len != len || s->off != off)
    {
      c->misses++;
      return false;
    }
  memcpy (buf, s->data, len);
  c->hits++;
  return true;
}

void
refcache_put (struct refcache *c, uint64_t off, uint32_t len, const void *data)
{
  struct slot *s;

  if (len == 0)
    return;
  s = slot_of (c, off, len);
  if (s->cap < len)
    {
      unsigned char *p = realloc (s->data, len);

      if (!p)
        {
          s->len = 0;
          return;
        }
      s->data = p;
      s->cap = len;
    }
  memcpy (s->data, data, len);
  s->off = off;
  s->len = len;
}

void
refcache_forget (struct refcache *c, uint64_t off, uint64_t len)
{
  for (size_t i = 0; i < c->n; i++)
    {
      struct slot *s = &c->slots[i];

      if (s->len && s->off < off + len && s->off + s->len > off)
        s->len = 0;
    }
}

void
refcache_clear (struct refcache *c)
{
  for (size_t i = 0; i < c->n; i++)
    c->slots[i].len = 0;
}

void
refcache_counts (const struct refcache *c, uint64_t *hits, uint64_t *misses)
{
  *hits = c->hits;
  *misses = c->misses;
}
