/* SPDX-License-Identifier: BSD-3-Clause */
/* reconnect.c --- the NBD backend's reconnect rules: the check of a new
 * connection, the backoff and the replay log (reconnect.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  if (now->size != before->size)
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

void
replay_init (struct replay_log *log, uint64_t max_bytes)
{
  memset (log, 0, sizeof *log);
  pthread_mutex_init (&log->lock, NULL);
  log->max_bytes = max_bytes;
}

/* Free the entries up to seq upto (all of them: UINT64_MAX). */
static void
drop_locked (struct replay_log *log, uint64_t upto)
{
  while (log->head && log->head->seq <= upto)
    {
      struct replay_entry *e = log->head;

      log->head = e->next;
      if (e->op == REPLAY_WRITE)
        log->bytes -= e->len;
      log->count--;
      free (e);
    }
  if (!log->head)
    log->tail = NULL;
}

void
replay_destroy (struct replay_log *log)
{
  drop_locked (log, UINT64_MAX);
  pthread_mutex_destroy (&log->lock);
}

/* Append an entry of op (data: len bytes of buf) or, past the bound or
 * without memory, forget the whole log and remember the loss.  Once
 * something is lost nothing is copied until a flush covers the loss
 * (replay_flushed): a reconnect then fails the next FLUSH whatever it
 * replays, and copying every write of a stream that outruns the bound
 * would cost its throughput for nothing.  The copy is made without the
 * lock, so that the threads of several writes copy at once; a flush
 * that ends meanwhile at worst makes this write count as lost.
 */
static void
note (struct replay_log *log, enum replay_op op, uint64_t off, uint64_t len,
      const void *buf, uint32_t flags)
{
  const uint64_t n = op == REPLAY_WRITE ? len : 0;
  struct replay_entry *e = NULL, *unused = NULL;
  bool copy;

  pthread_mutex_lock (&log->lock);
  copy = !log->lost_upto && log->bytes + n <= log->max_bytes;
  pthread_mutex_unlock (&log->lock);
  if (copy && (e = malloc (sizeof *e + n)) != NULL)
    {
      *e = (struct replay_entry){
        .op = op, .off = off, .len = len, .flags = flags
      };
      if (n)
        memcpy (e->data, buf, n);
    }

  pthread_mutex_lock (&log->lock);
  log->seq++;
  if (e && (log->lost_upto || log->bytes + n > log->max_bytes))
    {
      unused = e;
      e = NULL;
    }
  if (!e)
    {
      log->lost_bytes += log->bytes + n;
      log->lost_upto = log->seq;
      drop_locked (log, UINT64_MAX);
      pthread_mutex_unlock (&log->lock);
      free (unused);
      return;
    }
  e->seq = log->seq;
  if (log->tail)
    log->tail->next = e;
  else
    log->head = e;
  log->tail = e;
  log->bytes += n;
  log->count++;
  pthread_mutex_unlock (&log->lock);
}

void
replay_note_write (struct replay_log *log, uint64_t off, uint64_t len,
                   const void *buf)
{
  note (log, REPLAY_WRITE, off, len, buf, 0);
}

void
replay_note_zero (struct replay_log *log, uint64_t off, uint64_t len,
                  uint32_t flags)
{
  note (log, REPLAY_ZERO, off, len, NULL, flags);
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

int
replay_run (struct replay_log *log, replay_fn fn, void *opaque, bool *lost)
{
  int r = 0;

  pthread_mutex_lock (&log->lock);
  if (lost)
    *lost = log->lost_upto != 0;
  for (const struct replay_entry *e = log->head; e && r == 0; e = e->next)
    r = fn (opaque, e);
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
