/* SPDX-License-Identifier: BSD-3-Clause */
/* test-backend.c --- the backing-store backends (uring and psync, with
 * and without O_DIRECT): round trips, batches, ordering, end of device,
 * zeroing, trimming, extents and errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "backend.h"
#include "hold.h"
/* backend_order, backend_run_len, the issued count */
#include "../../daemon/backend-impl.h"

#define SIZE (8u << 20)

struct variant
{
  enum backend_kind kind;
  bool direct;
};

static char path[64];

static void
make_file (uint64_t size)
{
  int fd;

  strcpy (path, "/var/tmp/ext4lazy-backend-XXXXXX");
  fd = mkstemp (path);
  cr_assert_geq (fd, 0);
  cr_assert_eq (ftruncate (fd, size), 0);
  close (fd);
}

static void
remove_file (void)
{
  unlink (path);
}

/* Open without the store lock (a test that opens one file twice). */
static bool no_lock;

static struct backend *
open_traced (const struct variant *v, bool readonly, backend_trace_fn trace)
{
  struct backend_config cfg = { .path = path,
                                .kind = v->kind,
                                .direct = v->direct,
                                .readonly = readonly,
                                .trace = trace,
                                .no_lock = no_lock };
  struct backend *b = NULL;
  int r = backend_open (&cfg, &b);

  cr_assert_eq (r, 0, "backend_open: %s", strerror (-r));
  cr_assert_eq (backend_kind (b), v->kind);
  return b;
}

static struct backend *
open_variant (const struct variant *v, bool readonly)
{
  return open_traced (v, readonly, NULL);
}

/* Read the file behind the backend's back. */
static void
read_file (void *buf, size_t len, off_t off)
{
  int fd = open (path, O_RDONLY);

  cr_assert_geq (fd, 0);
  cr_assert_eq (pread (fd, buf, len, off), (ssize_t)len);
  close (fd);
}

static struct variant variants[] = {
  { BACKEND_URING, false },
  { BACKEND_URING, true },
  { BACKEND_PSYNC, false },
  { BACKEND_PSYNC, true },
};

ParameterizedTestParameters (backend, roundtrip)
{
  return cr_make_param_array (struct variant, variants,
                              sizeof variants / sizeof variants[0]);
}

/* Random writes of every alignment, checked against a shadow copy and
 * against the file read independently.
 */
ParameterizedTest (struct variant *v, backend, roundtrip, .init = NULL)
{
  unsigned seed = 1234 + v->kind * 2 + v->direct;
  char *shadow = calloc (1, SIZE), *buf = malloc (1 << 20);
  struct backend *b;

  make_file (SIZE);
  b = open_variant (v, false);
  cr_assert_eq (backend_size (b), SIZE);

  for (int i = 0; i < 300; i++)
    {
      uint32_t len = 1 + rand_r (&seed) % (i % 3 == 0 ? 1 << 20 : 9000);
      uint64_t off = rand_r (&seed) % (SIZE - len);

      for (uint32_t j = 0; j < len; j++)
        buf[j] = (char)rand_r (&seed);
      cr_assert_eq (backend_pwrite (b, buf, len, off, i % 7 ? 0 : BIO_FUA), 0);
      memcpy (shadow + off, buf, len);

      len = 1 + rand_r (&seed) % 70000;
      off = rand_r (&seed) % (SIZE - len);
      cr_assert_eq (backend_pread (b, buf, len, off), 0);
      cr_assert_eq (memcmp (buf, shadow + off, len), 0,
                    "read %u at %lu differs", len, (unsigned long)off);
    }
  cr_assert_eq (backend_flush (b), 0);
  backend_close (b);

  for (uint64_t off = 0; off < SIZE; off += 1 << 20)
    {
      read_file (buf, 1 << 20, off);
      cr_assert_eq (memcmp (buf, shadow + off, 1 << 20), 0);
    }
  remove_file ();
  free (shadow);
  free (buf);
}

/* Tracing: record the order in which operations completed. */
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static struct bio traced[1024];
static size_t ntraced;

static void
record (const struct bio *bio)
{
  pthread_mutex_lock (&trace_lock);
  if (ntraced < 1024)
    traced[ntraced++] = *bio;
  pthread_mutex_unlock (&trace_lock);
}

ParameterizedTestParameters (backend, batch_flush_is_a_barrier)
{
  return cr_make_param_array (struct variant, variants,
                              sizeof variants / sizeof variants[0]);
}

/* 300 writes, a flush, then reads, in one batch: everything lands, the
 * flush completes after every write and before every read.
 */
ParameterizedTest (struct variant *v, backend, batch_flush_is_a_barrier)
{
  enum
  {
    N = 300
  };
  struct bio *bios = calloc (2 * N + 1, sizeof *bios);
  char *data = aligned_alloc (4096, N * 4096), *back;
  struct backend *b;
  size_t flush_at = 0, writes_before = 0, reads_before = 0;

  back = aligned_alloc (4096, N * 4096);
  make_file (SIZE);
  ntraced = 0;
  b = open_traced (v, false, record);
  for (size_t i = 0; i < N; i++)
    {
      memset (data + i * 4096, (int)(i + 1), 4096);
      bios[i] = (struct bio){ .op = BIO_WRITE,
                              .buf = data + i * 4096,
                              .offset = (N - i) * 8192,
                              .len = 4096 };
      bios[N + 1 + i] = (struct bio){ .op = BIO_READ,
                                      .buf = back + i * 4096,
                                      .offset = (N - i) * 8192,
                                      .len = 4096 };
    }
  bios[N] = (struct bio){ .op = BIO_FLUSH };

  cr_assert_eq (backend_submit (b, bios, 2 * N + 1), 0);

  for (size_t i = 0; i < 2 * N + 1; i++)
    cr_assert_eq (bios[i].result, 0);
  cr_assert_eq (memcmp (data, back, N * 4096), 0);
  cr_assert_eq (ntraced, 2 * N + 1);
  for (size_t i = 0; i < ntraced; i++)
    {
      if (traced[i].op == BIO_FLUSH)
        {
          flush_at = i;
          break;
        }
      writes_before += traced[i].op == BIO_WRITE;
      reads_before += traced[i].op == BIO_READ;
    }
  cr_assert_eq (flush_at, N);
  cr_assert_eq (writes_before, N);
  cr_assert_eq (reads_before, 0);
  backend_close (b);
  remove_file ();
  free (bios);
  free (data);
  free (back);
}

/* Tracing belongs to a backend: a second backend on the same store,
 * opened without a callback, is not traced.
 */
Test (backend, trace_is_per_backend)
{
  struct variant v = { BACKEND_URING, false };
  struct backend *traced_b, *plain_b;
  char buf[4096] = { 't' };

  make_file (1 << 20);
  ntraced = 0;
  no_lock = true; /* two servers on one file */
  traced_b = open_traced (&v, false, record);
  plain_b = open_variant (&v, false);
  no_lock = false;
  cr_assert_eq (backend_pwrite (plain_b, buf, 4096, 8192, 0), 0);
  cr_assert_eq (backend_pwrite (traced_b, buf, 4096, 4096, 0), 0);
  cr_assert_eq (backend_flush (plain_b), 0);
  cr_assert_eq (ntraced, 1);
  cr_assert_eq (traced[0].op, BIO_WRITE);
  cr_assert_eq (traced[0].offset, 4096);
  backend_close (plain_b);
  backend_close (traced_b);
  remove_file ();
}

ParameterizedTestParameters (backend, end_of_device)
{
  return cr_make_param_array (struct variant, variants,
                              sizeof variants / sizeof variants[0]);
}

/* A store whose size is not a multiple of the sector: its tail is
 * readable and writable, and nothing past the end is.
 */
ParameterizedTest (struct variant *v, backend, end_of_device)
{
  const uint64_t size = (1 << 20) + 1000;
  char buf[3000], back[3000];
  struct backend *b;
  struct stat st;

  make_file (size);
  b = open_variant (v, false);
  cr_assert_eq (backend_size (b), size);
  memset (buf, 'e', sizeof buf);
  cr_assert_eq (backend_pwrite (b, buf, 2000, size - 2000, 0), 0);
  cr_assert_eq (backend_pread (b, back, 2000, size - 2000), 0);
  cr_assert_eq (memcmp (buf, back, 2000), 0);
  cr_assert_eq (backend_pread (b, back, 2001, size - 2000), -EINVAL);
  cr_assert_eq (backend_pwrite (b, buf, 1, size, 0), -EINVAL);
  cr_assert_eq (backend_pread (b, back, 1, UINT64_MAX), -EINVAL);
  backend_close (b);
  cr_assert_eq (stat (path, &st), 0);
  cr_assert_eq ((uint64_t)st.st_size, size, "the file must not grow");
  remove_file ();
}

/* Truncate the file under the backend: a read of what vanished fails
 * with EIO rather than returning stale or short data.
 */
Test (backend, short_read_is_eio)
{
  struct variant v[] = { { BACKEND_URING, false }, { BACKEND_PSYNC, false } };
  char buf[8192];

  for (size_t i = 0; i < 2; i++)
    {
      struct backend *b;

      make_file (1 << 20);
      b = open_variant (&v[i], false);
      cr_assert_eq (truncate (path, 4096), 0);
      cr_assert_eq (backend_pread (b, buf, 8192, 0), -EIO);
      cr_assert_eq (backend_pread (b, buf, 4096, 0), 0);
      backend_close (b);
      remove_file ();
    }
}

ParameterizedTestParameters (backend, zero_trim_extents)
{
  return cr_make_param_array (struct variant, variants,
                              sizeof variants / sizeof variants[0]);
}

struct ext
{
  uint64_t off, len;
  bool hole;
};
static struct ext exts[64];
static size_t nexts;

static int
collect (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  (void)opaque;
  cr_assert_lt (nexts, 64);
  exts[nexts++] = (struct ext){ off, len, hole };
  return 0;
}

ParameterizedTest (struct variant *v, backend, zero_trim_extents)
{
  char *buf = malloc (1 << 20), *zero = calloc (1, 1 << 20);
  struct backend *b;
  struct stat st0, st1;

  make_file (SIZE);
  b = open_variant (v, false);
  memset (buf, 'd', 1 << 20);
  cr_assert_eq (backend_pwrite (b, buf, 1 << 20, 1 << 20, 0), 0);
  cr_assert_eq (backend_flush (b), 0);

  /* Extents: hole, 1 MiB of data, hole. */
  nexts = 0;
  cr_assert_eq (backend_extents (b, SIZE, 0, collect, NULL), 0);
  cr_assert_eq (nexts, 3);
  cr_assert (exts[0].hole && exts[0].off == 0 && exts[0].len == 1 << 20);
  cr_assert (!exts[1].hole && exts[1].off == 1 << 20 && exts[1].len == 1 << 20);
  cr_assert (exts[2].hole && exts[2].off + exts[2].len == SIZE);

  /* Zero with may-trim deallocates; the data reads back as zero. */
  cr_assert_eq (stat (path, &st0), 0);
  cr_assert_eq (backend_zero (b, 512 << 10, 1 << 20, BIO_MAY_TRIM | BIO_FUA),
                0);
  cr_assert_eq (stat (path, &st1), 0);
  cr_assert_lt (st1.st_blocks, st0.st_blocks);
  cr_assert_eq (backend_pread (b, buf, 1 << 20, 1 << 20), 0);
  cr_assert_eq (memcmp (buf, zero, 512 << 10), 0);
  cr_assert_eq (buf[512 << 10], 'd');

  /* A plain zero of an unaligned range, and a fast zero. */
  cr_assert_eq (backend_zero (b, 1000, (1 << 20) + (600 << 10) + 7, 0), 0);
  cr_assert_eq (backend_zero (b, 4096, (1 << 20) + (700 << 10), BIO_FAST), 0);
  cr_assert_eq (backend_pread (b, buf, 1 << 20, 1 << 20), 0);
  cr_assert_eq (memcmp (buf + (600 << 10) + 7, zero, 1000), 0);
  cr_assert_eq (buf[(600 << 10) + 6], 'd');
  cr_assert_eq (buf[(600 << 10) + 1007], 'd');
  cr_assert_eq (memcmp (buf + (700 << 10), zero, 4096), 0);

  /* Trim punches the rest. */
  cr_assert_eq (backend_trim (b, 1 << 20, 1 << 20, 0), 0);
  cr_assert_eq (stat (path, &st1), 0);
  cr_assert_eq (st1.st_blocks, 0);
  nexts = 0;
  cr_assert_eq (backend_extents (b, SIZE, 0, collect, NULL), 0);
  cr_assert_eq (nexts, 1);
  cr_assert (exts[0].hole);

  /* Extents past the end are refused. */
  cr_assert_eq (backend_extents (b, 1, SIZE, collect, NULL), -EINVAL);
  backend_close (b);
  remove_file ();
  free (buf);
  free (zero);
}

Test (backend, readonly_refuses_writes)
{
  struct variant v = { BACKEND_URING, false };
  struct backend *b;
  char buf[512] = { 0 };

  make_file (1 << 20);
  b = open_variant (&v, true);
  cr_assert (!backend_caps (b)->writable);
  cr_assert_eq (backend_pwrite (b, buf, 512, 0, 0), -EPERM);
  cr_assert_eq (backend_zero (b, 512, 0, 0), -EPERM);
  cr_assert_eq (backend_trim (b, 512, 0, 0), -EPERM);
  cr_assert_eq (backend_pread (b, buf, 512, 0), 0);
  backend_close (b);
  remove_file ();
}

Test (backend, open_errors)
{
  struct backend_config cfg = { .kind = BACKEND_URING };
  struct backend *b = NULL;

  cfg.path = "/nonexistent/ext4lazy.img";
  cr_assert_eq (backend_open (&cfg, &b), -ENOENT);
  cfg.path = "/var/tmp";
  cr_assert_eq (backend_open (&cfg, &b), -EISDIR);
  cfg.path = "/dev/null";
  cr_assert_eq (backend_open (&cfg, &b), -ENOTBLK);
  cr_assert_null (b);
}

/* no_uring: backend=uring acts as if io_uring could not be set up and
 * serves through psync.
 */
Test (backend, no_uring_falls_back_to_psync)
{
  struct backend_config cfg = { .kind = BACKEND_URING, .no_uring = true };
  struct backend *b = NULL;
  char buf[4096], back[4096];

  make_file (1 << 20);
  cfg.path = path;
  cr_assert_eq (backend_open (&cfg, &b), 0);
  cr_assert_eq (backend_kind (b), BACKEND_PSYNC);
  cr_assert_str_eq (backend_name (b), "psync");
  memset (buf, 'p', sizeof buf);
  cr_assert_eq (backend_pwrite (b, buf, sizeof buf, 4096, 0), 0);
  cr_assert_eq (backend_pread (b, back, sizeof back, 4096), 0);
  cr_assert_eq (memcmp (buf, back, sizeof buf), 0);
  backend_close (b);
  remove_file ();
}

/* body (b) on each implementation, over a fresh 8 MiB file of which
 * only the first MiB can be written: writes past it fail with EFBIG
 * (RLIMIT_FSIZE), a real error from the kernel.
 */
static void
past_fsize_limit (void (*body) (struct backend *b))
{
  struct variant v[] = { { BACKEND_URING, false }, { BACKEND_PSYNC, false } };
  struct rlimit rl;

  signal (SIGXFSZ, SIG_IGN);
  cr_assert_eq (getrlimit (RLIMIT_FSIZE, &rl), 0);
  for (size_t i = 0; i < 2; i++)
    {
      struct backend *b;

      make_file (8 << 20); /* created before the limit applies */
      b = open_variant (&v[i], false);
      rl.rlim_cur = 1 << 20;
      cr_assert_eq (setrlimit (RLIMIT_FSIZE, &rl), 0);
      body (b);
      rl.rlim_cur = rl.rlim_max;
      cr_assert_eq (setrlimit (RLIMIT_FSIZE, &rl), 0);
      backend_close (b);
      remove_file ();
    }
}

static void
write_errors (struct backend *b)
{
  char buf[4096] = { 1 };
  struct bio bios[3] = {
    { .op = BIO_WRITE, .buf = buf, .offset = 0, .len = 4096 },
    { .op = BIO_WRITE, .buf = buf, .offset = 4 << 20, .len = 4096 },
    { .op = BIO_WRITE, .buf = buf, .offset = 8192, .len = 4096 },
  };

  cr_assert_eq (backend_pwrite (b, buf, 4096, 6 << 20, 0), -EFBIG);
  cr_assert_eq (backend_submit (b, bios, 3), -EFBIG);
  cr_assert_eq (bios[0].result, 0);
  cr_assert_eq (bios[1].result, -EFBIG);
  cr_assert_eq (bios[2].result, 0);
}

/* A write error from the store reaches the caller as -errno from both
 * implementations, alone and in a batch.
 */
Test (backend, write_errors_propagate)
{
  past_fsize_limit (write_errors);
}

/* Many threads at once, each with its own ring: unaligned writes to
 * neighbouring bytes of the same sectors must not lose each other under
 * O_DIRECT read-modify-write.
 */
struct worker
{
  struct backend *b;
  int id;
};

static void *
hammer (void *p)
{
  struct worker *w = p;

  for (int i = 0; i < 400; i++)
    {
      char c = (char)('A' + w->id);
      uint64_t off = (uint64_t)i * 8 + w->id; /* interleaved bytes */

      cr_assert_eq (backend_pwrite (w->b, &c, 1, off, 0), 0);
    }
  return NULL;
}

ParameterizedTestParameters (backend, threads_interleaved_bytes)
{
  return cr_make_param_array (struct variant, variants,
                              sizeof variants / sizeof variants[0]);
}

ParameterizedTest (struct variant *v, backend, threads_interleaved_bytes)
{
  pthread_t t[8];
  struct worker w[8];
  char buf[3200];
  struct backend *b;

  make_file (1 << 20);
  b = open_variant (v, false);
  for (int i = 0; i < 8; i++)
    {
      w[i] = (struct worker){ b, i };
      pthread_create (&t[i], NULL, hammer, &w[i]);
    }
  for (int i = 0; i < 8; i++)
    pthread_join (t[i], NULL);
  cr_assert_eq (backend_pread (b, buf, sizeof buf, 0), 0);
  for (size_t i = 0; i < sizeof buf; i++)
    cr_assert_eq (buf[i], 'A' + (int)(i % 8), "byte %zu lost", i);
  backend_close (b);
  remove_file ();
}

/* Fault injection: the hook sees each request before it is issued and
 * fails those it returns an error for; the rest of the batch runs.
 */
static int
fail_reads (const struct bio *bio)
{
  return bio->op == BIO_READ ? -EIO : 0;
}

static struct backend *
open_faulty (const struct variant *v, backend_fault_fn fault)
{
  struct backend_config cfg
      = { .path = path, .kind = v->kind, .direct = v->direct, .fault = fault };
  struct backend *b = NULL;
  int r = backend_open (&cfg, &b);

  cr_assert_eq (r, 0, "backend_open: %s", strerror (-r));
  return b;
}

ParameterizedTestParameters (backend, fault_hook_fails_requests)
{
  return cr_make_param_array (struct variant, variants,
                              sizeof variants / sizeof variants[0]);
}

ParameterizedTest (struct variant *v, backend, fault_hook_fails_requests)
{
  char *buf = aligned_alloc (4096, 8192), back[4096];
  struct backend *b;

  memset (buf, 'a', 4096);
  memset (buf + 4096, 'b', 4096);
  make_file (1 << 20);
  b = open_faulty (v, fail_reads);
  {
    struct bio bios[4] = {
      { .op = BIO_WRITE, .buf = buf, .offset = 0, .len = 4096 },
      { .op = BIO_READ, .buf = back, .offset = 0, .len = 4096 },
      { .op = BIO_WRITE, .buf = buf + 4096, .offset = 8192, .len = 4096 },
      { .op = BIO_FLUSH },
    };

    cr_assert_eq (backend_submit (b, bios, 4), -EIO);
    cr_assert_eq (bios[0].result, 0);
    cr_assert_eq (bios[1].result, -EIO);
    cr_assert_eq (bios[2].result, 0);
    cr_assert_eq (bios[3].result, 0);
  }
  /* Unaligned: the bounce read under O_DIRECT fails too. */
  cr_assert_eq (backend_pread (b, back, 100, 7), -EIO);
  /* A lone aligned read, the path a client's read takes: failed by the
   * hook and counted as a failure once; a lone write still goes.
   */
  {
    uint64_t last, before = backend_failures (b, &last);

    cr_assert_eq (backend_pread (b, back, 4096, 0), -EIO);
    cr_assert_eq (backend_failures (b, &last), before + 1);
    cr_assert_eq (backend_pwrite (b, buf, 4096, 0, 0), 0);
    cr_assert_eq (backend_failures (b, &last), before + 1);
  }
  backend_close (b);
  read_file (back, 4096, 0);
  cr_assert_eq (memcmp (back, buf, 4096), 0);
  read_file (back, 4096, 8192);
  cr_assert_eq (memcmp (back, buf + 4096, 4096), 0);
  remove_file ();
  free (buf);
}

/* ---- the error sequence ---------------------------------------------- */

/* Faults for fail_some: the error each kind of request fails with (0:
 * none).  With fua_armed, the next FLUSH first waits for a FUA write
 * of another thread (other_fua) to the same backend.
 */
static int read_err, write_err, fua_err, flush_err;
static atomic_bool fua_armed;
static struct backend *fua_b;
static int fua_result = 1;

static void *
other_fua (void *arg)
{
  static char buf[4096] __attribute__ ((aligned (4096)));

  (void)arg;
  fua_result = backend_pwrite (fua_b, buf, sizeof buf, 65536, BIO_FUA);
  return NULL;
}

static int
fail_some (const struct bio *bio)
{
  switch (bio->op)
    {
    case BIO_READ:
      return read_err;
    case BIO_WRITE:
      return (bio->flags & BIO_FUA) ? fua_err : write_err;
    case BIO_FLUSH:
      if (atomic_exchange (&fua_armed, false))
        {
          pthread_t t;

          if (pthread_create (&t, NULL, other_fua, NULL) == 0)
            pthread_join (t, NULL);
        }
      return flush_err;
    default:
      return 0;
    }
}

ParameterizedTestParameters (backend, errseq_counts_failed_syncs)
{
  return cr_make_param_array (struct variant, variants,
                              sizeof variants / sizeof variants[0]);
}

/* The sequence moves on a failed flush, FUA write and FUA zero's sync,
 * and keeps the latest errno; not on a failed plain read or write.
 */
ParameterizedTest (struct variant *v, backend, errseq_counts_failed_syncs)
{
  char *buf = aligned_alloc (4096, 4096);
  _Atomic uint64_t reported;
  struct backend *b;
  uint64_t s0, s1;

  memset (buf, 's', 4096);
  make_file (1 << 20);
  b = open_faulty (v, fail_some);
  s0 = backend_errseq (b);
  atomic_store (&reported, s0);
  read_err = write_err = -EIO;
  cr_assert_eq (backend_pread (b, buf, 4096, 0), -EIO);
  cr_assert_eq (backend_pwrite (b, buf, 4096, 0, 0), -EIO);
  cr_assert_eq (backend_errseq_check (b, s0), 0, "plain errors: no move");
  read_err = write_err = 0;

  flush_err = -EIO;
  cr_assert_eq (backend_flush (b), -EIO);
  cr_assert_eq (backend_errseq_check (b, s0), -EIO, "a failed flush");
  s1 = backend_errseq (b);
  cr_assert_eq (backend_zero (b, 4096, 8192, BIO_FUA), -EIO);
  cr_assert_eq (backend_errseq_check (b, s1), -EIO, "a FUA zero's sync");
  flush_err = 0;

  s1 = backend_errseq (b);
  fua_err = -ENOSPC;
  cr_assert_eq (backend_pwrite (b, buf, 4096, 4096, BIO_FUA), -ENOSPC);
  cr_assert_eq (backend_errseq_check (b, s1), -ENOSPC, "a failed FUA write");
  fua_err = 0;

  /* Reported once, with the latest errno. */
  cr_assert_eq (backend_errseq_advance (b, &reported), -ENOSPC);
  cr_assert_eq (backend_errseq_advance (b, &reported), 0);
  cr_assert_eq (backend_flush (b), 0);
  cr_assert_eq (backend_errseq_advance (b, &reported), 0);
  backend_close (b);
  remove_file ();
  free (buf);
}

ParameterizedTestParameters (backend, sync_fails_if_errseq_moved_meanwhile)
{
  return cr_make_param_array (struct variant, variants,
                              sizeof variants / sizeof variants[0]);
}

/* A FUA write of another thread fails between a batch's write and its
 * flush: the flush itself succeeds, but it may have lost the write's
 * error to that FUA write, so the batch fails with its errno.
 */
ParameterizedTest (struct variant *v, backend,
                   sync_fails_if_errseq_moved_meanwhile)
{
  char *buf = aligned_alloc (4096, 4096);
  struct backend *b;
  struct bio bios[2] = {
    { .op = BIO_WRITE, .buf = buf, .offset = 0, .len = 4096 },
    { .op = BIO_FLUSH },
  };

  memset (buf, 'w', 4096);
  make_file (1 << 20);
  fua_b = b = open_faulty (v, fail_some);
  fua_err = -EROFS;
  atomic_store (&fua_armed, true);
  cr_assert_eq (backend_submit (b, bios, 2), -EROFS);
  cr_assert_eq (fua_result, -EROFS, "the other thread's own error");
  cr_assert_eq (bios[0].result, 0);
  cr_assert_eq (bios[1].result, -EROFS, "the flush is not known good");
  fua_err = 0;
  cr_assert_eq (backend_submit (b, bios, 2), 0, "nothing moved: good");
  backend_close (b);
  remove_file ();
  free (buf);
}

static void
real_fua_errors (struct backend *b)
{
  char buf[4096] = { 1 };
  struct bio bios[2] = {
    { .op = BIO_WRITE, .buf = buf, .offset = 0, .len = 4096 },
    { .op = BIO_WRITE, .buf = buf, .offset = 4 << 20, .len = 4096 },
  };
  uint64_t s0 = backend_errseq (b);

  cr_assert_eq (backend_pwrite (b, buf, 4096, 6 << 20, 0), -EFBIG);
  cr_assert_eq (backend_submit (b, bios, 2), -EFBIG);
  cr_assert_eq (backend_errseq_check (b, s0), 0, "plain writes");
  cr_assert_eq (backend_pwrite (b, buf, 4096, 6 << 20, BIO_FUA), -EFBIG);
  cr_assert_eq (backend_errseq_check (b, s0), -EFBIG, "a FUA write");
  s0 = backend_errseq (b);
  bios[1].flags = BIO_FUA;
  cr_assert_eq (backend_submit (b, bios, 2), -EFBIG);
  cr_assert_eq (backend_errseq_check (b, s0), -EFBIG, "in a batch");
}

/* Real failures from the kernel count too, from both implementations,
 * alone and in a batch (through the ring): a FUA write's, not a plain
 * write's.
 */
Test (backend, errseq_counts_real_fua_errors)
{
  past_fsize_limit (real_fua_errors);
}

/* Merging: reads first, writes by offset; a run is adjacent writes up to
 * the caps, and a read is a run of one.
 */
Test (backend, order_and_run_len)
{
  char buf[4096];
  struct bio v[] = {
    { BIO_WRITE, 0, buf, 3 * 4096, 4096, 0 },
    { BIO_READ, 0, buf, 1 * 4096, 4096, 0 },
    { BIO_WRITE, 0, buf, 1 * 4096, 4096, 0 },
    { BIO_WRITE, 0, buf, 2 * 4096, 4096, 0 },
    { BIO_WRITE, 0, buf, 9 * 4096, 4096, 0 },
    { BIO_READ, 0, buf, 2 * 4096, 4096, 0 },
    { BIO_WRITE, 0, buf, 4 * 4096, 4096, 0 },
  };
  const size_t n = sizeof v / sizeof v[0];
  size_t ord[sizeof v / sizeof v[0]];

  backend_order (v, n, ord);
  cr_assert_eq (v[ord[0]].op, BIO_READ);
  cr_assert_eq (v[ord[1]].op, BIO_READ);
  for (size_t i = 3; i < n; i++)
    cr_assert_gt (v[ord[i]].offset, v[ord[i - 1]].offset);
  cr_assert_eq (backend_run_len (v, ord, 0, n, 64, 1 << 20), 1,
                "a read is not merged with the read beside it");
  cr_assert_eq (backend_run_len (v, ord, 2, n, 64, 1 << 20), 4,
                "writes at blocks 1-4 meet, 9 does not");
  cr_assert_eq (backend_run_len (v, ord, 2, n, 3, 1 << 20), 3);
  cr_assert_eq (backend_run_len (v, ord, 2, n, 64, 2 * 4096), 2);
  cr_assert_eq (backend_run_len (v, ord, 6, n, 64, 1 << 20), 1);
}

/* Write syscalls this process made so far (/proc/self/io), or -1 when
 * they cannot be told: no such file, or under valgrind, whose own
 * writes count there too.
 */
static long
write_syscalls (void)
{
  const char *preload = getenv ("LD_PRELOAD");
  FILE *f;
  char line[128];
  long n = -1;

  if (preload && strstr (preload, "vgpreload"))
    return -1;
  f = fopen ("/proc/self/io", "r");
  if (!f)
    return -1;
  while (fgets (line, sizeof line, f))
    if (sscanf (line, "syscw: %ld", &n) == 1)
      break;
  fclose (f);
  return n;
}

/* A group of buffered writes runs as plain syscalls, adjacent ones as
 * one pwritev2, on both file backends; every block lands, FUA or not.
 */
ParameterizedTestParameters (backend, buffered_writes_merge)
{
  static struct variant buffered[]
      = { { BACKEND_URING, false }, { BACKEND_PSYNC, false } };

  return cr_make_param_array (struct variant, buffered, 2);
}

ParameterizedTest (struct variant *v, backend, buffered_writes_merge)
{
  enum
  {
    N = 12
  };
  static char blk[N][4096], back[4096];
  /* Blocks 10-17 (one run, given out of order), 20, 22-24 (a run). */
  static const uint64_t at[N]
      = { 13, 10, 20, 17, 11, 24, 12, 14, 22, 15, 16, 23 };
  struct bio bios[N];
  struct backend *b;
  long before, after;

  make_file (SIZE);
  b = open_variant (v, false);
  for (int i = 0; i < N; i++)
    {
      memset (blk[i], 'A' + i, sizeof blk[i]);
      bios[i] = (struct bio){ .op = BIO_WRITE,
                              .buf = blk[i],
                              .offset = at[i] * 4096,
                              .len = 4096,
                              .flags = i == 4 ? BIO_FUA : 0 };
    }
  before = write_syscalls ();
  cr_assert_eq (backend_submit (b, bios, N), 0);
  after = write_syscalls ();
  if (before >= 0 && after >= 0)
    cr_assert_eq (after - before, 3, "3 runs, 3 writes: %ld", after - before);
  cr_assert_eq (atomic_load (&b->issued), 3, "3 runs, 3 requests");
  for (int i = 0; i < N; i++)
    {
      cr_assert_eq (bios[i].result, 0);
      read_file (back, 4096, at[i] * 4096);
      cr_assert_eq (memcmp (back, blk[i], 4096), 0, "block %lu",
                    (unsigned long)at[i]);
    }
  backend_close (b);
  remove_file ();
}

/* Requests issued to the store since the last call. */
static uint64_t
issued_since (struct backend *b, uint64_t *last)
{
  uint64_t now = atomic_load (&b->issued), d = now - *last;

  *last = now;
  return d;
}

/* Hold n adjacent blocks of bs bytes from block first on, each filled
 * with its own byte, and make a write-back batch of them (in the
 * table's order, oldest first, given here from the last block down).
 */
static void
hold_run (struct hold_table *t, struct bio *bios, size_t n, uint32_t bs,
          uint64_t first)
{
  unsigned char *blk = malloc (bs);
  int err = 0;

  cr_assert_eq (hold_init (t), 0);
  for (size_t i = 0; i < n; i++)
    {
      uint64_t off = (first + n - 1 - i) * bs;

      memset (blk, 'a' + (int)(off / bs % 26), bs);
      cr_assert_not_null (
          hold_put (t, off, bs, &(struct hold_info){ 0 }, blk, i, &err));
    }
  free (blk);
  n = 0;
  for (struct hold *h = hold_oldest (t); h; h = hold_next (t, h))
    bios[n++] = (struct bio){
      .op = BIO_WRITE, .buf = h->data, .offset = h->off, .len = h->len
    };
}

/* Every held block of the batch is on the store. */
static void
check_run (const struct bio *bios, size_t n)
{
  unsigned char *back = malloc (bios[0].len);

  for (size_t i = 0; i < n; i++)
    {
      cr_assert_eq (bios[i].result, 0);
      read_file (back, bios[i].len, bios[i].offset);
      cr_assert_eq (memcmp (back, bios[i].buf, bios[i].len), 0, "block at %lu",
                    (unsigned long)bios[i].offset);
    }
  free (back);
}

/* Held blocks are aligned for O_DIRECT: a write-back of adjacent ones
 * needs no bounce buffer, and goes as one request (psync: a pwritev2;
 * uring: one writev ring entry).
 */
static struct variant direct_variants[] = {
  { BACKEND_URING, true },
  { BACKEND_PSYNC, true },
};

ParameterizedTestParameters (backend, direct_writeback_of_holds_is_one_request)
{
  return cr_make_param_array (struct variant, direct_variants,
                              sizeof direct_variants
                                  / sizeof direct_variants[0]);
}

ParameterizedTest (struct variant *v, backend,
                   direct_writeback_of_holds_is_one_request)
{
  enum
  {
    N = 16
  };
  struct hold_table t;
  struct bio bios[N];
  struct backend *b;
  uint64_t last = 0;

  make_file (SIZE);
  b = open_variant (v, false);
  hold_run (&t, bios, N, 4096, 100);
  for (struct hold *h = hold_oldest (&t); h; h = hold_next (&t, h))
    cr_assert_eq ((uintptr_t)h->data % HOLD_ALIGN, 0);
  issued_since (b, &last);
  cr_assert_eq (backend_submit (b, bios, N), 0);
  cr_assert_eq (issued_since (b, &last), 1, "one request for %d blocks", N);
  check_run (bios, N);
  hold_fini (&t);
  backend_close (b);
  remove_file ();
}

/* A run is capped by its bytes (BACKEND_RUN_BYTES), not by how many
 * blocks it has: 300 adjacent 4 KiB blocks are 2 requests on every file
 * backend, buffered or O_DIRECT.
 */
ParameterizedTestParameters (backend, runs_are_capped_by_bytes)
{
  return cr_make_param_array (struct variant, variants,
                              sizeof variants / sizeof variants[0]);
}

ParameterizedTest (struct variant *v, backend, runs_are_capped_by_bytes)
{
  enum
  {
    N = 300,
    BS = 4096
  };
  static struct bio bios[N];
  const uint64_t want
      = ((uint64_t)N * BS + BACKEND_RUN_BYTES - 1) / BACKEND_RUN_BYTES;
  struct hold_table t;
  struct backend *b;
  uint64_t last = 0;

  make_file (SIZE);
  b = open_variant (v, false);
  hold_run (&t, bios, N, BS, 10);
  issued_since (b, &last);
  cr_assert_eq (backend_submit (b, bios, N), 0);
  cr_assert_eq (issued_since (b, &last), want, "%d blocks in %lu requests", N,
                (unsigned long)want);
  check_run (bios, N);
  hold_fini (&t);
  backend_close (b);
  remove_file ();
}

/* ---- an NBD remote with a minimum block size ------------------------ */

static char remote_dir[64], remote_sock[96], remote_pid[96];
static pid_t remote;

/* Serve 8 MiB from nbdkit's memory plugin with a minimum block size
 * of min_block; skip the test when nbdkit or its filter is missing.
 */
static void
remote_start (unsigned min_block)
{
  char minarg[64];

  if (!backend_kind_available (BACKEND_NBD))
    cr_skip_test ("built without libnbd");
  strcpy (remote_dir, "/tmp/ext4lazy-remote-XXXXXX");
  cr_assert_not_null (mkdtemp (remote_dir));
  snprintf (remote_sock, sizeof remote_sock, "%s/sock", remote_dir);
  snprintf (remote_pid, sizeof remote_pid, "%s/pid", remote_dir);
  snprintf (minarg, sizeof minarg, "blocksize-minimum=%u", min_block);
  remote = fork ();
  cr_assert_geq (remote, 0);
  if (remote == 0)
    {
      execlp ("nbdkit", "nbdkit", "-f", "--exit-with-parent", "-U", remote_sock,
              "-P", remote_pid, "--filter=blocksize-policy", "memory", "8M",
              minarg, (char *)NULL);
      _exit (127);
    }
  for (int i = 0; i < 1000 && access (remote_pid, F_OK) != 0; i++)
    {
      if (waitpid (remote, NULL, WNOHANG) == remote)
        {
          remote = 0;
          rmdir (remote_dir);
          cr_skip_test ("nbdkit with the blocksize-policy filter would not "
                        "start");
        }
      usleep (10000);
    }
  cr_assert_eq (access (remote_pid, F_OK), 0, "nbdkit did not start");
}

static void
remote_stop (void)
{
  /* SIGKILL: a failed test leaves its connections open, and nbdkit
   * would wait for them on SIGTERM.
   */
  if (remote > 0)
    {
      kill (remote, SIGKILL);
      waitpid (remote, NULL, 0);
      remote = 0;
    }
  unlink (remote_sock);
  unlink (remote_pid);
  rmdir (remote_dir);
}

/* Adjacent writes to a remote with a minimum block size go as one NBD
 * command (up to its maximum request size), wherever their buffers
 * are in memory: here blocks packed from a buffer aligned to nothing,
 * and more of them than any fixed count of blocks.
 */
Test (backend, nbd_min_block_runs_merge, .fini = remote_stop)
{
  enum
  {
    N = 300,
    BS = 4096
  };
  static struct bio bios[N];
  char uri[160], *mem = malloc (N * BS + 1), *back = malloc (BS);
  struct backend_config cfg = { .path = uri, .kind = BACKEND_NBD };
  struct backend *b = NULL;
  uint64_t last = 0;
  int r;

  remote_start (512);
  snprintf (uri, sizeof uri, "nbd+unix:///?socket=%s", remote_sock);
  r = backend_open (&cfg, &b);
  cr_assert_eq (r, 0, "backend_open: %s", strerror (-r));
  cr_assert_eq (backend_caps (b)->align, 512);
  for (size_t i = 0; i < N; i++)
    {
      /* Given from the last block down, one byte off any alignment. */
      char *p = mem + 1 + (N - 1 - i) * BS;

      memset (p, 'a' + (int)(i % 26), BS);
      bios[i] = (struct bio){ .op = BIO_WRITE,
                              .buf = p,
                              .offset = (uint64_t)(16 + N - 1 - i) * BS,
                              .len = BS };
    }
  issued_since (b, &last);
  cr_assert_eq (backend_submit (b, bios, N), 0);
  cr_assert_eq (issued_since (b, &last), 1, "%d blocks in one command", N);
  for (size_t i = 0; i < N; i++)
    {
      cr_assert_eq (backend_pread (b, back, BS, bios[i].offset), 0);
      cr_assert_eq (memcmp (back, bios[i].buf, BS), 0, "block %zu", i);
    }
  backend_close (b);
  free (mem);
  free (back);
}

/* Under O_DIRECT, adjacent blocks aligned on the store but not in
 * memory (a write-back that packed copies of held blocks into one
 * buffer) still go as one request, from one aligned copy; reads into
 * such buffers get their bytes.
 */
ParameterizedTestParameters (backend, direct_unaligned_memory_runs_merge)
{
  return cr_make_param_array (struct variant, direct_variants,
                              sizeof direct_variants
                                  / sizeof direct_variants[0]);
}

ParameterizedTest (struct variant *v, backend,
                   direct_unaligned_memory_runs_merge)
{
  enum
  {
    N = 16,
    BS = 4096
  };
  struct bio bios[N];
  char *mem = malloc (N * BS + 1), *in = malloc (N * BS + 1);
  struct backend *b;
  uint64_t last = 0;

  make_file (SIZE);
  b = open_variant (v, false);
  for (size_t i = 0; i < N; i++)
    {
      /* Given from the last block down, one byte off any alignment. */
      char *p = mem + 1 + (N - 1 - i) * BS;

      memset (p, 'a' + (int)i, BS);
      bios[i] = (struct bio){ .op = BIO_WRITE,
                              .buf = p,
                              .offset = (uint64_t)(40 + N - 1 - i) * BS,
                              .len = BS };
    }
  issued_since (b, &last);
  cr_assert_eq (backend_submit (b, bios, N), 0);
  cr_assert_eq (issued_since (b, &last), 1, "%d blocks in one request", N);
  for (size_t i = 0; i < N; i++)
    cr_assert_eq (bios[i].buf, mem + 1 + (N - 1 - i) * BS, "buffer given back");
  check_run (bios, N);
  cr_assert_eq (backend_pread (b, in + 1, N * BS, 40 * BS), 0);
  cr_assert_eq (memcmp (in + 1, mem + 1, N * BS), 0);
  backend_close (b);
  remove_file ();
  free (mem);
  free (in);
}
