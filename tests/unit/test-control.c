/* SPDX-License-Identifier: BSD-3-Clause */
/* test-control.c --- the control socket: mode 0600, one command per
 * connection, ok/error replies, stale sockets replaced, live ones not;
 * clients served apart, a busy refusal past eight;
 * the engine's commands, their formats and the refusals.
 */
#include <errno.h>
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
  return -EINVAL;
}

static char *
ask (const char *path, const char *cmd)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  static char buf[4096];
  size_t n = 0;
  ssize_t r;
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);

  strcpy (sa.sun_path, path);
  cr_assert_eq (connect (fd, (struct sockaddr *)&sa, sizeof sa), 0);
  /* A refused client may find the socket closed before it writes. */
  if (send (fd, cmd, strlen (cmd), MSG_NOSIGNAL) != (ssize_t)strlen (cmd))
    cr_assert_eq (errno, EPIPE);
  while ((r = read (fd, buf + n, sizeof buf - 1 - n)) > 0)
    n += r;
  buf[n] = '\0';
  close (fd);
  return buf;
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
  size_t n = 0;
  ssize_t r;

  strcpy (sa.sun_path, b->path);
  if (connect (fd, (struct sockaddr *)&sa, sizeof sa) == 0
      && write (fd, "block\n", 6) == 6)
    while ((r = read (fd, b->reply + n, sizeof b->reply - 1 - n)) > 0)
      n += r;
  b->reply[n] = '\0';
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
  char path[64] = "/tmp/ext4lazy-ctl-XXXXXX";
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  struct blocker b[6];
  struct control *c;
  int silent;

  cr_assert_not_null (mkdtemp (path));
  strcat (path, "/s");
  cr_assert_eq (control_open (path, handler, NULL, &c), 0);
  cr_assert_eq (control_start (c), 0);
  strcpy (sa.sun_path, path);
  silent = socket (AF_UNIX, SOCK_STREAM, 0);
  cr_assert_eq (connect (silent, (struct sockaddr *)&sa, sizeof sa), 0);
  start_blockers (b, 6, path);
  cr_assert_str_eq (ask (path, "hello\n"), "ok\nworld\n",
                    "answered while others wait");
  end_blockers (b, 6);
  close (silent);
  control_close (c);
  *strrchr (path, '/') = '\0';
  rmdir (path);
}

/* With eight clients being served, a ninth is refused at once. */
Test (control, ninth_client_refused, .timeout = 30)
{
  char path[64] = "/tmp/ext4lazy-ctl-XXXXXX";
  struct blocker b[8];
  struct control *c;

  cr_assert_not_null (mkdtemp (path));
  strcat (path, "/s");
  cr_assert_eq (control_open (path, handler, NULL, &c), 0);
  cr_assert_eq (control_start (c), 0);
  start_blockers (b, 8, path);
  cr_assert_str_eq (ask (path, "hello\n"), "error: Device or resource busy\n");
  end_blockers (b, 8);
  cr_assert_str_eq (ask (path, "hello\n"), "ok\nworld\n", "room again");
  control_close (c);
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
