/* SPDX-License-Identifier: BSD-3-Clause */
/* ctl-watch.c --- ext4lazyctl watch: a live view of the counters, like
 * top.
 *
 * Every interval it asks for "stats prometheus" (line-oriented, so
 * read here without a JSON parser), sums over the instances and draws
 * a frame: requests, what is held per instance, blocks written back by
 * trigger and what was saved, with rates from the previous frame.
 * On a terminal each frame is drawn from the top of a cleared screen
 * (ANSI: ESC [H ESC [2J, nothing else; no curses) and q quits; stdin is
 * put in non-canonical mode for that and restored on every way out.
 * Elsewhere (a pipe, TERM=dumb) frames follow each other, separated by
 * a blank line.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#define MAX_INSTANCES 16
#define MAX_TRIGGERS 16

enum
{
  REQ_WRITE,
  REQ_READ,
  REQ_FLUSH,
  NREQ
};
static const char *const req_names[NREQ] = { "write", "read", "flush" };

struct instance
{
  char name[64];
  uint64_t held_blocks, held_bytes, saved_bytes;
  double oldest_s;
};

/* One reading of the counters, summed over the instances where that
 * makes sense.
 */
struct sample
{
  double t; /* CLOCK_MONOTONIC seconds */
  uint64_t req[NREQ];
  size_t ntrig;
  char trig[MAX_TRIGGERS][24]; /* in the order the server lists them */
  uint64_t wb[MAX_TRIGGERS];
  uint64_t superseded, unchanged, discarded, saved_bytes;
  size_t ninst, more_inst; /* shown, and left out past MAX_INSTANCES */
  struct instance inst[MAX_INSTANCES];
};

static double
mono_s (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- reading the exposition text --------------------------------------- */

/* A sample line: NAME{k="v",...} VALUE.  The labels wanted here are
 * instance, trigger and op; others are ignored.
 */
struct prom_line
{
  char name[80];
  char instance[64], trigger[24], op[16];
  const char *value;
};

/* Copy label value at p (after the opening quote) into the label's
 * field if it is one of ours; returns the position after the closing
 * quote, or NULL.
 */
static char *
take_label (struct prom_line *l, const char *key, size_t klen, char *p)
{
  char *end = strchr (p, '"');
  char *dst = NULL;
  size_t size = 0;

  if (!end)
    return NULL;
  if (klen == 8 && strncmp (key, "instance", 8) == 0)
    dst = l->instance, size = sizeof l->instance;
  else if (klen == 7 && strncmp (key, "trigger", 7) == 0)
    dst = l->trigger, size = sizeof l->trigger;
  else if (klen == 2 && strncmp (key, "op", 2) == 0)
    dst = l->op, size = sizeof l->op;
  if (dst)
    snprintf (dst, size, "%.*s", (int)(end - p), p);
  return end + 1;
}

static bool
parse_line (char *line, struct prom_line *l)
{
  size_t n = strcspn (line, "{ ");
  char *p = line + n;

  memset (l, 0, sizeof *l);
  if (line[0] == '#' || n == 0 || n >= sizeof l->name)
    return false;
  memcpy (l->name, line, n);
  if (*p == '{')
    {
      for (p++; *p && *p != '}';)
        {
          char *key = p, *eq = strchr (p, '=');

          if (!eq || eq[1] != '"')
            return false;
          p = take_label (l, key, eq - key, eq + 2);
          if (!p)
            return false;
          if (*p == ',')
            p++;
        }
      if (*p++ != '}')
        return false;
    }
  if (*p != ' ')
    return false;
  l->value = p + 1;
  return true;
}

static struct instance *
instance_of (struct sample *s, const char *name)
{
  for (size_t i = 0; i < s->ninst; i++)
    if (strcmp (s->inst[i].name, name) == 0)
      return &s->inst[i];
  if (s->ninst == MAX_INSTANCES)
    {
      s->more_inst++;
      return NULL;
    }
  snprintf (s->inst[s->ninst].name, sizeof s->inst[0].name, "%s", name);
  return &s->inst[s->ninst++];
}

static void
add_writeback (struct sample *s, const char *trigger, uint64_t v)
{
  size_t t;

  for (t = 0; t < s->ntrig; t++)
    if (strcmp (s->trig[t], trigger) == 0)
      break;
  if (t == s->ntrig)
    {
      if (s->ntrig == MAX_TRIGGERS)
        return;
      snprintf (s->trig[s->ntrig++], sizeof s->trig[0], "%s", trigger);
    }
  s->wb[t] += v;
}

/* Fold one sample line into s. */
static void
take_sample (struct sample *s, const struct prom_line *l)
{
  uint64_t v = strtoull (l->value, NULL, 10);
  struct instance *in;

  if (strcmp (l->name, "ext4lazy_client_requests_total") == 0)
    {
      for (int r = 0; r < NREQ; r++)
        if (strcmp (l->op, req_names[r]) == 0)
          s->req[r] = v;
      return;
    }
  if (strcmp (l->name, "ext4lazy_writeback_blocks_total") == 0)
    add_writeback (s, l->trigger, v);
  else if (strcmp (l->name, "ext4lazy_superseded_total") == 0)
    s->superseded += v;
  else if (strcmp (l->name, "ext4lazy_unchanged_total") == 0)
    s->unchanged += v;
  else if (strcmp (l->name, "ext4lazy_discarded_total") == 0)
    s->discarded += v;
  if (!*l->instance || !(in = instance_of (s, l->instance)))
    return;
  if (strcmp (l->name, "ext4lazy_held_blocks") == 0)
    in->held_blocks = v;
  else if (strcmp (l->name, "ext4lazy_held_bytes") == 0)
    in->held_bytes = v;
  else if (strcmp (l->name, "ext4lazy_oldest_hold_seconds") == 0)
    in->oldest_s = strtod (l->value, NULL);
  else if (strcmp (l->name, "ext4lazy_saved_bytes_total") == 0)
    {
      in->saved_bytes = v;
      s->saved_bytes += v;
    }
}

/* Ask the server and read its answer into *s. */
static int
fetch (const char *path, struct sample *s)
{
  char *body, *p, *line;
  size_t len;
  int status = ctl_ask (path, "stats prometheus", &body, &len);

  memset (s, 0, sizeof *s);
  s->t = mono_s ();
  if (status != CTL_OK)
    return status;
  for (p = body; (line = strsep (&p, "\n")) != NULL;)
    {
      struct prom_line l;

      if (parse_line (line, &l))
        take_sample (s, &l);
    }
  free (body);
  return CTL_OK;
}

/* ---- drawing a frame ----------------------------------------------------- */

/* "12.5" per second since the previous sample, "-" without one. */
static const char *
rate (const struct sample *prev, const struct sample *cur, uint64_t was,
      uint64_t now, char *buf, size_t size)
{
  if (!prev || cur->t <= prev->t || now < was)
    return "-";
  snprintf (buf, size, "%.1f", (now - was) / (cur->t - prev->t));
  return buf;
}

static uint64_t
prev_wb (const struct sample *prev, const char *trigger)
{
  for (size_t t = 0; prev && t < prev->ntrig; t++)
    if (strcmp (prev->trig[t], trigger) == 0)
      return prev->wb[t];
  return 0;
}

static void
draw_requests (FILE *f, const struct sample *prev, const struct sample *cur)
{
  char b[32];

  fprintf (f, "requests          total          /s\n");
  for (int r = 0; r < NREQ; r++)
    fprintf (
        f, "  %-8s %14" PRIu64 " %11s\n", req_names[r], cur->req[r],
        rate (prev, cur, prev ? prev->req[r] : 0, cur->req[r], b, sizeof b));
}

static void
draw_held (FILE *f, const struct sample *cur)
{
  fprintf (f, "\n%-20s %10s %14s %10s %14s\n", "held now", "blocks", "bytes",
           "oldest", "saved bytes");
  for (size_t i = 0; i < cur->ninst; i++)
    {
      const struct instance *in = &cur->inst[i];
      char age[32] = "-";

      if (in->held_blocks)
        snprintf (age, sizeof age, "%.1fs", in->oldest_s);
      fprintf (f, "  %-18s %10" PRIu64 " %14" PRIu64 " %10s %14" PRIu64 "\n",
               in->name, in->held_blocks, in->held_bytes, age, in->saved_bytes);
    }
  if (cur->more_inst)
    fprintf (f, "  (%zu more instances not shown)\n", cur->more_inst);
}

/* The triggers in two columns. */
static void
draw_writeback (FILE *f, const struct sample *prev, const struct sample *cur)
{
  size_t half = (cur->ntrig + 1) / 2;
  char b[32];

  fprintf (f, "\n%-12s %10s %6s  |  %-10s %10s %6s\n", "written back", "total",
           "/s", "", "total", "/s");
  for (size_t row = 0; row < half; row++)
    for (size_t t = row; t < cur->ntrig; t += half)
      fprintf (f, "%s%-10s %10" PRIu64 " %6s%s", t == row ? "  " : "  |  ",
               cur->trig[t], cur->wb[t],
               rate (prev, cur, prev_wb (prev, cur->trig[t]), cur->wb[t], b,
                     sizeof b),
               t + half >= cur->ntrig ? "\n" : "");
}

static void
draw_saved (FILE *f, const struct sample *prev, const struct sample *cur)
{
  char b[32];

  fprintf (f,
           "\nsaved: %" PRIu64 " blocks, %" PRIu64 " bytes, %s bytes/s\n"
           "  = %" PRIu64 " superseded + %" PRIu64 " unchanged + %" PRIu64
           " discarded\n",
           cur->superseded + cur->unchanged + cur->discarded, cur->saved_bytes,
           rate (prev, cur, prev ? prev->saved_bytes : 0, cur->saved_bytes, b,
                 sizeof b),
           cur->superseded, cur->unchanged, cur->discarded);
}

/* The frame, written at once so that the terminal never shows half.
 * Returns an exit status: CTL_FAILED if stdout failed (a closed pipe).
 */
static int
draw (const char *path, double interval, bool screen, bool keys,
      const struct sample *prev, const struct sample *cur)
{
  char *buf = NULL, clock[16];
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  time_t now = time (NULL);
  int status = CTL_OK;

  if (!f)
    return CTL_OK; /* out of memory: skip a frame */
  strftime (clock, sizeof clock, "%H:%M:%S", localtime (&now));
  fprintf (f, "%sext4lazy on %s  every %gs  %s%s\n\n",
           screen ? "\033[H\033[2J" : "", path, interval, clock,
           keys ? "  (q quits)" : "");
  draw_requests (f, prev, cur);
  draw_held (f, cur);
  draw_writeback (f, prev, cur);
  draw_saved (f, prev, cur);
  if (fclose (f) == 0
      && (fwrite (buf, 1, len, stdout) != len || fflush (stdout) != 0))
    {
      fprintf (stderr, "ext4lazyctl: stdout: %s\n", strerror (errno));
      status = CTL_FAILED;
    }
  free (buf);
  return status;
}

/* ---- the terminal ----------------------------------------------------------
 */

static volatile sig_atomic_t stop;

static void
on_signal (int sig)
{
  (void)sig;
  stop = 1;
}

struct term
{
  bool screen; /* stdout is a terminal that takes ANSI escapes */
  bool keys;   /* stdin is a terminal: q quits */
  struct termios saved;
};

static void
term_setup (struct term *t)
{
  const char *term = getenv ("TERM");
  struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART */

  sigemptyset (&sa.sa_mask);
  sigaction (SIGINT, &sa, NULL);
  sigaction (SIGTERM, &sa, NULL);
  sigaction (SIGHUP, &sa, NULL);
  /* A closed pipe is an error from write, not a death that would leave
   * the terminal unechoed.
   */
  signal (SIGPIPE, SIG_IGN);
  t->screen
      = isatty (STDOUT_FILENO) && term && *term && strcmp (term, "dumb") != 0;
  t->keys = isatty (STDIN_FILENO) && tcgetattr (STDIN_FILENO, &t->saved) == 0;
  if (t->keys)
    {
      struct termios raw = t->saved;

      /* Keys arrive one by one, unechoed; Ctrl-C still signals. */
      raw.c_lflag &= ~(ICANON | ECHO);
      raw.c_cc[VMIN] = 1;
      raw.c_cc[VTIME] = 0;
      tcsetattr (STDIN_FILENO, TCSANOW, &raw);
    }
}

static void
term_restore (const struct term *t)
{
  if (t->keys)
    tcsetattr (STDIN_FILENO, TCSANOW, &t->saved);
}

/* Wait until monotonic time `until`; false if q was pressed or a
 * signal asked to stop.
 */
static bool
wait_until (const struct term *t, double until)
{
  for (;;)
    {
      struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
      double left = until - mono_s ();
      int r;
      char c;

      if (stop)
        return false;
      if (left <= 0)
        return true;
      r = poll (&p, t->keys ? 1 : 0, (int)(left * 1000) + 1);
      if (r > 0 && read (STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q'))
        return false;
      if (r > 0 && (p.revents & (POLLHUP | POLLERR)))
        return false; /* the terminal went away */
    }
}

int
ctl_watch (const char *path, double interval, long count)
{
  struct sample s[2];
  struct term t;
  double next = mono_s ();
  int status = CTL_OK;

  term_setup (&t);
  for (long n = 0; count == 0 || n < count; n++)
    {
      struct sample *cur = &s[n % 2], *prev = n ? &s[(n + 1) % 2] : NULL;

      if (n > 0 && !wait_until (&t, next))
        break;
      status = fetch (path, cur);
      if (status != CTL_OK)
        break;
      if (n > 0 && !t.screen)
        putchar ('\n');
      status = draw (path, interval, t.screen, t.keys, prev, cur);
      if (status != CTL_OK)
        break;
      next += interval;
      if (next < cur->t)
        next = cur->t; /* the server was slow: no burst of frames */
    }
  term_restore (&t);
  return status;
}
