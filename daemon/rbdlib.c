/* SPDX-License-Identifier: BSD-3-Clause */
/* rbdlib.c --- librbd and librados loaded on demand, and rbd= specs.
 * See rbdlib.h for why the libraries are not linked.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#ifdef HAVE_LIBRBD
#include <dlfcn.h>
#include <pthread.h>
#endif

#include "rbdlib.h"

#ifdef HAVE_LIBRBD
static void
set_error (char *errbuf, size_t size, const char *what)
{
  if (errbuf && size > 0)
    snprintf (errbuf, size, "%s", what ? what : "unknown error");
}

int
rbdlib_open (const char *rados_name, const char *rbd_name, struct rbdlib *out,
             char *errbuf, size_t size)
{
  void *rados = dlopen (rados_name, RTLD_NOW | RTLD_LOCAL);
  void *rbd = rados ? dlopen (rbd_name, RTLD_NOW | RTLD_LOCAL) : NULL;

  if (!rbd)
    {
      set_error (errbuf, size, dlerror ());
      return -ENOENT;
    }
    /* A NULL dlsym is an error here: none of these is a NULL symbol. */
#define RBDLIB_LOAD(lib, fn)                                                   \
  if ((out->fn = (__typeof__ (out->fn))dlsym (lib, #fn)) == NULL)              \
    {                                                                          \
      set_error (errbuf, size, dlerror ());                                    \
      return -ENOSYS;                                                          \
    }
#define RBDLIB_RADOS(fn) RBDLIB_LOAD (rados, fn)
#define RBDLIB_RBD(fn) RBDLIB_LOAD (rbd, fn)
  RBDLIB_RADOS_FUNCTIONS (RBDLIB_RADOS)
  RBDLIB_RBD_FUNCTIONS (RBDLIB_RBD)
#undef RBDLIB_RBD
#undef RBDLIB_RADOS
#undef RBDLIB_LOAD
  return 0;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct rbdlib lib;
static int lib_err;
static char lib_why[256];

static void
load_once (void)
{
  lib_err = rbdlib_open ("librados.so.2", "librbd.so.1", &lib, lib_why,
                         sizeof lib_why);
}

const struct rbdlib *
rbdlib_get (char *errbuf, size_t size)
{
  pthread_once (&once, load_once);
  if (lib_err == 0)
    return &lib;
  set_error (errbuf, size, lib_why);
  return NULL;
}

bool
rbdlib_available (char *errbuf, size_t size)
{
  return rbdlib_get (errbuf, size) != NULL;
}

const char *const rbdlib_timeout_option[RBDLIB_TIMEOUT_OPTIONS]
    = { "rados_osd_op_timeout", "rados_mon_op_timeout",
        "client_mount_timeout" };

void
rbdlib_timeouts_save (const struct rbdlib *R, rados_t cluster,
                      struct rbdlib_timeouts *t)
{
  for (int i = 0; i < RBDLIB_TIMEOUT_OPTIONS; i++)
    if (R->rados_conf_get (cluster, rbdlib_timeout_option[i], t->builtin[i],
                           sizeof t->builtin[i])
        < 0)
      t->builtin[i][0] = '\0';
}

int
rbdlib_timeouts_apply (const struct rbdlib *R, rados_t cluster,
                       const struct rbdlib_timeouts *t, uint64_t timeout_ns)
{
  const uint64_t secs = (timeout_ns + 999999999) / 1000000000;
  char value[32], now[64];
  int set = 0;

  snprintf (value, sizeof value, "%" PRIu64, secs ? secs : 1);
  for (int i = 0; i < RBDLIB_TIMEOUT_OPTIONS; i++)
    {
      int r;

      /* Unknown to this librados, or changed by the configuration. */
      if (!t->builtin[i][0]
          || R->rados_conf_get (cluster, rbdlib_timeout_option[i], now,
                                sizeof now)
                 < 0
          || strcmp (now, t->builtin[i]) != 0)
        continue;
      r = R->rados_conf_set (cluster, rbdlib_timeout_option[i], value);
      if (r < 0)
        return r;
      set |= 1 << i;
    }
  return set;
}
#else
bool
rbdlib_available (char *errbuf, size_t size)
{
  if (errbuf && size > 0)
    snprintf (errbuf, size, "built without librbd");
  return false;
}
#endif /* HAVE_LIBRBD */

/* Copy the part [s, e) of a spec into field (of size n), if it fits
 * and is not empty.
 */
static bool
part (const char *s, const char *e, char *field, size_t n)
{
  if (e == s || (size_t)(e - s) >= n)
    return false;
  memcpy (field, s, e - s);
  field[e - s] = '\0';
  return true;
}

const char *
rbdlib_parse_spec (const char *spec, struct rbd_spec *out)
{
  const char *a = strchr (spec, '/'), *b;

  memset (out, 0, sizeof *out);
  if (!a)
    return "expected POOL/IMAGE or POOL/NAMESPACE/IMAGE";
  if (strchr (spec, '@'))
    return "snapshots (IMAGE@SNAP) are not served";
  b = strchr (a + 1, '/');
  if (b && strchr (b + 1, '/'))
    return "too many '/': expected POOL/IMAGE or POOL/NAMESPACE/IMAGE";
  if (!part (spec, a, out->pool, sizeof out->pool))
    return "the pool name is empty or too long";
  if (b && !part (a + 1, b, out->ns, sizeof out->ns))
    return "the namespace is empty or too long";
  if (!part (b ? b + 1 : a + 1, spec + strlen (spec), out->image,
             sizeof out->image))
    return "the image name is empty or too long";
  return NULL;
}
