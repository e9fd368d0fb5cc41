/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdremote.c --- NBD URI shape check, query parameters and remote
 * errno mapping.
 */
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

static int
hex_digit (char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Decode the n bytes at s into buf (size bytes, with the NUL). */
static int
unescape (const char *s, size_t n, char *buf, size_t size)
{
  size_t o = 0;

  for (size_t i = 0; i < n; i++)
    {
      char c = s[i];

      if (c == '%' && i + 2 < n && hex_digit (s[i + 1]) >= 0
          && hex_digit (s[i + 2]) >= 0)
        {
          c = (char)(hex_digit (s[i + 1]) * 16 + hex_digit (s[i + 2]));
          i += 2;
        }
      if (o + 1 >= size)
        return -ENAMETOOLONG;
      buf[o++] = c;
    }
  buf[o] = '\0';
  return 0;
}

int
nbdremote_query_param (const char *uri, const char *key, char *buf, size_t size)
{
  const char *q = strpbrk (uri, "?#");
  const size_t klen = strlen (key);
  const char *end;
  int r = -ENOENT;

  if (!q || *q == '#')
    return -ENOENT;
  q++;
  end = q + strcspn (q, "#");
  while (q < end)
    {
      const char *amp = memchr (q, '&', end - q);
      const char *next = amp ? amp : end;

      if ((size_t)(next - q) > klen && strncmp (q, key, klen) == 0
          && q[klen] == '=')
        r = unescape (q + klen + 1, next - q - klen - 1, buf, size);
      q = amp ? amp + 1 : end;
    }
  return r;
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
