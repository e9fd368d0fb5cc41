/* SPDX-License-Identifier: BSD-3-Clause */
/* reconnect.c --- the NBD backend's reconnect rules: the check of a new
 * connection, the backoff and the replay log (reconnect.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "reconnect.h"

#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 5000

/* The flags of struct remote_caps, by name, for the check. */
static const struct
{
  const char *name;
  size_t off;
} cap_flags[] = {
  { "writable", offsetof (struct remote_caps, writable) },
  { "flush", offsetof (struct remote_caps, can_flush) },
  { "fua", offsetof (struct remote_caps, can_fua) },
  { "zero", offsetof (struct remote_caps, can_zero) },
  { "fast zero", offsetof (struct remote_caps, can_fast_zero) },
  { "trim", offsetof (struct remote_caps, can_trim) },
  { "cache", offsetof (struct remote_caps, can_cache) },
  { "multi-conn", offsetof (struct remote_caps, can_multi_conn) },
  { "base:allocation", offsetof (struct remote_caps, can_extents) },
};

const char *
reconnect_caps_check (const struct remote_caps *before,
                      const struct remote_caps *now, char *buf, size_t size)
{
  if (now->size < before->size)
    {
      snprintf (buf, size, "its size is %" PRIu64 " bytes, was %" PRIu64,
                now->size, before->size);
      return buf;
    }
  for (size_t i = 0; i < sizeof cap_flags / sizeof cap_flags[0]; i++)
    {
      const bool was = *(const bool *)((const char *)before + cap_flags[i].off);
      const bool is = *(const bool *)((const char *)now + cap_flags[i].off);

      if (was && !is)
        {
          snprintf (buf, size, "it no longer offers %s", cap_flags[i].name);
          return buf;
        }
    }
  if (now->min_block > before->min_block)
    {
      snprintf (buf, size,
                "its minimum block size is %" PRIu64 ", was %" PRIu64,
                now->min_block, before->min_block);
      return buf;
    }
  if (before->max_block
      && (!now->max_block || now->max_block < before->max_block))
    {
      snprintf (buf, size,
                "its maximum block size is %" PRIu64 ", was %" PRIu64,
                now->max_block, before->max_block);
      return buf;
    }
  return NULL;
}

unsigned
reconnect_backoff_ms (unsigned attempt)
{
  unsigned ms = BACKOFF_FIRST_MS;

  while (attempt-- > 0 && ms < BACKOFF_MAX_MS)
    ms *= 2;
  return ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
}

/* ---- the replay log ------------------------------------------------- */

#define ENTRY_ALIGN 64  /* every entry starts so aligned in the ring */
#define REPLAY_PAD 0xff /* op of the unused end of the ring before a wrap */

static uint64_t
entry_size (uint64_t n)
{
  return (sizeof (struct replay_entry) + n + ENTRY_ALIGN - 1) / ENTRY_ALIGN
         * ENTRY_ALIGN;
}

/* The ring's alignment: a transparent huge page (x86-64; arm64 with
 * 4 KiB pages).
 */
#define RING_ALIGN (2u << 20)

/* The ring, aligned and advised so that the kernel backs it with huge
 * pages where it can (transparent huge pages, also in their madvise
 * mode): its first pass, a copy of every write, then takes one page
 * fault per 2 MiB instead of one per 4 KiB, and no more of it becomes
 * resident than with small pages but for the rounding up to 2 MiB.
 * Only advice: refused, the ring is the same memory in small pages.
 */
static unsigned char *
ring_alloc (uint64_t n)
{
  void *p;

  if (posix_memalign (&p, RING_ALIGN, n) != 0)
    return NULL;
#ifdef MADV_HUGEPAGE
  if (n >= RING_ALIGN)
    (void)madvise (p, n / RING_ALIGN * RING_ALIGN, MADV_HUGEPAGE);
#endif
  return p;
}

void
replay_init (struct replay_log *log, uint64_t max_bytes)
{
  memset (log, 0, sizeof *log);
  pthread_mutex_init (&log->lock, NULL);
  if (max_bytes > UINT32_MAX)
    max_bytes = UINT32_MAX; /* an entry's size is 32 bits */
  log->max_bytes = max_bytes / ENTRY_ALIGN * ENTRY_ALIGN;
}

void
replay_destroy (struct replay_log *log)
{
  free (log->ring);
  log->ring = NULL;
  pthread_mutex_destroy (&log->lock);
}

static struct replay_entry *
at (const struct replay_log *log, uint64_t pos)
{
  return (struct replay_entry *)(log->ring + pos);
}

/* The entry after e (its position pos), or NULL at the head. */
static uint64_t
next_pos (const struct replay_log *log, uint64_t pos)
{
  pos += at (log, pos)->size;
  return pos == log->max_bytes ? 0 : pos;
}

/* Each live entry (not a pad, dead or pending) from the tail, as e;
 * pos and left are the loop's own.
 */
#define FOR_EACH_LIVE(log, e, pos, left)                                       \
  for (uint64_t pos = (log)->tail, left = (log)->used; left > 0;               \
       left -= at (log, pos)->size, pos = next_pos (log, pos))                 \
    if ((e = at (log, pos))->op != REPLAY_PAD && !e->dead && !e->pending)

/* Give back the ring space of the dead entries and pads at the tail;
 * an empty log starts again at the ring's start.
 */
static void
reclaim_locked (struct replay_log *log)
{
  while (log->used > 0)
    {
      const struct replay_entry *e = at (log, log->tail);

      if (e->op != REPLAY_PAD && !e->dead)
        break;
      log->used -= e->size;
      log->tail = next_pos (log, log->tail);
    }
  if (log->used == 0)
    {
      log->head = log->tail = 0;
      log->lo = UINT64_MAX;
      log->hi = 0;
    }
}

static void
kill_locked (struct replay_log *log, struct replay_entry *e)
{
  e->dead = true;
  log->count--;
  if (e->op == REPLAY_WRITE)
    log->bytes -= e->len;
}

/* Drop every entry up to seq upto, then reclaim what can be. */
static void
drop_locked (struct replay_log *log, uint64_t upto)
{
  struct replay_entry *e;

  if (upto >= log->seq && log->pending == 0)
    {
      /* Everything, and no entry is pending: O(1). */
      log->used = 0;
      log->count = 0;
      log->bytes = 0;
    }
  else
    /* Not break at the first newer: the ring is in the order of the
     * reservations, the seqs in that of the acknowledgements.
     */
    FOR_EACH_LIVE (log, e, pos, left)
    {
      if (e->seq <= upto)
        kill_locked (log, e);
    }
  reclaim_locked (log);
}

/* n bytes of ring at the head for an entry, or NULL. */
static struct replay_entry *
reserve_locked (struct replay_log *log, uint64_t n)
{
  const uint64_t need = entry_size (n);
  struct replay_entry *e;

  if (need > log->max_bytes)
    return NULL;
  if (!log->ring)
    {
      log->ring = ring_alloc (log->max_bytes);
      if (!log->ring)
        return NULL;
      log->lo = UINT64_MAX;
    }
  if (log->head >= log->tail && log->used < log->max_bytes
      && need > log->max_bytes - log->head)
    {
      /* No room before the end: a pad, and on from the start. */
      if (need > log->tail)
        return NULL;
      e = at (log, log->head);
      e->op = REPLAY_PAD;
      e->size = (uint32_t)(log->max_bytes - log->head);
      log->used += e->size;
      log->head = 0;
    }
  if (need > log->max_bytes - log->used
      || (log->head < log->tail && need > log->tail - log->head))
    return NULL;
  e = at (log, log->head);
  e->size = (uint32_t)need;
  log->used += need;
  log->head += need;
  if (log->head == log->max_bytes)
    log->head = 0;
  return e;
}

/* Does a live entry overlap [off, off + len)? */
static bool
overlaps_locked (struct replay_log *log, uint64_t off, uint64_t len)
{
  struct replay_entry *e;

  if (log->count == 0 || off >= log->hi || off + len <= log->lo)
    return false;
  FOR_EACH_LIVE (log, e, pos, left)
  {
    if (e->off < off + len && off < e->off + e->len)
      return true;
  }
  return false;
}

/* Forget the whole log and remember the loss of n more bytes. */
static void
lose_locked (struct replay_log *log, uint64_t n)
{
  log->lost_bytes += log->bytes + n;
  log->lost_upto = log->seq;
  drop_locked (log, UINT64_MAX);
}

/* Once something is lost nothing is kept until a flush covers the loss
 * (replay_flushed): a reconnect then fails the next FLUSH whatever it
 * replays, and copying every write of a stream that outruns the bound
 * would cost its throughput for nothing.
 */
struct replay_entry *
replay_reserve (struct replay_log *log, enum replay_op op, uint64_t off,
                uint64_t len)
{
  const uint64_t n = op == REPLAY_WRITE ? len : 0;
  struct replay_entry *e = NULL;

  pthread_mutex_lock (&log->lock);
  if (!log->lost_upto)
    e = reserve_locked (log, n);
  if (e)
    {
      e->seq = 0;
      e->off = off;
      e->len = len;
      e->op = (uint8_t)op;
      e->flags = 0;
      e->dead = false;
      e->pending = true;
      log->pending++;
    }
  pthread_mutex_unlock (&log->lock);
  return e;
}

/* e is dead: its room goes back once the entries before it go. */
static void
bury_locked (struct replay_log *log, struct replay_entry *e)
{
  e->dead = true;
  reclaim_locked (log);
}

void
replay_acked (struct replay_log *log, struct replay_entry *e, enum replay_op op,
              uint64_t off, uint64_t len, unsigned flags)
{
  const uint64_t n = op == REPLAY_WRITE ? len : 0;
  bool keep = true;

  pthread_mutex_lock (&log->lock);
  log->seq++;
  if (flags & REPLAY_DURABLE)
    /* Over nothing older it needs no replay: nothing can cover it (e,
     * pending, is not among what it is checked against).
     */
    keep = !log->lost_upto && overlaps_locked (log, off, len);
  else if (log->lost_upto)
    {
      log->lost_upto = log->seq;
      log->lost_bytes += n;
      keep = false;
    }
  if (e)
    {
      e->pending = false;
      log->pending--;
    }
  if (keep && !e)
    lose_locked (log, n);
  else if (keep)
    {
      e->seq = log->seq;
      e->flags = (uint8_t)(flags & REPLAY_MAY_TRIM);
      log->count++;
      log->bytes += n;
      if (off < log->lo)
        log->lo = off;
      if (off + len > log->hi)
        log->hi = off + len;
    }
  else if (e)
    bury_locked (log, e);
  pthread_mutex_unlock (&log->lock);
}

void
replay_cancel (struct replay_log *log, struct replay_entry *e)
{
  pthread_mutex_lock (&log->lock);
  e->pending = false;
  log->pending--;
  bury_locked (log, e);
  pthread_mutex_unlock (&log->lock);
}

/* The acknowledgement of a durable command that needs no entry (over
 * nothing older, or while something is lost anyway), if it is one:
 * true.  Else nothing is done.
 */
static bool
acked_alone (struct replay_log *log, uint64_t off, uint64_t len)
{
  bool alone;

  pthread_mutex_lock (&log->lock);
  alone = log->lost_upto || !overlaps_locked (log, off, len);
  if (alone)
    log->seq++;
  pthread_mutex_unlock (&log->lock);
  return alone;
}

void
replay_note_write (struct replay_log *log, uint64_t off, uint64_t len,
                   const void *buf, unsigned flags)
{
  struct replay_entry *e;

  /* A durable write over nothing older: done, with nothing copied. */
  if ((flags & REPLAY_DURABLE) && acked_alone (log, off, len))
    return;
  e = replay_reserve (log, REPLAY_WRITE, off, len);
  if (e)
    memcpy (e->data, buf, len);
  replay_acked (log, e, REPLAY_WRITE, off, len, flags);
}

void
replay_note_other (struct replay_log *log, enum replay_op op, uint64_t off,
                   uint64_t len, unsigned flags)
{
  replay_acked (log, replay_reserve (log, op, off, len), op, off, len, flags);
}

uint64_t
replay_mark (struct replay_log *log)
{
  uint64_t m;

  pthread_mutex_lock (&log->lock);
  m = log->seq;
  pthread_mutex_unlock (&log->lock);
  return m;
}

void
replay_flushed (struct replay_log *log, uint64_t mark)
{
  pthread_mutex_lock (&log->lock);
  drop_locked (log, mark);
  if (log->lost_upto && log->lost_upto <= mark)
    {
      log->lost_upto = 0;
      log->lost_bytes = 0;
    }
  pthread_mutex_unlock (&log->lock);
}

bool
replay_lost (struct replay_log *log)
{
  bool lost;

  pthread_mutex_lock (&log->lock);
  lost = log->lost_upto != 0;
  pthread_mutex_unlock (&log->lock);
  return lost;
}

/* Send e as commands of at most max bytes each. */
static int
run_entry (const struct replay_entry *e, uint64_t max, replay_fn fn,
           void *opaque, bool *refused)
{
  for (uint64_t done = 0, m; done < e->len; done += m)
    {
      const struct replay_cmd c = {
        .op = e->op,
        .off = e->off + done,
        .len = m = e->len - done < max ? e->len - done : max,
        .data = e->op == REPLAY_WRITE ? e->data + done : NULL,
        .flags = e->op == REPLAY_ZERO ? e->flags & REPLAY_MAY_TRIM : 0,
      };
      int r = fn (opaque, &c);

      if (r == REPLAY_GONE)
        return -ENOTCONN;
      if (r < 0)
        *refused = true;
    }
  return 0;
}

int
replay_run (struct replay_log *log, uint64_t max_write, uint64_t max_other,
            replay_fn fn, void *opaque, bool *lost)
{
  struct replay_entry *e;
  bool refused = false;
  int r = 0;

  pthread_mutex_lock (&log->lock);
  FOR_EACH_LIVE (log, e, pos, left)
  {
    r = run_entry (e, e->op == REPLAY_WRITE ? max_write : max_other, fn, opaque,
                   &refused);
    if (r < 0)
      break;
  }
  if (lost)
    *lost = log->lost_upto != 0 || refused;
  pthread_mutex_unlock (&log->lock);
  return r;
}

uint64_t
replay_forget_lost (struct replay_log *log)
{
  uint64_t n;

  pthread_mutex_lock (&log->lock);
  n = log->lost_bytes;
  log->lost_upto = 0;
  log->lost_bytes = 0;
  pthread_mutex_unlock (&log->lock);
  return n;
}
