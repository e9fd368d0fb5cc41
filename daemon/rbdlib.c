/* SPDX-License-Identifier: BSD-3-Clause */
/* rbdlib.c --- librbd and librados loaded on demand, and rbd= specs.
 * See rbdlib.h for why the libraries are not linked.
 */
#include <errno.h>
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
