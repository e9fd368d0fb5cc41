/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdremote.c --- NBD URI shape check and remote errno mapping. */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "nbdremote.h"

enum transport
{
  TCP,
  UNIX,
  VSOCK,
};

static const struct
{
  const char *scheme;
  enum transport transport;
} schemes[] = {
  { "nbd", TCP },        { "nbds", TCP },        { "nbd+unix", UNIX },
  { "nbds+unix", UNIX }, { "nbd+vsock", VSOCK }, { "nbds+vsock", VSOCK },
};

/* Does the query part (after '?') have a socket= parameter? */
static bool
has_socket_param (const char *uri)
{
  const char *q = strchr (uri, '?');

  while (q)
    {
      q++;
      if (strncmp (q, "socket=", 7) == 0)
        return true;
      q = strchr (q, '&');
    }
  return false;
}

const char *
nbdremote_uri_check (const char *uri)
{
  const char *colon = strchr (uri, ':');
  size_t n = colon ? (size_t)(colon - uri) : 0;
  size_t i;

  if (!colon || n == 0)
    return "not a URI (expected nbd://HOST[:PORT]/EXPORT or "
           "nbd+unix:///EXPORT?socket=PATH)";
  for (i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
    if (strlen (schemes[i].scheme) == n
        && strncmp (uri, schemes[i].scheme, n) == 0)
      break;
  if (i == sizeof schemes / sizeof schemes[0])
    return "unknown scheme (expected nbd, nbds, nbd+unix, nbds+unix, "
           "nbd+vsock or nbds+vsock)";
  if (strncmp (colon + 1, "//", 2) != 0)
    return "expected \"//\" after the scheme";
  if (schemes[i].transport == UNIX && !has_socket_param (uri))
    return "a +unix URI needs ?socket=PATH";
  if (schemes[i].transport != UNIX && has_socket_param (uri))
    return "socket= is only for the +unix schemes";
  return NULL;
}

int
nbdremote_errno (int err)
{
  switch (err)
    {
    case 0:
    case ENOTCONN:
    case ECONNRESET:
    case EPIPE:
    case ESHUTDOWN:
      return EIO;
    default:
      return err;
    }
}
