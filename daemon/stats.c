/* SPDX-License-Identifier: BSD-3-Clause */
/* stats.c --- print a snapshot of the engine's counters, and the list
 * of what it holds.
 */
#include <inttypes.h>
#include <string.h>

#include "stats.h"

const char *const wb_trigger_names[WB_NTRIGGERS] = {
  [WB_FLUSH] = "flush",       [WB_FUA] = "fua",
  [WB_REAL] = "real",         [WB_DEADLINE] = "deadline",
  [WB_EXPLICIT] = "explicit", [WB_DISCONNECT] = "disconnect",
  [WB_SHUTDOWN] = "shutdown", [WB_MEMORY] = "memory",
  [WB_LAYOUT] = "layout",     [WB_JOURNAL] = "journal",
};

const char *const st_trigger_names[ST_NTRIGGERS] = {
  [WB_FLUSH] = "flush",       [WB_FUA] = "fua",
  [WB_REAL] = "real",         [WB_DEADLINE] = "deadline",
  [WB_EXPLICIT] = "explicit", [WB_DISCONNECT] = "disconnect",
  [WB_SHUTDOWN] = "shutdown", [WB_MEMORY] = "memory",
  [WB_LAYOUT] = "layout",     [WB_JOURNAL] = "journal",
  [ST_PASS] = "passthrough",  [ST_JPASS] = "journal-passthrough",
};

#define FS_COUNTERS(X)                                                         \
  X (client_writes, "client write requests touching the instance")             \
  X (itable_writes, "inode-table block writes seen")                           \
  X (real_writes, "inode-table block writes classified real")                  \
  X (held, "inode-table block writes held (time-only)")                        \
  X (unchanged, "inode-table block writes identical to the store")             \
  X (superseded, "holds replaced in memory (writes saved)")                    \
  X (dropped, "holds dropped by zero or trim")                                 \
  X (journal_writes, "journal block writes seen")                              \
  X (journal_held, "journal block writes held")                                \
  X (tx_absorbed, "journal transactions absorbed")                             \
  X (tx_real, "journal transactions written as real")                          \
  X (discarded, "dead journal holds discarded")                                \
  X (deadline_met, "absorbed journal holds met in place at their deadline")    \
  X (deadline_copied, "blocks written in place from absorbed logged copies")   \
  X (writeback_batches, "write-back batches submitted")

static uint64_t
saved_bytes (const struct fs_snapshot *fs)
{
  return stats_saved_blocks (&fs->c) * fs->block_size;
}

static uint64_t
sum (const uint64_t *v, int n)
{
  uint64_t t = 0;

  for (int i = 0; i < n; i++)
    t += v[i];
  return t;
}

/* The store's requests: totals, then by trigger where not 0. */
static void
store_print_text (FILE *f, const struct stats_snapshot *s)
{
  fprintf (f,
           "store requests: %" PRIu64 " writes, %" PRIu64 " flushes, %" PRIu64
           " flushes skipped (nothing to flush)\n",
           sum (s->store_writes, ST_NTRIGGERS),
           sum (s->store_flushes, ST_NTRIGGERS), s->store_flushes_skipped);
  fprintf (f, "  writes by trigger:");
  for (int t = 0; t < ST_NTRIGGERS; t++)
    if (s->store_writes[t])
      fprintf (f, " %s=%" PRIu64, st_trigger_names[t], s->store_writes[t]);
  fprintf (f, "\n  flushes by trigger:");
  for (int t = 0; t < ST_NTRIGGERS; t++)
    if (s->store_flushes[t])
      fprintf (f, " %s=%" PRIu64, st_trigger_names[t], s->store_flushes[t]);
  fprintf (f, "\n");
}

static void
store_print_json (FILE *f, const struct stats_snapshot *s)
{
  const uint64_t *v[2] = { s->store_writes, s->store_flushes };
  const char *name[2] = { "store_writes", "store_flushes" };

  for (int k = 0; k < 2; k++)
    {
      fprintf (f, ",\"%s\":{", name[k]);
      for (int t = 0; t < ST_NTRIGGERS; t++)
        fprintf (f, "%s\"%s\":%" PRIu64, t ? "," : "", st_trigger_names[t],
                 v[k][t]);
      fprintf (f, "}");
    }
  fprintf (f, ",\"store_flushes_skipped\":%" PRIu64, s->store_flushes_skipped);
}

static void
store_print_prometheus (FILE *f, const struct stats_snapshot *s)
{
  fprintf (f, "# HELP ext4lazy_store_requests_total store write requests "
              "(writes, zeroes, trims; adjacent writes of a batch once) and "
              "flushes, by trigger\n"
              "# TYPE ext4lazy_store_requests_total counter\n");
  for (int t = 0; t < ST_NTRIGGERS; t++)
    fprintf (f,
             "ext4lazy_store_requests_total{op=\"write\",trigger=\"%s\"} "
             "%" PRIu64 "\n"
             "ext4lazy_store_requests_total{op=\"flush\",trigger=\"%s\"} "
             "%" PRIu64 "\n",
             st_trigger_names[t], s->store_writes[t], st_trigger_names[t],
             s->store_flushes[t]);
  fprintf (f,
           "# HELP ext4lazy_store_flushes_skipped_total flushes not sent: "
           "the store had nothing to flush\n"
           "# TYPE ext4lazy_store_flushes_skipped_total counter\n"
           "ext4lazy_store_flushes_skipped_total %" PRIu64 "\n",
           s->store_flushes_skipped);
}

void
stats_print_text (FILE *f, const struct stats_snapshot *s)
{
  fprintf (f,
           "policy: %s  max-age: %" PRIu64 "s  max-held: %" PRIu64 " bytes\n",
           s->policy, s->max_age_s, s->max_held);
  fprintf (f,
           "client requests: %" PRIu64 " writes, %" PRIu64 " reads, %" PRIu64
           " flushes\n",
           s->client_writes, s->client_reads, s->client_flushes);
  fprintf (
      f, "layout: %" PRIu64 " metadata writes checked, %" PRIu64 " re-reads\n",
      s->layout_checks, s->layout_rereads);
  fprintf (f,
           "errors: %" PRIu64 " store requests, %" PRIu64
           " write-backs failed, the latest at %" PRIu64 "\n",
           s->store_errors, s->writeback_errors, s->last_error_time);
  if (s->drain_failures)
    fprintf (f, "drains failed: %" PRIu64 " (the server served on)\n",
             s->drain_failures);
  if (s->fenced)
    fprintf (f, "fenced: %s\n", s->fenced);
  if (s->holds_stale_s < 0)
    fprintf (f, "held now: unknown (the hold table is busy: a write-back "
                "waits on the store)\n");
  else if (s->holds_stale_s > 0)
    fprintf (f,
             "held now: as of %.1fs ago (the hold table is busy: a "
             "write-back waits on the store)\n",
             s->holds_stale_s);
  store_print_text (f, s);
  for (size_t i = 0; i < s->n; i++)
    {
      const struct fs_snapshot *fs = &s->fs[i];

      fprintf (f,
               "\n%s: offset %" PRIu64 ", %" PRIu64
               " bytes, block size %" PRIu32 "%s\n",
               fs->name, fs->start, fs->size, fs->block_size,
               fs->journal ? ", journal" : "");
#define X(field, text)                                                         \
  fprintf (f, "  %-20s %12" PRIu64 "  %s\n", #field, fs->c.field, text);
      FS_COUNTERS (X)
#undef X
      fprintf (f, "  written back:");
      for (int t = 0; t < WB_NTRIGGERS; t++)
        fprintf (f, " %s=%" PRIu64, wb_trigger_names[t], fs->c.writeback[t]);
      fprintf (f,
               "\n  held now: %" PRIu64 " blocks, %" PRIu64
               " bytes, oldest %.1fs\n",
               fs->held_blocks, fs->held_bytes, fs->oldest_age_s);
      fprintf (f,
               "  saved: %" PRIu64 " blocks, %" PRIu64
               " bytes (superseded + unchanged + discarded)\n",
               stats_saved_blocks (&fs->c), saved_bytes (fs));
    }
}

/* s as a JSON string, or null. */
static void
json_string_or_null (FILE *f, const char *s)
{
  if (!s)
    {
      fputs ("null", f);
      return;
    }
  fputc ('"', f);
  for (; *s; s++)
    if (*s == '"' || *s == '\\')
      fprintf (f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf (f, "\\u%04x", (unsigned)(unsigned char)*s);
    else
      fputc (*s, f);
  fputc ('"', f);
}

void
stats_print_json (FILE *f, const struct stats_snapshot *s)
{
  fprintf (f,
           "{\"policy\":\"%s\",\"max_age_s\":%" PRIu64 ",\"max_held\":%" PRIu64
           ",\"client_writes\":%" PRIu64 ",\"client_reads\":%" PRIu64
           ",\"client_flushes\":%" PRIu64 ",\"layout_checks\":%" PRIu64
           ",\"layout_rereads\":%" PRIu64,
           s->policy, s->max_age_s, s->max_held, s->client_writes,
           s->client_reads, s->client_flushes, s->layout_checks,
           s->layout_rereads);
  store_print_json (f, s);
  fprintf (f, ",\"instances\":[");
  for (size_t i = 0; i < s->n; i++)
    {
      const struct fs_snapshot *fs = &s->fs[i];

      fprintf (f,
               "%s{\"name\":\"%s\",\"start\":%" PRIu64 ",\"size\":%" PRIu64
               ",\"block_size\":%" PRIu32 ",\"journal\":%s",
               i ? "," : "", fs->name, fs->start, fs->size, fs->block_size,
               fs->journal ? "true" : "false");
#define X(field, text) fprintf (f, ",\"%s\":%" PRIu64, #field, fs->c.field);
      FS_COUNTERS (X)
#undef X
      fprintf (f, ",\"writeback\":{");
      for (int t = 0; t < WB_NTRIGGERS; t++)
        fprintf (f, "%s\"%s\":%" PRIu64, t ? "," : "", wb_trigger_names[t],
                 fs->c.writeback[t]);
      fprintf (f,
               "},\"held_blocks\":%" PRIu64 ",\"held_bytes\":%" PRIu64
               ",\"oldest_age_s\":%.3f,\"saved_bytes\":%" PRIu64 "}",
               fs->held_blocks, fs->held_bytes, fs->oldest_age_s,
               saved_bytes (fs));
    }
  fprintf (f,
           "],\"store_errors\":%" PRIu64 ",\"writeback_errors\":%" PRIu64
           ",\"last_error_time\":%" PRIu64 ",\"drain_failures\":%" PRIu64
           ",\"holds_stale_s\":%.3f,\"fenced\":",
           s->store_errors, s->writeback_errors, s->last_error_time,
           s->drain_failures, s->holds_stale_s);
  json_string_or_null (f, s->fenced);
  fprintf (f, "}\n");
}

void
stats_print_prometheus (FILE *f, const struct stats_snapshot *s)
{
  fprintf (f,
           "# HELP ext4lazy_fenced 1 once the store was lost to another "
           "writer: requests fail, nothing is written\n"
           "# TYPE ext4lazy_fenced gauge\next4lazy_fenced %d\n",
           s->fenced != NULL);
  fprintf (f, "# TYPE ext4lazy_client_requests_total counter\n");
  fprintf (f, "ext4lazy_client_requests_total{op=\"write\"} %" PRIu64 "\n",
           s->client_writes);
  fprintf (f, "ext4lazy_client_requests_total{op=\"read\"} %" PRIu64 "\n",
           s->client_reads);
  fprintf (f, "ext4lazy_client_requests_total{op=\"flush\"} %" PRIu64 "\n",
           s->client_flushes);
  fprintf (f,
           "# HELP ext4lazy_layout_checks_total client writes to partition "
           "tables, superblocks or group descriptors checked against the "
           "layout\n# TYPE ext4lazy_layout_checks_total counter\n"
           "ext4lazy_layout_checks_total %" PRIu64 "\n",
           s->layout_checks);
  fprintf (f,
           "# HELP ext4lazy_layout_rereads_total full re-reads of the "
           "layout after a change to what it defines\n"
           "# TYPE ext4lazy_layout_rereads_total counter\n"
           "ext4lazy_layout_rereads_total %" PRIu64 "\n",
           s->layout_rereads);
  fprintf (f,
           "# HELP ext4lazy_store_errors_total requests the backing store "
           "failed\n# TYPE ext4lazy_store_errors_total counter\n"
           "ext4lazy_store_errors_total %" PRIu64 "\n"
           "# HELP ext4lazy_writeback_errors_total write-backs that failed\n"
           "# TYPE ext4lazy_writeback_errors_total counter\n"
           "ext4lazy_writeback_errors_total %" PRIu64 "\n"
           "# HELP ext4lazy_last_error_timestamp_seconds when the latest "
           "store request or write-back failed (0: never)\n"
           "# TYPE ext4lazy_last_error_timestamp_seconds gauge\n"
           "ext4lazy_last_error_timestamp_seconds %" PRIu64 "\n"
           "# HELP ext4lazy_drain_failures_total drains that failed (the "
           "server served on)\n"
           "# TYPE ext4lazy_drain_failures_total counter\n"
           "ext4lazy_drain_failures_total %" PRIu64 "\n",
           s->store_errors, s->writeback_errors, s->last_error_time,
           s->drain_failures);
  store_print_prometheus (f, s);
#define X(field, text)                                                         \
  fprintf (f, "# HELP ext4lazy_" #field "_total " text "\n"                    \
              "# TYPE ext4lazy_" #field "_total counter\n");                   \
  for (size_t i = 0; i < s->n; i++)                                            \
    fprintf (f, "ext4lazy_" #field "_total{instance=\"%s\"} %" PRIu64 "\n",    \
             s->fs[i].name, s->fs[i].c.field);
  FS_COUNTERS (X)
#undef X
  fprintf (f, "# HELP ext4lazy_writeback_blocks_total blocks written back, "
              "by trigger\n# TYPE ext4lazy_writeback_blocks_total counter\n");
  for (size_t i = 0; i < s->n; i++)
    for (int t = 0; t < WB_NTRIGGERS; t++)
      fprintf (f,
               "ext4lazy_writeback_blocks_total{instance=\"%s\","
               "trigger=\"%s\"} %" PRIu64 "\n",
               s->fs[i].name, wb_trigger_names[t], s->fs[i].c.writeback[t]);
  fprintf (f, "# HELP ext4lazy_saved_bytes_total bytes the store did not "
              "write: superseded, unchanged and discarded blocks\n"
              "# TYPE ext4lazy_saved_bytes_total counter\n");
  for (size_t i = 0; i < s->n; i++)
    fprintf (f, "ext4lazy_saved_bytes_total{instance=\"%s\"} %" PRIu64 "\n",
             s->fs[i].name, saved_bytes (&s->fs[i]));
  fprintf (f,
           "# HELP ext4lazy_holds_stale_seconds 0 when the hold figures are "
           "current; else their age (-1: unknown): the hold table was busy\n"
           "# TYPE ext4lazy_holds_stale_seconds gauge\n"
           "ext4lazy_holds_stale_seconds %.3f\n",
           s->holds_stale_s);
  fprintf (f, "# TYPE ext4lazy_held_blocks gauge\n"
              "# TYPE ext4lazy_held_bytes gauge\n"
              "# TYPE ext4lazy_oldest_hold_seconds gauge\n");
  for (size_t i = 0; i < s->n; i++)
    fprintf (f,
             "ext4lazy_held_blocks{instance=\"%s\"} %" PRIu64 "\n"
             "ext4lazy_held_bytes{instance=\"%s\"} %" PRIu64 "\n"
             "ext4lazy_oldest_hold_seconds{instance=\"%s\"} %.3f\n",
             s->fs[i].name, s->fs[i].held_blocks, s->fs[i].name,
             s->fs[i].held_bytes, s->fs[i].name, s->fs[i].oldest_age_s);
}

/* ---- what is held ----------------------------------------------------- */

const char *
stats_hold_kind_name (enum hold_kind k)
{
  switch (k)
    {
    case HOLD_INPLACE:
      return "inplace";
    case HOLD_JPENDING:
      return "journal-pending";
    case HOLD_JABSORBED:
      return "journal-absorbed";
    case HOLD_JCOMMIT:
      return "journal-commit";
    }
  return "?";
}

/* A duration for people: 4.2s, 12m05s, 3h07m, 2d04h; "due" when past. */
static const char *
duration (double s, char *buf, size_t size)
{
  uint64_t t = s < 0 ? 0 : (uint64_t)s;

  if (s < 0)
    snprintf (buf, size, "due");
  else if (s < 60)
    snprintf (buf, size, "%.1fs", s);
  else if (t < 3600)
    snprintf (buf, size, "%" PRIu64 "m%02" PRIu64 "s", t / 60, t % 60);
  else if (t < 86400)
    snprintf (buf, size, "%" PRIu64 "h%02" PRIu64 "m", t / 3600, t % 3600 / 60);
  else
    snprintf (buf, size, "%" PRIu64 "d%02" PRIu64 "h", t / 86400,
              t % 86400 / 3600);
  return buf;
}

/* The names of the bits of mask, separated by sep. */
static void
print_fields (FILE *f, unsigned mask, const char *sep, const char *quote)
{
  const char *s = "";

  for (unsigned bit = 1; bit < 1u << TFIELD_COUNT; bit <<= 1)
    if (mask & bit)
      {
        fprintf (f, "%s%s%s%s", s, quote, tfield_name (bit), quote);
        s = sep;
      }
}

void
holds_print_begin (struct holds_printer *p, FILE *f, bool json)
{
  memset (p, 0, sizeof *p);
  p->f = f;
  p->json = json;
  if (json)
    fprintf (f, "{\"holds\":[");
  else
    fprintf (f, "%-16s %-5s %-18s %14s %8s %9s  %s\n", "KIND", "CLASS",
             "FILESYSTEM", "OFFSET", "AGE", "DEADLINE", "DETAIL");
}

/* The last column of the text table. */
static void
text_detail (FILE *f, const struct held_block *hb)
{
  if (hb->kind != HOLD_INPLACE)
    fprintf (f, "seq %" PRIu32, hb->seq);
  else if (hb->store_err)
    fprintf (f, "store read failed: %s", strerror (-hb->store_err));
  else if (hb->n_inodes == 0)
    fprintf (f, "-");
  for (size_t i = 0; i < hb->n_inodes; i++)
    {
      fprintf (f, "%sino %" PRIu32 " ", i ? "; " : "", hb->inodes[i].ino);
      print_fields (f, hb->inodes[i].fields, ",", "");
    }
}

static void
json_one (FILE *f, const struct held_block *hb, bool first)
{
  fprintf (
      f,
      "%s{\"kind\":\"%s\",\"class\":\"%s\",\"fs\":\"%s\",\"offset\":%" PRIu64
      ",\"length\":%" PRIu32 ",\"age_s\":%.3f,\"deadline_in_s\":%.3f"
      ",\"deadline_unix\":%" PRId64,
      first ? "" : ",", stats_hold_kind_name (hb->kind), tclass_name (hb->cls),
      hb->fs, hb->off, hb->len, hb->age_s, hb->deadline_in_s,
      hb->deadline_unix);
  if (hb->kind != HOLD_INPLACE)
    {
      fprintf (f, ",\"seq\":%" PRIu32 "%s}", hb->seq,
               hb->met ? ",\"met\":true" : "");
      return;
    }
  if (hb->store_err)
    fprintf (f, ",\"error\":\"%s\"", strerror (-hb->store_err));
  fprintf (f, ",\"inodes\":[");
  for (size_t i = 0; i < hb->n_inodes; i++)
    {
      fprintf (f, "%s{\"ino\":%" PRIu32 ",\"fields\":[", i ? "," : "",
               hb->inodes[i].ino);
      print_fields (f, hb->inodes[i].fields, ",", "\"");
      fprintf (f, "]}");
    }
  fprintf (f, "]}");
}

int
holds_print_one (void *printer, const struct held_block *hb)
{
  struct holds_printer *p = printer;
  char age[32], due[32];

  if (p->json)
    json_one (p->f, hb, p->blocks == 0);
  else
    {
      fprintf (p->f, "%-16s %-5s %-18s %14" PRIu64 " %8s %9s  ",
               stats_hold_kind_name (hb->kind), tclass_name (hb->cls), hb->fs,
               hb->off, duration (hb->age_s, age, sizeof age),
               hb->met ? "met" : duration (hb->deadline_in_s, due, sizeof due));
      text_detail (p->f, hb);
      fputc ('\n', p->f);
    }
  p->blocks++;
  p->bytes += hb->len;
  return 0;
}

void
holds_print_end (struct holds_printer *p)
{
  if (p->json)
    fprintf (p->f,
             "],\"held_blocks\":%" PRIu64 ",\"held_bytes\":%" PRIu64 "}\n",
             p->blocks, p->bytes);
  else
    fprintf (p->f, "%" PRIu64 " blocks held, %" PRIu64 " bytes\n", p->blocks,
             p->bytes);
}
