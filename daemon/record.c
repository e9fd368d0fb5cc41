/* SPDX-License-Identifier: BSD-3-Clause */
/* record.c --- append client requests and store operations to a log. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
#include "record.h"

static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;
static int record_fd = -1;  /* protected by record_lock */
static uint64_t record_seq; /* protected by record_lock */
static atomic_int active;

int
record_open (const char *path)
{
  int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

  if (fd == -1)
    return -errno;
  pthread_mutex_lock (&record_lock);
  if (record_fd >= 0)
    close (record_fd);
  record_fd = fd;
  record_seq = 0;
  pthread_mutex_unlock (&record_lock);
  atomic_store (&active, 1);
  return 0;
}

void
record_close (void)
{
  atomic_store (&active, 0);
  pthread_mutex_lock (&record_lock);
  if (record_fd >= 0)
    close (record_fd);
  record_fd = -1;
  pthread_mutex_unlock (&record_lock);
}

int
record_active (void)
{
  return atomic_load (&active);
}

static void
append (enum record_kind kind, uint32_t flags, uint64_t offset, uint64_t len,
        const void *data)
{
  struct record_hdr h = { .magic = RECORD_MAGIC,
                          .kind = kind,
                          .flags = (uint16_t)flags,
                          .offset = offset,
                          .len = len };
  struct iovec iov[2] = { { &h, sizeof h }, { (void *)data, data ? len : 0 } };
  size_t total = sizeof h + (data ? len : 0);

  pthread_mutex_lock (&record_lock);
  if (record_fd >= 0)
    {
      ssize_t w;

      h.seq = record_seq++;
      w = writev (record_fd, iov, data ? 2 : 1);
      if (w != (ssize_t)total)
        {
          /* A torn log is useless: stop rather than mislead. */
          log_notice ("record: write failed, recording stopped");
          close (record_fd);
          record_fd = -1;
          atomic_store (&active, 0);
        }
    }
  pthread_mutex_unlock (&record_lock);
}

void
record_store (const struct bio *bio)
{
  static const enum record_kind kinds[] = {
    [BIO_READ] = REC_STORE_READ,   [BIO_WRITE] = REC_STORE_WRITE,
    [BIO_FLUSH] = REC_STORE_FLUSH, [BIO_ZERO] = REC_STORE_ZERO,
    [BIO_TRIM] = REC_STORE_TRIM,
  };

  if (!atomic_load_explicit (&active, memory_order_relaxed))
    return;
  append (kinds[bio->op], bio->flags, bio->offset, bio->len,
          bio->op == BIO_WRITE ? bio->buf : NULL);
}

void
record_client (enum record_kind kind, uint64_t offset, uint64_t len,
               uint32_t flags)
{
  if (!atomic_load_explicit (&active, memory_order_relaxed))
    return;
  append (kind, flags, offset, len, NULL);
}
