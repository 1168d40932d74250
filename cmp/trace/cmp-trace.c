/*
 * cmp-trace: records which paths a command and all its descendants hand to file syscalls, and
 * which directories they list, for the traced cache (cmp/trace/read-recorder.ts).
 *
 *   cmp-trace [--one-cpu] OUT MAX_PATHS FILE ARGV0 [ARG...]
 *
 * Runs FILE with argv ARGV0 ARG... and the caller's env and cwd, and exits as it did (same code,
 * or the same signal). OUT receives one line per distinct record, path bytes in hex:
 *   T <hex>   a path given to a file syscall (opened, stat'ed, probed, executed, created, removed)
 *   L <hex>   a directory whose entries were read
 *   M <hex>   the source of a rename
 *   X <text>  the record cannot be trusted (first reason only)
 *   E         written last, when every tracee is gone
 * Relative paths are joined with the caller's cwd or dirfd as the kernel saw them at the call
 * (from /proc), so the reader only normalizes.
 *
 * Why not strace: strace stops each traced syscall twice (entry and exit), resolves and formats
 * every descriptor, and keeps new threads on PTRACE_SYSCALL (a stop on every syscall) until their
 * first traced call. Here a seccomp filter stops only the file syscalls, once, at entry, and
 * every thread and child inherits it.
 *
 * --one-cpu runs the tracer and the command on one CPU, the one the tracer started on (as rr
 * binds its tracees): each stop is then a local context switch instead of two cross-CPU wakeups,
 * several times cheaper on virtual machines, at the cost of the command's own parallelism.
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
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
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
 * syscalls alike. Numbers past the newest one we know are stopped and give the record up. */
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

/* ---- reading the tracee ---- */

/* The NUL-terminated string at `addr` in `pid`, read page by page; -1 if unreadable or too long
 * (the kernel then fails the call with EFAULT or ENAMETOOLONG: nothing was accessed). */
static long read_string(pid_t pid, unsigned long addr, char *buf, size_t cap) {
  size_t got = 0, chunk = 256; /* most paths are short: copy little first */
  while (got < cap) {
    size_t page_left = 4096 - ((addr + got) & 4095);
    size_t want = page_left < chunk ? page_left : chunk;
    if (want > cap - got) want = cap - got;
    chunk = 4096;
    struct iovec local = {buf + got, want}, remote = {(void *)(addr + got), want};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) return -1;
    char *nul = memchr(buf + got, 0, (size_t)n);
    if (nul) return nul - buf;
    got += (size_t)n;
  }
  return -1;
}

/* Working directories read from /proc, by tracee, until any tracee changes one: most relative
 * paths are the cwd's, and a readlink per call would cost as much as the stop itself. */
static struct cwd_entry { pid_t pid; long len; char *path; } *cwds;
static size_t ncwds, cwds_cap;
static int cwd_changes;

static long cwd_path(pid_t pid, char *buf, size_t cap);

/* The path of `pid`'s cwd (dirfd AT_FDCWD) or of its descriptor `fd`; -1 if it has none. */
static long fd_path(pid_t pid, int fd, char *buf, size_t cap) {
  if (fd == AT_FDCWD && !cwd_changes) return cwd_path(pid, buf, cap);
  char link[64];
  if (fd == AT_FDCWD) snprintf(link, sizeof link, "/proc/%d/cwd", pid);
  else snprintf(link, sizeof link, "/proc/%d/fd/%d", pid, fd);
  ssize_t n = readlink(link, buf, cap - 1);
  if (n <= 0 || buf[0] != '/') return -1;
  buf[n] = 0;
  return n;
}

static long cwd_path(pid_t pid, char *buf, size_t cap) {
  for (size_t i = 0; i < ncwds; i++)
    if (cwds[i].pid == pid) {
      memcpy(buf, cwds[i].path, (size_t)cwds[i].len + 1);
      return cwds[i].len;
    }
  char link[64];
  snprintf(link, sizeof link, "/proc/%d/cwd", pid);
  ssize_t n = readlink(link, buf, cap - 1);
  if (n <= 0 || buf[0] != '/') return -1;
  buf[n] = 0;
  if (ncwds == cwds_cap) {
    cwds_cap = cwds_cap ? cwds_cap * 2 : 64;
    if (!(cwds = realloc(cwds, cwds_cap * sizeof *cwds))) abort();
  }
  if (!(cwds[ncwds].path = strdup(buf))) abort();
  cwds[ncwds].pid = pid;
  cwds[ncwds++].len = n;
  return n;
}

static void forget_cwd(pid_t pid) {
  for (size_t i = 0; i < ncwds; i++)
    if (cwds[i].pid == pid) {
      free(cwds[i].path);
      cwds[i] = cwds[--ncwds];
      return;
    }
}

static void on_syscall(pid_t pid) {
  struct __ptrace_syscall_info info;
  if (ptrace(PTRACE_GET_SYSCALL_INFO, pid, sizeof info, &info) <= 0) return give_up("syscall info unavailable");
  if (info.op != PTRACE_SYSCALL_INFO_SECCOMP) return;
  if (info.arch != NATIVE_ARCH) return give_up("a syscall of another architecture");
  const struct spec *s = NULL;
  for (size_t i = 0; i < NSPECS; i++)
    if (SPECS[i].nr == (long)info.seccomp.nr) s = &SPECS[i];
  if (!s) return give_up("a syscall unknown to cmp-trace");
  if (s->kind == UNTRACKABLE) {
    static char why[64];
    snprintf(why, sizeof why, "the plugin called %s", s->name);
    return give_up(why);
  }
  if (s->nr == SYS_chdir || s->nr == SYS_fchdir) cwd_changes = 1;
  char dir[PATH_MAX + 1], rel[PATH_MAX + 1], full[2 * PATH_MAX + 2];
  if (s->kind == LIST) {
    long n = fd_path(pid, (int)info.seccomp.args[s->dirfd[0]], dir, sizeof dir);
    if (n > 0) record('L', dir, (size_t)n);
    return;
  }
  for (int k = 0; k < 2 && s->path[k] >= 0; k++) {
    unsigned long addr = info.seccomp.args[s->path[k]];
    if (!addr) continue;
    long n = read_string(pid, addr, rel, sizeof rel);
    if (n < 0) continue;
    if (n == 0) continue; /* AT_EMPTY_PATH: the descriptor itself, opened earlier */
    const char *p = rel;
    size_t len = (size_t)n;
    if (rel[0] != '/') {
      int dirfd = s->dirfd[k] < 0 ? AT_FDCWD : (int)info.seccomp.args[s->dirfd[k]];
      long d = fd_path(pid, dirfd, dir, sizeof dir);
      if (d < 0) {
        /* A bad descriptor fails the call; a descriptor that is no directory too (ENOTDIR). */
        if (dirfd == AT_FDCWD) return give_up("a process without a working directory");
        continue;
      }
      len = (size_t)snprintf(full, sizeof full, "%s/%s", dir, rel);
      p = full;
    }
    record('T', p, len);
    if (k == 0 && s->moves) record('M', p, len);
  }
}

/* ---- the filter: stop the syscalls of SPECS, and anything of another architecture ---- */
static void install_filter(void) {
  struct sock_filter f[5 + NSPECS + 2];
  size_t n = 0;
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
  /* also x32 syscalls on x86_64, which share the arch value (nr | 0x40000000) */
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, FIRST_UNKNOWN_NR, NSPECS + 1, 0);
  for (size_t i = 0; i < NSPECS; i++)
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)SPECS[i].nr, (unsigned char)(NSPECS - i), 0);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE);
  struct sock_fprog prog = {(unsigned short)n, f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
    perror("cmp-trace: seccomp");
    _exit(127);
  }
}

/* Bind this process, and so the command it forks, to one of the CPUs it may use: the one the
 * kernel just started it on, which exec balancing picks among the least busy. */
static void bind_one_cpu(void) {
  cpu_set_t allowed, one;
  int cpu = sched_getcpu();
  if (cpu < 0 || sched_getaffinity(0, sizeof allowed, &allowed) || !CPU_ISSET(cpu, &allowed)) return;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(0, sizeof one, &one);
}

/* ---- tracees seen (to tell a new tracee's first SIGSTOP from a real one) ---- */
static pid_t *seen;
static size_t nseen, seen_cap;
static int seen_take(pid_t pid) {
  for (size_t i = 0; i < nseen; i++)
    if (seen[i] == pid) return 1;
  if (nseen == seen_cap) {
    seen_cap = seen_cap ? seen_cap * 2 : 64;
    seen = realloc(seen, seen_cap * sizeof *seen);
    if (!seen) abort();
  }
  seen[nseen++] = pid;
  return 0;
}
static void seen_drop(pid_t pid) {
  for (size_t i = 0; i < nseen; i++)
    if (seen[i] == pid) {
      seen[i] = seen[--nseen];
      return;
    }
}

static const int PASSED_ON[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE};

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--one-cpu") == 0) {
    bind_one_cpu();
    argv++;
    argc--;
  }
  if (argc < 5) {
    fprintf(stderr, "usage: cmp-trace [--one-cpu] OUT MAX_PATHS FILE ARGV0 [ARG...]\n");
    return 2;
  }
  out = fopen(argv[1], "we");
  if (!out) {
    perror("cmp-trace: output");
    return 2;
  }
  static char obuf[1 << 16];
  setvbuf(out, obuf, _IOFBF, sizeof obuf);
  max_paths = atol(argv[2]);

  pid_t root = fork();
  if (root < 0) {
    perror("cmp-trace: fork");
    return 2;
  }
  if (root == 0) {
    if (ptrace(PTRACE_TRACEME, 0, 0, 0)) _exit(127);
    raise(SIGSTOP);
    install_filter();
    execv(argv[3], argv + 4);
    /* Never reached for a command the caller checked runnable. */
    fprintf(stderr, "cmp-trace: exec: %s: %s\n", argv[3], strerror(errno));
    _exit(127);
  }
  /* The group's SIGTERM/SIGINT reach the tracees too; the tracer outlives them to finish the
   * record, and exits as the command did. */
  for (size_t i = 0; i < sizeof PASSED_ON / sizeof PASSED_ON[0]; i++) signal(PASSED_ON[i], SIG_IGN);

  int st;
  if (waitpid(root, &st, 0) != root || !WIFSTOPPED(st)) return 2;
  seen_take(root);
  long opts = PTRACE_O_EXITKILL | PTRACE_O_TRACESECCOMP | PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC;
  if (ptrace(PTRACE_SETOPTIONS, root, 0, opts) || ptrace(PTRACE_CONT, root, 0, 0)) {
    perror("cmp-trace: ptrace");
    kill(root, SIGKILL);
    return 2;
  }

  int root_status = 0;
  for (;;) {
    pid_t pid = waitpid(-1, &st, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break; /* ECHILD: every tracee is gone */
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      if (pid == root) root_status = st;
      seen_drop(pid);
      forget_cwd(pid);
      continue;
    }
    if (!WIFSTOPPED(st)) continue;
    int sig = WSTOPSIG(st), event = st >> 16, inject = 0;
    if (sig == SIGTRAP && event == PTRACE_EVENT_SECCOMP) on_syscall(pid);
    else if (sig == SIGTRAP && event == PTRACE_EVENT_EXEC) {
      /* A thread that execs takes its leader's pid; its own tid is gone without an exit report. */
      unsigned long former;
      if (ptrace(PTRACE_GETEVENTMSG, pid, 0, &former) == 0 && (pid_t)former != pid) {
        seen_drop((pid_t)former);
        forget_cwd((pid_t)former);
      }
    } else if (sig == SIGTRAP && event != 0) {
      /* clone/fork/vfork events: the new tracee reports its own first stop */
    } else if (sig == SIGSTOP && !seen_take(pid)) {
      /* a new tracee's initial stop */
    } else {
      siginfo_t si;
      /* A group-stop (no siginfo) is resumed; a signal is delivered. */
      if (ptrace(PTRACE_GETSIGINFO, pid, 0, &si) == 0) inject = sig;
    }
    ptrace(PTRACE_CONT, pid, 0, inject);
  }

  /* Without the end mark (a failed write) the reader gives the record up; the exit stays the command's. */
  if (!ferror(out)) fputs("E\n", out);
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
