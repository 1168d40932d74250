/**
 * Ways for plugin code to learn something about a repository file, for the traced cache's
 * adversarial suites (test/security/read-techniques.test.ts, read-differential.test.ts).
 *
 * Each technique is a program run as the plugin's generate command in `apps/<name>/` of a tiny
 * repository; what it learns ends up in its output (`out: ...`). The repository is shown to it
 * in three states (`state(0..2)`) that differ only in what the technique reads, so a fresh run
 * answers differently in each: a traced cache that did not record the read answers the second
 * or third state from the first one's entry.
 *
 * Programs get `$KIT` (the directory of the programs, outside the repository) and `$T` (a
 * scratch directory every plugin uid may write, shared by the runs of one test file).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export interface Technique {
  /** Also the app name (`apps/<name>`). */
  name: string;
  /** What the program does, for the report. */
  what: string;
  lang: 'sh' | 'py' | 'c';
  /** The program: sh or python 3 script body, or a C source file. */
  code: string;
  /** Repository files of state 0..2 besides the app dir's own marker (path → content); default `shared/x` = `v<n>`. */
  state?: (n: number) => Tree;
  /** Why the technique cannot work in distributed mode (the runner's uid lacks what it needs). */
  standaloneOnly?: string;
  /** Only on this architecture (process.arch). */
  arch?: NodeJS.Architecture;
  /**
   * A plain read that a working recorder records completely: the test then also requires a
   * derived value, so that a recorder giving every record up cannot pass the suite.
   */
  recorded?: true;
}

/** A file's content, or an executable file, or a symlink. */
export type Entry = string | { exec: string } | { symlink: string };
export type Tree = Record<string, Entry>;

const shared = (n: number): Tree => ({ 'shared/x': `v${n}\n` });

/** Python: a libc handle and what raw syscalls need. */
const PY_LIBC = `import ctypes, os, platform, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AMD64 = platform.machine() in ('x86_64', 'AMD64')
NR_OPENAT = 257 if AMD64 else 56
NR_OPENAT2 = 437
AT_FDCWD = -100
def check(r, what):
    if r < 0:
        e = ctypes.get_errno()
        sys.exit(what + ': ' + os.strerror(e))
    return r
def out(fd):
    print('out:', os.read(fd, 4096).decode().strip())
`;

/**
 * Techniques the recorder does not handle yet (`name`, or `name@mode` for one mode only), with
 * what fails: their tests run as node:test todo (the failure is reported, not fatal), and the
 * randomized differential test leaves their snippets out of its main walk (its todo walk keeps
 * them).
 */
export const TODO: Record<string, string> = {};

/**
 * C shared by the racing techniques: whether a seccomp filter is on this process, and a helper
 * thread that watches the main thread (on another CPU) until, in attempt k, it blocks in its
 * call (a supervisor handles it then) and runs again (the kernel goes on with it).
 */
const C_RACE_KIT = `#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int filtered(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int yes = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Seccomp:", 8)) yes = atoi(line + 8) != 0;
  if (f) fclose(f);
  return yes;
}

static char state_of(int fd) {
  char s[512];
  ssize_t n = pread(fd, s, sizeof s - 1, 0);
  if (n <= 0) return '?';
  s[n] = 0;
  char *p = strrchr(s, ')');
  return p && p[1] == ' ' ? p[2] : '?';
}

/* The helper thread, off main_cpu: for each attempt k (current, -1 between attempts) in which the
 * main thread blocks and then runs again, act(k) at once; after the attempt, acked = k. */
static void watch_attempts(pid_t main_tid, int main_cpu, atomic_long *current, atomic_long *acked, atomic_int *stop, void (*act)(long)) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (long c = 0; c < ncpu && c < CPU_SETSIZE; c++)
    if (c != main_cpu) CPU_SET(c, &set);
  sched_setaffinity(0, sizeof set, &set);
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", main_tid);
  int fd = open(path, O_RDONLY);
  while (!atomic_load(stop)) {
    long k = atomic_load(current);
    if (k < 0) continue;
    int slept = 0;
    while (atomic_load(current) == k) {
      char st = state_of(fd);
      if (st == 'S') slept = 1;
      else if (slept && st == 'R') {
        act(k);
        break;
      }
    }
    while (atomic_load(current) == k) {}
    atomic_store(acked, k);
  }
}
`;

export const TECHNIQUES: Technique[] = [
  { name: 'sh-redirect', what: 'shell input redirection', lang: 'sh', code: 'read -r v < ../../shared/x; echo "out: $v"', recorded: true },
  { name: 'cat', what: 'cat of a relative path', lang: 'sh', code: 'echo "out: $(cat ../../shared/x)"', recorded: true },
  { name: 'py-open', what: 'python open()', lang: 'py', code: `print('out:', open('../../shared/x').read().strip())` },
  {
    name: 'py-dir-fd',
    what: 'python os.open with dir_fd (openat relative to a directory descriptor)',
    lang: 'py',
    code: `import os
d = os.open('../../shared', os.O_RDONLY | os.O_DIRECTORY)
print('out:', os.read(os.open('x', os.O_RDONLY, dir_fd=d), 100).decode().strip())`,
  },
  {
    name: 'o-path-openat',
    what: 'openat relative to an O_PATH descriptor',
    lang: 'py',
    code: `import os
d = os.open('../../shared', os.O_PATH | os.O_DIRECTORY)
print('out:', os.read(os.open('x', os.O_RDONLY, dir_fd=d), 100).decode().strip())`,
  },
  {
    name: 'ctypes-openat',
    what: 'raw syscall(SYS_openat) through ctypes with a dirfd from os.open',
    lang: 'py',
    code: `${PY_LIBC}d = os.open('../../shared', os.O_RDONLY | os.O_DIRECTORY)
out(check(libc.syscall(NR_OPENAT, d, b'x', os.O_RDONLY), 'openat'))`,
  },
  { name: 'proc-self-cwd-dotdot', what: '`..` after /proc/self/cwd (the path the issue names)', lang: 'sh', code: 'echo "out: $(cat /proc/self/cwd/../../shared/x)"' },
  { name: 'proc-pid-cwd-dotdot', what: "`..` after another process's /proc/<pid>/cwd (the shell's)", lang: 'sh', code: 'echo "out: $(cat /proc/$$/cwd/../../shared/x)"' },
  {
    name: 'proc-root-dotdot',
    what: '/proc/self/root/.. then /proc/self/cwd/../..: no alias left after lexical cleaning',
    lang: 'sh',
    code: 'echo "out: $(cat /proc/self/root/../proc/self/cwd/../../shared/x)"',
  },
  { name: 'proc-self-root', what: "/proc/self/root followed by the file's absolute path", lang: 'sh', code: 'echo "out: $(cat "/proc/self/root$(pwd -P)/../../shared/x")"' },
  { name: 'proc-fd-dir', what: 'a directory descriptor reopened through /proc/self/fd/N/', lang: 'sh', code: 'exec 3< ../../shared; echo "out: $(cat /proc/self/fd/3/x)"' },
  { name: 'dev-fd-dir', what: 'a directory descriptor reopened through /dev/fd/N/', lang: 'sh', code: 'exec 3< ../../shared; echo "out: $(cat /dev/fd/3/x)"' },
  { name: 'chdir-proc-cwd', what: 'cd -P /proc/self/cwd/../.. (the kernel resolves it), then a relative read', lang: 'sh', code: 'cd -P /proc/self/cwd/../.. && echo "out: $(cat shared/x)"' },
  {
    name: 'tmp-symlink',
    what: 'a symlink made in /tmp (during the run) pointing into the work dir',
    lang: 'sh',
    code: 'ln -sfn "$(pwd -P)/../../shared" "$T/l.$$"; v=$(cat "$T/l.$$/x"); rm -f "$T/l.$$"; echo "out: $v"',
  },
  {
    name: 'tmp-symlink-kept',
    what: 'a symlink to /proc/self/cwd/../.. left in /tmp by an earlier run, read through by later runs',
    lang: 'sh',
    code: '[ -L "$T/kept" ] || ln -s /proc/self/cwd/../../shared "$T/kept" 2>/dev/null; echo "out: $(cat "$T/kept/x")"',
  },
  {
    name: 'tmp-symlink-last',
    what: 'the size of a file through a symlink to /proc/self/cwd/../../shared/x left in /tmp by an earlier run (stat follows it)',
    lang: 'sh',
    code: '[ -L "$T/last" ] || ln -s /proc/self/cwd/../../shared/x "$T/last" 2>/dev/null; echo "out: $(stat -L -c %s "$T/last")"',
    state: n => ({ 'shared/x': 'v'.repeat(n + 1) }),
  },
  {
    name: 'hardlink',
    what: 'a hard link made in /tmp, read there',
    lang: 'sh',
    code: 'ln ../../shared/x "$T/h.$$"; v=$(cat "$T/h.$$"); rm -f "$T/h.$$"; echo "out: $v"',
  },
  { name: 'rename-dir', what: 'a directory renamed, then read under its new name', lang: 'sh', code: 'mv ../../shared ../../moved; echo "out: $(cat ../../moved/x)"' },
  {
    name: 'rename-exchange',
    what: 'renameat2(RENAME_EXCHANGE) of a file with a directory, then a read through the file\'s name',
    lang: 'py',
    code: `${PY_LIBC}libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
check(libc.renameat2(AT_FDCWD, b'f', AT_FDCWD, b'../../shared', 2), 'renameat2')
print('out:', open('f/x').read().strip())`,
    state: n => ({ 'apps/rename-exchange/f': 'a file\n', ...shared(n) }),
  },
  {
    name: 'fchdir',
    what: 'fchdir to a directory descriptor, then a relative open',
    lang: 'py',
    code: `import os
os.fchdir(os.open('../../shared', os.O_RDONLY))
print('out:', open('x').read().strip())`,
  },
  {
    name: 'exec-script',
    what: 'executing a repository script (the kernel reads its #! line, the interpreter the rest)',
    lang: 'sh',
    code: 'exec ../../shared/x',
    state: n => ({ 'shared/x': { exec: `#!/bin/sh\necho "out: v${n}"\n` } }),
  },
  {
    name: 'mmap',
    what: 'mmap of the file',
    lang: 'py',
    code: `import mmap
with open('../../shared/x', 'rb') as f:
    print('out:', mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)[:].decode().strip())`,
  },
  {
    name: 'sendfile',
    what: 'sendfile from a descriptor straight to stdout',
    lang: 'py',
    code: `import os, sys
sys.stdout.write('out: '); sys.stdout.flush()
os.sendfile(1, os.open('../../shared/x', os.O_RDONLY), 0, 100)`,
  },
  {
    name: 'copy-file-range',
    what: 'copy_file_range into a file in /tmp, read there',
    lang: 'py',
    code: `import os
src = os.open('../../shared/x', os.O_RDONLY)
dst = os.path.join(os.environ['T'], 'cfr.%d' % os.getpid())
d = os.open(dst, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
os.copy_file_range(src, d, 100)
print('out:', open(dst).read().strip())
os.unlink(dst)`,
  },
  {
    name: 'openat2-in-root',
    what: 'openat2 with RESOLVE_IN_ROOT: an absolute path resolved under a directory descriptor',
    lang: 'py',
    code: `${PY_LIBC}how = (ctypes.c_uint64 * 3)(os.O_RDONLY, 0, 0x10)
root = os.open('../..', os.O_RDONLY | os.O_DIRECTORY)
out(check(libc.syscall(NR_OPENAT2, root, b'/shared/x', ctypes.byref(how), 24), 'openat2'))`,
  },
  {
    name: 'openat2-beneath',
    what: 'openat2 with RESOLVE_BENEATH relative to a directory descriptor',
    lang: 'py',
    code: `${PY_LIBC}how = (ctypes.c_uint64 * 3)(os.O_RDONLY, 0, 0x08)
root = os.open('../..', os.O_RDONLY | os.O_DIRECTORY)
out(check(libc.syscall(NR_OPENAT2, root, b'shared/x', ctypes.byref(how), 24), 'openat2'))`,
  },
  {
    name: 'open-by-handle',
    what: 'name_to_handle_at, then open_by_handle_at',
    lang: 'py',
    code: `${PY_LIBC}buf = ctypes.create_string_buffer(8 + 128)
ctypes.c_uint.from_buffer(buf).value = 128
mount_id = ctypes.c_int()
check(libc.name_to_handle_at(AT_FDCWD, b'../../shared/x', buf, ctypes.byref(mount_id), 0), 'name_to_handle_at')
mnt = os.open('../..', os.O_RDONLY | os.O_DIRECTORY)
out(check(libc.open_by_handle_at(mnt, buf, os.O_RDONLY), 'open_by_handle_at'))`,
    standaloneOnly: 'open_by_handle_at needs CAP_DAC_READ_SEARCH, which the runner uid lacks',
  },
  {
    name: 'write-only-mapping',
    what: 'the path string in a write-only mapping (the issue names it): the kernel reads it, process_vm_readv cannot',
    lang: 'c',
    code: `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
  const char *want = argc > 1 ? argv[1] : "../../shared/x";
  char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return perror("mmap"), 1;
  strcpy(p, want);
  if (mprotect(p, 4096, PROT_WRITE)) return perror("mprotect"), 1;
  int fd = open(p, O_RDONLY);
  if (fd < 0) return perror("open"), 1;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  if (n < 0) return perror("read"), 1;
  while (n > 0 && buf[n - 1] == '\\n') n--;
  printf("out: %.*s\\n", (int)n, buf);
  return 0;
}
`,
  },
  {
    name: 'vfork-child',
    what: 'a vfork child (CLONE_VM) that execs cat',
    lang: 'c',
    code: `#define _GNU_SOURCE
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
  fputs("out: ", stdout);
  fflush(stdout);
  pid_t pid = vfork();
  if (pid == 0) {
    execl("/bin/cat", "cat", "../../shared/x", (char *)NULL);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
`,
  },
  {
    name: 'toctou-thread',
    what: 'the path rewritten by another thread after the recorder read it, before the kernel copies it (C, pthreads)',
    lang: 'c',
    code: `/* TOCTOU on a path argument: the main thread opens a decoy path; a second thread, on another
 * CPU, changes its last byte to the target's (argv[1]) only after the main thread has blocked in
 * the syscall and woken up again, i.e. after a seccomp supervisor read the path and let the call
 * go on, before the kernel copies it. Without a seccomp filter the file is opened directly (same
 * output). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NBUF 1024
#define TRIES 5000
/* The target (argv[1]) and a decoy that differs in its last byte. */
static char target[256], decoy[256];
static size_t at;
/* A fresh copy of the path per attempt: a late write can only hit an attempt that is over. */
static char bufs[NBUF][256];
static atomic_long current = -1, acked = -1; /* the attempt in open(), or -1 */
static atomic_int stop;
static pid_t main_tid;
static int main_cpu;

${C_RACE_KIT}
/* After the block (the supervisor reads the path then), at the wake-up. */
static void flip(long k) {
  bufs[k % NBUF][at] = target[at];
}

static void *flipper(void *arg) {
  (void)arg;
  watch_attempts(main_tid, main_cpu, &current, &acked, &stop, flip);
  return NULL;
}

static void print(int fd) {
  char b[256];
  ssize_t n = read(fd, b, sizeof b - 1);
  if (n < 0) n = 0;
  while (n > 0 && b[n - 1] == '\\n') n--;
  printf("out: %.*s\\n", (int)n, b);
}

int main(int argc, char **argv) {
  snprintf(target, sizeof target, "%s", argc > 1 ? argv[1] : "../../shared/x");
  at = strlen(target) - 1;
  strcpy(decoy, target);
  decoy[at] = target[at] == '~' ? '^' : '~';
  if (!filtered()) {
    int fd = open(target, O_RDONLY);
    if (fd < 0) return perror("open"), 1;
    print(fd);
    return 0;
  }
  main_tid = (pid_t)syscall(SYS_gettid);
  main_cpu = sched_getcpu();
  pthread_t th;
  pthread_create(&th, NULL, flipper, NULL);
  long tries = 0;
  for (;; tries++) {
    char *b = bufs[tries % NBUF];
    strcpy(b, decoy);
    atomic_store(&current, tries);
    /* A machine where the race cannot be won (or a missing target) ends with a plain open. */
    int fd = tries < TRIES ? open(b, O_RDONLY) : open(target, O_RDONLY);
    atomic_store(&current, -1);
    if (fd < 0 && tries >= TRIES) return perror("open"), 1;
    if (fd >= 0) {
      atomic_store(&stop, 1);
      print(fd);
      return 0;
    }
  }
}
`,
  },
  {
    name: 'io-uring',
    what: 'io_uring IORING_OP_OPENAT and IORING_OP_READ (plain syscalls when io_uring_setup is refused)',
    lang: 'c',
    code: `/* Open and read a file through io_uring (IORING_OP_OPENAT, IORING_OP_READ): no open or read
 * syscall of the process names it. When io_uring_setup is refused, plain syscalls. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *PATH = "../../shared/x";
static char data[256];

static void print(long n) {
  while (n > 0 && data[n - 1] == '\\n') n--;
  printf("out: %.*s\\n", (int)(n < 0 ? 0 : n), data);
}

int main(void) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  int ring = (int)syscall(__NR_io_uring_setup, 4, &p);
  if (ring < 0) {
    int fd = open(PATH, O_RDONLY);
    if (fd < 0) return perror("open"), 1;
    print(read(fd, data, sizeof data));
    return 0;
  }
  size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
  char *sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING);
  char *cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_CQ_RING);
  struct io_uring_sqe *sqes = mmap(NULL, p.sq_entries * sizeof *sqes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES);
  if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) return perror("mmap"), 1;
  unsigned *sq_tail = (unsigned *)(sq + p.sq_off.tail), *sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
  unsigned *sq_array = (unsigned *)(sq + p.sq_off.array);
  unsigned *cq_head = (unsigned *)(cq + p.cq_off.head), *cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
  struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
  int result = -1;
  for (int step = 0; step < 2; step++) {
    unsigned tail = *sq_tail, i = tail & *sq_mask;
    struct io_uring_sqe *e = &sqes[i];
    memset(e, 0, sizeof *e);
    if (step == 0) {
      e->opcode = IORING_OP_OPENAT;
      e->fd = AT_FDCWD;
      e->addr = (unsigned long)PATH;
      e->open_flags = O_RDONLY;
    } else {
      e->opcode = IORING_OP_READ;
      e->fd = result;
      e->addr = (unsigned long)data;
      e->len = sizeof data;
    }
    sq_array[i] = i;
    __atomic_store_n(sq_tail, tail + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0) return perror("io_uring_enter"), 1;
    unsigned head = __atomic_load_n(cq_head, __ATOMIC_ACQUIRE);
    result = cqes[head & *cq_mask].res;
    __atomic_store_n(cq_head, head + 1, __ATOMIC_RELEASE);
    if (result < 0) {
      fprintf(stderr, "io_uring step %d: %s\\n", step, strerror(-result));
      return 1;
    }
  }
  print(result);
  return 0;
}
`,
  },
  {
    name: 'int80-compat',
    what: "open through the 32-bit compat entry (int 0x80) of an x86-64 process",
    lang: 'c',
    code: `/* open(2) through the 32-bit compat entry (int 0x80) of an x86-64 process: another
 * architecture's syscall numbers, with the path in the low 4 GiB. A kernel without ia32
 * emulation faults it: then a plain open. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static sigjmp_buf no_compat;
static void fault(int sig) { (void)sig; siglongjmp(no_compat, 1); }
int main(void) {
  char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
  if (p == MAP_FAILED) return perror("mmap"), 1;
  strcpy(p, "../../shared/x");
  long fd;
  signal(SIGSEGV, fault);
  if (sigsetjmp(no_compat, 1) == 0)
    __asm__ volatile("int $0x80" : "=a"(fd) : "a"(5L), "b"(p), "c"(0L), "d"(0L) : "memory");
  else
    fd = open(p, O_RDONLY);
  if (fd < 0) return fprintf(stderr, "open: %ld\\n", fd), 1;
  char buf[256];
  ssize_t n = read((int)fd, buf, sizeof buf - 1);
  while (n > 0 && buf[n - 1] == '\\n') n--;
  printf("out: %.*s\\n", (int)(n < 0 ? 0 : n), buf);
  return 0;
}
`,
    arch: 'x64',
  },
  {
    name: 'background-reader',
    what: 'a background process that reads after the command exited (it holds stdout)',
    lang: 'sh',
    code: "printf 'out: '; ( sleep 0.3; cat ../../shared/x ) & exit 0",
  },
  {
    name: 'dir-link-count',
    what: "stat of a directory: its link count reveals how many subdirectories it has",
    lang: 'sh',
    code: 'echo "out: $(stat -c %h ../../shared)"',
    state: n => ({ 'shared/x': 'v\n', ...Object.fromEntries(Array.from({ length: n }, (_, i) => [`shared/sub${i}/y`, 'y\n'])) }),
  },
  {
    name: 'proc-cwd-link-count',
    what: 'stat of /proc/self/cwd itself: the link count of the app dir (its subdirectories)',
    lang: 'sh',
    code: 'echo "out: $(stat -L -c %h /proc/self/cwd)"',
    state: n => ({ 'shared/x': 'v\n', ...Object.fromEntries(Array.from({ length: n }, (_, i) => [`apps/proc-cwd-link-count/sub${i}/y`, 'y\n'])) }),
  },
  {
    name: 'readdir-ls',
    what: 'ls of a directory',
    lang: 'sh',
    recorded: true,
    code: 'echo "out: $(ls ../../shared | tr \'\\n\' \' \')"',
    state: n => ({ 'shared/x': 'v\n', ...Object.fromEntries(Array.from({ length: n }, (_, i) => [`shared/new${i}`, 'y\n'])) }),
  },
  {
    name: 'exists-probe',
    what: 'existence probing with test -e / -f / -d',
    lang: 'sh',
    recorded: true,
    code: 'v=none; [ -e ../../shared/maybe ] && v=exists; [ -f ../../shared/maybe ] && v=file; [ -d ../../shared/maybe ] && v=dir; echo "out: $v"',
    state: n => ({ 'shared/x': 'v\n', ...(n === 1 ? { 'shared/maybe': 'y\n' } : n === 2 ? { 'shared/maybe/z': 'z\n' } : {}) }),
  },
  {
    name: 'getxattr-probe',
    what: 'existence probing with getxattr (its error tells missing, not a directory, present)',
    lang: 'py',
    code: `import errno, os
try:
    os.getxattr('../../shared/maybe/y', 'user.none')
    v = 'attr'
except OSError as e:
    v = errno.errorcode[e.errno]
print('out:', v)`,
    // ENOENT, ENOTDIR (a file where a directory was expected), ENODATA (there, without the attribute).
    state: n => ({ 'shared/x': 'v\n', ...(n === 1 ? { 'shared/maybe': 'y\n' } : {}), ...(n === 2 ? { 'shared/maybe/y': 'y\n' } : {}) }),
  },
  { name: 'statx-size', what: "statx of a file: its size", lang: 'sh', code: 'echo "out: $(stat -c %s ../../shared/x)"', state: n => ({ 'shared/x': 'v'.repeat(n + 1) }) },
  {
    name: 'readlink',
    what: 'readlink of a symlink in the tree',
    lang: 'sh',
    code: 'echo "out: $(readlink ../../shared/l)"',
    state: n => ({ 'shared/x': 'v\n', [`shared/t${n}`]: 't\n', 'shared/l': { symlink: `t${n}` } }),
  },
  {
    name: 'glob',
    what: 'a shell glob',
    lang: 'sh',
    code: 'v=; for f in ../../shared/*; do v="$v ${f##*/}"; done; echo "out:$v"',
    state: n => ({ 'shared/x': 'v\n', [`shared/f${n}`]: 'y\n' }),
  },
  { name: 'find', what: 'find over a directory, printing every file', lang: 'sh', code: 'echo "out: $(find ../../shared -type f | sort | xargs cat | tr \'\\n\' \' \')"', state: n => ({ 'shared/a/b/x': `v${n}\n` }) },
  {
    name: 'cp-r',
    what: 'cp -r of a directory to /tmp, read there',
    lang: 'sh',
    code: 'cp -r ../../shared "$T/c.$$"; v=$(cat "$T/c.$$/d/x"); rm -rf "$T/c.$$"; echo "out: $v"',
    state: n => ({ 'shared/d/x': `v${n}\n` }),
  },
  {
    name: 'tar-pipe',
    what: 'tar of a directory piped to tar -x to stdout',
    lang: 'sh',
    code: 'echo "out: $(tar -C ../.. -cf - shared | tar -xOf - shared/d/x)"',
    state: n => ({ 'shared/d/x': `v${n}\n` }),
  },
  {
    name: 'os-walk',
    what: 'python os.walk, printing every file',
    lang: 'py',
    code: `import os
got = []
for d, dirs, files in os.walk('../../shared'):
    dirs.sort()
    for f in sorted(files):
        got.append(f + '=' + open(os.path.join(d, f)).read().strip())
print('out:', ' '.join(got))`,
    state: n => ({ 'shared/x': 'v\n', ...(n > 0 ? { [`shared/deep/er/f${n}`]: `v${n}\n` } : {}) }),
  },
  {
    name: 'rename-ancestor',
    what: "the work dir's parent renamed, a file read through the new name, the name put back",
    lang: 'sh',
    code: 'w=$(cd ../.. && pwd -P); p=$(dirname "$w"); mv "$p" "$p.x" && v=$(cat "$p.x/$(basename "$w")/shared/x"); mv "$p.x" "$p"; echo "out: $v"',
  },
  {
    name: 'socket-swap',
    what: 'a unix socket swapped onto an inet descriptor, and the address rewritten, as connect goes on (C, pthreads)',
    lang: 'c',
    // ENOENT, ENOTDIR (a file where a directory was expected), ECONNREFUSED (there, not a socket).
    state: n => ({ 'shared/x': 'v\n', ...(n === 1 ? { 'shared/maybe': 'y\n' } : {}), ...(n === 2 ? { 'shared/maybe/y': 'y\n' } : {}) }),
    code: `/* The main thread connects an inet (UDP) descriptor to an inet address; a second thread, on
 * another CPU, waits for it to block in connect and wake up again (a seccomp supervisor checked
 * the descriptor meanwhile and let the call go on), then swaps a unix socket onto the descriptor
 * and rewrites the address to a unix path: the kernel then probes that path. A unix connect's
 * error tells what is there. Without a seccomp filter, or if the race is not won, a plain unix
 * connect to the path gives the same answer. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#define FD 100
#define TRIES 5000
#define NBUF 1024
static struct sockaddr_un bufs[NBUF], unix_addr;
static struct sockaddr_in inet_to;
static atomic_long current = -1, acked = -1;
static atomic_int stop;
static pid_t main_tid;
static int main_cpu, unix_fd;

${C_RACE_KIT}
static void swap(long k) {
  dup2(unix_fd, FD);
  memcpy(&bufs[k % NBUF], &unix_addr, sizeof unix_addr);
}

static void *flipper(void *arg) {
  (void)arg;
  watch_attempts(main_tid, main_cpu, &current, &acked, &stop, swap);
  return NULL;
}

static const char *name(int e) {
  return e == ENOENT ? "ENOENT" : e == ENOTDIR ? "ENOTDIR" : e == ECONNREFUSED ? "ECONNREFUSED" : strerror(e);
}

static int probe(void) {
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  int r = connect(s, (struct sockaddr *)&unix_addr, sizeof unix_addr);
  int e = errno;
  close(s);
  return r < 0 ? e : 0;
}

int main(int argc, char **argv) {
  unix_addr.sun_family = AF_UNIX;
  snprintf(unix_addr.sun_path, sizeof unix_addr.sun_path, "%s", argc > 1 ? argv[1] : "../../shared/maybe/y");
  if (!filtered()) return printf("out: %s\\n", name(probe())), 0;
  inet_to.sin_family = AF_INET;
  inet_to.sin_port = htons(9);
  inet_to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  unix_fd = socket(AF_UNIX, SOCK_STREAM, 0);
  main_tid = (pid_t)syscall(SYS_gettid);
  main_cpu = sched_getcpu();
  pthread_t th;
  pthread_create(&th, NULL, flipper, NULL);
  for (long tries = 0; tries < TRIES; tries++) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    dup2(s, FD);
    close(s);
    struct sockaddr_un *b = &bufs[tries % NBUF];
    memset(b, 0, sizeof *b);
    memcpy(b, &inet_to, sizeof inet_to);
    atomic_store(&current, tries);
    int r = connect(FD, (struct sockaddr *)b, sizeof *b);
    int e = errno;
    atomic_store(&current, -1);
    /* a late swap must not meet the next attempt's check */
    for (long spin = 0; spin < 10000000 && atomic_load(&acked) != tries; spin++) {}
    if (r < 0 && (e == ENOENT || e == ENOTDIR || e == ECONNREFUSED)) {
      atomic_store(&stop, 1);
      return printf("out: %s\\n", name(e)), 0;
    }
  }
  atomic_store(&stop, 1);
  printf("out: %s\\n", name(probe()));
  return 0;
}
`,
  },
  {
    name: 'scm-rights',
    what: 'a descriptor passed over a unix socket from a helper process',
    lang: 'py',
    code: `import os, socket
a, b = socket.socketpair()
if os.fork() == 0:
    socket.send_fds(b, [b'x'], [os.open('../../shared/x', os.O_RDONLY)])
    os._exit(0)
_, fds, _, _ = socket.recv_fds(a, 1, 1)
os.wait()
print('out:', os.read(fds[0], 100).decode().strip())`,
  },
];

/** Why a technique is marked todo in `mode`, if it is. */
export function todoOf(name: string, mode: string): string | undefined {
  return TODO[`${name}@${mode}`] ?? TODO[name];
}

/** Every technique's state `n`, as the repository files (the app dir's marker included). */
export function stateOf(t: Technique, n: number): Tree {
  return { [`apps/${t.name}/app.txt`]: 'app\n', ...(t.state ?? shared)(n) };
}

/** What keeps a language's programs from running here, if anything. */
export function toolProblem(lang: Technique['lang']): string | undefined {
  try {
    if (lang === 'py') execFileSync('python3', ['-c', 'import ctypes, socket; socket.send_fds'], { stdio: 'pipe' });
    if (lang === 'c') execFileSync('cc', ['--version'], { stdio: 'pipe' });
    return undefined;
  } catch (err) {
    return `${lang === 'py' ? 'python3 (with ctypes, 3.9+)' : 'cc'} is not usable here: ${(err as Error).message.split('\n')[0]}`;
  }
}

/**
 * Write every technique's program into `kit` as `<name>` (executable; C compiled with cc) and
 * return the names that could not be built, with why.
 */
export function buildKit(kit: string, techniques: Technique[]): Map<string, string> {
  const problems = new Map<string, string>();
  for (const t of techniques) {
    if (t.arch !== undefined && t.arch !== process.arch) continue;
    const exe = path.join(kit, t.name);
    const problem = toolProblem(t.lang);
    if (problem) {
      problems.set(t.name, problem);
      continue;
    }
    if (t.lang === 'sh') fs.writeFileSync(exe, `#!/bin/sh\n${t.code}\n`, { mode: 0o755 });
    else if (t.lang === 'py') fs.writeFileSync(exe, `#!/usr/bin/env python3\n${t.code}\n`, { mode: 0o755 });
    else {
      fs.writeFileSync(`${exe}.c`, t.code);
      try {
        execFileSync('cc', ['-O1', '-pthread', '-o', exe, `${exe}.c`], { stdio: 'pipe' });
        fs.chmodSync(exe, 0o755);
      } catch (err) {
        problems.set(t.name, `cc could not build it: ${String((err as { stderr?: Buffer }).stderr ?? err).trim().split('\n').slice(0, 3).join(' / ')}`);
      }
    }
  }
  return problems;
}

/** Write `tree` into `dir` (emptied first). */
export function writeTree(dir: string, tree: Tree): void {
  fs.rmSync(dir, { recursive: true, force: true });
  for (const [rel, e] of Object.entries(tree)) {
    const p = path.join(dir, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    if (typeof e === 'string') fs.writeFileSync(p, e, { mode: 0o644 });
    else if ('exec' in e) fs.writeFileSync(p, e.exec, { mode: 0o755 });
    else fs.symlinkSync(e.symlink, p);
  }
  // Readable by a runner of another uid.
  fs.chmodSync(dir, 0o755);
}
