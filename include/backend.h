/* SPDX-License-Identifier: BSD-3-Clause */
/* backend.h --- backing-store I/O, in batches, through io_uring, psync,
 * an NBD connection or librbd.
 *
 * The backend owns the backing store (the file descriptor of a regular
 * file or a block device, the connections to a remote NBD export, or
 * an open RBD image)
 * and carries out batches of requests.  The
 * write-back path hands it hundreds of blocks and a flush at once, so
 * the unit of work is a batch, not a single request.
 *
 * Batch semantics: the requests of a batch are issued together and may
 * complete in any order, except that a BIO_FLUSH is a barrier: it is
 * issued only after every earlier request of the batch has completed,
 * and later requests wait for it.  Each request gets its own result;
 * backend_submit returns 0 when all succeeded, else the first error.
 * A flush or FUA request can fail although its own syscall succeeded:
 * see "Sync errors" below.
 *
 * Dispatch: backend_submit splits a batch at its flush barriers and
 * decides how each piece runs.  Buffered writes (a group of nothing
 * else) and a lone flush to a file or device always run as plain
 * syscalls, adjacent writes as one, because through io_uring they would
 * only wait for a kernel worker thread; everything else runs through the
 * backend chosen at open.
 *
 * Thread model: any number of threads may call backend_submit at once.
 * The uring backend keeps one ring per calling thread (created on first
 * use, freed when the thread exits or the backend closes), so no lock is
 * taken on the data path.  Requests that are not aligned for O_DIRECT go
 * through bounce buffers; read-modify-write of a shared edge sector is
 * serialised by a striped lock so that concurrent unaligned writes to
 * neighbouring bytes do not lose each other.  The NBD backend shares a
 * few connections among all threads, each connection with a poller
 * thread that completes every thread's commands (backend-nbd.c).
 *
 * The NBD backend (BACKEND_NBD, when built with libnbd) serves any NBD
 * export through libnbd: the same batches, flush barriers, FUA, error
 * sequence, extents and caps, carried as NBD commands; see
 * backend-nbd.c for what each request becomes there.
 *
 * The RBD backend (BACKEND_RBD, when built with librbd's headers and
 * librbd can be loaded) serves a Ceph RBD image through librbd's
 * asynchronous API; see backend-rbd.c.
 *
 * Size: read at open; backend_refresh_size reads it again and takes
 * growth only (a file, device or image grown under a running server),
 * never shrinking what is served.
 *
 * Tracing is per backend: the callback given at open in
 * backend_config.trace sees every operation issued to that backing
 * store, which tests use to check ordering.
 */
#ifndef EXT4LAZY_BACKEND_H
#define EXT4LAZY_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum backend_kind
{
  BACKEND_URING,
  BACKEND_PSYNC,
  BACKEND_NBD, /* path is an NBD URI (libnbd's nbd_connect_uri) */
  BACKEND_RBD, /* path is POOL/IMAGE or POOL/NAMESPACE/IMAGE */
};

enum bio_op
{
  BIO_READ,
  BIO_WRITE,
  BIO_FLUSH, /* fdatasync (NBD: flush); a barrier inside its batch */
  BIO_ZERO,
  BIO_TRIM,
};

/* Request flags. */
#define BIO_FUA 0x1      /* WRITE/ZERO/TRIM: durable before completion */
#define BIO_MAY_TRIM 0x2 /* ZERO: may deallocate */
#define BIO_FAST 0x4     /* ZERO: fail with -ENOTSUP unless zeroing is fast */

struct bio
{
  enum bio_op op;
  uint32_t flags;
  void *buf; /* READ, WRITE: len bytes */
  uint64_t offset;
  uint64_t len;
  int result; /* out: 0 or -errno */
};

/* Tracing: called for every operation issued to the store, after it
 * completed successfully, in completion order, from whichever thread
 * completed it.
 */
typedef void (*backend_trace_fn) (const struct bio *bio);

/* Testing: fault injection.  Called before each read, write and flush
 * is issued to the store, from the issuing thread: a bounced request as
 * its aligned span, the fdatasync of a FUA zero or trim as a FLUSH.
 * Returns 0 to let it run, or -errno to fail it with that error without
 * running it (the error then counts as the store's).
 */
typedef int (*backend_fault_fn) (const struct bio *bio);

struct backend_config
{
  const char *path; /* file or device; BACKEND_NBD: the URI;
                       BACKEND_RBD: the image (rbdlib_parse_spec) */
  enum backend_kind kind;
  bool readonly;
  bool direct;            /* O_DIRECT (not for BACKEND_NBD) */
  backend_trace_fn trace; /* NULL: no tracing */
  backend_fault_fn fault; /* NULL: no faults (only tests set it) */
  /* Testing: with kind BACKEND_URING, act as if io_uring could not be
   * set up (the notice, then psync).
   */
  bool no_uring;
  /* BACKEND_RBD: the Ceph configuration file and client id (NULL:
   * librados's defaults, /etc/ceph/ceph.conf and client.admin).
   */
  const char *ceph_conf;
  const char *ceph_id;
  /* NULL, or where backend_open puts why it failed when it knows more
   * than the errno (libnbd's message for BACKEND_NBD, the failed step
   * for BACKEND_RBD).
   */
  char *errbuf;
  size_t errbuf_size;
  /* BACKEND_NBD, BACKEND_RBD: how long a request may wait for the
   * remote (a reply, or a reconnect) before it fails with -EIO; 0 for
   * the default, 60 s.
   */
  uint64_t io_timeout_ns;
  /* BACKEND_NBD: keep no log of unflushed writes to replay after a
   * reconnect; a reconnect that may have lost some fails the next
   * FLUSH instead.
   */
  bool nbd_replay_off;
  /* Take no lock on the store (storelock.h; RBD: the exclusive lock).
   * Without it, a store another server or qemu has open for writing
   * is refused at open with -EBUSY (why in errbuf), as is a block
   * device opened for writing that is mounted or claimed (O_EXCL); a
   * file on a filesystem without OFD locks with -ENOLCK.  A busy
   * store is tried again first (lock_wait_ns: a server that is
   * draining keeps it until it has written back what it held).
   */
  bool no_lock;
  /* How long a store whose lock another holds is tried again before it
   * is refused; 0 for the default, BACKEND_DEFAULT_LOCK_WAIT_NS.
   */
  uint64_t lock_wait_ns;
};

#define BACKEND_DEFAULT_LOCK_WAIT_NS (30ull * 1000000000)

struct backend;

/* What the store can do, probed at open. */
struct backend_caps
{
  bool blockdev;
  bool can_punch;   /* FALLOC_FL_PUNCH_HOLE (files), BLKDISCARD (devices),
                       NBD trim */
  bool can_extents; /* SEEK_DATA/SEEK_HOLE, NBD base:allocation */
  uint32_t align;   /* O_DIRECT alignment, NBD minimum block size, or 1 */
  uint32_t sector;  /* logical sector size */
  bool writable;
};

/* Open the store and probe it.  When kind is BACKEND_URING and io_uring
 * cannot be set up (or no_uring is set), fall back to psync and log one
 * notice.  Returns 0 or -errno (-EPROTONOSUPPORT for BACKEND_NBD or
 * BACKEND_RBD in a build without it).
 */
extern int backend_open (const struct backend_config *cfg,
                         struct backend **out);
extern void backend_close (struct backend *b);

/* Was this kind built in?  (BACKEND_NBD needs libnbd, BACKEND_RBD
 * librbd's headers; whether librbd loads is rbdlib_available.)
 */
extern bool backend_kind_available (enum backend_kind kind);

/* A store whose connections do not survive fork (RBD: librados runs
 * threads) closes them in backend_suspend and opens them again in
 * backend_resume, which the engine calls before and after the fork.
 * No request may run while the store is suspended.  Returns 0 or
 * -errno, with the failed step in errbuf (may be NULL).
 */
extern void backend_suspend (struct backend *b);
extern int backend_resume (struct backend *b, char *errbuf, size_t size);

extern uint64_t backend_size (const struct backend *b);
/* Read the store's size again; the size served only grows (above).
 * Returns 0 or -errno.
 */
extern int backend_refresh_size (struct backend *b);
extern enum backend_kind backend_kind (const struct backend *b);
extern const char *backend_name (const struct backend *b);
extern const struct backend_caps *backend_caps (const struct backend *b);

/* Carry out a batch (see above).  Returns 0 or the first -errno. */
extern int backend_submit (struct backend *b, struct bio *v, size_t n);

/* Convenience wrappers around a batch of one. */
extern int backend_pread (struct backend *b, void *buf, uint64_t len,
                          uint64_t off);
extern int backend_pwrite (struct backend *b, const void *buf, uint64_t len,
                           uint64_t off, uint32_t flags);
extern int backend_flush (struct backend *b);
extern int backend_zero (struct backend *b, uint64_t len, uint64_t off,
                         uint32_t flags);
extern int backend_trim (struct backend *b, uint64_t len, uint64_t off,
                         uint32_t flags);

/* Sync errors.  Every thread shares the store's file descriptor, and
 * Linux reports a failed page write-back once, to the first fsync or
 * O_DSYNC write on the descriptor after it, whoever issues it (an NBD
 * server's flush likewise covers every connection's writes).  So the
 * backend counts its syncs that fail (a FLUSH, or a FUA write, zero or
 * trim whose sync failed) in an error sequence that also keeps the
 * errno of the latest, and a caller that must report write-back errors
 * compares it with the value it saw last.  Plain reads and writes
 * report their own errors and leave it alone.
 *
 * A sync of a batch that succeeds while the sequence moves (a sync
 * failed here or in another thread after the batch began) fails too,
 * with that errno: the failed sync may have taken its error.  So a
 * batch of writes and a flush that succeeds made those writes durable.
 */
extern uint64_t backend_errseq (struct backend *b);
/* 0 if the sequence is still since, else -errno of the latest failure
 * (-EIO if that is not known).
 */
extern int backend_errseq_check (struct backend *b, uint64_t since);
/* backend_errseq_check against *since, then move *since up to the
 * sequence: each failure is reported once to those that share *since.
 */
extern int backend_errseq_advance (struct backend *b, _Atomic uint64_t *since);

/* How many requests the store failed (read, write, flush, zero or
 * trim, not counting those refused before reaching it), and in *last
 * when the latest did, in seconds since the epoch (0: never).
 */
extern uint64_t backend_failures (struct backend *b, uint64_t *last);
/* Fenced: the store now belongs to another writer (an RBD client that
 * lost its exclusive lock, or was blocklisted).  From then on no
 * request reaches the store: each fails with -EIO.  backend_fence
 * keeps the first reason given (thread-safe); backend_fenced returns
 * it, or NULL while the store is not fenced.
 */
extern void backend_fence (struct backend *b, const char *why);
extern const char *backend_fenced (const struct backend *b);

/* Release the store's lock (storelock.h; a block device's O_EXCL
 * claim; the RBD exclusive lock) for the next server, the store
 * flushed and fenced first (engine_drain): nothing is written to it
 * again.
 */
extern void backend_release (struct backend *b);

/* Whether the store can be lost to another writer while nothing is
 * asked of it (an RBD image's exclusive lock), and the check: it asks
 * the store whether this server still owns it and fences it if not.
 * It may block up to the store's timeout; call it with no lock held.
 * Returns 0, or -errno when the store did not answer (not fenced).
 */
extern bool backend_watched (const struct backend *b);
extern int backend_watch (struct backend *b);

/* Advisory readahead. */
extern int backend_cache (struct backend *b, uint64_t len, uint64_t off);

/* Extents: calls fn for consecutive ranges starting at off covering at
 * least one byte, ascending, with hole = true for ranges that read as
 * zero and hold no data.  Stops early if fn returns non-zero (returned).
 */
typedef int (*backend_extent_fn) (void *opaque, uint64_t off, uint64_t len,
                                  bool hole);
extern int backend_extents (struct backend *b, uint64_t len, uint64_t off,
                            backend_extent_fn fn, void *opaque);

#endif /* EXT4LAZY_BACKEND_H */
