/*
 * hangar-spawner: starts processes for Hangar from a process of a few hundred KiB.
 *
 * Node's spawn() forks the whole Node process and blocks its event loop until the child has exec'd: ~6 ms on
 * the 2-core VM even from an idle Node, more from a loaded Hangar. Code execution starts the launcher three
 * times per request (work dir create, run, remove), so Hangar starts this program once and asks it instead
 * (src/platform/isolation/spawner.ts); a fork of this process costs a fraction of a millisecond.
 *
 * Protocol on stdin (requests) and stdout (answers), every integer little-endian (x86-64 and arm64 are):
 *
 *   request  = u32 len, u32 type, u32 id, payload[len - 8]
 *     type 1 SPAWN: u32 nout, u64 cap[nout], u32 argc, argc NUL-terminated strings (argv[0] is the path),
 *                   then the bytes to write to the child's stdin (it is closed after them)
 *     type 2 KILL:  i32 signal
 *   answer   = u32 len, u32 type (1 DONE), u32 id, i32 kind, i32 value, u32 nout,
 *              nout x (u8 truncated, u32 n, n bytes), then a UTF-8 message (empty unless kind is 2)
 *     kind 0: exited with code `value`; 1: killed by signal `value`; 2: could not start (errno `value`)
 *
 * The child gets stdin on fd 0 and output pipe i on fd 1 + i (nout <= 4), the empty environment, default
 * signal dispositions and an empty signal mask. The first cap[i] bytes of each output are kept, the rest is
 * read and dropped (truncated = 1). DONE is sent once the child is reaped and every output is at EOF.
 * When Hangar goes away (EOF on stdin, or its death: this process has SIGKILL as its parent-death signal),
 * every child gets SIGTERM; the launcher also has SIGTERM as its own parent-death signal.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_OUT 4
#define MAX_FRAME (512u << 20)
#define MAX_ARGS 4096

struct out {
  int fd;
  char *buf;
  size_t len, alloc;
  uint64_t cap;
  bool truncated;
};

struct job {
  uint32_t id;
  pid_t pid;
  bool reaped;
  int status;
  int in_fd;
  char *in_buf;
  size_t in_len, in_off;
  uint32_t nout;
  struct out out[MAX_OUT];
  struct job *next;
};

static struct job *jobs = NULL;

static void die(const char *what) {
  fprintf(stderr, "hangar-spawner: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) die("out of memory");
  return q;
}

static void write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      exit(0); /* Hangar went away: nobody to answer */
    }
    p += w;
    n -= (size_t)w;
  }
}

/* An answer is built in one buffer and written at once. */
struct wbuf {
  char *p;
  size_t len, alloc;
};
static void put(struct wbuf *b, const void *data, size_t n) {
  if (b->len + n > b->alloc) {
    b->alloc = (b->len + n) * 2;
    b->p = xrealloc(b->p, b->alloc);
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
}
static void put_u32(struct wbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_i32(struct wbuf *b, int32_t v) { put(b, &v, 4); }

static void answer(uint32_t id, int32_t kind, int32_t value, struct out *outs, uint32_t nout, const char *message) {
  struct wbuf b = {0};
  put_u32(&b, 0); /* length, filled in below */
  put_u32(&b, 1);
  put_u32(&b, id);
  put_i32(&b, kind);
  put_i32(&b, value);
  put_u32(&b, nout);
  for (uint32_t i = 0; i < nout; i++) {
    uint8_t t = outs ? outs[i].truncated : 0;
    uint32_t n = outs ? (uint32_t)outs[i].len : 0;
    put(&b, &t, 1);
    put_u32(&b, n);
    if (n) put(&b, outs[i].buf, n);
  }
  if (message) put(&b, message, strlen(message));
  uint32_t len = (uint32_t)(b.len - 4);
  memcpy(b.p, &len, 4);
  write_all(1, b.p, b.len);
  free(b.p);
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* In the child: fds in place, signals reset, exec. Failure is reported on errfd (close-on-exec). */
static void __attribute__((noreturn)) child(int in_fd, int *out_fds, uint32_t nout, char **argv, int errfd) {
  sigset_t none;
  sigemptyset(&none);
  for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* Move every source above the targets first, so that no dup2 overwrites a source still to be placed. */
  int src[MAX_OUT + 1];
  src[0] = fcntl(in_fd, F_DUPFD_CLOEXEC, 16);
  for (uint32_t i = 0; i < nout; i++) src[i + 1] = fcntl(out_fds[i], F_DUPFD_CLOEXEC, 16);
  for (uint32_t i = 0; i <= nout; i++)
    if (src[i] < 0 || dup2(src[i], (int)i) < 0) goto fail;
  /* fds 1 and 2 that no output takes go to /dev/null rather than to Hangar's own stdio. */
  for (uint32_t t = nout + 1; t <= 2; t++) {
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0 || dup2(fd, (int)t) < 0) goto fail;
    if (fd != (int)t) close(fd);
  }
  {
    char *envp[] = {NULL};
    execve(argv[0], argv, envp);
  }
fail: {
  int e = errno;
  write(errfd, &e, sizeof e);
  _exit(127);
}
}

static void start(uint32_t id, const char *p, size_t n) {
  const char *end = p + n;
  uint32_t nout, argc;
  uint64_t caps[MAX_OUT];
  char *argv[MAX_ARGS + 1];
  if (n < 4) goto bad;
  memcpy(&nout, p, 4), p += 4;
  if (nout > MAX_OUT || (size_t)(end - p) < nout * 8 + 4) goto bad;
  memcpy(caps, p, nout * 8), p += nout * 8;
  memcpy(&argc, p, 4), p += 4;
  if (argc < 1 || argc > MAX_ARGS) goto bad;
  for (uint32_t i = 0; i < argc; i++) {
    const char *z = memchr(p, '\0', (size_t)(end - p));
    if (!z) goto bad;
    argv[i] = (char *)p;
    p = z + 1;
  }
  argv[argc] = NULL;

  int in[2] = {-1, -1}, outs[MAX_OUT][2], err[2] = {-1, -1};
  for (uint32_t i = 0; i < nout; i++) outs[i][0] = outs[i][1] = -1;
  bool ok = pipe2(in, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0;
  for (uint32_t i = 0; ok && i < nout; i++) ok = pipe2(outs[i], O_CLOEXEC) == 0;
  int e = errno;
  pid_t pid = ok ? fork() : -1;
  if (ok && pid < 0) e = errno;
  if (pid == 0) {
    int wr[MAX_OUT];
    for (uint32_t i = 0; i < nout; i++) wr[i] = outs[i][1];
    child(in[0], wr, nout, argv, err[1]);
  }
  close_fd(&in[0]);
  close_fd(&err[1]);
  for (uint32_t i = 0; i < nout; i++) close_fd(&outs[i][1]);
  if (pid > 0) {
    /* EOF on the error pipe: the exec happened. A few bytes: it did not, and they say why. */
    int child_errno = 0;
    ssize_t r;
    do r = read(err[0], &child_errno, sizeof child_errno);
    while (r < 0 && errno == EINTR);
    if (r == (ssize_t)sizeof child_errno) {
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
      }
      pid = -1;
      e = child_errno;
    }
  }
  close_fd(&err[0]);
  if (pid < 0) {
    close_fd(&in[1]);
    for (uint32_t i = 0; i < nout; i++) close_fd(&outs[i][0]);
    answer(id, 2, e, NULL, nout, strerror(e));
    return;
  }

  struct job *j = calloc(1, sizeof *j);
  if (!j) die("out of memory");
  j->id = id;
  j->pid = pid;
  j->nout = nout;
  j->in_fd = in[1];
  j->in_len = (size_t)(end - p);
  if (j->in_len) {
    j->in_buf = xrealloc(NULL, j->in_len);
    memcpy(j->in_buf, p, j->in_len);
    set_nonblock(j->in_fd);
  } else {
    close_fd(&j->in_fd);
  }
  for (uint32_t i = 0; i < nout; i++) {
    j->out[i].fd = outs[i][0];
    j->out[i].cap = caps[i];
    set_nonblock(j->out[i].fd);
  }
  j->next = jobs;
  jobs = j;
  return;
bad:
  answer(id, 2, EINVAL, NULL, 0, "malformed spawn request");
}

static void kill_job(uint32_t id, int sig) {
  for (struct job *j = jobs; j; j = j->next)
    if (j->id == id && !j->reaped) kill(j->pid, sig);
}

static void pump_out(struct out *o) {
  static char scratch[65536];
  for (;;) {
    ssize_t r = read(o->fd, scratch, sizeof scratch);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      r = 0;
    }
    if (r == 0) {
      close_fd(&o->fd);
      return;
    }
    size_t keep = (size_t)r;
    if (o->len + keep > o->cap) {
      keep = o->cap > o->len ? (size_t)(o->cap - o->len) : 0;
      o->truncated = true;
    }
    if (keep) {
      if (o->len + keep > o->alloc) {
        o->alloc = (o->len + keep) * 2;
        if (o->alloc > o->cap) o->alloc = (size_t)o->cap;
        o->buf = xrealloc(o->buf, o->alloc);
      }
      memcpy(o->buf + o->len, scratch, keep);
      o->len += keep;
    }
  }
}

static void pump_in(struct job *j) {
  while (j->in_off < j->in_len) {
    ssize_t w = write(j->in_fd, j->in_buf + j->in_off, j->in_len - j->in_off);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      break; /* EPIPE: the program did not read all of its stdin */
    }
    j->in_off += (size_t)w;
  }
  close_fd(&j->in_fd);
}

/* Answers and frees every job whose child is reaped and whose outputs are all at EOF. */
static void finish_jobs(void) {
  for (struct job **pp = &jobs; *pp;) {
    struct job *j = *pp;
    bool open = false;
    for (uint32_t i = 0; i < j->nout; i++) open |= j->out[i].fd >= 0;
    if (!j->reaped || open) {
      pp = &j->next;
      continue;
    }
    close_fd(&j->in_fd);
    if (WIFSIGNALED(j->status)) answer(j->id, 1, WTERMSIG(j->status), j->out, j->nout, "");
    else answer(j->id, 0, WEXITSTATUS(j->status), j->out, j->nout, "");
    *pp = j->next;
    for (uint32_t i = 0; i < j->nout; i++) free(j->out[i].buf);
    free(j->in_buf);
    free(j);
  }
}

static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (struct job *j = jobs; j; j = j->next) {
      if (j->pid == pid) {
        j->reaped = true;
        j->status = status;
        break;
      }
    }
  }
}

static void hangup(void) {
  for (struct job *j = jobs; j; j = j->next)
    if (!j->reaped) kill(j->pid, SIGTERM);
  exit(0);
}

int main(void) {
  pid_t parent = getppid();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die("prctl");
  if (getppid() != parent) return 0;
  signal(SIGPIPE, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &chld, NULL) != 0) die("sigprocmask");
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die("signalfd");
  fcntl(0, F_SETFD, FD_CLOEXEC);
  fcntl(1, F_SETFD, FD_CLOEXEC);

  char *req = NULL;
  size_t req_len = 0, req_alloc = 0;
  struct pollfd *pfd = NULL;
  struct job **owner = NULL;
  size_t pfd_alloc = 0;
  for (;;) {
    size_t n = 0, need = 2;
    for (struct job *j = jobs; j; j = j->next) need += 1 + j->nout;
    if (need > pfd_alloc) {
      pfd_alloc = need * 2;
      pfd = xrealloc(pfd, pfd_alloc * sizeof *pfd);
      owner = xrealloc(owner, pfd_alloc * sizeof *owner);
    }
    pfd[n] = (struct pollfd){.fd = 0, .events = POLLIN}, owner[n++] = NULL;
    pfd[n] = (struct pollfd){.fd = sfd, .events = POLLIN}, owner[n++] = NULL;
    for (struct job *j = jobs; j; j = j->next) {
      if (j->in_fd >= 0) pfd[n] = (struct pollfd){.fd = j->in_fd, .events = POLLOUT}, owner[n++] = j;
      for (uint32_t i = 0; i < j->nout; i++)
        if (j->out[i].fd >= 0) pfd[n] = (struct pollfd){.fd = j->out[i].fd, .events = POLLIN}, owner[n++] = j;
    }
    if (poll(pfd, n, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    for (size_t k = 2; k < n; k++) {
      if (!pfd[k].revents) continue;
      struct job *j = owner[k];
      if (pfd[k].fd == j->in_fd) {
        pump_in(j);
        continue;
      }
      for (uint32_t i = 0; i < j->nout; i++)
        if (j->out[i].fd == pfd[k].fd) pump_out(&j->out[i]);
    }
    if (pfd[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
      reap();
    }
    if (pfd[0].revents) {
      if (req_len + 65536 > req_alloc) {
        req_alloc = (req_len + 65536) * 2;
        req = xrealloc(req, req_alloc);
      }
      ssize_t r = read(0, req + req_len, req_alloc - req_len);
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) hangup();
      if (r > 0) req_len += (size_t)r;
      size_t off = 0;
      while (req_len - off >= 4) {
        uint32_t len, type, id;
        memcpy(&len, req + off, 4);
        if (len < 8 || len > MAX_FRAME) {
          fprintf(stderr, "hangar-spawner: bad frame length %u\n", len);
          exit(1);
        }
        if (req_len - off - 4 < len) break;
        memcpy(&type, req + off + 4, 4);
        memcpy(&id, req + off + 8, 4);
        const char *payload = req + off + 12;
        size_t plen = len - 8;
        if (type == 1) start(id, payload, plen);
        else if (type == 2 && plen >= 4) {
          int32_t sig;
          memcpy(&sig, payload, 4);
          kill_job(id, sig);
        }
        off += 4 + len;
      }
      memmove(req, req + off, req_len - off);
      req_len -= off;
    }
    finish_jobs();
  }
}
