/* stats.c --- print a snapshot of the engine's counters. */
#include <inttypes.h>

#include "stats.h"

const char *const wb_trigger_names[WB_NTRIGGERS] = {
  [WB_FLUSH] = "flush",       [WB_FUA] = "fua",
  [WB_REAL] = "real",         [WB_DEADLINE] = "deadline",
  [WB_EXPLICIT] = "explicit", [WB_DISCONNECT] = "disconnect",
  [WB_SHUTDOWN] = "shutdown", [WB_MEMORY] = "memory",
  [WB_LAYOUT] = "layout",     [WB_JOURNAL] = "journal",
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
  X (discarded, "dead journal holds discarded (policy=lazy)")                  \
  X (writeback_batches, "write-back batches submitted")

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
    }
}

void
stats_print_json (FILE *f, const struct stats_snapshot *s)
{
  fprintf (f,
           "{\"policy\":\"%s\",\"max_age_s\":%" PRIu64 ",\"max_held\":%" PRIu64
           ",\"client_writes\":%" PRIu64 ",\"client_reads\":%" PRIu64
           ",\"client_flushes\":%" PRIu64 ",\"instances\":[",
           s->policy, s->max_age_s, s->max_held, s->client_writes,
           s->client_reads, s->client_flushes);
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
               ",\"oldest_age_s\":%.3f}",
               fs->held_blocks, fs->held_bytes, fs->oldest_age_s);
    }
  fprintf (f, "]}\n");
}

void
stats_print_prometheus (FILE *f, const struct stats_snapshot *s)
{
  fprintf (f, "# TYPE ext4lazy_client_requests_total counter\n");
  fprintf (f, "ext4lazy_client_requests_total{op=\"write\"} %" PRIu64 "\n",
           s->client_writes);
  fprintf (f, "ext4lazy_client_requests_total{op=\"read\"} %" PRIu64 "\n",
           s->client_reads);
  fprintf (f, "ext4lazy_client_requests_total{op=\"flush\"} %" PRIu64 "\n",
           s->client_flushes);
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
