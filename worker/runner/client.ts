import fs from 'node:fs';
import net from 'node:net';
import { Status } from '../../cmp/grpc-status.js';
import type { Ctx } from '../../cmp/context.js';
import { CmpError, messageOf } from '../../cmp/errors.js';
import type { Logger } from '../../cmp/log.js';
import type { ReadSink } from '../../cmp/plugin/execute.js';
import type { PluginRequest, PluginResult } from '../../cmp/plugin/request.js';
import { currentTrace, noteExecFailure } from '../../cmp/observe/request-trace.js';
import { observeStage } from '../../cmp/observe/metrics.js';
import { InfraError, type Execute } from '../processor.js';
import { checkAnswer } from './answer.js';
import {
  answerFrameMax,
  DATA_FRAME_SEND,
  encodeFrame,
  FrameReader,
  FrameType,
  ProtocolError,
  RUNNER_PROTOCOL_VERSION,
  type CancelReason,
  type RunnerRequest,
} from './protocol.js';

export interface RunnerClientOptions {
  /** CMP_OFFLOAD_RUNNER_SOCKET */
  socketPath: string;
  /** `pluginSpecDigest` of the worker's plugin.yaml. */
  specDigest: string;
  /** CMP_OFFLOAD_MAX_OUTPUT_BYTES: bounds the answer frame (protocol.ts). */
  outputBytes: number;
  /** CMP_OFFLOAD_TRACE_MAX_PATHS: bounds each list of recorded reads. */
  maxPaths: number;
  /** After a cancel frame, how long the runner has to answer before the worker hangs up. */
  cancelGraceMs: number;
  log: Logger;
}

/**
 * The worker's `Execute` in runner mode: one connection per request to the runner's socket,
 * the request header, the fetched tarball, a cancel frame when the job is aborted; then the
 * runner's one answer, validated. The plugin's failure comes back as a CmpError with the
 * executor's exact text; anything wrong with the runner or its answer is an InfraError (the
 * job is retried), logged here with the reason.
 */
export function runnerExecute(opts: RunnerClientOptions): Execute {
  return async (req, tgzPath, ctx, sink) => {
    try {
      return await callRunner(opts, req, tgzPath, ctx, sink);
    } catch (err) {
      if (err instanceof InfraError) opts.log.warn({ runner: opts.socketPath, kind: req.kind, err: err.message }, 'runner request failed');
      throw err;
    }
  };
}

async function callRunner(opts: RunnerClientOptions, req: PluginRequest, tgzPath: string, ctx: Ctx, sink?: ReadSink): Promise<PluginResult> {
  // A small tarball (the common case) is read at once and goes with the header in one write: no
  // file stream, one wake-up of the runner. A larger one streams in DATA frames.
  const stat = fs.statSync(tgzPath);
  const inline = stat.size <= DATA_FRAME_SEND ? fs.readFileSync(tgzPath) : undefined;
  const size = inline?.length ?? stat.size;
  const header: RunnerRequest = {
    v: RUNNER_PROTOCOL_VERSION,
    kind: req.kind,
    appRelPath: req.appRelPath,
    env: req.env.map(e => ({ name: e.name, value: e.value })),
    recordReads: sink !== undefined,
    specDigest: opts.specDigest,
    size,
  };
  const socket = net.createConnection(opts.socketPath);
  const answerMax = answerFrameMax(opts.outputBytes);
  const reader = new FrameReader(type => (type === FrameType.ANSWER ? answerMax : undefined));

  return new Promise<PluginResult>((resolve, reject) => {
    let settled = false;
    let graceTimer: NodeJS.Timeout | undefined;
    const finish = (err: Error | undefined, result?: PluginResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(graceTimer);
      ctx.signal.removeEventListener('abort', onAbort);
      socket.destroy();
      if (err) reject(err);
      else resolve(result!);
    };
    // The job's abort: the runner kills the run's process group and answers; it gets a grace.
    const onAbort = () => {
      const reason: CancelReason = (ctx.signal.reason as CmpError | undefined)?.code === Status.DEADLINE_EXCEEDED ? 'deadline' : 'canceled';
      if (socket.writable) socket.write(encodeFrame(FrameType.CANCEL, JSON.stringify({ reason })));
      graceTimer = setTimeout(() => finish(ctx.signal.reason as Error), opts.cancelGraceMs);
    };
    const infra = (what: string) => finish(ctx.signal.aborted ? (ctx.signal.reason as Error) : new InfraError(`cmp-offload: runner at ${opts.socketPath}: ${what}`));

    socket.on('connect', () => {
      const head = encodeFrame(FrameType.HEADER, JSON.stringify(header));
      socket.write(inline?.length ? Buffer.concat([head, encodeFrame(FrameType.DATA, inline)]) : head);
      if (ctx.signal.aborted) onAbort();
      else ctx.signal.addEventListener('abort', onAbort, { once: true });
      if (inline) return;
      sendTarball(socket, tgzPath).catch(err => {
        if (!settled && !socket.destroyed) infra(`sending the tarball failed: ${messageOf(err)}`);
      });
    });
    socket.on('data', (chunk: Buffer) => {
      if (settled) return;
      let frame;
      try {
        reader.push(chunk);
        frame = reader.next();
      } catch (err) {
        return finish(new InfraError(`cmp-offload: runner at ${opts.socketPath} broke the protocol: ${(err as Error).message}`));
      }
      if (!frame) return;
      if (reader.pending() > 0) {
        return finish(new InfraError(`cmp-offload: runner at ${opts.socketPath} broke the protocol: more than one answer`));
      }
      try {
        const a = checkAnswer(frame.payload, req.kind, sink !== undefined, opts.maxPaths);
        // The runner's stage timings and command failures feed the worker's log line and metrics.
        const trace = currentTrace();
        for (const [stage, ms] of a.stages) trace ? trace.addStage(stage, ms) : observeStage(stage, ms);
        if (!a.ok) {
          if (COMMAND_FAILED.test(a.message)) noteExecFailure(a.message, ctx.signal.aborted, a.code === Status.RESOURCE_EXHAUSTED);
          return finish(new CmpError(a.message, a.code));
        }
        if (sink) sink.reads = a.reads;
        return finish(undefined, a.result);
      } catch (err) {
        if (!(err instanceof ProtocolError)) throw err;
        return finish(new InfraError(`cmp-offload: runner at ${opts.socketPath} gave an invalid answer: ${err.message}`));
      }
    });
    socket.on('error', err => infra(`connection failed: ${(err as NodeJS.ErrnoException).code ?? err.message}`));
    socket.on('close', () => infra('the connection closed before an answer (runner stopped or crashed?)'));
  });
}

/** How a plugin command's failure reads (go-exec-errors): `` `argv` failed … ``. */
const COMMAND_FAILED = /` failed /;

/** The tarball in DATA frames, waiting for the socket to drain as it goes. */
async function sendTarball(socket: net.Socket, tgzPath: string): Promise<void> {
  const file = fs.createReadStream(tgzPath, { highWaterMark: DATA_FRAME_SEND });
  try {
    for await (const chunk of file) {
      if (socket.destroyed) return;
      if (!socket.write(encodeFrame(FrameType.DATA, chunk as Buffer))) {
        await new Promise<void>(resolve => {
          const done = () => {
            socket.off('drain', done);
            socket.off('close', done);
            resolve();
          };
          socket.on('drain', done);
          socket.on('close', done);
        });
      }
    }
  } finally {
    file.destroy();
  }
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
