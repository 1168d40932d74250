/*
 * cmp-trace: records which paths a command and all its descendants hand to file syscalls, and
 * which directories they list, for the traced cache (cmp/trace/read-recorder.ts).
 *
 *   cmp-trace --cpus=one|all OUT MAX_PATHS FILE ARGV0 [ARG...]
 *
 * Runs FILE with argv ARGV0 ARG... and the caller's env and cwd, and exits as it did (same
 * code, or the same signal). OUT receives "V 2", then one line per distinct record, path bytes
 * in hex:
 *   T <hex>   a path a file syscall acted on (opened, stat'ed, probed, executed, created,
 *             removed): its metadata counts
 *   P <hex>   a path the lookup only passed: a symlink crossed, a directory left with `..`
 *             (its type counts, and a link's target)
 *   L <hex>   a directory whose entries were read
 *   M <hex>   the source or destination of a rename
 *   X <text>  the record cannot be trusted (first reason only)
 *   E         written last, when the command has exited
 * The rule: a record is complete or given up (X). Every path is resolved here as the kernel
 * resolves it for the caller, against the real filesystem at the call (its cwd or dirfd, its
 * /proc/self, symlinks and magic links): recorded paths are absolute and canonical. A path we
 * cannot read, a descriptor or link whose path does not name its object, a syscall or flag not
 * modelled here: the record is given up. `cmp-trace --decisions` lists the syscall table.
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
#include <elf.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/magic.h>
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
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
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
enum kind {
  PATHS,       /* (dirfd, path) pairs */
  OPEN_HOW,    /* openat2: a pair, and resolve flags in struct open_how */
  RENAME,      /* renameat2: two pairs, RENAME_* flags in argument 4 */
  LIST,        /* getdents: the entries of the directory of fd argument 0 */
  CWD,         /* fchdir: no path; the new cwd is read at each later relative call */
  SOCKADDR,    /* connect, bind, sendto: a sockaddr (argument path[0], length path[1]) */
  MSGHDR,      /* sendmsg, sendmmsg: the msg_name of each message (vector argument 1, count 2) */
  UNTRACKABLE, /* gives the record up */
};
struct spec {
  long nr;
  const char *name;
  enum kind kind;
  /* Up to two (dirfd argument or -1 for the cwd, path argument) pairs; path -1 = none. */
  int dirfd[2], path[2];
  int moves;      /* the first path is a rename source */
  int null_is_fd; /* a NULL path means the descriptor itself (utimensat, fanotify_mark) */
};

#define P1(n, p) {SYS_##n, #n, PATHS, {-1, -1}, {p, -1}, 0, 0}
#define AT1(n, d, p) {SYS_##n, #n, PATHS, {d, -1}, {p, -1}, 0, 0}
#define U(n) {SYS_##n, #n, UNTRACKABLE, {-1, -1}, {-1, -1}, 0, 0}

static const struct spec SPECS[] = {
#ifdef SYS_open
    P1(open, 0), P1(creat, 0), P1(stat, 0), P1(lstat, 0), P1(access, 0), P1(readlink, 0),
    P1(chmod, 0), P1(chown, 0), P1(lchown, 0), P1(mkdir, 0), P1(rmdir, 0), P1(unlink, 0),
    P1(mknod, 0), P1(utime, 0), P1(utimes, 0), P1(uselib, 0),
    {SYS_getdents, "getdents", LIST, {0, -1}, {-1, -1}, 0, 0},
    {SYS_rename, "rename", PATHS, {-1, -1}, {0, 1}, 1, 0},
    {SYS_link, "link", PATHS, {-1, -1}, {0, 1}, 0, 0},
    AT1(futimesat, 0, 1), U(symlink),
#endif
    AT1(openat, 0, 1), {SYS_openat2, "openat2", OPEN_HOW, {0, -1}, {1, -1}, 0, 0},
    AT1(newfstatat, 0, 1), AT1(statx, 0, 1),
    AT1(faccessat, 0, 1), AT1(faccessat2, 0, 1), AT1(readlinkat, 0, 1), P1(execve, 0),
    AT1(execveat, 0, 1), P1(chdir, 0), {SYS_fchdir, "fchdir", CWD, {-1, -1}, {-1, -1}, 0, 0},
    P1(truncate, 0), P1(statfs, 0), AT1(fchmodat, 0, 1),
    AT1(fchownat, 0, 1), AT1(mkdirat, 0, 1), AT1(unlinkat, 0, 1), AT1(mknodat, 0, 1),
    {SYS_utimensat, "utimensat", PATHS, {0, -1}, {1, -1}, 0, 1},
    AT1(name_to_handle_at, 0, 1), P1(getxattr, 0), P1(lgetxattr, 0),
    P1(setxattr, 0), P1(lsetxattr, 0), P1(listxattr, 0), P1(llistxattr, 0), P1(removexattr, 0),
    P1(lremovexattr, 0), P1(inotify_add_watch, 1),
    {SYS_fanotify_mark, "fanotify_mark", PATHS, {3, -1}, {4, -1}, 0, 1},
    P1(acct, 0), P1(swapon, 0), P1(swapoff, 0), P1(quotactl, 1), AT1(fchmodat2, 0, 1),
    AT1(setxattrat, 0, 1), AT1(getxattrat, 0, 1), AT1(listxattrat, 0, 1), AT1(removexattrat, 0, 1),
    AT1(file_getattr, 0, 1), AT1(file_setattr, 0, 1),
    {SYS_renameat, "renameat", PATHS, {0, 2}, {1, 3}, 1, 0},
    {SYS_renameat2, "renameat2", RENAME, {0, 2}, {1, 3}, 1, 0},
    {SYS_linkat, "linkat", PATHS, {0, 2}, {1, 3}, 0, 0},
    {SYS_getdents64, "getdents64", LIST, {0, -1}, {-1, -1}, 0, 0},
    /* A named unix socket is looked up as a path: connecting to one probes it. */
    {SYS_connect, "connect", SOCKADDR, {-1, -1}, {1, 2}, 0, 0},
    {SYS_bind, "bind", SOCKADDR, {-1, -1}, {1, 2}, 0, 0},
    {SYS_sendto, "sendto", SOCKADDR, {-1, -1}, {4, 5}, 0, 0},
    {SYS_sendmsg, "sendmsg", MSGHDR, {-1, -1}, {1, -1}, 0, 0},
    {SYS_sendmmsg, "sendmmsg", MSGHDR, {-1, -1}, {1, 2}, 0, 0},
    /* Links the kernel does not resolve now, new roots and mounts, handles, namespaces, rings,
     * and calls that can look up paths in ways not modelled here. */
    U(symlinkat), U(io_uring_setup), U(io_uring_enter), U(io_uring_register), U(open_by_handle_at),
    U(mount), U(umount2), U(pivot_root), U(chroot), U(fsmount), U(open_tree), U(move_mount),
    U(fspick), U(mount_setattr), U(setns), U(fsopen), U(fsconfig), U(open_tree_attr), U(bpf),
    U(perf_event_open),
    /* A filter of the plugin's own that notifies would take our notifications (the newest
     * filter's listener gets them); another process's memory and registers can be rewritten. */
    U(seccomp), U(ptrace), U(process_vm_writev),
};
#define NSPECS (sizeof SPECS / sizeof SPECS[0])

/* First line of every trace: the reader refuses traces of a recorder that resolved paths
 * lexically (before V 2). */
#define FORMAT "V 2"

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

/* One notified call: the task (a thread id) and whether its notification is still pending. */
struct caller {
  pid_t tid;
  pid_t tgid; /* 0 until needed */
  int listener;
  __u64 id;
};

/* The caller is gone, or its call was interrupted: either way this call does not run (an
 * interrupted call that restarts is notified again). Only then may a path we could not read be
 * skipped. */
static int call_gone(const struct caller *c) {
  return ioctl(c->listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &c->id) != 0;
}

/* `n` bytes at `addr` in the caller: 0, or -1 (errno from process_vm_readv, EFAULT if short). */
static int read_mem(const struct caller *c, unsigned long addr, void *buf, size_t n) {
  struct iovec local = {buf, n}, remote = {(void *)addr, n};
  ssize_t got = process_vm_readv(c->tid, &local, 1, &remote, 1, 0);
  if (got == (ssize_t)n) return 0;
  if (got >= 0) errno = EFAULT;
  return -1;
}

/* The NUL-terminated string at `addr` in the caller, read page by page; -1 if unreadable or
 * longer than the kernel takes (errno EFAULT, ENAMETOOLONG, ESRCH, ...). */
static long read_string(const struct caller *c, unsigned long addr, char *buf, size_t cap) {
  size_t got = 0, chunk = 256; /* most paths are short: copy little first */
  while (got < cap) {
    size_t page_left = 4096 - ((addr + got) & 4095);
    size_t want = page_left < chunk ? page_left : chunk;
    if (want > cap - got) want = cap - got;
    chunk = 4096;
    struct iovec local = {buf + got, want}, remote = {(void *)(addr + got), want};
    ssize_t n = process_vm_readv(c->tid, &local, 1, &remote, 1, 0);
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

static pid_t tgid_of(struct caller *c) {
  if (c->tgid) return c->tgid;
  char name[64], line[256];
  snprintf(name, sizeof name, "/proc/%d/status", c->tid);
  FILE *f = fopen(name, "re");
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "Tgid:", 5)) c->tgid = (pid_t)atoi(line + 5);
  fclose(f);
  return c->tgid ? c->tgid : -1;
}

/* What the caller's descriptor `fd` (AT_FDCWD: its cwd) is, as a path we can trust:
 *   >0  the length of its absolute path in `buf`, checked to name the very same object (a
 *       d_path of a deleted file, of another mount namespace, ... names something else)
 *    0  it is no object with a path (pipe, socket, anonymous inode): no file of the tree
 *   -1  no such descriptor: the call fails (EBADF) without looking anything up
 *   -2  the record must be given up
 * `is_dir` says whether it is a directory. */
static long fd_object(const struct caller *c, int fd, char *buf, size_t cap, int *is_dir) {
  char link[64];
  if (fd == AT_FDCWD) snprintf(link, sizeof link, "/proc/%d/cwd", c->tid);
  else snprintf(link, sizeof link, "/proc/%d/fd/%d", c->tid, fd);
  ssize_t n = readlink(link, buf, cap - 1);
  if (n < 0) return errno == ENOENT && fd != AT_FDCWD ? -1 : -2;
  buf[n] = 0;
  if (n == 0) return -2;
  if (buf[0] != '/') return strchr(buf, ':') ? 0 : -2;
  /* The cwd's path names it unless it was removed: no mount, chroot or setns of the caller
   * went unseen (they give the record up). A descriptor may come from anywhere. */
  static const char DELETED[] = " (deleted)";
  if (fd == AT_FDCWD && !((size_t)n >= sizeof DELETED - 1 && !strcmp(buf + n - (sizeof DELETED - 1), DELETED))) {
    *is_dir = 1;
    return n;
  }
  struct stat obj, named;
  if (stat(link, &obj)) return errno == ENOENT && fd != AT_FDCWD ? -1 : -2;
  if ((stat(buf, &named) || named.st_dev != obj.st_dev || named.st_ino != obj.st_ino) &&
      (lstat(buf, &named) || named.st_dev != obj.st_dev || named.st_ino != obj.st_ino))
    return -2;
  *is_dir = S_ISDIR(obj.st_mode);
  return n;
}

/* Appends component `name` (`len` bytes) to the absolute path `cur`; -1 if too long. */
static int push(char *cur, size_t *len, const char *name, size_t n) {
  if (*len + 1 + n >= PATH_MAX) return -1;
  if (*len > 1) cur[(*len)++] = '/';
  else *len = 1;
  memcpy(cur + *len, name, n);
  *len += n;
  cur[*len] = 0;
  return 0;
}

static void pop(char *cur, size_t *len) {
  while (*len > 1 && cur[*len - 1] != '/') (*len)--;
  if (*len > 1) (*len)--;
  cur[*len] = 0;
}

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

/* Whether the lookup of `full` (absolute) meets no symlink at all, asked of the kernel; then
 * lexical normalization is exactly its resolution. */
static int no_symlinks(const char *full) {
  struct {
    __u64 flags, mode, resolve;
  } how = {O_PATH | O_NOFOLLOW | O_CLOEXEC, 0, 0x04 /* RESOLVE_NO_SYMLINKS */};
  int fd = (int)syscall(SYS_openat2, AT_FDCWD, full, &how, sizeof how);
  if (fd >= 0) {
    close(fd);
    return 1;
  }
  /* ELOOP: a symlink on the way; ENOSYS (before Linux 5.6), anything odd: walk it ourselves.
   * Other errors stop the lookup where it failed, after symlink-free components only. */
  return errno == ENOENT || errno == ENOTDIR || errno == EACCES || errno == ENAMETOOLONG;
}

/* Records what the kernel looks up for `path` when the caller hands it over relative to the
 * directory `base` (a path from fd_object; unused for an absolute path): every directory left
 * with `..` and every symlink crossed (P), the last component itself and, when it is a symlink, what
 * it leads to. Symlinks are resolved with the real filesystem at the call, as the kernel does:
 * `..` after a link goes up from its target; /proc/self and /proc/thread-self name the caller;
 * a magic link (/proc/<pid>/cwd, fd/N, root, exe, map_files/..., /dev/fd/N through /proc/self)
 * leads to the object it names when its path names that same object, else the record is given
 * up. `last` receives the last component unfollowed (a rename's source). 0, or -1 given up. */
static char resolved[PATH_MAX + 1]; /* the object resolve() reached */

static int resolve(struct caller *c, const char *base, const char *path, char *last) {
  static char todo[2 * PATH_MAX + 2], next_todo[2 * PATH_MAX + 2], cur[PATH_MAX + 1], link[PATH_MAX + 1];
  size_t len = 0;
  if (path[0] == '/') snprintf(todo, sizeof todo, "%s", path);
  else if ((size_t)snprintf(todo, sizeof todo, "%s/%s", base, path) >= sizeof todo) return give_up("a path too long to resolve"), -1;
  int walk = !no_symlinks(todo), links = 0;
  resolved[0] = 0;
  strcpy(cur, "/");
  len = 1;
  last[0] = 0;
  char *p = todo;
  for (;;) {
    while (*p == '/') p++;
    if (!*p) break;
    char *end = strchr(p, '/');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char *rest = p + n;
    const char *q = rest;
    while (*q == '/') q++;
    int final = !*q;
    if (n == 1 && p[0] == '.') {
      p = rest;
      continue;
    }
    if (n == 2 && p[0] == '.' && p[1] == '.') {
      if (len > 1) record('P', cur, len);
      pop(cur, &len);
      p = rest;
      continue;
    }
    if (walk && ((n == 4 && !memcmp(p, "self", 4)) || (n == 11 && !memcmp(p, "thread-self", 11)))) {
      struct statfs fs;
      if (!statfs(cur, &fs) && fs.f_type == PROC_SUPER_MAGIC) {
        pid_t tgid = tgid_of(c);
        if (tgid < 0) return give_up("the caller's process could not be named"), -1;
        if (n == 4) snprintf(next_todo, sizeof next_todo, "%d%s", tgid, rest);
        else snprintf(next_todo, sizeof next_todo, "%d/task/%d%s", tgid, c->tid, rest);
        strcpy(todo, next_todo);
        p = todo;
        continue;
      }
    }
    size_t before = len;
    if (push(cur, &len, p, n)) return give_up("a path too long to resolve"), -1;
    if (final && !last[0]) memcpy(last, cur, len + 1);
    p = rest;
    if (!walk) continue;
    struct stat st;
    if (lstat(cur, &st)) break; /* the kernel's lookup fails here too (or creates it) */
    if (!S_ISLNK(st.st_mode)) {
      if (!S_ISDIR(st.st_mode) && !final) break; /* ENOTDIR */
      continue;
    }
    record('P', cur, len);
    if (++links > 40) return give_up("too many symlinks"), -1;
    ssize_t t = readlink(cur, link, sizeof link - 1);
    if (t <= 0) return give_up("a symlink could not be read"), -1;
    link[t] = 0;
    /* Magic links live in /proc. The link's own directory tells: statfs of the link itself would
     * follow it (/dev/fd, a plain link to /proc/self/fd, would pass for one). */
    struct statfs fs;
    char saved = cur[before];
    cur[before > 1 ? before : 1] = 0;
    int in_proc = !statfs(before > 1 ? cur : "/", &fs) && fs.f_type == PROC_SUPER_MAGIC;
    cur[before > 1 ? before : 1] = saved;
    if (in_proc && link[0] == '/') {
      /* A magic link jumps to its object; its text is only a name for it. */
      struct stat obj, named;
      if (stat(cur, &obj) || stat(link, &named) || obj.st_dev != named.st_dev || obj.st_ino != named.st_ino)
        return give_up("a /proc link to an object its path does not name"), -1;
      len = (size_t)t;
      memcpy(cur, link, len + 1);
      continue;
    }
    if (in_proc && strchr(link, ':')) return 0; /* pipe:[..], socket:[..], anon_inode:..: no file */
    if (link[0] == '/') {
      strcpy(cur, "/");
      len = 1;
    } else {
      cur[before] = 0;
      len = before ? before : 1;
      if (len == 1) strcpy(cur, "/");
    }
    if ((size_t)snprintf(next_todo, sizeof next_todo, "%s%s", link, rest) >= sizeof next_todo) return give_up("a path too long to resolve"), -1;
    strcpy(todo, next_todo);
    p = todo;
  }
  record('T', cur, len);
  memcpy(resolved, cur, len + 1);
  return 0;
}

/* An executed file's interpreters, which the kernel opens itself (no syscall of the caller):
 * the `#!` line's (looked up from the caller's cwd, up to the kernel's 4 levels of scripts) and
 * an ELF file's PT_INTERP. `file` is a resolved path. 0, or -1 given up. */
static int record_interpreters(struct caller *c, const char *file, int depth) {
  struct stat st;
  if (depth > 4 || stat(file, &st) || !S_ISREG(st.st_mode)) return 0; /* the exec fails */
  int fd = open(file, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return 0;
  static char buf[256], interp[PATH_MAX + 1], dir[PATH_MAX + 1], last[PATH_MAX + 1];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  interp[0] = 0;
  if (n >= 2 && buf[0] == '#' && buf[1] == '!') {
    buf[n] = 0;
    char *p = buf + 2;
    while (*p == ' ' || *p == '\t') p++;
    size_t k = strcspn(p, " \t\n");
    memcpy(interp, p, k);
    interp[k] = 0;
  } else if (n >= (ssize_t)sizeof(Elf64_Ehdr) && !memcmp(buf, ELFMAG, SELFMAG) && buf[EI_CLASS] == ELFCLASS64) {
    Elf64_Ehdr eh;
    memcpy(&eh, buf, sizeof eh);
    for (unsigned i = 0; i < eh.e_phnum && i < 256; i++) {
      Elf64_Phdr ph;
      if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (Elf64_Off)i * eh.e_phentsize)) != (ssize_t)sizeof ph) break;
      if (ph.p_type != PT_INTERP) continue;
      if (ph.p_filesz == 0 || ph.p_filesz > PATH_MAX) break;
      ssize_t got = pread(fd, interp, ph.p_filesz, (off_t)ph.p_offset);
      interp[got > 0 ? got : 0] = 0;
      interp[ph.p_filesz - 1] = 0;
      depth = 4; /* an ELF interpreter is not a script */
      break;
    }
  }
  close(fd);
  if (!interp[0]) return 0;
  int is_dir = 0;
  if (interp[0] != '/' && fd_object(c, AT_FDCWD, dir, sizeof dir, &is_dir) <= 0)
    return give_up("an interpreter relative to a cwd that could not be named"), -1;
  if (resolve(c, dir, interp, last) < 0) return -1;
  if (!resolved[0]) return 0; /* no file: the exec fails */
  static char next[PATH_MAX + 1];
  memcpy(next, resolved, sizeof next);
  return record_interpreters(c, next, depth + 1);
}

/* A unix socket address: its path (resolved from the cwd like any path), none for another
 * family or an abstract name. -1 when given up. */
static int on_sockaddr(struct caller *c, unsigned long addr, unsigned long len) {
  static char sa[sizeof(struct sockaddr_un) + 1], dir[PATH_MAX + 1], last[PATH_MAX + 1];
  if (!addr || len < sizeof(sa_family_t) + 1) return 0; /* no address, or unnamed: no path */
  if (len > sizeof(struct sockaddr_un)) len = sizeof(struct sockaddr_un); /* the kernel's bound */
  memset(sa, 0, sizeof sa);
  if (read_mem(c, addr, sa, len)) {
    if (call_gone(c)) return 0;
    return give_up("a socket address the recorder could not read"), -1;
  }
  sa_family_t family;
  memcpy(&family, sa, sizeof family);
  const char *path = sa + offsetof(struct sockaddr_un, sun_path);
  if (family != AF_UNIX || !path[0]) return 0;
  int is_dir = 0;
  long d = 0;
  if (path[0] != '/' && (d = fd_object(c, AT_FDCWD, dir, sizeof dir, &is_dir)) <= 0)
    return give_up("a socket path relative to a cwd that could not be named"), -1;
  return resolve(c, dir, path, last);
}

static void on_sockaddrs(struct caller *c, const struct spec *s, const struct seccomp_data *call) {
  if (s->kind == SOCKADDR) {
    on_sockaddr(c, call->args[s->path[0]], call->args[s->path[1]]);
    return;
  }
  unsigned long count = s->path[1] < 0 ? 1 : call->args[s->path[1]];
  if (count > 1024) count = 1024; /* UIO_MAXIOV: the kernel sends no more */
  /* struct msghdr starts with msg_name, msg_namelen; struct mmsghdr is a msghdr and a length. */
  size_t stride = s->path[1] < 0 ? sizeof(struct msghdr) : sizeof(struct mmsghdr);
  for (unsigned long i = 0; i < count; i++) {
    struct msghdr m;
    if (read_mem(c, call->args[s->path[0]] + i * stride, &m, sizeof m)) {
      if (call_gone(c)) return;
      return give_up("a message header the recorder could not read");
    }
    if (on_sockaddr(c, (unsigned long)m.msg_name, m.msg_namelen) < 0) return;
  }
}

/* One notified syscall. Recording more than was accessed is safe; less never happens
 * silently: what cannot be modelled gives the record up. */
static void on_syscall(struct caller *c, const struct seccomp_data *call) {
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
  static char dir[PATH_MAX + 1], rel[PATH_MAX + 1], last[PATH_MAX + 1];
  int is_dir = 0;
  if (s->kind == LIST) {
    long n = fd_object(c, (int)call->args[s->dirfd[0]], dir, sizeof dir, &is_dir);
    if (n == -2) give_up("a listed directory could not be named");
    else if (n > 0 && is_dir) record('L', dir, (size_t)n);
    return;
  }
  if (s->kind == SOCKADDR || s->kind == MSGHDR) return on_sockaddrs(c, s, call);
  if (s->kind == CWD) {
    /* Later relative calls trust the cwd's path (fd_object): the descriptor must name it. */
    if (fd_object(c, (int)call->args[0], dir, sizeof dir, &is_dir) == -2) give_up("a cwd set from a descriptor that could not be named");
    return;
  }
  if (s->kind == OPEN_HOW) {
    /* openat2: RESOLVE_NO_XDEV, _NO_MAGICLINKS, _NO_SYMLINKS, _BENEATH and _CACHED only make
     * the lookup fail where it would otherwise go on; RESOLVE_IN_ROOT changes it. */
    struct {
      __u64 flags, mode, resolve;
    } how;
    if (call->args[3] < sizeof how || read_mem(c, call->args[2], &how, sizeof how)) {
      if (call_gone(c)) return;
      return give_up("an openat2 open_how that could not be read");
    }
    if (how.resolve & ~(__u64)(0x01 | 0x02 | 0x04 | 0x08 | 0x20)) return give_up("openat2 with RESOLVE_IN_ROOT or an unknown resolve flag");
  }
  if (s->kind == RENAME && (call->args[4] & ~(__u64)(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT)))
    return give_up("renameat2 with an unknown flag");
  for (int k = 0; k < 2 && s->path[k] >= 0; k++) {
    unsigned long addr = call->args[s->path[k]];
    long n = 0;
    if (addr || !s->null_is_fd) {
      n = read_string(c, addr, rel, sizeof rel);
      if (n < 0) {
        if (call_gone(c)) return;
        /* EFAULT: a page the kernel may read but we cannot (write-only); EPERM and the like:
         * no memory of the caller is readable here (the start-up probe reports it). */
        return give_up(errno == ENAMETOOLONG ? "a path longer than the kernel takes"
                       : errno == EFAULT     ? "a path the recorder could not read"
                                             : "the plugin's memory could not be read");
      }
    }
    int dirfd = s->dirfd[k] < 0 ? AT_FDCWD : (int)call->args[s->dirfd[k]];
    if (n == 0 || rel[0] != '/') {
      long d = fd_object(c, dirfd, dir, sizeof dir, &is_dir);
      if (d == -2) return give_up("a path relative to a directory that could not be named");
      if (d <= 0) continue; /* EBADF, or no file: the call looks nothing up */
      if (n == 0) {
        /* AT_EMPTY_PATH (or a NULL path where that means the descriptor): the object itself. */
        record('T', dir, (size_t)d);
        if (s->moves) record('M', dir, (size_t)d);
        if (s->nr == SYS_execveat && record_interpreters(c, dir, 0) < 0) return;
        continue;
      }
      if (!is_dir) continue; /* ENOTDIR */
    }
    if (resolve(c, dir, rel, last) < 0) return;
    if ((s->nr == SYS_execve || s->nr == SYS_execveat) && record_interpreters(c, resolved, 0) < 0) return;
    /* Both ends of a rename: a directory or symlink renamed over or away changes what later
     * lookups (and a concurrent one) resolve to. */
    if (s->moves && last[0]) record('M', last, strlen(last));
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
  if (recording) {
    struct caller c = {(pid_t)req.pid, 0, listener, req.id};
    on_syscall(&c, &req.data);
  }
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

/* The command's side, sharing our descriptor table until its exec (CLONE_FILES): filter, tell
 * the listener's number (it is ours too), wait for the go, exec (which gives it a table of its
 * own, without the close-on-exec listener and sockets). It closes nothing before: that would
 * close ours. Sending the listener instead would need sendmsg, which the filter notifies to the
 * listener not received yet; taking it with pidfd_getfd needs CAP_SYS_PTRACE under the usual
 * container seccomp profiles. Failures before the exec say "cmp-trace: exec:" so that the caller
 * runs the command without us. */
static void start_command(int sock, char **argv) {
  int listener = install_filter();
  int err = errno;
  /* Always answered: our end of the socket stays open in the shared table, so the other side
   * would not see our exit. */
  if (write(sock, &listener, sizeof listener) != sizeof listener || listener < 0) {
    fprintf(stderr, "cmp-trace: exec: seccomp listener: %s\n", strerror(listener < 0 ? err : errno));
    _exit(127);
  }
  char go;
  if (read(sock, &go, 1) != 1) _exit(127);
  execv(argv[0], argv + 1);
  fprintf(stderr, "cmp-trace: exec: %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

static const int PASSED_ON[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE};

/* --decisions: the syscall table as this build decides it, one "NAME NUMBER DECISION" a line
 * (test/unit/trace/syscall-table.test.ts checks it against the kernel's table). Every number
 * from the last line's on, and every call of another architecture, gives the record up. */
static int print_decisions(void) {
  static const char *const KIND[] = {"path", "openat2", "renameat2", "list", "cwd", "sockaddr", "msghdr", "give-up"};
  for (size_t i = 0; i < NSPECS; i++)
    printf("%s %ld %s\n", SPECS[i].name, SPECS[i].nr, SPECS[i].nr == SYS_io_uring_setup ? "refuse" : KIND[SPECS[i].kind]);
  printf("* %d give-up\n", FIRST_UNKNOWN_NR);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--decisions")) return print_decisions();
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
  static char obuf[1 << 16];
  setvbuf(out, obuf, _IOFBF, sizeof obuf);
  max_paths = atol(argv[3]);
  fputs(FORMAT "\n", out);

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
  pid_t root = (pid_t)syscall(SYS_clone, CLONE_FILES | SIGCHLD, 0, 0, 0, 0);
  if (root < 0) {
    perror("cmp-trace: fork");
    return 2;
  }
  if (root == 0) {
    sigprocmask(SIG_UNBLOCK, &chld, NULL);
    /* If the tracer dies, its notifications would fail with ENOSYS: end the command too. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    start_command(sp[1], argv + 4);
  }
  /* Plugin code runs as our uid: non-dumpable, it can neither ptrace us nor open our /proc
   * files (mem, environ, fd), so it cannot alter the record or the listener. It can still
   * signal us; killing us only loses its own run's record (no end mark). */
  prctl(PR_SET_DUMPABLE, 0);
  /* The group's SIGTERM/SIGINT reach the command too; the tracer outlives it to finish the
   * record, and exits as the command did. */
  for (size_t i = 0; i < sizeof PASSED_ON / sizeof PASSED_ON[0]; i++) signal(PASSED_ON[i], SIG_IGN);

  int listener = -1;
  if (read(sp[0], &listener, sizeof listener) != sizeof listener) listener = -1;
  if (listener >= 0) ioctl(listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, (__u64)SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);
  if (!strcmp(cpus, "one")) bind_one_cpu(root);
  if (listener >= 0 && write(sp[0], "g", 1) != 1) give_up("the command did not start");
  /* Both ends stay open: until its exec, the command reads the go from the shared table. */
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
