import type { Worker } from 'node:worker_threads';
import { ourError } from '../errors.js';
import { startModuleThread } from '../thread.js';
import { preparedResult, type Prepared, type PreparedResult } from './prepared.js';
import { ManifestsTooLarge, splitManifests } from './split-manifests.js';

export type ManifestJob =
  | { id: number; op: 'split'; stdout: ArrayBuffer; maxMessageBytes: number }
  | { id: number; op: 'json'; json: ArrayBuffer }
  | { id: number; op: 'tojson'; encoded: ArrayBuffer };

export type ManifestReply =
  | { id: number; end: true; bytes: number; count: number; encoded: ArrayBuffer }
  | { id: number; end: true; json: ArrayBuffer }
  | { id: number; end: true; other: unknown }
  | { id: number; end: true; error: string }
  | { id: number; end: true; tooLarge: [number, number] };

/**
 * Outputs up to this size are split on the caller's loop: a few milliseconds even for the
 * costliest kind (many tiny documents), less than handing them to a thread.
 */
export const INLINE_SPLIT_BYTES = 16 * 1024;
const MiB = 1024 * 1024;
/** Idle threads kept for later splits; more are started when this many are busy (the callers' concurrency limit bounds them). */
const KEEP_IDLE = 2;
const IDLE_MS = 30_000;

type Done = Prepared | { other: unknown } | { json: Buffer };

interface Pending {
  job: ManifestJob;
  resolve: (d: Done) => void;
  reject: (e: unknown) => void;
  signal: AbortSignal | undefined;
}

/**
 * The splitter's heap: the manifests themselves are bounded by the message size limit, the
 * decoded documents by the output (CMP_OFFLOAD_MAX_OUTPUT_BYTES) they come from.
 */
function heapMb(maxMessageBytes: number, maxOutputBytes: number): number {
  return Math.ceil((3 * Math.min(maxMessageBytes, 2 ** 31) + 8 * Math.min(maxOutputBytes, 2 ** 31)) / MiB) + 64;
}

/** The buffer's own bytes, to transfer: a view into a larger buffer is copied. */
function ownBuffer(b: Buffer): ArrayBuffer {
  if (b.byteOffset === 0 && b.byteLength === b.buffer.byteLength) {
    // Moved, not copied, when it may be: Node 24 refuses to transfer the memory of some Buffers.
    try {
      return structuredClone(b.buffer as ArrayBuffer, { transfer: [b.buffer as ArrayBuffer] });
    } catch {
      // not transferable: copied below
    }
  }
  const copy = new ArrayBuffer(b.byteLength);
  new Uint8Array(copy).set(b);
  return copy;
}

/**
 * Splits generate outputs and parses stored results off the event loop, so that a plugin
 * printing a million tiny documents (seconds of splitting, then of parsing, measuring and
 * encoding) does not hold up every other request this process serves. A large answer comes back
 * as its encoding only (prepared.ts): the loop gets one buffer, never a million strings. Threads start on demand, one per job in progress, and a few are kept
 * (unref'd) while idle; a thread that dies (out of its bounded heap, say) fails its job only.
 */
class ManifestThreads {
  private readonly idle: Worker[] = [];
  private readonly busy = new Map<Worker, Pending>();
  private readonly heaps = new Map<Worker, number>();
  private nextId = 1;

  /**
   * The generate result of splitManifests(stdout, maxMessageBytes): off the loop, as a prepared
   * result (prepared.ts), when the output is not small. Takes the buffer over: one that owns its
   * memory is moved to the thread (left empty here), not copied.
   */
  async split(stdout: Buffer, maxMessageBytes: number, maxOutputBytes: number, signal?: AbortSignal): Promise<{ kind: 'generate'; manifests: string[] }> {
    if (stdout.length <= INLINE_SPLIT_BYTES) return { kind: 'generate', manifests: splitManifests(stdout, maxMessageBytes) };
    const job: ManifestJob = { id: this.nextId++, op: 'split', stdout: ownBuffer(stdout), maxMessageBytes };
    return preparedResult((await this.run(job, heapMb(maxMessageBytes, maxOutputBytes), signal)) as Prepared);
  }

  /**
   * A stored result's JSON (a generate result's manifests checked to be strings): parsed off the
   * loop when it is not small (the buffer is taken over, as by split), a generate result coming
   * back prepared. Undefined when it is not a result.
   */
  async parseResult<R extends { kind: string }>(json: Buffer, parseInline: (json: Buffer) => R | undefined): Promise<R | PreparedResult | undefined> {
    if (json.length <= INLINE_SPLIT_BYTES) return parseInline(json);
    // JSON.parse holds about its input in strings and arrays, once, plus the encoding.
    const heap = Math.ceil((4 * json.length) / MiB) + 64;
    try {
      const r = await this.run({ id: this.nextId++, op: 'json', json: ownBuffer(json) }, heap);
      return 'other' in r ? (r.other as R) : preparedResult(r as Prepared);
    } catch {
      return undefined; // the thread failed (out of heap…): not a result, as above
    }
  }

  /** The JSON of a prepared result's manifests (a list of strings), written in a thread. */
  async manifestsJson(p: Prepared): Promise<Buffer> {
    // The strings of one manifest at a time, and the JSON (at most 6 bytes per byte of text).
    const heap = Math.ceil((7 * p.encoded.length) / MiB) + 64;
    const copy = new ArrayBuffer(p.encoded.length);
    new Uint8Array(copy).set(p.encoded);
    return ((await this.run({ id: this.nextId++, op: 'tojson', encoded: copy }, heap)) as { json: Buffer }).json;
  }

  private run(job: ManifestJob, heap: number, signal?: AbortSignal): Promise<Done> {
    return new Promise((resolve, reject) => {
      const worker = this.takeIdle(heap) ?? this.spawn(heap);
      const p: Pending = { job, resolve, reject, signal };
      this.busy.set(worker, p);
      worker.ref();
      try {
        worker.postMessage(job, [job.op === 'split' ? job.stdout : job.op === 'json' ? job.json : job.encoded]);
      } catch (err) {
        // Not sent: the thread is idle again, and the job fails alone.
        this.busy.delete(worker);
        worker.unref();
        this.rest(worker);
        return reject(err);
      }
      // A cancelled request's split is not worth finishing: its thread goes.
      signal?.addEventListener('abort', () => this.busy.get(worker) === p && void worker.terminate(), { once: true });
    });
  }

  /** An idle thread whose heap limit (fixed at its start) is at least `heap` MiB. */
  private takeIdle(heap: number): Worker | undefined {
    const i = this.idle.findIndex(w => this.heaps.get(w)! >= heap);
    return i < 0 ? undefined : this.idle.splice(i, 1)[0];
  }

  /** Kept for the next job; one still idle after IDLE_MS goes, and its heap with it. */
  private rest(worker: Worker): void {
    this.idle.push(worker);
    setTimeout(() => {
      const i = this.idle.indexOf(worker);
      if (i < 0) return;
      this.idle.splice(i, 1);
      void worker.terminate();
    }, IDLE_MS).unref();
  }

  private spawn(heap: number): Worker {
    const worker = startModuleThread(import.meta.url, 'split-thread', heap);
    this.heaps.set(worker, heap);
    worker.on('message', (reply: ManifestReply) => {
      const p = this.busy.get(worker);
      if (!p || p.job.id !== reply.id) return;
      this.busy.delete(worker);
      worker.unref();
      if (this.idle.length < KEEP_IDLE) this.rest(worker);
      else void worker.terminate();
      if ('tooLarge' in reply) p.reject(new ManifestsTooLarge(...reply.tooLarge));
      else if ('error' in reply) p.reject(new Error(reply.error));
      else if ('other' in reply) p.resolve({ other: reply.other });
      else if ('json' in reply) p.resolve({ json: Buffer.from(reply.json) });
      else p.resolve({ bytes: reply.bytes, count: reply.count, encoded: Buffer.from(reply.encoded) });
    });
    const lost = (err: Error & { code?: string }) => {
      const p = this.busy.get(worker);
      this.busy.delete(worker);
      const i = this.idle.indexOf(worker);
      if (i >= 0) this.idle.splice(i, 1);
      this.heaps.delete(worker);
      if (!p) return;
      if (p.signal?.aborted) return p.reject(p.signal.reason);
      const why = err.code === 'ERR_WORKER_OUT_OF_MEMORY' ? `it needed more than the splitter's ${heap} MiB heap` : `the splitter thread stopped (${err.code ?? err.message})`;
      p.reject(ourError('splitFailed', why));
    };
    worker.on('error', lost);
    worker.on('exit', code => lost(new Error(`exit code ${code}`)));
    return worker;
  }
}

export const splitPool = new ManifestThreads();
