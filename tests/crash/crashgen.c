/* SPDX-License-Identifier: BSD-3-Clause */
/* crashgen.c --- build crash states of a disk image from a record=PATH log
   (include/record.h) and hand each to a checker, one at a time.

   The log holds the backing-store operations in completion order.  A
   crash state is the initial image plus:
     flush   every write before a store FLUSH (or up to a FUA write);
     marker  every write before a durability marker read (client READ at
             MSTART + 4096 * N);
     subset  every write before flush k, plus a seeded random subset of the
             writes between flush k and flush k+1 (FUA writes always kept);
     end     every write in the log (what a SIGKILL of the server leaves);
     kill    the writes of records 0..N (--kill-at N; --kill-random K
             picks K seeded random N);
     unsafe  (--unsafe) the writes before flush k-1, then those after flush
             k, without the ones flush k acknowledged: what a server that
             acknowledged a flush without writing back would leave.  For
             testing the checker only.
   ZERO and TRIM apply zeros; with trims in the log, each state also has a
   twin in which no trim happened.

   For each state the image is written to a scratch file and
   "sh -c CMD" runs with CRASH_IMG, CRASH_ID, CRASH_KIND, CRASH_POS (the
   crash point, a record number: everything before it may have happened)
   and CRASH_MARKER (the last marker read before the crash point, -1 if
   none).  CMD exits 0 (clean, oracle pass), with bit 0 set when the
   filesystem check failed, bit 1 when the durability oracle failed, any
   other status on an error.  Deterministic for a given --seed.  */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "record.h"

#define MARKER_SIZE 4096
#define BIO_FUA_FLAG 0x1

struct op
{
  uint16_t kind;
  uint16_t flags;
  uint64_t pos; /* record number */
  uint64_t offset, len;
  const unsigned char *data;
};

enum state_kind
{
  ST_FLUSH,
  ST_MARKER,
  ST_SUBSET,
  ST_END,
  ST_KILL,
  ST_UNSAFE,
};

static const char *const kind_names[]
    = { "flush", "marker", "subset", "end", "kill", "unsafe" };

struct state
{
  enum state_kind kind;
  size_t base;   /* ops [0, base) applied */
  size_t *extra; /* then these ops, ascending */
  size_t nextra;
  uint64_t crash; /* crash point: records before it may have happened */
  bool no_trim;   /* TRIMs did not happen */
};

static struct op *ops;
static size_t nops;
static uint64_t *marker_pos; /* by marker number; UINT64_MAX if unseen */
static size_t nmarkers;
static uint64_t last_pos;

static struct state *states;
static size_t nstates, states_cap;

static void
die (const char *msg)
{
  fprintf (stderr, "crashgen: %s\n", msg);
  exit (2);
}

static void *
xrealloc (void *p, size_t n)
{
  p = realloc (p, n ? n : 1);
  if (!p)
    die ("out of memory");
  return p;
}

static uint64_t rng_state;

static uint64_t
rng_next (void)
{
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t
le64 (const unsigned char *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static uint32_t
le32 (const unsigned char *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
         | (uint32_t)p[3] << 24;
}

/* Read the log: store operations into ops[], marker reads into
   marker_pos[].  */
static void
parse_record (const unsigned char *p, size_t size, uint64_t mstart)
{
  size_t at = 0, cap = 0;

  while (at < size)
    {
      uint16_t kind, flags;
      uint64_t seq, offset, len;

      if (size - at < 32)
        die ("record: truncated header");
      if (le32 (p + at) != RECORD_MAGIC)
        die ("record: bad magic");
      kind = (uint16_t)(p[at + 4] | p[at + 5] << 8);
      flags = (uint16_t)(p[at + 6] | p[at + 7] << 8);
      seq = le64 (p + at + 8);
      offset = le64 (p + at + 16);
      len = le64 (p + at + 24);
      at += 32;
      last_pos = seq;
      if (kind == REC_STORE_WRITE && len > size - at)
        die ("record: truncated write data");
      switch (kind)
        {
        case REC_STORE_WRITE:
        case REC_STORE_FLUSH:
        case REC_STORE_ZERO:
        case REC_STORE_TRIM:
          if (nops == cap)
            ops = xrealloc (ops, (cap = cap ? 2 * cap : 1024) * sizeof *ops);
          ops[nops++]
              = (struct op){ .kind = kind,
                             .flags = flags,
                             .pos = seq,
                             .offset = offset,
                             .len = len,
                             .data = kind == REC_STORE_WRITE ? p + at : NULL };
          break;
        case REC_CLIENT_READ:
          if (mstart && offset >= mstart && len == MARKER_SIZE
              && (offset - mstart) % MARKER_SIZE == 0)
            {
              size_t n = (offset - mstart) / MARKER_SIZE;
              if (n >= 1u << 20)
                break;
              if (n >= nmarkers)
                {
                  marker_pos
                      = xrealloc (marker_pos, (n + 1) * sizeof *marker_pos);
                  while (nmarkers <= n)
                    marker_pos[nmarkers++] = UINT64_MAX;
                }
              if (marker_pos[n] == UINT64_MAX)
                marker_pos[n] = seq;
            }
          break;
        default:
          break;
        }
      if (kind == REC_STORE_WRITE)
        at += len;
    }
}

/* The last marker whose read came before CRASH, with every earlier one
   seen too; -1 if none.  */
static long
marker_before (uint64_t crash)
{
  long m = -1;
  for (size_t i = 0; i < nmarkers; i++)
    {
      if (marker_pos[i] == UINT64_MAX || marker_pos[i] >= crash)
        break;
      m = (long)i;
    }
  return m;
}

static bool
is_write (const struct op *o)
{
  return o->kind == REC_STORE_WRITE || o->kind == REC_STORE_ZERO
         || o->kind == REC_STORE_TRIM;
}

static void
add_state (struct state s)
{
  if (nstates == states_cap)
    states = xrealloc (states, (states_cap = states_cap ? 2 * states_cap : 256)
                                   * sizeof *states);
  states[nstates++] = s;
}

static bool any_trim;

/* Add S, and its no-trim twin when the log has trims.  */
static void
add_state_twin (struct state s)
{
  add_state (s);
  if (any_trim)
    {
      s.no_trim = true;
      if (s.nextra)
        {
          size_t *e = xrealloc (NULL, s.nextra * sizeof *e);
          memcpy (e, s.extra, s.nextra * sizeof *e);
          s.extra = e;
        }
      add_state (s);
    }
}

static void
gen_flush (void)
{
  size_t last = (size_t)-1;
  for (size_t i = 0; i < nops; i++)
    {
      size_t base;
      if (ops[i].kind == REC_STORE_FLUSH)
        base = i;
      else if (ops[i].kind == REC_STORE_WRITE && (ops[i].flags & BIO_FUA_FLAG))
        base = i + 1;
      else
        continue;
      /* The same writes as the state before: nothing new to check.  */
      if (last != (size_t)-1)
        {
          bool news = false;
          for (size_t j = last; j < base && !news; j++)
            news = is_write (&ops[j]);
          if (!news)
            continue;
        }
      add_state_twin ((struct state){
          .kind = ST_FLUSH, .base = base, .crash = ops[i].pos + 1 });
      last = base;
    }
}

static void
gen_markers (void)
{
  size_t i = 0;
  for (size_t m = 0; m < nmarkers; m++)
    {
      if (marker_pos[m] == UINT64_MAX)
        continue;
      while (i < nops && ops[i].pos < marker_pos[m])
        i++;
      add_state_twin ((struct state){
          .kind = ST_MARKER, .base = i, .crash = marker_pos[m] + 1 });
    }
}

/* Epoch k: the ops between flush k-1 (or the start) and flush k (or the
   end).  ep_start[k] is its first op, ep_end[k] its flush (or nops).  */
static size_t *ep_start, *ep_end, nep;

static void
find_epochs (void)
{
  size_t s = 0;
  ep_start = xrealloc (NULL, (nops + 1) * sizeof *ep_start);
  ep_end = xrealloc (NULL, (nops + 1) * sizeof *ep_end);
  for (size_t i = 0; i <= nops; i++)
    if (i == nops || ops[i].kind == REC_STORE_FLUSH)
      {
        ep_start[nep] = s;
        ep_end[nep++] = i;
        s = i + 1;
      }
}

static bool
droppable (const struct op *o)
{
  return is_write (o)
         && !(o->kind == REC_STORE_WRITE && (o->flags & BIO_FUA_FLAG));
}

static uint64_t
epoch_crash (size_t k)
{
  return ep_end[k] < nops ? ops[ep_end[k]].pos : last_pos + 1;
}

/* CrashMonkey style: random epochs, random subsets of their writes, no
   state twice.  */
static void
gen_subset (size_t want)
{
  size_t *cand = xrealloc (NULL, nep * sizeof *cand), ncand = 0;
  uint64_t *seen = NULL;
  size_t nseen = 0, made = 0, misses = 0;

  for (size_t k = 0; k < nep; k++)
    {
      size_t n = 0;
      for (size_t i = ep_start[k]; i < ep_end[k]; i++)
        n += droppable (&ops[i]);
      if (n > 0)
        cand[ncand++] = k;
    }
  while (ncand && made < want && misses < (made * 2 > 1000 ? made * 2 : 1000))
    {
      size_t k = cand[rng_next () % ncand];
      size_t *extra
          = xrealloc (NULL, (ep_end[k] - ep_start[k]) * sizeof *extra);
      size_t nextra = 0, dropped = 0;
      uint64_t h = 0xcbf29ce484222325ULL ^ k;
      bool dup = false;

      for (size_t i = ep_start[k]; i < ep_end[k]; i++)
        {
          if (!is_write (&ops[i]))
            continue;
          if (droppable (&ops[i]) && (rng_next () & 1))
            {
              dropped++;
              continue;
            }
          extra[nextra++] = i;
          h = (h ^ i) * 0x100000001b3ULL;
        }
      h = (h ^ dropped) * 0x100000001b3ULL;
      for (size_t j = 0; j < nseen && !dup; j++)
        dup = seen[j] == h;
      if (dup || dropped == 0)
        {
          free (extra);
          misses++;
          continue;
        }
      seen = xrealloc (seen, (nseen + 1) * sizeof *seen);
      seen[nseen++] = h;
      add_state_twin ((struct state){ .kind = ST_SUBSET,
                                      .base = ep_start[k],
                                      .extra = extra,
                                      .nextra = nextra,
                                      .crash = epoch_crash (k) });
      made++;
    }
  free (cand);
  free (seen);
}

static void
gen_unsafe (void)
{
  for (size_t k = 0; k + 1 < nep; k++)
    {
      size_t n = 0, *extra, nextra = 0;
      for (size_t i = ep_start[k]; i < ep_end[k]; i++)
        n += is_write (&ops[i]);
      if (n == 0)
        continue;
      extra
          = xrealloc (NULL, (ep_end[k + 1] - ep_start[k + 1]) * sizeof *extra);
      for (size_t i = ep_start[k + 1]; i < ep_end[k + 1]; i++)
        if (is_write (&ops[i]))
          extra[nextra++] = i;
      add_state ((struct state){ .kind = ST_UNSAFE,
                                 .base = ep_start[k],
                                 .extra = extra,
                                 .nextra = nextra,
                                 .crash = epoch_crash (k + 1) });
    }
}

static int
cmp_state (const void *a, const void *b)
{
  const struct state *x = a, *y = b;
  if (x->no_trim != y->no_trim)
    return x->no_trim ? 1 : -1;
  return x->base < y->base ? -1 : x->base > y->base;
}

/* The image being built. */
static unsigned char *base_img, *prefix, *work;
static size_t img_size;
static size_t prefix_at; /* ops [0, prefix_at) applied to prefix */
static bool prefix_no_trim;

static void
apply (unsigned char *img, const struct op *o, bool no_trim)
{
  if (!is_write (o) || (no_trim && o->kind == REC_STORE_TRIM))
    return;
  if (o->offset > img_size || o->len > img_size - o->offset)
    die ("record: a write past the end of the image");
  if (o->kind == REC_STORE_WRITE)
    memcpy (img + o->offset, o->data, o->len);
  else
    memset (img + o->offset, 0, o->len);
}

static const unsigned char *
build (const struct state *s)
{
  if (prefix_at > s->base || prefix_no_trim != s->no_trim)
    {
      memcpy (prefix, base_img, img_size);
      prefix_at = 0;
      prefix_no_trim = s->no_trim;
    }
  for (; prefix_at < s->base; prefix_at++)
    apply (prefix, &ops[prefix_at], s->no_trim);
  if (!s->nextra)
    return prefix;
  memcpy (work, prefix, img_size);
  for (size_t i = 0; i < s->nextra; i++)
    apply (work, &ops[s->extra[i]], s->no_trim);
  return work;
}

static bool
all_zero (const unsigned char *p, size_t n)
{
  static const unsigned char zero[4096];
  for (size_t i = 0; i < n; i += sizeof zero)
    if (memcmp (p + i, zero, n - i < sizeof zero ? n - i : sizeof zero))
      return false;
  return true;
}

/* Write the image to PATH, sparse: zero chunks are left as holes.  */
static void
write_file (const char *path, const unsigned char *buf)
{
  const size_t chunk = 65536;
  int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

  if (fd == -1 || ftruncate (fd, (off_t)img_size) == -1)
    {
      perror (path);
      exit (2);
    }
  for (size_t at = 0; at < img_size; at += chunk)
    {
      size_t n = img_size - at < chunk ? img_size - at : chunk;
      if (all_zero (buf + at, n))
        continue;
      if (pwrite (fd, buf + at, n, (off_t)at) != (ssize_t)n)
        {
          perror (path);
          exit (2);
        }
    }
  if (close (fd) == -1)
    {
      perror (path);
      exit (2);
    }
}

static unsigned long n_done, n_fsck_bad, n_oracle_bad, n_errors;
static unsigned long kind_count[6];

static void
tally (int status, size_t id)
{
  int code = WIFEXITED (status) ? WEXITSTATUS (status) : 255;
  const struct state *s = &states[id];

  n_done++;
  if (code & ~3)
    n_errors++;
  else
    {
      if (code & 1)
        n_fsck_bad++;
      if (code & 2)
        n_oracle_bad++;
    }
  if (code)
    fprintf (stderr,
             "crashgen: state %zu (%s%s, base %zu, +%zu, crash %" PRIu64
             ", marker %ld): %s%s%s\n",
             id, kind_names[s->kind], s->no_trim ? ", no trim" : "", s->base,
             s->nextra, s->crash, marker_before (s->crash),
             code & ~3 ? "checker error" : "",
             !(code & ~3) && (code & 1) ? "fsck not clean " : "",
             !(code & ~3) && (code & 2) ? "oracle failed" : "");
}

static void
usage (void)
{
  fprintf (stderr,
           "usage: crashgen --image BASE --record LOG [--mstart OFFSET]\n"
           "         [--flush] [--markers] [--subset N] [--end] [--kill-at N]\n"
           "         [--kill-random N]\n"
           "         [--unsafe] [--seed N] [--max N]\n"
           "         (--list | --out-dir DIR | --exec CMD --scratch DIR "
           "[--jobs N])\n");
  exit (2);
}

int
main (int argc, char *argv[])
{
  static const struct option longopts[]
      = { { "image", 1, 0, 'i' },       { "record", 1, 0, 'r' },
          { "mstart", 1, 0, 'm' },      { "flush", 0, 0, 'f' },
          { "markers", 0, 0, 'M' },     { "subset", 1, 0, 's' },
          { "end", 0, 0, 'e' },         { "kill-at", 1, 0, 'k' },
          { "unsafe", 0, 0, 'u' },      { "seed", 1, 0, 'S' },
          { "list", 0, 0, 'l' },        { "out-dir", 1, 0, 'o' },
          { "exec", 1, 0, 'x' },        { "scratch", 1, 0, 'd' },
          { "jobs", 1, 0, 'j' },        { "max", 1, 0, 'n' },
          { "kill-random", 1, 0, 'K' }, { 0, 0, 0, 0 } };
  const char *image = NULL, *record = NULL, *out_dir = NULL, *cmd = NULL;
  const char *scratch = NULL;
  bool do_flush = false, do_markers = false, do_end = false, do_unsafe = false;
  bool list = false;
  long kill_at = -1;
  unsigned long subset = 0, jobs = 1, max = 0, kill_random = 0;
  uint64_t mstart = 0, seed = 42;
  int c, fd;
  struct stat st;
  const unsigned char *rec;

  while ((c = getopt_long (argc, argv, "", longopts, NULL)) != -1)
    switch (c)
      {
      case 'i':
        image = optarg;
        break;
      case 'r':
        record = optarg;
        break;
      case 'm':
        mstart = strtoull (optarg, NULL, 0);
        break;
      case 'f':
        do_flush = true;
        break;
      case 'M':
        do_markers = true;
        break;
      case 's':
        subset = strtoul (optarg, NULL, 0);
        break;
      case 'e':
        do_end = true;
        break;
      case 'K':
        kill_random = strtoul (optarg, NULL, 0);
        break;
      case 'k':
        kill_at = strtol (optarg, NULL, 0);
        break;
      case 'u':
        do_unsafe = true;
        break;
      case 'S':
        seed = strtoull (optarg, NULL, 0);
        break;
      case 'l':
        list = true;
        break;
      case 'o':
        out_dir = optarg;
        break;
      case 'x':
        cmd = optarg;
        break;
      case 'd':
        scratch = optarg;
        break;
      case 'j':
        jobs = strtoul (optarg, NULL, 0);
        break;
      case 'n':
        max = strtoul (optarg, NULL, 0);
        break;
      default:
        usage ();
      }
  if (!image || !record || optind != argc || jobs < 1 || jobs > 64
      || (!list && !out_dir && !(cmd && scratch)))
    usage ();
  rng_state = seed;

  fd = open (record, O_RDONLY);
  if (fd == -1 || fstat (fd, &st) == -1)
    {
      perror (record);
      return 2;
    }
  rec = st.st_size
            ? mmap (NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)
            : NULL;
  if (st.st_size && rec == MAP_FAILED)
    die ("cannot map the record");
  close (fd);
  parse_record (rec, (size_t)st.st_size, mstart);
  for (size_t i = 0; i < nops; i++)
    any_trim |= ops[i].kind == REC_STORE_TRIM;
  find_epochs ();

  if (do_flush)
    gen_flush ();
  if (do_markers)
    gen_markers ();
  if (subset)
    gen_subset (subset);
  if (do_end)
    add_state_twin (
        (struct state){ .kind = ST_END, .base = nops, .crash = last_pos + 1 });
  if (kill_at >= 0)
    {
      size_t i = 0;
      while (i < nops && ops[i].pos <= (uint64_t)kill_at)
        i++;
      add_state_twin ((struct state){
          .kind = ST_KILL, .base = i, .crash = (uint64_t)kill_at + 1 });
    }
  /* SIGKILL at random records: every completed write is in the store.  */
  for (unsigned long r = 0; r < kill_random && last_pos > 0; r++)
    {
      uint64_t at = rng_next () % (last_pos + 1);
      size_t i = 0;
      while (i < nops && ops[i].pos <= at)
        i++;
      add_state_twin (
          (struct state){ .kind = ST_KILL, .base = i, .crash = at + 1 });
    }
  if (do_unsafe)
    gen_unsafe ();
  if (max && nstates > max)
    nstates = max;
  for (size_t i = 0; i < nstates; i++)
    kind_count[states[i].kind]++;
  {
    size_t w = 0, fl = 0, m = 0;
    for (size_t i = 0; i < nops; i++)
      w += is_write (&ops[i]), fl += ops[i].kind == REC_STORE_FLUSH;
    for (size_t i = 0; i < nmarkers; i++)
      m += marker_pos[i] != UINT64_MAX;
    printf ("crashgen: log: %" PRIu64 " records, %zu store writes, %zu "
            "flushes, %zu epochs, %zu markers%s\n",
            nops ? last_pos + 1 : 0, w, fl, nep, m,
            any_trim ? ", trims (no-trim twins added)" : "");
  }
  printf ("crashgen: made %zu states (flush %lu, marker %lu, subset %lu, end "
          "%lu, kill %lu, unsafe %lu), seed %" PRIu64 "\n",
          nstates, kind_count[ST_FLUSH], kind_count[ST_MARKER],
          kind_count[ST_SUBSET], kind_count[ST_END], kind_count[ST_KILL],
          kind_count[ST_UNSAFE], seed);
  fflush (stdout);

  if (list)
    {
      for (size_t i = 0; i < nstates; i++)
        printf ("%zu %s%s base=%zu extra=%zu crash=%" PRIu64 " marker=%ld\n", i,
                kind_names[states[i].kind], states[i].no_trim ? "-notrim" : "",
                states[i].base, states[i].nextra, states[i].crash,
                marker_before (states[i].crash));
      return 0;
    }

  /* Build in order of the prefix they extend; ids stay as generated.  */
  size_t *order = xrealloc (NULL, nstates * sizeof *order);
  {
    struct state *sorted = xrealloc (NULL, nstates * sizeof *sorted);
    for (size_t i = 0; i < nstates; i++)
      {
        sorted[i] = states[i];
        sorted[i].nextra = i; /* carry the id through the sort */
      }
    /* Stable order by (no_trim, base): insertion by qsort then ids.  */
    qsort (sorted, nstates, sizeof *sorted, cmp_state);
    for (size_t i = 0; i < nstates; i++)
      order[i] = sorted[i].nextra;
    free (sorted);
  }

  fd = open (image, O_RDONLY);
  if (fd == -1 || fstat (fd, &st) == -1)
    {
      perror (image);
      return 2;
    }
  img_size = (size_t)st.st_size;
  base_img = xrealloc (NULL, img_size);
  prefix = xrealloc (NULL, img_size);
  work = xrealloc (NULL, img_size);
  {
    size_t done = 0;
    while (done < img_size)
      {
        ssize_t r = read (fd, base_img + done, img_size - done);
        if (r <= 0)
          die ("cannot read the image");
        done += (size_t)r;
      }
  }
  close (fd);
  memcpy (prefix, base_img, img_size);

  pid_t *pids = xrealloc (NULL, jobs * sizeof *pids);
  size_t *slot_state = xrealloc (NULL, jobs * sizeof *slot_state);
  for (size_t j = 0; j < jobs; j++)
    pids[j] = 0;

  for (size_t n = 0; n < nstates; n++)
    {
      size_t id = order[n], slot = 0;
      const struct state *s = &states[id];
      const unsigned char *img = build (s);
      char path[4096], v[5][64];

      if (out_dir)
        {
          snprintf (path, sizeof path, "%s/state-%05zu-%s.img", out_dir, id,
                    kind_names[s->kind]);
          write_file (path, img);
          continue;
        }
      /* A free slot, waiting for a checker to end if need be.  */
      for (;;)
        {
          for (slot = 0; slot < jobs && pids[slot]; slot++)
            ;
          if (slot < jobs)
            break;
          int status;
          pid_t p = wait (&status);
          if (p == -1)
            die ("wait failed");
          for (size_t j = 0; j < jobs; j++)
            if (pids[j] == p)
              {
                tally (status, slot_state[j]);
                pids[j] = 0;
              }
        }
      snprintf (path, sizeof path, "%s/state.%zu.img", scratch, slot);
      write_file (path, img);
      snprintf (v[0], sizeof v[0], "%zu", id);
      snprintf (v[1], sizeof v[1], "%s%s", kind_names[s->kind],
                s->no_trim ? "-notrim" : "");
      snprintf (v[2], sizeof v[2], "%" PRIu64, s->crash);
      snprintf (v[3], sizeof v[3], "%ld", marker_before (s->crash));
      snprintf (v[4], sizeof v[4], "%zu", slot);
      fflush (NULL);
      pid_t p = fork ();
      if (p == -1)
        die ("fork failed");
      if (p == 0)
        {
          setenv ("CRASH_IMG", path, 1);
          setenv ("CRASH_ID", v[0], 1);
          setenv ("CRASH_KIND", v[1], 1);
          setenv ("CRASH_POS", v[2], 1);
          setenv ("CRASH_MARKER", v[3], 1);
          setenv ("CRASH_SLOT", v[4], 1);
          execl ("/bin/sh", "sh", "-c", cmd, (char *)NULL);
          _exit (127);
        }
      pids[slot] = p;
      slot_state[slot] = id;
    }
  for (size_t j = 0; j < jobs; j++)
    if (pids[j])
      {
        int status;
        if (waitpid (pids[j], &status, 0) == pids[j])
          tally (status, slot_state[j]);
      }
  if (out_dir)
    {
      printf ("crashgen: wrote %zu states to %s\n", nstates, out_dir);
      return 0;
    }
  printf ("crashgen: checked %lu states: fsck clean %lu/%lu, oracle pass "
          "%lu/%lu, checker errors %lu\n",
          n_done, n_done - n_fsck_bad - n_errors, n_done,
          n_done - n_oracle_bad - n_errors, n_done, n_errors);
  return n_fsck_bad || n_oracle_bad || n_errors ? 1 : 0;
}
