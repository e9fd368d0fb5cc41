/* SPDX-License-Identifier: BSD-3-Clause */
/* control.c --- serve the control socket: one thread accepts, each
 * client is served on a thread of its own (up to CLIENT_MAX at once), so
 * that a silent client or a slow command (a flush waiting on the store)
 * does not hold up the others; and the commands it carries out on the
 * engine.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "engine.h"
#include "drain.h"
#include "log.h"
#include "stats.h"

#define CMD_MAX 256
#define CLIENT_TIMEOUT_MS 5000
#define CLIENT_MAX 8

struct control
{
  char *path;
  int lfd;     /* listening socket */
  int wake[2]; /* a pipe: a byte written here stops the thread */
  control_fn fn;
  void *opaque;
  pthread_t thread;
  bool running;
  /* The client threads running (detached); cond tells that one ended.
   * Under lock.
   */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  unsigned clients;
};

/* A connection being served. */
struct client
{
  struct control *c;
  int fd;
};

static int
make_addr (const char *path, struct sockaddr_un *sa)
{
  memset (sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  if (strlen (path) >= sizeof sa->sun_path)
    return -ENAMETOOLONG;
  strcpy (sa->sun_path, path);
  return 0;
}

/* Is something listening at path? */
static bool
socket_alive (const struct sockaddr_un *sa)
{
  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool alive;

  if (fd == -1)
    return false;
  alive = connect (fd, (const struct sockaddr *)sa, sizeof *sa) == 0;
  close (fd);
  return alive;
}

int
control_open (const char *path, control_fn fn, void *opaque,
              struct control **out)
{
  struct control *c;
  struct sockaddr_un sa;
  struct stat st;
  mode_t old_mask;
  int r;

  r = make_addr (path, &sa);
  if (r < 0)
    return r;
  if (lstat (path, &st) == 0)
    {
      if (!S_ISSOCK (st.st_mode))
        return -EEXIST;
      if (socket_alive (&sa))
        return -EADDRINUSE;
      unlink (path); /* stale, from a server that died */
    }

  c = calloc (1, sizeof *c);
  if (!c)
    return -ENOMEM;
  c->lfd = -1;
  c->wake[0] = c->wake[1] = -1;
  pthread_mutex_init (&c->lock, NULL);
  pthread_cond_init (&c->cond, NULL);
  c->fn = fn;
  c->opaque = opaque;
  c->path = strdup (path);
  if (!c->path)
    {
      r = -ENOMEM;
      goto err;
    }
  c->lfd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->lfd == -1 || pipe2 (c->wake, O_CLOEXEC) == -1)
    {
      r = -errno;
      goto err;
    }
  /* Called before any serving thread exists, so the umask is ours. */
  old_mask = umask (0177);
  r = bind (c->lfd, (struct sockaddr *)&sa, sizeof sa);
  umask (old_mask);
  if (r == -1 || listen (c->lfd, 8) == -1)
    {
      r = -errno;
      goto err;
    }
  *out = c;
  return 0;

err:
  control_close (c);
  return r;
}

/* Read one command line, with a timeout so a silent client cannot hold
 * the socket.
 */
static int
read_line (int fd, char *buf, size_t size)
{
  size_t n = 0;

  while (n < size - 1)
    {
      struct pollfd p = { .fd = fd, .events = POLLIN };
      ssize_t r;

      if (poll (&p, 1, CLIENT_TIMEOUT_MS) <= 0)
        return -ETIMEDOUT;
      r = read (fd, buf + n, size - 1 - n);
      if (r <= 0)
        break;
      n += r;
      if (memchr (buf, '\n', n))
        break;
    }
  buf[n] = '\0';
  buf[strcspn (buf, "\r\n")] = '\0';
  return n > 0 ? 0 : -EPROTO;
}

/* Write all of buf, unless the client went away: never SIGPIPE. */
static void
send_all (int fd, const char *buf, size_t len)
{
  for (size_t off = 0; off < len;)
    {
      ssize_t w = send (fd, buf + off, len - off, MSG_NOSIGNAL);

      if (w <= 0)
        break;
      off += w;
    }
}

static void
send_error (int fd, int err)
{
  char line[128];
  int n = snprintf (line, sizeof line, "error: %s\n", strerror (err));

  send_all (fd, line, n > 0 && (size_t)n < sizeof line ? n : 0);
}

static void
serve_client (struct control *c, int fd)
{
  char cmd[CMD_MAX];
  char *body = NULL;
  size_t len = 0;
  FILE *out;
  int r;

  r = read_line (fd, cmd, sizeof cmd);
  if (r < 0)
    return;
  /* A client that stops reading must not block this thread for ever. */
  setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO,
              &(struct timeval){ .tv_sec = CLIENT_TIMEOUT_MS / 1000 },
              sizeof (struct timeval));
  out = open_memstream (&body, &len);
  if (!out)
    return;
  r = c->fn (c->opaque, cmd, out);
  fclose (out);
  if (r < 0)
    send_error (fd, -r);
  else
    {
      send_all (fd, "ok\n", 3);
      send_all (fd, body, len);
    }
  free (body);
}

/* accept4 failed.  Out of descriptors or memory (EMFILE, ENFILE,
 * ENOBUFS, ENOMEM) the pending connection stays, and poll would report
 * it again at once: wait, 10 ms doubling up to 1 s, unless woken to
 * stop.  Other errors (the client gave up) need no wait.
 */
static void
accept_backoff (struct control *c, int *delay_ms)
{
  struct pollfd wake = { .fd = c->wake[0], .events = POLLIN };

  if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM)
    return;
  if (*delay_ms == 0)
    log_notice ("control socket: accept: %s (waiting)", strerror (errno));
  *delay_ms = *delay_ms ? *delay_ms * 2 : 10;
  if (*delay_ms > 1000)
    *delay_ms = 1000;
  poll (&wake, 1, *delay_ms);
}

static void *
client_thread (void *p)
{
  struct client *cl = p;
  struct control *c = cl->c;

  serve_client (c, cl->fd);
  /* Its room is free before the client sees the end of the reply. */
  pthread_mutex_lock (&c->lock);
  c->clients--;
  pthread_cond_broadcast (&c->cond);
  pthread_mutex_unlock (&c->lock);
  close (cl->fd);
  free (cl);
  return NULL;
}

/* Serve fd on a thread of its own; with CLIENT_MAX already served (or no
 * thread to be had), tell the client so at once.  Takes fd.
 */
static void
serve_apart (struct control *c, int fd)
{
  struct client *cl = malloc (sizeof *cl);
  pthread_attr_t attr;
  pthread_t t;
  bool room;
  int r = -1;

  pthread_mutex_lock (&c->lock);
  room = c->clients < CLIENT_MAX;
  c->clients += room;
  pthread_mutex_unlock (&c->lock);
  if (room && cl)
    {
      *cl = (struct client){ c, fd };
      pthread_attr_init (&attr);
      pthread_attr_setdetachstate (&attr, PTHREAD_CREATE_DETACHED);
      r = pthread_create (&t, &attr, client_thread, cl);
      pthread_attr_destroy (&attr);
      if (r == 0)
        return;
    }
  if (room)
    {
      pthread_mutex_lock (&c->lock);
      c->clients--;
      pthread_mutex_unlock (&c->lock);
    }
  free (cl);
  send_error (fd, room ? (r > 0 ? r : ENOMEM) : EBUSY);
  close (fd);
}

static void *
control_thread (void *p)
{
  struct control *c = p;
  int delay_ms = 0;

  for (;;)
    {
      struct pollfd fds[2] = {
        { .fd = c->lfd, .events = POLLIN },
        { .fd = c->wake[0], .events = POLLIN },
      };
      int fd;

      if (poll (fds, 2, -1) == -1)
        {
          if (errno == EINTR)
            continue;
          log_notice ("control socket: poll: %s", strerror (errno));
          break;
        }
      if (fds[1].revents)
        break;
      fd = accept4 (c->lfd, NULL, NULL, SOCK_CLOEXEC);
      if (fd == -1)
        {
          accept_backoff (c, &delay_ms);
          continue;
        }
      delay_ms = 0;
      serve_apart (c, fd);
    }
  return NULL;
}

int
control_start (struct control *c)
{
  int r = pthread_create (&c->thread, NULL, control_thread, c);

  if (r != 0)
    return -r;
  c->running = true;
  return 0;
}

void
control_unlisten (struct control *c)
{
  if (!c)
    return;
  if (c->running)
    {
      char b = 0;

      if (write (c->wake[1], &b, 1) == 1)
        pthread_join (c->thread, NULL);
      c->running = false;
    }
  if (c->lfd >= 0)
    {
      close (c->lfd);
      unlink (c->path);
      c->lfd = -1;
    }
}

void
control_close (struct control *c)
{
  if (!c)
    return;
  control_unlisten (c);
  /* The clients still served end within CLIENT_TIMEOUT_MS, or once
   * their command has (a flush: once the store answered or timed out).
   */
  pthread_mutex_lock (&c->lock);
  while (c->clients > 0)
    pthread_cond_wait (&c->cond, &c->lock);
  pthread_mutex_unlock (&c->lock);
  if (c->wake[0] >= 0)
    close (c->wake[0]);
  if (c->wake[1] >= 0)
    close (c->wake[1]);
  pthread_mutex_destroy (&c->lock);
  pthread_cond_destroy (&c->cond);
  free (c->path);
  free (c);
}

/* "stats [json|prometheus]" */
static int
cmd_stats (struct engine *e, const char *fmt, FILE *out)
{
  struct stats_snapshot s;
  int r;

  if (*fmt && strcmp (fmt, "json") != 0 && strcmp (fmt, "prometheus") != 0)
    return -EINVAL;
  r = engine_stats (e, &s);
  if (r < 0)
    return r;
  if (strcmp (fmt, "json") == 0)
    stats_print_json (out, &s);
  else if (strcmp (fmt, "prometheus") == 0)
    stats_print_prometheus (out, &s);
  else
    stats_print_text (out, &s);
  engine_stats_free (&s);
  return 0;
}

/* "holds [json]" */
static int
cmd_holds (struct engine *e, const char *fmt, FILE *out)
{
  struct holds_printer p;
  int r;

  if (*fmt && strcmp (fmt, "json") != 0)
    return -EINVAL;
  holds_print_begin (&p, out, *fmt != '\0');
  r = engine_holds (e, holds_print_one, &p);
  if (r < 0)
    return r;
  holds_print_end (&p);
  return 0;
}

/* "drain [SECONDS]": drain_run; "drained", or why not. */
static int
cmd_drain (struct engine *e, const char *arg, FILE *out)
{
  char why[256], *end;
  unsigned long s = 0;

  if (*arg && ((s = strtoul (arg, &end, 10)) == 0 || *end || s > 86400))
    return -EINVAL;
  if (drain_run (e, s * 1000000000ull, why, sizeof why) == 0)
    fprintf (out, "drained\n");
  else
    fprintf (out, "not drained: %s\n", why);
  return 0;
}

/* The argument of command name in cmd ("" for none), or NULL if cmd is
 * another command.
 */
static const char *
arg_of (const char *cmd, const char *name)
{
  size_t n = strlen (name);

  if (strncmp (cmd, name, n) != 0)
    return NULL;
  if (cmd[n] == '\0')
    return cmd + n;
  return cmd[n] == ' ' && cmd[n + 1] != '\0' ? cmd + n + 1 : NULL;
}

int
control_engine_cmd (void *opaque, const char *cmd, FILE *out)
{
  struct engine *e = opaque;
  const char *arg;

  if (strcmp (cmd, "flush") == 0)
    return engine_writeback_all (e);
  if ((arg = arg_of (cmd, "stats")) != NULL)
    return cmd_stats (e, arg, out);
  if ((arg = arg_of (cmd, "holds")) != NULL)
    return cmd_holds (e, arg, out);
  if ((arg = arg_of (cmd, "drain")) != NULL)
    return cmd_drain (e, arg, out);
  return -EINVAL;
}
