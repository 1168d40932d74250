import fs from 'node:fs';
import net from 'node:net';
import type { Ctx } from '../cmp/context.js';
import type { Logger } from '../cmp/log.js';
import type { ReadSink } from '../cmp/plugin/execute.js';
import type { GitCredsSource, PluginRequest } from '../cmp/plugin/request.js';
import type { EncodedResult } from '../cmp/queue/result-store.js';
import type { PreparedResult } from '../cmp/split/prepared.js';
import { InfraError, RunnerBusy, type Execute } from './execute.js';
import { AnswerDecoder, decoderHeapMb } from './answer-decoder.js';
import { RunnerCall } from './runner-call.js';
import { answerFrameMax, DATA_FRAME_SEND, RUNNER_PROTOCOL_VERSION, type RunnerRequest } from '../runner/protocol.js';

export interface RunnerClientOptions {
  /** CMP_OFFLOAD_RUNNER_SOCKET: one path per runner (container); each request takes the least busy. */
  socketPaths: readonly string[];
  /** CMP_OFFLOAD_CONCURRENCY: requests at once over all the runners. */
  concurrency: number;
  /** `pluginSpecDigest` of the worker's plugin.yaml. */
  specDigest: string;
  /** CMP_OFFLOAD_MAX_OUTPUT_BYTES: bounds the answer frame (protocol.ts) and its manifests. */
  outputBytes: number;
  /** CMP_OFFLOAD_TRACE_MAX_PATHS: bounds each list of recorded reads. */
  maxPaths: number;
  /** ARGOCD_EXEC_TIMEOUT and ARGOCD_EXEC_FATAL_TIMEOUT, which the runner applies to each command. */
  execTimeoutMs: number;
  fatalTimeoutMs: number;
  log: Logger;
}

/**
 * After a cancel frame, how long the runner has to answer before the worker hangs up; also how
 * long an answer may take to arrive once its first byte has (the runner writes it in one go).
 */
export function cancelGraceMs(opts: Pick<RunnerClientOptions, 'fatalTimeoutMs'>): number {
  return Math.max(0, opts.fatalTimeoutMs) + 5_000;
}

/**
 * How long the runner may go without answering: what an honest one can take, as its commands
 * run under the same timeouts (init and generate, each up to ARGOCD_EXEC_TIMEOUT, then
 * ARGOCD_EXEC_FATAL_TIMEOUT to die) plus the cancel grace (extraction, splitting, the kill); or
 * until the job's deadline plus that grace, whichever is sooner. Past it the worker hangs up
 * (the runner kills the run) and the job is retried. Undefined: no bound (no exec timeout and
 * no deadline).
 */
export function answerBudget(opts: Pick<RunnerClientOptions, 'execTimeoutMs' | 'fatalTimeoutMs'>, deadline: number | undefined, now = Date.now()): { ms: number; why: string } | undefined {
  const grace = cancelGraceMs(opts);
  const commands = opts.execTimeoutMs > 0 ? 2 * (opts.execTimeoutMs + Math.max(0, opts.fatalTimeoutMs)) + grace : undefined;
  const untilDeadline = deadline === undefined ? undefined : Math.max(0, deadline - now) + grace;
  if (commands !== undefined && (untilDeadline === undefined || commands <= untilDeadline)) {
    return { ms: commands, why: 'init and generate may take ARGOCD_EXEC_TIMEOUT + ARGOCD_EXEC_FATAL_TIMEOUT each, then the runner has ARGOCD_EXEC_FATAL_TIMEOUT + 5s' };
  }
  return untilDeadline === undefined ? undefined : { ms: untilDeadline, why: "the job's deadline, then the runner has ARGOCD_EXEC_FATAL_TIMEOUT + 5s" };
}

/**
 * The worker's `Execute` in runner mode: one connection per request to the runner's socket,
 * the request header, the fetched tarball, a cancel frame when the job is aborted; then the
 * runner's one answer, decoded and validated in a thread (answer-decoder.ts). The plugin's
 * failure comes back as a CmpError with the executor's exact text; anything wrong with the
 * runner or its answer, including no answer within `answerBudget`, is an InfraError (the job
 * is retried), logged here with the reason.
 */
export function runnerExecute(opts: RunnerClientOptions): Execute {
  const decoder = new AnswerDecoder(decoderHeapMb(answerFrameMax(opts.outputBytes)));
  const pool = new RunnerPool(opts.socketPaths, opts.concurrency);
  let warnedBusy = false;
  return async (req, tgz, ctx, sink) => {
    for (let refused = 0; ; refused++) {
      const socketPath = await pool.take(ctx.signal);
      try {
        return await callRunner({ ...opts, socketPath }, decoder, req, tgz, ctx, sink);
      } catch (err) {
        if (err instanceof RunnerBusy && !ctx.signal.aborted) {
          // An isolated runner: from now on one request at a time there; this one waits for a free runner.
          pool.oneAtATime(socketPath);
          if (!warnedBusy && opts.concurrency > opts.socketPaths.length) {
            warnedBusy = true;
            opts.log.warn(
              { concurrency: opts.concurrency, runners: opts.socketPaths.length },
              'CMP_OFFLOAD_CONCURRENCY exceeds the number of runner sockets (CMP_OFFLOAD_RUNNER_SOCKET) and an isolated runner runs one request at a time: the extra jobs wait here for a free runner; give each job a runner',
            );
          }
          if (refused < BUSY_RETRIES) continue;
        }
        if (err instanceof InfraError) opts.log.warn({ runner: socketPath, kind: req.kind, err: err.message }, 'runner request failed');
        throw err;
      } finally {
        pool.give(socketPath);
      }
    }
  };
}

/**
 * How often a request refused with BUSY (nothing ran) is sent again, each time once a runner is
 * free here; then it goes back to the queue (something else holds the runner: another worker
 * sharing its socket).
 */
const BUSY_RETRIES = 3;

/**
 * The runner sockets and the requests each has under way: a request takes one with the fewest,
 * below its capacity, or waits for one. The capacity starts at CMP_OFFLOAD_CONCURRENCY spread over
 * the runners (a shared runner takes several at once) and drops to one at a runner's first BUSY
 * (an isolated runner runs one at a time).
 */
export class RunnerPool {
  private readonly busy: Map<string, number>;
  private readonly capacity: Map<string, number>;
  private readonly waiting: (() => void)[] = [];
  constructor(paths: readonly string[], concurrency = paths.length) {
    if (paths.length === 0) throw new Error('no runner socket');
    this.busy = new Map(paths.map(p => [p, 0]));
    const each = Math.max(1, Math.ceil(concurrency / paths.length));
    this.capacity = new Map(paths.map(p => [p, each]));
  }
  /** A runner for one request, once one is free (rejects when `signal` aborts first). */
  async take(signal?: AbortSignal): Promise<string> {
    for (;;) {
      let best: string | undefined;
      for (const [p, n] of this.busy) if (n < this.capacity.get(p)! && (best === undefined || n < this.busy.get(best)!)) best = p;
      if (best !== undefined) {
        this.busy.set(best, this.busy.get(best)! + 1);
        return best;
      }
      signal?.throwIfAborted();
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => {
          const i = this.waiting.indexOf(wake);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(signal!.reason as Error);
        };
        const wake = () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        this.waiting.push(wake);
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    }
  }
  give(p: string): void {
    this.busy.set(p, Math.max(0, (this.busy.get(p) ?? 1) - 1));
    this.waiting.shift()?.();
  }
  oneAtATime(p: string): void {
    this.capacity.set(p, 1);
  }
}

async function callRunner(opts: RunnerClientOptions & { socketPath: string }, decoder: AnswerDecoder, req: PluginRequest, tgz: string | Buffer, ctx: Ctx, sink?: ReadSink): Promise<EncodedResult | PreparedResult> {
  const { inline, size } = await tarballToSend(tgz);
  const header: RunnerRequest = {
    v: RUNNER_PROTOCOL_VERSION,
    kind: req.kind,
    appRelPath: req.appRelPath,
    env: req.env.map(e => ({ name: e.name, value: e.value })),
    recordReads: sink !== undefined,
    specDigest: opts.specDigest,
    size,
    ...(req.gitCreds ? { gitCreds: credsHeader(req.gitCreds) } : {}),
  };
  const { socketPath, outputBytes, maxPaths } = opts;
  const tgzPath = typeof tgz === 'string' ? tgz : '';
  return new RunnerCall({ socketPath, outputBytes, maxPaths, decoder, req, ctx, sink, header, inline, tgzPath, graceMs: cancelGraceMs(opts), budget: answerBudget(opts, ctx.deadline) }).run();
}

/**
 * A small tarball (the common case) goes with the header in one write: no file stream, one
 * wake-up of the runner; the job may have carried it (no file at all). A larger one streams
 * in DATA frames.
 */
async function tarballToSend(tgz: string | Buffer): Promise<{ inline: Buffer | undefined; size: number }> {
  if (typeof tgz !== 'string') {
    if (tgz.length > DATA_FRAME_SEND) throw new InfraError(`cmp-offload: an inline tarball of ${tgz.length} bytes exceeds ${DATA_FRAME_SEND}`);
    return { inline: tgz, size: tgz.length };
  }
  const stat = await fs.promises.stat(tgz);
  const inline = stat.size <= DATA_FRAME_SEND ? await fs.promises.readFile(tgz) : undefined;
  return { inline, size: inline?.length ?? stat.size };
}

/** The header's part for a git credentials request: the nonce and the file contents the run needs before it starts. */
function credsHeader(g: GitCredsSource): NonNullable<RunnerRequest['gitCreds']> {
  return { ...(g.nonce !== undefined ? { nonce: g.nonce } : {}), files: [...g.files].map(([file, data]) => [file, data.toString('base64')]) };
}

/** Readiness: whether the runner's socket accepts a connection within `timeoutMs`. */
export function runnerAccepts(socketPath: string, timeoutMs: number): Promise<boolean> {
  return new Promise(resolve => {
    const socket = net.createConnection(socketPath);
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}
