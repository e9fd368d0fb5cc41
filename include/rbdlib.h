/* SPDX-License-Identifier: BSD-3-Clause */
/* rbdlib.h --- what the RBD backend needs from outside the engine:
 * librbd and librados, loaded at run time, and the POOL/IMAGE spec.
 *
 * librbd and librados are large C++ libraries: linked into the plugin,
 * they would cost every server tens of MiB and their start-up work
 * whether or not it serves an RBD image.  So the plugin is built
 * against their headers but loads them (dlopen) only when rbd= is
 * given, and then keeps them for the life of the process (they are
 * never unloaded: their threads and static state do not allow it).
 *
 * The table holds one typed pointer per function the backend calls,
 * named as the function itself, so a call reads R->rbd_open (...) and
 * the compiler checks it against librbd's own prototype.
 *
 * The spec parser needs no library: the plugin checks rbd= with it in
 * any build.
 */
#ifndef EXT4LAZY_RBDLIB_H
#define EXT4LAZY_RBDLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef HAVE_LIBRBD
#include <rados/librados.h>
#include <rbd/librbd.h>

/* X (function) for every function the backend calls. */
#define RBDLIB_RADOS_FUNCTIONS(X)                                              \
  X (rados_create)                                                             \
  X (rados_conf_read_file)                                                     \
  X (rados_conf_parse_env)                                                     \
  X (rados_conf_get)                                                           \
  X (rados_conf_set)                                                           \
  X (rados_connect)                                                            \
  X (rados_shutdown)                                                           \
  X (rados_ioctx_create)                                                       \
  X (rados_ioctx_destroy)                                                      \
  X (rados_ioctx_set_namespace)
#define RBDLIB_RBD_FUNCTIONS(X)                                                \
  X (rbd_open)                                                                 \
  X (rbd_open_read_only)                                                       \
  X (rbd_close)                                                                \
  X (rbd_aio_close)                                                            \
  X (rbd_aio_is_complete)                                                      \
  X (rbd_get_size)                                                             \
  X (rbd_get_features)                                                         \
  X (rbd_get_flags)                                                            \
  X (rbd_aio_create_completion)                                                \
  X (rbd_aio_wait_for_complete)                                                \
  X (rbd_aio_get_return_value)                                                 \
  X (rbd_aio_release)                                                          \
  X (rbd_aio_read2)                                                            \
  X (rbd_aio_write2)                                                           \
  X (rbd_aio_writev)                                                           \
  X (rbd_aio_flush)                                                            \
  X (rbd_aio_discard)                                                          \
  X (rbd_aio_write_zeroes)                                                     \
  X (rbd_diff_iterate2)                                                        \
  X (rbd_lock_acquire)                                                         \
  X (rbd_lock_release)                                                         \
  X (rbd_is_exclusive_lock_owner)                                              \
  X (rbd_lock_get_owners)                                                      \
  X (rbd_lock_get_owners_cleanup)                                              \
  X (rbd_list_lockers)

#define RBDLIB_FIELD(fn) __typeof__ (fn) *fn;
struct rbdlib
{
  RBDLIB_RADOS_FUNCTIONS (RBDLIB_FIELD)
  RBDLIB_RBD_FUNCTIONS (RBDLIB_FIELD)
};
#undef RBDLIB_FIELD

/* Load librados from rados_name and librbd from rbd_name (sonames)
 * and fill *out.  Returns 0, or -ENOENT (a library cannot be loaded)
 * or -ENOSYS (a function is missing) with dlerror's text in errbuf.
 * The libraries stay loaded.
 */
extern int rbdlib_open (const char *rados_name, const char *rbd_name,
                        struct rbdlib *out, char *errbuf, size_t size);

/* The process's table, loaded from the usual sonames on first use
 * (thread-safe).  NULL if they cannot be loaded; why is then in
 * errbuf.
 */
extern const struct rbdlib *rbdlib_get (char *errbuf, size_t size);

/* io-timeout= for a cluster handle: how long librados waits for an
 * OSD (rados_osd_op_timeout, which every librbd request inherits), for
 * a monitor (rados_mon_op_timeout) and for connecting
 * (client_mount_timeout).  An option the operator set (in the Ceph
 * configuration or CEPH_ARGS) is left as it is: save the built-in
 * values right after rados_create, read the configuration, then apply;
 * an option whose value is still the built-in one is set to the
 * timeout.  (So an operator who wants librados's own default has to
 * write a different value: a value equal to the built-in one cannot be
 * told apart from none.)
 */
#define RBDLIB_TIMEOUT_OPTIONS 3
extern const char *const rbdlib_timeout_option[RBDLIB_TIMEOUT_OPTIONS];
struct rbdlib_timeouts
{
  char builtin[RBDLIB_TIMEOUT_OPTIONS][64]; /* "" if it could not be read */
};
extern void rbdlib_timeouts_save (const struct rbdlib *R, rados_t cluster,
                                  struct rbdlib_timeouts *t);
/* Set the options not changed since t was saved to timeout_ns (in
 * whole seconds, rounded up).  Returns a mask of the options set
 * (bit i: rbdlib_timeout_option[i]), or a negative errno if
 * rados_conf_set failed.
 */
extern int rbdlib_timeouts_apply (const struct rbdlib *R, rados_t cluster,
                                  const struct rbdlib_timeouts *t,
                                  uint64_t timeout_ns);
#endif /* HAVE_LIBRBD */

/* Is librbd usable here: built in and loadable?  (Loads it.) */
extern bool rbdlib_available (char *errbuf, size_t size);

/* An rbd= value: POOL/IMAGE or POOL/NAMESPACE/IMAGE. */
struct rbd_spec
{
  char pool[256];
  char ns[256]; /* "" for the default namespace */
  char image[256];
};

/* Split spec into *out.  Returns NULL, or a short reason it is not a
 * spec ("no pool: ...").  Each part must be non-empty, shorter than
 * its field and without '@' (snapshots are not served).
 */
extern const char *rbdlib_parse_spec (const char *spec, struct rbd_spec *out);

#endif /* EXT4LAZY_RBDLIB_H */
