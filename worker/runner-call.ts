import fs from 'node:fs';
import net from 'node:net';
import { Status } from '../cmp/grpc-status.js';
import type { Ctx } from '../cmp/context.js';
import { formatGoDuration } from '../cmp/go/go-duration.js';
import { CmpError, messageOf } from '../cmp/errors.js';
import type { ReadSink } from '../cmp/plugin/execute.js';
import type { PluginRequest } from '../cmp/plugin/request.js';
import { currentTrace, noteExecFailure } from '../cmp/observe/request-trace.js';
import { observeStage } from '../cmp/observe/metrics.js';
import type { EncodedResult } from '../cmp/queue/result-store.js';
import type { PreparedResult } from '../cmp/split/prepared.js';
import { InfraError, RunnerBusy, RunnerUnreachable } from './execute.js';
import type { AnswerDecoder, DecodedAnswer } from './answer-decoder.js';
import { AskpassError } from '../cmp/askpass/askpass-error.js';
import {
  answerFrameMax,
  BUSY_FRAME_MAX,
  CREDS_FRAME_MAX,
  DATA_FRAME_SEND,
  encodeFrame,
  FrameReader,
  FrameType,
  ProtocolError,
  type CancelReason,
  type CredsAnswer,
  type Frame,
  type RunnerRequest,
} from '../runner/protocol.js';

/** One request to one runner: what goes over the connection, and how long its answer may take. */
export interface RunnerCallInput {
  socketPath: string;
  /** CMP_OFFLOAD_MAX_OUTPUT_BYTES: bounds the answer frame and its manifests. */
  outputBytes: number;
  /** CMP_OFFLOAD_TRACE_MAX_PATHS: bounds each list of recorded reads. */
  maxPaths: number;
  decoder: AnswerDecoder;
  req: PluginRequest;
  ctx: Ctx;
  sink: ReadSink | undefined;
  header: RunnerRequest;
  /** The tarball when it goes with the header; else it streams from `tgzPath` in DATA frames. */
  inline: Buffer | undefined;
  tgzPath: string;
  /** cancelGraceMs: after a cancel frame, and from an answer's first byte to its last. */
  graceMs: number;
  /** answerBudget: how long the runner may go without answering. */
  budget: { ms: number; why: string } | undefined;
}

/**
 * A request over one connection to the runner: the header and the tarball, a cancel frame when
 * the job is aborted, answers to the run's credentials questions, then the runner's one answer,
 * decoded. Each way it can end goes through `finish`, once.
 */
export class RunnerCall {
  private readonly c: RunnerCallInput;
  private readonly socket: net.Socket;
  private readonly reader: FrameReader;
  private resolve: (result: EncodedResult | PreparedResult) => void = () => {};
  private reject: (err: Error) => void = () => {};
  private settled = false;
  /** The whole answer frame has come: the connection's end and any later bytes do not matter. */
  private answered = false;
  /** The connection was accepted: from then on the request may have reached the runner. */
  private connected = false;
  private graceTimer: NodeJS.Timeout | undefined;
  private arrivalTimer: NodeJS.Timeout | undefined;
  private budgetTimer: NodeJS.Timeout | undefined;

  constructor(c: RunnerCallInput) {
    this.c = c;
    this.socket = net.createConnection(c.socketPath);
    // Started while the runner works: ready by the time its answer comes.
    c.decoder.warm();
    const answerMax = answerFrameMax(c.outputBytes);
    this.reader = new FrameReader(type =>
      type === FrameType.ANSWER ? answerMax : type === FrameType.CREDS && c.req.gitCreds ? CREDS_FRAME_MAX : type === FrameType.BUSY ? BUSY_FRAME_MAX : undefined,
    );
  }

  run(): Promise<EncodedResult | PreparedResult> {
    return new Promise<EncodedResult | PreparedResult>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
      const { budget } = this.c;
      // A runner that accepted and went silent (or wedged) does not hold the job until its lock is lost.
      if (budget && budget.ms < 2 ** 31) {
        this.budgetTimer = setTimeout(() => this.infra(`no answer within ${formatGoDuration(budget.ms)} (${budget.why}): hung up`), budget.ms);
      }
      this.socket.on('connect', () => this.onConnect());
      this.socket.on('data', (chunk: Buffer) => this.onData(chunk));
      this.socket.on('error', err => this.onError(err));
      this.socket.on('close', () => {
        if (!this.answered) this.infra('the connection closed before an answer (runner stopped or crashed?)');
      });
    });
  }

  private finish(err: Error | undefined, result?: EncodedResult | PreparedResult): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.graceTimer);
    clearTimeout(this.budgetTimer);
    clearTimeout(this.arrivalTimer);
    this.c.ctx.signal.removeEventListener('abort', this.onAbort);
    this.socket.destroy();
    if (err) this.reject(err);
    else this.resolve(result!);
  }

  /** Trouble with the runner (the job is retried), unless the job was aborted: then its context error. */
  private infra(what: string): void {
    const { signal } = this.c.ctx;
    this.finish(signal.aborted ? (signal.reason as Error) : new InfraError(`cmp-offload: runner at ${this.c.socketPath}: ${what}`));
  }

  private invalid(what: string): void {
    this.finish(new InfraError(`cmp-offload: runner at ${this.c.socketPath} gave an invalid answer: ${what}`));
  }

  // The job's abort: the runner kills the run's process group and answers; it gets a grace.
  private readonly onAbort = (): void => {
    const { signal } = this.c.ctx;
    const reason: CancelReason = (signal.reason as CmpError | undefined)?.code === Status.DEADLINE_EXCEEDED ? 'deadline' : 'canceled';
    if (this.socket.writable) this.socket.write(encodeFrame(FrameType.CANCEL, JSON.stringify({ reason })));
    this.graceTimer = setTimeout(() => this.finish(signal.reason as Error), this.c.graceMs);
  };

  private onConnect(): void {
    const { socket, c } = this;
    this.connected = true;
    const head = encodeFrame(FrameType.HEADER, JSON.stringify(c.header));
    socket.write(c.inline?.length ? Buffer.concat([head, encodeFrame(FrameType.DATA, c.inline)]) : head);
    if (c.ctx.signal.aborted) this.onAbort();
    else c.ctx.signal.addEventListener('abort', this.onAbort, { once: true });
    if (c.inline) return;
    sendTarball(socket, c.tgzPath).catch(err => {
      if (!this.settled && !socket.destroyed) this.infra(`sending the tarball failed: ${messageOf(err)}`);
    });
  }

  private onData(chunk: Buffer): void {
    if (this.settled || this.answered) return;
    const { graceMs, ctx, socketPath } = this.c;
    // The runner writes its answer in one go: one that trickles is hung up on.
    this.arrivalTimer ??= setTimeout(() => this.infra(`the answer did not arrive within ${formatGoDuration(graceMs)} of its first byte`), graceMs);
    let frame: Frame | undefined;
    try {
      frame = this.nextFrame(chunk);
    } catch (err) {
      return this.finish(new InfraError(`cmp-offload: runner at ${socketPath} broke the protocol: ${(err as Error).message}`));
    }
    if (!frame) return;
    if (frame.type === FrameType.BUSY) {
      // Not plugin output, and nothing ran: the job goes back to the queue (see the processor).
      return this.finish(ctx.signal.aborted ? (ctx.signal.reason as Error) : new RunnerBusy(`cmp-offload: runner at ${socketPath} is running another request`));
    }
    if (this.reader.pending() > 0) {
      return this.finish(new InfraError(`cmp-offload: runner at ${socketPath} broke the protocol: more than one answer`));
    }
    this.onAnswer(frame.payload);
  }

  /** Take in `chunk`; the next frame that is not a credentials question (those are answered as they come). */
  private nextFrame(chunk: Buffer): Frame | undefined {
    this.reader.push(chunk);
    let frame = this.reader.next();
    // Credentials questions come whole, before the answer: each stops the answer's clock.
    for (; frame?.type === FrameType.CREDS; frame = this.reader.next()) {
      clearTimeout(this.arrivalTimer);
      this.arrivalTimer = undefined;
      this.onCreds(frame.payload);
    }
    return frame;
  }

  /** git asked the run's askpass (CREDS): answer from the job's relay, whatever the outcome. */
  private onCreds(payload: Buffer): void {
    const id = parseCredsId(payload);
    if (id === undefined) throw new ProtocolError('a credentials question without an id');
    void this.c.req.gitCreds!.credentials().then(
      c => ({ id, ok: true as const, username: c.username, password: c.password }),
      (err: unknown) =>
        err instanceof AskpassError ? { id, ok: false as const, code: err.code, message: err.details } : { id, ok: false as const, code: Status.UNAVAILABLE, message: messageOf(err) },
    ).then((a: CredsAnswer) => {
      if (!this.settled && this.socket.writable) this.socket.write(encodeFrame(FrameType.CREDS_ANSWER, JSON.stringify(a)));
    });
  }

  /** The answer frame has come whole: stop the clocks and decode it. */
  private onAnswer(payload: Buffer): void {
    const { c } = this;
    this.answered = true;
    clearTimeout(this.budgetTimer);
    clearTimeout(this.arrivalTimer);
    this.socket.pause();
    const bounds = { kind: c.req.kind, readsAsked: c.sink !== undefined, maxPaths: c.maxPaths, maxManifests: c.outputBytes };
    c.decoder.decode(payload, bounds).then(
      a => this.onDecoded(a),
      (err: unknown) => this.invalid(err instanceof ProtocolError ? err.message : 'it could not be decoded'),
    );
  }

  private onDecoded(a: DecodedAnswer): void {
    if (this.settled) return;
    const { ctx, sink } = this.c;
    recordRunnerStages(a);
    if (!a.ok) {
      if (COMMAND_FAILED.test(a.message)) noteExecFailure(a.message, ctx.signal.aborted, a.code === Status.RESOURCE_EXHAUSTED);
      return this.finish(new CmpError(a.message, a.code));
    }
    if (sink) sink.reads = a.reads;
    this.finish(undefined, a.result);
  }

  private onError(err: Error): void {
    if (this.answered) return;
    const what = `connection failed: ${(err as NodeJS.ErrnoException).code ?? err.message}`;
    // Nothing reached the runner: the run never started (the job goes back to the queue, see the processor).
    if (!this.connected && !this.c.ctx.signal.aborted) return this.finish(new RunnerUnreachable(`cmp-offload: runner at ${this.c.socketPath}: ${what}`));
    this.infra(what);
  }
}

/** The runner's stage timings feed the worker's log line and metrics. */
function recordRunnerStages(a: DecodedAnswer): void {
  const trace = currentTrace();
  for (const [stage, ms] of a.stages) trace ? trace.addStage(stage, ms) : observeStage(stage, ms);
  // Tracing: the runner's stages become spans of this job (its clock is this pod's).
  if (trace?.stageSpans) {
    for (const [name, startMs, endMs, command, step] of a.spans) {
      const attributes = command ? { 'cmp.command': command, ...(step ? { 'cmp.step': step } : {}) } : undefined;
      trace.stageSpans.push({ name, startMs, endMs, ...(attributes ? { attributes } : {}) });
    }
  }
}

function parseCredsId(payload: Buffer): number | undefined {
  try {
    const id = (JSON.parse(payload.toString('utf8')) as { id?: unknown } | null)?.id;
    return Number.isSafeInteger(id) ? (id as number) : undefined;
  } catch {
    return undefined; // not JSON: no id, which the caller refuses
  }
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
