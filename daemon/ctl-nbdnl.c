/* SPDX-License-Identifier: BSD-3-Clause */
/* ctl-nbdnl.c --- the kernel's nbd generic netlink family
 * (linux/nbd-netlink.h) through libnl-genl-3, for ext4lazyctl attach
 * and detach (ctl-attach.h): connect, reconfigure, disconnect and
 * status on one socket, the dead-link announcements of the nbd
 * multicast group on another.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <linux/nbd-netlink.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>

#include "ctl-attach.h"

struct nbdnl
{
  struct nl_sock *sk; /* commands and their answers */
  struct nl_sock *ev; /* the multicast group, or NULL */
  int family;
  uint32_t watch; /* the device nbdnl_link_dead asks about */
  bool dead;      /* a dead link of it was announced */
};

/* What one command's answer fills in. */
struct answer
{
  int err;        /* -errno from the kernel, 0 */
  bool done;      /* the acknowledgement came */
  uint32_t index; /* STATUS: the device asked about */
  int connected;  /* STATUS: its state, 0 if not listed */
};

/* A libnl error as an errno. */
static int
nl_errno (int nlerr)
{
  switch (nlerr < 0 ? -nlerr : nlerr)
    {
    case NLE_PERM:
      return -EPERM;
    case NLE_BUSY:
      return -EBUSY;
    case NLE_OBJ_NOTFOUND:
      return -ENOENT;
    case NLE_NOMEM:
      return -ENOMEM;
    case NLE_AGAIN:
      return -EAGAIN;
    case NLE_RANGE:
    case NLE_INVAL:
      return -EINVAL;
    default:
      return -EIO;
    }
}

static struct nl_sock *
open_socket (int *family)
{
  struct nl_sock *sk = nl_socket_alloc ();

  if (!sk)
    return NULL;
  if (genl_connect (sk) < 0
      || (*family = genl_ctrl_resolve (sk, NBD_GENL_FAMILY_NAME)) < 0)
    {
      nl_socket_free (sk);
      return NULL;
    }
  return sk;
}

/* Parse the dead-link announcements on the events socket. */
static int
on_event (struct nl_msg *msg, void *arg)
{
  struct nbdnl *nl = arg;
  struct nlmsghdr *nlh = nlmsg_hdr (msg);
  struct genlmsghdr *g = nlmsg_data (nlh);
  struct nlattr *tb[NBD_ATTR_MAX + 1];

  if (g->cmd == NBD_CMD_LINK_DEAD
      && genlmsg_parse (nlh, 0, tb, NBD_ATTR_MAX, NULL) == 0
      && tb[NBD_ATTR_INDEX] && nla_get_u32 (tb[NBD_ATTR_INDEX]) == nl->watch)
    nl->dead = true;
  return NL_OK;
}

static int
open_events (struct nbdnl *nl)
{
  int family, grp;

  nl->ev = open_socket (&family);
  if (!nl->ev)
    return -ENOENT;
  nl_socket_disable_seq_check (nl->ev);
  grp = genl_ctrl_resolve_grp (nl->ev, NBD_GENL_FAMILY_NAME,
                               NBD_GENL_MCAST_GROUP_NAME);
  if (grp < 0 || nl_socket_add_membership (nl->ev, grp) < 0
      || nl_socket_set_nonblocking (nl->ev) < 0
      || nl_socket_modify_cb (nl->ev, NL_CB_VALID, NL_CB_CUSTOM, on_event, nl)
             < 0)
    return -EIO;
  return 0;
}

int
nbdnl_open (struct nbdnl **out, bool events)
{
  struct nbdnl *nl = calloc (1, sizeof *nl);
  int r = 0;

  if (!nl)
    return -ENOMEM;
  nl->sk = open_socket (&nl->family);
  if (!nl->sk)
    r = -ENOENT; /* (no nbd family: the module is not loaded) */
  else if (events)
    r = open_events (nl);
  if (r < 0)
    {
      nbdnl_close (nl);
      return r;
    }
  *out = nl;
  return 0;
}

void
nbdnl_close (struct nbdnl *nl)
{
  if (!nl)
    return;
  if (nl->sk)
    nl_socket_free (nl->sk);
  if (nl->ev)
    nl_socket_free (nl->ev);
  free (nl);
}

static int
on_error (struct sockaddr_nl *who, struct nlmsgerr *e, void *arg)
{
  struct answer *a = arg;

  (void)who;
  a->err = e->error < 0 ? e->error : -e->error;
  a->done = true;
  return NL_STOP;
}

static int
on_ack (struct nl_msg *msg, void *arg)
{
  struct answer *a = arg;

  (void)msg;
  a->done = true;
  return NL_STOP;
}

/* A STATUS answer: the state of a->index in the device list. */
static int
on_status (struct nl_msg *msg, void *arg)
{
  struct answer *a = arg;
  struct nlattr *tb[NBD_ATTR_MAX + 1], *item;
  int rem;

  if (genlmsg_parse (nlmsg_hdr (msg), 0, tb, NBD_ATTR_MAX, NULL) < 0
      || !tb[NBD_ATTR_DEVICE_LIST])
    return NL_OK;
  nla_for_each_nested (item, tb[NBD_ATTR_DEVICE_LIST], rem)
  {
    struct nlattr *dev[NBD_DEVICE_ATTR_MAX + 1];
    if (nla_type (item) != NBD_DEVICE_ITEM
        || nla_parse_nested (dev, NBD_DEVICE_ATTR_MAX, item, NULL) < 0
        || !dev[NBD_DEVICE_INDEX] || !dev[NBD_DEVICE_CONNECTED])
      continue;
    if (nla_get_u32 (dev[NBD_DEVICE_INDEX]) == a->index)
      a->connected = nla_get_u8 (dev[NBD_DEVICE_CONNECTED]) ? 1 : 0;
  }
  return NL_OK;
}

/* Send msg (freed here) and read its answer into *a. */
static int
transact (struct nbdnl *nl, struct nl_msg *msg, struct answer *a)
{
  struct nl_cb *cb = nl_cb_alloc (NL_CB_DEFAULT);
  int r;

  if (!cb)
    {
      nlmsg_free (msg);
      return -ENOMEM;
    }
  nl_cb_err (cb, NL_CB_CUSTOM, on_error, a);
  nl_cb_set (cb, NL_CB_ACK, NL_CB_CUSTOM, on_ack, a);
  nl_cb_set (cb, NL_CB_VALID, NL_CB_CUSTOM, on_status, a);
  r = nl_send_auto (nl->sk, msg);
  nlmsg_free (msg);
  while (r >= 0 && !a->done)
    r = nl_recvmsgs (nl->sk, cb);
  nl_cb_put (cb);
  if (a->err)
    return a->err;
  return r < 0 ? nl_errno (r) : 0;
}

/* A request for command cmd on device index. */
static struct nl_msg *
request (struct nbdnl *nl, uint8_t cmd, uint32_t index)
{
  struct nl_msg *msg = nlmsg_alloc ();

  if (!msg)
    return NULL;
  if (!genlmsg_put (msg, NL_AUTO_PORT, NL_AUTO_SEQ, nl->family, 0, 0, cmd,
                    NBD_GENL_VERSION)
      || nla_put_u32 (msg, NBD_ATTR_INDEX, index) < 0)
    {
      nlmsg_free (msg);
      return NULL;
    }
  return msg;
}

/* NBD_ATTR_SOCKETS holding the one descriptor fd. */
static int
put_socket (struct nl_msg *msg, int fd)
{
  struct nlattr *socks = nla_nest_start (msg, NBD_ATTR_SOCKETS);
  struct nlattr *item = socks ? nla_nest_start (msg, NBD_SOCK_ITEM) : NULL;

  if (!item || nla_put_u32 (msg, NBD_SOCK_FD, (uint32_t)fd) < 0)
    return -1;
  nla_nest_end (msg, item);
  nla_nest_end (msg, socks);
  return 0;
}

int
nbdnl_connect (struct nbdnl *nl, const struct nbdnl_connect *c)
{
  struct nl_msg *msg = request (nl, NBD_CMD_CONNECT, c->index);
  struct answer a = { .index = c->index };

  if (!msg || nla_put_u64 (msg, NBD_ATTR_SIZE_BYTES, c->size) < 0
      || nla_put_u64 (msg, NBD_ATTR_BLOCK_SIZE_BYTES, c->block_size) < 0
      || nla_put_u64 (msg, NBD_ATTR_SERVER_FLAGS, c->flags) < 0
      || nla_put_u64 (msg, NBD_ATTR_TIMEOUT, c->timeout) < 0
      || nla_put_u64 (msg, NBD_ATTR_DEAD_CONN_TIMEOUT, c->dead_timeout) < 0
      || nla_put_string (msg, NBD_ATTR_BACKEND_IDENTIFIER, c->ident) < 0
      || put_socket (msg, c->fd) < 0)
    {
      nlmsg_free (msg);
      return -ENOMEM;
    }
  return transact (nl, msg, &a);
}

int
nbdnl_reconfigure (struct nbdnl *nl, uint32_t index, const char *ident, int fd,
                   uint64_t size)
{
  struct nl_msg *msg = request (nl, NBD_CMD_RECONFIGURE, index);
  struct answer a = { .index = index };

  if (!msg || nla_put_string (msg, NBD_ATTR_BACKEND_IDENTIFIER, ident) < 0
      || (size > 0 && nla_put_u64 (msg, NBD_ATTR_SIZE_BYTES, size) < 0)
      || (fd >= 0 && put_socket (msg, fd) < 0))
    {
      nlmsg_free (msg);
      return -ENOMEM;
    }
  return transact (nl, msg, &a);
}

int
nbdnl_disconnect (struct nbdnl *nl, uint32_t index)
{
  struct nl_msg *msg = request (nl, NBD_CMD_DISCONNECT, index);
  struct answer a = { .index = index };

  if (!msg)
    return -ENOMEM;
  return transact (nl, msg, &a);
}

int
nbdnl_status (struct nbdnl *nl, uint32_t index)
{
  struct nl_msg *msg = request (nl, NBD_CMD_STATUS, index);
  struct answer a = { .index = index };
  int r;

  if (!msg)
    return -ENOMEM;
  r = transact (nl, msg, &a);
  return r < 0 ? r : a.connected;
}

int
nbdnl_event_fd (struct nbdnl *nl)
{
  return nl->ev ? nl_socket_get_fd (nl->ev) : -1;
}

int
nbdnl_link_dead (struct nbdnl *nl, uint32_t index)
{
  int r;

  nl->watch = index;
  nl->dead = false;
  r = nl_recvmsgs_default (nl->ev);
  /* Announcements lost (the socket's buffer overran): one may have
   * been ours.
   */
  if (r == -NLE_NOMEM)
    return 1;
  if (r < 0 && r != -NLE_AGAIN)
    return nl_errno (r);
  return nl->dead ? 1 : 0;
}
