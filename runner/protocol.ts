import { constants as bufferConstants } from 'node:buffer';

/**
 * The worker ↔ runner protocol: one request per connection on the runner's unix socket, as
 * frames of `type (u8) | payload length (u32 big-endian) | payload`.
 *
 *   worker → runner  HEADER        JSON `RunnerRequest`, once, first
 *                    DATA          tarball bytes, until `size` bytes have come (≤ DATA_FRAME_MAX each)
 *                    CANCEL        JSON `{reason: 'deadline' | 'canceled'}`, optional, any time
 *                    CREDS_ANSWER  JSON `CredsAnswer`, one per CREDS frame (git credentials requests only)
 *   runner → worker  CREDS         JSON `{id}`: git asked the run's askpass; any number before the ANSWER
 *                    ANSWER        JSON `RunnerAnswer`, once; then the runner closes the connection
 *                    BUSY          JSON `{reason}`, instead of any other frame, in answer to the HEADER:
 *                                  another request runs on this (isolated) runner; nothing ran,
 *                                  the runner closes the connection
 *
 * Closing the connection before the answer means `canceled` to the runner. The worker trusts
 * nothing from the runner (plugin code runs with the runner's uid and could replace it): every
 * frame is bounded before it is buffered, and the answer is validated (answer.ts).
 */
export const RUNNER_PROTOCOL_VERSION = 1;

export const FrameType = { HEADER: 1, DATA: 2, CANCEL: 3, ANSWER: 4, CREDS: 5, CREDS_ANSWER: 6, BUSY: 7 } as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

export const FRAME_PREFIX_BYTES = 5;
/** Tarball bytes per DATA frame: the worker sends 256 KiB, the runner accepts up to 1 MiB. */
export const DATA_FRAME_SEND = 256 * 1024;
export const DATA_FRAME_MAX = 1024 * 1024;
export const CANCEL_FRAME_MAX = 256;
export const CREDS_FRAME_MAX = 256;
export const BUSY_FRAME_MAX = 256;
/** A username and a password (a token, at most a few KiB) with their JSON. */
export const CREDS_ANSWER_FRAME_MAX = 64 * 1024;
/** Paths the read recorder may report: one relative path per entry, at most PATH_MAX bytes. */
export const READ_PATH_MAX_BYTES = 4096;
/** Room in the answer frame for the recorded reads and the JSON around the result. */
const ANSWER_SLACK_BYTES = 64 * 1024 * 1024;
/**
 * JSON expansion allowed for the result over CMP_OFFLOAD_MAX_OUTPUT_BYTES of stdout: split
 * manifests are JSON text (YAML converted), then escaped again as JSON strings in the answer.
 */
const ANSWER_EXPANSION = 8;

/**
 * Bound of the ANSWER frame: 8 × CMP_OFFLOAD_MAX_OUTPUT_BYTES + 64 MiB, capped at the longest
 * string V8 can decode (about 512 MiB, near Redis's own 512 MB string limit for the stored
 * result). An answer beyond it is an infrastructure failure, not a plugin result.
 */
export function answerFrameMax(outputBytes: number): number {
  return Math.min(ANSWER_EXPANSION * outputBytes + ANSWER_SLACK_BYTES, bufferConstants.MAX_STRING_LENGTH);
}

/** Why the worker cancels a request (a caller's context error); connection close = canceled. */
export type CancelReason = 'deadline' | 'canceled';

/** What the worker asks of the runner (HEADER). */
export interface RunnerRequest {
  v: number;
  kind: 'generate' | 'match' | 'parameters';
  appRelPath: string;
  env: { name: string; value: string }[];
  /** Record what the run reads (traced cache, generate only). */
  recordReads: boolean;
  /** `pluginSpecDigest` of the worker's plugin.yaml: the runner refuses another. */
  specDigest: string;
  /** Tarball bytes that follow in DATA frames. */
  size: number;
  /**
   * provideGitCreds (generate only): the request's askpass nonce and the contents (base64) of the
   * files its env points to. The runner serves the run an askpass of its own and asks the worker,
   * in CREDS frames, each time git asks.
   */
  gitCreds?: { nonce?: string; files: [path: string, base64: string][] };
}

/** The worker's answer to a CREDS frame: the credentials, or the gRPC status the run's askpass gives git. */
export type CredsAnswer = { id: number } & ({ ok: true; username: string; password: string } | { ok: false; code: number; message: string });

/**
 * The runner's one answer: the executor's result (and reads when asked), or its failure; with
 * the durations of the run's stages (extract, exec, split), for the worker's metrics and log.
 */
export type RunnerAnswer = {
  v: number;
  stages?: Record<string, number>;
  /** The stages as spans (see answer.ts RunnerSpan): a worker that predates them ignores them. */
  spans?: [string, number, number, string, string][];
} & (
  | { ok: true; result: unknown; reads?: unknown }
  | { ok: false; code: number; message: string }
);

export class ProtocolError extends Error {}

export function encodeFrame(type: FrameType, payload: Buffer | string): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  const prefix = Buffer.alloc(FRAME_PREFIX_BYTES);
  prefix.writeUInt8(type, 0);
  prefix.writeUInt32BE(body.length, 1);
  return Buffer.concat([prefix, body]);
}

export interface Frame {
  type: FrameType;
  payload: Buffer;
}

/**
 * Splits a byte stream into frames, one at a time. `maxPayload(type)` gives the bound of each
 * type this side accepts (undefined: the type is not expected); a frame beyond its bound is
 * refused from its prefix, before any of its payload is buffered.
 *
 * `maxPayload` may depend on the frames handled so far (the runner takes DATA only after the
 * HEADER): `next()` reads a frame's prefix only once every earlier frame has been handed out, so
 * handle each frame before asking for the next. One read of the socket often holds several
 * frames (HEADER and the first DATA frame, when the peer was slow to read).
 *
 * A frame that spans chunks is copied into a buffer of its own as its bytes come (no copy of the
 * whole frame at its end, on the event loop); one that arrives within a chunk is a slice of it.
 */
export class FrameReader {
  /** Bytes pushed and not yet consumed, oldest first. */
  private queue: Buffer[] = [];
  private queued = 0;
  private readonly prefix = Buffer.alloc(FRAME_PREFIX_BYTES);
  /** Bytes of the next frame's prefix received so far (while `current` is undefined). */
  private prefixFilled = 0;
  /** The frame whose payload is being received. */
  private current: { type: FrameType; payload: Buffer; filled: number } | undefined;

  constructor(private readonly maxPayload: (type: number) => number | undefined) {}

  /** Feed bytes; take the frames they complete with `next()`. */
  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.queue.push(chunk);
    this.queued += chunk.length;
  }

  /** The next complete frame, or undefined until more bytes come. Throws ProtocolError on a bad frame. */
  next(): Frame | undefined {
    while (this.queue.length > 0) {
      if (!this.current) {
        const head = this.queue[0]!;
        const n = Math.min(FRAME_PREFIX_BYTES - this.prefixFilled, head.length);
        head.copy(this.prefix, this.prefixFilled, 0, n);
        this.prefixFilled += n;
        this.consume(n);
        if (this.prefixFilled < FRAME_PREFIX_BYTES) continue;
        this.prefixFilled = 0;
        const type = this.prefix.readUInt8(0);
        const length = this.prefix.readUInt32BE(1);
        const max = this.maxPayload(type);
        if (max === undefined) throw new ProtocolError(`unexpected frame type ${type}`);
        if (length > max) throw new ProtocolError(`frame of type ${type} has ${length} bytes, more than its limit of ${max}`);
        const rest = this.queue[0];
        if (length === 0 || (rest && rest.length >= length)) {
          const payload = rest ? rest.subarray(0, length) : Buffer.alloc(0);
          this.consume(length);
          return { type: type as FrameType, payload };
        }
        // Memory of its own (allocated, not touched: pages are committed as the bytes come).
        this.current = { type: type as FrameType, payload: Buffer.allocUnsafeSlow(length), filled: 0 };
        continue;
      }
      const c = this.current;
      const head = this.queue[0]!;
      const n = Math.min(c.payload.length - c.filled, head.length);
      head.copy(c.payload, c.filled, 0, n);
      c.filled += n;
      this.consume(n);
      if (c.filled === c.payload.length) {
        this.current = undefined;
        return { type: c.type, payload: c.payload };
      }
    }
    return undefined;
  }

  /** Bytes of an incomplete frame still buffered (a stream that ends with some is truncated). */
  pending(): number {
    return this.queued + this.prefixFilled + (this.current ? FRAME_PREFIX_BYTES + this.current.filled : 0);
  }

  /** Drops `n` bytes from the head of the queue (never more than the head holds). */
  private consume(n: number): void {
    if (n === 0) return;
    this.queued -= n;
    if (n === this.queue[0]!.length) this.queue.shift();
    else this.queue[0] = this.queue[0]!.subarray(n);
  }
}
