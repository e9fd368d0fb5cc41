/* SPDX-License-Identifier: BSD-3-Clause */
/* backend-impl.h --- what backend.c shares with its implementations,
 * and the helpers of backend-common.c they all use.
 *
 * The files call downwards only:
 *
 *   backend.c          open by kind (one table), batches, dispatch
 *   backend-psync.c, backend-uring.c, backend-nbd.c, backend-rbd.c
 *   backend-common.c   helpers every implementation uses
 *
 * backend.c does everything that does not depend on how bytes move:
 * opening and probing a file or device, splitting batches at flush barriers,
 * O_DIRECT alignment (bounce buffers, read-modify-write), zeroing and
 * trimming, extents and the tests' fault hook.  It also
 * decides which requests run as plain syscalls (backend_run_sync)
 * rather than through ops->run: buffered writes, a lone buffered read
 * and a lone flush.
 * An implementation only runs what it is given, a group of aligned
 * READ/WRITE requests or one FLUSH, to completion, and calls
 * backend_trace for each request that succeeded.
 *
 * A store that is not a file descriptor (the NBD and RBD backends)
 * opens itself and brings its own sync, zero, trim, cache and extents
 * (the optional members of backend_ops); backend.c still does the
 * batches, barriers, alignment, bounds, the fault hook and the error
 * sequence around them.
 */
#ifndef EXT4LAZY_BACKEND_IMPL_H
#define EXT4LAZY_BACKEND_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend.h"

struct backend_ops
{
  const char *name;
  enum backend_kind kind; /* what backend_kind says of a store using it */
  /* Open cfg's store that is not a file descriptor: sets b's size,
   * caps, direct and impl.  Returns 0 or -errno, with the failed step
   * in cfg's errbuf.  NULL: a file or device, opened by backend.c.
   */
  int (*open) (const struct backend_config *cfg, struct backend *b);
  /* Can the implementation run here at all (io_uring: sysctl, seccomp,
   * kernel)?  Returns 0 or -errno; backend_open then falls back to the
   * plain syscalls with one notice.  NULL: it always can.
   */
  int (*probe) (void);
  /* Prepare the implementation (called once from backend_open, after
   * open).
   */
  int (*init) (struct backend *b);
  void (*fini) (struct backend *b);
  /* Run n READ/WRITE requests (no FLUSH among them), or exactly one
   * FLUSH, to completion.  Sets each bio's result; returns 0 or the
   * first -errno.
   */
  int (*run) (struct backend *b, struct bio *v, size_t n);

  /* A store that is not a file descriptor sets these; NULL means the
   * file or device code of backend.c.  Each is called with a request
   * already checked against the size and the writable cap.
   */
  /* Make completed writes durable (untraced; FUA's second half). */
  int (*sync) (struct backend *b);
  /* Zero in place, honouring BIO_MAY_TRIM, BIO_FAST and BIO_FUA.
   * Returns 0, -EOPNOTSUPP (the store cannot zero: backend.c writes
   * zeroes, or fails a BIO_FAST zero with -ENOTSUP), -ENOTSUP (a
   * BIO_FAST zero would not be fast) or another -errno.
   */
  int (*zero) (struct backend *b, const struct bio *bio);
  /* Trim (advisory), honouring BIO_FUA.  Returns 0 or -errno. */
  int (*trim) (struct backend *b, const struct bio *bio);
  int (*cache) (struct backend *b, uint64_t len, uint64_t off);
  int (*extents) (struct backend *b, uint64_t len, uint64_t off,
                  backend_extent_fn fn, void *opaque);
  /* Read the store's size again (backend_refresh_size).  Returns 0 or
   * -errno.  NULL: the file or device code of backend.c.
   */
  int (*refresh) (struct backend *b);
  /* Close everything that would not survive a fork, and open it again
   * (backend_suspend, backend_resume).  NULL: nothing to do.
   */
  void (*suspend) (struct backend *b);
  int (*resume) (struct backend *b, char *errbuf, size_t size);
  /* Is this server still the store's only writer (backend_watch)?
   * Fences the store when it is not.  Returns 0 or -errno (the store
   * did not answer).  NULL: a store with no lock to lose.
   */
  int (*watch) (struct backend *b);
  /* Release the store's lock (backend_release).  NULL: a file or
   * device (backend.c), or a store with no lock.
   */
  void (*release) (struct backend *b);
};

#define RMW_STRIPES 64

struct backend
{
  const struct backend_ops *ops;
  /* A file or device: the plain syscalls (backend-psync.c), for what a
   * ring would only slow down (backend_run_sync); NULL otherwise.
   */
  const struct backend_ops *plain;
  int fd; /* -1 for a store that is not a file descriptor */
  /* Only grows, in backend_refresh_size: read it once per request. */
  _Atomic uint64_t size;
  struct backend_caps caps;
  bool direct;            /* requests must be aligned to caps.align (bounced) */
  backend_trace_fn trace; /* set at open, never changed */
  backend_fault_fn fault; /* likewise */
  /* The error sequence (backend.h): failed syncs, and the errno of the
   * latest; see errseq_record.
   */
  _Atomic uint64_t errseq;
  /* Fenced (backend_fence): 0 no, 1 the reason is being set, 2 yes.
   * fence_why is written once, before the state becomes 2.
   */
  atomic_int fence_state;
  char fence_why[160];
  /* Set the first time the store refuses ZERO_RANGE or PUNCH_HOLE. */
  _Atomic bool no_zero_range, no_punch;

  /* Serialises SEEK_DATA/SEEK_HOLE pairs so extents are consistent. */
  pthread_mutex_t lseek_lock;
  /* Striped locks over aligned sectors: held across a read-modify-write
   * of an edge sector in O_DIRECT mode.
   */
  pthread_mutex_t rmw_lock[RMW_STRIPES];

  /* Implementation state. */
  void *impl;

  /* Requests the store failed, and when the latest did (backend.h). */
  _Atomic uint64_t failures, last_failure;
  /* Reads, writes and flushes issued to the store: syscalls, ring
   * entries, NBD commands, RBD requests (adjacent writes merged into
   * one count once).  Tests compare it with the bios they gave.
   */
  _Atomic uint64_t issued;
};

/* The implementations (backend.c's table of kinds; the meson build
 * compiles backend-nbd.c and backend-rbd.c only with libnbd, librbd).
 */
extern const struct backend_ops backend_psync_ops;
extern const struct backend_ops backend_uring_ops;
extern const struct backend_ops backend_nbd_ops;
extern const struct backend_ops backend_rbd_ops;

/* backend-common.c */

/* How many bytes adjacent writes to a file or device may go as, in one
 * request: about what a device takes at once (max_sectors_kb is 1280
 * on most), and with the smallest ext4 block (1 KiB) no more buffers
 * than IOV_MAX.
 */
#define BACKEND_RUN_BYTES (1u << 20)

/* Run requests as plain syscalls (what ops->run accepts, through
 * b->plain): the dispatch fallback for requests a ring would only slow
 * down, and for a thread that cannot have a ring.
 */
extern int backend_run_sync (struct backend *b, struct bio *v, size_t n);

/* How long a busy store is tried again before it is refused, in ms
 * (backend_config.lock_wait_ns, or its default).
 */
extern uint64_t backend_lock_wait_ms (const struct backend_config *cfg);

/* backend-psync.c: run one READ, WRITE or FLUSH of a file or device
 * as plain syscalls (short transfers continued), counted in issued.
 * Returns 0 or -errno; does not trace.
 */
extern int backend_psync_one (struct backend *b, struct bio *bio);

/* Trace a completed bio (no-op when b has no trace callback). */
extern void backend_trace (const struct backend *b, const struct bio *bio);

/* The end of ops->run: trace every request of v[0..n) that succeeded,
 * return the first -errno (0 if none).
 */
extern int backend_trace_run (const struct backend *b, const struct bio *v,
                              size_t n);

/* For a store without native FUA: are there FUA writes in v[0..n) that
 * succeeded (and so need a sync)?  And after that sync returned r: fail
 * them with r when it failed.
 */
extern bool backend_fua_pending (const struct bio *v, size_t n);
extern void backend_fua_synced (struct bio *v, size_t n, int r);

/* Merging adjacent writes.  backend_order puts in ord[0..n) the
 * indexes of v[0..n): reads first, then writes by offset.  (A group's
 * requests are in flight together, so a caller never puts two that
 * overlap in one.)  backend_run_len says how many of ord[k ..) may go
 * as one request with ord[k]: writes, each starting where the one
 * before ends, max_bytes in all and at most max_m of them (the most
 * buffers one vectored call takes, IOV_MAX; SIZE_MAX for none); 1
 * when ord[k] is a read.  A run is capped by its bytes, not by how
 * many blocks it has: BACKEND_RUN_BYTES on a file or device, the
 * remote's own on a remote.
 */
extern void backend_order (const struct bio *v, size_t n, size_t *ord);
extern size_t backend_run_len (const struct bio *v, const size_t *ord, size_t k,
                               size_t n, size_t max_m, uint64_t max_bytes);

/* Testing: does the fault hook (backend_config.fault) fail bio?  Then
 * bio has its result.
 */
extern bool backend_inject (struct backend *b, struct bio *bio);

/* Make completed writes durable, as the second half of a FUA request
 * the store cannot do natively: a FLUSH to the fault hook and counted
 * in the error sequence when it fails, but not traced.  Returns 0 or
 * -errno.
 */
extern int backend_sync (struct backend *b);

/* Count a failed sync in the error sequence (backend.h), for a store
 * that makes a request durable itself (native FUA).
 */
extern void backend_errseq_record (struct backend *b, int err);

#endif /* EXT4LAZY_BACKEND_IMPL_H */
