/* engine.c --- route client requests to the backing store. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "engine.h"

struct engine
{
  struct backend *store;
  atomic_int clients; /* connections open now */
};

int
engine_open (const struct engine_config *cfg, struct engine **out)
{
  struct engine *e = calloc (1, sizeof *e);
  int r;

  if (!e)
    return -ENOMEM;
  r = backend_open (&cfg->store, &e->store);
  if (r < 0)
    {
      free (e);
      return r;
    }
  *out = e;
  return 0;
}

int
engine_start (struct engine *e)
{
  (void)e;
  return 0;
}

int
engine_stop (struct engine *e)
{
  (void)e;
  return 0;
}

void
engine_close (struct engine *e)
{
  if (!e)
    return;
  backend_close (e->store);
  free (e);
}

uint64_t
engine_size (const struct engine *e)
{
  return backend_size (e->store);
}

const struct backend_caps *
engine_caps (const struct engine *e)
{
  return backend_caps (e->store);
}

const char *
engine_backend_name (const struct engine *e)
{
  return backend_name (e->store);
}

int
engine_pread (struct engine *e, void *buf, uint64_t len, uint64_t off)
{
  return backend_pread (e->store, buf, len, off);
}

int
engine_pwrite (struct engine *e, const void *buf, uint64_t len, uint64_t off,
               uint32_t flags)
{
  return backend_pwrite (e->store, buf, len, off, flags & BIO_FUA);
}

int
engine_flush (struct engine *e)
{
  return backend_flush (e->store);
}

int
engine_zero (struct engine *e, uint64_t len, uint64_t off, uint32_t flags)
{
  return backend_zero (e->store, len, off, flags);
}

int
engine_trim (struct engine *e, uint64_t len, uint64_t off, uint32_t flags)
{
  return backend_trim (e->store, len, off, flags);
}

int
engine_cache (struct engine *e, uint64_t len, uint64_t off)
{
  return backend_cache (e->store, len, off);
}

int
engine_extents (struct engine *e, uint64_t len, uint64_t off,
                backend_extent_fn fn, void *opaque)
{
  return backend_extents (e->store, len, off, fn, opaque);
}

void
engine_client_open (struct engine *e)
{
  atomic_fetch_add (&e->clients, 1);
}

int
engine_client_close (struct engine *e)
{
  atomic_fetch_sub (&e->clients, 1);
  return 0;
}
