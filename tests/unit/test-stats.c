/* SPDX-License-Identifier: BSD-3-Clause */
/* test-stats.c --- the text, JSON and Prometheus printers on a snapshot
 * built here: every counter of every instance is printed once, under
 * its own name, with its own value.  The JSON is parsed (strictly, by
 * a small parser below) and the Prometheus text is checked line by
 * line against the exposition format.  The list of holds, as text and
 * JSON, is checked the same way on holds made up here.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "stats.h"

/* The counters of struct fs_stats as the printers must name them. */
static const struct
{
  const char *name;
  size_t off;
} counters[] = {
#define C(f) { #f, offsetof (struct fs_stats, f) }
  C (client_writes), C (itable_writes),   C (real_writes),
  C (held),          C (unchanged),       C (superseded),
  C (dropped),       C (journal_writes),  C (journal_held),
  C (tx_absorbed),   C (tx_real),         C (discarded),
  C (deadline_met),  C (deadline_copied), C (writeback_batches),
#undef C
};
#define NCOUNTERS (sizeof counters / sizeof counters[0])

static const char *const triggers[WB_NTRIGGERS] = {
  "flush",      "fua",      "real",   "deadline", "explicit",
  "disconnect", "shutdown", "memory", "layout",   "journal",
};

static uint64_t *
counter (struct fs_stats *c, size_t k)
{
  return (uint64_t *)((char *)c + counters[k].off);
}

/* Distinct values everywhere, so that a value printed under the wrong
 * name or for the wrong instance is caught.
 */
static uint64_t
counter_value (size_t i, size_t k)
{
  return (i + 1) * 1000000 + 1000 * (k + 1) + 7;
}

static uint64_t
writeback_value (size_t i, int t)
{
  return (i + 1) * 1000000 + 500 + t;
}

static struct fs_snapshot fs2[2];

/* What instance i saved, from the counters as set here. */
static uint64_t
saved_blocks (size_t i)
{
  return fs2[i].c.superseded + fs2[i].c.unchanged + fs2[i].c.discarded;
}

static struct stats_snapshot
make_snapshot (void)
{
  struct stats_snapshot s = {
    .policy = "lazy",
    .client_writes = 11,
    .client_reads = UINT64_MAX,
    .client_flushes = 13,
    .layout_checks = 21,
    .layout_rereads = 2,
    .store_errors = 4,
    .writeback_errors = 3,
    .last_error_time = 1700000000,
    .max_held = 1 << 20,
    .max_age_s = 5400,
    .n = 2,
    .fs = fs2,
  };

  /* Store requests: trigger t has t writes and 100 + t flushes, but
   * the journal write-back (0 of both), so that a zero is left out.
   */
  for (int t = 0; t < ST_NTRIGGERS; t++)
    {
      s.store_writes[t] = t == WB_JOURNAL ? 0 : (uint64_t)t;
      s.store_flushes[t] = t == WB_JOURNAL ? 0 : 100 + (uint64_t)t;
    }
  s.store_flushes_skipped = 31;
  memset (fs2, 0, sizeof fs2);
  strcpy (fs2[0].name, "ext4@1048576");
  fs2[0].start = 1048576;
  fs2[0].size = 33554432;
  fs2[0].block_size = 4096;
  fs2[0].journal = 1;
  fs2[0].held_blocks = 3;
  fs2[0].held_bytes = 12288;
  fs2[0].oldest_age_s = 7.5;
  strcpy (fs2[1].name, "other");
  fs2[1].start = 0;
  fs2[1].size = 1048576;
  fs2[1].block_size = 0;
  fs2[1].journal = 0;
  for (size_t i = 0; i < 2; i++)
    {
      for (size_t k = 0; k < NCOUNTERS; k++)
        *counter (&fs2[i].c, k) = counter_value (i, k);
      for (int t = 0; t < WB_NTRIGGERS; t++)
        fs2[i].c.writeback[t] = writeback_value (i, t);
    }
  return s;
}

typedef void (*printer) (FILE *, const struct stats_snapshot *);

static char *
print (printer p, const struct stats_snapshot *s)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);

  cr_assert_not_null (f);
  p (f, s);
  cr_assert_eq (fclose (f), 0);
  cr_assert_not_null (buf);
  cr_assert_gt (len, 0);
  cr_assert_eq (buf[len - 1], '\n', "output does not end with a newline");
  cr_assert_eq (strlen (buf), len, "NUL byte in the output");
  return buf;
}

/* Next line of *p (without its newline, in place), or NULL at the end. */
static char *
next_line (char **p)
{
  char *line = *p, *nl;

  if (!*line)
    return NULL;
  nl = strchr (line, '\n');
  cr_assert_not_null (nl);
  *nl = 0;
  *p = nl + 1;
  return line;
}

/* ---- wb_trigger_names ------------------------------------------------- */

Test (stats, store_trigger_names)
{
  for (int t = 0; t < WB_NTRIGGERS; t++)
    cr_assert_str_eq (st_trigger_names[t], wb_trigger_names[t]);
  cr_assert_str_eq (st_trigger_names[ST_PASS], "passthrough");
  cr_assert_str_eq (st_trigger_names[ST_JPASS], "journal-passthrough");
}

Test (stats, trigger_names)
{
  for (int t = 0; t < WB_NTRIGGERS; t++)
    {
      cr_assert_not_null (wb_trigger_names[t], "trigger %d has no name", t);
      cr_assert_str_eq (wb_trigger_names[t], triggers[t]);
    }
}

/* ---- text ------------------------------------------------------------- */

/* Check one instance's block of text lines, header excluded. */
static void
check_text_instance (char **p, size_t i)
{
  char *line;
  char want[512];
  int off;

  for (size_t k = 0; k < NCOUNTERS; k++)
    {
      char name[64];
      uint64_t v;
      int n = 0;

      line = next_line (p);
      cr_assert_not_null (line, "instance %zu: missing %s", i,
                          counters[k].name);
      cr_assert (sscanf (line, "  %63s %" SCNu64 "  %n", name, &v, &n) == 2
                     && n > 0,
                 "not a counter line: \"%s\"", line);
      cr_assert_str_eq (name, counters[k].name);
      cr_assert_eq (v, counter_value (i, k), "%s of instance %zu: %s", name, i,
                    line);
      cr_assert_gt (strlen (line + n), 0, "%s has no description", name);
    }

  off = snprintf (want, sizeof want, "  written back:");
  for (int t = 0; t < WB_NTRIGGERS; t++)
    off += snprintf (want + off, sizeof want - off, " %s=%" PRIu64, triggers[t],
                     writeback_value (i, t));
  line = next_line (p);
  cr_assert_not_null (line);
  cr_assert_str_eq (line, want);

  line = next_line (p);
  cr_assert_not_null (line);
  snprintf (want, sizeof want,
            "  held now: %" PRIu64 " blocks, %" PRIu64 " bytes, oldest %s",
            fs2[i].held_blocks, fs2[i].held_bytes, i == 0 ? "7.5s" : "0.0s");
  cr_assert_str_eq (line, want);

  line = next_line (p);
  cr_assert_not_null (line);
  snprintf (want, sizeof want,
            "  saved: %" PRIu64 " blocks, %" PRIu64
            " bytes (superseded + unchanged + discarded)",
            saved_blocks (i), saved_blocks (i) * fs2[i].block_size);
  cr_assert_str_eq (line, want);
}

/* The store's lines, as make_snapshot fills them: journal (9) has 0
 * and is left out, flush (0) has 0 writes.
 */
static const char store_text[]
    = "store requests: 57 writes, 1157 flushes, 31 flushes skipped "
      "(nothing to flush)\n"
      "  writes by trigger: fua=1 real=2 deadline=3 explicit=4 disconnect=5 "
      "shutdown=6 memory=7 layout=8 passthrough=10 journal-passthrough=11\n"
      "  flushes by trigger: flush=100 fua=101 real=102 deadline=103 "
      "explicit=104 disconnect=105 shutdown=106 memory=107 layout=108 "
      "passthrough=110 journal-passthrough=111\n";

static void
check_text_store (char **p)
{
  char want[sizeof store_text], *w = want;

  memcpy (want, store_text, sizeof want);
  for (int k = 0; k < 3; k++)
    {
      char *line = strsep (&w, "\n");

      cr_assert_str_eq (next_line (p), line);
    }
}

Test (stats, text)
{
  struct stats_snapshot s = make_snapshot ();
  char *out = print (stats_print_text, &s), *p = out, *line;

  line = next_line (&p);
  cr_assert_str_eq (line, "policy: lazy  max-age: 5400s  max-held: 1048576 "
                          "bytes");
  line = next_line (&p);
  cr_assert_str_eq (line, "client requests: 11 writes, 18446744073709551615 "
                          "reads, 13 flushes");
  line = next_line (&p);
  cr_assert_str_eq (line, "layout: 21 metadata writes checked, 2 re-reads");
  cr_assert_str_eq (next_line (&p), "errors: 4 store requests, 3 write-backs "
                                    "failed, the latest at 1700000000");
  check_text_store (&p);

  cr_assert_str_eq (next_line (&p), "");
  cr_assert_str_eq (next_line (&p), "ext4@1048576: offset 1048576, 33554432 "
                                    "bytes, block size 4096, journal");
  check_text_instance (&p, 0);

  cr_assert_str_eq (next_line (&p), "");
  cr_assert_str_eq (next_line (&p),
                    "other: offset 0, 1048576 bytes, block size 0");
  check_text_instance (&p, 1);

  cr_assert_null (next_line (&p), "more text after the last instance");
  free (out);
}

Test (stats, text_no_instances)
{
  struct stats_snapshot s = make_snapshot ();
  char *out;

  s.policy = "strict";
  s.n = 0;
  s.fs = NULL;
  out = print (stats_print_text, &s);
  cr_assert_str_eq (out, "policy: strict  max-age: 5400s  max-held: 1048576 "
                         "bytes\nclient requests: 11 writes, "
                         "18446744073709551615 reads, 13 flushes\nlayout: "
                         "21 metadata writes checked, 2 re-reads\nerrors: "
                         "4 store requests, 3 write-backs failed, the "
                         "latest at 1700000000\n"
                         "store requests: 57 writes, 1157 flushes, 31 "
                         "flushes skipped (nothing to flush)\n"
                         "  writes by trigger: fua=1 real=2 deadline=3 "
                         "explicit=4 disconnect=5 shutdown=6 memory=7 "
                         "layout=8 passthrough=10 journal-passthrough=11\n"
                         "  flushes by trigger: flush=100 fua=101 real=102 "
                         "deadline=103 explicit=104 disconnect=105 "
                         "shutdown=106 memory=107 layout=108 "
                         "passthrough=110 journal-passthrough=111\n");
  free (out);
}

/* ---- a small strict JSON parser --------------------------------------- */

enum jtype
{
  J_NULL,
  J_TRUE,
  J_FALSE,
  J_NUM,
  J_STR,
  J_ARR,
  J_OBJ
};

struct jnode
{
  enum jtype type;
  char *key;  /* member name, in an object */
  char *text; /* J_STR: the string; J_NUM: the number as written */
  struct jnode **kids;
  size_t n;
};

static const char *jstart;

static void
jws (const char **p)
{
  while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r')
    (*p)++;
}

#define JFAIL(p, what)                                                         \
  cr_assert_fail ("JSON: %s at offset %td: \"%.40s\"", what, (p) - jstart, p)

static char *
jstring (const char **p)
{
  const char *q = *p + 1;
  char *s = malloc (strlen (q) + 1), *o = s;

  cr_assert_not_null (s);
  for (;;)
    {
      unsigned char c = *q;

      if (c == '"')
        break;
      if (c < 0x20)
        JFAIL (q, "unterminated string or control character");
      if (c == '\\')
        {
          q++;
          switch (*q)
            {
            case '"':
            case '\\':
            case '/':
              *o++ = *q;
              break;
            case 'n':
              *o++ = '\n';
              break;
            case 't':
              *o++ = '\t';
              break;
            case 'r':
              *o++ = '\r';
              break;
            case 'b':
              *o++ = '\b';
              break;
            case 'f':
              *o++ = '\f';
              break;
            default:
              JFAIL (q, "unsupported escape");
            }
          q++;
          continue;
        }
      *o++ = c;
      q++;
    }
  *o = 0;
  *p = q + 1;
  return s;
}

static char *
jnumber (const char **p)
{
  const char *q = *p;
  char *s;

  if (*q == '-')
    q++;
  if (*q == '0')
    q++;
  else if (*q >= '1' && *q <= '9')
    while (isdigit ((unsigned char)*q))
      q++;
  else
    JFAIL (q, "bad number");
  if (*q == '.')
    {
      q++;
      if (!isdigit ((unsigned char)*q))
        JFAIL (q, "bad fraction");
      while (isdigit ((unsigned char)*q))
        q++;
    }
  if (*q == 'e' || *q == 'E')
    {
      q++;
      if (*q == '+' || *q == '-')
        q++;
      if (!isdigit ((unsigned char)*q))
        JFAIL (q, "bad exponent");
      while (isdigit ((unsigned char)*q))
        q++;
    }
  s = strndup (*p, q - *p);
  cr_assert_not_null (s);
  *p = q;
  return s;
}

static struct jnode *jvalue (const char **p);

static void
jadd (struct jnode *parent, struct jnode *kid)
{
  parent->kids = realloc (parent->kids, (parent->n + 1) * sizeof kid);
  cr_assert_not_null (parent->kids);
  parent->kids[parent->n++] = kid;
}

static struct jnode *
jvalue (const char **p)
{
  struct jnode *j = calloc (1, sizeof *j);

  cr_assert_not_null (j);
  jws (p);
  switch (**p)
    {
    case '{':
      j->type = J_OBJ;
      (*p)++;
      jws (p);
      if (**p == '}')
        {
          (*p)++;
          break;
        }
      for (;;)
        {
          struct jnode *kid;
          char *key;

          jws (p);
          if (**p != '"')
            JFAIL (*p, "expected a member name");
          key = jstring (p);
          for (size_t i = 0; i < j->n; i++)
            if (strcmp (j->kids[i]->key, key) == 0)
              JFAIL (*p, "duplicate member name");
          jws (p);
          if (**p != ':')
            JFAIL (*p, "expected ':'");
          (*p)++;
          kid = jvalue (p);
          kid->key = key;
          jadd (j, kid);
          jws (p);
          if (**p == ',')
            {
              (*p)++;
              continue;
            }
          if (**p == '}')
            {
              (*p)++;
              break;
            }
          JFAIL (*p, "expected ',' or '}'");
        }
      break;
    case '[':
      j->type = J_ARR;
      (*p)++;
      jws (p);
      if (**p == ']')
        {
          (*p)++;
          break;
        }
      for (;;)
        {
          jadd (j, jvalue (p));
          jws (p);
          if (**p == ',')
            {
              (*p)++;
              continue;
            }
          if (**p == ']')
            {
              (*p)++;
              break;
            }
          JFAIL (*p, "expected ',' or ']'");
        }
      break;
    case '"':
      j->type = J_STR;
      j->text = jstring (p);
      break;
    case 't':
      if (strncmp (*p, "true", 4) != 0)
        JFAIL (*p, "bad literal");
      j->type = J_TRUE;
      *p += 4;
      break;
    case 'f':
      if (strncmp (*p, "false", 5) != 0)
        JFAIL (*p, "bad literal");
      j->type = J_FALSE;
      *p += 5;
      break;
    case 'n':
      if (strncmp (*p, "null", 4) != 0)
        JFAIL (*p, "bad literal");
      j->type = J_NULL;
      *p += 4;
      break;
    default:
      j->type = J_NUM;
      j->text = jnumber (p);
      break;
    }
  return j;
}

static struct jnode *
jparse (const char *text)
{
  const char *p = text;
  struct jnode *j;

  jstart = text;
  j = jvalue (&p);
  jws (&p);
  if (*p)
    JFAIL (p, "text after the value");
  return j;
}

static void
jfree (struct jnode *j)
{
  for (size_t i = 0; i < j->n; i++)
    jfree (j->kids[i]);
  free (j->kids);
  free (j->key);
  free (j->text);
  free (j);
}

static struct jnode *
jget (const struct jnode *obj, const char *key)
{
  cr_assert_eq (obj->type, J_OBJ, "looking up %s in a non-object", key);
  for (size_t i = 0; i < obj->n; i++)
    if (strcmp (obj->kids[i]->key, key) == 0)
      return obj->kids[i];
  cr_assert_fail ("JSON: no member \"%s\"", key);
  return NULL;
}

/* A number member. */
static double
jget_num (const struct jnode *obj, const char *key)
{
  const struct jnode *j = jget (obj, key);

  cr_assert_eq (j->type, J_NUM, "%s is not a number", key);
  return strtod (j->text, NULL);
}

/* An unsigned integer member, exactly. */
static uint64_t
jget_u64 (const struct jnode *obj, const char *key)
{
  const struct jnode *j = jget (obj, key);
  char *end;
  uint64_t v;

  cr_assert_eq (j->type, J_NUM, "%s is not a number", key);
  cr_assert (isdigit ((unsigned char)j->text[0]), "%s is not unsigned: %s", key,
             j->text);
  v = strtoull (j->text, &end, 10);
  cr_assert_eq (*end, 0, "%s is not an integer: %s", key, j->text);
  return v;
}

static void
check_json_instance (const struct jnode *in, size_t i)
{
  const struct fs_snapshot *fs = &fs2[i];
  const struct jnode *wb;
  /* name start size block_size journal, the counters, writeback,
   * held_blocks held_bytes oldest_age_s saved_bytes.
   */
  size_t nkeys = 5 + NCOUNTERS + 1 + 4;

  cr_assert_eq (in->type, J_OBJ);
  cr_assert_eq (in->n, nkeys, "instance %zu has %zu members, not %zu", i, in->n,
                nkeys);
  cr_assert_eq (jget (in, "name")->type, J_STR);
  cr_assert_str_eq (jget (in, "name")->text, fs->name);
  cr_assert_eq (jget_u64 (in, "start"), fs->start);
  cr_assert_eq (jget_u64 (in, "size"), fs->size);
  cr_assert_eq (jget_u64 (in, "block_size"), fs->block_size);
  cr_assert_eq (jget (in, "journal")->type, fs->journal ? J_TRUE : J_FALSE);
  for (size_t k = 0; k < NCOUNTERS; k++)
    cr_assert_eq (jget_u64 (in, counters[k].name), counter_value (i, k),
                  "%s of instance %zu", counters[k].name, i);
  wb = jget (in, "writeback");
  cr_assert_eq (wb->type, J_OBJ);
  cr_assert_eq (wb->n, WB_NTRIGGERS);
  for (int t = 0; t < WB_NTRIGGERS; t++)
    cr_assert_eq (jget_u64 (wb, triggers[t]), writeback_value (i, t),
                  "writeback.%s of instance %zu", triggers[t], i);
  cr_assert_eq (jget_u64 (in, "held_blocks"), fs->held_blocks);
  cr_assert_eq (jget_u64 (in, "held_bytes"), fs->held_bytes);
  cr_assert_eq (jget (in, "oldest_age_s")->type, J_NUM);
  cr_assert_float_eq (strtod (jget (in, "oldest_age_s")->text, NULL),
                      fs->oldest_age_s, 0.0005);
  cr_assert_eq (jget_u64 (in, "saved_bytes"),
                saved_blocks (i) * fs->block_size);
}

static void
check_json_store (struct jnode *j, const struct stats_snapshot *s)
{
  struct jnode *w = jget (j, "store_writes"), *f = jget (j, "store_flushes");

  cr_assert_eq (w->type, J_OBJ);
  cr_assert_eq (f->type, J_OBJ);
  cr_assert_eq (w->n, ST_NTRIGGERS);
  cr_assert_eq (f->n, ST_NTRIGGERS);
  for (int t = 0; t < ST_NTRIGGERS; t++)
    {
      cr_assert_eq (jget_u64 (w, st_trigger_names[t]), s->store_writes[t]);
      cr_assert_eq (jget_u64 (f, st_trigger_names[t]), s->store_flushes[t]);
    }
  cr_assert_eq (jget_u64 (j, "store_flushes_skipped"), 31);
}

Test (stats, json)
{
  struct stats_snapshot s = make_snapshot ();
  char *out = print (stats_print_json, &s);
  struct jnode *j = jparse (out), *in;

  cr_assert_eq (j->type, J_OBJ);
  cr_assert_eq (j->n, 18, "top level has %zu members", j->n);
  cr_assert_float_eq (jget_num (j, "holds_stale_s"), 0, 0.0005);
  cr_assert_eq (jget (j, "fenced")->type, J_NULL);
  cr_assert_eq (jget_u64 (j, "store_errors"), 4);
  cr_assert_eq (jget_u64 (j, "writeback_errors"), 3);
  cr_assert_eq (jget_u64 (j, "drain_failures"), 0);
  cr_assert_eq (jget_u64 (j, "last_error_time"), 1700000000);
  check_json_store (j, &s);
  cr_assert_eq (jget (j, "policy")->type, J_STR);
  cr_assert_str_eq (jget (j, "policy")->text, "lazy");
  cr_assert_eq (jget_u64 (j, "max_age_s"), 5400);
  cr_assert_eq (jget_u64 (j, "max_held"), 1048576);
  cr_assert_eq (jget_u64 (j, "client_writes"), 11);
  cr_assert_eq (jget_u64 (j, "client_reads"), UINT64_MAX);
  cr_assert_eq (jget_u64 (j, "client_flushes"), 13);
  cr_assert_eq (jget_u64 (j, "layout_checks"), 21);
  cr_assert_eq (jget_u64 (j, "layout_rereads"), 2);
  in = jget (j, "instances");
  cr_assert_eq (in->type, J_ARR);
  cr_assert_eq (in->n, 2);
  check_json_instance (in->kids[0], 0);
  check_json_instance (in->kids[1], 1);
  jfree (j);
  free (out);
}

Test (stats, json_no_instances)
{
  struct stats_snapshot s = make_snapshot ();
  char *out;
  struct jnode *j;

  s.n = 0;
  s.fs = NULL;
  out = print (stats_print_json, &s);
  j = jparse (out);
  cr_assert_eq (jget (j, "instances")->type, J_ARR);
  cr_assert_eq (jget (j, "instances")->n, 0);
  cr_assert_eq (jget_u64 (j, "client_flushes"), 13);
  jfree (j);
  free (out);
}

Test (stats, json_fenced)
{
  struct stats_snapshot s = make_snapshot ();
  char *out;
  struct jnode *j;

  s.fenced = "the \"lock\" was lost \\ to client.4";
  out = print (stats_print_json, &s);
  j = jparse (out);
  cr_assert_eq (j->n, 18);
  cr_assert_eq (jget (j, "fenced")->type, J_STR);
  cr_assert_str_eq (jget (j, "fenced")->text, s.fenced);
  jfree (j);
  free (out);
}

/* A drain that failed shows in every format. */
Test (stats, drain_failures)
{
  struct stats_snapshot s = make_snapshot ();
  char *out;
  struct jnode *j;

  s.drain_failures = 2;
  out = print (stats_print_text, &s);
  cr_assert_not_null (strstr (out, "\ndrains failed: 2 (the server served "
                                   "on)\nstore requests:"),
                      "%s", out);
  free (out);
  out = print (stats_print_json, &s);
  j = jparse (out);
  cr_assert_eq (jget_u64 (j, "drain_failures"), 2);
  jfree (j);
  free (out);
  out = print (stats_print_prometheus, &s);
  cr_assert_not_null (strstr (out, "\next4lazy_drain_failures_total 2\n"));
  free (out);
}

/* ---- Prometheus exposition text --------------------------------------- */

#define MAX_METRICS 64
#define MAX_SAMPLES 128

struct prom
{
  char type_name[MAX_METRICS][80], type[MAX_METRICS][16];
  size_t ntypes;
  char help_name[MAX_METRICS][80];
  size_t nhelps;
  char series[MAX_SAMPLES][160], value[MAX_SAMPLES][32];
  size_t nsamples;
};

static int
metric_char (int c, int first)
{
  return isalpha (c) || c == '_' || c == ':' || (!first && isdigit (c));
}

static const char *
prom_type (const struct prom *pr, const char *name)
{
  for (size_t i = 0; i < pr->ntypes; i++)
    if (strcmp (pr->type_name[i], name) == 0)
      return pr->type[i];
  return NULL;
}

/* Parse the exposition text: comments are well-formed HELP or TYPE
 * lines, at most one of each per metric, TYPE before the metric's first
 * sample; samples are NAME{LABEL="VALUE",...} VALUE with no series
 * given twice.
 */
static void
prom_parse (char *out, struct prom *pr)
{
  char *p = out, *line;

  memset (pr, 0, sizeof *pr);
  while ((line = next_line (&p)))
    {
      char name[80], kind[16], *q = line;
      size_t n = 0;

      cr_assert_neq (*line, 0, "empty line");
      if (strncmp (line, "# HELP ", 7) == 0)
        {
          int text = 0;

          cr_assert (sscanf (line + 7, "%79s %n", name, &text) == 1 && text > 0
                         && line[7 + text],
                     "HELP without text: %s", line);
          for (size_t i = 0; i < pr->nhelps; i++)
            cr_assert_str_neq (pr->help_name[i], name, "second HELP for %s",
                               name);
          cr_assert_lt (pr->nhelps, MAX_METRICS);
          strcpy (pr->help_name[pr->nhelps++], name);
          continue;
        }
      if (strncmp (line, "# TYPE ", 7) == 0)
        {
          int end = 0;

          cr_assert (sscanf (line + 7, "%79s %15s%n", name, kind, &end) == 2
                         && line[7 + end] == 0,
                     "bad TYPE line: %s", line);
          cr_assert (strcmp (kind, "counter") == 0
                         || strcmp (kind, "gauge") == 0
                         || strcmp (kind, "untyped") == 0,
                     "unexpected type: %s", line);
          cr_assert_null (prom_type (pr, name), "second TYPE for %s", name);
          for (size_t i = 0; i < pr->nsamples; i++)
            cr_assert (strncmp (pr->series[i], name, strlen (name)) != 0
                           || pr->series[i][strlen (name)] != '{',
                       "TYPE for %s after its samples", name);
          cr_assert_lt (pr->ntypes, MAX_METRICS);
          strcpy (pr->type_name[pr->ntypes], name);
          strcpy (pr->type[pr->ntypes++], kind);
          continue;
        }
      cr_assert_neq (*line, '#', "unexpected comment: %s", line);

      /* A sample. */
      while (metric_char ((unsigned char)*q, q == line))
        q++;
      n = q - line;
      cr_assert (n > 0 && n < sizeof name, "bad metric name: %s", line);
      memcpy (name, line, n);
      name[n] = 0;
      cr_assert_not_null (prom_type (pr, name), "no TYPE before %s", line);
      if (strcmp (prom_type (pr, name), "counter") == 0)
        cr_assert (n > 6 && strcmp (name + n - 6, "_total") == 0,
                   "counter %s does not end in _total", name);
      if (*q == '{')
        {
          q++;
          while (*q != '}')
            {
              const char *l = q;

              while (metric_char ((unsigned char)*q, q == l))
                q++;
              cr_assert (q > l && q[0] == '=' && q[1] == '"', "bad label in %s",
                         line);
              q += 2;
              while (*q && *q != '"' && *q != '\\' && *q != '\n')
                q++;
              cr_assert_eq (*q, '"', "bad label value in %s", line);
              q++;
              if (*q == ',')
                q++;
              else
                cr_assert_eq (*q, '}', "bad label list in %s", line);
            }
          q++;
        }
      cr_assert_eq (*q, ' ', "no value in %s", line);
      cr_assert_lt (pr->nsamples, MAX_SAMPLES);
      cr_assert_lt ((size_t)(q - line), sizeof pr->series[0]);
      memcpy (pr->series[pr->nsamples], line, q - line);
      pr->series[pr->nsamples][q - line] = 0;
      q++;
      {
        char *end;

        strtod (q, &end);
        cr_assert (end > q && *end == 0, "bad value in %s", line);
      }
      cr_assert_lt (strlen (q), sizeof pr->value[0]);
      for (size_t i = 0; i < pr->nsamples; i++)
        cr_assert_str_neq (pr->series[i], pr->series[pr->nsamples],
                           "series given twice: %s", line);
      strcpy (pr->value[pr->nsamples++], q);
    }
}

/* A series name, formatted (the result lasts until the next call). */
static const char *sname (const char *fmt, ...)
    __attribute__ ((format (printf, 1, 2)));

static const char *
sname (const char *fmt, ...)
{
  static char buf[256];
  va_list ap;
  int n;

  va_start (ap, fmt);
  n = vsnprintf (buf, sizeof buf, fmt, ap);
  va_end (ap);
  cr_assert (n > 0 && (size_t)n < sizeof buf);
  return buf;
}

static const char *
prom_value (const struct prom *pr, const char *series)
{
  for (size_t i = 0; i < pr->nsamples; i++)
    if (strcmp (pr->series[i], series) == 0)
      return pr->value[i];
  cr_assert_fail ("no sample %s", series);
  return NULL;
}

static void
expect_u64 (const struct prom *pr, const char *series, uint64_t want)
{
  char w[32];

  snprintf (w, sizeof w, "%" PRIu64, want);
  cr_assert_str_eq (prom_value (pr, series), w, "%s", series);
}

Test (stats, prometheus)
{
  struct stats_snapshot s = make_snapshot ();
  char *out = print (stats_print_prometheus, &s);
  struct prom *pr = malloc (sizeof *pr);

  cr_assert_not_null (pr);
  prom_parse (out, pr);

  cr_assert_str_eq (prom_type (pr, "ext4lazy_client_requests_total"),
                    "counter");
  expect_u64 (pr, "ext4lazy_client_requests_total{op=\"write\"}", 11);
  expect_u64 (pr, "ext4lazy_client_requests_total{op=\"read\"}", UINT64_MAX);
  expect_u64 (pr, "ext4lazy_client_requests_total{op=\"flush\"}", 13);

  for (size_t k = 0; k < NCOUNTERS; k++)
    {
      char metric[80];

      snprintf (metric, sizeof metric, "ext4lazy_%s_total", counters[k].name);
      cr_assert_not_null (prom_type (pr, metric), "no TYPE for %s", metric);
      cr_assert_str_eq (prom_type (pr, metric), "counter");
      for (size_t i = 0; i < 2; i++)
        {
          expect_u64 (pr, sname ("%s{instance=\"%s\"}", metric, fs2[i].name),
                      counter_value (i, k));
        }
    }

  cr_assert_str_eq (prom_type (pr, "ext4lazy_writeback_blocks_total"),
                    "counter");
  for (size_t i = 0; i < 2; i++)
    for (int t = 0; t < WB_NTRIGGERS; t++)
      {
        expect_u64 (pr,
                    sname ("ext4lazy_writeback_blocks_total{instance=\"%s\","
                           "trigger=\"%s\"}",
                           fs2[i].name, triggers[t]),
                    writeback_value (i, t));
      }

  cr_assert_str_eq (prom_type (pr, "ext4lazy_saved_bytes_total"), "counter");
  for (size_t i = 0; i < 2; i++)
    expect_u64 (
        pr, sname ("ext4lazy_saved_bytes_total{instance=\"%s\"}", fs2[i].name),
        saved_blocks (i) * fs2[i].block_size);

  cr_assert_str_eq (prom_type (pr, "ext4lazy_held_blocks"), "gauge");
  cr_assert_str_eq (prom_type (pr, "ext4lazy_held_bytes"), "gauge");
  cr_assert_str_eq (prom_type (pr, "ext4lazy_oldest_hold_seconds"), "gauge");
  for (size_t i = 0; i < 2; i++)
    {
      const char *age;

      expect_u64 (pr,
                  sname ("ext4lazy_held_blocks{instance=\"%s\"}", fs2[i].name),
                  fs2[i].held_blocks);
      expect_u64 (pr,
                  sname ("ext4lazy_held_bytes{instance=\"%s\"}", fs2[i].name),
                  fs2[i].held_bytes);
      age = prom_value (
          pr,
          sname ("ext4lazy_oldest_hold_seconds{instance=\"%s\"}", fs2[i].name));
      cr_assert_float_eq (strtod (age, NULL), fs2[i].oldest_age_s, 0.0005,
                          "oldest_hold_seconds of %s: %s", fs2[i].name, age);
    }

  cr_assert_str_eq (prom_type (pr, "ext4lazy_layout_checks_total"), "counter");
  cr_assert_str_eq (prom_type (pr, "ext4lazy_layout_rereads_total"), "counter");
  expect_u64 (pr, "ext4lazy_layout_checks_total", 21);
  expect_u64 (pr, "ext4lazy_layout_rereads_total", 2);
  cr_assert_str_eq (prom_type (pr, "ext4lazy_store_errors_total"), "counter");
  cr_assert_str_eq (prom_type (pr, "ext4lazy_last_error_timestamp_seconds"),
                    "gauge");
  expect_u64 (pr, "ext4lazy_store_errors_total", 4);
  expect_u64 (pr, "ext4lazy_writeback_errors_total", 3);
  expect_u64 (pr, "ext4lazy_drain_failures_total", 0);
  expect_u64 (pr, "ext4lazy_last_error_timestamp_seconds", 1700000000);

  cr_assert_str_eq (prom_type (pr, "ext4lazy_fenced"), "gauge");
  expect_u64 (pr, "ext4lazy_fenced", 0);
  cr_assert_str_eq (prom_type (pr, "ext4lazy_holds_stale_seconds"), "gauge");
  cr_assert_float_eq (
      strtod (prom_value (pr, "ext4lazy_holds_stale_seconds"), NULL), 0,
      0.0005);
  cr_assert_str_eq (prom_type (pr, "ext4lazy_store_requests_total"), "counter");
  for (int t = 0; t < ST_NTRIGGERS; t++)
    {
      expect_u64 (pr,
                  sname ("ext4lazy_store_requests_total{op=\"write\","
                         "trigger=\"%s\"}",
                         st_trigger_names[t]),
                  s.store_writes[t]);
      expect_u64 (pr,
                  sname ("ext4lazy_store_requests_total{op=\"flush\","
                         "trigger=\"%s\"}",
                         st_trigger_names[t]),
                  s.store_flushes[t]);
    }
  expect_u64 (pr, "ext4lazy_store_flushes_skipped_total", 31);

  /* Nothing else: 3 client series, the 2 layout counters, the 4 error
   * series (drains included), the fenced and stale-holds gauges, the
   * store's writes and flushes by trigger and skipped flushes, and per
   * instance the counters, the write-back triggers, saved bytes and 3
   * gauges.
   */
  cr_assert_eq (pr->nsamples,
                3 + 2 + 4 + 2 + 2 * ST_NTRIGGERS + 1
                    + 2 * (NCOUNTERS + WB_NTRIGGERS + 1 + 3),
                "%zu samples", pr->nsamples);
  free (pr);
  free (out);
}

Test (stats, prometheus_no_instances)
{
  struct stats_snapshot s = make_snapshot ();
  char *out;
  struct prom *pr = malloc (sizeof *pr);

  cr_assert_not_null (pr);
  s.n = 0;
  s.fs = NULL;
  out = print (stats_print_prometheus, &s);
  prom_parse (out, pr);
  cr_assert_eq (pr->nsamples, 11 + 2 * ST_NTRIGGERS + 1);
  expect_u64 (pr, "ext4lazy_client_requests_total{op=\"write\"}", 11);
  free (pr);
  free (out);
}

/* ---- the list of holds ------------------------------------------------- */

static const struct held_inode inodes0[] = {
  { 12, TFIELD_ATIME },
  { 13, TFIELD_MTIME | TFIELD_CTIME | TFIELD_CRTIME | TFIELD_VERSION },
};

/* One of each shape: an in-place hold with two records, one whose
 * store read failed, an absorbed journal block, a pending one.
 */
static const struct held_block holds4[] = {
  { .fs = "ext4@1048576",
    .off = 1200128,
    .len = 4096,
    .kind = HOLD_INPLACE,
    .cls = TCLASS_TIME,
    .age_s = 4.3,
    .deadline_in_s = 86395.7,
    .deadline_unix = 1700000000,
    .n_inodes = 2,
    .inodes = inodes0 },
  { .fs = "ext4@1048576",
    .off = 1204224,
    .len = 4096,
    .kind = HOLD_INPLACE,
    .cls = TCLASS_ATIME,
    .age_s = 725,
    .deadline_in_s = 200000,
    .deadline_unix = 1700000001,
    .store_err = -EIO },
  { .fs = "ext4@1048576",
    .off = 9437184,
    .len = 4096,
    .kind = HOLD_JABSORBED,
    .cls = TCLASS_ATIME,
    .seq = 7,
    .age_s = 0.05,
    .deadline_in_s = -0.2,
    .deadline_unix = 1700000002 },
  { .fs = "other",
    .off = 9441280,
    .len = 1024,
    .kind = HOLD_JPENDING,
    .cls = TCLASS_TIME,
    .seq = 8,
    .age_s = 4000,
    .deadline_in_s = 7300,
    .deadline_unix = -5 },
};
#define NHOLDS (sizeof holds4 / sizeof holds4[0])

static char *
print_holds (bool json, size_t n)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  struct holds_printer p;

  cr_assert_not_null (f);
  holds_print_begin (&p, f, json);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq (holds_print_one (&p, &holds4[i]), 0);
  holds_print_end (&p);
  cr_assert_eq (fclose (f), 0);
  cr_assert_eq (strlen (buf), len, "NUL byte in the output");
  return buf;
}

Test (holds, kind_names)
{
  cr_assert_str_eq (stats_hold_kind_name (HOLD_INPLACE), "inplace");
  cr_assert_str_eq (stats_hold_kind_name (HOLD_JPENDING), "journal-pending");
  cr_assert_str_eq (stats_hold_kind_name (HOLD_JABSORBED), "journal-absorbed");
  cr_assert_str_eq (stats_hold_kind_name (HOLD_JCOMMIT), "journal-commit");
}

Test (holds, text)
{
  char *out = print_holds (false, NHOLDS);

  cr_assert_str_eq (
      out,
      "KIND             CLASS FILESYSTEM                 OFFSET      AGE  "
      "DEADLINE  DETAIL\n"
      "inplace          time  ext4@1048576              1200128     4.3s    "
      "23h59m  ino 12 atime; ino 13 ctime,mtime,crtime,version\n"
      "inplace          atime ext4@1048576              1204224   12m05s     "
      "2d07h  store read failed: Input/output error\n"
      "journal-absorbed atime ext4@1048576              9437184     0.1s       "
      "due  seq 7\n"
      "journal-pending  time  other                     9441280    1h06m     "
      "2h01m  seq 8\n"
      "4 blocks held, 13312 bytes\n");
  free (out);
}

Test (holds, text_empty)
{
  char *out = print_holds (false, 0);

  cr_assert_str_eq (out,
                    "KIND             CLASS FILESYSTEM                 OFFSET "
                    "     AGE  DEADLINE  DETAIL\n"
                    "0 blocks held, 0 bytes\n");
  free (out);
}

/* The members every hold has, then those of its kind. */
static void
check_json_hold (const struct jnode *j, const struct held_block *hb)
{
  bool inplace = hb->kind == HOLD_INPLACE;
  size_t nkeys = 8 + (inplace ? 1 + (hb->store_err != 0) : 1);

  cr_assert_eq (j->type, J_OBJ);
  cr_assert_eq (j->n, nkeys, "hold at %" PRIu64 ": %zu members", hb->off, j->n);
  cr_assert_str_eq (jget (j, "kind")->text, stats_hold_kind_name (hb->kind));
  cr_assert_str_eq (jget (j, "class")->text, tclass_name (hb->cls));
  cr_assert_str_eq (jget (j, "fs")->text, hb->fs);
  cr_assert_eq (jget_u64 (j, "offset"), hb->off);
  cr_assert_eq (jget_u64 (j, "length"), hb->len);
  cr_assert_float_eq (strtod (jget (j, "age_s")->text, NULL), hb->age_s,
                      0.0005);
  cr_assert_float_eq (strtod (jget (j, "deadline_in_s")->text, NULL),
                      hb->deadline_in_s, 0.0005);
  cr_assert_eq (strtoll (jget (j, "deadline_unix")->text, NULL, 10),
                hb->deadline_unix);
  if (!inplace)
    {
      cr_assert_eq (jget_u64 (j, "seq"), hb->seq);
      return;
    }
  if (hb->store_err)
    cr_assert_str_eq (jget (j, "error")->text, strerror (-hb->store_err));
  cr_assert_eq (jget (j, "inodes")->type, J_ARR);
  cr_assert_eq (jget (j, "inodes")->n, hb->n_inodes);
}

/* The "fields" of an inode record are names, in that order. */
static void
check_json_fields (const struct jnode *ino, const char *const *names, size_t n)
{
  const struct jnode *f = jget (ino, "fields");

  cr_assert_eq (ino->n, 2);
  cr_assert_eq (f->type, J_ARR);
  cr_assert_eq (f->n, n);
  for (size_t i = 0; i < n; i++)
    {
      cr_assert_eq (f->kids[i]->type, J_STR);
      cr_assert_str_eq (f->kids[i]->text, names[i]);
    }
}

Test (holds, json)
{
  static const char *const f12[] = { "atime" };
  static const char *const f13[] = { "ctime", "mtime", "crtime", "version" };
  char *out = print_holds (true, NHOLDS);
  struct jnode *j = jparse (out), *h, *ino;

  cr_assert_eq (j->type, J_OBJ);
  cr_assert_eq (j->n, 3);
  cr_assert_eq (jget_u64 (j, "held_blocks"), NHOLDS);
  cr_assert_eq (jget_u64 (j, "held_bytes"), 3 * 4096 + 1024);
  h = jget (j, "holds");
  cr_assert_eq (h->type, J_ARR);
  cr_assert_eq (h->n, NHOLDS);
  for (size_t i = 0; i < NHOLDS; i++)
    check_json_hold (h->kids[i], &holds4[i]);
  ino = jget (h->kids[0], "inodes");
  cr_assert_eq (jget_u64 (ino->kids[0], "ino"), 12);
  check_json_fields (ino->kids[0], f12, 1);
  cr_assert_eq (jget_u64 (ino->kids[1], "ino"), 13);
  check_json_fields (ino->kids[1], f13, 4);
  jfree (j);
  free (out);
}

Test (holds, json_empty)
{
  char *out = print_holds (true, 0);

  cr_assert_str_eq (out, "{\"holds\":[],\"held_blocks\":0,\"held_bytes\":0}\n");
  jfree (jparse (out));
  free (out);
}

/* Hold figures from the last stats, when the hold table was busy: the
 * text, JSON and Prometheus say how old they are, or that they are
 * unknown.
 */
Test (stats, holds_stale)
{
  struct stats_snapshot s = make_snapshot ();
  char *out, *p, *line;
  struct jnode *j;
  struct prom *pr = malloc (sizeof *pr);
  bool seen = false;

  cr_assert_not_null (pr);
  s.holds_stale_s = 2.5;
  out = print (stats_print_text, &s);
  for (p = out; (line = next_line (&p)) != NULL;)
    seen |= strcmp (line, "held now: as of 2.5s ago (the hold table is busy: "
                          "a write-back waits on the store)")
            == 0;
  cr_assert (seen, "the text says the hold figures are old");
  free (out);
  out = print (stats_print_json, &s);
  j = jparse (out);
  cr_assert_float_eq (jget_num (j, "holds_stale_s"), 2.5, 0.0005);
  jfree (j);
  free (out);
  s.holds_stale_s = -1;
  out = print (stats_print_prometheus, &s);
  prom_parse (out, pr);
  cr_assert_float_eq (
      strtod (prom_value (pr, "ext4lazy_holds_stale_seconds"), NULL), -1,
      0.0005);
  free (out);
  out = print (stats_print_text, &s);
  cr_assert_not_null (
      strstr (out, "held now: unknown (the hold table is busy"));
  free (out);
  free (pr);
}
