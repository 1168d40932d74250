import type { Worker } from 'node:worker_threads';
import type { Status } from '../cmp/grpc-status.js';
import type { Stage } from '../cmp/observe/stages.js';
import { EncodedResult } from '../cmp/queue/result-store.js';
import { preparedResult, type PreparedResult } from '../cmp/split/prepared.js';
import { startModuleThread } from '../cmp/thread.js';
import type { RecordedReads } from '../cmp/trace/read-recorder.js';
import { encodeAnswer, type AnswerBounds, type EncodedAnswer, type RunnerSpan } from '../runner/answer.js';
import { ProtocolError } from '../runner/protocol.js';

/** What the thread is asked: one ANSWER payload (transferred) and what it may hold. */
export interface DecodeJob {
  id: number;
  payload: ArrayBuffer;
  bounds: AnswerBounds;
}

/** What the thread answers: the checked answer, a result as its encoding; or the refusal. */
export type DecodeReply = { id: number } & EncodedAnswer;

/**
 * A checked answer on the worker's side: a result arrives in its stored form, a generate one
 * prepared (its ManifestResponse, prepared.ts), another as its JSON (EncodedResult).
 */
export type DecodedAnswer = { stages: [Stage, number][]; spans: RunnerSpan[] } & (
  | { ok: true; result: EncodedResult | PreparedResult; reads: RecordedReads | undefined }
  | { ok: false; code: Status; message: string }
);

const MiB = 1024 * 1024;

/** An answer this small is decoded on the event loop: the thread's round trip costs more than the parse. */
export const INLINE_DECODE_BYTES = 16 * 1024;

/**
 * Heap of the decoder's thread for answers of up to `frameMax` bytes: the text, the parsed
 * value and its re-encoding, with room to spare. An answer that needs more (crafted: millions
 * of tiny objects) ends the thread, not the worker, and is refused.
 */
export function decoderHeapMb(frameMax: number): number {
  return Math.ceil((4 * frameMax) / MiB) + 64;
}

/**
 * Decodes runner answers off the worker's event loop: the runner controls their content (up to
 * answerFrameMax bytes), and a JSON.parse of that on the loop could block it for seconds and
 * stall lock renewals and /healthz. One thread, started on first use and kept (unref'd) while
 * idle, with a bounded heap, checks answers one at a time (checkAnswer) and hands back a
 * result as its encoding: the payload goes in and the result comes out by transfer, so the
 * loop never parses, copies or stringifies them. An answer of up to INLINE_DECODE_BYTES is
 * checked the same way on the loop. Rejects with ProtocolError only.
 */
export class AnswerDecoder {
  private thread: Worker | undefined;
  private readonly pending = new Map<number, { resolve: (a: DecodedAnswer) => void; reject: (e: Error) => void }>();
  private nextId = 1;

  constructor(private readonly heapMb: number) {}

  decode(payload: Buffer, bounds: AnswerBounds): Promise<DecodedAnswer> {
    if (payload.length <= INLINE_DECODE_BYTES) {
      try {
        return Promise.resolve(decoded(encodeAnswer(payload, bounds)));
      } catch (err) {
        return Promise.reject(err as Error);
      }
    }
    const thread = this.start();
    const id = this.nextId++;
    // A frame that spanned chunks owns its memory (FrameReader); a slice of a chunk is copied.
    const own = payload.byteOffset === 0 && payload.byteLength === payload.buffer.byteLength ? payload : new Uint8Array(payload);
    const job: DecodeJob = { id, payload: own.buffer as ArrayBuffer, bounds };
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      thread.ref();
      thread.postMessage(job, [job.payload]);
    });
  }

  /** Start the thread ahead of the first answer. */
  warm(): void {
    this.start();
  }

  private start(): Worker {
    if (this.thread) return this.thread;
    const thread = startModuleThread(import.meta.url, 'answer-thread', this.heapMb);
    this.thread = thread;
    thread.on('message', (reply: DecodeReply) => {
      const p = this.pending.get(reply.id);
      if (!p) return;
      this.pending.delete(reply.id);
      if (this.pending.size === 0) thread.unref();
      try {
        p.resolve(decoded(reply));
      } catch (err) {
        p.reject(err as Error);
      }
    });
    const lost = (err: Error & { code?: string }) => {
      if (this.thread === thread) this.thread = undefined;
      const why =
        err.code === 'ERR_WORKER_OUT_OF_MEMORY'
          ? `the answer could not be decoded within the decoder's ${this.heapMb} MiB heap`
          : `the answer decoder stopped (${err.code ?? 'exit'})`;
      for (const p of this.pending.values()) p.reject(new ProtocolError(why));
      this.pending.clear();
    };
    thread.on('error', lost);
    thread.on('exit', () => lost(new Error('exited')));
    // After the listeners: adding a 'message' listener refs the thread's port again, and a
    // thread started but never used (every job so far lost its runner or was cancelled before
    // an answer) would then keep a stopping worker alive.
    thread.unref();
    return thread;
  }
}

/** An encoded answer as the runner client takes it; throws ProtocolError for a refused one. */
function decoded(a: EncodedAnswer): DecodedAnswer {
  if ('refused' in a) throw new ProtocolError(a.refused);
  if (!a.ok) return { ok: false, code: a.code, message: a.message, stages: a.stages, spans: a.spans };
  const bytes = 'json' in a ? a.json : a.encoded;
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const result = 'json' in a ? new EncodedResult(buf) : preparedResult({ bytes: a.manifestBytes, count: a.count, encoded: buf });
  return { ok: true, result, reads: a.reads, stages: a.stages, spans: a.spans };
}
