/* SPDX-License-Identifier: BSD-3-Clause */
/* crlite.c --- the runner behind crlite.h: each test in a forked child,
 * one at a time, with its timeout; a line per test and a total.
 *
 * The parent never starts a thread, so every child is forked from a
 * single-threaded process, as ThreadSanitizer wants.  A child exits 0
 * when its test passed, 1 when it failed and CRL_SKIPPED when it
 * skipped; TSan, when it reported a race, makes the exit status 66.
 * The runner exits 1 if any test failed, 77 if every test skipped.
 *
 * Usage: test-NAME [--filter=GLOB] [--list], GLOB over "suite/name".
 */
#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crlite.h"

#define CRL_SKIPPED 77

static struct crl_suite *suites;
static struct crl_test *tests;

/* In the child: where a failed cr_assert goes back to, and whether any
 * check failed.
 */
static jmp_buf abort_test;
static bool failed;
static pthread_t test_thread;

void
crl_register_suite (struct crl_suite *s)
{
  s->next = suites;
  suites = s;
}

void
crl_register_test (struct crl_test *t)
{
  t->next = tests;
  tests = t;
}

/* The user's message of an assertion or skip, or NULL when there is
 * none (the macros put an "x" before it, so that none is allowed).
 */
static const char *
user_message (char *buf, size_t len, const char *fmt, va_list ap)
{
  vsnprintf (buf, len, fmt, ap);
  return buf[1] ? buf + 1 : NULL;
}

void
crl_fail (const char *file, int line, const char *expr, const char *fmt, ...)
{
  char buf[1024];
  const char *msg;
  va_list ap;

  va_start (ap, fmt);
  msg = user_message (buf, sizeof buf, fmt, ap);
  va_end (ap);
  if (msg)
    fprintf (stderr, "[----] %s:%d: %s\n", file, line, msg);
  else if (*expr)
    fprintf (stderr, "[----] %s:%d: the expression %s is false\n", file, line,
             expr);
  else
    fprintf (stderr, "[----] %s:%d: the test failed\n", file, line);
  fflush (stderr);
  failed = true;
}

void
crl_abort_test (void)
{
  /* A jump back across threads would be undefined: another thread of the
   * test ends the process, as a crash would.
   */
  if (!pthread_equal (pthread_self (), test_thread))
    _exit (1);
  longjmp (abort_test, 1);
}

void
crl_skip (const char *fmt, ...)
{
  char buf[1024];
  const char *msg;
  va_list ap;

  va_start (ap, fmt);
  msg = user_message (buf, sizeof buf, fmt, ap);
  va_end (ap);
  if (msg)
    fprintf (stderr, "[----] %s\n", msg);
  exit (CRL_SKIPPED);
}

void
crl_log (const char *tag, const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "[%s] ", tag);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
}

static void
nothing (void)
{
}

#define OR_NOTHING(f) ((f) ? (f) : nothing)

/* The child's whole life: fixtures, test, fixtures, exit status.  PARAM
 * is the element a parameterized test runs with.
 */
static void
run_child (const struct crl_test *t, const struct crl_data *suite, void *param)
{
  test_thread = pthread_self ();
  setpgid (0, 0); /* a timeout kills what the test started too */
  if (setjmp (abort_test))
    exit (1); /* a failed cr_assert in .init: no .fini, as Criterion */
  OR_NOTHING (suite->init) ();
  OR_NOTHING (t->data.init) ();
  if (!setjmp (abort_test))
    {
      if (t->fn)
        t->fn ();
      else
        t->pfn (param);
    }
  if (!setjmp (abort_test))
    {
      OR_NOTHING (t->data.fini) ();
      OR_NOTHING (suite->fini) ();
    }
  exit (failed ? 1 : 0);
}

static void
on_alarm (int sig)
{
  (void)sig;
}

static double
now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Run one test in a child: 0 passed, 1 failed, CRL_SKIPPED skipped.
 * INDEX is the parameter's (and PARAM the element), or -1.
 */
static int
run_one (const struct crl_test *t, const struct crl_data *suite, void *param,
         long index)
{
  double timeout = t->data.timeout ? t->data.timeout : suite->timeout;
  double start = now ();
  bool timed_out = false;
  char why[128] = "", at[32] = "";
  int status, r = 0;
  pid_t pid;

  fflush (NULL);
  pid = fork ();
  if (pid < 0)
    {
      perror ("fork");
      return 1;
    }
  if (pid == 0)
    run_child (t, suite, param);
  if (timeout > 0)
    alarm ((unsigned)timeout + (timeout > (unsigned)timeout));
  while (waitpid (pid, &status, 0) < 0)
    {
      if (errno != EINTR)
        {
          perror ("waitpid");
          return 1;
        }
      timed_out = true;
      kill (-pid, SIGKILL);
      kill (pid, SIGKILL);
    }
  alarm (0);
  if (timed_out)
    snprintf (why, sizeof why, ": timed out after %g s", timeout);
  else if (WIFSIGNALED (status))
    snprintf (why, sizeof why, ": killed by signal %d (%s)", WTERMSIG (status),
              strsignal (WTERMSIG (status)));
  else if (WEXITSTATUS (status) == CRL_SKIPPED)
    r = CRL_SKIPPED;
  else if (WEXITSTATUS (status) != 0)
    snprintf (why, sizeof why, ": exit status %d%s", WEXITSTATUS (status),
              WEXITSTATUS (status) == 66 ? " (ThreadSanitizer)" : "");
  if (why[0])
    r = 1;
  if (index >= 0)
    snprintf (at, sizeof at, "[%ld]", index);
  fprintf (stderr, "[%s] %s::%s%s (%.2f s)%s\n",
           r == 0             ? "PASS"
           : r == CRL_SKIPPED ? "SKIP"
                              : "FAIL",
           t->suite, t->name, at, now () - start, why);
  return r;
}

static const struct crl_data *
suite_of (const struct crl_test *t)
{
  static const struct crl_data none;

  for (struct crl_suite *s = suites; s; s = s->next)
    if (strcmp (s->name, t->suite) == 0)
      return &s->data;
  return &none;
}

static int
by_name (const void *a, const void *b)
{
  const struct crl_test *x = *(struct crl_test *const *)a;
  const struct crl_test *y = *(struct crl_test *const *)b;
  int c = strcmp (x->suite, y->suite);

  return c ? c : strcmp (x->name, y->name);
}

int
main (int argc, char **argv)
{
  const char *filter = "*";
  bool list = false;
  struct crl_test **order;
  size_t n = 0, ran = 0, passed = 0, skipped = 0;
  struct sigaction sa = { .sa_handler = on_alarm }; /* no SA_RESTART */

  for (int i = 1; i < argc; i++)
    if (strncmp (argv[i], "--filter=", 9) == 0)
      filter = argv[i] + 9;
    else if (strcmp (argv[i], "--list") == 0)
      list = true;
    else
      {
        fprintf (stderr, "usage: %s [--filter=GLOB] [--list]\n", argv[0]);
        return 2;
      }
  for (struct crl_test *t = tests; t; t = t->next)
    n++;
  order = calloc (n + 1, sizeof order[0]);
  if (!order)
    return 1;
  n = 0;
  for (struct crl_test *t = tests; t; t = t->next)
    order[n++] = t;
  qsort (order, n, sizeof order[0], by_name);
  sigaction (SIGALRM, &sa, NULL);

  for (size_t i = 0; i < n; i++)
    {
      const struct crl_test *t = order[i];
      const struct crl_data *suite = suite_of (t);
      struct criterion_test_params p;
      char id[512];
      int r;

      snprintf (id, sizeof id, "%s/%s", t->suite, t->name);
      if (fnmatch (filter, id, 0) != 0)
        continue;
      if (list || t->data.disabled || suite->disabled)
        {
          fprintf (list ? stdout : stderr, "%s%s\n", id,
                   list ? "" : ": disabled");
          continue;
        }
      /* A plain test runs once, without a parameter. */
      p = t->fn ? (struct criterion_test_params){ 0, NULL, 1 } : t->params ();
      for (size_t k = 0; k < p.length; k++)
        {
          void *param = t->fn ? NULL : (char *)p.params + k * p.size;

          r = run_one (t, suite, param, t->fn ? -1 : (long)k);
          ran++;
          passed += r == 0;
          skipped += r == CRL_SKIPPED;
        }
    }
  fprintf (stderr, "Tested: %zu | Passing: %zu | Failing: %zu | Skipped: %zu\n",
           ran, passed, ran - passed - skipped, skipped);
  if (passed + skipped < ran)
    return 1;
  return ran > 0 && skipped == ran ? 77 : 0;
}
