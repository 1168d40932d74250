import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import type net from 'node:net';
import path from 'node:path';
import { canceled, codeOf, deadlineExceeded, messageOf, ourError } from '../cmp/errors.js';
import { logFailed, type Logger } from '../cmp/log.js';
import { executeRequest, type Engine, type ReadSink } from '../cmp/plugin/execute.js';
import type { PluginRequest } from '../cmp/plugin/request.js';
import { preparedOf } from '../cmp/split/prepared.js';
import { splitPool } from '../cmp/split/split-pool.js';
import { RequestTrace, withTrace } from '../cmp/observe/request-trace.js';
import { AskpassError, type GitCredentials } from '../cmp/askpass/askpass-error.js';
import { Status } from '../cmp/grpc-status.js';
import {
  CANCEL_FRAME_MAX,
  CREDS_ANSWER_FRAME_MAX,
  DATA_FRAME_MAX,
  DATA_FRAME_SEND,
  encodeFrame,
  FrameReader,
  FrameType,
  ProtocolError,
  RUNNER_PROTOCOL_VERSION,
  type CredsAnswer,
  type Frame,
  type RunnerAnswer,
  type RunnerRequest,
} from './protocol.js';

export interface ConnectionDeps {
  engine: Engine;
  /** `pluginSpecDigest` of this runner's plugin.yaml. */
  specDigest: string;
  log: Logger;
  /**
   * Isolation (serve.ts): whether this connection may run now. False while another request runs
   * on an isolated runner: the connection is then refused with a BUSY frame.
   */
  claim?(conn: RunnerConnection): boolean;
  /**
   * After the claimed connection's run and its answer: the run's own kill sequences end, then the
   * sweep (isolation.ts); the runner takes no other request until it is done.
   */
  afterRun?(conn: RunnerConnection): Promise<void>;
  /** The duration of the last sweep (ms), reported with the next answer as stage `sweep`. */
  lastSweepMs?(): number | undefined;
}

/**
 * One worker request on the runner side: read the header and the tarball into a file of the
 * work root, run the executor (the same as standalone mode) under a context that the worker's
 * cancel frame or hang-up aborts, answer once, remove the tarball. `stop()` (shutdown) aborts
 * the run and hangs up without an answer, so that the worker retries the job elsewhere.
 */
export class RunnerConnection {
  private readonly ac = new AbortController();
  private readonly reader: FrameReader;
  private header: RunnerRequest | undefined;
  private file: fs.WriteStream | undefined;
  /** The DATA of a small tarball, until it is complete (see onHeader). */
  private small: Buffer[] | undefined;
  private readonly tgzPath: string;
  private received = 0;
  /** Answered or stopped: later frames are ignored. */
  private done = false;
  /** The executor runs (from the last tarball byte to its result). */
  private running = false;
  /** The run's askpass questions to the worker (CREDS frames) awaiting their CREDS_ANSWER, by id. */
  private readonly asked = new Map<number, { resolve(c: GitCredentials): void; reject(e: Error): void }>();
  private lastAsked = 0;
  private removed: Promise<void> | undefined;
  /** Resolves once the request is over and its files are gone. */
  readonly finished: Promise<void>;
  private finish!: () => void;

  constructor(
    private readonly socket: net.Socket,
    private readonly deps: ConnectionDeps,
  ) {
    const { options } = deps.engine;
    this.tgzPath = path.join(options.workRoot, `${randomUUID()}.tgz`);
    this.finished = new Promise(resolve => (this.finish = resolve));
    this.reader = new FrameReader(type => {
      if (type === FrameType.CANCEL) return CANCEL_FRAME_MAX;
      if (type === FrameType.HEADER && !this.header) return options.maxMessageBytes;
      if (type === FrameType.DATA && this.header) return DATA_FRAME_MAX;
      if (type === FrameType.CREDS_ANSWER && this.header?.gitCreds) return CREDS_ANSWER_FRAME_MAX;
      return undefined;
    });
    socket.on('data', chunk => this.onData(chunk));
    socket.on('error', () => {}); // a 'close' follows, handled below
    // Hang-up before the answer: the worker gave up (Go: context canceled).
    socket.on('close', () => {
      this.abort('canceled');
      if (!this.running) void this.cleanUp();
    });
  }

  /** Shutdown: abort the run, hang up without an answer. */
  stop(): void {
    this.done = true;
    this.abort('canceled');
    this.socket.destroy();
  }

  private abort(reason: 'deadline' | 'canceled'): void {
    if (!this.ac.signal.aborted) this.ac.abort(reason === 'deadline' ? deadlineExceeded() : canceled());
  }

  private onData(chunk: Buffer): void {
    try {
      this.reader.push(chunk);
      // Frame by frame: the HEADER must be handled before the DATA frames that may share its chunk.
      for (let frame; !this.socket.destroyed && (frame = this.reader.next()); ) this.onFrame(frame);
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err;
      this.deps.log.warn({ err: err.message }, 'runner request refused: protocol error');
      this.stop();
    }
  }

  private onFrame({ type, payload }: Frame): void {
    if (type === FrameType.CANCEL) {
      const reason = parseJson(payload)?.reason;
      return this.abort(reason === 'deadline' ? 'deadline' : 'canceled');
    }
    if (this.done) return;
    if (type === FrameType.HEADER) return this.onHeader(checkRequest(payload));
    if (type === FrameType.CREDS_ANSWER) return this.onCredsAnswer(payload);
    // DATA
    this.received += payload.length;
    if (this.received > this.header!.size) throw new ProtocolError('more tarball bytes than announced');
    if (this.small) this.small.push(payload);
    else if (!this.file!.write(payload)) {
      this.socket.pause();
      this.file!.once('drain', () => this.socket.resume());
    }
    if (this.received === this.header!.size) this.startRun();
  }

  private onHeader(h: RunnerRequest): void {
    this.header = h;
    const { engine, specDigest } = this.deps;
    if (this.deps.claim && !this.deps.claim(this)) {
      // Not plugin output: the worker puts the job back in the queue (its view of this runner was wrong).
      this.done = true;
      this.deps.log.warn('runner request refused: another request is running here (CMP_OFFLOAD_RUNNER_ISOLATION=isolated runs one at a time)');
      this.socket.end(encodeFrame(FrameType.BUSY, JSON.stringify({ reason: 'another request is running on this runner' })));
      this.socket.resume();
      return;
    }
    if (h.specDigest !== specDigest) {
      this.deps.log.error({ worker: h.specDigest, runner: specDigest }, 'plugin spec mismatch between worker and runner, request refused');
      return this.answer(failure(ourError('runnerSkew', h.specDigest, specDigest)));
    }
    if (h.size > engine.options.limits.tarballBytes) {
      return this.answer(failure(ourError('tarballTooLarge', engine.options.limits.tarballBytes)));
    }
    // A small tarball (the worker sends it with the header) is kept in memory and written at
    // once: no file stream whose open, writes and close each wait for the thread pool.
    if (h.size <= DATA_FRAME_SEND) this.small = [];
    else {
      this.file = fs.createWriteStream(this.tgzPath, { mode: 0o600 });
      this.file.on('error', err => this.cannotWrite(err));
    }
    if (h.size === 0) this.startRun();
  }

  private startRun(): void {
    this.running = true;
    if (!this.small) return void this.file!.end(() => void this.run());
    try {
      fs.writeFileSync(this.tgzPath, Buffer.concat(this.small), { mode: 0o600 });
    } catch (err) {
      this.running = false;
      return this.cannotWrite(err as Error);
    }
    this.small = undefined;
    void this.run();
  }

  private cannotWrite(err: Error): void {
    this.deps.log.error({ err: err.message }, 'runner cannot write the tarball');
    this.stop();
  }

  /** git asked the run's askpass: ask the worker, which asks the job's proxy. */
  private askWorker(): Promise<GitCredentials> {
    if (this.done || this.socket.destroyed) return Promise.reject(new AskpassError(Status.UNAVAILABLE, 'cmp-offload: the run is over'));
    const id = ++this.lastAsked;
    return new Promise((resolve, reject) => {
      this.asked.set(id, { resolve, reject });
      this.socket.write(encodeFrame(FrameType.CREDS, JSON.stringify({ id })));
    });
  }

  private onCredsAnswer(payload: Buffer): void {
    const a = parseJson(payload) as Partial<CredsAnswer> | undefined;
    const waiting = typeof a?.id === 'number' ? this.asked.get(a.id) : undefined;
    if (!a || !waiting) throw new ProtocolError('a credentials answer to no question');
    this.asked.delete(a.id!);
    if (a.ok === true && typeof a.username === 'string' && typeof a.password === 'string') waiting.resolve({ username: a.username, password: a.password });
    else if (a.ok === false && Number.isSafeInteger(a.code) && typeof a.message === 'string') waiting.reject(new AskpassError(a.code!, a.message));
    else throw new ProtocolError('a credentials answer without the expected shape');
  }

  private async run(): Promise<void> {
    const h = this.header!;
    const req: PluginRequest = { kind: h.kind, appRelPath: h.appRelPath, env: h.env };
    if (h.gitCreds && h.kind === 'generate') {
      req.gitCreds = {
        ...(h.gitCreds.nonce !== undefined ? { nonce: h.gitCreds.nonce } : {}),
        files: new Map(h.gitCreds.files.map(([file, data]) => [file, Buffer.from(data, 'base64')])),
        credentials: () => this.askWorker(),
      };
    }
    const sink: ReadSink | undefined = h.recordReads ? {} : undefined;
    const trace = new RequestTrace();
    // A handful of timings per run, sent for the worker's tracing (the runner exports nothing itself).
    trace.stageSpans = [];
    let answer: RunnerAnswer;
    let manifestsJson: Buffer | undefined;
    try {
      const ctx = { signal: this.ac.signal, deadline: undefined };
      const result = await withTrace(trace, () => executeRequest(this.deps.engine, req, this.tgzPath, ctx, sink));
      // A result split in a thread is its encoding (prepared.ts): its JSON is written there too.
      const prepared = preparedOf(result);
      if (prepared) manifestsJson = await splitPool.manifestsJson(prepared);
      answer = { v: RUNNER_PROTOCOL_VERSION, ok: true, result, ...(sink?.reads ? { reads: sink.reads } : {}) };
    } catch (err) {
      manifestsJson = undefined;
      answer = failure(err);
    }
    answer.stages = trace.stagesMs;
    const swept = this.deps.lastSweepMs?.();
    if (swept !== undefined) answer.stages = { ...answer.stages, sweep: swept };
    answer.spans = trace.stageSpans.map(sp => [sp.name, sp.startMs, sp.endMs, sp.attributes?.['cmp.command'] ?? '', sp.attributes?.['cmp.step'] ?? '']);
    // The tarball goes before the answer: once the worker has it, nothing of this request is on disk.
    await this.removeTarball();
    this.answer(answer, manifestsJson);
    // Isolation: nothing of the run stays alive or on disk for the next one. In the same tick as the
    // answer, so that the worker's next request waits for the sweep rather than finding us busy;
    // still `running` meanwhile, so that a hang-up does not end the request (and a shutdown) early.
    await this.deps.afterRun?.(this);
    this.running = false;
    await this.cleanUp();
  }

  /** `manifestsJson`: the JSON of a generate result's manifests, spliced in for its result. */
  private answer(a: RunnerAnswer, manifestsJson?: Buffer): void {
    if (!this.done && !this.socket.destroyed) {
      this.done = true;
      try {
        // Half-close: the worker hangs up once it has the answer; unread bytes are drained.
        this.socket.end(encodeFrame(FrameType.ANSWER, manifestsJson ? withManifests(a, manifestsJson) : JSON.stringify(a)));
        this.socket.resume();
      } catch (err) {
        this.deps.log.error({ err: messageOf(err) }, 'runner answer could not be encoded');
        this.socket.destroy();
      }
    }
  }

  private async cleanUp(): Promise<void> {
    for (const waiting of this.asked.values()) waiting.reject(new AskpassError(Status.UNAVAILABLE, 'cmp-offload: the run is over'));
    this.asked.clear();
    // Closed before the removal: a stream destroyed while its open is pending still creates the file.
    if (this.file && !this.file.closed) await new Promise<void>(resolve => this.file!.once('close', () => resolve()).destroy());
    await this.removeTarball();
    this.finish();
  }

  private removeTarball(): Promise<void> {
    return (this.removed ??= fs.promises.rm(this.tgzPath, { force: true }).catch(logFailed(this.deps.log, 'removing the tarball', 'debug', { path: this.tgzPath })));
  }
}

function failure(err: unknown): RunnerAnswer {
  return { v: RUNNER_PROTOCOL_VERSION, ok: false, code: codeOf(err), message: messageOf(err) };
}

function parseJson(payload: Buffer): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(payload.toString('utf8'));
    return typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined; // not JSON: the caller refuses it as a protocol error
  }
}

const KINDS = new Set(['generate', 'match', 'parameters']);

/** The worker's header, checked for shape (the worker is trusted; this guards against mistakes). */
function checkRequest(payload: Buffer): RunnerRequest {
  const h = parseJson(payload);
  if (!h) throw new ProtocolError('the request header is not a JSON object');
  if (h.v !== RUNNER_PROTOCOL_VERSION) throw new ProtocolError(`the worker speaks protocol version ${String(h.v)}, this runner ${RUNNER_PROTOCOL_VERSION}: run the same image in both containers`);
  const env = h.env;
  const ok =
    typeof h.kind === 'string' &&
    KINDS.has(h.kind) &&
    typeof h.appRelPath === 'string' &&
    Array.isArray(env) &&
    env.every(e => typeof e === 'object' && e !== null && typeof e.name === 'string' && typeof e.value === 'string') &&
    typeof h.recordReads === 'boolean' &&
    typeof h.specDigest === 'string' &&
    Number.isSafeInteger(h.size) &&
    (h.size as number) >= 0 &&
    (h.gitCreds === undefined || validGitCreds(h.gitCreds));
  if (!ok) throw new ProtocolError('the request header does not have the expected shape');
  return h as unknown as RunnerRequest;
}

function validGitCreds(g: unknown): boolean {
  if (typeof g !== 'object' || g === null) return false;
  const { nonce, files } = g as Record<string, unknown>;
  return (
    (nonce === undefined || typeof nonce === 'string') &&
    Array.isArray(files) &&
    files.every(f => Array.isArray(f) && f.length === 2 && typeof f[0] === 'string' && typeof f[1] === 'string')
  );
}

/** The answer's JSON with its result written as a generate result of these manifests (their JSON): never as strings here. */
function withManifests(a: RunnerAnswer, manifestsJson: Buffer): Buffer {
  const rest: Record<string, unknown> = { ...a };
  delete rest.result;
  // `rest` holds v and ok at least: its JSON without the opening brace follows the result.
  return Buffer.concat([Buffer.from('{"result":{"kind":"generate","manifests":'), manifestsJson, Buffer.from('},'), Buffer.from(JSON.stringify(rest).slice(1))]);
}
