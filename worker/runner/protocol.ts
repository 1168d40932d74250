import { constants as bufferConstants } from 'node:buffer';

/**
 * The worker ↔ runner protocol: one request per connection on the runner's unix socket, as
 * frames of `type (u8) | payload length (u32 big-endian) | payload`.
 *
 *   worker → runner  HEADER  JSON `RunnerRequest`, once, first
 *                    DATA    tarball bytes, until `size` bytes have come (≤ DATA_FRAME_MAX each)
 *                    CANCEL  JSON `{reason: 'deadline' | 'canceled'}`, optional, any time
 *   runner → worker  ANSWER  JSON `RunnerAnswer`, once; then the runner closes the connection
 *
 * Closing the connection before the answer means `canceled` to the runner. The worker trusts
 * nothing from the runner (plugin code runs with the runner's uid and could replace it): every
 * frame is bounded before it is buffered, and the answer is validated (answer.ts).
 */
export const RUNNER_PROTOCOL_VERSION = 1;

export const FrameType = { HEADER: 1, DATA: 2, CANCEL: 3, ANSWER: 4 } as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

export const FRAME_PREFIX_BYTES = 5;
/** Tarball bytes per DATA frame: the worker sends 256 KiB, the runner accepts up to 1 MiB. */
export const DATA_FRAME_SEND = 256 * 1024;
export const DATA_FRAME_MAX = 1024 * 1024;
export const CANCEL_FRAME_MAX = 256;
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
}

/**
 * The runner's one answer: the executor's result (and reads when asked), or its failure; with
 * the durations of the run's stages (extract, exec, split), for the worker's metrics and log.
 */
export type RunnerAnswer = { v: number; stages?: Record<string, number> } & (
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
 * HEADER): `next()` asks it for a frame only once every earlier frame has been handed out, so
 * handle each frame before asking for the next. One read of the socket often holds several
 * frames (HEADER and the first DATA frame, when the peer was slow to read).
 */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;

  constructor(private readonly maxPayload: (type: number) => number | undefined) {}

  /** Feed bytes; take the frames they complete with `next()`. */
  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
  }

  /** The next complete frame, or undefined until more bytes come. Throws ProtocolError on a bad frame. */
  next(): Frame | undefined {
    if (this.buffered < FRAME_PREFIX_BYTES) return undefined;
    const prefix = this.peek(FRAME_PREFIX_BYTES);
    const type = prefix.readUInt8(0);
    const length = prefix.readUInt32BE(1);
    const max = this.maxPayload(type);
    if (max === undefined) throw new ProtocolError(`unexpected frame type ${type}`);
    if (length > max) throw new ProtocolError(`frame of type ${type} has ${length} bytes, more than its limit of ${max}`);
    if (this.buffered < FRAME_PREFIX_BYTES + length) return undefined;
    const all = this.take(FRAME_PREFIX_BYTES + length);
    return { type: type as FrameType, payload: all.subarray(FRAME_PREFIX_BYTES) };
  }

  /** Bytes of an incomplete frame still buffered (a stream that ends with some is truncated). */
  pending(): number {
    return this.buffered;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0]!.length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0]!.subarray(0, n);
  }

  private take(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    const rest = all.subarray(n);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.buffered = rest.length;
    return all.subarray(0, n);
  }
}
