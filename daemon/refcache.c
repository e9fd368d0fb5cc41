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

/* Distinct block sizes refcache_forget looks up one by one; past them,
 * it looks at every slot.
 */
#define REFCACHE_LENS 4

struct refcache
{
  struct slot *slots;
  size_t n; /* a power of two */
  uint64_t hits, misses;
  /* Every len a slot has had (never forgotten): nlens of them, or more
   * when many_lens.
   */
  uint32_t lens[REFCACHE_LENS];
  size_t nlens;
  bool many_lens;
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

static void
note_len (struct refcache *c, uint32_t len)
{
  for (size_t i = 0; i < c->nlens; i++)
    if (c->lens[i] == len)
      return;
  if (c->nlens < REFCACHE_LENS)
    c->lens[c->nlens++] = len;
  else
    c->many_lens = true;
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
  note_len (c, len);
}

static void
forget_slot (struct slot *s, uint64_t off, uint64_t len)
{
  if (s->len && s->off < off + len && s->off + s->len > off)
    s->len = 0;
}

/* A block of l bytes at s overlaps [off, off + len) only if
 * off - l < s < off + len, so its slot is that of a quotient s / l from
 * *lo = off / l - 1 to *hi = (off + len - 1) / l, whether or not blocks
 * are aligned to their size.  len is not 0.
 */
static void
quotients (uint64_t off, uint64_t len, uint64_t l, uint64_t *lo, uint64_t *hi)
{
  *lo = off / l > 0 ? off / l - 1 : 0;
  *hi = (off + len - 1) / l;
}

/* Those slots, for each size there has been, are all a forget needs to
 * look at.  Returns false when that is not fewer than every slot.
 */
static bool
forget_by_len (struct refcache *c, uint64_t off, uint64_t len)
{
  uint64_t lo, hi;
  size_t looks = 0;

  if (c->many_lens || len == 0)
    return false;
  for (size_t i = 0; i < c->nlens; i++)
    {
      quotients (off, len, c->lens[i], &lo, &hi);
      looks += hi - lo + 1;
    }
  if (looks >= c->n)
    return false;
  for (size_t i = 0; i < c->nlens; i++)
    {
      quotients (off, len, c->lens[i], &lo, &hi);
      for (uint64_t q = lo; q <= hi; q++)
        forget_slot (&c->slots[q & (c->n - 1)], off, len);
    }
  return true;
}

void
refcache_forget (struct refcache *c, uint64_t off, uint64_t len)
{
  if (forget_by_len (c, off, len))
    return;
  for (size_t i = 0; i < c->n; i++)
    forget_slot (&c->slots[i], off, len);
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
