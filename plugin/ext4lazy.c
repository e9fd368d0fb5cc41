/* SPDX-License-Identifier: BSD-3-Clause */
/* ext4lazy.c --- nbdkit glue for the ext4lazy engine.
 *
 * Only glue lives here: parameters, the nbdkit callbacks in lifecycle
 * order, and turning the engine's -errno returns into nbdkit errors.
 * Everything that decides what happens to a request is in daemon/.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "backend.h"
#include "control.h"
#include "engine.h"
#include "drain.h"
#include "log.h"
#include "nbdremote.h"
#include "rbdlib.h"
#include "record.h"
#include "stats.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

/* -D ext4lazy.trace=1: log every operation issued to the backing store. */
NBDKIT_DLL_PUBLIC int ext4lazy_debug_trace;
/* -D ext4lazy.no_uring=1: act as if io_uring could not be set up. */
NBDKIT_DLL_PUBLIC int ext4lazy_debug_no_uring;
/* -D ext4lazy.stats=1: print the counters when nbdkit shuts down. */
NBDKIT_DLL_PUBLIC int ext4lazy_debug_stats;

static struct engine_config cfg = {
  .store = { .kind = BACKEND_URING },
  .policy = POLICY_ATIME,
  .max_age_ns = ENGINE_DEFAULT_MAX_AGE_NS,
  .max_held = ENGINE_DEFAULT_MAX_HELD,
};
static struct engine *engine;
static struct drain *gate; /* engine_gate (engine): every request passes */
static bool policy_given;  /* policy= was on the command line */
static const char *control_path; /* control=PATH */

/* The exit status of a server stopped after its store was fenced. */
#define EXT4LAZY_EXIT_FENCED 3
static struct control *control;
static const char *record_path; /* record=PATH, for crash testing */
static const char *file_path;   /* file=PATH (cfg.store.path once checked) */
static const char *nbd_uri;     /* nbd=URI (likewise) */
static const char *rbd_spec;    /* rbd=POOL/IMAGE (likewise) */
static bool backend_given;      /* backend= was on the command line */
static bool direct_given;       /* direct= was on the command line */
static bool lock_off;           /* lock=off: the store is not locked */

/* The engine's notices are for the operator, and a normal start must
 * not read as an error: nbdkit 1.32 gives plugins no level between
 * debug (seen only with -v) and error, so notices bypass nbdkit and go
 * where nbdkit sends its own messages.  That is syslog under
 * --log=syslog, and under the default once nbdkit has forked into the
 * background (its stderr is then /dev/null); nowhere under --log=null;
 * stderr otherwise, as "nbdkit: ext4lazy: notice: ...".
 */
enum notice_dest
{
  NOTICE_DEFAULT,
  NOTICE_STDERR,
  NOTICE_SYSLOG,
  NOTICE_NULL,
};
static enum notice_dest notice_dest = NOTICE_DEFAULT;

/* nbdkit's --log=WHERE (or "--log WHERE") from our own command line. */
static void
notice_dest_init (void)
{
  char buf[8192], *p, *prev = NULL;
  const char *to = NULL;
  ssize_t n;
  int fd = open ("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

  if (fd == -1)
    return;
  n = read (fd, buf, sizeof buf - 1);
  close (fd);
  if (n <= 0)
    return;
  buf[n] = '\0';
  for (p = buf; p < buf + n; p += strlen (p) + 1)
    {
      if (strncmp (p, "--log=", 6) == 0)
        to = p + 6;
      else if (prev && strcmp (prev, "--log") == 0)
        to = p;
      prev = p;
    }
  if (to && strcmp (to, "stderr") == 0)
    notice_dest = NOTICE_STDERR;
  else if (to && strcmp (to, "syslog") == 0)
    notice_dest = NOTICE_SYSLOG;
  else if (to && strcmp (to, "null") == 0)
    notice_dest = NOTICE_NULL;
}

/* Is fd 2 /dev/null (nbdkit in the background, not verbose)? */
static bool
stderr_is_null (void)
{
  struct stat a, b;

  return fstat (STDERR_FILENO, &a) == 0 && stat ("/dev/null", &b) == 0
         && S_ISCHR (a.st_mode) && a.st_rdev == b.st_rdev;
}

static void
log_to_nbdkit (enum log_level level, const char *msg)
{
  enum notice_dest to = notice_dest;

  if (level < LOG_LEVEL_NOTICE)
    {
      nbdkit_debug ("%s", msg);
      return;
    }
  if (to == NOTICE_DEFAULT)
    to = stderr_is_null () ? NOTICE_SYSLOG : NOTICE_STDERR;
  if (to == NOTICE_SYSLOG)
    syslog (LOG_DAEMON | LOG_NOTICE, "ext4lazy: notice: %s", msg);
  else if (to == NOTICE_STDERR)
    fprintf (stderr, "nbdkit: ext4lazy: notice: %s\n", msg);
}

static const char *const op_names[] = {
  [BIO_READ] = "read", [BIO_WRITE] = "write", [BIO_FLUSH] = "flush",
  [BIO_ZERO] = "zero", [BIO_TRIM] = "trim",
};

/* Every completed backing-store operation: to the record, and to the
 * debug log with -D ext4lazy.trace=1.
 */
static void
trace_to_nbdkit (const struct bio *bio)
{
  record_store (bio);
  if (!ext4lazy_debug_trace)
    return;
  if (bio->op == BIO_FLUSH)
    nbdkit_debug ("trace: flush");
  else
    nbdkit_debug ("trace: %s %" PRIu64 " %" PRIu64 "%s", op_names[bio->op],
                  bio->offset, bio->len, (bio->flags & BIO_FUA) ? " fua" : "");
}

/* Report an engine error once, here at the edge. */
static int
fail (int r, const char *what)
{
  errno = -r;
  nbdkit_error ("%s: %m", what);
  return -1;
}

static void
ext4lazy_load (void)
{
  notice_dest_init ();
  log_set_sink (log_to_nbdkit);
}

static void
ext4lazy_unload (void)
{
  control_close (control);
  control = NULL;
  engine_close (engine);
  engine = NULL;
  engine_unload ();
  free ((char *)file_path);
  free ((char *)nbd_uri);
  free ((char *)rbd_spec);
  free ((char *)cfg.store.ceph_conf);
  free ((char *)cfg.store.ceph_id);
  cfg.store.path = NULL;
  free ((char *)control_path);
  free ((char *)record_path);
  record_close ();
}

/* A duration: a number with an optional unit s, m, h or d (default s). */
static int
parse_duration (const char *key, const char *value, uint64_t *ns)
{
  static const struct
  {
    char unit;
    uint64_t s;
  } units[] = { { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 } };
  char *end;
  unsigned long long n;
  uint64_t mult = 1;

  errno = 0;
  n = strtoull (value, &end, 10);
  if (errno || end == value || *value == '-')
    goto bad;
  if (*end)
    {
      size_t i;

      for (i = 0; i < sizeof units / sizeof units[0]; i++)
        if (*end == units[i].unit)
          break;
      if (i == sizeof units / sizeof units[0] || end[1] != '\0')
        goto bad;
      mult = units[i].s;
    }
  if (n == 0 || n > UINT64_MAX / 1000000000 / mult)
    goto bad;
  *ns = n * mult * 1000000000;
  return 0;

bad:
  nbdkit_error ("%s=%s: expected a positive duration such as 30s, 10m, 24h "
                "or 2d",
                key, value);
  return -1;
}

/* A size, as nbdkit_parse_size reads it (64M, 1G, ...), of at least
 * 64K.
 */
static int
parse_held (const char *key, const char *value, uint64_t *bytes)
{
  int64_t n = nbdkit_parse_size (value);

  if (n == -1)
    {
      nbdkit_error ("%s=%s: expected a size such as 64M or 1G", key, value);
      return -1;
    }
  if (n < 65536)
    {
      nbdkit_error ("%s=%s: must be at least 64K", key, value);
      return -1;
    }
  *bytes = n;
  return 0;
}

/* Keep a copy of a string parameter's value in *var. */
static int
set_string (const char **var, const char *value)
{
  free ((char *)*var);
  *var = strdup (value);
  if (!*var)
    {
      nbdkit_error ("strdup: %m");
      return -1;
    }
  return 0;
}

/* Keep an absolute form of a path parameter's value in *var (nbdkit
 * changes to / when it forks into the background).
 */
static int
set_path (const char **var, const char *value)
{
  free ((char *)*var);
  *var = nbdkit_absolute_path (value);
  return *var ? 0 : -1;
}

/* The backing store's parameters: 1 if key is not one of them. */
static int
config_store (const char *key, const char *value)
{
  if (strcmp (key, "file") == 0)
    {
      free ((char *)file_path);
      file_path = nbdkit_realpath (value);
      return file_path ? 0 : -1;
    }
  if (strcmp (key, "nbd") == 0)
    return set_string (&nbd_uri, value);
  if (strcmp (key, "rbd") == 0)
    return set_string (&rbd_spec, value);
  if (strcmp (key, "ceph-conf") == 0)
    return set_path (&cfg.store.ceph_conf, value);
  if (strcmp (key, "ceph-id") == 0)
    return set_string (&cfg.store.ceph_id, value);
  if (strcmp (key, "backend") == 0)
    {
      backend_given = true;
      if (strcmp (value, "uring") == 0)
        cfg.store.kind = BACKEND_URING;
      else if (strcmp (value, "psync") == 0)
        cfg.store.kind = BACKEND_PSYNC;
      else
        {
          nbdkit_error ("backend=%s: expected uring or psync", value);
          return -1;
        }
      return 0;
    }
  if (strcmp (key, "direct") == 0)
    {
      int b = nbdkit_parse_bool (value);

      if (b == -1)
        return -1;
      direct_given = true;
      cfg.store.direct = b;
      return 0;
    }
  return 1;
}

/* KEY=on|off: *off says which; an error for anything else. */
static int
parse_on_off (const char *key, const char *value, bool *off)
{
  if (strcmp (value, "on") != 0 && strcmp (value, "off") != 0)
    {
      nbdkit_error ("%s=%s: expected on or off", key, value);
      return -1;
    }
  *off = strcmp (value, "off") == 0;
  return 0;
}

/* nbd-replay=on|off: whether nbd= keeps unflushed writes to replay. */
static bool nbd_replay_given;

static int
parse_replay (const char *value)
{
  nbd_replay_given = true;
  return parse_on_off ("nbd-replay", value, &cfg.store.nbd_replay_off);
}

static int
ext4lazy_config (const char *key, const char *value)
{
  int r = config_store (key, value);

  if (r <= 0)
    return r;
  if (strcmp (key, "policy") == 0)
    {
      policy_given = true;
      if (strcmp (value, "strict") == 0)
        cfg.policy = POLICY_STRICT;
      else if (strcmp (value, "atime") == 0)
        cfg.policy = POLICY_ATIME;
      else if (strcmp (value, "lazy") == 0)
        cfg.policy = POLICY_LAZY;
      else
        {
          nbdkit_error ("policy=%s: expected strict, atime or lazy", value);
          return -1;
        }
    }
  else if (strcmp (key, "max-age") == 0)
    return parse_duration (key, value, &cfg.max_age_ns);
  else if (strcmp (key, "max-held") == 0)
    return parse_held (key, value, &cfg.max_held);
  else if (strcmp (key, "record") == 0)
    return set_path (&record_path, value);
  else if (strcmp (key, "control") == 0)
    return set_path (&control_path, value);
  else if (strcmp (key, "io-timeout") == 0)
    return parse_duration (key, value, &cfg.store.io_timeout_ns);
  else if (strcmp (key, "nbd-replay") == 0)
    return parse_replay (value);
  else if (strcmp (key, "lock") == 0)
    return parse_on_off (key, value, &lock_off);
  else if (strcmp (key, "lock-wait") == 0)
    {
      /* 0: refuse a busy store at once (lock_wait_ns 0 is the default). */
      if (strcmp (value, "0") == 0)
        {
          cfg.store.lock_wait_ns = 1;
          return 0;
        }
      return parse_duration (key, value, &cfg.store.lock_wait_ns);
    }
  else
    {
      nbdkit_error ("unknown parameter '%s'", key);
      return -1;
    }
  return 0;
}

/* backend= and direct= are for file= only. */
static int
file_only (const char *what, const char *value)
{
  if (!backend_given && !direct_given)
    return 0;
  nbdkit_error ("%s=%s: %s applies to file= only", what, value,
                backend_given ? "backend=" : "direct=");
  return -1;
}

/* nbd=URI: the NBD backend, if built in, and a URI of the right shape
 * (libnbd checks the rest when it connects, in .get_ready).
 */
static int
config_nbd (void)
{
  const char *why;

  if (!backend_kind_available (BACKEND_NBD))
    {
      nbdkit_error ("nbd=%s: this build of the plugin has no NBD backend "
                    "(it was built without libnbd)",
                    nbd_uri);
      return -1;
    }
  if (file_only ("nbd", nbd_uri) < 0)
    return -1;
  why = nbdremote_uri_check (nbd_uri);
  if (why)
    {
      nbdkit_error ("nbd=%s: not an NBD URI: %s", nbd_uri, why);
      return -1;
    }
  cfg.store.kind = BACKEND_NBD;
  cfg.store.path = nbd_uri;
  return 0;
}

/* rbd=POOL/IMAGE: the RBD backend, if built in and librbd loads, and a
 * spec of the right shape (the cluster is reached in .get_ready).
 */
static int
config_rbd (void)
{
  struct rbd_spec spec;
  char why[256];
  const char *bad;

  if (!rbdlib_available (why, sizeof why))
    {
      nbdkit_error ("rbd=%s: this plugin cannot serve RBD images: %s", rbd_spec,
                    why);
      return -1;
    }
  if (file_only ("rbd", rbd_spec) < 0)
    return -1;
  bad = rbdlib_parse_spec (rbd_spec, &spec);
  if (bad)
    {
      nbdkit_error ("rbd=%s: %s", rbd_spec, bad);
      return -1;
    }
  cfg.store.kind = BACKEND_RBD;
  cfg.store.path = rbd_spec;
  return 0;
}

static int
ext4lazy_config_complete (void)
{
  if (!!file_path + !!nbd_uri + !!rbd_spec > 1)
    {
      nbdkit_error ("give one of file=, nbd= and rbd=: serve either an "
                    "ext4 image or device, an NBD export or an RBD image");
      return -1;
    }
  if (!rbd_spec && (cfg.store.ceph_conf || cfg.store.ceph_id))
    {
      nbdkit_error ("%s applies to rbd= only",
                    cfg.store.ceph_conf ? "ceph-conf=" : "ceph-id=");
      return -1;
    }
  if (!nbd_uri && nbd_replay_given)
    {
      nbdkit_error ("nbd-replay= applies to nbd= only");
      return -1;
    }
  if (nbd_uri)
    return config_nbd ();
  if (rbd_spec)
    return config_rbd ();
  if (!file_path)
    {
      nbdkit_error ("you must supply the file=<FILENAME> parameter "
                    "(an ext4 image or block device), nbd=<URI> "
                    "(an NBD export) or rbd=<POOL/IMAGE> (a Ceph RBD image)");
      return -1;
    }
  cfg.store.path = file_path;
  return 0;
}

#define ext4lazy_config_help                                                   \
  "[file=]<FILENAME>        The ext4 image or block device to serve.\n"        \
  "nbd=<URI>                Or: the NBD export to serve (nbd+unix:///...).\n"  \
  "rbd=<POOL/IMAGE>         Or: the Ceph RBD image to serve.\n"                \
  "ceph-conf=PATH           With rbd=: the Ceph configuration file.\n"         \
  "ceph-id=NAME             With rbd=: the Ceph client id (admin).\n"          \
  "backend=uring|psync      Backing-store I/O (default uring).\n"              \
  "direct=true|false        Use O_DIRECT on the backing store.\n"              \
  "policy=strict|atime|lazy What may be held across a flush (atime).\n"        \
  "max-age=DURATION         Write back a hold after this long (24h).\n"        \
  "max-held=SIZE            Memory for held blocks (64M).\n"                   \
  "control=PATH             Control socket for ext4lazyctl.\n"                 \
  "record=PATH              Log requests and store writes (testing).\n"        \
  "io-timeout=DURATION      With nbd= or rbd=: wait for the remote (60s).\n"   \
  "nbd-replay=on|off        With nbd=: replay unflushed writes after a\n"      \
  "                         reconnect, else fail the next FLUSH (on).\n"       \
  "lock=on|off              Lock the store against other writers (on).\n"      \
  "lock-wait=DURATION       Wait this long for a locked store (30s)."

static void
ext4lazy_dump_plugin (void)
{
  const bool rbd = rbdlib_available (NULL, 0);

  printf ("ext4lazy_backends=uring,psync%s%s\n",
          backend_kind_available (BACKEND_NBD) ? ",nbd" : "",
          rbd ? ",rbd" : "");
  printf ("ext4lazy_nbd=%s\n",
          backend_kind_available (BACKEND_NBD) ? "yes" : "no");
  printf ("ext4lazy_rbd=%s\n", rbd ? "yes" : "no");
  printf ("ext4lazy_direct=yes\n");
  printf ("ext4lazy_policies=strict,atime,lazy\n");
}

/* The control socket: created before serving, so errors reach the
 * user; served from .after_fork.
 */
static int
open_control (void)
{
  int r;

  if (!control_path)
    return 0;
  r = control_open (control_path, control_engine_cmd, engine, &control);
  if (r == -EADDRINUSE)
    nbdkit_error ("control=%s: another server is listening there",
                  control_path);
  else if (r == -EEXIST)
    nbdkit_error ("control=%s: exists and is not a socket", control_path);
  else if (r < 0)
    fail (r, control_path);
  return r < 0 ? -1 : 0;
}

/* A size in the largest unit that keeps it short: 64M, 1.5G, 512. */
static void
human_size (uint64_t n, char *buf, size_t size)
{
  static const char units[] = "KMGTPE";
  int u = -1;

  while (u < 5 && n >= (1024ull << (10 * (u + 1))))
    u++;
  if (u < 0)
    snprintf (buf, size, "%" PRIu64, n);
  else if (n % (1024ull << (10 * u)) == 0)
    snprintf (buf, size, "%" PRIu64 "%c", n >> (10 * (u + 1)), units[u]);
  else
    snprintf (buf, size, "%.1f%c", n / (double)(1024ull << (10 * u)), units[u]);
}

/* A duration in the largest unit that divides it, days from two on:
 * 2d, 24h, 90m, 45s (as max-age= takes it).
 */
static void
human_duration (uint64_t ns, char *buf, size_t size)
{
  static const struct
  {
    char unit;
    uint64_t s;
  } units[] = { { 'd', 86400 }, { 'h', 3600 }, { 'm', 60 }, { 's', 1 } };
  uint64_t s = ns / 1000000000;
  size_t i = s < 2 * 86400 ? 1 : 0;

  while (units[i].s > 1 && s % units[i].s != 0)
    i++;
  snprintf (buf, size, "%" PRIu64 "%c", s / units[i].s, units[i].unit);
}

/* One notice per filesystem found, once at start: where it is, its
 * geometry and the policy in force (with no filesystem, the engine's
 * own notice says it serves as pass-through).
 */
static void
announce_filesystems (void)
{
  struct stats_snapshot s;
  char size[32], age[32], held[32];

  if (engine_stats (engine, &s) < 0)
    return;
  human_duration (cfg.max_age_ns, age, sizeof age);
  human_size (cfg.max_held, held, sizeof held);
  for (size_t i = 0; i < s.n; i++)
    {
      const struct fs_snapshot *fs = &s.fs[i];

      if (fs->block_size == 0) /* "other": not a filesystem */
        continue;
      human_size (fs->size, size, sizeof size);
      log_notice ("filesystem at offset %" PRIu64 ": %s, %" PRIu32
                  "-byte blocks, %s; policy=%s%s max-age=%s max-held=%s",
                  fs->start, size, fs->block_size,
                  fs->journal ? "journal" : "no journal", s.policy,
                  policy_given ? ""
                               : " (the default: a crash may lose atime "
                                 "updates; policy=strict keeps every "
                                 "FLUSH to the letter)",
                  age, held);
    }
  engine_stats_free (&s);
}

static bool
remote_store (void)
{
  return cfg.store.kind == BACKEND_NBD || cfg.store.kind == BACKEND_RBD;
}

/* Does the nbdkit option arg (without its dashes) take an argument? */
static bool
option_takes_arg (const char *arg, bool is_long)
{
  static const char *const with_arg[]
      = { "debug",          "export",   "export-name",
          "exportname",     "filter",   "group",
          "ip-addr",        "ipaddr",   "log",
          "mask-handshake", "pid-file", "pidfile",
          "port",           "run",      "selinux-label",
          "threads",        "tls",      "tls-certificates",
          "tls-psk",        "unix",     "user" };

  if (!is_long)
    return strchr ("DegipPtuU", arg[0]) != NULL;
  if (strchr (arg, '='))
    return false;
  for (size_t i = 0; i < sizeof with_arg / sizeof *with_arg; i++)
    if (strcmp (arg, with_arg[i]) == 0)
      return true;
  return false;
}

/* Is this one nbdkit option (or cluster of short ones) -r?  *skip is
 * set when the next word is its argument.
 */
static bool
option_is_readonly (const char *w, bool *skip)
{
  *skip = false;
  if (w[1] == '-')
    {
      *skip = option_takes_arg (w + 2, true);
      return strlen (w + 2) >= 3
             && (strncmp (w + 2, "readonly", strlen (w + 2)) == 0
                 || strncmp (w + 2, "read-only", strlen (w + 2)) == 0);
    }
  for (const char *c = w + 1; *c; c++)
    {
      if (*c == 'r')
        return true;
      if (option_takes_arg (c, false))
        {
          *skip = c[1] == '\0';
          return false;
        }
    }
  return false;
}

/* Was nbdkit started read-only (-r)?  nbdkit tells a plugin only per
 * connection, and the store is opened (and locked: a reader's lock
 * for a read-only server) before the first: so its command line is
 * read, from /proc/self/cmdline.
 */
static bool
started_readonly (void)
{
  static char buf[65536];
  FILE *f = fopen ("/proc/self/cmdline", "re");
  size_t n = f ? fread (buf, 1, sizeof buf - 1, f) : 0;
  bool ro = false, skip = false;

  if (f)
    fclose (f);
  buf[n] = '\0';
  for (size_t i = strlen (buf) + 1; i < n && !ro; i += strlen (buf + i) + 1)
    {
      const char *w = buf + i;

      if (skip || w[0] != '-' || w[1] == '\0')
        skip = false;
      else if (strcmp (w, "--") == 0)
        break;
      else
        ro = option_is_readonly (w, &skip);
    }
  return ro;
}

/* The store failed to open: the backend's reason when it has one
 * (libnbd's message, the RBD step that failed, the lock that is held).
 */
static int
fail_store (int r, const char *why)
{
  const char *key = cfg.store.kind == BACKEND_NBD   ? "nbd"
                    : cfg.store.kind == BACKEND_RBD ? "rbd"
                                                    : "file";
  const bool lock = r == -EBUSY || r == -ENOLCK
                    || (r == -EOPNOTSUPP && cfg.store.kind == BACKEND_RBD);
  const char *hint = lock && !lock_off ? " (lock=off serves it anyway)" : "";

  errno = -r;
  if (why[0])
    nbdkit_error ("%s=%s: %s%s", key, cfg.store.path, why, hint);
  else
    nbdkit_error ("%s=%s: %m", key, cfg.store.path);
  return -1;
}

/* lock=off: say once that nothing stops a second writer. */
static void
warn_unlocked (void)
{
  if (lock_off)
    log_notice ("warning: lock=off: %s is not locked; another server or "
                "qemu writing it at the same time corrupts it",
                cfg.store.path);
}

/* nbd=URI?tls-psk-file=PATH: say when others than the key file's owner
 * may read it (whoever reads the key can connect to the remote as this
 * server).  libnbd reads it when it connects.
 */
static void
warn_psk_file (void)
{
  char path[4096];
  struct stat st;

  if (!nbd_uri
      || nbdremote_query_param (nbd_uri, "tls-psk-file", path, sizeof path) < 0
      || stat (path, &st) < 0 || !(st.st_mode & (S_IRGRP | S_IROTH)))
    return;
  log_notice ("warning: tls-psk-file=%s is readable by %s (mode %04o): "
              "whoever reads the key can connect to the remote as this "
              "server; make it private: chmod 600 %s, owned by the user "
              "that runs the server",
              path, st.st_mode & S_IROTH ? "every user" : "its group",
              (unsigned)(st.st_mode & 07777), path);
}

static int
ext4lazy_get_ready (void)
{
  char why[256] = "";
  int r;

  if (ext4lazy_debug_trace || record_path)
    cfg.store.trace = trace_to_nbdkit;
  cfg.store.no_uring = ext4lazy_debug_no_uring;
  cfg.store.errbuf = why;
  cfg.store.errbuf_size = sizeof why;
  cfg.store.no_lock = lock_off;
  cfg.store.readonly = started_readonly ();
  warn_unlocked ();
  warn_psk_file ();
  r = engine_open (&cfg, &engine);
  cfg.store.errbuf = NULL;

  if (r < 0 && (remote_store () || why[0]))
    return fail_store (r, why);
  if (r == -ENOTBLK)
    {
      nbdkit_error ("%s: not a regular file or block device", cfg.store.path);
      return -1;
    }
  if (r < 0)
    return fail (r, cfg.store.path);
  gate = engine_gate (engine);
  if (open_control () < 0)
    return -1;
  if (record_path)
    {
      r = record_open (record_path);
      if (r < 0)
        {
          errno = -r;
          nbdkit_error ("record=%s: %m", record_path);
          return -1;
        }
    }
  nbdkit_debug ("serving %s, %" PRIu64 " bytes, backend=%s%s", cfg.store.path,
                engine_size (engine), engine_backend_name (engine),
                engine_caps (engine)->writable ? "" : ", read-only");
  announce_filesystems ();
  return 0;
}

/* The drain (drain.h), asked for by "ext4lazyctl drain" (the control
 * socket's thread runs it) or by SIGTERM: the handler, installed over
 * nbdkit's own (which would have every request answered ESHUTDOWN),
 * only writes a byte into drain_pipe, and drain_thread drains.  Once
 * drained, the hook writes DRAIN_EXIT there and drain_thread ends the
 * process when the control client has its answer.  nbdkit's .cleanup
 * does not run then: what it would do that matters is done here (the
 * holds written back, the store released, the control socket closed,
 * the record closed).  When nbdkit stops otherwise, .cleanup writes
 * DRAIN_QUIT and joins the thread (drain_stop); the pipe stays open,
 * since the handler may still write into it.
 */
#define DRAIN_SIGTERM 'T'
#define DRAIN_EXIT 'X'
#define DRAIN_QUIT 'Q'
static int drain_pipe[2] = { -1, -1 };
static pthread_t drain_tid;
static bool drain_running; /* drain_tid is to be joined (main thread only) */

static void
drain_poke (char what)
{
  const int saved = errno;

  if (write (drain_pipe[1], &what, 1) != 1)
    {
      /* Full or closed: a drain is asked for already. */
    }
  errno = saved;
}

static void
on_sigterm (int sig)
{
  (void)sig;
  drain_poke (DRAIN_SIGTERM);
}

static void
drain_handover (void *opaque)
{
  (void)opaque;
  control_unlisten (control);
}

static void
drain_drained (void *opaque)
{
  (void)opaque;
  drain_poke (DRAIN_EXIT);
}

static void print_stats (void);
static bool store_fenced (void);

/* A store lost to another writer before the drain ends the server with
 * EXT4LAZY_EXIT_FENCED, as at a stop (ext4lazy_cleanup).
 */
static _Noreturn void
drain_exit (void)
{
  const int status = store_fenced () && !engine_drained (engine)
                         ? EXT4LAZY_EXIT_FENCED
                         : EXIT_SUCCESS;

  /* The control socket was unlinked at the handover; the "drain"
   * command gets its answer before the process ends.
   */
  control_unlisten (control);
  control_wait_served (control);
  if (ext4lazy_debug_stats)
    print_stats ();
  if (status != EXIT_SUCCESS)
    log_notice ("exiting with status %d: the store was fenced", status);
  record_close ();
  _exit (status);
}

static void *
drain_thread (void *arg)
{
  char what, why[256];

  (void)arg;
  for (;;)
    {
      ssize_t n = read (drain_pipe[0], &what, 1);

      if (n == -1 && errno == EINTR)
        continue;
      if (n != 1)
        return NULL;
      /* A drain that ended just before the stop still ends the process
       * as drained (its DRAIN_EXIT may be queued behind DRAIN_QUIT).
       */
      if (what == DRAIN_QUIT && !engine_drained (engine))
        return NULL;
      if (what == DRAIN_EXIT || what == DRAIN_QUIT)
        drain_exit ();
      if (drain_run (engine, 0, why, sizeof why) == -EALREADY)
        log_notice ("SIGTERM: %s", why);
    }
}

static int
drain_start (void)
{
  const struct drain_hooks hooks = { drain_handover, drain_drained, NULL };
  struct sigaction sa = { .sa_handler = on_sigterm, .sa_flags = SA_RESTART };
  int r;

  if (pipe2 (drain_pipe, O_CLOEXEC | O_NONBLOCK) == -1)
    return -errno;
  /* Blocking reads for the thread; the handler never blocks. */
  fcntl (drain_pipe[0], F_SETFL, 0);
  drain_set_hooks (gate, &hooks);
  r = pthread_create (&drain_tid, NULL, drain_thread, NULL);
  if (r != 0)
    return -r;
  drain_running = true;
  sigemptyset (&sa.sa_mask);
  return sigaction (SIGTERM, &sa, NULL) == -1 ? -errno : 0;
}

/* End drain_thread (at .cleanup): DRAIN_QUIT, queued behind any byte
 * already in the pipe (a drain asked for first runs first), then join.
 * The write end is non-blocking: a full pipe is waited out.
 */
static void
drain_stop (void)
{
  const char what = DRAIN_QUIT;
  const struct timespec pause = { 0, 1000000 };

  if (!drain_running)
    return;
  while (write (drain_pipe[1], &what, 1) != 1)
    if (errno != EAGAIN && errno != EINTR)
      return; /* Cannot happen with the pipe open: leave the thread. */
    else
      nanosleep (&pause, NULL);
  pthread_join (drain_tid, NULL);
  drain_running = false;
  nbdkit_debug ("the drain thread has ended");
}

static int
ext4lazy_after_fork (void)
{
  char why[256] = "";
  int r = engine_start (engine, why, sizeof why);

  if (r < 0 && remote_store ())
    return fail_store (r, why);
  if (r < 0)
    return fail (r, "starting the engine");
  r = control ? control_start (control) : 0;
  if (r < 0)
    return fail (r, "starting the control socket");
  r = drain_start ();
  return r < 0 ? fail (r, "setting up the drain on SIGTERM") : 0;
}

static void
print_stats (void)
{
  struct stats_snapshot s;

  if (engine_stats (engine, &s) < 0)
    return;
  fprintf (stderr, "ext4lazy stats:\n");
  stats_print_text (stderr, &s);
  engine_stats_free (&s);
}

/* Is the store fenced (lost to another writer)? */
static bool
store_fenced (void)
{
  struct stats_snapshot s;
  bool f;

  if (engine_stats (engine, &s) < 0)
    return false;
  f = s.fenced != NULL;
  engine_stats_free (&s);
  return f;
}

static void
ext4lazy_cleanup (void)
{
  int r;

  /* The drain thread first: a drain under way uses the control socket. */
  drain_stop ();
  /* No command may arrive once the engine stops. */
  control_close (control);
  control = NULL;
  r = engine_stop (engine);

  if (r < 0)
    fail (r, "writing back held blocks at shutdown");
  if (ext4lazy_debug_stats)
    print_stats ();
  /* nbdkit exits 0 after a stop whatever the plugin says, and a plugin
   * cannot set its status: a fenced server, which lost what it held,
   * ends here with a status of its own, so that its supervisor sees the
   * failure (systemd: the unit failed, status=3).  The filters were
   * cleaned up before this; what the unload would do is done first.
   */
  if (store_fenced ())
    {
      log_notice ("exiting with status %d: the store was fenced",
                  EXT4LAZY_EXIT_FENCED);
      ext4lazy_unload ();
      fflush (NULL);
      _exit (EXT4LAZY_EXIT_FENCED);
    }
}

/* Connections share the engine's state: no handle. */
static void *
ext4lazy_open (int readonly)
{
  (void)readonly;
  drain_enter (gate);
  engine_client_open (engine);
  drain_leave (gate);
  return NBDKIT_HANDLE_NOT_NEEDED;
}

static void
ext4lazy_close (void *handle)
{
  int r;

  (void)handle;
  drain_enter (gate);
  r = engine_client_close (engine);
  drain_leave (gate);
  if (r < 0)
    fail (r, "writing back held blocks as the last client left");
}

static int64_t
ext4lazy_get_size (void *handle)
{
  (void)handle;
  return engine_size (engine);
}

static int
ext4lazy_can_write (void *handle)
{
  (void)handle;
  return engine_caps (engine)->writable;
}

static int
ext4lazy_can_flush (void *handle)
{
  (void)handle;
  return 1;
}

static int
ext4lazy_can_fua (void *handle)
{
  (void)handle;
  return NBDKIT_FUA_NATIVE;
}

static int
ext4lazy_can_multi_conn (void *handle)
{
  /* A flush or FUA on any connection writes back what every connection
   * wrote, so one connection's flush covers them all.
   */
  (void)handle;
  return 1;
}

static int
ext4lazy_can_trim (void *handle)
{
  (void)handle;
  return engine_caps (engine)->writable;
}

static int
ext4lazy_can_zero (void *handle)
{
  (void)handle;
  return 1;
}

static int
ext4lazy_can_fast_zero (void *handle)
{
  (void)handle;
  return 1;
}

static int
ext4lazy_can_extents (void *handle)
{
  (void)handle;
  return engine_caps (engine)->can_extents;
}

static int
ext4lazy_can_cache (void *handle)
{
  (void)handle;
  return NBDKIT_CACHE_NATIVE;
}

static int
ext4lazy_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
                     uint32_t *maximum)
{
  uint32_t align = engine_caps (engine)->align;

  (void)handle;
  *minimum = 1;
  *preferred = align > 4096 ? align : 4096;
  *maximum = 0xffffffff;
  return 0;
}

/* The data callbacks mirror nbdkit's plugin API over the engine's, one
 * for one and alike by design: each records the request (record=),
 * calls the engine and reports an error once, here.
 */
static int
ext4lazy_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
                uint32_t flags)
{
  int r;

  (void)handle;
  (void)flags;
  drain_enter (gate);
  record_client (REC_CLIENT_READ, offset, count, 0);
  r = engine_pread (engine, buf, count, offset);
  drain_leave (gate);
  return r < 0 ? fail (r, "pread") : 0;
}

static uint32_t
req_flags (uint32_t flags)
{
  return ((flags & NBDKIT_FLAG_FUA) ? BIO_FUA : 0)
         | ((flags & NBDKIT_FLAG_MAY_TRIM) ? BIO_MAY_TRIM : 0)
         | ((flags & NBDKIT_FLAG_FAST_ZERO) ? BIO_FAST : 0);
}

static int
ext4lazy_pwrite (void *handle, const void *buf, uint32_t count, uint64_t offset,
                 uint32_t flags)
{
  int r;

  (void)handle;
  drain_enter (gate);
  record_client (REC_CLIENT_WRITE, offset, count, req_flags (flags));
  r = engine_pwrite (engine, buf, count, offset, req_flags (flags));
  drain_leave (gate);
  return r < 0 ? fail (r, "pwrite") : 0;
}

static int
ext4lazy_flush (void *handle, uint32_t flags)
{
  int r;

  (void)handle;
  (void)flags;
  drain_enter (gate);
  record_client (REC_CLIENT_FLUSH, 0, 0, 0);
  r = engine_flush (engine);
  drain_leave (gate);
  return r < 0 ? fail (r, "flush") : 0;
}

static int
ext4lazy_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  int r;

  (void)handle;
  drain_enter (gate);
  record_client (REC_CLIENT_ZERO, offset, count, req_flags (flags));
  r = engine_zero (engine, count, offset, req_flags (flags));
  drain_leave (gate);
  if (r == -ENOTSUP || r == -EOPNOTSUPP)
    {
      /* A fast zero that would not be fast: expected, not an error. */
      errno = -r;
      return -1;
    }
  return r < 0 ? fail (r, "zero") : 0;
}

static int
ext4lazy_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  int r;

  (void)handle;
  drain_enter (gate);
  record_client (REC_CLIENT_TRIM, offset, count, req_flags (flags));
  r = engine_trim (engine, count, offset, req_flags (flags));
  drain_leave (gate);
  return r < 0 ? fail (r, "trim") : 0;
}

struct extents_out
{
  struct nbdkit_extents *extents;
  bool reported; /* nbdkit_add_extent failed and reported why */
};

static int
add_extent (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  struct extents_out *x = opaque;

  if (nbdkit_add_extent (x->extents, off, len,
                         hole ? NBDKIT_EXTENT_HOLE | NBDKIT_EXTENT_ZERO : 0)
      == 0)
    return 0;
  x->reported = true;
  return errno ? -errno : -EIO;
}

static int
ext4lazy_extents (void *handle, uint32_t count, uint64_t offset, uint32_t flags,
                  struct nbdkit_extents *extents)
{
  struct extents_out x = { .extents = extents };
  int r;

  (void)handle;
  (void)flags;
  drain_enter (gate);
  r = engine_extents (engine, count, offset, add_extent, &x);
  drain_leave (gate);
  if (r < 0 && x.reported)
    {
      errno = -r;
      return -1;
    }
  return r < 0 ? fail (r, "extents") : 0;
}

static int
ext4lazy_cache (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  int r;

  (void)handle;
  (void)flags;
  drain_enter (gate);
  r = engine_cache (engine, count, offset);
  drain_leave (gate);
  return r < 0 ? fail (r, "cache") : 0;
}

/* nbdkit's method table (daemon/ext2io.c has libext2fs's: the same
 * shape, another API).
 */
static struct nbdkit_plugin plugin = {
  .name = "ext4lazy",
  .longname = "ext4lazy: block-level lazytime for ext4",
  .version = PACKAGE_VERSION,
  .load = ext4lazy_load,
  .unload = ext4lazy_unload,
  .config = ext4lazy_config,
  .config_complete = ext4lazy_config_complete,
  .config_help = ext4lazy_config_help,
  .magic_config_key = "file",
  .dump_plugin = ext4lazy_dump_plugin,
  .get_ready = ext4lazy_get_ready,
  .after_fork = ext4lazy_after_fork,
  .cleanup = ext4lazy_cleanup,
  .open = ext4lazy_open,
  .close = ext4lazy_close,
  .get_size = ext4lazy_get_size,
  .can_write = ext4lazy_can_write,
  .can_flush = ext4lazy_can_flush,
  .can_fua = ext4lazy_can_fua,
  .can_multi_conn = ext4lazy_can_multi_conn,
  .can_trim = ext4lazy_can_trim,
  .can_zero = ext4lazy_can_zero,
  .can_fast_zero = ext4lazy_can_fast_zero,
  .can_extents = ext4lazy_can_extents,
  .can_cache = ext4lazy_can_cache,
  .block_size = ext4lazy_block_size,
  .pread = ext4lazy_pread,
  .pwrite = ext4lazy_pwrite,
  .flush = ext4lazy_flush,
  .zero = ext4lazy_zero,
  .trim = ext4lazy_trim,
  .extents = ext4lazy_extents,
  .cache = ext4lazy_cache,
  .errno_is_preserved = 1,
};

NBDKIT_REGISTER_PLUGIN (plugin)
