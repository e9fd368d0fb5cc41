/* test-engine-flight.c --- store I/O that runs without the hold lock
 * (writeback.c, flight_run_locked and the claimed writes): while a
 * FLUSH's write of a held block is stuck in the store (a fault hook that
 * blocks, as a store that stopped answering), reads of held blocks and
 * the stats answer; a real write of the same block waits for that
 * write, so that the older held copy never lands after it.  The same
 * for the memory cap's write-back, made by a client's write, for a
 * client's real inode-table write and for a zero: a second write of the
 * same block waits for the first and is judged against it.  And for the
 * write-back of a re-read layout that moved what is held.
 *
 * The image is a 16 MiB ext4 (4 KiB blocks, no journal); time-only and
 * real blocks come from debugfs changing f1's inode on a copy.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <ext2fs/ext2fs.h>

#include "engine.h"
#include "stats.h"
#include "testimg.h"
#include "testpoint.h"
#include "testutil.h"

#define MiB (1024 * 1024)

static struct img im;

/* The stuck store: the first write of stuck_off after arming waits
 * until released (with STUCK_FLUSH, the first sync: zeroes and trims
 * are not shown to the hook, the sync of a FUA one is).
 */
#define STUCK_FLUSH (UINT64_MAX - 1)
static struct gate stuck = GATE_INIT;
static _Atomic uint64_t stuck_off = UINT64_MAX;
static atomic_bool armed;

static int
stuck_store (const struct bio *bio)
{
  uint64_t off = atomic_load (&stuck_off);
  bool hit = off == STUCK_FLUSH ? bio->op == BIO_FLUSH
                                : bio->op == BIO_WRITE && off >= bio->offset
                                      && off < bio->offset + bio->len;

  if (hit && atomic_exchange (&armed, false))
    gate_pass (&stuck);
  return 0;
}

static void
arm (uint64_t off)
{
  gate_close (&stuck);
  atomic_store (&stuck_off, off);
  atomic_store (&armed, true);
}

static void
wait_entered (void)
{
  gate_wait (&stuck, 1);
}

static void
release (void)
{
  gate_open (&stuck);
}

static void
setup (void)
{
  img_fs_new (&im, "ext4lazy-flight", 16 * MiB, 40);
}

static void
teardown (void)
{
  release ();
  img_fs_del (&im);
}

TestSuite (engine_flight, .init = setup, .fini = teardown, .timeout = 120);

/* f1's inode block after debugfs ran cmds on a copy of the image: its
 * offset.
 */
static uint64_t
f1_block (const char *cmds, char *blk)
{
  uint64_t off;

  img_fs_imap (&im, "f1", &off);
  img_fs_changed (&im, cmds, off, blk);
  return off;
}

/* A read of the held block and a stats snapshot. */
static void *
read_thread (void *p)
{
  struct call *c = p;
  struct stats_snapshot s;

  c->r = engine_pread (c->e, c->buf, 4096, c->off);
  engine_stats (c->e, &s);
  engine_stats_free (&s);
  atomic_store (&c->done, true);
  return NULL;
}

/* Run fn (c) on a thread with the store stuck at off (arm), and while
 * it is stuck, then2 (c2) on another, given up to secs to be done; then
 * release the store and join both.  Returns whether then2 was done while
 * the store was stuck.
 */
static bool
done_while_stuck (void *(*fn) (void *), struct call *c, uint64_t off,
                  void *(*then2) (void *), struct call *c2, int secs)
{
  pthread_t a, b;
  bool done;

  arm (off);
  cr_assert_eq (pthread_create (&a, NULL, fn, c), 0);
  wait_entered ();
  cr_assert_eq (pthread_create (&b, NULL, then2, c2), 0);
  done = call_done_within (c2, secs);
  release ();
  pthread_join (a, NULL);
  pthread_join (b, NULL);
  return done;
}

/* done_while_stuck with a read of a held block and the stats (rd):
 * whether they answered while the store was stuck.
 */
static bool
read_while_stuck (void *(*fn) (void *), struct call *c, uint64_t off,
                  struct call *rd)
{
  return done_while_stuck (fn, c, off, read_thread, rd, 10);
}

/* What a test of a stuck write-back expects once the store answered:
 * the read and the stats (rd) answered while WHAT was stuck, the read
 * gave the held block, the request c that made the write-back
 * succeeded, and the store has the hold at off.
 */
static void
expect_answered_then_written (bool answered, const char *what,
                              const struct call *c, const struct call *rd,
                              const char *held, uint64_t off)
{
  char back[4096];

  cr_expect (answered, "a read and the stats answer while %s is stuck", what);
  cr_expect_eq (rd->r, 0);
  cr_expect_eq (memcmp (rd->buf, held, 4096), 0,
                "the read gives the held block");
  cr_expect_eq (c->r, 0,
                "the request behind %s succeeds once the store "
                "answers",
                what);
  file_block (im.path, off, back);
  cr_expect_eq (memcmp (back, held, 4096), 0, "the store has the hold");
}

Test (engine_flight, reads_and_stats_do_not_wait_for_a_stuck_flush)
{
  struct engine *e = img_fs_engine (&im, stuck_store);
  char held[4096], got[4096];
  uint64_t off = f1_block ("set_inode_field /f1 atime 20200101", held);
  struct call fl = { .e = e }, rd = { .e = e, .off = off, .buf = got };
  bool answered;

  cr_assert_eq (engine_pwrite (e, held, 4096, off, 0), 0);
  answered = read_while_stuck (call_flush, &fl, off, &rd);
  expect_answered_then_written (answered, "a FLUSH", &fl, &rd, held, off);
  engine_close (e);
}

Test (engine_flight, a_real_write_lands_after_the_held_copy)
{
  struct engine *e = img_fs_engine (&im, stuck_store);
  char held[4096], real[4096], back[4096];
  uint64_t off = f1_block ("set_inode_field /f1 atime 20200101", held);
  struct call fl = { .e = e };
  struct call wr = { .e = e, .buf = real };
  pthread_t a, b;

  f1_block ("set_inode_field /f1 atime 20200101\n"
            "set_inode_field /f1 links_count 7",
            real);
  wr.off = off;
  cr_assert_neq (memcmp (real, held, 4096), 0);
  cr_assert_eq (engine_pwrite (e, held, 4096, off, 0), 0);
  arm (off);
  cr_assert_eq (pthread_create (&a, NULL, call_flush, &fl), 0);
  wait_entered ();
  /* The FLUSH's copy of the hold is on its way (stuck before it
   * reaches the store); the real write must not overtake it.
   */
  cr_assert_eq (pthread_create (&b, NULL, call_write, &wr), 0);
  call_done_within (&wr, 1); /* time for a write that does not wait to land */
  release ();
  pthread_join (a, NULL);
  pthread_join (b, NULL);
  cr_expect_eq (wr.r, 0, "the real write succeeds");
  cr_expect_eq (fl.r, 0, "the FLUSH succeeds");
  file_block (im.path, off, back);
  cr_expect_eq (memcmp (back, real, 4096), 0,
                "the store has the real write, not the older held copy");
  cr_expect_eq (engine_pread (e, back, 4096, off), 0);
  cr_expect_eq (memcmp (back, real, 4096), 0, "and the client reads it");
  engine_close (e);
}

/* f1's block held through e with an atime change (a, at *off_a), and
 * f30's block as cmd leaves it (b); returns f30's block's offset, which
 * is another block.
 */
static uint64_t
f1_held_f30_changed (struct engine *e, char *a, uint64_t *off_a,
                     const char *cmd, char *b)
{
  uint64_t off_b;

  *off_a = f1_block ("set_inode_field /f1 atime 20200101", a);
  img_fs_imap (&im, "f30", &off_b);
  cr_assert_neq (*off_a, off_b, "f1 and f30 in different inode-table blocks");
  img_fs_changed (&im, cmd, off_b, b);
  cr_assert_eq (engine_pwrite (e, a, 4096, *off_a, 0), 0);
  return off_b;
}

/* The memory cap's write-back (one block's cap, a second block held)
 * runs from the client's write, its store I/O without the hold lock:
 * while its write of the older block is stuck, a read of that held block
 * and the stats answer.  Once the store answers, both blocks are in it.
 */
Test (engine_flight, the_memory_cap_does_not_stall_reads)
{
  struct engine *e = img_fs_engine_cap (&im, stuck_store, 4096);
  char a[4096], b[4096], got[4096], back[4096];
  uint64_t off_a, off_b = f1_held_f30_changed (
                      e, a, &off_a, "set_inode_field /f30 atime 20200101", b);
  struct call wr = { .e = e, .off = off_b, .buf = b },
              rd = { .e = e, .off = off_a, .buf = got };
  bool answered;

  file_block (im.path, off_a, back);
  cr_assert_neq (memcmp (back, a, 4096), 0, "under the cap: held");
  answered = read_while_stuck (call_write, &wr, off_a, &rd);
  expect_answered_then_written (answered, "the cap's write-back", &wr, &rd, a,
                                off_a);
  file_block (im.path, off_b, back);
  cr_expect_eq (memcmp (back, b, 4096), 0, "and the newer, to the low mark");
  engine_close (e);
}

/* A client's real inode-table write runs its store write without the
 * hold lock: while it is stuck, a read of another, held block and the
 * stats answer.
 */
Test (engine_flight, a_stuck_inode_table_write_does_not_stall_reads)
{
  struct engine *e = img_fs_engine (&im, stuck_store);
  char a[4096], b[4096], got[4096], back[4096];
  uint64_t off_a, off_b = f1_held_f30_changed (
                      e, a, &off_a, "set_inode_field /f30 links_count 7", b);
  struct call wr = { .e = e, .off = off_b, .buf = b },
              rd = { .e = e, .off = off_a, .buf = got };
  bool answered;

  answered = read_while_stuck (call_write, &wr, off_b, &rd);
  cr_expect (answered, "a read and the stats answer while a real "
                       "inode-table write is stuck");
  cr_expect_eq (rd.r, 0);
  cr_expect_eq (memcmp (got, a, 4096), 0, "the read gives the held block");
  cr_expect_eq (wr.r, 0, "the write succeeds once the store answers");
  file_block (im.path, off_b, back);
  cr_expect_eq (memcmp (back, b, 4096), 0, "the store has the real write");
  file_block (im.path, off_a, back);
  cr_expect_neq (memcmp (back, a, 4096), 0, "the other block stays held");
  engine_close (e);
}

/* A write of a block whose real write is on its way waits for it and is
 * judged against it: the first sets links_count, the second puts it back
 * and changes the atime.  Against the store's old block the second would
 * look time-only and be held, leaving the first in the store; against
 * the first it is real, and the store ends with it.
 */
Test (engine_flight, a_second_write_is_judged_against_the_first)
{
  struct engine *e = img_fs_engine (&im, stuck_store);
  char first[4096], second[4096], back[4096];
  uint64_t off = f1_block ("set_inode_field /f1 links_count 7", first);
  struct call w1 = { .e = e, .off = off, .buf = first },
              w2 = { .e = e, .off = off, .buf = second };
  pthread_t a, b;

  f1_block ("set_inode_field /f1 atime 20200101", second);
  arm (off);
  cr_assert_eq (pthread_create (&a, NULL, call_write, &w1), 0);
  wait_entered ();
  cr_assert_eq (pthread_create (&b, NULL, call_write, &w2), 0);
  call_done_within (&w2, 1); /* time for a write that does not wait to land */
  release ();
  pthread_join (a, NULL);
  pthread_join (b, NULL);
  cr_expect_eq (w1.r, 0);
  cr_expect_eq (w2.r, 0);
  file_block (im.path, off, back);
  cr_expect_eq (memcmp (back, second, 4096), 0,
                "the store has the second write, not the first");
  cr_expect_eq (engine_pread (e, back, 4096, off), 0);
  cr_expect_eq (memcmp (back, second, 4096), 0, "and the client reads it");
  engine_close (e);
}

/* A zero of an inode-table block runs without the hold lock too: while
 * it is stuck (its FUA sync), a read of a held block and the stats answer; the
 * zero then drops a hold it covers and leaves the other.
 */
Test (engine_flight, a_stuck_zero_does_not_stall_reads)
{
  struct engine *e = img_fs_engine (&im, stuck_store);
  char a[4096], b[4096], got[4096], back[4096], zero[4096] = { 0 };
  uint64_t off_a, off_b = f1_held_f30_changed (
                      e, a, &off_a, "set_inode_field /f30 atime 20200101", b);
  struct call zr = { .e = e, .off = off_b },
              rd = { .e = e, .off = off_a, .buf = got };
  bool answered;

  cr_assert_eq (engine_pwrite (e, b, 4096, off_b, 0), 0);
  answered = read_while_stuck (call_zero, &zr, STUCK_FLUSH, &rd);
  cr_expect (answered, "a read and the stats answer while a zero is stuck");
  cr_expect_eq (rd.r, 0);
  cr_expect_eq (memcmp (got, a, 4096), 0, "the read gives the held block");
  cr_expect_eq (zr.r, 0, "the zero succeeds once the store answers");
  file_block (im.path, off_b, back);
  cr_expect_eq (memcmp (back, zero, 4096), 0, "the store has the zero");
  cr_expect_eq (engine_pread (e, back, 4096, off_b), 0);
  cr_expect_eq (memcmp (back, zero, 4096), 0, "the zeroed hold is gone");
  cr_expect_eq (engine_pread (e, back, 4096, off_a), 0);
  cr_expect_eq (memcmp (back, a, 4096), 0, "the other hold stays");
  engine_close (e);
}

/* The superblock's magic: where it is in block 0. */
#define MAGIC_AT                                                               \
  (SUPERBLOCK_OFFSET + offsetof (struct ext2_super_block, s_magic))

/* f1's block held through e with an atime change (held), then block 0
 * written without the superblock's magic (sb), so that the next write
 * re-reads a layout with no inode tables.  Returns f1's block's offset.
 */
static uint64_t
hold_f1_then_unmake_fs (struct engine *e, char *held, char *sb)
{
  uint64_t off = f1_block ("set_inode_field /f1 atime 20200101", held);
  char back[4096];

  cr_assert_eq (engine_pwrite (e, held, 4096, off, 0), 0);
  file_block (im.path, 0, sb);
  memset (sb + MAGIC_AT, 0, 2);
  cr_assert_eq (engine_pwrite (e, sb, 4096, 0, 0), 0);
  file_block (im.path, off, back);
  cr_assert_neq (memcmp (back, held, 4096), 0, "f1's block still held");
  return off;
}

/* A layout re-read that finds the inode tables gone (the client wrote a
 * superblock without its magic) writes every hold back, with the layout
 * lock held only for reading: while that write-back is stuck, a read of
 * the held block and the stats answer.  The write that made the re-read
 * then succeeds, and the store has the hold.
 */
Test (engine_flight, a_stuck_layout_writeback_does_not_stall_reads)
{
  struct engine *e = img_fs_engine (&im, stuck_store);
  char held[4096], sb[4096], data[4096] = { 1 }, got[4096];
  uint64_t off = hold_f1_then_unmake_fs (e, held, sb);
  struct call wr = { .e = e, .off = 12 * MiB, .buf = data },
              rd = { .e = e, .off = off, .buf = got };
  bool answered;

  answered = read_while_stuck (call_write, &wr, off, &rd);
  expect_answered_then_written (answered, "the layout's write-back", &wr, &rd,
                                held, off);
  cr_expect_eq (layout_rereads (e), 1);
  engine_close (e);
}

/* A write made while the write-back before a re-read is stuck (the
 * magic put back) waits for the re-read and is classified by the layout
 * it reads, without the filesystem; seen there as a layout change, it
 * makes the next write read the layout again, which finds the
 * filesystem: a later atime change of f1 is held.  Classified by the
 * layout in use instead, the write would match it, mark nothing stale,
 * and leave the engine without the filesystem.
 */
Test (engine_flight, a_write_during_the_reread_waits_for_the_new_layout)
{
  struct engine *e = img_fs_engine (&im, stuck_store);
  char held[4096], sb[4096], data[4096] = { 1 }, later[4096], back[4096];
  uint64_t off = hold_f1_then_unmake_fs (e, held, sb);
  struct call wr = { .e = e, .off = 12 * MiB, .buf = data },
              fix = { .e = e, .off = 0, .buf = sb };

  file_block (im.path, 0, sb);
  sb[MAGIC_AT] = EXT2_SUPER_MAGIC & 0xff;
  sb[MAGIC_AT + 1] = EXT2_SUPER_MAGIC >> 8;
  /* A second for the write to reach the re-read it waits for. */
  done_while_stuck (call_write, &wr, off, call_write, &fix, 1);
  cr_expect_eq (fix.r, 0);
  cr_expect_eq (wr.r, 0);
  file_block (im.path, off, back);
  cr_expect_eq (memcmp (back, held, 4096), 0, "the store has the hold");
  cr_expect_eq (layout_rereads (e), 1);
  f1_block ("set_inode_field /f1 atime 20210101", later);
  cr_assert_eq (engine_pwrite (e, later, 4096, off, 0), 0);
  cr_expect_eq (layout_rereads (e), 2,
                "the superblock write was seen as a layout change");
  file_block (im.path, off, back);
  cr_expect_eq (memcmp (back, held, 4096), 0,
                "a later atime change is held: the inode tables are known");
  engine_close (e);
}

/* ---- a read between a hold's drop and its counters -------------------- */

/* The reader stops after its store read (TP_PREAD_READ) until the first
 * hold_drop that follows reaches the point between counting the drop and
 * lowering the counters (TP_HOLD_DROP), which lets it go and gives it up
 * to a second to end (with the fix it waits for the hold lock, which the
 * dropping thread holds: then the drop goes on without it).
 */
static struct gate tp_reader = GATE_INIT;
static atomic_bool tp_read_armed, tp_drop_armed;
static struct call *tp_call;

static void
tp_hook (enum test_point p)
{
  if (p == TP_PREAD_READ && atomic_exchange (&tp_read_armed, false))
    {
      atomic_store (&tp_drop_armed, true);
      gate_pass (&tp_reader);
    }
  else if (p == TP_HOLD_DROP && atomic_exchange (&tp_drop_armed, false))
    {
      gate_open (&tp_reader);
      call_done_within (tp_call, 1);
    }
}

static void *
read2_thread (void *p)
{
  struct call *c = p;

  c->r = engine_pread (c->e, c->buf, 8192, c->off);
  atomic_store (&c->done, true);
  return NULL;
}

/* A read whose store read came before a hold's write-back, and whose
 * look at the hold table comes while that hold leaves it, gives the held
 * content: the drop is counted before the counters that say a hold may
 * be there fall (hold_drop), so the read sees one or the other move and
 * reads again under the lock.  (Counted after them, the read gave the
 * store's block from before the acknowledged write.)
 */
Test (engine_flight, a_read_during_a_drop_sees_the_written_block)
{
  struct engine *e = img_fs_engine (&im, NULL);
  char held[4096], got[8192], orig[4096];
  uint64_t off = f1_block ("set_inode_field /f1 atime 20200101", held);
  struct call rd = { .e = e, .off = off, .buf = got };
  pthread_t t;

  file_block (im.path, off, orig);
  cr_assert_neq (memcmp (orig, held, 4096), 0);
  cr_assert_eq (engine_pwrite (e, held, 4096, off, 0), 0);
  tp_call = &rd;
  gate_close (&tp_reader);
  atomic_store (&tp_read_armed, true);
  test_point_hook = tp_hook;
  /* Two blocks, the second not held: the read goes to the store. */
  cr_assert_eq (pthread_create (&t, NULL, read2_thread, &rd), 0);
  gate_wait (&tp_reader, 1);
  cr_assert_eq (engine_flush (e), 0);
  pthread_join (t, NULL);
  test_point_hook = NULL;
  cr_assert_eq (rd.r, 0);
  cr_expect_eq (memcmp (got, held, 4096), 0,
                "the read gives the acknowledged write, not the store's "
                "block from before it");
  engine_close (e);
}

/* ---- the store's extents ---------------------------------------------- */

/* The extents query stops at its first extent (TP_EXTENTS) until the
 * test opens the gate: a store whose block status does not answer.
 */
static struct gate tp_extents = GATE_INIT;
static atomic_bool tp_extents_armed;

static void
tp_extents_hook (enum test_point p)
{
  if (p == TP_EXTENTS && atomic_exchange (&tp_extents_armed, false))
    gate_pass (&tp_extents);
}

static int
count_extent (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  (void)off;
  (void)len;
  (void)hole;
  ++*(int *)opaque;
  return 0;
}

static void *
extents_thread (void *p)
{
  struct call *c = p;
  int n = 0;

  c->r = engine_extents (c->e, 16 * MiB, 0, count_extent, &n);
  if (c->r == 0 && n == 0)
    c->r = -ENODATA;
  atomic_store (&c->done, true);
  return NULL;
}

/* The store's extents are asked without the hold lock: while the query
 * is stuck, a read of a held block, the stats and a FLUSH answer.
 */
Test (engine_flight, a_stuck_extents_query_does_not_stall_reads)
{
  struct engine *e = img_fs_engine (&im, NULL);
  char held[4096], got[4096];
  uint64_t off = f1_block ("set_inode_field /f1 atime 20200101", held);
  struct call ex = { .e = e }, rd = { .e = e, .off = off, .buf = got };
  pthread_t a, b;
  bool answered;

  cr_assert_eq (engine_pwrite (e, held, 4096, off, 0), 0);
  gate_close (&tp_extents);
  atomic_store (&tp_extents_armed, true);
  test_point_hook = tp_extents_hook;
  cr_assert_eq (pthread_create (&a, NULL, extents_thread, &ex), 0);
  gate_wait (&tp_extents, 1);
  cr_assert_eq (pthread_create (&b, NULL, call_read_stats_flush, &rd), 0);
  answered = call_done_within (&rd, 10);
  gate_open (&tp_extents);
  pthread_join (a, NULL);
  pthread_join (b, NULL);
  test_point_hook = NULL;
  cr_expect (answered, "a read, the stats and a FLUSH answer while the "
                       "extents query is stuck");
  cr_expect_eq (rd.r, 0);
  cr_expect_eq (memcmp (got, held, 4096), 0, "the read gives the hold");
  cr_expect_eq (ex.r, 0, "the extents once the store answers");
  engine_close (e);
}

/* ---- a re-read of the layout among steady reads ----------------------- */

/* Readers that always overlap: each stays in its read (after its store
 * read, the layout lock held for reading) until the next one is in, or
 * a tenth of a second passed.  With readers preferred, a writer of the
 * layout lock waits for as long as that goes on.
 */
#define READERS 3
static pthread_mutex_t relay_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t relay_cond = PTHREAD_COND_INITIALIZER;
static uint64_t relay_in; /* reads that came to TP_PREAD_READ */
static atomic_bool relay_stop;

static void
relay_hook (enum test_point p)
{
  struct timespec ts;
  uint64_t mine;

  if (p != TP_PREAD_READ)
    return;
  clock_gettime (CLOCK_REALTIME, &ts);
  ts.tv_nsec += 100 * 1000000;
  if (ts.tv_nsec >= 1000000000)
    {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
  pthread_mutex_lock (&relay_lock);
  mine = ++relay_in;
  pthread_cond_broadcast (&relay_cond);
  while (relay_in == mine && !atomic_load (&relay_stop))
    if (pthread_cond_timedwait (&relay_cond, &relay_lock, &ts) != 0)
      break;
  pthread_mutex_unlock (&relay_lock);
}

static void *
steady_reader (void *p)
{
  struct call *c = p;
  char buf[8192];

  while (!atomic_load (&relay_stop))
    if (engine_pread (c->e, buf, sizeof buf, c->off) < 0)
      c->r = -EIO;
  return NULL;
}

/* A write that makes the layout be read again (it was marked stale)
 * completes while reads of inode tables go on without a pause.
 */
Test (engine_flight, a_reread_completes_among_steady_reads)
{
  struct engine *e = img_fs_engine (&im, NULL);
  char held[4096], gdt[4096], data[4096] = { 1 };
  uint64_t off = f1_block ("set_inode_field /f1 atime 20200101", held);
  struct call rd[READERS], wr = { .e = e, .off = 12 * MiB, .buf = data };
  pthread_t t[READERS], w;
  bool done;

  cr_assert_eq (engine_pwrite (e, held, 4096, off, 0), 0);
  /* The reserved GDT block, written as it is: the layout is stale. */
  file_block (im.path, 2 * 4096, gdt);
  cr_assert_eq (engine_pwrite (e, gdt, 4096, 2 * 4096, 0), 0);
  cr_assert_eq (layout_rereads (e), 0);
  test_point_hook = relay_hook;
  for (int i = 0; i < READERS; i++)
    {
      rd[i] = (struct call){ .e = e, .off = off };
      cr_assert_eq (pthread_create (&t[i], NULL, steady_reader, &rd[i]), 0);
    }
  /* The readers overlap before the write begins. */
  for (int i = 0; i < 500; i++)
    {
      pthread_mutex_lock (&relay_lock);
      done = relay_in > 2 * READERS;
      pthread_mutex_unlock (&relay_lock);
      if (done)
        break;
      usleep (10000);
    }
  cr_assert_eq (pthread_create (&w, NULL, call_write, &wr), 0);
  done = call_done_within (&wr, 10);
  atomic_store (&relay_stop, true);
  pthread_mutex_lock (&relay_lock);
  pthread_cond_broadcast (&relay_cond);
  pthread_mutex_unlock (&relay_lock);
  for (int i = 0; i < READERS; i++)
    pthread_join (t[i], NULL);
  pthread_join (w, NULL);
  test_point_hook = NULL;
  cr_expect (done, "the write and its re-read completed among the reads");
  cr_expect_eq (wr.r, 0);
  cr_expect_eq (layout_rereads (e), 1);
  for (int i = 0; i < READERS; i++)
    cr_expect_eq (rd[i].r, 0);
  engine_close (e);
}
