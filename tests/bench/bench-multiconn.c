/* SPDX-License-Identifier: BSD-3-Clause */
/* bench-multiconn.c --- the client of bench-multiconn.sh: NCONN threads,
 * each with its own libnbd connection, doing a random mix of inode-table
 * and data writes and flushes for a fixed time.
 *
 * Usage: bench-multiconn SOCKET PLAN NCONN SECONDS TIME% REAL% DATA% FLUSH%
 *                        atime|all SEED
 *
 * PLAN (from bench-multiconn.py plan):
 *   H block_size inode_size metadata_csum csum_seed
 *   T conn block_offset index_in_block inode_number   (one per inode)
 *   D conn first_byte_offset nblocks                  (free data blocks)
 *
 * The ops:
 *   time   read the inode-table block holding one of the connection's
 *          inodes, move its i_atime (atime) or i_atime, i_mtime and
 *          i_ctime (all) one second on, fix the inode checksum, write
 *          the block: a write ext4lazy classifies time-only;
 *   real   the same with the low bit of i_uid toggled and i_ctime moved:
 *          a real change;
 *   data   a 4 KiB write to one of the connection's free data blocks;
 *   flush  an NBD flush.
 * Each connection owns its inode-table blocks, so no two threads ever
 * read-modify-write the same block.
 *
 * Prints key=value lines: per kind count, p50, p99 and mean latency in
 * microseconds (an inode-table op is timed from its read to the end of
 * its write), and the totals.  Build:
 *   cc -O2 -o bench-multiconn bench-multiconn.c $(pkg-config --cflags
 *      --libs libnbd) -lpthread
 */
#include <errno.h>
#include <inttypes.h>
#include <libnbd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum kind
{
  K_TIME,
  K_REAL,
  K_DATA,
  K_FLUSH,
  K_N
};
static const char *kind_name[K_N] = { "time", "real", "data", "flush" };

struct ino
{
  uint64_t off;
  uint32_t idx, ino;
};

struct lat
{
  uint32_t *v;
  size_t n, cap;
};

struct conn
{
  int id;
  struct ino *inos;
  size_t n_inos, cap_inos;
  uint64_t data_off, data_n;
  struct lat lat[K_N];
  uint64_t requests;
  uint64_t seed;
  const char *err;
};

static const char *sock_path;
static uint32_t block_size, inode_size, csum_seed;
static bool metadata_csum, touch_all;
static unsigned mix[K_N];
static double run_secs;
static pthread_barrier_t start_barrier;
static struct timespec t_start;

/* ---- crc32c as ext4 uses it (no final inversion) ------------------- */

static uint32_t crc_table[256];

static void
crc_init (void)
{
  for (uint32_t n = 0; n < 256; n++)
    {
      uint32_t c = n;
      for (int k = 0; k < 8; k++)
        c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      crc_table[n] = c;
    }
}

static uint32_t
crc32c (uint32_t crc, const void *buf, size_t len)
{
  const uint8_t *p = buf;
  while (len--)
    crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

static uint32_t
le32 (const uint8_t *p)
{
  return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t
le16 (const uint8_t *p)
{
  return p[0] | p[1] << 8;
}

static void
put32 (uint8_t *p, uint32_t v)
{
  p[0] = v;
  p[1] = v >> 8;
  p[2] = v >> 16;
  p[3] = v >> 24;
}

static void
put16 (uint8_t *p, uint16_t v)
{
  p[0] = v;
  p[1] = v >> 8;
}

/* ext4_inode_csum_set(): crc32c(seed, ino, generation, the record with
 * i_checksum_lo and (when i_extra_isize covers it) i_checksum_hi
 * zeroed); lo takes the low 16 bits, hi the high 16.
 */
static void
inode_csum (uint8_t *r, uint32_t ino)
{
  uint8_t tmp[4];
  bool has_hi = false;
  uint32_t c;

  if (!metadata_csum)
    return;
  if (inode_size > 128)
    {
      uint16_t extra = le16 (r + 0x80);
      has_hi = 128 + (uint32_t)extra >= 0x84;
    }
  put16 (r + 0x7C, 0);
  if (has_hi)
    put16 (r + 0x82, 0);
  put32 (tmp, ino);
  c = crc32c (csum_seed, tmp, 4);
  c = crc32c (c, r + 0x64, 4); /* i_generation */
  c = crc32c (c, r, inode_size);
  put16 (r + 0x7C, c & 0xFFFF);
  if (has_hi)
    put16 (r + 0x82, c >> 16);
}

/* ---- the ops --------------------------------------------------------- */

static uint64_t
rnd (uint64_t *s)
{
  /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

static double
now_s (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void
lat_add (struct lat *l, uint32_t us)
{
  if (l->n == l->cap)
    {
      l->cap = l->cap ? l->cap * 2 : 4096;
      l->v = realloc (l->v, l->cap * sizeof *l->v);
      if (!l->v)
        {
          perror ("realloc");
          exit (1);
        }
    }
  l->v[l->n++] = us;
}

static int
itable_op (struct nbd_handle *h, struct conn *c, uint8_t *buf, bool real)
{
  const struct ino *in = &c->inos[rnd (&c->seed) % c->n_inos];
  uint8_t *r = buf + (size_t)in->idx * inode_size;
  uint32_t t;

  if (nbd_pread (h, buf, block_size, in->off, 0) == -1)
    return -1;
  t = le32 (r + 0x08) + 1;
  put32 (r + 0x08, t); /* i_atime */
  if (touch_all || real)
    {
      put32 (r + 0x0C, t); /* i_ctime */
      if (touch_all)
        put32 (r + 0x10, t); /* i_mtime */
    }
  if (real)
    put16 (r + 0x02, le16 (r + 0x02) ^ 1); /* i_uid: a chown */
  inode_csum (r, in->ino);
  if (nbd_pwrite (h, buf, block_size, in->off, 0) == -1)
    return -1;
  c->requests += 2;
  return 0;
}

static void *
worker (void *arg)
{
  struct conn *c = arg;
  struct nbd_handle *h = nbd_create ();
  uint8_t *buf = malloc (block_size), *data = malloc (4096);
  unsigned total = mix[K_TIME] + mix[K_REAL] + mix[K_DATA] + mix[K_FLUSH];
  double end;

  if (!h || !buf || !data)
    {
      c->err = "out of memory";
      pthread_barrier_wait (&start_barrier);
      return NULL;
    }
  for (int i = 0; i < 4096; i++)
    data[i] = (uint8_t)rnd (&c->seed);
  if (nbd_connect_unix (h, sock_path) == -1)
    {
      c->err = strdup (nbd_get_error ());
      pthread_barrier_wait (&start_barrier);
      return NULL;
    }
  pthread_barrier_wait (&start_barrier);
  end = t_start.tv_sec + t_start.tv_nsec / 1e9 + run_secs;
  for (;;)
    {
      double t0 = now_s (), t1;
      unsigned pick = rnd (&c->seed) % total;
      enum kind k;
      int r;

      if (t0 >= end)
        break;
      if (pick < mix[K_TIME])
        k = K_TIME;
      else if (pick < mix[K_TIME] + mix[K_REAL])
        k = K_REAL;
      else if (pick < mix[K_TIME] + mix[K_REAL] + mix[K_DATA])
        k = K_DATA;
      else
        k = K_FLUSH;
      switch (k)
        {
        case K_TIME:
        case K_REAL:
          r = itable_op (h, c, buf, k == K_REAL);
          break;
        case K_DATA:
          data[0]++;
          r = nbd_pwrite (h, data, 4096,
                          c->data_off + (rnd (&c->seed) % c->data_n) * 4096, 0);
          c->requests++;
          break;
        default:
          r = nbd_flush (h, 0);
          c->requests++;
          break;
        }
      if (r == -1)
        {
          c->err = strdup (nbd_get_error ());
          break;
        }
      t1 = now_s ();
      lat_add (&c->lat[k], (uint32_t)((t1 - t0) * 1e6 + 0.5));
    }
  nbd_shutdown (h, 0);
  nbd_close (h);
  free (buf);
  free (data);
  return NULL;
}

/* ---- plan and main --------------------------------------------------- */

static int
cmp_u32 (const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

int
main (int argc, char **argv)
{
  struct conn *cs;
  pthread_t *th;
  FILE *f;
  char line[256];
  int nconn;
  struct lat all[K_N] = { 0 };
  uint64_t requests = 0, ops = 0;
  double elapsed;
  bool failed = false;

  if (argc != 11)
    {
      fprintf (stderr,
               "usage: %s SOCKET PLAN NCONN SECONDS TIME%% REAL%% "
               "DATA%% FLUSH%% atime|all SEED\n",
               argv[0]);
      return 2;
    }
  sock_path = argv[1];
  nconn = atoi (argv[3]);
  run_secs = atof (argv[4]);
  for (int k = 0; k < K_N; k++)
    mix[k] = atoi (argv[5 + k]);
  touch_all = strcmp (argv[9], "all") == 0;
  if (nconn < 1 || run_secs <= 0
      || mix[K_TIME] + mix[K_REAL] + mix[K_DATA] + mix[K_FLUSH] == 0)
    {
      fprintf (stderr, "bench-multiconn: bad arguments\n");
      return 2;
    }
  crc_init ();
  cs = calloc (nconn, sizeof *cs);
  th = calloc (nconn, sizeof *th);
  if (!(f = fopen (argv[2], "r")))
    {
      perror (argv[2]);
      return 1;
    }
  while (fgets (line, sizeof line, f))
    {
      unsigned a, csum;
      uint64_t off, n;
      uint32_t idx, ino;

      if (line[0] == 'H'
          && sscanf (line, "H %" SCNu32 " %" SCNu32 " %u %" SCNu32, &block_size,
                     &inode_size, &csum, &csum_seed)
                 == 4)
        metadata_csum = csum;
      else if (line[0] == 'T'
               && sscanf (line, "T %u %" SCNu64 " %" SCNu32 " %" SCNu32, &a,
                          &off, &idx, &ino)
                      == 4
               && (int)a < nconn)
        {
          struct conn *c = &cs[a];
          if (c->n_inos == c->cap_inos)
            {
              c->cap_inos = c->cap_inos ? 2 * c->cap_inos : 256;
              c->inos = realloc (c->inos, c->cap_inos * sizeof *c->inos);
            }
          c->inos[c->n_inos++] = (struct ino){ off, idx, ino };
        }
      else if (line[0] == 'D'
               && sscanf (line, "D %u %" SCNu64 " %" SCNu64, &a, &off, &n) == 3
               && (int)a < nconn)
        {
          cs[a].data_off = off;
          cs[a].data_n = n;
        }
    }
  fclose (f);
  if (!block_size || !inode_size || block_size % inode_size)
    {
      fprintf (stderr, "bench-multiconn: no geometry in the plan\n");
      return 1;
    }
  for (int i = 0; i < nconn; i++)
    if (!cs[i].n_inos || !cs[i].data_n)
      {
        fprintf (stderr,
                 "bench-multiconn: connection %d has no inodes or "
                 "data blocks in the plan\n",
                 i);
        return 1;
      }

  pthread_barrier_init (&start_barrier, NULL, nconn + 1);
  for (int i = 0; i < nconn; i++)
    {
      cs[i].id = i;
      cs[i].seed = strtoull (argv[10], NULL, 0) * 0x9E3779B97F4A7C15ull
                   + (uint64_t)(i + 1) * 0xD1B54A32D192ED03ull;
      if (pthread_create (&th[i], NULL, worker, &cs[i]))
        {
          perror ("pthread_create");
          return 1;
        }
    }
  /* Every connection is up before the clock starts. */
  clock_gettime (CLOCK_MONOTONIC, &t_start);
  t_start.tv_nsec += 1000; /* a hair after the barrier */
  pthread_barrier_wait (&start_barrier);
  for (int i = 0; i < nconn; i++)
    pthread_join (th[i], NULL);
  elapsed = now_s () - (t_start.tv_sec + t_start.tv_nsec / 1e9);
  if (elapsed < run_secs)
    elapsed = run_secs;

  for (int i = 0; i < nconn; i++)
    {
      if (cs[i].err)
        {
          fprintf (stderr, "bench-multiconn: connection %d: %s\n", i,
                   cs[i].err);
          failed = true;
        }
      requests += cs[i].requests;
      for (int k = 0; k < K_N; k++)
        for (size_t j = 0; j < cs[i].lat[k].n; j++)
          lat_add (&all[k], cs[i].lat[k].v[j]);
    }
  if (failed)
    return 1;
  for (int k = 0; k < K_N; k++)
    {
      struct lat *l = &all[k];
      double sum = 0;

      ops += l->n;
      if (l->n)
        qsort (l->v, l->n, sizeof *l->v, cmp_u32);
      for (size_t j = 0; j < l->n; j++)
        sum += l->v[j];
      printf ("%s_n=%zu\n%s_p50_us=%u\n%s_p99_us=%u\n%s_mean_us=%.1f\n",
              kind_name[k], l->n, kind_name[k], l->n ? l->v[(l->n - 1) / 2] : 0,
              kind_name[k], l->n ? l->v[(size_t)((l->n - 1) * 0.99)] : 0,
              kind_name[k], l->n ? sum / l->n : 0.0);
    }
  printf ("elapsed_s=%.3f\nops=%" PRIu64 "\nops_s=%.1f\nrequests=%" PRIu64
          "\nrequests_s=%.1f\n",
          elapsed, ops, ops / elapsed, requests, requests / elapsed);
  return 0;
}
