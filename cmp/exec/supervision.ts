import { ctxErr, type Ctx } from '../context.js';
import { CmpError, ourError } from '../errors.js';
import { formatGoDuration } from '../go/go-duration.js';
import { forkExecText, goTrimSpace } from '../go/go-exec-errors.js';
import { formatArgs } from '../go/go-quote.js';

/** Argo (v2.9+) gives a command's process group this long between SIGTERM and SIGKILL. */
export const GROUP_CLEANUP_MS = 5_000;
/** Stderr is only used for error messages: keep this much of its start and of its end. */
const STDERR_KEEP_HALF = 32 * 1024;

/**
 * The states of one command's supervision. Which of them the command ends in (the state before
 * `done`) decides the outcome, in this order of precedence:
 * - `overflowed`: stdout passed the limit; the group got SIGKILL and the pipes were dropped.
 * - `killing`: the fatal timeout fired after `terminating`; the group got SIGKILL.
 * - `terminating`: the exec timeout fired; the group got SIGTERM, SIGKILL follows after the fatal timeout.
 * - `cancelled`: the ctx fired while nothing above had happened; the group is being reaped.
 * - `running`: the main process runs (or its exit is not known yet).
 * - `exited-draining`: the main process exited; something it left still holds stdout or stderr open.
 * - `done`: the result is settled; nothing changes any more.
 * The main process's exit is recorded in every state, but only moves `running` on (to
 * `exited-draining`, or to `done` when the pipes are closed already).
 */
export const SUPERVISION_STATES = ['running', 'exited-draining', 'terminating', 'killing', 'overflowed', 'cancelled', 'done'] as const;
export type SupervisionState = (typeof SUPERVISION_STATES)[number];

/** The command being supervised and its bounds. */
export interface SupervisionSpec {
  argv: readonly string[];
  /** The looked-up file (for the fork/exec error text). */
  file: string;
  ctx: Ctx;
  /** <= 0: no exec timeout. */
  execTimeoutMs: number;
  /** >= 0: SIGKILL this long after the exec timeout's SIGTERM. */
  fatalTimeoutMs: number;
  maxOutputBytes: number;
}

/** What the supervision does to the world: real processes in run-command.ts, fakes in tests. */
export interface SupervisionEffects {
  /** Signal the command's whole process tree. */
  signalGroup(signal: 'SIGTERM' | 'SIGKILL'): void;
  /** Kill the main process only (the ctx fired while it ran). */
  killMain(): void;
  /** The group gets SIGTERM, then SIGKILL `GROUP_CLEANUP_MS` later. */
  reapGroup(): void;
  /** The command is over: reap what is left of its group, or forget the group if nothing is. */
  releaseGroup(): void;
  /** Forget the group without signalling it (the command never ran). */
  untrack(): void;
  /** Stop reading stdout and stderr: their 'close' follows. */
  dropPipes(): void;
  /** Run `fn` after `ms` unless `stop` came first. */
  after(ms: number, fn: () => void): void;
  /** Cancel the timers and stop listening to the ctx. */
  stop(): void;
  resolve(stdout: Buffer): void;
  reject(err: Error): void;
  /** Told of every state entered, `running` first (tests name the sequence). */
  onState?(state: SupervisionState): void;
}

/**
 * One command's supervision as a state machine: each event (output, a pipe closing, the exit,
 * a timer, the ctx) is a transition method; all the state is in this object.
 */
export class Supervision {
  state: SupervisionState = 'running';
  /** The main process's exit: `failure` is its Go ProcessState text unless it exited 0. */
  exit: { failure: string | undefined } | undefined;
  pipesOpen = 2;
  /** The ctx fired: the group is being reaped; `ctxKilled` if the main process was still running. */
  ctxDone = false;
  ctxKilled = false;
  private stdoutChunks: Buffer[] = [];
  private stdoutBytes = 0;
  private readonly stderrKept = new HeadTail(STDERR_KEEP_HALF);

  constructor(
    private readonly spec: SupervisionSpec,
    private readonly fx: SupervisionEffects,
  ) {}

  /** The process runs and its events are wired: arm the exec timeout. */
  start(): void {
    if (this.spec.execTimeoutMs > 0) this.fx.after(this.spec.execTimeoutMs, () => this.execTimeout());
    this.fx.onState?.('running');
  }

  stdout(chunk: Buffer): void {
    if (this.state === 'overflowed' || this.state === 'done') return;
    this.stdoutBytes += chunk.length;
    if (this.stdoutBytes <= this.spec.maxOutputBytes) {
      this.stdoutChunks.push(chunk);
      return;
    }
    this.enter('overflowed');
    this.stdoutChunks = [];
    this.fx.signalGroup('SIGKILL');
    this.fx.dropPipes();
  }

  stderr(chunk: Buffer): void {
    this.stderrKept.push(chunk);
  }

  pipeClosed(): void {
    this.pipesOpen--;
    this.maybeFinish();
  }

  exited(failure: string | undefined): void {
    if (this.exit) return;
    this.exit = { failure };
    if (this.state === 'running' && this.pipesOpen > 0) this.enter('exited-draining');
    this.maybeFinish();
  }

  /** cmp-reap could not exec the command: the raw fork/exec error, as Go's Start gives it. */
  execFailed(err: NodeJS.ErrnoException): void {
    if (this.state === 'done') return;
    this.enter('done');
    this.fx.stop();
    this.fx.dropPipes();
    this.fx.untrack();
    this.fx.reject(new CmpError(forkExecText(this.spec.file, err)));
  }

  /**
   * Argo: exec.CommandContext SIGKILLs the main process while the plugin's goroutine sends
   * SIGTERM to the group and SIGKILL 5 s later — both at once, so either signal may win.
   * Once the main process has exited, Go's Wait no longer looks at ctx: killing the group just
   * closes the pipes, and the exit status stands.
   */
  aborted(): void {
    if (this.state === 'done') return;
    this.ctxDone = true;
    this.ctxKilled = this.exit === undefined;
    if (this.state === 'running' || this.state === 'exited-draining') this.enter('cancelled');
    if (this.ctxKilled) this.fx.killMain();
    this.fx.reapGroup();
    this.fx.after(GROUP_CLEANUP_MS + 1_000, () => this.fx.dropPipes());
  }

  /** ARGOCD_EXEC_TIMEOUT: SIGTERM to the group, SIGKILL after the fatal timeout. */
  execTimeout(): void {
    if (this.ctxDone || this.state === 'done') return;
    if (this.state === 'running' || this.state === 'exited-draining') this.enter('terminating');
    this.fx.signalGroup('SIGTERM');
    this.fx.after(this.spec.fatalTimeoutMs, () => this.fatalTimeout());
  }

  /** ARGOCD_EXEC_FATAL_TIMEOUT: SIGKILL to the group, and no more waiting for its pipes. */
  fatalTimeout(): void {
    if (this.state === 'done') return;
    if (this.state === 'terminating') this.enter('killing');
    this.fx.signalGroup('SIGKILL');
    this.fx.dropPipes();
  }

  private enter(state: SupervisionState): void {
    this.state = state;
    this.fx.onState?.(state);
  }

  /** Done once the main process exited and both pipes closed. */
  private maybeFinish(): void {
    if (!this.exit || this.pipesOpen > 0 || this.state === 'done') return;
    const last = this.state;
    this.enter('done');
    this.fx.stop();
    // Daemons left in the group (and, under cmp-reap, those that left it) get what Argo sends
    // the group at RPC end: SIGTERM, SIGKILL 5 s later.
    if (!this.ctxDone) this.fx.releaseGroup();
    const err = this.failure(last, this.exit.failure);
    if (err) return this.fx.reject(err);
    const out = Buffer.concat(this.stdoutChunks, this.stdoutBytes);
    this.fx.resolve(out.at(-1) === 0x0a ? out.subarray(0, -1) : out);
  }

  /** The error the command ends with, given the state it was in, or undefined for its stdout. */
  private failure(last: SupervisionState, exitFailure: string | undefined): Error | undefined {
    const { argv, ctx, execTimeoutMs, fatalTimeoutMs, maxOutputBytes } = this.spec;
    const args = formatArgs(argv);
    if (last === 'overflowed') return ourError('outputTooLarge', maxOutputBytes);
    if (last === 'killing') return new CmpError(`\`${args}\` failed fatal timeout after ${formatGoDuration(execTimeoutMs + fatalTimeoutMs)}`);
    if (last === 'terminating') return new CmpError(`\`${args}\` failed timeout after ${formatGoDuration(execTimeoutMs)}`);
    if (exitFailure === undefined && !this.ctxKilled) return undefined;
    // Go (1.20+) reports ctx.Err() when the kill was delivered but the process still exited 0.
    const cause = exitFailure ?? ctxErr(ctx)!.message;
    const trimmed = goTrimSpace(this.stderrKept.text());
    return new CmpError(`\`${args}\` failed ${cause}${trimmed === '' ? '' : `: ${trimmed}`}`);
  }
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
