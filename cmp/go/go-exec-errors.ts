import { constants } from 'node:os';
import { getSystemErrorMap } from 'node:util';

/** Go's linux signal names (syscall.Signal.String), as `ProcessState.String()` prints them. */
const GO_SIGNAL_TEXT: Record<string, string> = {
  SIGHUP: 'hangup',
  SIGINT: 'interrupt',
  SIGQUIT: 'quit',
  SIGILL: 'illegal instruction',
  SIGTRAP: 'trace/breakpoint trap',
  SIGABRT: 'aborted',
  SIGIOT: 'aborted',
  SIGBUS: 'bus error',
  SIGFPE: 'floating point exception',
  SIGKILL: 'killed',
  SIGUSR1: 'user defined signal 1',
  SIGSEGV: 'segmentation fault',
  SIGUSR2: 'user defined signal 2',
  SIGPIPE: 'broken pipe',
  SIGALRM: 'alarm clock',
  SIGTERM: 'terminated',
  SIGSTKFLT: 'stack fault',
  SIGCHLD: 'child exited',
  SIGCONT: 'continued',
  SIGSTOP: 'stopped (signal)',
  SIGTSTP: 'stopped',
  SIGTTIN: 'stopped (tty input)',
  SIGTTOU: 'stopped (tty output)',
  SIGURG: 'urgent I/O condition',
  SIGXCPU: 'CPU time limit exceeded',
  SIGXFSZ: 'file size limit exceeded',
  SIGVTALRM: 'virtual timer expired',
  SIGPROF: 'profiling timer expired',
  SIGWINCH: 'window changed',
  SIGIO: 'I/O possible',
  SIGPOLL: 'I/O possible',
  SIGPWR: 'power failure',
  SIGSYS: 'bad system call',
};

/**
 * Go's `ProcessState.String()` for a finished process: `exit status N` or `signal: <name>`
 * (Go prints `signal <n>` for signals outside its table). The `(core dumped)` suffix is not
 * reproduced: Node does not report the core-dump bit.
 */
export function processStateText(code: number | null, signal: NodeJS.Signals | null): string {
  if (signal === null) return `exit status ${code ?? -1}`;
  const known = GO_SIGNAL_TEXT[signal];
  if (known !== undefined) return `signal: ${known}`;
  const n = (constants.signals as Record<string, number | undefined>)[signal];
  return `signal: signal ${n ?? signal}`;
}

/** `ProcessState.String()` for a death by signal number `n` (as a wait status gives it). */
export function signalText(n: number): string {
  const name = Object.entries(constants.signals).find(([, v]) => v === n)?.[0];
  return name === undefined ? `signal: signal ${n}` : processStateText(null, name as NodeJS.Signals);
}

/** Go's (glibc-derived) errno texts for the errors a start can hit; libuv's wording otherwise. */
const GO_ERRNO_TEXT: Record<string, string> = {
  ENOENT: 'no such file or directory',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  ENOEXEC: 'exec format error',
  ENOTDIR: 'not a directory',
  EISDIR: 'is a directory',
  E2BIG: 'argument list too long',
  ETXTBSY: 'text file busy',
  ELOOP: 'too many levels of symbolic links',
  ENAMETOOLONG: 'file name too long',
  ENOMEM: 'cannot allocate memory',
  EAGAIN: 'resource temporarily unavailable',
  EMFILE: 'too many open files',
  ENFILE: 'too many open files in system',
  EIO: 'input/output error',
};

/** `fork/exec <path>: <errno text>`, Go's os.StartProcess error for a failed spawn. */
export function forkExecText(path: string, err: NodeJS.ErrnoException): string {
  const code = err.code ?? '';
  let text = GO_ERRNO_TEXT[code];
  if (text === undefined && typeof err.errno === 'number') text = getSystemErrorMap().get(err.errno)?.[1];
  return `fork/exec ${path}: ${text ?? err.message}`;
}

/** Go's unicode.IsSpace (JS `\s` differs: it has U+FEFF and lacks U+0085). All are BMP. */
function isGoSpace(c: number): boolean {
  if (c <= 0xff) return (c >= 0x09 && c <= 0x0d) || c === 0x20 || c === 0x85 || c === 0xa0;
  return (
    c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000
  );
}

/** Go's strings.TrimSpace (a loop, not a regex: `\s+$` is quadratic on long inner runs). */
export function goTrimSpace(s: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && isGoSpace(s.charCodeAt(start))) start++;
  while (end > start && isGoSpace(s.charCodeAt(end - 1))) end--;
  return s.slice(start, end);
}
