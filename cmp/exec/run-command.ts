import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, closeSync, constants as fsConstants, openSync, readSync, statSync } from 'node:fs';
import type { Socket } from 'node:net';
import path from 'node:path';
import { getSystemErrorName } from 'node:util';
import { ctxErr, type Ctx } from '../context.js';
import { CmpError, ourError } from '../errors.js';
import { formatGoDuration } from '../config/go-duration.js';
import { spawnEnv } from './env.js';
import { formatArgs, goQuote } from './go-quote.js';
import { forkExecText, goTrimSpace, processStateText, signalText } from './go-exec-errors.js';
import { addReaper, groupAlive, signalReapedCommand, reapGroup, reaperExited, reaperTreeGone, setReaperGroup, signalGroup, track, untrack } from './process-groups.js';
import { usableReaper } from './reaper.js';

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
}

/** Argo (v2.9+) gives a command's process group this long between SIGTERM and SIGKILL. */
export const GROUP_CLEANUP_MS = 5_000;
/** Stderr is only used for error messages: keep this much of its start and of its end. */
const STDERR_KEEP_HALF = 32 * 1024;

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
 * Wait for exit and both pipes closing, enforcing the deadline, the timeouts and the limits.
 * Under cmp-reap, `child` is the helper: the command's exit (or failed exec) comes on fd 3, and
 * group signals go through the helper (process-groups.ts), so that processes that left the
 * command's group get them too.
 */
function supervise(child: ChildProcess, file: string, opts: RunOptions, reaped: boolean, wrapped: boolean): Promise<Buffer> {
  const { argv, ctx, execTimeoutMs, maxOutputBytes } = opts;
  const fatalTimeoutMs = Math.max(0, opts.fatalTimeoutMs);
  return new Promise<Buffer>((resolve, reject) => {
    child.once('error', (err) => {
      // Only a failed spawn leaves no pid; later errors (a failed kill) change nothing.
      if (child.pid === undefined) reject(new CmpError(startErrorText(file, err)));
    });
    if (child.pid === undefined) return;
    const pgid: number = child.pid;
    if (reaped) addReaper(pgid);
    track(pgid);
    // Only cmp-reap's own exit shows the whole tree gone; without it a process may live on unseen.
    ctx.trees?.started();
    child.once('exit', (code, signal) => ctx.trees?.ended(reaped && code === 0 && signal === null));

    const stdout: Buffer[] = [];
    let stdoutBytes = 0;
    const stderr = new HeadTail(STDERR_KEEP_HALF);
    let overflow = false;
    let timedOut = false;
    let fatal = false;
    // The main process exited; `failure` is its Go ProcessState text unless it exited 0.
    let exited = false;
    let failure: string | undefined;
    let pipesOpen = 2;
    let finished = false;
    // The ctx fired: the group is being reaped; `ctxKilled` if the main process was still running.
    let ctxDone = false;
    let ctxKilled = false;
    const timers: NodeJS.Timeout[] = [];

    // Pipes held open by a process that escaped the group must not keep us waiting forever.
    const dropPipes = () => {
      child.stdout!.destroy();
      child.stderr!.destroy();
    };
    child.stdout!.on('data', (chunk: Buffer) => {
      if (overflow) return;
      stdoutBytes += chunk.length;
      if (stdoutBytes > maxOutputBytes) {
        overflow = true;
        stdout.length = 0;
        signalGroup(pgid, 'SIGKILL');
        dropPipes();
        return;
      }
      stdout.push(chunk);
    });
    child.stderr!.on('data', (chunk: Buffer) => stderr.push(chunk));
    const pipeClosed = () => {
      pipesOpen--;
      maybeFinish();
    };
    child.stdout!.once('close', pipeClosed);
    child.stderr!.once('close', pipeClosed);
    const onExit = (text: string | undefined) => {
      if (exited) return;
      exited = true;
      failure = text;
      maybeFinish();
    };

    let killMain: () => void;
    if (!reaped) {
      child.once('exit', (code, signal) => onExit(code === 0 ? undefined : processStateText(code, signal)));
      killMain = () => child.kill(wrapped ? 'SIGUSR1' : 'SIGKILL');
    } else {
      killMain = () => {
        if (wrapped && signalReapedCommand(pgid, 'SIGUSR1')) return;
        // SIGUSR1: the helper SIGKILLs the command's main process (it knows whether it still runs).
        for (const sig of ['SIGCONT', 'SIGUSR1'] as const) {
          try {
            process.kill(pgid, sig);
          } catch {
            // the helper is gone: so is the command
          }
        }
      };
      followReaper(child, pgid, {
        exit: onExit,
        execFailed: (err) => {
          if (finished) return;
          finished = true;
          for (const t of timers) clearTimeout(t);
          ctx.signal.removeEventListener('abort', onAbort);
          dropPipes();
          untrack(pgid);
          reject(new CmpError(forkExecText(file, err)));
        },
      });
    }

    // Argo: exec.CommandContext SIGKILLs the main process while the plugin's goroutine sends
    // SIGTERM to the group and SIGKILL 5 s later — both at once, so either signal may win.
    // Once the main process has exited, Go's Wait no longer looks at ctx: killing the group just
    // closes the pipes, and the exit status stands.
    const onAbort = () => {
      ctxDone = true;
      ctxKilled = !exited;
      if (ctxKilled) killMain();
      void reapGroup(pgid, GROUP_CLEANUP_MS);
      timers.push(setTimeout(dropPipes, GROUP_CLEANUP_MS + 1_000));
    };
    ctx.signal.addEventListener('abort', onAbort, { once: true });

    if (execTimeoutMs > 0) {
      timers.push(
        setTimeout(() => {
          if (ctxDone) return;
          timedOut = true;
          signalGroup(pgid, 'SIGTERM');
          timers.push(
            setTimeout(() => {
              fatal = true;
              signalGroup(pgid, 'SIGKILL');
              dropPipes();
            }, fatalTimeoutMs),
          );
        }, execTimeoutMs),
      );
    }

    function maybeFinish(): void {
      if (!exited || pipesOpen > 0 || finished) return;
      finished = true;
      for (const t of timers) clearTimeout(t);
      ctx.signal.removeEventListener('abort', onAbort);
      // Daemons left in the group (and, under cmp-reap, those that left it) get what Argo sends
      // the group at RPC end: SIGTERM, SIGKILL 5 s later.
      if (!ctxDone) {
        if (groupAlive(pgid)) void reapGroup(pgid, GROUP_CLEANUP_MS);
        else untrack(pgid);
      }
      const args = formatArgs(argv);
      if (overflow) {
        reject(ourError('outputTooLarge', maxOutputBytes));
      } else if (fatal) {
        reject(new CmpError(`\`${args}\` failed fatal timeout after ${formatGoDuration(execTimeoutMs + fatalTimeoutMs)}`));
      } else if (timedOut) {
        reject(new CmpError(`\`${args}\` failed timeout after ${formatGoDuration(execTimeoutMs)}`));
      } else if (failure !== undefined || ctxKilled) {
        // Go (1.20+) reports ctx.Err() when the kill was delivered but the process still exited 0.
        const cause = failure ?? ctxErr(ctx)!.message;
        const trimmed = goTrimSpace(stderr.text());
        reject(new CmpError(`\`${args}\` failed ${cause}${trimmed === '' ? '' : `: ${trimmed}`}`));
      } else {
        const out = Buffer.concat(stdout, stdoutBytes);
        resolve(out.at(-1) === 0x0a ? out.subarray(0, -1) : out);
      }
    }
    // Last, so that a throwing callback cannot leave the process unsupervised.
    opts.onSpawn?.(pgid);
  });
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

/** Keeps the first and last `half` bytes of a stream, counting what was dropped between. */
class HeadTail {
  private readonly head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  private total = 0;

  constructor(private readonly half: number) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.headBytes < this.half) {
      const take = chunk.subarray(0, this.half - this.headBytes);
      this.head.push(take);
      this.headBytes += take.length;
      chunk = chunk.subarray(take.length);
    }
    if (chunk.length === 0) return;
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    while (this.tailBytes - this.tail[0]!.length >= this.half) this.tailBytes -= this.tail.shift()!.length;
  }

  /** The whole text when nothing was dropped (decoded in one piece, so UTF-8 stays intact). */
  text(): string {
    const head = Buffer.concat(this.head, this.headBytes);
    const tailAll = Buffer.concat(this.tail, this.tailBytes);
    const tail = tailAll.subarray(Math.max(0, tailAll.length - this.half));
    const omitted = this.total - head.length - tail.length;
    if (omitted === 0) return Buffer.concat([head, tail]).toString('utf8');
    return `${head.toString('utf8')}\n... [${omitted} bytes of stderr omitted] ...\n${tail.toString('utf8')}`;
  }
}
