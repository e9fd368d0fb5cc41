/* SPDX-License-Identifier: BSD-3-Clause */
/* hold.c --- the hold table: a hash of held blocks plus an age list;
 * each block's content in an aligned buffer of its own.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "hold.h"
#include "testpoint.h"

#ifdef EXT4LAZY_TEST_POINTS
void (*_Atomic test_point_hook) (enum test_point p);
#endif

#define MIN_BUCKETS 64

static size_t
bucket_of (const struct hold_table *t, uint64_t off)
{
  /* Fibonacci hashing of the block offset. */
  return (size_t)((off * 0x9E3779B97F4A7C15ull) >> 20) & (t->nbuckets - 1);
}

int
hold_init (struct hold_table *t)
{
  memset (t, 0, sizeof *t);
  TAILQ_INIT (&t->age);
  t->buckets = calloc (MIN_BUCKETS, sizeof *t->buckets);
  if (!t->buckets)
    return -ENOMEM;
  t->nbuckets = MIN_BUCKETS;
  return 0;
}

void
hold_fini (struct hold_table *t)
{
  struct hold *h;

  while ((h = TAILQ_FIRST (&t->age)) != NULL)
    hold_drop (t, h);
  while ((h = t->spare) != NULL)
    {
      t->spare = h->chain;
      free (h->data);
      free (h);
    }
  t->nspare = 0;
  free (t->buckets);
  t->buckets = NULL;
}

struct hold *
hold_find (const struct hold_table *t, uint64_t off)
{
  struct hold *h;

  if (t->count == 0)
    return NULL;
  for (h = t->buckets[bucket_of (t, off)]; h; h = h->chain)
    if (h->off == off)
      return h;
  return NULL;
}

static void
grow (struct hold_table *t)
{
  size_t n = t->nbuckets * 2;
  struct hold **b = calloc (n, sizeof *b);
  struct hold *h;

  if (!b)
    return; /* keep the longer chains: still correct */
  t->nbuckets = n;
  free (t->buckets);
  t->buckets = b;
  TAILQ_FOREACH (h, &t->age, age)
    {
      size_t i = bucket_of (t, h->off);

      h->chain = b[i];
      b[i] = h;
    }
}

/* Count the entry h in (d = 1) or out of (d = -1) the granules it
 * covers.
 */
static void
hot_add (struct hold_table *t, const struct hold *h, int d)
{
  for (uint64_t g = h->off >> 12; g <= (h->off + h->len - 1) >> 12; g++)
    atomic_fetch_add (&t->hot[g & (HOLD_HOT - 1)], (unsigned)d);
}

bool
hold_maybe_in (const struct hold_table *t, uint64_t off, uint64_t len)
{
  uint64_t first = off >> 12, n;

  if (len == 0)
    return false;
  n = ((off + len - 1) >> 12) - first + 1;
  if (n > HOLD_HOT)
    n = HOLD_HOT; /* every counter once */
  for (uint64_t i = 0; i < n; i++)
    if (atomic_load (&t->hot[(first + i) & (HOLD_HOT - 1)]) != 0)
      return true;
  return false;
}

/* Count the entry h, as its kind and class are, in (d = 1) or out of
 * (d = -1) the table's counts by kind: journal_count and by_kind.
 */
static void
tally (struct hold_table *t, const struct hold *h, int d)
{
  size_t *n = &t->by_kind[h->kind][h->cls];

  assert (d > 0 || *n > 0);
  assert (d > 0 || t->journal_count >= (h->kind != HOLD_INPLACE));
  *n += (size_t)(ptrdiff_t)d;
  if (h->kind != HOLD_INPLACE)
    t->journal_count += (size_t)(ptrdiff_t)d;
}

static void
describe (struct hold *h, const struct hold_info *what)
{
  assert (what->kind <= HOLD_JCOMMIT && what->cls <= TCLASS_REAL);
  h->fs = what->fs;
  h->kind = what->kind;
  h->cls = what->cls;
  h->seq = what->seq;
  h->met = false;
}

/* A spare entry whose buffer has len bytes, taken off the list; NULL
 * if there is none.
 */
static struct hold *
take_spare (struct hold_table *t, uint32_t len)
{
  for (struct hold **p = &t->spare; *p; p = &(*p)->chain)
    if ((*p)->len == len)
      {
        struct hold *h = *p;

        *p = h->chain;
        t->nspare--;
        return h;
      }
  return NULL;
}

struct hold *
hold_put (struct hold_table *t, uint64_t off, uint32_t len,
          const struct hold_info *what, const void *data, uint64_t now_ns,
          int *err)
{
  struct hold *h = hold_find (t, off);
  void *p;
  size_t i;

  if (h && h->len == len)
    {
      memcpy (h->data, data, len);
      tally (t, h, -1);
      describe (h, what);
      tally (t, h, 1);
      h->gen = ++t->gen;
      return h;
    }
  if (h)
    hold_drop (t, h); /* the block size changed: start afresh */

  h = take_spare (t, len);
  if (!h)
    {
      h = malloc (sizeof *h);
      if (!h || posix_memalign (&p, HOLD_ALIGN, len) != 0)
        {
          free (h);
          *err = -ENOMEM;
          return NULL;
        }
      h->data = p;
    }
  h->off = off;
  h->len = len;
  describe (h, what);
  h->first_ns = now_ns;
  h->gen = ++t->gen;
  h->stored_gen = h->stored_by = h->stored_seq = 0;
  memcpy (h->data, data, len);

  i = bucket_of (t, off);
  h->chain = t->buckets[i];
  t->buckets[i] = h;
  TAILQ_INSERT_TAIL (&t->age, h, age);
  hot_add (t, h, 1);
  t->count++;
  tally (t, h, 1);
  t->bytes += len;
  if (t->count > t->nbuckets)
    grow (t);
  return h;
}

void
hold_redescribe (struct hold_table *t, struct hold *h, enum hold_kind kind,
                 enum tclass cls, uint32_t seq)
{
  assert (h->kind != HOLD_INPLACE && kind != HOLD_INPLACE);
  assert (kind <= HOLD_JCOMMIT && cls <= TCLASS_REAL);
  tally (t, h, -1);
  h->kind = kind;
  h->cls = cls;
  h->seq = seq;
  tally (t, h, 1);
}

void
hold_drop (struct hold_table *t, struct hold *h)
{
  struct hold **p = &t->buckets[bucket_of (t, h->off)];

  while (*p != h)
    p = &(*p)->chain;
  *p = h->chain;
  assert (t->count > 0 && t->bytes >= h->len);
  TAILQ_REMOVE (&t->age, h, age);
  /* The drop is counted before the counters fall: a reader without the
   * lock that sees them fallen (hold_maybe_in) then sees the count
   * moved, and reads again under the lock (engine_pread).  Both are
   * sequentially consistent: the count's raise comes before the fall in
   * every thread's view.
   */
  atomic_fetch_add (&t->drops, 1);
  TEST_POINT (TP_HOLD_DROP);
  hot_add (t, h, -1);
  t->count--;
  tally (t, h, -1);
  t->bytes -= h->len;
  if (t->nspare < HOLD_SPARE)
    {
      h->chain = t->spare;
      t->spare = h;
      t->nspare++;
      return;
    }
  free (h->data);
  free (h);
}

_Thread_local pid_t hold_tid;
static pthread_once_t tid_once = PTHREAD_ONCE_INIT;

static void
forget_tid (void)
{
  hold_tid = 0;
}

static void
register_forget_tid (void)
{
  pthread_atfork (NULL, NULL, forget_tid);
}

void
hold_tid_setup (void)
{
  pthread_once (&tid_once, register_forget_tid);
}
