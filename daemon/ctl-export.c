/* SPDX-License-Identifier: BSD-3-Clause */
/* ctl-export.c --- the export behind an NBD device (ctl-attach.h): the
 * handshake through libnbd that leaves a socket for the kernel, the
 * block size the kernel is given, whether a new server's export is the
 * same, and the backend identifier that records it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <libnbd.h>

#include "ctl-attach.h"

/* The transmission flags (the NBD protocol's; linux/nbd.h lacks some). */
#define F_HAS_FLAGS (1u << 0)
#define F_READ_ONLY (1u << 1)
#define F_SEND_FLUSH (1u << 2)
#define F_SEND_FUA (1u << 3)
#define F_ROTATIONAL (1u << 4)
#define F_SEND_TRIM (1u << 5)
#define F_SEND_WRITE_ZEROES (1u << 6)
#define F_SEND_DF (1u << 7)
#define F_CAN_MULTI_CONN (1u << 8)
#define F_SEND_CACHE (1u << 10)
#define F_SEND_FAST_ZERO (1u << 11)

static const struct
{
  uint64_t bit;
  const char *name;
} flag_names[] = {
  { F_READ_ONLY, "read-only" }, { F_SEND_FLUSH, "flush" },
  { F_SEND_FUA, "FUA" },        { F_ROTATIONAL, "rotational" },
  { F_SEND_TRIM, "trim" },      { F_SEND_WRITE_ZEROES, "write-zeroes" },
  { F_SEND_DF, "DF" },          { F_CAN_MULTI_CONN, "multi-conn" },
  { F_SEND_CACHE, "cache" },    { F_SEND_FAST_ZERO, "fast-zero" },
};

uint32_t
export_block_size (const struct nbd_export *e, uint32_t want)
{
  uint32_t bs = want;

  if (!bs)
    {
      bs = 512;
      while (bs < 4096 && bs < e->preferred)
        bs *= 2;
    }
  return bs >= e->minimum ? bs : 0;
}

bool
export_same (const struct nbd_export *was, const struct nbd_export *now,
             char *why, size_t len)
{
  size_t n = 0;

  if (now->size < was->size)
    n += (size_t)snprintf (why, len,
                           "the size was %" PRIu64 " bytes, now %" PRIu64,
                           was->size, now->size);
  for (size_t i = 0; i < sizeof flag_names / sizeof flag_names[0]; i++)
    {
      uint64_t b = flag_names[i].bit;
      if ((was->flags & b) == (now->flags & b) || n >= len)
        continue;
      n += (size_t)snprintf (why + n, len - n, "%s%s was %s, now %s",
                             n ? "; " : "", flag_names[i].name,
                             was->flags & b ? "on" : "off",
                             now->flags & b ? "on" : "off");
    }
  if (n == 0 && was->flags != now->flags)
    n = (size_t)snprintf (why, len,
                          "the flags were 0x%" PRIx64 ", now 0x%" PRIx64,
                          was->flags, now->flags);
  return n == 0;
}

int
export_ident_format (const struct nbd_export *e, uint64_t random, char *out,
                     size_t len)
{
  int n = snprintf (out, len, "ext4lazy:%016" PRIx64 ":%" PRIu64 ":%" PRIu64,
                    random, e->size, e->flags);
  return n > 0 && (size_t)n < len ? 0 : -EINVAL;
}

int
export_ident_parse (const char *ident, struct nbd_export *e)
{
  uint64_t random, size, flags;
  int end = 0;

  if (sscanf (ident, "ext4lazy:%16" SCNx64 ":%" SCNu64 ":%" SCNu64 "%n",
              &random, &size, &flags, &end)
          != 3
      || ident[end] != '\0' || strlen (ident) < 27 || ident[25] != ':')
    return -EINVAL;
  *e = (struct nbd_export){ .size = size, .flags = flags };
  return 0;
}

/* The flags, size and block sizes of the export h is connected to. */
static int
read_export (struct nbd_handle *h, struct nbd_export *e)
{
  static const struct
  {
    int (*has) (struct nbd_handle *);
    uint64_t bit;
  } caps[] = {
    { nbd_is_read_only, F_READ_ONLY }, { nbd_can_flush, F_SEND_FLUSH },
    { nbd_can_fua, F_SEND_FUA },       { nbd_is_rotational, F_ROTATIONAL },
    { nbd_can_trim, F_SEND_TRIM },     { nbd_can_zero, F_SEND_WRITE_ZEROES },
    { nbd_can_df, F_SEND_DF },         { nbd_can_multi_conn, F_CAN_MULTI_CONN },
    { nbd_can_cache, F_SEND_CACHE },   { nbd_can_fast_zero, F_SEND_FAST_ZERO },
  };
  int64_t size = nbd_get_size (h);
  int64_t pref = nbd_get_block_size (h, LIBNBD_SIZE_PREFERRED);
  int64_t min = nbd_get_block_size (h, LIBNBD_SIZE_MINIMUM);

  if (size < 0 || pref < 0 || min < 0)
    return -1;
  *e = (struct nbd_export){ .size = (uint64_t)size,
                            .flags = F_HAS_FLAGS,
                            .preferred = (uint32_t)pref,
                            .minimum = (uint32_t)min };
  for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
    {
      int r = caps[i].has (h);
      if (r < 0)
        return -1;
      if (r)
        e->flags |= caps[i].bit;
    }
  return 0;
}

/* libnbd's last error, never NULL. */
static const char *
nbd_why (void)
{
  const char *e = nbd_get_error ();

  return e ? e : "unknown error";
}

/* Connect h as o says, with what the kernel speaks: simple replies, no
 * meta context, no TLS.
 */
static int
handshake (struct nbd_handle *h, const struct attach_opts *o)
{
  const struct attach_addr *a = &o->addr;

  if (nbd_set_request_structured_replies (h, false) < 0
      || nbd_set_tls (h, LIBNBD_TLS_DISABLE) < 0
      || nbd_set_export_name (h, o->export_name) < 0)
    return -1;
#ifdef LIBNBD_HAVE_NBD_SET_REQUEST_EXTENDED_HEADERS
  if (nbd_set_request_extended_headers (h, false) < 0)
    return -1;
#endif
  switch (a->kind)
    {
    case ATTACH_UNIX:
      return nbd_connect_unix (h, a->path);
    case ATTACH_TCP:
      return nbd_connect_tcp (h, a->host, a->port);
    case ATTACH_URI:
      return nbd_connect_uri (h, a->uri);
    }
  return -1;
}

/* A descriptor of h's socket of its own: blocking, close-on-exec. */
static int
take_socket (struct nbd_handle *h, char *why, size_t len)
{
  int fd = nbd_aio_get_fd (h), dup_fd, fl;

  if (fd < 0)
    {
      snprintf (why, len, "%s", nbd_why ());
      return -1;
    }
  dup_fd = fcntl (fd, F_DUPFD_CLOEXEC, 3);
  fl = dup_fd < 0 ? -1 : fcntl (dup_fd, F_GETFL);
  if (fl < 0 || fcntl (dup_fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
    {
      snprintf (why, len, "the socket: %s", strerror (errno));
      if (dup_fd >= 0)
        close (dup_fd);
      return -1;
    }
  return dup_fd;
}

int
export_connect (const struct attach_opts *o, struct nbd_export *e, char *why,
                size_t len)
{
  struct nbd_handle *h = nbd_create ();
  int fd = -1;

  if (!h)
    {
      snprintf (why, len, "%s", nbd_why ());
      return -1;
    }
  if (handshake (h, o) < 0 || read_export (h, e) < 0)
    snprintf (why, len, "%s", nbd_why ());
  else if (nbd_get_structured_replies_negotiated (h) != 0
           || nbd_get_tls_negotiated (h) != 0)
    snprintf (why, len,
              "the server insisted on structured replies or TLS, "
              "which the kernel does not speak");
  else
    fd = take_socket (h, why, len);
  /* Closing the handle only closes its descriptor: nothing is sent (no
   * NBD_CMD_DISC) on the socket that is now the kernel's.
   */
  nbd_close (h);
  return fd;
}
