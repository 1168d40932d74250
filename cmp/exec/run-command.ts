import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, closeSync, constants as fsConstants, openSync, readSync, statSync } from 'node:fs';
import type { Socket } from 'node:net';
import path from 'node:path';
import { getSystemErrorName } from 'node:util';
import { ctxErr, type Ctx } from '../context.js';
import { CmpError } from '../errors.js';
import { spawnEnv } from './env.js';
import { goQuote } from '../go/go-quote.js';
import { forkExecText, processStateText, signalText } from '../go/go-exec-errors.js';
import { addReaper, groupAlive, signalReapedCommand, reapGroup, reaperExited, reaperTreeGone, setReaperGroup, signalGroup, track, untrack } from './process-groups.js';
import { usableReaper } from './reaper.js';
import { GROUP_CLEANUP_MS, Supervision, type SupervisionState } from './supervision.js';

export { GROUP_CLEANUP_MS, SUPERVISION_STATES, type SupervisionState } from './supervision.js';

export interface RunOptions {
  argv: string[];
  cwd: string;
  /** `NAME=VALUE` list from `commandEnv` (raw: de-duplicated and NUL-checked at start). */
  env: string[];
  ctx: Ctx;
  /** ARGOCD_EXEC_TIMEOUT: SIGTERM to the group after this long; <= 0 disables it. */
  execTimeoutMs: number;
  /** ARGOCD_EXEC_FATAL_TIMEOUT: SIGKILL to the group this long after that SIGTERM (<= 0: at once). */
  fatalTimeoutMs: number;
  /** Stdout beyond this fails the command (memory bound). */
  maxOutputBytes: number;
  /** The server's PATH used to look up argv[0] (default: this process's PATH). */
  pathEnv?: string;
  /**
   * Called once the process runs with the id its process tree is tracked and signalled under
   * (process-groups.ts): the command's pid, which is also its pgid, or under cmp-reap the
   * helper's pid (its own group of one), which lives exactly as long as anything it started.
   */
  onSpawn?(pid: number): void;
  /** cmp-reap to run the command under, or false to run it plainly (group kills only). Default: the built one when usable. */
  reaper?: string | false;
  /**
   * Run the command under another program (the traced cache's recorder): given the argv, the
   * looked-up file and the final env, return what to spawn instead, or undefined to run it as is.
   * The wrapper must SIGKILL the command when it gets SIGUSR1: that is how the command's main
   * process is killed on ctx done, so that the wrapper itself lives on while the rest of the
   * group has its grace period (see cmp-trace.c).
   */
  wrap?(argv: readonly string[], file: string, cwd: string, env: Readonly<Record<string, string>>): { file: string; args: string[]; argv0: string } | undefined;
  /** Told of each state the command's supervision enters, `running` first (supervision.ts; for tests: must not throw). */
  onState?(state: SupervisionState): void;
}

/**
 * Run one plugin command as argocd-cmp-server's runCommand does (docs/argo-contract.md#running-commands) and return its
 * stdout minus one trailing newline. Errors before the process runs are Go's raw start errors;
 * a failed run is a CmdError `` `<args>` failed <cause>[: <stderr>]``. On top of Argo, the
 * command runs under ARGOCD_EXEC_TIMEOUT/ARGOCD_EXEC_FATAL_TIMEOUT (docs/argo-contract.md#deliberate-differences) and its
 * stdout is bounded by `maxOutputBytes`.
 */
export async function runCommand(opts: RunOptions): Promise<Buffer> {
  const reaper = opts.reaper ?? (await usableReaper());
  const { argv, cwd, ctx } = opts;
  if (argv.length === 0) throw new CmpError('Command is empty');
  const name = argv[0]!;
  // Go's exec.Cmd.Start order: lookup error, then ctx, then env, then the fork itself.
  const file = lookPath(name, opts.pathEnv ?? process.env.PATH ?? '');
  const done = ctxErr(ctx);
  if (done) throw done;
  const env = spawnEnv(opts.env);
  checkExecFormat(file, cwd);

  const wrapped = opts.wrap?.(argv, file, cwd, env);
  const target = wrapped ?? { file, args: argv.slice(1), argv0: name };
  let child: ChildProcess;
  try {
    child = reaper
      ? // cmp-reap forks and execs the command (see cmp-reap.c); fd 3 brings its status back.
        spawn(reaper, [target.file, target.argv0, ...target.args], { argv0: 'cmp-reap', cwd, env, stdio: ['ignore', 'pipe', 'pipe', 'pipe'], detached: true })
      : spawn(target.file, target.args, { argv0: target.argv0, cwd, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  } catch (err) {
    throw new CmpError(startErrorText(file, err));
  }
  return await supervise(child, file, opts, reaper !== undefined && reaper !== false, wrapped !== undefined);
}

/**
 * Wait for exit and both pipes closing, enforcing the deadline, the timeouts and the limits:
 * the process's events drive a `Supervision` (supervision.ts). Under cmp-reap, `child` is the
 * helper: the command's exit (or failed exec) comes on fd 3, and group signals go through the
 * helper (process-groups.ts), so that processes that left the command's group get them too.
 */
function supervise(child: ChildProcess, file: string, opts: RunOptions, reaped: boolean, wrapped: boolean): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    child.once('error', (err) => {
      // Only a failed spawn leaves no pid; later errors (a failed kill) change nothing.
      if (child.pid === undefined) reject(new CmpError(startErrorText(file, err)));
    });
    if (child.pid === undefined) return;
    const pgid: number = child.pid;
    const { ctx } = opts;
    if (reaped) addReaper(pgid);
    track(pgid);
    // Only cmp-reap's own exit shows the whole tree gone; without it a process may live on unseen.
    ctx.trees?.started();
    child.once('exit', (code, signal) => ctx.trees?.ended(reaped && code === 0 && signal === null));

    const timers: NodeJS.Timeout[] = [];
    const onAbort = () => machine.aborted();
    const machine = new Supervision({ ...opts, file, fatalTimeoutMs: Math.max(0, opts.fatalTimeoutMs) }, {
      ...groupEffects(child, pgid, reaped, wrapped),
      after: (ms, fn) => void timers.push(setTimeout(fn, ms)),
      stop: () => {
        for (const t of timers) clearTimeout(t);
        ctx.signal.removeEventListener('abort', onAbort);
      },
      resolve,
      reject,
      onState: opts.onState,
    });
    child.stdout!.on('data', (chunk: Buffer) => machine.stdout(chunk));
    child.stderr!.on('data', (chunk: Buffer) => machine.stderr(chunk));
    child.stdout!.once('close', () => machine.pipeClosed());
    child.stderr!.once('close', () => machine.pipeClosed());
    if (!reaped) child.once('exit', (code, signal) => machine.exited(code === 0 ? undefined : processStateText(code, signal)));
    else followReaper(child, pgid, { exit: (failure) => machine.exited(failure), execFailed: (err) => machine.execFailed(err) });
    ctx.signal.addEventListener('abort', onAbort, { once: true });
    machine.start();
    // Last, so that a throwing callback cannot leave the process unsupervised.
    opts.onSpawn?.(pgid);
  });
}

/** The supervision's effects on the command's processes, tracked and signalled under `pgid`. */
function groupEffects(child: ChildProcess, pgid: number, reaped: boolean, wrapped: boolean) {
  return {
    signalGroup: (signal: NodeJS.Signals) => signalGroup(pgid, signal),
    // SIGUSR1 to a wrapper: it SIGKILLs the command and lives on (see RunOptions.wrap).
    killMain: reaped ? () => killReapedMain(pgid, wrapped) : () => void child.kill(wrapped ? 'SIGUSR1' : 'SIGKILL'),
    reapGroup: () => void reapGroup(pgid, GROUP_CLEANUP_MS),
    releaseGroup: () => (groupAlive(pgid) ? void reapGroup(pgid, GROUP_CLEANUP_MS) : untrack(pgid)),
    untrack: () => untrack(pgid),
    // Pipes held open by a process that escaped the group must not keep us waiting forever.
    dropPipes: () => {
      child.stdout!.destroy();
      child.stderr!.destroy();
    },
  };
}

/** Kill the main process of a command run under cmp-reap (`pid`: the helper's). */
function killReapedMain(pid: number, wrapped: boolean): void {
  if (wrapped && signalReapedCommand(pid, 'SIGUSR1')) return;
  // SIGUSR1: the helper SIGKILLs the command's main process (it knows whether it still runs).
  for (const sig of ['SIGCONT', 'SIGUSR1'] as const) {
    try {
      process.kill(pid, sig);
    } catch {
      // the helper is gone: so is the command
    }
  }
}

/**
 * Read cmp-reap's status lines (fd 3, see cmp-reap.c) and its own exit. A helper that dies
 * without reporting (killed before it could, or by the command itself) stands for the command:
 * its exit is the command's.
 */
function followReaper(
  child: ChildProcess,
  pid: number,
  on: { exit(failure: string | undefined): void; execFailed(err: NodeJS.ErrnoException): void },
): void {
  const status = child.stdio[3] as Socket;
  let reported = false;
  let helperExit: string | undefined | null = null;
  let statusClosed = false;
  let pending = '';
  const line = (text: string) => {
    const [what, arg, gone] = text.split(' ');
    const n = Number(arg);
    if (!Number.isInteger(n) || reported) return;
    if (what === 'pid') return setReaperGroup(pid, n);
    // "exit N gone": nothing the command started is left and the helper is exiting; known
    // before the exit is handled, so that the end of the command needs no reaping.
    if (gone === 'gone' && (what === 'exit' || what === 'signal')) reaperTreeGone(pid);
    reported = true;
    if (what === 'exec') on.execFailed(errnoError(n));
    else if (what === 'exit') on.exit(n === 0 ? undefined : processStateText(n, null));
    else if (what === 'signal') on.exit(signalText(n));
    else reported = false;
  };
  const orphaned = () => {
    if (helperExit !== null && statusClosed && !reported) on.exit(helperExit);
  };
  status.setEncoding('latin1');
  status.on('data', (chunk: string) => {
    pending += chunk;
    for (let i = pending.indexOf('\n'); i >= 0; i = pending.indexOf('\n')) {
      line(pending.slice(0, i));
      pending = pending.slice(i + 1);
    }
    // The command is over: a helper still waiting for daemons must not keep the server alive.
    if (reported) {
      status.unref();
      child.unref();
    }
  });
  status.on('error', () => {}); // its 'close' follows: the helper's exit then says what happened
  status.once('close', () => {
    statusClosed = true;
    orphaned();
  });
  child.once('exit', (code, signal) => {
    reaperExited(pid);
    helperExit = code === 0 ? undefined : processStateText(code, signal);
    orphaned();
  });
}

/** An errno number (as cmp-reap reports it) as the error Node's spawn would have thrown. */
function errnoError(errno: number): NodeJS.ErrnoException {
  let code: string | undefined;
  try {
    code = getSystemErrorName(-errno);
  } catch {
    code = undefined; // an errno libuv has no name for: the message has the number
  }
  return Object.assign(new Error(`errno ${errno}`), { errno: -errno, code });
}

/**
 * Go's exec.LookPath, against the server's PATH: names with a `/` are used as given (relative
 * to the command's cwd); others are searched, an empty PATH element meaning `.`.
 */
function lookPath(name: string, pathEnv: string): string {
  if (name === '') throw new CmpError('exec: no command');
  if (name.includes('/')) return name;
  for (const entry of pathEnv === '' ? [] : pathEnv.split(':')) {
    const candidate = path.join(entry === '' ? '.' : entry, name);
    if (!isExecutable(candidate)) continue;
    if (!path.isAbsolute(candidate)) {
      throw new CmpError(`exec: ${goQuote(name)}: cannot run executable found relative to current directory`);
    }
    return candidate;
  }
  throw new CmpError(`exec: ${goQuote(name)}: executable file not found in $PATH`);
}

/** Go's findExecutable: exists, is not a directory, passes access(X_OK). */
function isExecutable(file: string): boolean {
  try {
    if (statSync(file).isDirectory()) return false;
    accessSync(file, fsConstants.X_OK);
    return true;
  } catch {
    return false; // not there or not permitted: not executable
  }
}

/**
 * libuv's execvp runs a script without `#!` through /bin/sh, whereas Go's execve fails with
 * ENOEXEC: refuse an executable regular file that is neither `#!` nor ELF, as Argo would.
 * Anything we cannot read is left to the spawn to report.
 */
function checkExecFormat(file: string, cwd: string): void {
  const full = path.resolve(cwd, file);
  let fd: number | undefined;
  const head = Buffer.alloc(4);
  let n: number;
  try {
    const st = statSync(full);
    if (!st.isFile() || (st.mode & 0o111) === 0) return;
    fd = openSync(full, 'r');
    n = readSync(fd, head, 0, 4, 0);
  } catch {
    return; // unreadable: the spawn reports it (see above)
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  const magic = head.subarray(0, n);
  if (magic.subarray(0, 2).toString('latin1') === '#!' || magic.toString('latin1') === '\x7fELF') return;
  throw new CmpError(`fork/exec ${file}: exec format error`);
}

function startErrorText(file: string, err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  // Node's own argument checks (a NUL in argv or cwd) have no errno; Go's syscall says EINVAL.
  if (typeof e.errno !== 'number') return `fork/exec ${file}: invalid argument`;
  return forkExecText(file, e);
}
