/* SPDX-License-Identifier: BSD-3-Clause */
/* test-random-io.c --- random parallel I/O over several NBD connections,
 * checked against a shadow copy kept in memory.
 *
 * Usage: test-random-io BACKEND DIRECT [ext4]   (e.g. "uring false")
 *
 * Starts nbdkit with the plugin named by $EXT4LAZY_PLUGIN on a private
 * Unix socket, serving a 64 MiB file filled with random bytes.  One
 * thread per connection keeps many asynchronous requests in flight:
 * writes (some with FUA), reads, write-zeroes (with and without
 * may-trim) and flushes, at random offsets and lengths from 1 byte to
 * 1 MiB, aligned and unaligned, many crossing a 4 KiB boundary.
 * Requests in flight at the same time never overlap, so each read can be
 * checked against the shadow and each completed write is copied into it.
 * At the end the whole export is read back over NBD, nbdkit is stopped,
 * and the backing file itself is compared with the shadow.
 *
 * With "ext4" the file is a journaled ext4 with files in it instead,
 * served with policy=atime, a deadline of one second and a memory cap
 * of 16 blocks, and a third of the requests go to its inode tables:
 * time-only changes of the records in use (held), changes of a link
 * count (real), reads, zeroes.  So holds are made, read, written back
 * by every trigger and overtaken by real writes from all connections at
 * once, and the shadow still says what every read and the file at the
 * end must hold.
 *
 * Environment: EXT4LAZY_SEED (reproduce a run), EXT4LAZY_RANDOM_OPS
 * (requests per connection, default 4000), EXT4LAZY_TEST_TMPDIR (where
 * the backing file goes, default /var/tmp).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>

#include <libnbd.h>

#define DISK_SIZE (64 * 1024 * 1024)
#define NR_CONNS 4
#define MAX_IN_FLIGHT 8
#define MAX_LEN (1024 * 1024)
#define SKIP 77

#define MIN(a, b) ((a) < (b) ? (a) : (b))

enum op
{
  OP_READ,
  OP_WRITE,
  OP_ZERO,
  OP_FLUSH,
};

/* ext4 mode: the inode tables' block ranges [lo, hi) in 4 KiB blocks. */
static bool ext4_mode;
static struct
{
  uint64_t lo, hi;
} itables[64];
static size_t n_itables;
static uint64_t itable_blocks;

/* One request slot of a connection. */
struct slot
{
  bool active;
  bool done;
  int err;
  enum op op;
  uint32_t flags;
  uint64_t offset;
  uint32_t count;
  int busy;           /* index in busy[], or -1 for a flush */
  bool itable;        /* ext4 mode: one inode-table block */
  bool touch;         /* ext4 mode: its records' times (and links) */
  unsigned char *buf; /* MAX_LEN bytes */
};

struct conn
{
  int index;
  struct nbd_handle *nbd;
  uint64_t rng;
  struct slot slots[MAX_IN_FLIGHT];
  unsigned long counts[4];
};

/* The expected contents of the export. */
static unsigned char *shadow;

/* Ranges of all requests in flight.  This lock protects busy[]; a
 * request owns its range of shadow[] while its entry is in use.
 */
static pthread_mutex_t busy_lock = PTHREAD_MUTEX_INITIALIZER;
static struct
{
  bool used;
  uint64_t offset, count;
} busy[NR_CONNS * MAX_IN_FLIGHT];

static unsigned long ops_per_conn = 4000;
static char tmpdir[256], sockpath[300], pidpath[300], diskpath[300],
    ctlpath[300];
static pid_t nbdkit_pid = -1;

static void
cleanup (void)
{
  /* Only reached with nbdkit still running if the test failed; its
   * connections may still be open, so do not wait for a clean exit.
   */
  if (nbdkit_pid > 0)
    {
      kill (nbdkit_pid, SIGKILL);
      waitpid (nbdkit_pid, NULL, 0);
      nbdkit_pid = -1;
    }
  if (diskpath[0])
    unlink (diskpath);
  if (pidpath[0])
    unlink (pidpath);
  if (sockpath[0])
    unlink (sockpath);
  if (ctlpath[0])
    unlink (ctlpath);
  if (tmpdir[0])
    rmdir (tmpdir);
}

static void __attribute__ ((noreturn, format (printf, 1, 2)))
fail (const char *fs, ...)
{
  static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
  va_list args;

  /* Only the first failing thread reports and exits. */
  pthread_mutex_lock (&fail_lock);
  fprintf (stderr, "test-random-io: FAIL: ");
  va_start (args, fs);
  vfprintf (stderr, fs, args);
  va_end (args);
  fprintf (stderr, "\n");
  exit (EXIT_FAILURE);
}

/* xorshift64*: small, fast, reproducible from the seed. */
static uint64_t
next_rand (uint64_t *s)
{
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * UINT64_C (2685821657736338717);
}

static uint64_t
rand_below (uint64_t *s, uint64_t n)
{
  return next_rand (s) % n;
}

static void
fill_random (uint64_t *s, unsigned char *buf, size_t n)
{
  size_t i;

  for (i = 0; i < n; i += 8)
    {
      uint64_t r = next_rand (s);
      memcpy (buf + i, &r, n - i < 8 ? n - i : 8);
    }
}

/* Choose offset and length: single bytes, small unaligned requests,
 * requests straddling a 4 KiB boundary, aligned runs of blocks, and
 * large requests up to MAX_LEN, anywhere including the very end.
 */
static void
choose_range (uint64_t *s, uint64_t *offset, uint32_t *count)
{
  uint64_t r = rand_below (s, 100), off, back;
  uint32_t len;

  if (r < 8)
    len = 1;
  else if (r < 30)
    len = 1 + rand_below (s, 4096);
  else if (r < 50)
    {
      /* Straddle a 4 KiB boundary. */
      len = 2 + rand_below (s, 8191);
      off = 4096 * (1 + rand_below (s, DISK_SIZE / 4096 - 1));
      /* Start 1 to len-1 bytes before the boundary. */
      back = 1 + rand_below (s, len - 1);
      off -= MIN (off, back);
      if (off + len > DISK_SIZE)
        off = DISK_SIZE - len;
      *offset = off;
      *count = len;
      return;
    }
  else if (r < 70)
    {
      len = 4096 * (1 + rand_below (s, 16));
      *offset = 4096 * rand_below (s, (DISK_SIZE - len) / 4096 + 1);
      *count = len;
      return;
    }
  else if (r < 92)
    len = 1 + rand_below (s, 128 * 1024);
  else
    len = 1 + rand_below (s, MAX_LEN);

  if (rand_below (s, 50) == 0)
    off = DISK_SIZE - len; /* touch the last byte */
  else
    off = rand_below (s, DISK_SIZE - len + 1);
  *offset = off;
  *count = len;
}

/* A random inode-table block's offset (ext4 mode). */
static uint64_t
itable_block (uint64_t *s)
{
  uint64_t k = rand_below (s, itable_blocks);

  for (size_t i = 0; i < n_itables; i++)
    {
      if (k < itables[i].hi - itables[i].lo)
        return (itables[i].lo + k) * 4096;
      k -= itables[i].hi - itables[i].lo;
    }
  fail ("internal error: no inode-table block %" PRIu64, k);
}

/* The inode-table block at off as shadow has it, with, in each record in
 * use (256-byte records: mode and links count not 0), a new atime
 * (time-only) or, when real, a new links count too.
 */
static void
touch_block (uint64_t *s, uint64_t off, unsigned char *buf, bool real)
{
  memcpy (buf, shadow + off, 4096);
  for (int i = 0; i < 4096; i += 256)
    {
      uint16_t mode, links;
      uint32_t t = (uint32_t)next_rand (s);

      memcpy (&mode, buf + i, 2);
      memcpy (&links, buf + i + 26, 2);
      if (mode == 0 || links == 0 || rand_below (s, 2) == 0)
        continue;
      memcpy (buf + i + 8, &t, 4);
      if (real)
        {
          links = 1 + rand_below (s, 9);
          memcpy (buf + i + 26, &links, 2);
        }
    }
}

/* ext4 mode: a third of the requests go to one inode-table block; the
 * changes of times and links to one that has records in use (the
 * files' inodes come first: 16 to a block), not the first.
 */
#define NFILES 300
static void
choose_itable (uint64_t *s, struct slot *sl)
{
  const uint64_t used = (NFILES + 11) / 16 + 1;

  sl->offset = sl->touch ? (itables[0].lo + 1 + rand_below (s, used - 1)) * 4096
                         : itable_block (s);
  sl->count = 4096;
}

/* ext4 mode: does sl leave the layout as it is?  Writes and zeroes stay
 * out of what places the inode tables and the journal (everything up to
 * the end of the last inode table: superblock, descriptors, bitmaps)
 * but for the inode tables' own requests, and those stay out of the
 * first inode-table block (the journal's inode).
 */
static bool
keeps_layout (const struct slot *sl)
{
  const uint64_t meta_end = itables[n_itables - 1].hi * 4096;
  const uint64_t first = itables[0].lo * 4096;

  if (!ext4_mode || sl->op == OP_READ)
    return true;
  if (sl->itable)
    return sl->offset != first;
  return sl->offset >= meta_end;
}

/* Reserve [offset, offset+count) if nothing in flight overlaps it.
 * Returns the busy[] index, or -1 if the range is taken.
 */
static int
reserve (uint64_t offset, uint64_t count)
{
  size_t i;
  int free_i = -1;

  pthread_mutex_lock (&busy_lock);
  for (i = 0; i < sizeof busy / sizeof busy[0]; i++)
    {
      if (!busy[i].used)
        {
          if (free_i == -1)
            free_i = i;
          continue;
        }
      if (offset < busy[i].offset + busy[i].count
          && busy[i].offset < offset + count)
        {
          pthread_mutex_unlock (&busy_lock);
          return -1;
        }
    }
  if (free_i == -1)
    fail ("internal error: no free busy entry");
  busy[free_i].used = true;
  busy[free_i].offset = offset;
  busy[free_i].count = count;
  pthread_mutex_unlock (&busy_lock);
  return free_i;
}

static void
release (int i)
{
  pthread_mutex_lock (&busy_lock);
  busy[i].used = false;
  pthread_mutex_unlock (&busy_lock);
}

static int
on_complete (void *user_data, int *error)
{
  struct slot *sl = user_data;

  sl->err = *error;
  sl->done = true;
  return 1; /* retire the command */
}

static const char *
op_name (enum op op)
{
  switch (op)
    {
    case OP_READ:
      return "read";
    case OP_WRITE:
      return "write";
    case OP_ZERO:
      return "zero";
    case OP_FLUSH:
      return "flush";
    }
  return "?";
}

/* Try to start one request in slot sl.  Returns false if no free range
 * could be found this time round.
 */
static bool
issue (struct conn *c, struct slot *sl)
{
  nbd_completion_callback cb = { .callback = on_complete, .user_data = sl };
  uint64_t r = rand_below (&c->rng, 100);
  int64_t cookie;
  int tries;

  sl->flags = 0;
  sl->itable = sl->touch = false;
  sl->done = false;
  sl->err = 0;
  sl->busy = -1;
  if (r < 2)
    {
      sl->op = OP_FLUSH;
      sl->offset = sl->count = 0;
    }
  else
    {
      sl->op = r < 50 ? OP_READ : r < 92 ? OP_WRITE : OP_ZERO;
      sl->itable = ext4_mode && rand_below (&c->rng, 3) == 0;
      sl->touch
          = sl->itable && sl->op == OP_WRITE && rand_below (&c->rng, 10) != 0;
      for (tries = 0; tries < 20 && sl->busy == -1; tries++)
        {
          if (sl->itable)
            choose_itable (&c->rng, sl);
          else
            choose_range (&c->rng, &sl->offset, &sl->count);
          if (sl->count == 0 || sl->count > MAX_LEN
              || sl->offset > DISK_SIZE - sl->count)
            fail ("internal error: bad range %" PRIu64 "+%" PRIu32, sl->offset,
                  sl->count);
          if (!keeps_layout (sl))
            continue;
          sl->busy = reserve (sl->offset, sl->count);
        }
      if (sl->busy == -1)
        return false;
    }

  switch (sl->op)
    {
    case OP_READ:
      memset (sl->buf, 0xdb, sl->count);
      cookie = nbd_aio_pread (c->nbd, sl->buf, sl->count, sl->offset, cb, 0);
      break;
    case OP_WRITE:
      /* The range is reserved: shadow has what the export has there. */
      if (sl->touch)
        touch_block (&c->rng, sl->offset, sl->buf,
                     rand_below (&c->rng, 6) == 0);
      else
        fill_random (&c->rng, sl->buf, sl->count);
      if (rand_below (&c->rng, 10) == 0)
        sl->flags = LIBNBD_CMD_FLAG_FUA;
      cookie = nbd_aio_pwrite (c->nbd, sl->buf, sl->count, sl->offset, cb,
                               sl->flags);
      break;
    case OP_ZERO:
      switch (rand_below (&c->rng, 3))
        {
        case 0:
          sl->flags = LIBNBD_CMD_FLAG_NO_HOLE;
          break;
        case 1:
          sl->flags = LIBNBD_CMD_FLAG_FUA;
          break;
        default:
          break; /* may trim */
        }
      cookie = nbd_aio_zero (c->nbd, sl->count, sl->offset, cb, sl->flags);
      break;
    case OP_FLUSH:
    default:
      cookie = nbd_aio_flush (c->nbd, cb, 0);
      break;
    }
  if (cookie == -1)
    fail ("conn %d: nbd_aio_%s offset %" PRIu64 " count %" PRIu32 ": %s",
          c->index, op_name (sl->op), sl->offset, sl->count, nbd_get_error ());

  sl->active = true;
  c->counts[sl->op]++;
  return true;
}

/* A request finished: check it and bring the shadow up to date. */
static void
complete (struct conn *c, struct slot *sl)
{
  uint32_t i;

  if (sl->err != 0)
    fail ("conn %d: %s offset %" PRIu64 " count %" PRIu32 " flags 0x%" PRIx32
          " failed: %s",
          c->index, op_name (sl->op), sl->offset, sl->count, sl->flags,
          strerror (sl->err));

  switch (sl->op)
    {
    case OP_READ:
      if (memcmp (sl->buf, shadow + sl->offset, sl->count) != 0)
        {
          for (i = 0; i < sl->count; i++)
            if (sl->buf[i] != shadow[sl->offset + i])
              break;
          fail ("conn %d: read offset %" PRIu64 " count %" PRIu32
                ": byte %" PRIu64 " is 0x%02x, expected 0x%02x",
                c->index, sl->offset, sl->count, sl->offset + i, sl->buf[i],
                shadow[sl->offset + i]);
        }
      break;
    case OP_WRITE:
      memcpy (shadow + sl->offset, sl->buf, sl->count);
      break;
    case OP_ZERO:
      memset (shadow + sl->offset, 0, sl->count);
      break;
    case OP_FLUSH:
      break;
    }
  if (sl->busy >= 0)
    release (sl->busy);
  sl->active = false;
}

static void *
worker (void *arg)
{
  struct conn *c = arg;
  unsigned long issued = 0;
  unsigned in_flight = 0;
  size_t i;

  while (issued < ops_per_conn || in_flight > 0)
    {
      for (i = 0; i < MAX_IN_FLIGHT && issued < ops_per_conn; i++)
        {
          if (c->slots[i].active)
            continue;
          if (!issue (c, &c->slots[i]))
            break;
          issued++;
          in_flight++;
        }
      if (in_flight == 0)
        continue; /* every range was busy: try again */
      if (nbd_poll (c->nbd, -1) == -1)
        fail ("conn %d: nbd_poll: %s", c->index, nbd_get_error ());
      for (i = 0; i < MAX_IN_FLIGHT; i++)
        if (c->slots[i].active && c->slots[i].done)
          {
            complete (c, &c->slots[i]);
            in_flight--;
          }
    }
  return NULL;
}

/* Start nbdkit in the foreground on sockpath; wait for its pidfile. */
static void
start_nbdkit (const char *plugin, const char *backend, const char *direct)
{
  char file_arg[320], backend_arg[64], direct_arg[64], ctl_arg[320];
  int i, status;

  snprintf (file_arg, sizeof file_arg, "file=%s", diskpath);
  snprintf (backend_arg, sizeof backend_arg, "backend=%s", backend);
  snprintf (direct_arg, sizeof direct_arg, "direct=%s", direct);
  snprintf (ctl_arg, sizeof ctl_arg, "control=%s", ctlpath);

  nbdkit_pid = fork ();
  if (nbdkit_pid == -1)
    fail ("fork: %s", strerror (errno));
  if (nbdkit_pid == 0)
    {
      if (ext4_mode)
        execlp ("nbdkit", "nbdkit", "-f", "--exit-with-parent", "-U", sockpath,
                "-P", pidpath, plugin, file_arg, backend_arg, direct_arg,
                "policy=atime", "max-age=1s", "max-held=64K", ctl_arg,
                (char *)NULL);
      else
        execlp ("nbdkit", "nbdkit", "-f", "--exit-with-parent", "-U", sockpath,
                "-P", pidpath, plugin, file_arg, backend_arg, direct_arg,
                (char *)NULL);
      perror ("exec nbdkit");
      _exit (126);
    }
  for (i = 0; i < 300; i++)
    {
      struct stat st;

      if (stat (pidpath, &st) == 0 && st.st_size > 0)
        return;
      if (waitpid (nbdkit_pid, &status, WNOHANG) == nbdkit_pid)
        {
          nbdkit_pid = -1;
          fail ("nbdkit exited during start-up (status 0x%x)", status);
        }
      usleep (100000);
    }
  fail ("nbdkit did not start within 30 s");
}

static void
stop_nbdkit (void)
{
  int status;

  if (kill (nbdkit_pid, SIGTERM) == -1)
    fail ("kill nbdkit: %s", strerror (errno));
  if (waitpid (nbdkit_pid, &status, 0) == -1)
    fail ("waitpid: %s", strerror (errno));
  nbdkit_pid = -1;
  if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
    fail ("nbdkit did not exit cleanly (status 0x%x)", status);
}

/* ext4 mode: the server's "stats json" (free it), from the control
 * socket.
 */
static char *
server_stats (void)
{
  char cmd[600];
  size_t n, cap = 1 << 16;
  char *out = malloc (cap);
  FILE *p;

  snprintf (
      cmd, sizeof cmd,
      "/usr/bin/python3 -c 'import socket,sys; s=socket.socket("
      "socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b\"stats "
      "json\\n\"); sys.stdout.buffer.write(s.makefile(\"rb\").read())' %s",
      ctlpath);
  p = popen (cmd, "r");
  if (!p || !out)
    fail ("stats: %s", strerror (errno));
  n = fread (out, 1, cap - 1, p);
  pclose (p);
  out[n] = '\0';
  if (strncmp (out, "ok\n", 3) != 0)
    fail ("stats json: %.200s", out);
  return out;
}

/* The first number after "key": in json (the first instance's). */
static uint64_t
json_u64 (const char *json, const char *key)
{
  char pat[64];
  const char *at;

  snprintf (pat, sizeof pat, "\"%s\":", key);
  at = strstr (json, pat);
  if (!at)
    fail ("stats json: no %s", key);
  return strtoull (at + strlen (pat), NULL, 10);
}

static void
compare_with_shadow (const unsigned char *buf, uint64_t offset, size_t n,
                     const char *what)
{
  size_t i;

  if (memcmp (buf, shadow + offset, n) == 0)
    return;
  for (i = 0; i < n; i++)
    if (buf[i] != shadow[offset + i])
      break;
  fail ("%s: byte %" PRIu64 " is 0x%02x, expected 0x%02x", what, offset + i,
        buf[i], shadow[offset + i]);
}

/* The shell commands of ext4 mode run without the sanitizer runtime
 * the test may run with (LD_PRELOAD, for nbdkit): a shell does not run
 * under it.
 */
static char *preload;

static void
preload_off (void)
{
  const char *p = getenv ("LD_PRELOAD");

  if (p && !preload)
    preload = strdup (p);
  unsetenv ("LD_PRELOAD");
}

static void
preload_on (void)
{
  if (preload)
    setenv ("LD_PRELOAD", preload, 1);
}

/* ext4 mode: diskpath becomes a journaled ext4 of DISK_SIZE with NFILES
 * files (their inodes in the first inode-table blocks), shadow its
 * content, itables its inode tables (from dumpe2fs).
 */
static void
make_ext4 (void)
{
  char cmd[2048], line[256];
  unsigned long long lo, hi;
  FILE *p;
  int fd;

  snprintf (cmd, sizeof cmd,
            "set -e; mkdir %s/root; for i in $(seq %d); do echo $i > "
            "%s/root/f$i; done; mkfs.ext4 -q -F -b 4096 -I 256 -N 2048 "
            "-O has_journal,^metadata_csum -d %s/root %s %dK; rm -r %s/root",
            tmpdir, NFILES, tmpdir, tmpdir, diskpath, DISK_SIZE / 1024, tmpdir);
  if (system (cmd) != 0)
    fail ("mkfs.ext4 failed: %s", cmd);
  snprintf (cmd, sizeof cmd, "dumpe2fs %s 2>/dev/null", diskpath);
  p = popen (cmd, "r");
  if (!p)
    fail ("popen dumpe2fs: %s", strerror (errno));
  while (fgets (line, sizeof line, p))
    {
      const char *at = strstr (line, "Inode table at ");

      if (at && sscanf (at, "Inode table at %llu-%llu", &lo, &hi) == 2
          && n_itables < sizeof itables / sizeof itables[0])
        {
          itables[n_itables].lo = lo;
          itables[n_itables++].hi = hi + 1;
          itable_blocks += hi + 1 - lo;
        }
    }
  pclose (p);
  if (itable_blocks == 0)
    fail ("dumpe2fs listed no inode table");
  fd = open (diskpath, O_RDONLY | O_CLOEXEC);
  if (fd == -1 || pread (fd, shadow, DISK_SIZE, 0) != DISK_SIZE)
    fail ("read %s: %s", diskpath, strerror (errno));
  close (fd);
}

int
main (int argc, char *argv[])
{
  const char *plugin = getenv ("EXT4LAZY_PLUGIN");
  const char *env;
  const char *backend, *direct;
  const char *base = getenv ("EXT4LAZY_TEST_TMPDIR");
  struct conn conns[NR_CONNS];
  pthread_t threads[NR_CONNS];
  uint64_t seed, s, off;
  unsigned char *buf;
  int fd, i, err;
  size_t j;

  if (argc != 3 && !(argc == 4 && strcmp (argv[3], "ext4") == 0))
    {
      fprintf (stderr, "usage: %s uring|psync true|false [ext4]\n", argv[0]);
      exit (EXIT_FAILURE);
    }
  backend = argv[1];
  direct = argv[2];
  ext4_mode = argc == 4;
  if (ext4_mode)
    preload_off ();
  if (ext4_mode && system ("command -v mkfs.ext4 dumpe2fs >/dev/null") != 0)
    {
      printf ("SKIP: ext4 mode needs mkfs.ext4 and dumpe2fs (e2fsprogs)\n");
      exit (SKIP);
    }

  if (plugin == NULL || access (plugin, R_OK) == -1)
    {
      printf ("SKIP: plugin not built: %s\n", plugin ? plugin : "(unset)");
      exit (SKIP);
    }

  env = getenv ("EXT4LAZY_SEED");
  seed = env ? strtoull (env, NULL, 0)
             : (uint64_t)time (NULL) * 1000003 ^ (uint64_t)getpid ();
  if (seed == 0)
    seed = 1;
  env = getenv ("EXT4LAZY_RANDOM_OPS");
  if (env)
    ops_per_conn = strtoul (env, NULL, 0);
  printf ("backend=%s direct=%s%s seed=%" PRIu64 " ops/conn=%lu\n", backend,
          direct, ext4_mode ? " ext4" : "", seed, ops_per_conn);
  fflush (stdout);

  atexit (cleanup);
  snprintf (tmpdir, sizeof tmpdir, "%s/ext4lazy-random-io.XXXXXX",
            base ? base : "/var/tmp");
  if (mkdtemp (tmpdir) == NULL)
    {
      tmpdir[0] = '\0';
      fail ("mkdtemp: %s", strerror (errno));
    }
  snprintf (sockpath, sizeof sockpath, "%s/sock", tmpdir);
  snprintf (pidpath, sizeof pidpath, "%s/pid", tmpdir);
  snprintf (diskpath, sizeof diskpath, "%s/disk.img", tmpdir);
  snprintf (ctlpath, sizeof ctlpath, "%s/ctl", tmpdir);

  if (strcmp (direct, "true") == 0)
    {
      fd = open (tmpdir, O_RDWR | O_DIRECT | O_TMPFILE, 0600);
      if (fd == -1 && errno == EINVAL)
        {
          printf ("SKIP: %s does not support O_DIRECT\n", tmpdir);
          exit (SKIP);
        }
      if (fd >= 0)
        close (fd);
    }

  /* Random initial contents, so reads of untouched areas are checked. */
  shadow = malloc (DISK_SIZE);
  buf = malloc (MAX_LEN);
  if (shadow == NULL || buf == NULL)
    fail ("malloc: %s", strerror (errno));
  s = seed;
  if (ext4_mode)
    make_ext4 ();
  else
    {
      fill_random (&s, shadow, DISK_SIZE);
      fd = open (diskpath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd == -1)
        fail ("open %s: %s", diskpath, strerror (errno));
      for (off = 0; off < DISK_SIZE; off += MAX_LEN)
        if (pwrite (fd, shadow + off, MAX_LEN, off) != MAX_LEN)
          fail ("pwrite %s: %s", diskpath, strerror (errno));
      if (close (fd) == -1)
        fail ("close %s: %s", diskpath, strerror (errno));
    }

  preload_on ();
  start_nbdkit (plugin, backend, direct);

  for (i = 0; i < NR_CONNS; i++)
    {
      conns[i] = (struct conn){ .index = i };
      conns[i].rng = seed + 0x9e3779b97f4a7c15 * (i + 1);
      conns[i].nbd = nbd_create ();
      if (conns[i].nbd == NULL)
        fail ("nbd_create: %s", nbd_get_error ());
      if (nbd_connect_unix (conns[i].nbd, sockpath) == -1)
        fail ("nbd_connect_unix: %s", nbd_get_error ());
      for (j = 0; j < MAX_IN_FLIGHT; j++)
        {
          conns[i].slots[j].buf = malloc (MAX_LEN);
          if (conns[i].slots[j].buf == NULL)
            fail ("malloc: %s", strerror (errno));
        }
    }
  if (nbd_get_size (conns[0].nbd) != DISK_SIZE)
    fail ("export size is %" PRIi64 ", expected %d",
          nbd_get_size (conns[0].nbd), DISK_SIZE);
  if (nbd_can_multi_conn (conns[0].nbd) != 1)
    fail ("server does not advertise multi-conn");

  for (i = 0; i < NR_CONNS; i++)
    {
      err = pthread_create (&threads[i], NULL, worker, &conns[i]);
      if (err != 0)
        fail ("pthread_create: %s", strerror (err));
    }
  for (i = 0; i < NR_CONNS; i++)
    {
      err = pthread_join (threads[i], NULL);
      if (err != 0)
        fail ("pthread_join: %s", strerror (err));
      printf ("conn %d: %lu reads, %lu writes, %lu zeroes, %lu flushes\n", i,
              conns[i].counts[OP_READ], conns[i].counts[OP_WRITE],
              conns[i].counts[OP_ZERO], conns[i].counts[OP_FLUSH]);
    }

  /* Everything must be readable, through any connection. */
  for (i = 0; i < NR_CONNS; i++)
    if (nbd_flush (conns[i].nbd, 0) == -1)
      fail ("nbd_flush: %s", nbd_get_error ());
  for (off = 0; off < DISK_SIZE; off += MAX_LEN)
    {
      struct nbd_handle *nbd = conns[(off / MAX_LEN) % NR_CONNS].nbd;

      if (nbd_pread (nbd, buf, MAX_LEN, off, 0) == -1)
        fail ("nbd_pread: %s", nbd_get_error ());
      compare_with_shadow (buf, off, MAX_LEN, "final read over NBD");
    }
  /* The requests made holds, and write-backs wrote them. */
  if (ext4_mode)
    {
      char *st;

      preload_off ();
      st = server_stats ();
      const char *wb = strstr (st, "\"writeback\":{");
      uint64_t held = json_u64 (st, "held"), written = 0;

      /* The first instance's write-backs, by trigger. */
      for (const char *q = wb ? strchr (wb, '{') : NULL; q && *q != '}'; q++)
        if (*q == ':')
          written += strtoull (q + 1, NULL, 10);
      printf ("server: %" PRIu64 " inode-table writes held, %" PRIu64
              " holds written back\n",
              held, written);
      if (held == 0 || written == 0)
        fail ("ext4 mode made no hold or wrote none back");
      free (st);
    }
  for (i = 0; i < NR_CONNS; i++)
    {
      if (nbd_shutdown (conns[i].nbd, 0) == -1)
        fail ("nbd_shutdown: %s", nbd_get_error ());
      nbd_close (conns[i].nbd);
      for (j = 0; j < MAX_IN_FLIGHT; j++)
        free (conns[i].slots[j].buf);
    }

  stop_nbdkit ();

  /* And the backing file must hold exactly the shadow. */
  fd = open (diskpath, O_RDONLY | O_CLOEXEC);
  if (fd == -1)
    fail ("open %s: %s", diskpath, strerror (errno));
  for (off = 0; off < DISK_SIZE; off += MAX_LEN)
    {
      if (pread (fd, buf, MAX_LEN, off) != MAX_LEN)
        fail ("pread %s: %s", diskpath, strerror (errno));
      compare_with_shadow (buf, off, MAX_LEN, "backing file");
    }
  close (fd);

  free (buf);
  free (shadow);
  printf ("PASS\n");
  exit (EXIT_SUCCESS);
}
