/*
 * cmp-trace: records which paths a command and all its descendants hand to file syscalls, and
 * which directories they list, for the traced cache (cmp/trace/read-recorder.ts).
 *
 *   cmp-trace --cpus=one|all OUT MAX_PATHS FILE ARGV0 [ARG...]
 *
 * Runs FILE with argv ARGV0 ARG... and the caller's env and cwd, and exits as it did (same
 * code, or the same signal). OUT receives one line per distinct record, path bytes in hex:
 *   T <hex>   a path given to a file syscall (opened, stat'ed, probed, executed, created, removed)
 *   L <hex>   a directory whose entries were read
 *   M <hex>   the source of a rename
 *   X <text>  the record cannot be trusted (first reason only)
 *   E         written last, when the command has exited
 * Relative paths are joined with the caller's cwd or dirfd as the kernel saw them at the call
 * (from /proc), so the reader only normalizes.
 *
 * How: a seccomp filter, inherited by every thread and child, sends only the file syscalls to
 * this process as user notifications (SECCOMP_RET_USER_NOTIF); it reads their path arguments
 * and lets them continue. No ptrace: nothing else stops, and signals and exits are the
 * command's own. Each notification is a round trip between two tasks; on a VM, waking a task
 * on another, idle CPU costs several times the call. --cpus=one binds the tracer and the
 * command to one CPU (as rr does), so that every wake-up is local, at the price of the
 * command's own parallelism. The listener's synchronous wake-up mode (Linux 6.7) is asked for
 * either way; alone it helps single-threaded commands but not pipelines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#else
#error "cmp-trace supports x86_64 and aarch64"
#endif

/* Syscalls newer than the build's headers: since Linux 5.1 every architecture numbers new
 * syscalls alike. Numbers past the newest one we know are notified and give the record up. */
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
#ifndef SYS_setxattrat
#define SYS_setxattrat 463
#define SYS_getxattrat 464
#define SYS_listxattrat 465
#define SYS_removexattrat 466
#endif
#ifndef SYS_open_tree_attr
#define SYS_open_tree_attr 467
#endif
#ifndef SYS_file_getattr
#define SYS_file_getattr 468
#define SYS_file_setattr 469
#endif
#define FIRST_UNKNOWN_NR 470
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP 1
#endif

/* How a syscall's arguments name paths. */
enum kind { PATHS, LIST, UNTRACKABLE };
struct spec {
  long nr;
  const char *name;
  enum kind kind;
  /* Up to two (dirfd argument or -1 for the cwd, path argument) pairs; path -1 = none. */
  int dirfd[2], path[2];
  int moves; /* the first path is a rename source */
};

#define P1(n, p) {SYS_##n, #n, PATHS, {-1, -1}, {p, -1}, 0}
#define AT1(n, d, p) {SYS_##n, #n, PATHS, {d, -1}, {p, -1}, 0}
#define U(n) {SYS_##n, #n, UNTRACKABLE, {-1, -1}, {-1, -1}, 0}

static const struct spec SPECS[] = {
#ifdef SYS_open
    P1(open, 0), P1(creat, 0), P1(stat, 0), P1(lstat, 0), P1(access, 0), P1(readlink, 0),
    P1(chmod, 0), P1(chown, 0), P1(lchown, 0), P1(mkdir, 0), P1(rmdir, 0), P1(unlink, 0),
    P1(mknod, 0), P1(utime, 0), P1(utimes, 0), P1(uselib, 0),
    {SYS_getdents, "getdents", LIST, {0, -1}, {-1, -1}, 0},
    {SYS_rename, "rename", PATHS, {-1, -1}, {0, 1}, 1},
    {SYS_link, "link", PATHS, {-1, -1}, {0, 1}, 0},
    AT1(futimesat, 0, 1), U(symlink),
#endif
    AT1(openat, 0, 1), AT1(openat2, 0, 1), AT1(newfstatat, 0, 1), AT1(statx, 0, 1),
    AT1(faccessat, 0, 1), AT1(faccessat2, 0, 1), AT1(readlinkat, 0, 1), P1(execve, 0),
    AT1(execveat, 0, 1), P1(chdir, 0), {SYS_fchdir, "fchdir", PATHS, {-1, -1}, {-1, -1}, 0}, P1(truncate, 0), P1(statfs, 0), AT1(fchmodat, 0, 1),
    AT1(fchownat, 0, 1), AT1(mkdirat, 0, 1), AT1(unlinkat, 0, 1), AT1(mknodat, 0, 1),
    AT1(utimensat, 0, 1), AT1(name_to_handle_at, 0, 1), P1(getxattr, 0), P1(lgetxattr, 0),
    P1(setxattr, 0), P1(lsetxattr, 0), P1(listxattr, 0), P1(llistxattr, 0), P1(removexattr, 0),
    P1(lremovexattr, 0), P1(inotify_add_watch, 1), AT1(fanotify_mark, 3, 4), P1(acct, 0),
    P1(swapon, 0), P1(swapoff, 0), P1(umount2, 0), P1(quotactl, 1), AT1(fchmodat2, 0, 1),
    AT1(setxattrat, 0, 1), AT1(getxattrat, 0, 1), AT1(listxattrat, 0, 1), AT1(removexattrat, 0, 1),
    AT1(file_getattr, 0, 1), AT1(file_setattr, 0, 1),
    {SYS_renameat, "renameat", PATHS, {0, 2}, {1, 3}, 1},
    {SYS_renameat2, "renameat2", PATHS, {0, 2}, {1, 3}, 1},
    {SYS_linkat, "linkat", PATHS, {0, 2}, {1, 3}, 0},
    {SYS_getdents64, "getdents64", LIST, {0, -1}, {-1, -1}, 0},
    U(symlinkat), U(io_uring_setup), U(open_by_handle_at), U(mount), U(pivot_root), U(chroot),
    U(fsmount), U(open_tree), U(move_mount), U(fspick), U(mount_setattr), U(setns),
    U(fsopen), U(fsconfig), U(open_tree_attr),
};
#define NSPECS (sizeof SPECS / sizeof SPECS[0])

static FILE *out;
static const char *reason; /* first reason the record is untrustworthy */
static long max_paths, npaths;

/* ---- distinct records: open-addressing set of "kind + path" ---- */
static char **set;
static size_t set_cap;

static uint64_t hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h;
}

static int set_add(const char *rec, size_t n) {
  if ((size_t)(npaths + 1) * 2 > set_cap) {
    size_t cap = set_cap ? set_cap * 2 : 1024;
    char **grown = calloc(cap, sizeof *grown);
    if (!grown) return -1;
    for (size_t i = 0; i < set_cap; i++) {
      if (!set[i]) continue;
      size_t j = hash(set[i], strlen(set[i])) & (cap - 1);
      while (grown[j]) j = (j + 1) & (cap - 1);
      grown[j] = set[i];
    }
    free(set);
    set = grown;
    set_cap = cap;
  }
  size_t j = hash(rec, n) & (set_cap - 1);
  for (; set[j]; j = (j + 1) & (set_cap - 1))
    if (strlen(set[j]) == n && memcmp(set[j], rec, n) == 0) return 0;
  if (!(set[j] = strndup(rec, n))) return -1;
  npaths++;
  return 1;
}

static void give_up(const char *why) {
  if (!reason) {
    reason = why;
    fprintf(out, "X %s\n", why);
  }
}

static void record(char kind, const char *path, size_t n) {
  if (reason) return;
  char rec[2 * PATH_MAX + 2];
  if (n > 2 * PATH_MAX) return give_up("a path too long to record");
  rec[0] = kind;
  memcpy(rec + 1, path, n);
  int added = set_add(rec, n + 1);
  if (added < 0) return give_up("out of memory");
  if (!added) return;
  if (npaths > max_paths) return give_up("more paths than CMP_OFFLOAD_TRACE_MAX_PATHS");
  fputc(kind, out);
  fputc(' ', out);
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    fputc(hex[(unsigned char)path[i] >> 4], out);
    fputc(hex[(unsigned char)path[i] & 15], out);
  }
  fputc('\n', out);
}

/* ---- reading the caller ---- */

/* The NUL-terminated string at `addr` in `pid`, read page by page; -1 if unreadable or too long
 * (errno EFAULT or ENAMETOOLONG: the kernel then fails the call alike, nothing was accessed;
 * ESRCH: the caller is gone). */
static long read_string(pid_t pid, unsigned long addr, char *buf, size_t cap) {
  size_t got = 0, chunk = 256; /* most paths are short: copy little first */
  while (got < cap) {
    size_t page_left = 4096 - ((addr + got) & 4095);
    size_t want = page_left < chunk ? page_left : chunk;
    if (want > cap - got) want = cap - got;
    chunk = 4096;
    struct iovec local = {buf + got, want}, remote = {(void *)(addr + got), want};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) return -1;
    if (n == 0) {
      errno = EFAULT;
      return -1;
    }
    char *nul = memchr(buf + got, 0, (size_t)n);
    if (nul) return nul - buf;
    got += (size_t)n;
  }
  errno = ENAMETOOLONG;
  return -1;
}

/* The path of `pid`'s cwd (dirfd AT_FDCWD) or of its descriptor `fd`; -1 with errno ENOENT (no
 * such descriptor, or the task is gone), ENOTDIR (not a path: a pipe, a socket) or another. */
static long fd_path(pid_t pid, int fd, char *buf, size_t cap) {
  char link[64];
  if (fd == AT_FDCWD) snprintf(link, sizeof link, "/proc/%d/cwd", pid);
  else snprintf(link, sizeof link, "/proc/%d/fd/%d", pid, fd);
  ssize_t n = readlink(link, buf, cap - 1);
  if (n <= 0) return -1;
  if (buf[0] != '/') {
    errno = ENOTDIR;
    return -1;
  }
  buf[n] = 0;
  return n;
}

/* One notified syscall of task `pid` (a thread id). Recording more than was accessed is safe;
 * less never happens silently. */
static void on_syscall(pid_t pid, const struct seccomp_data *call) {
  if (call->arch != NATIVE_ARCH) return give_up("a syscall of another architecture");
  const struct spec *s = NULL;
  for (size_t i = 0; i < NSPECS; i++)
    if (SPECS[i].nr == call->nr) s = &SPECS[i];
  if (!s) return give_up("a syscall unknown to cmp-trace");
  if (s->kind == UNTRACKABLE) {
    static char why[64];
    snprintf(why, sizeof why, "the plugin called %s", s->name);
    return give_up(why);
  }
  char dir[PATH_MAX + 1], rel[PATH_MAX + 1], full[2 * PATH_MAX + 2];
  if (s->kind == LIST) {
    long n = fd_path(pid, (int)call->args[s->dirfd[0]], dir, sizeof dir);
    if (n > 0) record('L', dir, (size_t)n);
    else if (errno != ENOENT && errno != ENOTDIR) give_up("a listed directory could not be named");
    return;
  }
  for (int k = 0; k < 2 && s->path[k] >= 0; k++) {
    unsigned long addr = call->args[s->path[k]];
    if (!addr) continue;
    long n = read_string(pid, addr, rel, sizeof rel);
    if (n < 0) {
      if (errno == EFAULT || errno == ENAMETOOLONG || errno == ESRCH) continue;
      return give_up("the plugin's memory could not be read");
    }
    if (n == 0) continue; /* AT_EMPTY_PATH: the descriptor itself, opened earlier */
    const char *p = rel;
    size_t len = (size_t)n;
    if (rel[0] != '/') {
      int dirfd = s->dirfd[k] < 0 ? AT_FDCWD : (int)call->args[s->dirfd[k]];
      long d = fd_path(pid, dirfd, dir, sizeof dir);
      if (d < 0) {
        /* No such descriptor (or task), or one that is no directory: the call fails alike. */
        if (dirfd != AT_FDCWD && (errno == ENOENT || errno == ENOTDIR)) continue;
        return give_up("a relative path whose directory could not be named");
      }
      len = (size_t)snprintf(full, sizeof full, "%s/%s", dir, rel);
      p = full;
    }
    record('T', p, len);
    if (k == 0 && s->moves) record('M', p, len);
  }
}

/* Answer one notification: record it (when `recording`) and let the syscall run. io_uring_setup
 * is refused with ENOSYS instead: a ring would read files without syscalls we see, and every
 * user of it we know (libuv, hence Node >= 22; liburing callers) falls back to plain syscalls,
 * as under container runtimes whose seccomp profile already blocks io_uring. */
static void serve(int listener, int recording) {
  struct seccomp_notif req;
  struct seccomp_notif_resp resp;
  memset(&req, 0, sizeof req);
  if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req)) return;
  memset(&resp, 0, sizeof resp);
  resp.id = req.id;
  if (req.data.arch == NATIVE_ARCH && req.data.nr == SYS_io_uring_setup) {
    resp.error = -ENOSYS;
    ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    return;
  }
  if (recording) on_syscall((pid_t)req.pid, &req.data);
  resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
  /* ENOENT: the call was interrupted or its task died meanwhile. */
  ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}

/* ---- the filter: notify the syscalls of SPECS, and anything of another architecture ---- */
static int install_filter(void) {
  struct sock_filter f[5 + NSPECS + 2];
  size_t n = 0;
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
  /* also x32 syscalls on x86_64, which share the arch value (nr | 0x40000000) */
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, FIRST_UNKNOWN_NR, NSPECS + 1, 0);
  for (size_t i = 0; i < NSPECS; i++)
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)SPECS[i].nr, (unsigned char)(NSPECS - i), 0);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
  struct sock_fprog prog = {(unsigned short)n, f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
}

/* Bind this process and `child` to one of the CPUs they may use: the one the kernel started
 * this process on, which exec balancing picks among the least busy. */
static void bind_one_cpu(pid_t child) {
  cpu_set_t allowed, one;
  int cpu = sched_getcpu();
  if (cpu < 0 || sched_getaffinity(0, sizeof allowed, &allowed) || !CPU_ISSET(cpu, &allowed)) return;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(0, sizeof one, &one);
  sched_setaffinity(child, sizeof one, &one);
}

/* Pass a descriptor over a unix socket. */
static int send_fd(int sock, int fd) {
  char byte = 0, space[CMSG_SPACE(sizeof fd)];
  struct iovec io = {&byte, 1};
  struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = space, .msg_controllen = sizeof space};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fd);
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock) {
  char byte, space[CMSG_SPACE(sizeof(int))];
  struct iovec io = {&byte, 1};
  struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = space, .msg_controllen = sizeof space};
  if (recvmsg(sock, &m, MSG_CMSG_CLOEXEC) != 1) return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

/* The command's side: filter, hand the listener over, wait for the go, exec. Failures before
 * the exec say "cmp-trace: exec:" so that the caller runs the command without us. */
static void start_command(int sock, char **argv) {
  int listener = install_filter();
  if (listener < 0 || send_fd(sock, listener)) {
    fprintf(stderr, "cmp-trace: exec: seccomp listener: %s\n", strerror(errno));
    _exit(127);
  }
  close(listener);
  char go;
  if (read(sock, &go, 1) != 1) _exit(127);
  close(sock);
  execv(argv[0], argv + 1);
  fprintf(stderr, "cmp-trace: exec: %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

static const int PASSED_ON[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE};

int main(int argc, char **argv) {
  const char *cpus = argc > 1 && strncmp(argv[1], "--cpus=", 7) == 0 ? argv[1] + 7 : NULL;
  if (!cpus || argc < 6 || (strcmp(cpus, "one") && strcmp(cpus, "all"))) {
    fprintf(stderr, "usage: cmp-trace --cpus=one|all OUT MAX_PATHS FILE ARGV0 [ARG...]\n");
    return 2;
  }
  out = fopen(argv[2], "we");
  if (!out) {
    perror("cmp-trace: output");
    return 2;
  }
  /* Plugin code runs as our uid: non-dumpable, it can neither ptrace us nor open our /proc
   * files (mem, environ, fd), so it cannot alter the record or the listener. It can still
   * signal us; killing us only loses its own run's record (no end mark). */
  prctl(PR_SET_DUMPABLE, 0);
  static char obuf[1 << 16];
  setvbuf(out, obuf, _IOFBF, sizeof obuf);
  max_paths = atol(argv[3]);

  /* Orphaned descendants come to us, so that we know whether any outlive the command. */
  int sp[2];
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp)) {
    perror("cmp-trace: setup");
    return 2;
  }
  /* SIGUSR1: SIGKILL the command (the server's "kill the main process", Go's
   * exec.CommandContext on ctx done). Killing us instead would leave its descendants with a
   * filter nobody serves: their file syscalls would fail with ENOSYS during the group's grace
   * period, where without us a TERM handler can still write. */
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigaddset(&chld, SIGUSR1);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  pid_t root = fork();
  if (root < 0) {
    perror("cmp-trace: fork");
    return 2;
  }
  if (root == 0) {
    sigprocmask(SIG_UNBLOCK, &chld, NULL);
    /* If the tracer dies, its notifications would fail with ENOSYS: end the command too. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(sp[0]);
    start_command(sp[1], argv + 4);
  }
  close(sp[1]);
  /* The group's SIGTERM/SIGINT reach the command too; the tracer outlives it to finish the
   * record, and exits as the command did. */
  for (size_t i = 0; i < sizeof PASSED_ON / sizeof PASSED_ON[0]; i++) signal(PASSED_ON[i], SIG_IGN);

  int listener = recv_fd(sp[0]);
  if (listener >= 0) ioctl(listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, (__u64)SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);
  if (!strcmp(cpus, "one")) bind_one_cpu(root);
  if (listener >= 0 && write(sp[0], "g", 1) != 1) give_up("the command did not start");
  close(sp[0]);
  if (listener < 0) give_up("no seccomp listener");
  int chldfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (chldfd < 0) {
    perror("cmp-trace: signalfd");
    kill(root, SIGKILL);
    return 2;
  }

  /* Until the command exits. As a subreaper we inherit its orphaned descendants, so once it
   * is gone, "no child left" means no descendant left. */
  int root_status = 0, root_done = 0, others = 0;
  while (!root_done) {
    struct pollfd fds[2] = {{chldfd, POLLIN, 0}, {listener, POLLIN, 0}};
    if (poll(fds, listener >= 0 ? 2 : 1, -1) < 0) continue;
    if (fds[0].revents & POLLIN) {
      struct signalfd_siginfo si;
      int kill_root = 0;
      while (read(chldfd, &si, sizeof si) == sizeof si)
        if (si.ssi_signo == SIGUSR1) kill_root = 1;
      int st;
      pid_t pid;
      while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
        if (pid == root) {
          root_status = st;
          root_done = 1;
        }
      others = pid == 0; /* live children remain */
      if (kill_root && !root_done) kill(root, SIGKILL); /* not reaped yet: the pid is still ours */
    }
    if (listener >= 0 && (fds[1].revents & POLLIN)) serve(listener, 1);
    else if (listener >= 0 && (fds[1].revents & (POLLHUP | POLLERR))) {
      close(listener);
      listener = -1;
    }
  }
  /* Descendants that outlive the command (daemons, background jobs) keep running as they would
   * without us, served by a helper outside the command's process group until they are gone;
   * what they read after the command's exit is not attributed, so the record is given up. */
  if (others && listener >= 0) {
    give_up("processes outlived the command");
    fflush(out);
    if (fork() == 0) {
      setsid();
      int null = open("/dev/null", O_RDWR);
      for (int fd = 0; fd < 3; fd++) dup2(null, fd);
      fclose(out);
      for (;;) {
        struct pollfd pf = {listener, POLLIN, 0};
        if (poll(&pf, 1, -1) < 0 && errno != EINTR) break;
        if (pf.revents & POLLIN) serve(listener, 0);
        else if (pf.revents & (POLLHUP | POLLERR | POLLNVAL)) break;
      }
      _exit(0);
    }
  }

  /* Without the end mark (a failed write) the reader gives the record up; the exit stays the command's. */
  if (!ferror(out) && !reason) fputs("E\n", out);
  fclose(out);
  if (WIFSIGNALED(root_status)) {
    int sig = WTERMSIG(root_status);
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    signal(sig, SIG_DFL);
    sigset_t set1;
    sigemptyset(&set1);
    sigaddset(&set1, sig);
    sigprocmask(SIG_UNBLOCK, &set1, NULL);
    raise(sig);
    return 128 + sig;
  }
  return WEXITSTATUS(root_status);
}
