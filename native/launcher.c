/*
 * hangar-launcher: runs one program in a fresh sandbox, as root on the host side, and reports how it ended.
 *
 *   hangar-launcher run [OPTIONS] -- PROGRAM [ARGS...]
 *   hangar-launcher workdir-create PATH UID GID BYTES
 *   hangar-launcher workdir-remove PATH
 *   hangar-launcher tools-mount PATH
 *   hangar-launcher sweep [--cgroup-root DIR] [--cgroup-parent NAME]
 *
 * `run` (see usage() for the options), in order:
 *   1. creates a fresh cgroup per run and writes the limits: cgroup v1 under
 *      <cgroup-root>/<controller>/<cgroup-parent>/<pid>-<starttime> (memory (+memsw), pids, cpu, cpuacct,
 *      freezer); cgroup v2 (when <cgroup-root> has cgroup.controllers) one directory
 *      <cgroup-root>/<cgroup-parent>/<pid>-<starttime> (memory.max, memory.swap.max=0, pids.max, cpu.max);
 *   2. forks (v2: clone3 straight into the run's cgroup); the child joins those cgroups *before* exec, sets rlimits (FSIZE, NOFILE, CORE=0, CPU as a
 *      backstop), drops to the unprivileged sandbox uid (setgroups(0) + setresgid + setresuid: bwrap started
 *      as root would keep root's capabilities and could write host files), asks for SIGKILL if the launcher
 *      dies, and execs bwrap with --unshare-all (net included: only a loopback inside), --die-with-parent,
 *      --new-session, read-only toolchains (with an empty /usr/local), a generated minimal /etc, /proc, a
 *      minimal /dev, a tmpfs /tmp, the work dir read-write at /box, the tools dir (the reaper and the
 *      sandboxed tools) read-only at /.hangar, and a read-only root;
 *   3. inside, hangar-reaper (pid 1) runs PROGRAM and reports its exact status and peak RSS on a pipe;
 *   4. the launcher enforces the wall-clock limit and the CPU-time limit of the whole tree (cpuacct), kills
 *      the whole cgroup race-free (v2: cgroup.kill; v1 and old v2 kernels: freeze, SIGKILL all, thaw, until empty) on timeout,
 *      abort (SIGTERM/SIGINT/SIGHUP, also sent by the kernel if the caller dies) or at the end as a
 *      backstop, reads the OOM-kill counter and CPU usage, removes the cgroups, and writes one JSON line to
 *      the report fd (default 3).
 *
 * stdio: the caller's fds 0-2 are relayed to and from real pipes given to PROGRAM (struct relay), which
 * also enforces the output cap. Only sandbox processes hold the program ends of those pipes, so they reach
 * EOF exactly when the sandbox is gone, and the launcher then closes the caller's fds: the caller's reads
 * always finish. Diagnostics go only to the JSON report, never to the program's stdout/stderr.
 *
 * `workdir-create` mounts a size-limited tmpfs owned by the sandbox uid (mode 0700) on a fresh directory
 * under a root-owned parent; `workdir-remove` detaches and removes it. `tools-mount` mounts the tools dir's
 * tmpfs once per boot (root-owned, 0755; the host installs the reaper and tools into it): a tmpfs so that
 * /proc/self/mountinfo inside shows its root as "/", not a host path. `sweep` removes per-run cgroups whose
 * launcher no longer exists (a launcher killed with SIGKILL cannot clean up after itself).
 *
 * The cgroup code sits behind a small driver table (struct cg_driver): cg_v1 and cg_v2, picked from
 * --cgroup-root (docs/adr/0008-code-execution-isolation.md, docs/adr/0020-cgroup-v2.md). On v2 the caller
 * (src/platform/isolation/cgroups.ts) passes its own delegated cgroup as --cgroup-root, with memory, pids and
 * cpu enabled in its cgroup.subtree_control.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* Lowest uid the launcher will run a sandbox as: never root, never a system account. */
#define MIN_SANDBOX_ID 1000
/* Processes of ours inside the run's pids cgroup besides the program: bwrap's outer process and the reaper. */
#define HELPER_PROCS 2
#define MAX_ARGS 4096
#define MAX_ENV 512

/* ------------------------------------------------------------------------------------------------------ */
/* Small utilities                                                                                          */
/* ------------------------------------------------------------------------------------------------------ */

static int report_fd = 3;

static long long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static void sleep_us(long us) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Appends s to out as a JSON string literal (with quotes). */
static void json_str(char *out, size_t cap, const char *s) {
  size_t n = strlen(out);
  if (n + 2 >= cap) return;
  out[n++] = '"';
  for (; *s && n + 8 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[n++] = '\\';
      out[n++] = (char)c;
    } else if (c < 0x20) {
      n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
    } else {
      out[n++] = (char)c;
    }
  }
  out[n++] = '"';
  out[n] = '\0';
}

static void append(char *out, size_t cap, const char *fmt, ...) {
  size_t n = strlen(out);
  if (n >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out + n, cap - n, fmt, ap);
  va_end(ap);
}

static void write_all(int fd, const char *s, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, s, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return; /* the caller went away: nothing to report to */
    }
    s += w;
    len -= (size_t)w;
  }
}

/* Writes value to a (cgroup) file. Returns 0 or -errno. */
static int write_file(const char *path, const char *value) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t len = (ssize_t)strlen(value);
  ssize_t w = write(fd, value, (size_t)len);
  int e = w == len ? 0 : (w < 0 ? -errno : -EIO);
  close(fd);
  return e;
}

/* Reads a small file into buf (NUL-terminated). Returns bytes read or -errno. */
static ssize_t read_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t n = 0;
  while (n + 1 < cap) {
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = -errno;
      close(fd);
      return e;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  buf[n] = '\0';
  close(fd);
  return (ssize_t)n;
}

static long long read_ll(const char *path, long long fallback) {
  char buf[64];
  if (read_file(path, buf, sizeof buf) <= 0) return fallback;
  return atoll(buf);
}

static bool file_exists(const char *path) { return access(path, F_OK) == 0; }

/* Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat), or -1. Together with the
 * pid it names a process uniquely: pids are reused, (pid, starttime) pairs are not. */
static long long proc_starttime(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  if (read_file(path, buf, sizeof buf) <= 0) return -1;
  char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
  if (!p) return -1;
  p++;
  /* after ")" come fields 3..: state is field 3, starttime field 22 */
  for (int field = 3; field < 22; field++) {
    p = strchr(p + 1, ' ');
    if (!p) return -1;
  }
  return atoll(p + 1);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Children and the launcher's result state                                                                 */
/* ------------------------------------------------------------------------------------------------------ */

static pid_t sandbox_pid = -1;     /* our direct child: bwrap's outer process */
static bool sandbox_done = false;
static int sandbox_status = 0;

/* Reaps every child that has ended. The launcher is a child subreaper, so processes orphaned while the
 * sandbox is torn down are reparented to it and reaped here rather than left as zombies. */
static void reap_children(void) {
  for (;;) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG | __WALL);
    if (p <= 0) {
      if (p < 0 && errno == EINTR) continue;
      return;
    }
    if (p == sandbox_pid) {
      sandbox_done = true;
      sandbox_status = st;
    }
  }
}

/* ------------------------------------------------------------------------------------------------------ */
/* cgroup drivers                                                                                           */
/* ------------------------------------------------------------------------------------------------------ */

struct limits {
  long long wall_ms, cpu_ms, memory, pids, fsize, nofile, tmp_bytes, cpu_quota_pct, cpu_weight;
};

struct cg_stats {
  long long cpu_ns;       /* user+sys of every process that ran in the cgroup */
  long long oom_kills;    /* processes the kernel's OOM killer killed in the cgroup */
  long long mem_failcnt;  /* times the memory limit was hit */
  long long mem_peak;     /* peak charge (RSS + page cache + kernel memory), bytes */
};

#define MAX_CG_DIRS 8
struct cgroup {
  int ndirs;
  char dirs[MAX_CG_DIRS][PATH_MAX]; /* the run's cgroup directory in each distinct hierarchy */
  int memory, pids, cpu, cpuacct, freezer; /* indexes into dirs (v1) */
  bool memsw;
  bool v2_peak;            /* v2: memory.peak exists (kernel 5.19+) */
  long long sampled_peak;  /* v2 without memory.peak: highest memory.current seen while waiting */
};

struct cg_driver {
  const char *name;
  /* Names an existing run's cgroups (for sweep) without creating anything. */
  int (*open)(struct cgroup *cg, const char *root, const char *parent, const char *name, bool create, char *err,
              size_t errlen);
  /* Creates the run's cgroups and writes the limits; on failure fills err and removes what it made. */
  int (*create)(struct cgroup *cg, const char *root, const char *parent, const char *name, const struct limits *l,
                char *err, size_t errlen);
  /* Moves the calling process (pid) into the run's cgroups: called by the child itself, before exec. */
  int (*join)(const struct cgroup *cg, pid_t pid);
  /* Forks a child that starts inside the run's cgroup (no migration; may be NULL). Returns like fork(), or -1
   * when the kernel cannot (the caller then forks and the child joins). */
  pid_t (*fork_into)(const struct cgroup *cg);
  /* CPU time used so far, in ns. */
  long long (*cpu_ns)(const struct cgroup *cg);
  /* Called on every turn of the wait loop (may be NULL): samples what the kernel does not record. */
  void (*sample)(struct cgroup *cg);
  /* Kills every process in the run's cgroups and waits until they are gone. */
  void (*kill_all)(const struct cgroup *cg);
  void (*stats)(const struct cgroup *cg, struct cg_stats *st);
  /* Removes the run's cgroups (they must be empty). */
  void (*destroy)(const struct cgroup *cg);
};

/* --- cgroup v1 ----------------------------------------------------------------------------------------- */

static const char *const v1_controllers[] = {"memory", "pids", "cpu", "cpuacct", "freezer"};
#define V1_NCONTROLLERS (int)(sizeof v1_controllers / sizeof v1_controllers[0])

static void cg_path(char *out, const struct cgroup *cg, int idx, const char *file) {
  if (snprintf(out, PATH_MAX, "%s/%s", cg->dirs[idx], file) >= PATH_MAX) out[0] = '\0';
}

static void v1_destroy(const struct cgroup *cg) {
  for (int i = 0; i < cg->ndirs; i++) {
    /* rmdir fails with EBUSY for a moment after the last task exits; retry for up to a second. */
    for (int tries = 0; tries < 1000; tries++) {
      if (rmdir(cg->dirs[i]) == 0 || errno == ENOENT) break;
      if (errno != EBUSY) break;
      reap_children();
      sleep_us(1000);
    }
  }
}

/* Fills cg with the run's cgroup directory in each distinct v1 hierarchy, creating them (and the parent)
 * when create is set. Co-mounted controllers (e.g. "cpu,cpuacct") appear as symlinks to one hierarchy,
 * whose directory is then listed once. */
static int v1_open(struct cgroup *cg, const char *root, const char *parent, const char *name, bool create,
                   char *err, size_t errlen) {
  char mnt[PATH_MAX], real[V1_NCONTROLLERS][PATH_MAX], path[PATH_MAX];
  int idx[V1_NCONTROLLERS];
  memset(cg, 0, sizeof *cg);
  for (int c = 0; c < V1_NCONTROLLERS; c++) {
    snprintf(mnt, sizeof mnt, "%s/%s", root, v1_controllers[c]);
    if (!realpath(mnt, real[c])) {
      snprintf(err, errlen, "cgroup v1 controller '%s' is not mounted at %s", v1_controllers[c], mnt);
      return -1;
    }
    if (snprintf(path, sizeof path, "%s/cgroup.procs", real[c]) >= (int)sizeof path || !file_exists(path)) {
      snprintf(err, errlen, "%s is not a cgroup v1 hierarchy", real[c]);
      return -1;
    }
    idx[c] = -1;
    for (int d = 0; d < c; d++)
      if (strcmp(real[d], real[c]) == 0) idx[c] = idx[d];
    if (idx[c] >= 0) continue;
    idx[c] = cg->ndirs;
    if (snprintf(cg->dirs[cg->ndirs], PATH_MAX, "%s/%s/%s", real[c], parent, name) >= PATH_MAX ||
        snprintf(path, sizeof path, "%s/%s", real[c], parent) >= (int)sizeof path) {
      snprintf(err, errlen, "cgroup path too long under %s", real[c]);
      return -1;
    }
    if (create) {
      if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", path, strerror(errno));
        return -1;
      }
      if (mkdir(cg->dirs[cg->ndirs], 0755) != 0) {
        snprintf(err, errlen, "mkdir %s: %s", cg->dirs[cg->ndirs], strerror(errno));
        return -1;
      }
    }
    cg->ndirs++;
  }
  cg->memory = idx[0];
  cg->pids = idx[1];
  cg->cpu = idx[2];
  cg->cpuacct = idx[3];
  cg->freezer = idx[4];
  return 0;
}

static int v1_create(struct cgroup *cg, const char *root, const char *parent, const char *name,
                     const struct limits *l, char *err, size_t errlen) {
  char path[PATH_MAX];
  if (v1_open(cg, root, parent, name, true, err, errlen) != 0) goto fail;

  char value[64];
  int e;
  snprintf(value, sizeof value, "%lld", l->memory);
  cg_path(path, cg, cg->memory, "memory.limit_in_bytes");
  if ((e = write_file(path, value)) != 0) goto write_fail;
  /* memsw (memory + swap) exists when swap accounting is on; it must be >= the memory limit, so it is
   * written second. Without it, swappiness 0 keeps the group from trading its limit for swap. */
  cg_path(path, cg, cg->memory, "memory.memsw.limit_in_bytes");
  if (file_exists(path)) {
    if ((e = write_file(path, value)) != 0) goto write_fail;
    cg->memsw = true;
  }
  cg_path(path, cg, cg->memory, "memory.swappiness");
  write_file(path, "0"); /* best effort: refused on some kernels for non-root groups */

  snprintf(value, sizeof value, "%lld", l->pids + HELPER_PROCS);
  cg_path(path, cg, cg->pids, "pids.max");
  if ((e = write_file(path, value)) != 0) goto write_fail;

  if (l->cpu_quota_pct > 0) {
    cg_path(path, cg, cg->cpu, "cpu.cfs_period_us");
    if ((e = write_file(path, "100000")) != 0) goto write_fail;
    snprintf(value, sizeof value, "%lld", l->cpu_quota_pct * 1000);
    cg_path(path, cg, cg->cpu, "cpu.cfs_quota_us");
    if ((e = write_file(path, value)) != 0) goto write_fail;
  }
  if (l->cpu_weight > 0) { /* v2's cpu.weight 1..10000 (default 100) as v1 shares (default 1024) */
    snprintf(value, sizeof value, "%lld", l->cpu_weight * 1024 / 100 < 2 ? 2 : l->cpu_weight * 1024 / 100);
    cg_path(path, cg, cg->cpu, "cpu.shares");
    if ((e = write_file(path, value)) != 0) goto write_fail;
  }
  return 0;

write_fail:
  snprintf(err, errlen, "writing %s: %s", path, strerror(-e));
fail:
  v1_destroy(cg);
  return -1;
}

/*
 * Moves the calling process into the run's cgroups. It writes "0" (the calling thread) to `tasks`, not its
 * pid to `cgroup.procs`: a whole-process migration takes the global cgroup_threadgroup_rwsem for writing,
 * which waits for an RCU grace period (measured 10-16 ms per run here); migrating the current thread alone
 * skips that lock. The caller is the freshly forked, single-threaded child, so thread == process.
 */
static int v1_join(const struct cgroup *cg, pid_t pid) {
  char path[PATH_MAX];
  if (pid != getpid()) return -EINVAL;
  for (int i = 0; i < cg->ndirs; i++) {
    snprintf(path, sizeof path, "%s/tasks", cg->dirs[i]);
    int e = write_file(path, "0");
    if (e != 0) return e;
  }
  return 0;
}

static long long v1_cpu_ns(const struct cgroup *cg) {
  char path[PATH_MAX];
  cg_path(path, cg, cg->cpuacct, "cpuacct.usage");
  return read_ll(path, 0);
}

/* Number of pids listed in a cgroup.procs file; kills each with SIGKILL when kill_them. */
static int procs_in(const char *procs_path, bool kill_them) {
  char buf[65536];
  if (read_file(procs_path, buf, sizeof buf) <= 0) return 0;
  int n = 0;
  for (char *p = buf; *p;) {
    char *end;
    long pid = strtol(p, &end, 10);
    if (end == p) break;
    if (pid > 0) {
      n++;
      if (kill_them) kill((pid_t)pid, SIGKILL);
    }
    p = end;
    while (*p == '\n') p++;
  }
  return n;
}

/*
 * Race-free kill of everything in the run: while the group is frozen no process in it can fork, so one
 * pass of SIGKILL over cgroup.procs reaches all of them; thawing lets the signals take effect. Repeated
 * until the group is empty (a process caught mid-fork may leave a child to catch on the next pass).
 */
static void v1_kill_all(const struct cgroup *cg) {
  char procs[PATH_MAX], state[PATH_MAX], buf[64];
  cg_path(procs, cg, cg->freezer, "cgroup.procs");
  cg_path(state, cg, cg->freezer, "freezer.state");
  for (int pass = 0; pass < 2000; pass++) {
    reap_children();
    if (procs_in(procs, false) == 0) break;
    write_file(state, "FROZEN");
    for (int i = 0; i < 200; i++) { /* up to ~100 ms; a task stuck in the kernel can keep it FREEZING */
      if (read_file(state, buf, sizeof buf) > 0 && strncmp(buf, "FROZEN", 6) == 0) break;
      sleep_us(500);
    }
    procs_in(procs, true);
    write_file(state, "THAWED");
    reap_children();
    if (procs_in(procs, false) == 0) break;
    sleep_us(pass < 10 ? 200 : 1000);
  }
  reap_children();
}

static void v1_stats(const struct cgroup *cg, struct cg_stats *st) {
  char path[PATH_MAX], buf[1024];
  memset(st, 0, sizeof *st);
  st->cpu_ns = v1_cpu_ns(cg);
  cg_path(path, cg, cg->memory, "memory.oom_control");
  if (read_file(path, buf, sizeof buf) > 0) {
    char *p = strstr(buf, "oom_kill ");
    if (p) st->oom_kills = atoll(p + 9);
  }
  cg_path(path, cg, cg->memory, "memory.failcnt");
  st->mem_failcnt = read_ll(path, 0);
  cg_path(path, cg, cg->memory, "memory.max_usage_in_bytes");
  st->mem_peak = read_ll(path, 0);
}

static const struct cg_driver cg_v1 = {
    .name = "v1",
    .open = v1_open,
    .create = v1_create,
    .join = v1_join,
    .fork_into = NULL,
    .cpu_ns = v1_cpu_ns,
    .sample = NULL,
    .kill_all = v1_kill_all,
    .stats = v1_stats,
    .destroy = v1_destroy,
};

/* --- cgroup v2 ----------------------------------------------------------------------------------------- */

/*
 * One directory per run in the unified hierarchy: <root>/<parent>/<name>. <root> is the cgroup Hangar was
 * given (the hierarchy's root, or the cgroup Hangar delegated to itself at start-up, see
 * src/platform/isolation/cgroups.ts and docs/adr/0020-cgroup-v2.md); it must already have memory, pids and
 * cpu enabled in its cgroup.subtree_control. The launcher enables them in <parent>'s cgroup.subtree_control,
 * so every run gets its own limits. <parent> holds no processes (the "no internal processes" rule), only
 * run directories (and, for sandboxes, runc's subtree).
 */
static const char *const v2_needed[] = {"memory", "pids", "cpu"};
#define V2_NNEEDED (int)(sizeof v2_needed / sizeof v2_needed[0])

/* Whether every needed controller is listed in a cgroup.controllers / cgroup.subtree_control file. */
static const char *v2_missing(const char *file) {
  char buf[512];
  if (read_file(file, buf, sizeof buf) < 0) return v2_needed[0];
  for (int i = 0; i < V2_NNEEDED; i++) {
    bool found = false;
    size_t len = strlen(v2_needed[i]);
    for (char *p = buf; (p = strstr(p, v2_needed[i])) != NULL; p += len) {
      if ((p == buf || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\n' || p[len] == '\0')) {
        found = true;
        break;
      }
    }
    if (!found) return v2_needed[i];
  }
  return NULL;
}

static void v2_destroy(const struct cgroup *cg) {
  for (int tries = 0; tries < 1000; tries++) {
    if (rmdir(cg->dirs[0]) == 0 || errno == ENOENT) break;
    if (errno != EBUSY) break;
    reap_children();
    sleep_us(1000);
  }
}

static int v2_open(struct cgroup *cg, const char *root, const char *parent, const char *name, bool create,
                   char *err, size_t errlen) {
  char path[PATH_MAX];
  memset(cg, 0, sizeof *cg);
  cg->ndirs = 1;
  if (snprintf(cg->dirs[0], PATH_MAX, "%s/%s/%s", root, parent, name) >= PATH_MAX) {
    snprintf(err, errlen, "cgroup path too long under %s", root);
    return -1;
  }
  if (!create) return 0;
  const char *missing;
  snprintf(path, sizeof path, "%s/cgroup.subtree_control", root);
  if ((missing = v2_missing(path)) != NULL) {
    snprintf(err, errlen,
             "the '%s' controller is not enabled in %s (Hangar enables memory, pids and cpu there at start-up)",
             missing, path);
    return -1;
  }
  snprintf(path, sizeof path, "%s/%s", root, parent);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) {
    snprintf(err, errlen, "mkdir %s: %s", path, strerror(errno));
    return -1;
  }
  snprintf(path, sizeof path, "%s/%s/cgroup.subtree_control", root, parent);
  if (v2_missing(path) != NULL) {
    int e = write_file(path, "+memory +pids +cpu");
    if (e != 0) {
      snprintf(err, errlen, "enabling memory, pids and cpu in %s: %s", path, strerror(-e));
      return -1;
    }
  }
  if (mkdir(cg->dirs[0], 0755) != 0) {
    snprintf(err, errlen, "mkdir %s: %s", cg->dirs[0], strerror(errno));
    return -1;
  }
  cg->v2_peak = snprintf(path, sizeof path, "%s/memory.peak", cg->dirs[0]) < (int)sizeof path && file_exists(path);
  return 0;
}

static int v2_create(struct cgroup *cg, const char *root, const char *parent, const char *name,
                     const struct limits *l, char *err, size_t errlen) {
  char path[PATH_MAX], value[64];
  int e;
  if (v2_open(cg, root, parent, name, true, err, errlen) != 0) {
    if (cg->dirs[0][0] && file_exists(cg->dirs[0])) v2_destroy(cg);
    return -1;
  }
  snprintf(value, sizeof value, "%lld", l->memory);
  cg_path(path, cg, 0, "memory.max");
  if ((e = write_file(path, value)) != 0) goto write_fail;
  /* No swap at all: memory.max is then the whole budget, as memsw makes it on v1. The file is absent when
   * the kernel has no swap accounting (then there is no swap to control either way, or it cannot be). */
  cg_path(path, cg, 0, "memory.swap.max");
  if (file_exists(path) && (e = write_file(path, "0")) != 0) goto write_fail;

  snprintf(value, sizeof value, "%lld", l->pids + HELPER_PROCS);
  cg_path(path, cg, 0, "pids.max");
  if ((e = write_file(path, value)) != 0) goto write_fail;

  if (l->cpu_quota_pct > 0) {
    snprintf(value, sizeof value, "%lld 100000", l->cpu_quota_pct * 1000);
    cg_path(path, cg, 0, "cpu.max");
    if ((e = write_file(path, value)) != 0) goto write_fail;
  }
  if (l->cpu_weight > 0) {
    snprintf(value, sizeof value, "%lld", l->cpu_weight);
    cg_path(path, cg, 0, "cpu.weight");
    if ((e = write_file(path, value)) != 0) goto write_fail;
  }
  return 0;

write_fail:
  snprintf(err, errlen, "writing %s: %s", path, strerror(-e));
  v2_destroy(cg);
  return -1;
}

/*
 * Writes "0" (the writer itself) to the run's cgroup.procs. The writer is root in the initial cgroup
 * namespace and the run's cgroup lies in the subtree Hangar was delegated, so it may write the common
 * ancestor's procs file (the source and the target are both below Hangar's own cgroup); with nsdelegate a
 * move across a cgroup-namespace boundary would be refused, and none happens here.
 */
static int v2_join(const struct cgroup *cg, pid_t pid) {
  char path[PATH_MAX];
  if (pid != getpid()) return -EINVAL;
  cg_path(path, cg, 0, "cgroup.procs");
  return write_file(path, "0");
}

/*
 * clone3 with CLONE_INTO_CGROUP (kernel 5.7+): the child is born in the run's cgroup. Writing to cgroup.procs
 * instead migrates a whole process, which takes cgroup_threadgroup_rwsem for writing and waits for an RCU grace
 * period (~10 ms a run; v2 has no per-thread `tasks` file to side-step it as v1_join does). The launcher is
 * single-threaded, so a raw clone3 (no atfork handlers) is as safe as fork() here; the child only execs.
 */
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#define HL_CLONE_INTO_CGROUP 0x200000000ULL
struct hl_clone_args {
  unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
      set_tid_size, cgroup;
};
static pid_t v2_fork_into(const struct cgroup *cg) {
  int fd = open(cg->dirs[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct hl_clone_args a;
  memset(&a, 0, sizeof a);
  a.flags = HL_CLONE_INTO_CGROUP;
  a.exit_signal = SIGCHLD;
  a.cgroup = (unsigned long long)fd;
  long pid = syscall(SYS_clone3, &a, sizeof a);
  if (pid == 0) return 0; /* the child: fd is close-on-exec */
  int e = errno;
  close(fd);
  errno = e;
  return pid < 0 ? -1 : (pid_t)pid;
}

/* A "key value" line of a flat-keyed cgroup file (cpu.stat, memory.events, cgroup.events), or fallback. */
static long long read_key(const char *path, const char *key, long long fallback) {
  char buf[4096];
  if (read_file(path, buf, sizeof buf) <= 0) return fallback;
  size_t len = strlen(key);
  for (char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, key, len) == 0 && p[len] == ' ') return atoll(p + len + 1);
  }
  return fallback;
}

static long long v2_cpu_ns(const struct cgroup *cg) {
  char path[PATH_MAX];
  cg_path(path, cg, 0, "cpu.stat");
  return read_key(path, "usage_usec", 0) * 1000;
}

/* Kernels before 5.19 have no memory.peak: the launcher then samples memory.current while it waits. */
static void v2_sample(struct cgroup *cg) {
  if (cg->v2_peak) return;
  char path[PATH_MAX];
  cg_path(path, cg, 0, "memory.current");
  long long cur = read_ll(path, 0);
  if (cur > cg->sampled_peak) cg->sampled_peak = cur;
}

/*
 * Kills everything in the run and waits until the group is empty. cgroup.kill (5.14+) sends SIGKILL to
 * every process in the subtree atomically with respect to forks. Older kernels: freeze (cgroup.freeze,
 * waiting for "frozen 1" in cgroup.events), SIGKILL every pid in cgroup.procs, thaw, until empty.
 */
static void v2_kill_all(const struct cgroup *cg) {
  char procs[PATH_MAX], killf[PATH_MAX], freeze[PATH_MAX], events[PATH_MAX];
  cg_path(procs, cg, 0, "cgroup.procs");
  cg_path(killf, cg, 0, "cgroup.kill");
  cg_path(freeze, cg, 0, "cgroup.freeze");
  cg_path(events, cg, 0, "cgroup.events");
  bool can_kill = file_exists(killf);
  for (int pass = 0; pass < 2000; pass++) {
    reap_children();
    if (procs_in(procs, false) == 0) break;
    if (can_kill && write_file(killf, "1") == 0) {
      /* the signals are queued; the processes leave the group as they exit */
    } else {
      write_file(freeze, "1");
      for (int i = 0; i < 200; i++) { /* up to ~100 ms; a task stuck in the kernel can delay it */
        if (read_key(events, "frozen", 0) == 1) break;
        sleep_us(500);
      }
      procs_in(procs, true);
      write_file(freeze, "0");
    }
    reap_children();
    if (procs_in(procs, false) == 0) break;
    sleep_us(pass < 10 ? 200 : 1000);
  }
  reap_children();
}

static void v2_stats(const struct cgroup *cg, struct cg_stats *st) {
  char path[PATH_MAX];
  memset(st, 0, sizeof *st);
  st->cpu_ns = v2_cpu_ns(cg);
  cg_path(path, cg, 0, "memory.events");
  st->oom_kills = read_key(path, "oom_kill", 0);
  st->mem_failcnt = read_key(path, "max", 0);
  if (cg->v2_peak) {
    cg_path(path, cg, 0, "memory.peak");
    st->mem_peak = read_ll(path, 0);
  } else {
    st->mem_peak = cg->sampled_peak;
  }
}

static const struct cg_driver cg_v2 = {
    .name = "v2",
    .open = v2_open,
    .create = v2_create,
    .join = v2_join,
    .fork_into = v2_fork_into,
    .cpu_ns = v2_cpu_ns,
    .sample = v2_sample,
    .kill_all = v2_kill_all,
    .stats = v2_stats,
    .destroy = v2_destroy,
};

/* Picks the driver for this host: v2 when <root> is a directory of the unified hierarchy, else v1. */
static const struct cg_driver *pick_driver(const char *root, char *err, size_t errlen) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/cgroup.controllers", root);
  if (file_exists(path)) return &cg_v2;
  snprintf(path, sizeof path, "%s/memory", root);
  if (!file_exists(path)) {
    snprintf(err, errlen, "%.400s is neither a cgroup v2 directory nor a cgroup v1 mount point", root);
    return NULL;
  }
  return &cg_v1;
}

/* ------------------------------------------------------------------------------------------------------ */
/* run                                                                                                      */
/* ------------------------------------------------------------------------------------------------------ */

struct run_opts {
  uid_t uid;
  gid_t gid;
  const char *workdir;
  const char *bwrap;
  const char *tools; /* holds `init` (the reaper); bound read-only at HANGAR_TOOLS_PATH */
  const char *cgroup_root;
  const char *cgroup_parent;
  struct limits lim;
  const char *env[MAX_ENV];
  int nenv;
  const char *etc[MAX_ENV]; /* host /etc entries bound read-only (skipped when absent) */
  int netc;
  const char *ro[MAX_ENV];  /* extra host directories bound read-only at the same path */
  int nro;
  bool disable_userns;
  long long output_bytes; /* per stream; -1: unlimited */
  long long output_slack; /* read and discarded past output_bytes before the pipe is closed */
  char **program;
};

static struct cgroup run_cg;
static const struct cg_driver *driver = NULL;
static bool child_joined = false; /* the child was born in the run's cgroup (clone3 CLONE_INTO_CGROUP) */
static bool cg_created = false;

/* Ends `run` early with {"error": msg}, after removing whatever was created. */
static void __attribute__((noreturn, format(printf, 1, 2))) fail(const char *fmt, ...) {
  char msg[1024], out[2048] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (cg_created) {
    driver->kill_all(&run_cg);
    driver->destroy(&run_cg);
  }
  append(out, sizeof out, "{\"v\":1,\"error\":");
  json_str(out, sizeof out, msg);
  append(out, sizeof out, "}\n");
  write_all(report_fd, out, strlen(out));
  exit(2);
}

static void usage(void) {
  fprintf(stderr,
          "usage: hangar-launcher run --uid N --gid N --workdir DIR --tools DIR [--bwrap PATH]\n"
          "         --wall-ms N --cpu-ms N --memory BYTES --pids N --fsize BYTES --nofile N [--tmp-bytes BYTES]\n"
          "         [--cpu-quota-pct N] [--cpu-weight 1..10000] [--output-bytes N] [--output-slack N] [--cgroup-root DIR]\n"
          "         [--cgroup-parent NAME] [--report-fd N]\n"
          "         [--env K=V]... [--etc NAME]... [--ro DIR]... [--disable-userns] -- PROGRAM [ARGS...]\n"
          "       hangar-launcher workdir-create PATH UID GID BYTES\n"
          "       hangar-launcher workdir-remove PATH\n"
          "       hangar-launcher tools-mount PATH\n"
          "       hangar-launcher sweep [--cgroup-root DIR] [--cgroup-parent NAME]\n");
  exit(64);
}

static long long parse_num(const char *flag, const char *s) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < 0) fail("%s: not a non-negative integer: '%s'", flag, s);
  return v;
}

/* A name that is safe as one path component (cgroup parent, /etc entry components). */
static bool safe_relpath(const char *s) {
  if (!*s || s[0] == '/' || strstr(s, "..")) return false;
  for (const char *p = s; *p; p++)
    if (*p < 0x20) return false;
  return true;
}

static void parse_run(int argc, char **argv, struct run_opts *o) {
  memset(o, 0, sizeof *o);
  o->bwrap = "/usr/bin/bwrap";
  o->cgroup_root = "/sys/fs/cgroup";
  o->cgroup_parent = "hangar";
  o->uid = (uid_t)-1;
  o->gid = (gid_t)-1;
  o->output_bytes = -1;
  o->output_slack = 8 << 20;
  long long *required[] = {&o->lim.wall_ms, &o->lim.cpu_ms, &o->lim.memory, &o->lim.pids, &o->lim.fsize,
                           &o->lim.nofile};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) *required[i] = -1;
  int i = 2;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (strcmp(a, "--disable-userns") == 0) {
      o->disable_userns = true;
      continue;
    }
    if (i + 1 >= argc) fail("option %s needs a value", a);
    const char *v = argv[++i];
    if (strcmp(a, "--uid") == 0 || strcmp(a, "--gid") == 0) {
      long long id = parse_num(a, v);
      if (id >= 0xFFFFFFFFLL) fail("%s out of range: %s", a, v);
      if (a[2] == 'u') o->uid = (uid_t)id;
      else o->gid = (gid_t)id;
    }
    else if (strcmp(a, "--workdir") == 0) o->workdir = v;
    else if (strcmp(a, "--bwrap") == 0) o->bwrap = v;
    else if (strcmp(a, "--tools") == 0) o->tools = v;
    else if (strcmp(a, "--cgroup-root") == 0) o->cgroup_root = v;
    else if (strcmp(a, "--cgroup-parent") == 0) o->cgroup_parent = v;
    else if (strcmp(a, "--report-fd") == 0) report_fd = (int)parse_num(a, v);
    else if (strcmp(a, "--wall-ms") == 0) o->lim.wall_ms = parse_num(a, v);
    else if (strcmp(a, "--cpu-ms") == 0) o->lim.cpu_ms = parse_num(a, v);
    else if (strcmp(a, "--memory") == 0) o->lim.memory = parse_num(a, v);
    else if (strcmp(a, "--pids") == 0) o->lim.pids = parse_num(a, v);
    else if (strcmp(a, "--fsize") == 0) o->lim.fsize = parse_num(a, v);
    else if (strcmp(a, "--nofile") == 0) o->lim.nofile = parse_num(a, v);
    else if (strcmp(a, "--tmp-bytes") == 0) o->lim.tmp_bytes = parse_num(a, v);
    else if (strcmp(a, "--cpu-quota-pct") == 0) o->lim.cpu_quota_pct = parse_num(a, v);
    else if (strcmp(a, "--cpu-weight") == 0) o->lim.cpu_weight = parse_num(a, v);
    else if (strcmp(a, "--output-bytes") == 0) o->output_bytes = parse_num(a, v);
    else if (strcmp(a, "--output-slack") == 0) o->output_slack = parse_num(a, v);
    else if (strcmp(a, "--env") == 0) {
      if (!strchr(v, '=') || v[0] == '=') fail("--env needs KEY=VALUE, got '%s'", v);
      if (o->nenv >= MAX_ENV - 1) fail("too many environment variables (at most %d)", MAX_ENV - 1);
      o->env[o->nenv++] = v;
    } else if (strcmp(a, "--etc") == 0) {
      if (!safe_relpath(v)) fail("--etc needs a relative name under /etc, got '%s'", v);
      if (o->netc >= MAX_ENV) fail("too many --etc entries");
      o->etc[o->netc++] = v;
    } else if (strcmp(a, "--ro") == 0) {
      if (v[0] != '/' || strstr(v, "..")) fail("--ro needs an absolute path, got '%s'", v);
      if (o->nro >= MAX_ENV) fail("too many --ro entries");
      o->ro[o->nro++] = v;
    } else fail("unknown option %s", a);
  }
  if (i >= argc) fail("no program given (expected -- PROGRAM [ARGS...])");
  o->program = argv + i;
  for (size_t k = 0; k < sizeof required / sizeof required[0]; k++)
    if (*required[k] < 0) fail("missing one of --wall-ms --cpu-ms --memory --pids --fsize --nofile");
  if (!o->workdir || !o->tools) fail("--workdir and --tools are required");
  if (o->uid == (uid_t)-1 || o->gid == (gid_t)-1) fail("--uid and --gid are required");
  if (!safe_relpath(o->cgroup_parent) || strchr(o->cgroup_parent, '/'))
    fail("--cgroup-parent must be one path component");
  if (o->lim.memory < 4 << 20) fail("--memory must be at least 4 MiB");
  if (o->lim.pids < 1) fail("--pids must be at least 1");
  if (o->lim.cpu_weight > 10000) fail("--cpu-weight must be within 1..10000");
}

/* Never root, never a system account, never an account of the host: a sandbox uid owns nothing. */
static void check_sandbox_ids(uid_t uid, gid_t gid) {
  if (uid < MIN_SANDBOX_ID || gid < MIN_SANDBOX_ID || uid == 65534 || gid == 65534 || uid == (uid_t)-1)
    fail("refusing to run as uid %u gid %u: sandbox ids must be >= %d and not nobody", (unsigned)uid,
         (unsigned)gid, MIN_SANDBOX_ID);
  if (getpwuid(uid) != NULL) fail("refusing to run as uid %u: it is an account of this host", (unsigned)uid);
}

/* In-memory files with the given content, inherited by bwrap (no CLOEXEC) for --file. */
static int data_fds[8];
static int ndata_fds = 0;
static int data_fd(const char *name, const char *content) {
  int fd = (int)syscall(SYS_memfd_create, name, 0);
  if (fd < 0) fail("memfd_create: %s", strerror(errno));
  if (ndata_fds < (int)(sizeof data_fds / sizeof data_fds[0])) data_fds[ndata_fds++] = fd;
  write_all(fd, content, strlen(content));
  lseek(fd, 0, SEEK_SET);
  return fd;
}

static const char *args[MAX_ARGS];
static int nargs = 0;
static void arg(const char *a) {
  if (nargs >= MAX_ARGS - 1) fail("too many arguments");
  args[nargs++] = a;
}
static char *fmt_alloc(const char *fmt, ...) {
  char *s;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&s, fmt, ap) < 0) fail("out of memory");
  va_end(ap);
  return s;
}

/* bwrap's command line. Every host path is bound read-only except the work dir. */
static void build_bwrap_args(const struct run_opts *o, int reaper_fd) {
  arg(o->bwrap);
  arg("--unshare-all"); /* user, ipc, pid, net (a loopback only), uts, cgroup */
  arg("--unshare-user");
  if (o->disable_userns) arg("--disable-userns"); /* no nested user namespaces inside */
  arg("--die-with-parent");
  arg("--new-session"); /* no controlling terminal to push input into (TIOCSTI) */
  arg("--as-pid-1");    /* the reaper is pid 1: when it exits, the kernel kills the whole namespace */
  arg("--hostname"), arg("hangar");
  arg("--ro-bind"), arg("/usr"), arg("/usr");
  /* Merged-/usr hosts have /bin, /lib... as symlinks into /usr: recreate the symlinks; else bind them. */
  static const char *const top[] = {"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"};
  for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
    struct stat st;
    if (lstat(top[i], &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlink(top[i], target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      arg("--symlink"), arg(strdup(target)), arg(top[i]);
    } else if (S_ISDIR(st.st_mode)) {
      arg("--ro-bind"), arg(top[i]), arg(top[i]);
    }
  }
  for (int i = 0; i < o->nro; i++) arg("--ro-bind-try"), arg(o->ro[i]), arg(o->ro[i]);
  /* The host's /usr/local holds what was installed by hand (other tools and their configuration), not the
   * toolchains: the language registry names toolchains under /usr only. An empty read-only tmpfs hides it. */
  struct stat local;
  if (stat("/usr/local", &local) == 0 && S_ISDIR(local.st_mode)) {
    arg("--perms"), arg("0755");
    arg("--size"), arg("4096");
    arg("--tmpfs"), arg("/usr/local");
    arg("--remount-ro"), arg("/usr/local");
  }

  /* A minimal /etc: generated account and name-service files naming only the sandbox user, plus the host
   * entries the runtimes need (dynamic linker cache, alternatives symlinks, JDK and Mono config). */
  arg("--dir"), arg("/etc");
  struct {
    const char *name, *content;
  } gen[] = {
      {"passwd", fmt_alloc("root:x:0:0:root:/root:/usr/sbin/nologin\n"
                           "sandbox:x:%u:%u:sandbox:/tmp:/bin/sh\n"
                           "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                           (unsigned)o->uid, (unsigned)o->gid)},
      {"group", fmt_alloc("root:x:0:\nsandbox:x:%u:\nnogroup:x:65534:\n", (unsigned)o->gid)},
      {"hosts", "127.0.0.1 localhost hangar\n::1 localhost ip6-localhost ip6-loopback\n"},
      {"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\n"},
  };
  for (size_t i = 0; i < sizeof gen / sizeof gen[0]; i++) {
    int fd = data_fd(gen[i].name, gen[i].content);
    /* --file copies into bwrap's root tmpfs (made read-only below): no bind mount per file. */
    arg("--perms"), arg("0444");
    arg("--file"), arg(fmt_alloc("%d", fd)), arg(fmt_alloc("/etc/%s", gen[i].name));
  }
  for (int i = 0; i < o->netc; i++) {
    char *p = fmt_alloc("/etc/%s", o->etc[i]);
    arg("--ro-bind-try"), arg(p), arg(p);
  }

  arg("--proc"), arg("/proc");
  arg("--dev"), arg("/dev"); /* null, zero, full, random, urandom, tty, pts, shm: no host devices */
  if (o->lim.tmp_bytes > 0) arg("--size"), arg(fmt_alloc("%lld", o->lim.tmp_bytes));
  arg("--tmpfs"), arg("/tmp");
  arg("--bind"), arg(o->workdir), arg("/box");
  arg("--ro-bind"), arg(o->tools), arg(HANGAR_TOOLS_PATH);
  arg("--remount-ro"), arg("/"); /* bwrap's root tmpfs: nothing outside /box and /tmp is writable */
  arg("--chdir"), arg("/box");
  arg("--");
  arg(HANGAR_REAPER_PATH);
  arg(fmt_alloc("%d", reaper_fd));
  arg(fmt_alloc("%lld", o->lim.nofile));
  arg("--");
  for (char **p = o->program; *p; p++) arg(*p);
  args[nargs] = NULL;
}

/* In the child, between fork and exec: joins the cgroups, sets rlimits, drops to the sandbox uid, and
 * execs bwrap. Any failure is written to errfd (close-on-exec; EOF there means the exec happened). */
static void __attribute__((noreturn)) child_exec(const struct run_opts *o, pid_t launcher, int errfd,
                                                 char *const envp[]) {
  char msg[512];
  const char *step;
  int e;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL); /* ignored signals survive exec: the program must get the default */

  step = "joining the cgroups";
  if (!child_joined && (e = driver->join(&run_cg, getpid())) != 0) {
    errno = -e;
    goto fail;
  }

  step = "setting rlimits";
  struct rlimit core = {0, 0};
  struct rlimit fsize = {(rlim_t)o->lim.fsize, (rlim_t)o->lim.fsize};
  /* PROGRAM gets the exact open-files limit from the reaper; bwrap and the reaper need a few of their own. */
  rlim_t nofile = (rlim_t)(o->lim.nofile < 64 ? 64 : o->lim.nofile);
  struct rlimit nof = {nofile, nofile};
  /* Backstop only: the launcher enforces the CPU limit on the whole tree through cpuacct and normally
   * acts first; RLIMIT_CPU is per process and would end a single runaway one with SIGXCPU/SIGKILL. */
  rlim_t cpu_s = (rlim_t)((o->lim.cpu_ms + 999) / 1000 + 1);
  struct rlimit cpu = {cpu_s, cpu_s + 1};
  if (setrlimit(RLIMIT_CORE, &core) || setrlimit(RLIMIT_FSIZE, &fsize) || setrlimit(RLIMIT_NOFILE, &nof) ||
      setrlimit(RLIMIT_CPU, &cpu))
    goto fail;

  step = "dropping privileges";
  if (setgroups(0, NULL) != 0 || setresgid(o->gid, o->gid, o->gid) != 0 || setresuid(o->uid, o->uid, o->uid) != 0)
    goto fail;
  uid_t r, ef, s;
  if (getresuid(&r, &ef, &s) != 0 || r != o->uid || ef != o->uid || s != o->uid || setuid(0) == 0) {
    errno = EPERM;
    goto fail;
  }

  /* Credential changes clear the parent-death signal, so it is set after them. If the launcher already
   * died in between, getppid() no longer names it. */
  step = "setting the parent-death signal";
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) goto fail;
  if (getppid() != launcher) _exit(127);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) goto fail;
  umask(022);
  if (chdir("/") != 0) goto fail;

  step = "executing bwrap";
  execve(o->bwrap, (char *const *)args, envp);
fail:
  snprintf(msg, sizeof msg, "%s: %s", step, strerror(errno));
  write_all(errfd, msg, strlen(msg));
  _exit(127);
}

/*
 * One direction of the stdio relay. The program gets real pipes (so /dev/stdin and /dev/stdout work inside:
 * the caller's stdio are socketpairs under Node, which cannot be reopened through /proc), and the launcher
 * copies between them and the caller. Output past `cap` bytes is read and discarded so the program never
 * blocks on a full pipe; past `hard` bytes the launcher closes the pipe, and the program's next write gets
 * SIGPIPE/EPIPE, the ordinary Unix answer to a reader that stopped listening.
 */
struct relay {
  int in, out;          /* -1 once closed */
  int stream;           /* 1 stdout, 2 stderr: what the output order records; 0 stdin (not recorded) */
  char buf[65536];
  size_t off, len;      /* pending bytes buf[off..len) */
  long long total;      /* bytes read from `in` */
  long long forwarded;  /* bytes accepted for `out` */
  long long cap, hard;  /* -1: unlimited */
  bool cut;             /* `in` closed by us at `hard` */
};

/*
 * The order in which output arrived: runs of kept bytes, stdout (+n) or stderr (-n), in the order the launcher
 * read them, so that the caller can show the two streams interleaved. Reads of both pipes in one wake-up are
 * in fd order (stdout first): two writes closer together than the launcher's wake-up cannot be told apart.
 * Past ORDER_MAX runs the rest is not recorded (`orderLost`).
 */
#define ORDER_MAX 16384
static long long order_runs[ORDER_MAX];
static int order_len;
static bool order_lost;

static void order_note(int stream, long long n) {
  if (stream == 0 || n <= 0 || order_lost) return;
  long long v = stream == 1 ? n : -n;
  if (order_len > 0 && (order_runs[order_len - 1] > 0) == (v > 0)) {
    order_runs[order_len - 1] += v;
    return;
  }
  if (order_len == ORDER_MAX) {
    order_lost = true;
    return;
  }
  order_runs[order_len++] = v;
}

static void relay_init(struct relay *r, int in, int out, int stream, long long cap, long long hard) {
  memset(r, 0, sizeof *r);
  r->stream = stream;
  r->in = in;
  r->out = out;
  r->cap = cap;
  r->hard = hard;
  fcntl(in, F_SETFL, fcntl(in, F_GETFL) | O_NONBLOCK);
  fcntl(out, F_SETFL, fcntl(out, F_GETFL) | O_NONBLOCK);
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* True once `in` is at EOF and everything read has been written (or `out` went away). */
static bool relay_done(const struct relay *r) { return r->in < 0 && (r->len == r->off || r->out < 0); }

/* Adds the fds this relay is waiting on to pfd; returns how many. */
static int relay_poll(struct relay *r, struct pollfd *pfd) {
  int n = 0;
  if (r->in >= 0 && r->len == r->off) pfd[n++] = (struct pollfd){.fd = r->in, .events = POLLIN};
  if (r->out >= 0 && r->len > r->off) pfd[n++] = (struct pollfd){.fd = r->out, .events = POLLOUT};
  return n;
}

static bool any_revents(const struct pollfd *pfd, int n) {
  for (int i = 0; i < n; i++)
    if (pfd[i].revents) return true;
  return false;
}

/* Moves as much data as the fds allow without blocking. */
static void relay_pump(struct relay *r) {
  for (;;) {
    if (r->len > r->off && r->out >= 0) {
      ssize_t w = write(r->out, r->buf + r->off, r->len - r->off);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return;
        close_fd(&r->out); /* the reader went away: keep draining `in` and drop the data */
      } else {
        r->off += (size_t)w;
        continue;
      }
    }
    r->off = r->len = 0;
    if (r->in < 0) {
      close_fd(&r->out); /* EOF travels on */
      return;
    }
    ssize_t n = read(r->in, r->buf, sizeof r->buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      n = 0; /* treat errors as EOF */
    }
    if (n == 0) {
      close_fd(&r->in);
      continue;
    }
    r->total += n;
    long long keep = n;
    if (r->cap >= 0 && r->forwarded + keep > r->cap) keep = r->cap > r->forwarded ? r->cap - r->forwarded : 0;
    r->forwarded += keep;
    r->len = (size_t)keep;
    if (r->out < 0) r->len = 0;
    order_note(r->stream, (long long)r->len);
    if (r->hard >= 0 && r->total > r->hard) {
      close_fd(&r->in);
      r->cut = true;
    }
  }
}

static int cmd_run(int argc, char **argv) {
  struct run_opts o;

  /* Only fds 0-2 and the report fd may reach the sandbox; anything else inherited is closed now. */
  for (int i = 2; i + 1 < argc; i++)
    if (strcmp(argv[i], "--report-fd") == 0) report_fd = atoi(argv[i + 1]);
  if (report_fd < 3) report_fd = 3;
  syscall(SYS_close_range, 3, report_fd - 1, 0);
  syscall(SYS_close_range, report_fd + 1, ~0U, 0);
  fcntl(report_fd, F_SETFD, FD_CLOEXEC);

  parse_run(argc, argv, &o);
  if (geteuid() != 0) fail("the launcher must run as root (it creates cgroups and switches uid)");
  check_sandbox_ids(o.uid, o.gid);
  struct stat wst;
  if (stat(o.workdir, &wst) != 0 || !S_ISDIR(wst.st_mode))
    fail("work dir %s is not a directory", o.workdir);
  if (wst.st_uid != o.uid) fail("work dir %s is not owned by the sandbox uid %u", o.workdir, (unsigned)o.uid);
  if (access(o.bwrap, X_OK) != 0) fail("bwrap not found at %s", o.bwrap);
  char reaper[PATH_MAX];
  snprintf(reaper, sizeof reaper, "%s/init", o.tools);
  if (access(reaper, R_OK) != 0) fail("reaper not found at %s", reaper);

  /* Signals arrive on a signalfd so the wait loop sees them in order with everything else. SIGTERM,
   * SIGINT, SIGHUP, SIGQUIT mean "abort"; the kernel sends SIGTERM when the caller dies (PDEATHSIG). */
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  sigaddset(&mask, SIGQUIT);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  signal(SIGPIPE, SIG_IGN);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) fail("signalfd: %s", strerror(errno));
  pid_t caller = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != caller) fail("the caller exited");
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  char err[512];
  driver = pick_driver(o.cgroup_root, err, sizeof err);
  if (!driver) fail("%s", err);
  char name[64];
  snprintf(name, sizeof name, "%d-%lld", (int)getpid(), proc_starttime(getpid()));
  if (driver->create(&run_cg, o.cgroup_root, o.cgroup_parent, name, &o.lim, err, sizeof err) != 0)
    fail("creating cgroups: %s", err);
  cg_created = true;

  /* rep: the reaper's report; errp: the child's setup errors; in/out/errpipe: the program's stdio. */
  int rep[2], errp[2], pin[2], pout[2], perr[2];
  if (pipe2(rep, O_CLOEXEC) || pipe2(errp, O_CLOEXEC) || pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) ||
      pipe2(perr, O_CLOEXEC))
    fail("pipe: %s", strerror(errno));
  /* Pipes belong to their creator: given to the sandbox uid, the program can also reopen them through
   * /dev/stdin, /dev/stdout, /dev/stderr (/proc/self/fd/N), as many programs do. */
  int sandbox_fds[] = {pin[0], pin[1], pout[0], pout[1], perr[0], perr[1]};
  for (size_t i = 0; i < sizeof sandbox_fds / sizeof sandbox_fds[0]; i++)
    if (fchown(sandbox_fds[i], o.uid, o.gid) != 0) fail("fchown pipe: %s", strerror(errno));
  fcntl(rep[1], F_SETFD, 0); /* the write end travels through bwrap to the reaper */
  fcntl(rep[0], F_SETFL, O_NONBLOCK);
  build_bwrap_args(&o, rep[1]);
  const char *envp[MAX_ENV + 1];
  for (int i = 0; i < o.nenv; i++) envp[i] = o.env[i];
  envp[o.nenv] = NULL;

  long long t0 = now_us();
  pid_t launcher = getpid();
  pid_t pid = driver->fork_into ? driver->fork_into(&run_cg) : -1;
  if (pid >= 0) child_joined = true;
  else pid = fork();
  if (pid < 0) fail("fork: %s", strerror(errno));
  if (pid == 0) {
    /* The caller's stdio are replaced by the program's pipes: the sandbox never holds the caller's fds. */
    if (dup2(pin[0], 0) < 0 || dup2(pout[1], 1) < 0 || dup2(perr[1], 2) < 0) _exit(127);
    close(rep[0]);
    close(errp[0]);
    child_exec(&o, launcher, errp[1], (char *const *)envp);
  }
  sandbox_pid = pid;
  /* Only the sandbox may hold the write ends of its output pipes, so EOF there means it is gone. */
  close(rep[1]);
  close(errp[1]);
  close(pin[0]);
  close(pout[1]);
  close(perr[1]);
  for (int i = 0; i < ndata_fds; i++) close(data_fds[i]); /* bwrap has its copies */

  char child_err[512];
  ssize_t n;
  do n = read(errp[0], child_err, sizeof child_err - 1);
  while (n < 0 && errno == EINTR);
  close(errp[0]);
  if (n > 0) {
    child_err[n] = '\0';
    fail("starting the sandbox: %s", child_err);
  }

  static struct relay rin, rout, rerr;
  relay_init(&rin, 0, pin[1], 0, -1, -1);
  relay_init(&rout, pout[0], 1, 1, o.output_bytes, o.output_bytes < 0 ? -1 : o.output_bytes + o.output_slack);
  relay_init(&rerr, perr[0], 2, 2, o.output_bytes, o.output_bytes < 0 ? -1 : o.output_bytes + o.output_slack);

  /* Wait for the sandbox, relaying stdio, enforcing the wall-clock and CPU-time limits and watching for an
   * abort. After the sandbox ends, keep relaying until its output pipes reach EOF. */
  const char *timeout = NULL;
  bool aborted = false, killed = false;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu < 1) ncpu = 1;
  long long deadline = t0 + o.lim.wall_ms * 1000;
  long long cpu_limit_ns = o.lim.cpu_ms * 1000000LL;
  long long wall_us = 0, drain_deadline = 0;
  char report[512] = "";
  size_t report_len = 0;
  for (;;) {
    if (sandbox_done && wall_us == 0) {
      wall_us = now_us() - t0;
      /* Backstop: after a normal end the namespace is already empty; anything else goes now, so nothing
       * is left holding the output pipes. */
      driver->kill_all(&run_cg);
      close_fd(&rin.in);
      close_fd(&rin.out);
      drain_deadline = now_us() + 5000000;
    }
    if (sandbox_done && relay_done(&rout) && relay_done(&rerr)) break;
    if (sandbox_done && now_us() > drain_deadline) break; /* the caller stopped reading */

    int wait_ms = 100;
    if (!killed && !sandbox_done) {
      long long now = now_us();
      long long cpu = driver->cpu_ns(&run_cg);
      if (driver->sample) driver->sample(&run_cg);
      if (now >= deadline || cpu >= cpu_limit_ns) {
        timeout = now >= deadline ? "wall" : "cpu";
        driver->kill_all(&run_cg);
        killed = true;
        continue;
      }
      /* The tree cannot use more than ncpu CPU-seconds per second: no need to look before then. */
      long long cpu_ms_left = (cpu_limit_ns - cpu) / 1000000 / ncpu;
      long long wall_ms_left = (deadline - now + 999) / 1000;
      long long w = cpu_ms_left < wall_ms_left ? cpu_ms_left : wall_ms_left;
      if (w > 1000) w = 1000;
      if (w < 2) w = 2;
      wait_ms = (int)w;
    }
    struct pollfd pfd[8];
    int np = 0;
    pfd[np++] = (struct pollfd){.fd = sfd, .events = POLLIN};
    if (rep[0] >= 0) pfd[np++] = (struct pollfd){.fd = rep[0], .events = POLLIN};
    np += relay_poll(&rin, pfd + np);
    int out_at = np;
    np += relay_poll(&rout, pfd + np);
    int err_at = np;
    np += relay_poll(&rerr, pfd + np);
    int pr = poll(pfd, (nfds_t)np, wait_ms);
    if (pr < 0 && errno != EINTR) fail("poll: %s", strerror(errno));

    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
      if (si.ssi_signo == SIGCHLD || killed || sandbox_done) continue;
      aborted = true;
      driver->kill_all(&run_cg);
      killed = true;
    }
    reap_children();
    if (rep[0] >= 0) {
      ssize_t r = read(rep[0], report + report_len, sizeof report - 1 - report_len);
      if (r > 0) report_len += (size_t)r;
      else if (r == 0 || (errno != EAGAIN && errno != EINTR)) close_fd(&rep[0]);
      report[report_len] = '\0';
    }
    relay_pump(&rin);
    /* Only the output pipes that were ready when poll returned: data written to the other one since then
     * waits for the next round, so that it is recorded after what came before it (order_note). */
    if (pr > 0 && any_revents(pfd + out_at, err_at - out_at)) relay_pump(&rout);
    if (pr > 0 && any_revents(pfd + err_at, np - err_at)) relay_pump(&rerr);
  }
  if (rep[0] >= 0) {
    ssize_t r;
    while ((r = read(rep[0], report + report_len, sizeof report - 1 - report_len)) > 0) report_len += (size_t)r;
    report[report_len] = '\0';
  }
  /* Done with the caller's stdio: its reads end here. */
  close(0);
  close(1);
  close(2);

  /* A killed sandbox's pid-1 reaper finishes exiting only after the rest of its namespace, and is then
   * reparented to us (the child subreaper): wait for every such child, or it would become a zombie of the
   * host's init once we exit. Bounded, in case something is stuck in the kernel. */
  for (int i = 0; i < 2000; i++) {
    pid_t p = waitpid(-1, NULL, WNOHANG | __WALL);
    if (p < 0 && errno == ECHILD) break;
    if (p <= 0) sleep_us(1000);
  }

  struct cg_stats st;
  driver->stats(&run_cg, &st);
  driver->destroy(&run_cg);
  cg_created = false;

  /* The reaper's line, if it got to write one (it does not when the run was killed from outside). */
  int ver = 0, num = 0;
  long maxrss = 0;
  long long prog_wall = 0;
  char kind[16] = "";
  bool have_report = report_len > 0 && sscanf(report, HANGAR_REPORT_MAGIC " %d %15s %d %ld %lld", &ver, kind,
                                               &num, &maxrss, &prog_wall) == 5 &&
                     ver == HANGAR_REPORT_VERSION;

  char out[2048] = "";
  append(out, sizeof out, "{\"v\":1,\"error\":null,\"driver\":\"%s\"", driver->name);
  if (have_report && strcmp(kind, "exited") == 0)
    append(out, sizeof out, ",\"result\":\"exited\",\"code\":%d", num);
  else if (have_report && strcmp(kind, "signaled") == 0)
    append(out, sizeof out, ",\"result\":\"signaled\",\"signal\":%d", num);
  else if (have_report && strcmp(kind, "execfail") == 0) {
    append(out, sizeof out, ",\"result\":\"execfail\",\"execError\":");
    json_str(out, sizeof out, strerror(num));
  } else
    append(out, sizeof out, ",\"result\":\"none\"");
  if (WIFEXITED(sandbox_status))
    append(out, sizeof out, ",\"sandboxExit\":%d", WEXITSTATUS(sandbox_status));
  else
    append(out, sizeof out, ",\"sandboxSignal\":%d", WTERMSIG(sandbox_status));
  append(out, sizeof out, ",\"timeout\":");
  if (timeout) json_str(out, sizeof out, timeout);
  else append(out, sizeof out, "null");
  append(out, sizeof out,
         ",\"aborted\":%s,\"oomKills\":%lld,\"memFailcnt\":%lld,\"memPeakBytes\":%lld,\"cpuNs\":%lld"
         ",\"maxRssKb\":%ld,\"wallUs\":%lld,\"stdoutBytes\":%lld,\"stderrBytes\":%lld"
         ",\"stdoutCut\":%s,\"stderrCut\":%s}\n",
         aborted ? "true" : "false", st.oom_kills, st.mem_failcnt, st.mem_peak, st.cpu_ns, have_report ? maxrss : 0,
         have_report && prog_wall > 0 ? prog_wall : wall_us, rout.total, rerr.total, rout.cut ? "true" : "false",
         rerr.cut ? "true" : "false");
  /* The output order goes last, before the closing brace, written in pieces (it can be long). */
  size_t head = strlen(out) - 2; /* without "}\n" */
  write_all(report_fd, out, head);
  char buf[4096];
  size_t used = (size_t)snprintf(buf, sizeof buf, ",\"order\":[");
  for (int i = 0; i < order_len; i++) {
    if (used > sizeof buf - 32) {
      write_all(report_fd, buf, used);
      used = 0;
    }
    used += (size_t)snprintf(buf + used, sizeof buf - used, i ? ",%lld" : "%lld", order_runs[i]);
  }
  write_all(report_fd, buf, used);
  const char *tail = order_lost ? "],\"orderLost\":true}\n" : "],\"orderLost\":false}\n";
  write_all(report_fd, tail, strlen(tail));
  return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* work directories                                                                                         */
/* ------------------------------------------------------------------------------------------------------ */

/* The parent of a work dir must be a root-owned directory nobody else can write: then the path cannot be
 * swapped for a symlink between our checks and the mount. */
static int check_parent(const char *path) {
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", path);
  char *slash = strrchr(parent, '/');
  if (!slash || slash == parent || path[0] != '/' || strstr(path, "/..") || slash[1] == '\0') {
    fprintf(stderr, "hangar-launcher: %s: need an absolute path of a directory under the work root\n", path);
    return -1;
  }
  *slash = '\0';
  struct stat st;
  if (lstat(parent, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)) {
    fprintf(stderr, "hangar-launcher: %s must be a root-owned directory writable only by root\n", parent);
    return -1;
  }
  return 0;
}

static int cmd_workdir_create(int argc, char **argv) {
  if (argc != 6) usage();
  const char *path = argv[2];
  long long uid = atoll(argv[3]), gid = atoll(argv[4]), bytes = atoll(argv[5]);
  if (uid < MIN_SANDBOX_ID || gid < MIN_SANDBOX_ID || uid == 65534 || gid == 65534 || bytes < 4096) {
    fprintf(stderr, "hangar-launcher: bad uid/gid/size\n");
    return 64;
  }
  if (check_parent(path) != 0) return 1;
  if (mkdir(path, 0700) != 0) {
    fprintf(stderr, "hangar-launcher: mkdir %s: %s\n", path, strerror(errno));
    return 1;
  }
  /* The disk limit of a work dir is the size of its tmpfs. Its pages are also charged to the memory cgroup
   * of whoever writes them, so a sandbox cannot use it to exceed its memory limit either. */
  char opts[256];
  long long inodes = bytes / 4096 < 1024 ? 1024 : bytes / 4096;
  snprintf(opts, sizeof opts, "size=%lld,nr_inodes=%lld,mode=0700,uid=%lld,gid=%lld", bytes, inodes, uid, gid);
  if (mount("hangar-box", path, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
    fprintf(stderr, "hangar-launcher: mount tmpfs on %s: %s\n", path, strerror(errno));
    rmdir(path);
    return 1;
  }
  return 0;
}

static int rm_entry(const char *p, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if (type == FTW_DP) rmdir(p);
  else unlink(p);
  return 0;
}

static int cmd_workdir_remove(int argc, char **argv) {
  if (argc != 3) usage();
  const char *path = argv[2];
  if (check_parent(path) != 0) return 1;
  /* Detach: a file still open somewhere must not keep the directory from going away. */
  if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL && errno != ENOENT) {
    fprintf(stderr, "hangar-launcher: umount %s: %s\n", path, strerror(errno));
    return 1;
  }
  if (rmdir(path) != 0 && errno != ENOENT) {
    /* Not a mount after all (e.g. created by hand): remove the tree without crossing into other mounts. */
    nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    if (rmdir(path) != 0 && errno != ENOENT) {
      fprintf(stderr, "hangar-launcher: rmdir %s: %s\n", path, strerror(errno));
      return 1;
    }
  }
  return 0;
}

/* Mounts the tools tmpfs on PATH (created root-owned 0755 under a root-owned parent) unless one is there. */
static int cmd_tools_mount(int argc, char **argv) {
  if (argc != 3) usage();
  const char *path = argv[2];
  if (check_parent(path) != 0) return 1;
  if (mkdir(path, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "hangar-launcher: mkdir %s: %s\n", path, strerror(errno));
    return 1;
  }
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st, parent;
  char up[PATH_MAX];
  snprintf(up, sizeof up, "%s/..", path);
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_uid != 0 || (st.st_mode & 022) || stat(up, &parent) != 0) {
    fprintf(stderr, "hangar-launcher: %s must be a root-owned directory writable only by root\n", path);
    return 1;
  }
  /* Two processes starting at once: the second waits, then finds the mount (its fd may name either). */
  flock(fd, LOCK_EX);
  if (stat(path, &st) != 0) {
    fprintf(stderr, "hangar-launcher: stat %s: %s\n", path, strerror(errno));
    return 1;
  }
  if (st.st_dev != parent.st_dev) return 0; /* mounted already */
  if (mount("hangar-tools", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=128m,nr_inodes=1024,mode=0755,uid=0,gid=0") != 0) {
    fprintf(stderr, "hangar-launcher: mount tmpfs on %s: %s\n", path, strerror(errno));
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* sweep                                                                                                    */
/* ------------------------------------------------------------------------------------------------------ */

/* Removes run cgroups left by launchers that no longer exist (named <pid>-<starttime>). */
static int cmd_sweep(int argc, char **argv) {
  const char *root = "/sys/fs/cgroup", *parent = "hangar";
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--cgroup-root") == 0) root = argv[i + 1];
    else if (strcmp(argv[i], "--cgroup-parent") == 0) parent = argv[i + 1];
    else usage();
  }
  char err[512];
  driver = pick_driver(root, err, sizeof err);
  if (!driver) {
    fprintf(stderr, "hangar-launcher: %s\n", err);
    return 1;
  }
  int removed = 0;
  /* v1: the parent exists once per controller hierarchy; v2: once. A run's name is listed in each. */
  int nparents = driver == &cg_v2 ? 1 : V1_NCONTROLLERS;
  for (int c = 0; c < nparents; c++) {
    char dir[PATH_MAX];
    if (driver == &cg_v2) snprintf(dir, sizeof dir, "%s/%s", root, parent);
    else snprintf(dir, sizeof dir, "%s/%s/%s", root, v1_controllers[c], parent);
    DIR *d = opendir(dir);
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      int pid;
      long long start;
      char rest;
      if (sscanf(e->d_name, "%d-%lld%c", &pid, &start, &rest) != 2) continue;
      if (proc_starttime(pid) == start) continue; /* its launcher is alive */
      /* Its launcher is gone: kill what is left of the run, then remove its cgroups everywhere. */
      struct cgroup cg;
      if (driver->open(&cg, root, parent, e->d_name, false, err, sizeof err) != 0) continue;
      char procs[PATH_MAX];
      cg_path(procs, &cg, driver == &cg_v2 ? 0 : cg.freezer, "cgroup.procs");
      if (file_exists(procs)) driver->kill_all(&cg);
      driver->destroy(&cg);
      removed++;
    }
    closedir(d);
  }
  printf("{\"removed\":%d}\n", removed);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  if (strcmp(argv[1], "run") == 0) return cmd_run(argc, argv);
  if (strcmp(argv[1], "workdir-create") == 0) return cmd_workdir_create(argc, argv);
  if (strcmp(argv[1], "workdir-remove") == 0) return cmd_workdir_remove(argc, argv);
  if (strcmp(argv[1], "tools-mount") == 0) return cmd_tools_mount(argc, argv);
  if (strcmp(argv[1], "sweep") == 0) return cmd_sweep(argc, argv);
  usage();
}
