/* SPDX-License-Identifier: BSD-3-Clause */
/* test-record.c --- the record log: client requests and store operations
 * written as record.h lays them out (32-byte little-endian headers, data
 * after store writes only, seq from 0), read back from the file; close,
 * reopen, refused paths, a failing write, and whole records from many
 * threads at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "backend.h"
#include "log.h"
#include "record.h"

#define HDR 32 /* the header's size on disk */

static char dir[256], path[300];

static void
setup (void)
{
  const char *t = getenv ("TMPDIR");

  snprintf (dir, sizeof dir, "%s/ext4lazy-record-XXXXXX", t && *t ? t : "/tmp");
  cr_assert_not_null (mkdtemp (dir));
  snprintf (path, sizeof path, "%s/rec.log", dir);
}

static void
teardown (void)
{
  record_close ();
  unlink (path);
  rmdir (dir);
}

TestSuite (record, .init = setup, .fini = teardown);

/* The file's whole content; *len its size. */
static unsigned char *
slurp (const char *p, size_t *len)
{
  struct stat st;
  unsigned char *buf;
  int fd = open (p, O_RDONLY);

  cr_assert_geq (fd, 0, "open %s: %s", p, strerror (errno));
  cr_assert_eq (fstat (fd, &st), 0);
  buf = malloc (st.st_size + 1);
  cr_assert_not_null (buf);
  cr_assert_eq (read (fd, buf, st.st_size), st.st_size);
  close (fd);
  *len = st.st_size;
  return buf;
}

static uint64_t
le (const unsigned char *p, int bytes)
{
  uint64_t v = 0;

  for (int i = bytes - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

struct rec
{
  uint32_t magic;
  uint16_t kind, flags;
  uint64_t seq, offset, len;
  const unsigned char *data; /* REC_STORE_WRITE only */
};

/* Decode the record at *pos of buf[0..len), as record.h lays it out. */
static void
decode (const unsigned char *buf, size_t len, size_t *pos, struct rec *r)
{
  const unsigned char *p = buf + *pos;

  cr_assert_leq (*pos + HDR, len, "torn header at %zu", *pos);
  r->magic = le (p, 4);
  r->kind = le (p + 4, 2);
  r->flags = le (p + 6, 2);
  r->seq = le (p + 8, 8);
  r->offset = le (p + 16, 8);
  r->len = le (p + 24, 8);
  r->data = NULL;
  cr_assert_eq (r->magic, RECORD_MAGIC, "bad magic at %zu", *pos);
  *pos += HDR;
  if (r->kind == REC_STORE_WRITE)
    {
      cr_assert_leq (r->len, len - *pos, "torn data at %zu", *pos);
      r->data = buf + *pos;
      *pos += r->len;
    }
}

static void
expect (const unsigned char *buf, size_t len, size_t *pos, uint64_t seq,
        enum record_kind kind, uint32_t flags, uint64_t offset, uint64_t n)
{
  struct rec r;

  decode (buf, len, pos, &r);
  cr_assert_eq (r.seq, seq, "record %" PRIu64 " has seq %" PRIu64, seq, r.seq);
  cr_assert_eq (r.kind, kind, "record %" PRIu64 ": kind %u, not %d", seq,
                r.kind, kind);
  cr_assert_eq (r.flags, flags, "record %" PRIu64 ": flags", seq);
  cr_assert_eq (r.offset, offset, "record %" PRIu64 ": offset", seq);
  cr_assert_eq (r.len, n, "record %" PRIu64 ": len", seq);
}

static void
store (enum bio_op op, uint32_t flags, void *buf, uint64_t offset, uint64_t len)
{
  struct bio b
      = { .op = op, .flags = flags, .buf = buf, .offset = offset, .len = len };

  record_store (&b);
}

static off_t
file_size (const char *p)
{
  struct stat st;

  cr_assert_eq (stat (p, &st), 0);
  return st.st_size;
}

Test (record, header_is_32_bytes)
{
  cr_assert_eq (sizeof (struct record_hdr), HDR);
  cr_assert_eq (RECORD_MAGIC, 0x4c34584fu);
}

Test (record, client_and_store_records_read_back)
{
  unsigned char wdata[4096], rdata[512], *buf;
  size_t len, pos = 0;
  struct stat st;
  struct rec r;

  for (size_t i = 0; i < sizeof wdata; i++)
    wdata[i] = (unsigned char)(i * 31 + 7);
  memset (rdata, 0xaa, sizeof rdata);

  cr_assert_eq (record_active (), 0);
  cr_assert_eq (record_open (path), 0);
  cr_assert_eq (record_active (), 1);
  cr_assert_eq (stat (path, &st), 0);
  cr_assert_eq (st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);

  record_client (REC_CLIENT_WRITE, 8192, 4096, BIO_FUA);
  store (BIO_WRITE, BIO_FUA, wdata, 8192, sizeof wdata);
  store (BIO_READ, 0, rdata, 0, sizeof rdata);
  store (BIO_FLUSH, 0, NULL, 0, 0);
  store (BIO_ZERO, BIO_MAY_TRIM | BIO_FAST, NULL, 65536, 131072);
  store (BIO_TRIM, 0, NULL, 1 << 20, 1 << 16);
  record_client (REC_CLIENT_READ, 0, 512, 0);
  record_client (REC_CLIENT_FLUSH, 0, 0, 0);
  record_client (REC_CLIENT_ZERO, 65536, 131072, BIO_MAY_TRIM);
  record_client (REC_CLIENT_TRIM, 1 << 20, 1 << 16, 0);
  /* 64-bit offsets and lengths are kept whole. */
  record_client (REC_CLIENT_WRITE, 0x123456789abcdef0, 0x0fedcba987654321, 0);
  record_close ();
  cr_assert_eq (record_active (), 0);

  buf = slurp (path, &len);
  cr_assert_eq (len, 11 * HDR + sizeof wdata, "log is %zu bytes", len);
  /* The magic, little-endian, reads "OX4L". */
  cr_assert_eq (memcmp (buf, "OX4L", 4), 0);
  expect (buf, len, &pos, 0, REC_CLIENT_WRITE, BIO_FUA, 8192, 4096);
  /* The store write carries its data. */
  decode (buf, len, &pos, &r);
  cr_assert_eq (r.seq, 1);
  cr_assert_eq (r.kind, REC_STORE_WRITE);
  cr_assert_eq (r.flags, BIO_FUA);
  cr_assert_eq (r.offset, 8192);
  cr_assert_eq (r.len, sizeof wdata);
  cr_assert_eq (memcmp (r.data, wdata, sizeof wdata), 0);
  /* A store read does not: the next header follows at once. */
  expect (buf, len, &pos, 2, REC_STORE_READ, 0, 0, sizeof rdata);
  expect (buf, len, &pos, 3, REC_STORE_FLUSH, 0, 0, 0);
  expect (buf, len, &pos, 4, REC_STORE_ZERO, BIO_MAY_TRIM | BIO_FAST, 65536,
          131072);
  expect (buf, len, &pos, 5, REC_STORE_TRIM, 0, 1 << 20, 1 << 16);
  expect (buf, len, &pos, 6, REC_CLIENT_READ, 0, 0, 512);
  expect (buf, len, &pos, 7, REC_CLIENT_FLUSH, 0, 0, 0);
  expect (buf, len, &pos, 8, REC_CLIENT_ZERO, BIO_MAY_TRIM, 65536, 131072);
  expect (buf, len, &pos, 9, REC_CLIENT_TRIM, 0, 1 << 20, 1 << 16);
  expect (buf, len, &pos, 10, REC_CLIENT_WRITE, 0, 0x123456789abcdef0,
          0x0fedcba987654321);
  cr_assert_eq (pos, len);
  free (buf);
}

Test (record, nothing_is_recorded_when_closed)
{
  unsigned char data[512] = { 1, 2, 3 };

  /* Before any open: no-ops. */
  record_client (REC_CLIENT_WRITE, 0, 512, 0);
  store (BIO_WRITE, 0, data, 0, sizeof data);
  cr_assert_eq (record_active (), 0);

  cr_assert_eq (record_open (path), 0);
  record_client (REC_CLIENT_FLUSH, 0, 0, 0);
  record_close ();
  cr_assert_eq (file_size (path), HDR);

  record_client (REC_CLIENT_WRITE, 0, 512, 0);
  store (BIO_WRITE, 0, data, 0, sizeof data);
  store (BIO_FLUSH, 0, NULL, 0, 0);
  cr_assert_eq (record_active (), 0);
  cr_assert_eq (file_size (path), HDR, "records were written after close");

  /* A second close is harmless. */
  record_close ();
  cr_assert_eq (record_active (), 0);
}

Test (record, reopen_truncates_and_restarts_seq)
{
  char other[320];
  unsigned char *buf;
  size_t len, pos = 0;

  cr_assert_eq (record_open (path), 0);
  for (int i = 0; i < 3; i++)
    record_client (REC_CLIENT_READ, i * 4096, 4096, 0);
  cr_assert_eq (file_size (path), 3 * HDR);

  /* The same path again, without a close: truncated, seq from 0. */
  cr_assert_eq (record_open (path), 0);
  cr_assert_eq (file_size (path), 0);
  record_client (REC_CLIENT_TRIM, 4096, 8192, 0);
  cr_assert_eq (file_size (path), HDR);

  /* Another path: the first log keeps what it has and gets no more. */
  snprintf (other, sizeof other, "%s/other.log", dir);
  cr_assert_eq (record_open (other), 0);
  record_client (REC_CLIENT_FLUSH, 0, 0, 0);
  record_client (REC_CLIENT_FLUSH, 0, 0, 0);
  record_close ();

  buf = slurp (path, &len);
  cr_assert_eq (len, HDR);
  expect (buf, len, &pos, 0, REC_CLIENT_TRIM, 0, 4096, 8192);
  free (buf);

  pos = 0;
  buf = slurp (other, &len);
  cr_assert_eq (len, 2 * HDR);
  expect (buf, len, &pos, 0, REC_CLIENT_FLUSH, 0, 0, 0);
  expect (buf, len, &pos, 1, REC_CLIENT_FLUSH, 0, 0, 0);
  free (buf);
  unlink (other);
}

Test (record, unwritable_paths_are_refused)
{
  char p[320];

  snprintf (p, sizeof p, "%s/no-such-dir/rec.log", dir);
  cr_assert_eq (record_open (p), -ENOENT);
  cr_assert_eq (record_active (), 0);

  /* A directory. */
  cr_assert_eq (record_open (dir), -EISDIR);
  cr_assert_eq (record_active (), 0);

  /* A directory without write permission: root may write anyway. */
  if (geteuid () != 0)
    {
      snprintf (p, sizeof p, "%s/ro", dir);
      cr_assert_eq (mkdir (p, 0500), 0);
      strcat (p, "/rec.log");
      cr_assert_eq (record_open (p), -EACCES);
      cr_assert_eq (record_active (), 0);
      p[strlen (p) - strlen ("/rec.log")] = 0;
      rmdir (p);
    }
  else
    cr_log_info ("running as root: the EACCES case is not checked");

  /* Nothing was left open: records go nowhere. */
  record_client (REC_CLIENT_FLUSH, 0, 0, 0);
  cr_assert_eq (record_active (), 0);
}

static char notice[512];

static void
sink (enum log_level level, const char *msg)
{
  if (level == LOG_LEVEL_NOTICE)
    snprintf (notice, sizeof notice, "%s", msg);
}

/* A record that cannot be written whole stops the recording, with a
 * notice, rather than leave a torn log.
 */
Test (record, failed_write_stops_recording)
{
  if (access ("/dev/full", W_OK) != 0)
    cr_skip_test ("/dev/full is not there");
  log_set_sink (sink);
  cr_assert_eq (record_open ("/dev/full"), 0);
  cr_assert_eq (record_active (), 1);
  record_client (REC_CLIENT_WRITE, 0, 4096, 0);
  cr_assert_eq (record_active (), 0, "recording goes on after a failed write");
  cr_assert_not_null (strstr (notice, "record"), "notice: \"%s\"", notice);
  /* Later records are dropped quietly. */
  notice[0] = 0;
  record_client (REC_CLIENT_WRITE, 0, 4096, 0);
  cr_assert_str_empty (notice);
  log_set_sink (NULL);
}

/* ---- many threads ----------------------------------------------------- */

#define THREADS 4
#define PER_THREAD 400

static uint8_t
pattern (uint64_t offset, size_t i)
{
  return (uint8_t)(offset * 13 + i * 7 + (offset >> 20));
}

static void *
writer (void *arg)
{
  uintptr_t t = (uintptr_t)arg;
  unsigned char buf[1500];

  for (size_t i = 0; i < PER_THREAD; i++)
    {
      uint64_t offset = (uint64_t)t << 32 | i;
      size_t n = 1 + (i * 97 + t * 31) % sizeof buf;

      if (i % 3 == 0)
        {
          record_client (REC_CLIENT_WRITE, offset, n, (uint32_t)t);
          continue;
        }
      for (size_t k = 0; k < n; k++)
        buf[k] = pattern (offset, k);
      store (BIO_WRITE, (uint32_t)t, buf, offset, n);
    }
  return NULL;
}

Test (record, threads_append_whole_records)
{
  pthread_t th[THREADS];
  unsigned char *buf;
  size_t len, pos = 0, next[THREADS] = { 0 };
  uint64_t seq = 0;

  cr_assert_eq (record_open (path), 0);
  for (uintptr_t t = 0; t < THREADS; t++)
    cr_assert_eq (pthread_create (&th[t], NULL, writer, (void *)t), 0);
  for (int t = 0; t < THREADS; t++)
    pthread_join (th[t], NULL);
  record_close ();

  buf = slurp (path, &len);
  while (pos < len)
    {
      struct rec r;
      uint64_t t, i;

      decode (buf, len, &pos, &r);
      cr_assert_eq (r.seq, seq, "record %" PRIu64 " has seq %" PRIu64, seq,
                    r.seq);
      t = r.offset >> 32;
      i = r.offset & 0xffffffff;
      cr_assert_lt (t, THREADS);
      cr_assert_eq (r.flags, t);
      /* Each thread's records are in its own order. */
      cr_assert_eq (i, next[t],
                    "thread %" PRIu64 ": record %" PRIu64 " where %zu was due",
                    t, i, next[t]);
      next[t]++;
      cr_assert_eq (r.len, 1 + (i * 97 + t * 31) % 1500);
      if (i % 3 == 0)
        cr_assert_eq (r.kind, REC_CLIENT_WRITE);
      else
        {
          cr_assert_eq (r.kind, REC_STORE_WRITE);
          for (size_t k = 0; k < r.len; k++)
            cr_assert_eq (r.data[k], pattern (r.offset, k),
                          "record %" PRIu64 " byte %zu", seq, k);
        }
      seq++;
    }
  cr_assert_eq (seq, THREADS * PER_THREAD);
  for (int t = 0; t < THREADS; t++)
    cr_assert_eq (next[t], PER_THREAD);
  free (buf);
}
