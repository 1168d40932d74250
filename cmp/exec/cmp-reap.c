/*
 * cmp-reap: runs one plugin command so that every process it starts can be signalled and killed,
 * including those that leave its process group (setsid, double fork into a new session).
 *
 *   cmp-reap FILE ARGV0 [ARG...]      (fd 3: the status channel to the server)
 *   cmp-reap --probe                  (exit 0 when it can work here)
 *   cmp-reap --init FILE [ARG...]     (a container's PID 1: see init_main below)
 *
 * Why: the server (cmp/exec/run-command.ts) used to spawn the command as the leader of its own
 * process group and signal that group. A process that calls setsid() leaves the group and was
 * never signalled again: it outlived timeouts, cancellation and the end of the request, and kept
 * running next to later requests. Process groups cannot be made inescapable, and cgroups need
 * writes a restricted pod cannot count on. A child subreaper (prctl(PR_SET_CHILD_SUBREAPER), no
 * privilege) can: whatever a descendant does to its session or group, when its parent dies it is
 * reparented to us, so "descendant of cmp-reap" stays true until it exits. Node cannot call
 * prctl, hence this helper; the server runs commands plainly (group kill only) when it is not
 * built (docs/argo-contract.md#process-cleanup).
 *
 * Shape (the server spawns us detached: we lead our own session and group W):
 *   - we fork the command, which calls setpgid(0, 0) and execs FILE with ARGV0 ARG... and our env
 *     and cwd: as under argocd-cmp-server (Setpgid), the command leads its own group C in a
 *     session it does not lead, so `kill -- -$$` and `kill 0` in plugin scripts work as there.
 *     Keeping C apart from W means no group signal aimed at the command can hit us.
 *   - fd 3 gets one line per event, each a single write:
 *       "pid C"       the command runs (its exec succeeded)
 *       "exec ERRNO"  its execve failed: nothing ran (the server prints Go's fork/exec text)
 *       "exit N" / "signal N"   the command exited; sent at once, so a daemon it left behind
 *                     delays nothing (Argo returns when the main process is gone and the pipes
 *                     are closed; our relays close ours when every writer has closed its pipe)
 *   - the command's stdout and stderr are pipes, relayed to ours (see struct relay)
 *       "exit N gone" / "signal N gone"   the same, when nothing the command started is left
 *                     (we have no child any more, zombies reaped): we exit right after, and
 *                     the server has no RPC-end SIGTERM to send and no group to watch
 *   - requests are signals, sent to our pid only (we are alone in group W):
 *       SIGTERM  SIGTERM to group C (when it has a live member) and to every live descendant
 *                outside C: what a group SIGTERM reached before, plus the escaped ones
 *       SIGUSR1  SIGKILL to the command's main process (Go's exec.CommandContext on ctx done)
 *       SIGUSR2  SIGKILL to group C and to every descendant, rescanning until none is left (a
 *                process may fork while we kill; a SIGKILLed one cannot fork any more)
 *     The hard kill must go through us: a SIGKILL aimed at us directly would orphan the escaped
 *     processes before anyone killed them. The server sends SIGCONT first (a stopped helper
 *     would not act).
 *   - fd 3 hanging up (the server died) counts as SIGUSR2: no plugin process outlives it.
 *   - we reap every zombie and exit once the command has exited and we have no child left:
 *     descendants all descend from our children, so that means no descendant is left, and our
 *     exit tells the server the whole tree is gone.
 * Descendants are found by scanning /proc (PPid chains from us; zombies skipped). A pid read in
 * a scan is signalled through a pidfd after checking its start time, so a pid reused meanwhile
 * is never hit. We make ourselves non-dumpable so that same-uid code cannot ptrace us or open
 * our /proc files; it can still SIGKILL or SIGSTOP us (see docs/argo-contract.md#process-cleanup, residual limits).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

#define STATUS_FD 3
#define MAX_PID (1 << 22) /* PID_MAX_LIMIT on 64-bit */

struct proc {
  pid_t pid, ppid, pgrp;
  unsigned long long start;
  char state;
};

static pid_t self, root;
static int status_fd = STATUS_FD;

static void report2(const char *what, long n, const char *more) {
  char line[48];
  int len = snprintf(line, sizeof line, "%s %ld%s\n", what, n, more);
  if (status_fd >= 0 && write(status_fd, line, (size_t)len) < 0) {
    /* The server is gone: the hang-up on fd 3 is handled in the loop. */
  }
}

static void report(const char *what, long n) { report2(what, n, ""); }

/* One /proc/<pid>/stat: state, ppid, pgrp, start time. */
static int read_stat(pid_t pid, struct proc *p) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *s = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
  if (!s) return -1;
  char state;
  int ppid, pgrp;
  unsigned long long start;
  /* ") S ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime
   *  cstime priority nice num_threads itrealvalue starttime" */
  if (sscanf(s + 2, "%c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             &state, &ppid, &pgrp, &start) != 4)
    return -1;
  p->pid = pid;
  p->state = state;
  p->ppid = ppid;
  p->pgrp = pgrp;
  p->start = start;
  return 0;
}

static struct proc *procs;
static size_t nprocs, cap_procs;
static unsigned char *ours; /* bitmap over pids: self and our descendants */

/* Our live (non-zombie) descendants, in procs[0..return). */
static size_t scan(void) {
  nprocs = 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid >= MAX_PID) continue;
    if (nprocs == cap_procs) {
      size_t cap = cap_procs ? cap_procs * 2 : 256;
      struct proc *grown = realloc(procs, cap * sizeof *procs);
      if (!grown) break;
      procs = grown;
      cap_procs = cap;
    }
    if (read_stat((pid_t)pid, &procs[nprocs]) == 0 && procs[nprocs].ppid > 0 && procs[nprocs].ppid < MAX_PID) nprocs++;
  }
  closedir(d);
  memset(ours, 0, MAX_PID / 8);
  ours[self / 8] |= (unsigned char)(1 << (self % 8));
#define OURS(p) (ours[(p) / 8] & (1 << ((p) % 8)))
  for (int changed = 1; changed;) {
    changed = 0;
    for (size_t i = 0; i < nprocs; i++) {
      pid_t pid = procs[i].pid;
      if (!OURS(pid) && OURS(procs[i].ppid)) {
        ours[pid / 8] |= (unsigned char)(1 << (pid % 8));
        changed = 1;
      }
    }
  }
  size_t n = 0;
  for (size_t i = 0; i < nprocs; i++)
    if (procs[i].pid != self && OURS(procs[i].pid) && procs[i].state != 'Z' && procs[i].state != 'X') procs[n++] = procs[i];
  return n;
}

/* Signal the process read in a scan, unless its pid now names another process. */
static void signal_verified(const struct proc *p, int sig) {
  int fd = (int)syscall(SYS_pidfd_open, p->pid, 0);
  if (fd < 0) {
    if (errno != ESRCH) kill(p->pid, sig); /* no pidfds (Linux < 5.3, or filtered) */
    return;
  }
  struct proc now;
  if (read_stat(p->pid, &now) == 0 && now.start == p->start) {
    if (syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) < 0 && errno != ESRCH) kill(p->pid, sig);
  }
  close(fd);
}

/* SIGTERM: the command's group as one, and every process that left it. */
static void term_tree(void) {
  size_t n = scan();
  int group_alive = 0;
  for (size_t i = 0; i < n; i++) group_alive |= procs[i].pgrp == root;
  if (group_alive) kill(-root, SIGTERM);
  for (size_t i = 0; i < n; i++)
    if (procs[i].pgrp != root) signal_verified(&procs[i], SIGTERM);
}

/* One round of SIGKILL to everything; returns how many were still alive. */
static size_t kill_tree(void) {
  size_t n = scan();
  for (size_t i = 0; i < n; i++)
    if (procs[i].pgrp == root) {
      kill(-root, SIGKILL);
      break;
    }
  for (size_t i = 0; i < n; i++) signal_verified(&procs[i], SIGKILL);
  return n;
}

static const int CAUGHT[] = {SIGCHLD, SIGTERM, SIGUSR1, SIGUSR2};
static const int IGNORED[] = {SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU};
#define COUNT(a) (sizeof a / sizeof a[0])

static int probe(void) {
  struct proc p;
  if (prctl(PR_SET_CHILD_SUBREAPER, 1)) return perror("cmp-reap: subreaper"), 1;
  if (read_stat(getpid(), &p)) return fprintf(stderr, "cmp-reap: /proc is not readable\n"), 1;
  return 0;
}

/*
 * --init: the runner container's PID 1 (docs/security.md#runner-isolation). Node does not reap children it
 * did not spawn, and every process a run leaves behind is reparented to PID 1 when its parent
 * dies; so PID 1 must be an init. This one runs FILE ARG... as its only child, forwards the stop
 * signals to it, reaps every zombie, and exits with the child's status once the child has exited:
 * the kernel then kills whatever else is left in the PID namespace. Unlike tini it is not
 * dumpable, so same-uid plugin code cannot ptrace PID 1 (which the runner's sweep never kills)
 * to survive there (the runner makes its node process non-dumpable itself: cmp/exec/no-dump.c).
 */
static const int FORWARDED[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

static int init_main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: cmp-reap --init FILE [ARG...]\n");
    return 2;
  }
  prctl(PR_SET_DUMPABLE, 0);
  /* Not PID 1 (e.g. under another init): orphans still come to us. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t caught, none;
  sigemptyset(&caught);
  sigemptyset(&none);
  sigaddset(&caught, SIGCHLD);
  for (size_t i = 0; i < COUNT(FORWARDED); i++) sigaddset(&caught, FORWARDED[i]);
  sigprocmask(SIG_BLOCK, &caught, NULL);
  int sfd = signalfd(-1, &caught, SFD_CLOEXEC);
  if (sfd < 0) return perror("cmp-reap --init: signalfd"), 2;

  pid_t child = fork();
  if (child < 0) return perror("cmp-reap --init: fork"), 2;
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (strchr(argv[2], '/')) execv(argv[2], argv + 2);
    else execvp(argv[2], argv + 2);
    fprintf(stderr, "cmp-reap --init: cannot run %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  for (;;) {
    struct signalfd_siginfo si;
    ssize_t got = read(sfd, &si, sizeof si);
    if (got != (ssize_t)sizeof si) continue;
    if (si.ssi_signo != SIGCHLD) {
      kill(child, (int)si.ssi_signo);
      continue;
    }
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
      if (pid == child) return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
  }
}

/* The command's stdout and stderr are pipes, relayed here to ours (the server's sockets), as
 * argocd-cmp-server's commands write to pipes (Go's exec). Sockets there would hand plugin code a
 * unix socket it did not make, which the traced cache's recorder must then assume could be
 * swapped onto any descriptor (cmp-trace.c, answer_socket). A stream ends when every writer has
 * closed it (the command and whatever inherited it), as the server's pipes did before. */
struct relay {
  int from, to;       /* the pipe's read end; our stdout or stderr (-1 once ended) */
  char buf[1 << 16];
  size_t len, off;    /* bytes read and not yet written */
};
static struct relay relays[2];

static int relay_open(struct relay *r, int fd, int child_end[2]) {
  r->from = r->to = -1;
  if (pipe2(child_end, O_CLOEXEC)) return -1;
  r->from = child_end[0];
  r->to = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (r->to < 0) return -1;
  fcntl(r->from, F_SETFL, O_NONBLOCK);
  fcntl(r->to, F_SETFL, fcntl(r->to, F_GETFL) | O_NONBLOCK);
  return 0;
}

static void relay_end(struct relay *r) {
  if (r->from >= 0) close(r->from);
  if (r->to >= 0) close(r->to);
  r->from = r->to = -1;
}

/* Moves what it can without blocking; the stream ends at the pipe's EOF once all is written. */
static void relay_step(struct relay *r) {
  for (;;) {
    if (r->from < 0) return;
    if (r->off < r->len) {
      ssize_t n = write(r->to, r->buf + r->off, r->len - r->off);
      if (n < 0 && errno == EAGAIN) return;
      if (n < 0) r->off = r->len; /* the server closed it: what follows is dropped */
      else r->off += (size_t)n;
      continue;
    }
    ssize_t n = read(r->from, r->buf, sizeof r->buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) return relay_end(r);
    r->len = (size_t)n;
    r->off = 0;
  }
}

/* The poll entry of a relay: its pipe when its buffer is empty, else our end. */
static struct pollfd relay_poll(const struct relay *r) {
  struct pollfd p = {-1, 0, 0};
  if (r->from < 0) return p;
  if (r->off < r->len) p.fd = r->to, p.events = POLLOUT;
  else p.fd = r->from, p.events = POLLIN;
  return p;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--probe")) return probe();
  if (argc >= 2 && !strcmp(argv[1], "--init")) return init_main(argc, argv);
  if (argc < 3 || fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC) < 0) {
    fprintf(stderr, "usage: cmp-reap FILE ARGV0 [ARG...] (with the status channel on fd 3)\n");
    return 2;
  }
  self = getpid();
  sigset_t caught, none;
  sigemptyset(&caught);
  sigemptyset(&none);
  for (size_t i = 0; i < COUNT(CAUGHT); i++) sigaddset(&caught, CAUGHT[i]);
  sigprocmask(SIG_BLOCK, &caught, NULL);
  for (size_t i = 0; i < COUNT(IGNORED); i++) signal(IGNORED[i], SIG_IGN);
  int sfd = signalfd(-1, &caught, SFD_CLOEXEC | SFD_NONBLOCK);
  int errpipe[2], out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  ours = calloc(MAX_PID / 8, 1);
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) || sfd < 0 || !ours || pipe2(errpipe, O_CLOEXEC) ||
      relay_open(&relays[0], 1, out_pipe) || relay_open(&relays[1], 2, err_pipe)) {
    report("exec", errno ? errno : ENOMEM);
    return 2;
  }
  prctl(PR_SET_DUMPABLE, 0);

  root = fork();
  if (root < 0) {
    report("exec", errno);
    return 2;
  }
  if (root == 0) {
    /* The command: as the server's spawn would have started it, in a group of its own. */
    setpgid(0, 0);
    for (size_t i = 0; i < COUNT(IGNORED); i++) signal(IGNORED[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, NULL);
    close(errpipe[0]);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    if (strchr(argv[1], '/')) execv(argv[1], argv + 2);
    else execvp(argv[1], argv + 2);
    int err = errno;
    if (write(errpipe[1], &err, sizeof err) < 0) {}
    _exit(127);
  }
  close(errpipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  int err;
  ssize_t got;
  while ((got = read(errpipe[0], &err, sizeof err)) < 0 && errno == EINTR) {}
  close(errpipe[0]);
  if (got == (ssize_t)sizeof err) {
    waitpid(root, NULL, 0);
    report("exec", err);
    return 0;
  }
  report("pid", root);
  /* Hold the server's stdout/stderr only through the relays: it waits for them to close. */
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 1);
    dup2(null, 2);
    close(null);
  }

  int root_done = 0, killing = 0;
  for (;;) {
    int st, root_st = 0, root_now = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
      if (pid == root) {
        root_done = root_now = 1;
        root_st = st;
      }
    int none_left = pid < 0 && errno == ECHILD;
    /* Reported once every zombie is reaped, so that "gone" is known: descendants all descend
     * from our children (orphans are reparented to us before their parent's exit is seen). */
    if (root_now) {
      int code = WIFSIGNALED(root_st) ? WTERMSIG(root_st) : WEXITSTATUS(root_st);
      report2(WIFSIGNALED(root_st) ? "signal" : "exit", code, none_left ? " gone" : "");
    }
    for (int i = 0; i < 2; i++) relay_step(&relays[i]);
    if (none_left && root_done) {
      /* No writer of ours is left: what they wrote is in the pipes. A holder elsewhere (a
       * descriptor passed out) is not waited for. */
      for (int i = 0; i < 2; i++) {
        while (relays[i].from >= 0 && relays[i].off < relays[i].len) {
          struct pollfd p = relay_poll(&relays[i]);
          if (poll(&p, 1, 1000) <= 0) break; /* the server stopped reading */
          relay_step(&relays[i]);
        }
        relay_end(&relays[i]);
      }
      break;
    }
    if (killing) kill_tree();

    struct pollfd fds[4] = {{sfd, POLLIN, 0}, {status_fd, 0, 0}, relay_poll(&relays[0]), relay_poll(&relays[1])};
    if (poll(fds, 4, killing ? 10 : -1) < 0) continue;
    if (fds[1].revents & (POLLHUP | POLLERR | POLLNVAL)) {
      killing = 1;
      status_fd = -1;
    }
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
      switch (si.ssi_signo) {
        case SIGTERM:
          term_tree();
          break;
        case SIGUSR1:
          if (!root_done) kill(root, SIGKILL);
          break;
        case SIGUSR2:
          killing = 1;
          break;
      }
    }
  }
  return 0;
}
