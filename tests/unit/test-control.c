/* SPDX-License-Identifier: BSD-3-Clause */
/* test-control.c --- the control socket: mode 0600, one command per
 * connection, ok/error replies, stale sockets replaced, live ones not;
 * clients served apart, a busy refusal past eight; a request and a
 * reply cut at their deadlines; a close that ends stuck clients;
 * the engine's commands, their formats and the refusals.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "control.h"
#include "engine.h"
#include "testimg.h"
#include "testutil.h"

/* Counted on the control thread, read by the test after the replies:
 * the socket orders them, but ThreadSanitizer does not see it.
 */
static atomic_int calls;

/* The body of the reply to "big". */
#define BIG_REPLY (16u << 20)

/* "block" waits at this gate until the test opens it (a flush waiting
 * on a store that stopped answering).
 */
static struct gate block = GATE_INIT;

static int
handler (void *opaque, const char *cmd, FILE *out)
{
  (void)opaque;
  calls++;
  if (strcmp (cmd, "hello") == 0)
    {
      fprintf (out, "world\n");
      return 0;
    }
  if (strcmp (cmd, "block") == 0)
    {
      gate_pass (&block);
      fprintf (out, "unblocked\n");
      return 0;
    }
  if (strcmp (cmd, "big") == 0)
    {
      static const char chunk[1 << 16];

      for (size_t i = 0; i < BIG_REPLY / sizeof chunk; i++)
        fwrite (chunk, 1, sizeof chunk, out);
      return 0;
    }
  return -EINVAL;
}

/* A client connected to path, or the test fails. */
static int
connect_to (const char *path)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);

  strcpy (sa.sun_path, path);
  cr_assert_eq (connect (fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

/* Read what the server sends until it closes the connection. */
static void
read_to_end (int fd, char *buf, size_t size)
{
  size_t n = 0;
  ssize_t r;

  while ((r = read (fd, buf + n, size - 1 - n)) > 0)
    n += r;
  buf[n] = '\0';
}

static char *
ask (const char *path, const char *cmd)
{
  static char buf[4096];
  int fd = connect_to (path);

  /* A refused client may find the socket closed before it writes. */
  if (send (fd, cmd, strlen (cmd), MSG_NOSIGNAL) != (ssize_t)strlen (cmd))
    cr_assert_eq (errno, EPIPE);
  read_to_end (fd, buf, sizeof buf);
  close (fd);
  return buf;
}

/* Serve handler on a socket s in a new directory, its path in path (64
 * bytes), with deadlines of deadline_ms (0: the default).
 */
static struct control *
serve (char *path, int deadline_ms)
{
  struct control *c;

  strcpy (path, "/tmp/ext4lazy-ctl-XXXXXX");
  cr_assert_not_null (mkdtemp (path));
  strcat (path, "/s");
  cr_assert_eq (control_open (path, handler, NULL, &c), 0);
  if (deadline_ms)
    control_set_deadline (c, deadline_ms);
  cr_assert_eq (control_start (c), 0);
  return c;
}

static void
unserve (struct control *c, char *path)
{
  control_close (c);
  *strrchr (path, '/') = '\0';
  rmdir (path);
}

Test (control, serves_commands)
{
  char path[64] = "/tmp/ext4lazy-ctl-XXXXXX";
  struct control *c, *c2;
  struct stat st;

  cr_assert_not_null (mkdtemp (path));
  strcat (path, "/s");
  cr_assert_eq (control_open (path, handler, NULL, &c), 0);
  cr_assert_eq (stat (path, &st), 0);
  cr_assert (S_ISSOCK (st.st_mode));
  cr_assert_eq (st.st_mode & 0777, 0600);
  cr_assert_eq (control_start (c), 0);

  cr_assert_str_eq (ask (path, "hello\n"), "ok\nworld\n");
  cr_assert_str_eq (ask (path, "nope\n"), "error: Invalid argument\n");
  cr_assert_eq (calls, 2);

  /* A live socket is not taken over. */
  cr_assert_eq (control_open (path, handler, NULL, &c2), -EADDRINUSE);

  control_close (c);
  cr_assert_neq (stat (path, &st), 0, "the socket is removed at close");
  *strrchr (path, '/') = '\0';
  rmdir (path);
}

/* A client that connected and sent "block", answered once released. */
struct blocker
{
  const char *path;
  pthread_t t;
  char reply[64];
};

static void *
block_client (void *p)
{
  struct blocker *b = p;
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);

  strcpy (sa.sun_path, b->path);
  b->reply[0] = '\0';
  if (connect (fd, (struct sockaddr *)&sa, sizeof sa) == 0
      && write (fd, "block\n", 6) == 6)
    read_to_end (fd, b->reply, sizeof b->reply);
  close (fd);
  return NULL;
}

/* Start n clients sending "block" and wait until all wait. */
static void
start_blockers (struct blocker *b, int n, const char *path)
{
  for (int i = 0; i < n; i++)
    {
      b[i].path = path;
      cr_assert_eq (pthread_create (&b[i].t, NULL, block_client, &b[i]), 0);
    }
  gate_wait (&block, n);
}

static void
end_blockers (struct blocker *b, int n)
{
  gate_open (&block);
  for (int i = 0; i < n; i++)
    {
      pthread_join (b[i].t, NULL);
      cr_assert_str_eq (b[i].reply, "ok\nunblocked\n");
    }
}

/* Each client on a thread of its own: while commands wait (a flush on a
 * store that stopped answering) and a client that connected says
 * nothing, another is answered.  With one client at a time the "hello"
 * below would wait for ever.
 */
Test (control, clients_served_apart, .timeout = 30)
{
  char path[64];
  struct blocker b[6];
  struct control *c = serve (path, 0);
  int silent = connect_to (path);

  start_blockers (b, 6, path);
  cr_assert_str_eq (ask (path, "hello\n"), "ok\nworld\n",
                    "answered while others wait");
  end_blockers (b, 6);
  close (silent);
  unserve (c, path);
}

/* With eight clients being served, a ninth is refused at once. */
Test (control, ninth_client_refused, .timeout = 30)
{
  char path[64];
  struct blocker b[8];
  struct control *c = serve (path, 0);

  start_blockers (b, 8, path);
  cr_assert_str_eq (ask (path, "hello\n"), "error: Device or resource busy\n");
  end_blockers (b, 8);
  cr_assert_str_eq (ask (path, "hello\n"), "ok\nworld\n", "room again");
  unserve (c, path);
}

/* A client that sends a byte of a request every interval_ms, never the
 * end of the line, until max bytes are sent or the server closed the
 * connection, then reads what the server said.
 */
struct dripper
{
  int fd;
  int interval_ms;
  int max;
  pthread_t t;
  int sent;
  char reply[64];
};

static void *
drip_client (void *p)
{
  struct dripper *d = p;
  int fd = d->fd;

  while (d->sent < d->max && send (fd, "x", 1, MSG_NOSIGNAL) == 1)
    {
      struct pollfd pf = { .fd = fd, .events = POLLIN };

      d->sent++;
      if (poll (&pf, 1, d->interval_ms) > 0)
        break; /* the server answered, or closed */
    }
  read_to_end (fd, d->reply, sizeof d->reply);
  close (fd);
  return NULL;
}

/* Connected here, in turn: the server accepts them in that order. */
static void
start_drippers (struct dripper *d, int n, const char *path, int interval_ms,
                int max)
{
  for (int i = 0; i < n; i++)
    {
      d[i] = (struct dripper){ .fd = connect_to (path),
                               .interval_ms = interval_ms,
                               .max = max };
      cr_assert_eq (pthread_create (&d[i].t, NULL, drip_client, &d[i]), 0);
    }
}

/* A request must be in by the deadline, however the bytes trickle: eight
 * clients sending a byte every 20 ms, each poll answered well within any
 * per-read timeout, are told "timed out" and their rooms are free.
 * (With a timeout per poll they keep their rooms as long as they drip,
 * then are dropped with no reply.)
 */
Test (control, slow_request_cut_at_deadline, .timeout = 60)
{
  char path[64];
  struct dripper d[8];
  struct control *c = serve (path, 300);

  start_drippers (d, 8, path, 20, 100);
  for (int i = 0; i < 8; i++)
    {
      pthread_join (d[i].t, NULL);
      cr_assert_str_eq (d[i].reply, "error: Connection timed out\n",
                        "client %d, %d bytes sent", i, d[i].sent);
    }
  cr_assert_str_eq (ask (path, "hello\n"), "ok\nworld\n", "room again");
  unserve (c, path);
}

/* Ask for "big", then read 4 KiB every 20 ms until the end; the bytes
 * read.
 */
static size_t
read_slowly (const char *path)
{
  static char buf[4096];
  int fd = connect_to (path);
  size_t n = 0;
  ssize_t r;

  cr_assert_eq (write (fd, "big\n", 4), 4);
  while ((r = read (fd, buf, sizeof buf)) > 0)
    {
      n += r;
      poll (NULL, 0, 20);
    }
  close (fd);
  return n;
}

/* A reply must be out by its deadline: a client taking 4 KiB every 20 ms
 * (each send making progress well within any per-send timeout) gets part
 * of a 16 MiB reply, then the end of the connection, and its room is
 * free.  (With a timeout per send it keeps the room for over a minute.)
 */
Test (control, slow_reply_cut_at_deadline, .timeout = 40)
{
  char path[64];
  struct control *c = serve (path, 300);
  size_t n = read_slowly (path);

  cr_assert_gt (n, 0);
  cr_assert_lt (n, 3 + BIG_REPLY, "cut short: %zu bytes", n);
  cr_assert_str_eq (ask (path, "hello\n"), "ok\nworld\n", "room again");
  unserve (c, path);
}

/* A client that asked for "big" and reads nothing until told to. */
struct stalled_reader
{
  int fd;
  pthread_t t;
  size_t got;
};

static atomic_bool closed;

static void *
stalled_read (void *p)
{
  struct stalled_reader *s = p;
  static char buf[1 << 16];
  ssize_t r;

  while (!closed)
    poll (NULL, 0, 10);
  while ((r = read (s->fd, buf, sizeof buf)) > 0)
    s->got += r;
  close (s->fd);
  return NULL;
}

/* control_close does not wait for clients: with all eight rooms taken by
 * clients sending a request a byte every 250 ms and clients not taking
 * their reply, under deadlines of an hour, it returns, and each client
 * finds its connection ended.  (A close that waits for them hangs.)
 */
Test (control, close_ends_stuck_clients, .timeout = 30)
{
  char path[64];
  struct stalled_reader s[2];
  struct dripper d[6];
  struct control *c = serve (path, 3600 * 1000);

  closed = false;
  for (int i = 0; i < 2; i++)
    {
      s[i] = (struct stalled_reader){ .fd = connect_to (path) };
      cr_assert_eq (write (s[i].fd, "big\n", 4), 4);
      cr_assert_eq (pthread_create (&s[i].t, NULL, stalled_read, &s[i]), 0);
    }
  start_drippers (d, 6, path, 250, 1 << 20);
  /* Accepted after the eight, so refused. */
  cr_assert_str_eq (ask (path, "hello\n"), "error: Device or resource busy\n",
                    "the eight rooms are taken");

  control_close (c);
  closed = true;
  for (int i = 0; i < 6; i++)
    {
      pthread_join (d[i].t, NULL);
      cr_assert_str_eq (d[i].reply, "", "client %d: no reply", i);
    }
  for (int i = 0; i < 2; i++)
    {
      pthread_join (s[i].t, NULL);
      cr_assert_lt (s[i].got, 3 + BIG_REPLY, "reader %d: %zu bytes", i,
                    s[i].got);
    }
  *strrchr (path, '/') = '\0';
  rmdir (path);
}

Test (control, replaces_stale_socket_refuses_files)
{
  char dir[] = "/tmp/ext4lazy-ctl-XXXXXX", path[64];
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  struct control *c;
  int fd;

  cr_assert_not_null (mkdtemp (dir));
  snprintf (path, sizeof path, "%s/s", dir);
  /* A socket nobody listens on, as a crashed server leaves behind. */
  strcpy (sa.sun_path, path);
  fd = socket (AF_UNIX, SOCK_STREAM, 0);
  cr_assert_eq (bind (fd, (struct sockaddr *)&sa, sizeof sa), 0);
  close (fd);
  cr_assert_eq (control_open (path, handler, NULL, &c), 0);
  control_close (c);

  /* A regular file is never removed. */
  fd = creat (path, 0600);
  close (fd);
  cr_assert_eq (control_open (path, handler, NULL, &c), -EEXIST);
  unlink (path);
  rmdir (dir);
}

/* The reply body of an engine command, or NULL with *r set. */
static char *
engine_reply (struct engine *e, const char *cmd, int *r)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);

  cr_assert_not_null (f);
  *r = control_engine_cmd (e, cmd, f);
  fclose (f);
  if (*r == 0)
    return buf;
  free (buf);
  return NULL;
}

/* A blank device: no filesystem, nothing held. */
Test (control, engine_commands)
{
  static const char *const refused[] = {
    "",          "stats ",    "stats xml",    "statsjson", "holds ",
    "holds xml", "holdsjson", "holds json x", "flush now", "bogus",
  };
  struct engine_config cfg = {
    .store = { .kind = BACKEND_PSYNC },
    .policy = POLICY_STRICT,
  };
  struct img im;
  struct engine *e;
  char *out;
  int r;

  img_new (&im, "ext4lazy-ctl", 1 << 20);
  cfg.store.path = im.path;
  cr_assert_eq (engine_open (&cfg, &e), 0);

  out = engine_reply (e, "holds json", &r);
  cr_assert_eq (r, 0);
  cr_assert_str_eq (out, "{\"holds\":[],\"held_blocks\":0,\"held_bytes\":0}\n");
  free (out);
  out = engine_reply (e, "holds", &r);
  cr_assert_eq (r, 0);
  cr_assert_not_null (strstr (out, "KIND "));
  cr_assert_not_null (strstr (out, "\n0 blocks held, 0 bytes\n"));
  free (out);
  out = engine_reply (e, "stats json", &r);
  cr_assert_eq (r, 0);
  cr_assert_not_null (strstr (out, "\"instances\":[{\"name\":\"other\""),
                      "with no filesystem, \"other\" is listed: %s", out);
  free (out);
  cr_assert_eq (control_engine_cmd (e, "flush", stdout), 0);
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
    {
      cr_assert_null (engine_reply (e, refused[i], &r), "\"%s\"", refused[i]);
      cr_assert_eq (r, -EINVAL, "\"%s\": %d", refused[i], r);
    }
  engine_close (e);
  img_del (&im);
}
