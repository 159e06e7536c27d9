/*
 * hangar-reaper: the first process inside the sandbox (pid 1 of its pid namespace, started by
 * `bwrap --as-pid-1`), running as the unprivileged sandbox uid.
 *
 *   hangar-reaper REPORT_FD NOFILE -- PROGRAM [ARGS...]
 *
 * It forks PROGRAM, reaps every process that ends up parented to it while PROGRAM runs (orphans are
 * reparented to pid 1, and an unreaped zombie would keep counting against the pids limit), and when
 * PROGRAM itself ends it kills whatever is left in the namespace, reaps it, and writes PROGRAM's exact
 * status and the peak RSS of its processes to REPORT_FD (format in common.h), then exits.
 *
 * Why a reaper of our own: bwrap's exit status folds "exited 137" and "killed by SIGKILL" together and
 * says nothing about memory. Why kill the rest when PROGRAM ends: a background child would otherwise keep
 * the stdout/stderr pipes open and the caller's reads would never finish.
 *
 * The reaper is built static so it adds next to nothing to the RSS it measures and needs nothing from the
 * sandbox's /lib.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "common.h"

static long long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static void die(const char *what) {
  /* stderr is the program's stderr: the caller sees this text next to an "error" status. */
  fprintf(stderr, "hangar-reaper: %s: %s\n", what, strerror(errno));
  _exit(126);
}

/*
 * A deny-list seccomp filter for PROGRAM and its descendants. The sandbox already has no capabilities, no
 * network and no further user namespaces (bwrap --disable-userns); this removes kernel interfaces a code
 * runner never needs and that are frequent sources of kernel bugs. Denied calls fail with EPERM, so
 * runtimes that probe them (libuv's io_uring) fall back instead of dying. Other ABIs (i386 via int 0x80,
 * x32) would bypass a syscall-number list, so they get ENOSYS wholesale.
 */
#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)

#if defined(__x86_64__) || defined(__aarch64__)
#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#else
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#endif
static struct sock_filter seccomp_filter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000 /* __X32_SYSCALL_BIT */, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
#endif
    DENY(__NR_ptrace), DENY(__NR_process_vm_readv), DENY(__NR_process_vm_writev),
    DENY(__NR_keyctl), DENY(__NR_add_key), DENY(__NR_request_key),
    DENY(__NR_bpf), DENY(__NR_perf_event_open), DENY(__NR_userfaultfd),
    DENY(__NR_mount), DENY(__NR_umount2), DENY(__NR_pivot_root), DENY(__NR_setns), DENY(__NR_unshare),
    DENY(__NR_open_by_handle_at), DENY(__NR_name_to_handle_at),
    DENY(__NR_kexec_load), DENY(__NR_init_module), DENY(__NR_finit_module), DENY(__NR_delete_module),
    DENY(__NR_swapon), DENY(__NR_swapoff), DENY(__NR_reboot), DENY(__NR_acct), DENY(__NR_quotactl),
    DENY(__NR_syslog), DENY(__NR_fanotify_init), DENY(__NR_vhangup),
#ifdef __NR_kexec_file_load
    DENY(__NR_kexec_file_load),
#endif
#ifdef __NR_io_uring_setup
    DENY(__NR_io_uring_setup), DENY(__NR_io_uring_enter), DENY(__NR_io_uring_register),
#endif
#ifdef __NR_fsopen
    DENY(__NR_fsopen), DENY(__NR_fsconfig), DENY(__NR_fsmount), DENY(__NR_move_mount), DENY(__NR_open_tree),
    DENY(__NR_fspick),
#endif
#ifdef __NR_mount_setattr
    DENY(__NR_mount_setattr),
#endif
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};

static void install_seccomp(void) {
  struct sock_fprog prog = {.len = sizeof seccomp_filter / sizeof seccomp_filter[0], .filter = seccomp_filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("no_new_privs");
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) die("seccomp");
}
#else
static void install_seccomp(void) {} /* other architectures: namespaces, uid and cgroups only */
#endif

int main(int argc, char **argv) {
  if (argc < 5 || strcmp(argv[3], "--") != 0) {
    fprintf(stderr, "usage: hangar-reaper REPORT_FD NOFILE -- PROGRAM [ARGS...]\n");
    return 126;
  }
  int report_fd = atoi(argv[1]);
  long nofile = atol(argv[2]);
  char **program = argv + 4;

  /* PROGRAM must never inherit the report channel. */
  if (fcntl(report_fd, F_SETFD, FD_CLOEXEC) != 0) die("report fd");
  /* Not dumpable: processes of the same uid in the sandbox cannot ptrace us to forge the report. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

  /* exec failures travel back on a close-on-exec pipe: EOF means the exec succeeded. */
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) die("pipe");

  long long t0 = now_us();
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
    close(errpipe[0]);
    /* The exact open-files limit applies to PROGRAM only: bwrap and this reaper need a few fds of their own. */
    if (nofile > 0) {
      struct rlimit rl = {.rlim_cur = (rlim_t)nofile, .rlim_max = (rlim_t)nofile};
      setrlimit(RLIMIT_NOFILE, &rl);
    }
    install_seccomp();
    execvp(program[0], program);
    int e = errno;
    if (write(errpipe[1], &e, sizeof e) < 0) { /* nothing more we can do */ }
    _exit(127);
  }
  close(errpipe[1]);
  int exec_errno = 0;
  ssize_t n;
  do n = read(errpipe[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  close(errpipe[0]);
  if (n != (ssize_t)sizeof exec_errno) exec_errno = 0;

  /* Reap everything until PROGRAM itself ends: orphaned grandchildren become our children. */
  int status = 0;
  for (;;) {
    int st;
    pid_t p = waitpid(-1, &st, 0);
    if (p < 0) {
      if (errno == EINTR) continue;
      die("waitpid");
    }
    if (p == child) {
      status = st;
      break;
    }
  }
  long long wall_us = now_us() - t0;

  /* As pid 1, kill(-1) reaches every other process in the namespace (and only those). Outside a fresh pid
   * namespace it would reach every process of this uid, so it is only done as pid 1. Then reap them all. */
  if (getpid() == 1) kill(-1, SIGKILL);
  while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {
  }

  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);

  char line[160];
  int len;
  if (exec_errno != 0)
    len = snprintf(line, sizeof line, "%s %d execfail %d 0 0\n", HANGAR_REPORT_MAGIC, HANGAR_REPORT_VERSION,
                   exec_errno);
  else if (WIFSIGNALED(status))
    len = snprintf(line, sizeof line, "%s %d signaled %d %ld %lld\n", HANGAR_REPORT_MAGIC, HANGAR_REPORT_VERSION,
                   WTERMSIG(status), ru.ru_maxrss, wall_us);
  else
    len = snprintf(line, sizeof line, "%s %d exited %d %ld %lld\n", HANGAR_REPORT_MAGIC, HANGAR_REPORT_VERSION,
                   WEXITSTATUS(status), ru.ru_maxrss, wall_us);
  if (write(report_fd, line, (size_t)len) != len) return 126;
  return 0;
}
