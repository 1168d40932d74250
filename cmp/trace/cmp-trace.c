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
 * this process as user notifications (SECCOMP_RET_USER_NOTIF); it reads their path arguments.
 * A call let continue makes the kernel read its path again, which another thread (or a vfork
 * parent's thread, or another process through a shared mapping) could have rewritten in
 * between: so the common calls (open, stat, access, readlink, mkdir, unlink, rename, ...) are
 * performed here on the recorded path and only their result reaches the caller (an opened file
 * through SECCOMP_IOCTL_NOTIF_ADDFD, Linux 5.14); the rest (exec, chdir, unix socket addresses,
 * ...) continue only where no other task can write that memory, else the record is given up
 * (enum how, could_change). No ptrace: nothing else stops, and signals and exits are the
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
#include <dirent.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
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
  CLONE,       /* clone with CLONE_VM but neither CLONE_THREAD nor CLONE_VFORK (install_filter) */
  UNTRACKABLE, /* gives the record up */
  UNIX_SOCKET, /* socket, socketpair: notified only for AF_UNIX (install_filter); see unix_made */
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
    /* A process sharing memory with another that runs could rewrite a path the kernel reads
     * again (could_change): clone3 is refused (serve), clone notified only with CLONE_VM and
     * neither CLONE_THREAD nor CLONE_VFORK. */
    {SYS_clone, "clone", CLONE, {-1, -1}, {-1, -1}, 0, 0}, U(clone3),
    /* A unix socket in a descriptor table lets a thread swap it onto an inet descriptor as
     * connect goes on (see unix_made); another process's descriptor could be one. */
    {SYS_socket, "socket", UNIX_SOCKET, {-1, -1}, {-1, -1}, 0, 0},
    {SYS_socketpair, "socketpair", UNIX_SOCKET, {-1, -1}, {-1, -1}, 0, 0}, U(pidfd_getfd),
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
  /* The caller's memory the kernel reads again if the call continues: path strings, socket
   * addresses and message headers (see could_change). More than MAX_RANGES: "could". */
  unsigned long range[8][2];
  int nranges;
};
#define MAX_RANGES 8

static void note_range(struct caller *c, unsigned long addr, unsigned long len) {
  if (c->nranges < MAX_RANGES) {
    c->range[c->nranges][0] = addr;
    c->range[c->nranges][1] = len;
  }
  c->nranges++;
}

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
/* The O_PATH descriptor no_symlinks() opened, of the object a symlink-free path names (-1 if
 * none): the calls performed here use it rather than looking the path up once more. */
static int plain_fd = -1;

static int no_symlinks(const char *full) {
  struct {
    __u64 flags, mode, resolve;
  } how = {O_PATH | O_NOFOLLOW | O_CLOEXEC, 0, 0x04 /* RESOLVE_NO_SYMLINKS */};
  int fd = (int)syscall(SYS_openat2, AT_FDCWD, full, &how, sizeof how);
  if (fd >= 0) {
    /* With O_PATH | O_NOFOLLOW the lookup succeeds on a last component that is a symlink:
     * that one is followed by most calls, so it needs the walk. */
    struct stat st;
    int plain = !fstat(fd, &st) && !S_ISLNK(st.st_mode);
    if (plain) plain_fd = fd;
    else close(fd);
    return plain;
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
/* The path the recorder itself hands to a call it performs (see answer()): the directory the
 * kernel's lookup reached, canonical, then the rest of the caller's path from the component it
 * was at (the last one, or the one where the lookup fails), so that the call applies its own
 * rules there (following the last symlink or not, a trailing slash). "" when there is none
 * that would mean the same thing here (/proc/self as the last component names this process). */
static char lookup[2 * PATH_MAX + 2];

static void set_lookup(const char *dir, size_t len, const char *rest) {
  if (lookup[0]) return;
  if ((size_t)snprintf(lookup, sizeof lookup, "%.*s/%s", (int)len, dir, rest) >= sizeof lookup) lookup[0] = 0;
  if (len == 1) memmove(lookup, lookup + 1, strlen(lookup)); /* "/" + "/x" */
}

static int resolve(struct caller *c, const char *base, const char *path, char *last) {
  static char todo[2 * PATH_MAX + 2], next_todo[2 * PATH_MAX + 2], cur[PATH_MAX + 1], link[PATH_MAX + 1];
  size_t len = 0;
  if (path[0] == '/') snprintf(todo, sizeof todo, "%s", path);
  else if ((size_t)snprintf(todo, sizeof todo, "%s/%s", base, path) >= sizeof todo) return give_up("a path too long to resolve"), -1;
  if (plain_fd >= 0) close(plain_fd);
  plain_fd = -1;
  int walk = !no_symlinks(todo), links = 0;
  resolved[0] = 0;
  lookup[0] = 0;
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
    if (final) set_lookup(cur, len, p);
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
        if (final) strcpy(lookup, "\1"); /* set, and unusable */
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
    char *comp = p;
    if (push(cur, &len, p, n)) return give_up("a path too long to resolve"), -1;
    if (final && !last[0]) memcpy(last, cur, len + 1);
    p = rest;
    if (!walk) continue;
    struct stat st;
    if (lstat(cur, &st) || (!S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode) && !final)) {
      /* the kernel's lookup fails here too (ENOENT, ENOTDIR), or creates the last component */
      set_lookup(cur, before, comp);
      break;
    }
    if (!S_ISLNK(st.st_mode)) continue;
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
    if (in_proc && strchr(link, ':')) { /* pipe:[..], socket:[..], anon_inode:..: no file */
      set_lookup(cur, before, comp);
      return 0;
    }
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
  if (!lookup[0]) memcpy(lookup, cur, len + 1);
  if (lookup[0] == '\1') lookup[0] = 0;
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
  note_range(c, addr, len);
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

/* Whether the caller's descriptor `fd` is a unix socket (only those look an address up as a
 * path); 1 when unsure. Sockets name their protocol in an extended attribute. */
static int unix_socket(const struct caller *c, int fd) {
  char name[64], proto[32];
  snprintf(name, sizeof name, "/proc/%d/fd/%d", c->tid, fd);
  ssize_t n = getxattr(name, "system.sockprotoname", proto, sizeof proto - 1);
  if (n < 0) return !(errno == ENOENT || errno == ENODATA || errno == EOPNOTSUPP); /* EBADF, ENOTSOCK */
  proto[n] = 0;
  return !strncmp(proto, "UNIX", 4);
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
    note_range(c, call->args[s->path[0]] + i * stride, sizeof m);
    if (read_mem(c, call->args[s->path[0]] + i * stride, &m, sizeof m)) {
      if (call_gone(c)) return;
      return give_up("a message header the recorder could not read");
    }
    if (on_sockaddr(c, (unsigned long)m.msg_name, m.msg_namelen) < 0) return;
  }
}

/* ---- what a rename or link may move ---- */

/* Directories this run made (mkdir performed here), by device and inode. A directory older than
 * the run, or a symlink, moved onto a path between the recorder's resolution of a call and the
 * kernel's own lookup (a continued call) could lead that lookup somewhere unrecorded through
 * links made before the run (links the run makes give the record up); a directory the run made
 * holds only what the run made or moved in under these same rules. */
#define MADE_SLOTS (1 << 14)
static struct { dev_t dev; ino_t ino; } made[MADE_SLOTS];
static size_t nmade;

static size_t made_slot(dev_t dev, ino_t ino) {
  size_t i = (size_t)((ino * 0x9e3779b97f4a7c15ull) ^ dev) & (MADE_SLOTS - 1);
  while (made[i].ino && (made[i].dev != dev || made[i].ino != ino)) i = (i + 1) & (MADE_SLOTS - 1);
  return i;
}

static void note_made_dir(const char *path) {
  struct stat st;
  if (lstat(path, &st) || !S_ISDIR(st.st_mode) || nmade >= MADE_SLOTS / 2) return;
  size_t i = made_slot(st.st_dev, st.st_ino);
  if (!made[i].ino) made[i].dev = st.st_dev, made[i].ino = st.st_ino, nmade++;
}

/* Whether the object at `path` (not followed) may be renamed or linked without giving up. */
static int may_move(const char *path, int is_link) {
  struct stat st;
  if (lstat(path, &st)) return 1; /* nothing there: the call fails or moves nothing */
  if (S_ISLNK(st.st_mode)) return 0;
  if (!S_ISDIR(st.st_mode) || is_link) return 1;
  return made[made_slot(st.st_dev, st.st_ino)].ino != 0;
}

/* ---- answering: the recorder performs the call itself, or lets the kernel run it ---- */

/* How a recorded call is answered. The kernel reads a continued call's path from the caller's
 * memory again, after we did: another thread, a vfork parent's thread or a shared mapping can
 * rewrite it in between, and the kernel would act on a path never recorded. So the calls that
 * almost every run makes are performed here, on the paths we read and recorded, and only their
 * result reaches the caller; the others continue only where that memory cannot change. */
enum how {
  KERNEL,   /* the kernel runs it (see could_change) */
  OPEN,     /* open, creat, openat, openat2: opened here, the descriptor installed in the caller */
  STAT,     /* stat, lstat, newfstatat, statx, statfs: here, the result written into the caller */
  READLINK, /* readlink, readlinkat: here, the link text written into the caller */
  SAME,     /* the same syscall here on the recorded paths: its other arguments are values */
};

static enum how how_of(long nr) {
  switch (nr) {
#ifdef SYS_open
  case SYS_open: case SYS_creat: return OPEN;
  case SYS_stat: case SYS_lstat: return STAT;
  case SYS_readlink: return READLINK;
  case SYS_access: case SYS_mkdir: case SYS_rmdir: case SYS_unlink: case SYS_rename: case SYS_link:
  case SYS_chmod: case SYS_chown: case SYS_lchown: return SAME;
#endif
  case SYS_openat: case SYS_openat2: return OPEN;
  case SYS_newfstatat: case SYS_statx: case SYS_statfs: return STAT;
  case SYS_readlinkat: return READLINK;
  case SYS_faccessat: case SYS_faccessat2: case SYS_mkdirat: case SYS_unlinkat: case SYS_renameat:
  case SYS_renameat2: case SYS_linkat: case SYS_fchmodat: case SYS_fchmodat2: case SYS_fchownat:
  case SYS_truncate: return SAME;
  default: return KERNEL;
  }
}

enum answer { CONTINUE, ANSWERED, INSTALLED };

static pid_t root;          /* the command */
static int can_install = 1; /* SECCOMP_ADDFD_FLAG_SEND (Linux 5.14) */
static int killable;        /* SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19) */

/* Whether performing this call here could happen twice: without WAIT_KILLABLE_RECV a signal
 * interrupts the waiting caller and the kernel restarts its call, which we may already have
 * performed. Repeating an open without O_EXCL, a stat, chmod or truncate changes nothing; these
 * would fail the second time (EEXIST, ENOENT), so they are left to the kernel. */
static int performed_twice(long nr, __u64 open_flags) {
  if (killable) return 0;
  switch (nr) {
#ifdef SYS_open
  case SYS_mkdir: case SYS_rmdir: case SYS_unlink: case SYS_rename: case SYS_link: return 1;
  case SYS_open: case SYS_creat:
#endif
  case SYS_openat: case SYS_openat2: return (open_flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL);
  case SYS_mkdirat: case SYS_unlinkat: case SYS_renameat: case SYS_renameat2: case SYS_linkat: return 1;
  default: return 0;
  }
}
static int self_fds = -1;   /* our /proc/self/fd, to reopen what we looked up with O_PATH */

/* `ppid`, thread count and controlling terminal of task `id` (/proc/<id>/stat); -1 if unknown. */
static int task_stat3(pid_t id, pid_t *ppid, int *threads, int *tty) {
  char name[64], buf[1024];
  snprintf(name, sizeof name, "/proc/%d/stat", id);
  int fd = open(name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* after the name: state ppid ... num_threads (field 20) */
  long threads_l;
  int pp, tty_nr;
  if (!p || sscanf(p + 1, " %*c %d %*d %*d %d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %ld", &pp, &tty_nr, &threads_l) != 3) return -1;
  *ppid = (pid_t)pp;
  *threads = (int)threads_l;
  if (tty) *tty = tty_nr;
  return 0;
}

static int task_stat(pid_t id, pid_t *ppid, int *threads) {
  return task_stat3(id, ppid, threads, NULL);
}

#ifndef KCMP_VM
#define KCMP_VM 1
#endif

/* Whether process `p` shares its memory with its parent `ppid` (a vfork child before its exec);
 * 1 when unsure. kcmp tells; the usual container seccomp profiles allow it only with
 * CAP_SYS_PTRACE, so else: one of the parent's threads waits in vfork (its /proc syscall file
 * shows the call it blocks in), which it does for as long as its child shares its memory. */
static int shares_memory(pid_t p, pid_t ppid) {
  long same = syscall(SYS_kcmp, p, ppid, KCMP_VM, 0, 0);
  if (same >= 0) return same == 0;
  char name[320], line[256];
  snprintf(name, sizeof name, "/proc/%d/task", ppid);
  DIR *d = opendir(name);
  if (!d) return 1;
  int shares = 0;
  struct dirent *e;
  while (!shares && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(name, sizeof name, "/proc/%d/task/%s/syscall", ppid, e->d_name);
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, line, sizeof line - 1);
    if (fd >= 0) close(fd);
    if (n <= 0) {
      shares = 1;
      continue;
    }
    line[n] = 0;
    char *rest;
    long nr = strtol(line, &rest, 10);
    unsigned long flags = strtoul(rest, NULL, 16);
#ifdef SYS_vfork
    if (nr == SYS_vfork) shares = 1;
#endif
    if (nr == SYS_clone && (flags & CLONE_VFORK)) shares = 1;
  }
  closedir(d);
  return shares;
}

/* Whether the caller's memory that a continued call makes the kernel read again (c->range)
 * could change before it does. Only the caller's own thread may write it: its process has one
 * thread, and no other process shares its memory except vfork parents, each with one thread
 * (suspended until the child execs; clone with CLONE_VM otherwise gives the record up, see
 * install_filter). And no other process may write those pages: private anonymous memory only,
 * not a shared or file mapping (/proc/<pid>/pagemap). Whatever we cannot tell counts as could. */
static int could_change(struct caller *c) {
  if (c->nranges > MAX_RANGES) return 1;
  pid_t p = c->tid, ppid;
  int threads;
  if (task_stat(p, &ppid, &threads) || threads != 1) return 1;
  for (int depth = 0;; depth++) {
    if (ppid == getpid()) {
      if (p == root) break;
      return 1; /* an orphan: who shares its memory is not known here */
    }
    if (!shares_memory(p, ppid)) break; /* its own memory */
    if (depth > 16) return 1;
    pid_t pp;
    if (task_stat(ppid, &pp, &threads) || threads != 1) return 1;
    p = ppid;
    ppid = pp;
  }
  char name[64];
  snprintf(name, sizeof name, "/proc/%d/pagemap", c->tid);
  int fd = open(name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  int could = 0;
  for (int i = 0; i < c->nranges && !could; i++) {
    unsigned long first = c->range[i][0] / 4096, end = (c->range[i][0] + c->range[i][1] + 4095) / 4096;
    for (unsigned long page = first; page < end && !could; page++) {
      uint64_t e;
      /* bit 63 present, 62 swapped, 61 a file page or shared anonymous memory */
      if (pread(fd, &e, sizeof e, (off_t)(page * 8)) != (ssize_t)sizeof e) could = 1;
      else if ((e >> 61 & 1) || !(e >> 62 & 3)) could = 1;
    }
  }
  close(fd);
  return could;
}

/* The caller's umask (fs state its threads share), for the calls that create here. */
static int umask_of(const struct caller *c) {
  char name[64], line[128];
  snprintf(name, sizeof name, "/proc/%d/status", c->tid);
  FILE *f = fopen(name, "re");
  int mask = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Umask:", 6)) {
      mask = (int)strtol(line + 6, NULL, 8);
      break;
    }
  if (f) fclose(f);
  return mask;
}

static int write_mem(const struct caller *c, unsigned long addr, const void *buf, size_t n) {
  struct iovec local = {(void *)buf, n}, remote = {(void *)addr, n};
  ssize_t put = process_vm_writev(c->tid, &local, 1, &remote, 1, 0);
  if (put == (ssize_t)n) return 0;
  if (put >= 0) errno = EFAULT;
  return -1;
}

/* Install our descriptor `fd` as the call's result; the kernel answers the call with it. */
static enum answer install(struct caller *c, int fd, int cloexec, struct seccomp_notif_resp *resp) {
  struct seccomp_notif_addfd add = {c->id, SECCOMP_ADDFD_FLAG_SEND, (__u32)fd, 0, cloexec ? O_CLOEXEC : 0};
  int r = ioctl(c->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add), err = errno;
  close(fd);
  if (r >= 0 || err == ENOENT) return INSTALLED; /* ENOENT: the call is gone */
  resp->error = -err; /* EMFILE: the caller's table is full */
  return ANSWERED;
}

static enum answer fail(struct seccomp_notif_resp *resp, int err) {
  resp->error = -err;
  return ANSWERED;
}

/* O_CREAT, or O_TMPFILE's own bit (O_TMPFILE includes O_DIRECTORY): the calls that create */
#define CREATES (O_CREAT | 020000000)
#define VALID_OPEN (O_ACCMODE | O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC | O_APPEND | O_NONBLOCK | O_SYNC | \
                    O_ASYNC | O_DIRECT | O_LARGEFILE | O_DIRECTORY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC | O_PATH | O_TMPFILE)

/* open, or openat2 with `resolve` flags relative to `dirfd` */
static int open_at(int dirfd, const char *path, int flags, mode_t mode, __u64 resolve) {
  if (!resolve) return openat(dirfd, path, flags, mode);
  struct {
    __u64 flags, mode, resolve;
  } how = {(__u64)(unsigned)flags, flags & CREATES ? mode : 0, resolve};
  return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* Opens `path` for the caller as its open would, and installs the descriptor. The object is
 * first looked up with O_PATH (no side effect, never blocks) and then reopened through that
 * very descriptor, so what we typed is what we open. What would block or act on the caller's
 * context (a FIFO read that waits for a writer, a terminal, other devices) is not done here: the
 * record is given up and the call continues. */
static enum answer answer_open(struct caller *c, int dirfd, const char *path, __u64 flags, __u64 mode, __u64 resolve, struct seccomp_notif_resp *resp) {
  int cloexec = (flags & O_CLOEXEC) != 0;
  /* SECCOMP_IOCTL_NOTIF_ADDFD takes no O_PATH descriptor (fget skips them) */
  if (flags & O_PATH) return give_up("an O_PATH open, which the recorder cannot hand over"), CONTINUE;
  int excl = (flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL);
  int umask_set = -1;
  if (flags & CREATES) {
    int mask = umask_of(c);
    if (mask < 0) return give_up("the plugin's umask could not be read"), CONTINUE;
    umask_set = (int)umask((mode_t)mask);
  }
  int fd = -1, err = 0, pfd;
  if (dirfd == AT_FDCWD && plain_fd >= 0) { /* the object `path` names, symlink-free */
    pfd = plain_fd;
    plain_fd = -1;
    struct stat st;
    if ((flags & O_DIRECTORY) && !fstat(pfd, &st) && !S_ISDIR(st.st_mode)) {
      close(pfd);
      pfd = -1;
      errno = ENOTDIR;
    }
  } else pfd = open_at(dirfd, path, O_PATH | O_CLOEXEC | (int)(flags & (O_NOFOLLOW | O_DIRECTORY)) | (excl ? O_NOFOLLOW : 0), 0, resolve);
  if (pfd < 0) {
    err = errno;
    if (err == ENOENT && (flags & O_CREAT)) {
      /* O_NONBLOCK: should something else have appeared meanwhile, we do not wait on it */
      fd = open_at(dirfd, path, (int)flags | O_CLOEXEC | O_NONBLOCK, (mode_t)mode, resolve);
      err = errno;
      if (fd >= 0 && !(flags & O_NONBLOCK)) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    }
  } else {
    struct stat st;
    char name[16];
    snprintf(name, sizeof name, "%d", pfd);
    int reopen = (int)(flags & ~(__u64)(O_CREAT | O_EXCL | O_NOFOLLOW)) | O_CLOEXEC;
    if (fstat(pfd, &st)) err = errno;
    else if (excl) err = EEXIST;
    else if (S_ISLNK(st.st_mode)) err = ELOOP; /* O_NOFOLLOW */
    else if ((flags & O_CREAT) && S_ISDIR(st.st_mode)) err = EISDIR;
    else if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISSOCK(st.st_mode) || (S_ISCHR(st.st_mode) && major(st.st_rdev) == 1)) {
      /* files, directories, sockets (ENXIO), and /dev/null, zero, full, random, urandom */
      fd = openat(self_fds, name, reopen, (mode_t)mode);
      err = errno;
    } else if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(5, 0)) {
      /* /dev/tty is the caller's controlling terminal: without one (a server's commands), ENXIO */
      pid_t ppid;
      int threads, tty = -1;
      err = !task_stat3(c->tid, &ppid, &threads, &tty) && tty == 0 ? ENXIO : -1;
    } else if (S_ISFIFO(st.st_mode) && (flags & O_ACCMODE) != O_RDONLY) {
      /* a pipe or FIFO opened for writing: at once if it has a reader, else (ENXIO) it would wait */
      fd = openat(self_fds, name, reopen | O_NONBLOCK);
      err = errno;
      if (fd >= 0 && !(flags & O_NONBLOCK)) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      else if (fd < 0 && err == ENXIO && !(flags & O_NONBLOCK)) err = -1;
    } else if (S_ISFIFO(st.st_mode) && (flags & O_NONBLOCK)) {
      fd = openat(self_fds, name, reopen);
      err = errno;
    } else err = -1;
    close(pfd);
  }
  if (umask_set >= 0) umask((mode_t)umask_set);
  if (fd >= 0) return install(c, fd, cloexec, resp);
  if (err == -1) return give_up("the plugin opened a device or a FIFO the recorder cannot open for it"), CONTINUE;
  return fail(resp, err);
}

/* stat, lstat, newfstatat, statx, statfs on `path`; `fd_path`: the path was empty and names a descriptor
 * (or the cwd) through /proc/<tid>/fd/N (cwd), which leads to the object itself. */
static enum answer answer_stat(struct caller *c, const struct seccomp_data *call, const char *path, int fd_path, struct seccomp_notif_resp *resp) {
  int flags = 0;
  unsigned long buf;
  switch (call->nr) {
#ifdef SYS_open
  case SYS_stat: buf = call->args[1]; break;
  case SYS_lstat: buf = call->args[1]; flags = AT_SYMLINK_NOFOLLOW; break;
#endif
  case SYS_newfstatat: buf = call->args[2]; flags = (int)call->args[3]; break;
  case SYS_statfs: buf = call->args[1]; break;
  default: buf = call->args[4]; flags = (int)call->args[2]; break; /* statx */
  }
  if (fd_path) {
    if (!(flags & AT_EMPTY_PATH)) return fail(resp, ENOENT);
    flags &= ~(AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
  }
  /* the object a symlink-free path names is at hand (no_symlinks) */
  int at = AT_FDCWD;
  if (!fd_path && plain_fd >= 0) at = plain_fd, path = "", flags |= AT_EMPTY_PATH;
  int r;
  if (call->nr == SYS_statfs) {
    struct statfs sfs;
    if (at != AT_FDCWD ? fstatfs(at, &sfs) : statfs(path, &sfs)) return fail(resp, errno);
    r = write_mem(c, buf, &sfs, sizeof sfs);
  } else if (call->nr == SYS_statx) {
    struct statx stx;
    if (statx(at, path, flags, (unsigned)call->args[3], &stx)) return fail(resp, fd_path && errno == ENOENT ? EBADF : errno);
    r = write_mem(c, buf, &stx, sizeof stx);
  } else {
    struct stat st;
    if (fstatat(at, path, &st, flags)) return fail(resp, fd_path && errno == ENOENT ? EBADF : errno);
    r = write_mem(c, buf, &st, sizeof st);
  }
  if (r && errno == EFAULT) return fail(resp, EFAULT);
  if (r) return give_up("the plugin's memory could not be written"), CONTINUE;
  return ANSWERED;
}

static enum answer answer_readlink(struct caller *c, const struct seccomp_data *call, const char *path, struct seccomp_notif_resp *resp) {
  static char text[2 * PATH_MAX];
  int at = call->nr == SYS_readlinkat;
  unsigned long buf = call->args[1 + at];
  long size = (long)(int)call->args[2 + at];
  if (size <= 0) return fail(resp, EINVAL);
  ssize_t n = readlink(path, text, (size_t)size < sizeof text ? (size_t)size : sizeof text);
  if (n < 0) return fail(resp, errno);
  if (write_mem(c, buf, text, (size_t)n)) {
    if (errno == EFAULT) return fail(resp, EFAULT);
    return give_up("the plugin's memory could not be written"), CONTINUE;
  }
  resp->val = n;
  return ANSWERED;
}

/* Whether a unix socket can be in a traced descriptor table: one was inherited (the command's
 * stdio are pipes under cmp-reap, sockets when Node spawns it directly) or made (socket,
 * socketpair; another way to get one needs one first, or pidfd_getfd, which gives up). RISKY:
 * none yet, but a socket call went on whose descriptor a thread could have swapped. */
static enum { NONE, RISKY, MADE } unix_made;

/* Any unix socket among our descriptors (inherited by the command); called before we make ours. */
static int inherits_unix_socket(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return 1;
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    int fd = atoi(e->d_name), domain = 0;
    socklen_t n = sizeof domain;
    if (e->d_name[0] != '.' && fd != dirfd(d) && !getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &n)) found = domain == AF_UNIX;
  }
  closedir(d);
  return found;
}

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* connect or bind of an inet socket whose address another task could rewrite: performed here,
 * on the socket the caller's descriptor holds now (pidfd_getfd, Linux 5.6) and the address as
 * read now, so that no unix socket swapped onto the descriptor meanwhile looks up a path. What
 * cannot be done so (a blocking stream connect would hold the recorder; other families bind
 * by the caller's pid) gives the record up and continues. */
static enum answer answer_socket(struct caller *c, const struct seccomp_data *call, struct seccomp_notif_resp *resp) {
  static unsigned char sa[sizeof(struct sockaddr_storage)];
  unsigned long len = call->args[2];
  if (len > sizeof sa) return fail(resp, EINVAL); /* the kernel's bound */
  if (read_mem(c, call->args[1], sa, len)) {
    if (call_gone(c)) return CONTINUE;
    return give_up("a socket address the recorder could not read"), CONTINUE;
  }
  pid_t tgid = tgid_of(c);
  int pidfd = tgid < 0 ? -1 : (int)syscall(SYS_pidfd_open, tgid, 0);
  int fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, (int)call->args[0], 0);
  if (pidfd >= 0) close(pidfd);
  if (fd < 0) return give_up("a socket the recorder could not take to connect or bind it"), CONTINUE;
  /* the caller's own table (a thread may have unshared its own) holds that very socket */
  char name[64];
  snprintf(name, sizeof name, "/proc/%d/fd/%d", c->tid, (int)call->args[0]);
  struct stat mine, theirs;
  int domain = 0, type = 0, flags = fcntl(fd, F_GETFL);
  socklen_t n = sizeof domain;
  int ok = !fstat(fd, &mine) && !stat(name, &theirs) && mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino &&
           !getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &n) && (n = sizeof type, !getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &n)) &&
           (domain == AF_INET || domain == AF_INET6) && flags >= 0 &&
           (call->nr == SYS_bind || type != SOCK_STREAM || (flags & O_NONBLOCK));
  if (!ok) {
    close(fd);
    return give_up("a connect or bind the recorder could not perform, its address another task could rewrite"), CONTINUE;
  }
  int r = call->nr == SYS_connect ? connect(fd, (struct sockaddr *)sa, (socklen_t)len) : bind(fd, (struct sockaddr *)sa, (socklen_t)len);
  int err = errno;
  close(fd);
  if (r < 0) return fail(resp, err);
  resp->val = 0;
  return ANSWERED;
}

/* One notified syscall: recorded (recording more than was accessed is safe; less never
 * happens silently: what cannot be modelled gives the record up), then answered here or let
 * continue (see enum how). */
static enum answer on_syscall(struct caller *c, const struct seccomp_data *call, struct seccomp_notif_resp *resp) {
  if (call->arch != NATIVE_ARCH) return give_up("a syscall of another architecture"), CONTINUE;
  const struct spec *s = NULL;
  for (size_t i = 0; i < NSPECS; i++)
    if (SPECS[i].nr == call->nr) s = &SPECS[i];
  if (!s) return give_up("a syscall unknown to cmp-trace"), CONTINUE;
  if (s->kind == UNTRACKABLE) {
    static char why[64];
    snprintf(why, sizeof why, "the plugin called %s", s->name);
    return give_up(why), CONTINUE;
  }
  static char dir[PATH_MAX + 1], rel[PATH_MAX + 1], last[PATH_MAX + 1], paths[2][2 * PATH_MAX + 2];
  int is_dir = 0, fd_path[2] = {0, 0}, bad = 0;
  if (s->kind == LIST) {
    long n = fd_object(c, (int)call->args[s->dirfd[0]], dir, sizeof dir, &is_dir);
    if (n == -2) give_up("a listed directory could not be named");
    else if (n > 0 && is_dir) record('L', dir, (size_t)n);
    return CONTINUE;
  }
  if (s->kind == CLONE) return give_up("a process sharing memory with its parent (clone with CLONE_VM)"), CONTINUE;
  if (s->kind == UNIX_SOCKET) {
    if (unix_made == RISKY) give_up("a unix socket made after a socket call whose descriptor it could have taken");
    unix_made = MADE;
    return CONTINUE;
  }
  if (s->kind == SOCKADDR || s->kind == MSGHDR) {
    int is_unix = unix_socket(c, (int)call->args[0]);
    /* A unix address is recorded whatever the descriptor is now: another task sharing the
     * descriptor table could swap a unix socket onto it before the kernel runs the call. */
    on_sockaddrs(c, s, call);
    if (reason || !c->nranges || !could_change(c)) return CONTINUE;
    /* The address (or header) could be rewritten before the kernel reads it again. */
    if (is_unix) return give_up("a socket address another task could rewrite as the kernel reads it"), CONTINUE;
    /* Not a unix socket now: no path is looked up, unless at the same moment another task
     * swaps a unix socket onto the descriptor and rewrites the address. With none made yet
     * there is none to swap (and making one later gives up); else connect and bind are
     * performed here, the rest gives up. */
    if (unix_made != MADE) {
      unix_made = RISKY;
      return CONTINUE;
    }
    if (s->nr == SYS_connect || s->nr == SYS_bind) return answer_socket(c, call, resp);
    return give_up("a socket message whose address another task could rewrite, on a descriptor it could swap"), CONTINUE;
  }
  if (s->kind == CWD) {
    /* Later relative calls trust the cwd's path (fd_object): the descriptor must name it. */
    if (fd_object(c, (int)call->args[0], dir, sizeof dir, &is_dir) == -2) give_up("a cwd set from a descriptor that could not be named");
    return CONTINUE;
  }
  struct {
    __u64 flags, mode, resolve;
  } how = {0, 0, 0};
  if (s->kind == OPEN_HOW) {
    /* openat2: RESOLVE_NO_XDEV, _NO_MAGICLINKS, _NO_SYMLINKS, _BENEATH and _CACHED only make
     * the lookup fail where it would otherwise go on; RESOLVE_IN_ROOT changes it. */
    if (call->args[3] < sizeof how || read_mem(c, call->args[2], &how, sizeof how)) {
      if (call_gone(c)) return CONTINUE;
      return give_up("an openat2 open_how that could not be read"), CONTINUE;
    }
    if (how.resolve & ~(__u64)(0x01 | 0x02 | 0x04 | 0x08 | 0x20)) return give_up("openat2 with RESOLVE_IN_ROOT or an unknown resolve flag"), CONTINUE;
  }
  if (s->kind == RENAME && (call->args[4] & ~(__u64)(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT)))
    return give_up("renameat2 with an unknown flag"), CONTINUE;
  for (int k = 0; k < 2 && s->path[k] >= 0; k++) {
    unsigned long addr = call->args[s->path[k]];
    long n = 0;
    paths[k][0] = 0;
    if (addr || !s->null_is_fd) {
      n = read_string(c, addr, rel, sizeof rel);
      if (n < 0) {
        if (call_gone(c)) return CONTINUE;
        /* EFAULT: a page the kernel may read but we cannot (write-only); EPERM and the like:
         * no memory of the caller is readable here (the start-up probe reports it). */
        return give_up(errno == ENAMETOOLONG ? "a path longer than the kernel takes"
                       : errno == EFAULT     ? "a path the recorder could not read"
                                             : "the plugin's memory could not be read"), CONTINUE;
      }
      note_range(c, addr, (unsigned long)n + 1);
    }
    int dirfd = s->dirfd[k] < 0 ? AT_FDCWD : (int)call->args[s->dirfd[k]];
    if (n == 0 || rel[0] != '/') {
      long d = fd_object(c, dirfd, dir, sizeof dir, &is_dir);
      if (d == -2) return give_up("a path relative to a directory that could not be named"), CONTINUE;
      if (n == 0) {
        /* AT_EMPTY_PATH (or a NULL path where that means the descriptor): the object itself. */
        if (d > 0) {
          record('T', dir, (size_t)d);
          if (s->moves) record('M', dir, (size_t)d);
          if (s->nr == SYS_execveat && record_interpreters(c, dir, 0) < 0) return CONTINUE;
        }
        if (dirfd == AT_FDCWD) snprintf(paths[k], sizeof paths[k], "/proc/%d/cwd", c->tid);
        else snprintf(paths[k], sizeof paths[k], "/proc/%d/fd/%d", c->tid, dirfd);
        fd_path[k] = 1;
        continue;
      }
      if (d <= 0 || !is_dir) { /* the call looks nothing up */
        if (!bad) bad = d < 0 ? EBADF : ENOTDIR;
        continue;
      }
    }
    if (resolve(c, dir, rel, last) < 0) return CONTINUE;
    memcpy(paths[k], lookup, strlen(lookup) + 1);
    if ((s->nr == SYS_execve || s->nr == SYS_execveat) && record_interpreters(c, resolved, 0) < 0) return CONTINUE;
    /* Both ends of a rename: a directory or symlink renamed over or away changes what later
     * lookups (and a concurrent one) resolve to. */
    if (s->moves && last[0]) record('M', last, strlen(last));
    /* A rename's source (both ends of an exchange); a hard link's source unless it follows a link. */
    int exchange = s->kind == RENAME && (call->args[4] & RENAME_EXCHANGE);
    int is_link = 0;
#ifdef SYS_link
    is_link |= s->nr == SYS_link;
#endif
    is_link |= s->nr == SYS_linkat && !(call->args[4] & AT_SYMLINK_FOLLOW);
    if (last[0] && (k == 0 || exchange) && (s->moves || is_link) && !may_move(last, is_link))
      return give_up(s->moves ? "a directory older than the run, or a symlink, renamed" : "a hard link to a symlink"), CONTINUE;
  }
  if (reason) return CONTINUE; /* given up: nothing more to keep exact */
  enum how h = how_of(call->nr);
  if (bad && h != KERNEL) return fail(resp, bad);
  for (int k = 0; k < 2 && s->path[k] >= 0; k++)
    if (!paths[k][0] || (fd_path[k] && h != STAT)) h = KERNEL;
  __u64 flags = how.flags, mode = how.mode;
  if (h == OPEN) {
    if (s->kind == OPEN_HOW) {
      /* What openat2 refuses is left to the kernel, and resolve flags other than with
       * RESOLVE_BENEATH: that one we apply as the kernel does, to the caller's path relative to
       * its own directory, which no /proc/self or absolute path can leave. */
      if ((how.resolve && !(how.resolve & 0x08)) || (flags & ~(__u64)VALID_OPEN) || call->args[3] != sizeof how ||
          (mode && !(flags & CREATES)) || (mode & ~(__u64)07777))
        return give_up("openat2 with resolve flags or arguments it refuses"), CONTINUE;
    } else {
#ifdef SYS_open
      if (call->nr == SYS_creat) flags = O_CREAT | O_WRONLY | O_TRUNC, mode = call->args[1];
      else if (call->nr == SYS_open) flags = call->args[1], mode = call->args[2];
      else
#endif
        flags = call->args[2], mode = call->args[3];
      flags &= VALID_OPEN & 0xffffffffu;
      mode = flags & CREATES ? mode & 07777 : 0;
    }
    /* another process's memory, written through /proc/<pid>/mem, could hold a path */
    if ((flags & O_ACCMODE) != O_RDONLY && !strncmp(resolved, "/proc/", 6) && strlen(resolved) > 4 &&
        !strcmp(resolved + strlen(resolved) - 4, "/mem"))
      return give_up("the plugin opened a process's memory for writing"), CONTINUE;
    if (!can_install) return give_up("a kernel without SECCOMP_ADDFD_FLAG_SEND (Linux 5.14)"), CONTINUE;
  }
  if ((h == OPEN || h == SAME) && performed_twice(call->nr, flags)) h = KERNEL;
  if (h == OPEN) {
    if (!how.resolve) return answer_open(c, AT_FDCWD, paths[0], flags, mode, 0, resp);
    int dirfd = (int)call->args[0];
    if (dirfd == AT_FDCWD) snprintf(dir, sizeof dir, "/proc/%d/cwd", c->tid);
    else snprintf(dir, sizeof dir, "/proc/%d/fd/%d", c->tid, dirfd);
    int dfd = open(dir, O_PATH | O_CLOEXEC);
    if (dfd < 0) return fail(resp, errno == ENOENT ? EBADF : errno);
    enum answer a = answer_open(c, dfd, rel, flags, mode, how.resolve, resp);
    close(dfd);
    return a;
  }
  if (h == STAT) return answer_stat(c, call, paths[0], fd_path[0], resp);
  if (h == READLINK) return answer_readlink(c, call, paths[0], resp);
  if (h == SAME) {
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = (long)call->args[i];
    for (int k = 0; k < 2 && s->path[k] >= 0; k++) {
      a[s->path[k]] = (long)paths[k];
      if (s->dirfd[k] >= 0) a[s->dirfd[k]] = AT_FDCWD;
    }
    int old = -1;
#ifdef SYS_mkdir
    if (call->nr == SYS_mkdir) old = 0;
#endif
    if (call->nr == SYS_mkdirat || old == 0) {
      int mask = umask_of(c);
      if (mask < 0) return give_up("the plugin's umask could not be read"), CONTINUE;
      old = (int)umask((mode_t)mask);
    }
    long r = syscall(call->nr, a[0], a[1], a[2], a[3], a[4], a[5]);
    int err = errno;
    if (old >= 0) umask((mode_t)old);
    if (r < 0) return fail(resp, err);
    if (old >= 0) note_made_dir(paths[0]);
    resp->val = r;
    return ANSWERED;
  }
  if (could_change(c)) give_up("a path another task could rewrite as the kernel reads it");
  return CONTINUE;
}

/* Answer one notification: record it (when `recording`) and answer it or let it continue.
 * io_uring_setup is refused with ENOSYS: a ring would read files without syscalls we see, and
 * every user of it we know (libuv, hence Node >= 22; liburing callers) falls back to plain
 * syscalls, as under container runtimes whose seccomp profile already blocks io_uring. clone3
 * too: its flags are in memory, out of the filter's sight (and another thread could rewrite
 * them after we read them); every libc then uses clone, as under Docker's default profile. */
static void serve(int listener, int recording) {
  struct seccomp_notif req;
  struct seccomp_notif_resp resp;
  memset(&req, 0, sizeof req);
  if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req)) return;
  memset(&resp, 0, sizeof resp);
  resp.id = req.id;
  if (req.data.arch == NATIVE_ARCH && (req.data.nr == SYS_io_uring_setup || req.data.nr == SYS_clone3)) {
    resp.error = -ENOSYS;
    ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    return;
  }
  enum answer a = CONTINUE;
  if (recording && !reason) {
    struct caller c = {(pid_t)req.pid, 0, listener, req.id, {{0, 0}}, 0};
    a = on_syscall(&c, &req.data, &resp);
  }
  if (a == INSTALLED) return;
  if (a == CONTINUE) resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
  /* ENOENT: the call was interrupted or its task died meanwhile. */
  ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}

/* ---- the filter: notify the syscalls of SPECS, and anything of another architecture ---- */
static int install_filter(int *killable) {
  struct sock_filter f[14 + NSPECS + 2];
  size_t n = 0;
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
  /* clone: only a process that shares memory and runs beside its parent (the flags are
   * argument 0 on both architectures; their low word holds these bits) */
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 3);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]));
  f[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, CLONE_VM | CLONE_THREAD | CLONE_VFORK);
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CLONE_VM, NSPECS + 7, NSPECS + 6);
  /* socket and socketpair: only for a unix socket (the domain, argument 0) */
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 1, 0);
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socketpair, 0, 2);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]));
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, NSPECS + 3, NSPECS + 2);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
  /* also x32 syscalls on x86_64, which share the arch value (nr | 0x40000000) */
  f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, FIRST_UNKNOWN_NR, NSPECS + 1, 0);
  for (size_t i = 0; i < NSPECS; i++)
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)SPECS[i].nr, (unsigned char)(NSPECS - i), 0);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
  struct sock_fprog prog = {(unsigned short)n, f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
  /* WAIT_KILLABLE_RECV (Linux 5.19): once we have received a call, only a fatal signal
   * interrupts it, so a call we perform is never restarted and performed twice (see
   * performed_twice); other signals arrive as it returns, as during the kernel's own file calls. */
  int listener = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, &prog);
  *killable = listener >= 0;
  if (listener < 0 && errno == EINVAL) listener = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
  return listener;
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
  int told[2] = {-1, 0}; /* the listener, and whether it is WAIT_KILLABLE_RECV */
  told[0] = install_filter(&told[1]);
  int err = errno;
  /* Always answered: our end of the socket stays open in the shared table, so the other side
   * would not see our exit. */
  if (write(sock, told, sizeof told) != sizeof told || told[0] < 0) {
    fprintf(stderr, "cmp-trace: exec: seccomp listener: %s\n", strerror(told[0] < 0 ? err : errno));
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
  static const char *const KIND[] = {"path", "openat2", "renameat2", "list", "cwd", "sockaddr", "msghdr", "clone-vm", "give-up", "unix-socket"};
  static const char *const HOW[] = {"kernel", "recorder", "recorder", "recorder", "recorder"};
  for (size_t i = 0; i < NSPECS; i++) {
    const struct spec *s = &SPECS[i];
    int refused = s->nr == SYS_io_uring_setup || s->nr == SYS_clone3;
    /* fourth column: who runs a recorded call, the recorder on the recorded paths or the kernel */
    printf("%s %ld %s %s\n", s->name, s->nr, refused ? "refuse" : KIND[s->kind],
           s->kind == UNTRACKABLE || refused ? "-" : HOW[how_of(s->nr)]);
  }
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

  if (inherits_unix_socket()) unix_made = MADE;
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
  root = (pid_t)syscall(SYS_clone, CLONE_FILES | SIGCHLD, 0, 0, 0, 0);
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
  self_fds = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct utsname un;
  int major_v = 0, minor_v = 0;
  if (!uname(&un) && sscanf(un.release, "%d.%d", &major_v, &minor_v) == 2) can_install = major_v * 1000 + minor_v >= 5014;
  if (self_fds < 0) can_install = 0;
  /* The group's SIGTERM/SIGINT reach the command too; the tracer outlives it to finish the
   * record, and exits as the command did. */
  for (size_t i = 0; i < sizeof PASSED_ON / sizeof PASSED_ON[0]; i++) signal(PASSED_ON[i], SIG_IGN);

  int listener = -1, told[2];
  if (read(sp[0], told, sizeof told) == sizeof told) listener = told[0], killable = told[1];
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
