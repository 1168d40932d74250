import zlib from 'node:zlib';
import { InflateFailure, PortableInflater } from './portable-inflate.js';

/**
 * A stream error with Go's `compress/gzip` text. `inFirstHeader` marks errors Go's
 * `gzip.NewReader` would return (Argo prefixes those with `error reading file: `).
 */
export class GzipError extends Error {
  constructor(
    message: string,
    readonly inFirstHeader: boolean,
  ) {
    super(message);
    this.name = 'GzipError';
  }
}

const ERR_HEADER = 'gzip: invalid header';
const ERR_CHECKSUM = 'gzip: invalid checksum';
const UNEXPECTED_EOF = 'unexpected EOF';
const FLAG_HCRC = 0x02;
const FLAG_EXTRA = 0x04;
const FLAG_NAME = 0x08;
const FLAG_COMMENT = 0x10;
// Go reads the NUL-terminated name/comment into a 512-byte buffer and rejects longer ones.
const MAX_HEADER_STRING = 512;
const OUT_CHUNK = 64 * 1024;

// The native handle behind zlib streams. Its synchronous `writeSync` is what zlib's own
// *Sync functions use; driving it directly gives a synchronous *streaming* inflate, which
// the public API lacks. Without it, pako's ZStream (portable-inflate.ts), with a warning at start.
// Why native: docs/decisions/0001-gunzip-native-handle.md
interface ZlibHandle {
  writeSync(flush: number, input: Buffer, inOff: number, inLen: number, out: Buffer, outOff: number, outLen: number): void;
  close(): void;
  onerror: (message: string, errno: number, code?: string) => void;
}
interface ZlibInternals {
  _handle?: ZlibHandle;
  _writeState?: Uint32Array;
}

/** What GoGunzip needs of a raw inflater: RawInflater below, or PortableInflater. */
interface Inflater {
  run(input: Buffer, off: number, len: number, out: Buffer, emit: (b: Buffer) => void): number;
  close(): void;
}

class RawInflater implements Inflater {
  private readonly handle: ZlibHandle;
  private readonly state: Uint32Array;
  private failure: string | undefined;

  constructor() {
    const z = zlib.createInflateRaw() as unknown as ZlibInternals;
    if (!z._handle || !z._writeState || typeof z._handle.writeSync !== 'function') {
      throw new Error(`Node.js ${process.version} lacks the zlib handle of its synchronous inflate`);
    }
    this.handle = z._handle;
    this.state = z._writeState;
    this.handle.onerror = message => {
      this.failure = message;
    };
  }

  /**
   * Inflate `input[off, off+len)` with output delivered to `emit`. Returns the number of input
   * bytes consumed; fewer than `len` means the deflate stream ended. Throws the zlib message.
   */
  run(input: Buffer, off: number, len: number, out: Buffer, emit: (b: Buffer) => void): number {
    let inOff = off;
    let avail = len;
    for (;;) {
      this.handle.writeSync(zlib.constants.Z_NO_FLUSH, input, inOff, avail, out, 0, out.length);
      if (this.failure !== undefined) throw new InflateFailure(this.failure);
      const availOut = this.state[0]!;
      const availIn = this.state[1]!;
      inOff += avail - availIn;
      avail = availIn;
      if (availOut < out.length) emit(out.subarray(0, out.length - availOut));
      if (availOut !== 0) return inOff - off;
    }
  }

  close(): void {
    this.handle.close();
  }
}

/** The inflater of this process (each thread decides for itself, the same way). */
let inflaterKind: 'native' | 'portable' = nativeInflateWorks() ? 'native' : 'portable';

function nativeInflateWorks(): boolean {
  try {
    new RawInflater().close();
    return true;
  } catch {
    // No usable handle on this Node.js: the portable inflater serves (chooseInflater warns).
    return false;
  }
}

function newInflater(): Inflater {
  return inflaterKind === 'native' ? new RawInflater() : new PortableInflater();
}

/**
 * Which inflater this process uses; `force` is for tests of either path. Each process asks at
 * start and warns once when it is the portable one.
 */
export function chooseInflater(force?: 'native' | 'portable'): 'native' | 'portable' {
  if (force) inflaterKind = force;
  return inflaterKind;
}

type Phase = 'fixed' | 'extraLen' | 'extra' | 'name' | 'comment' | 'hcrc' | 'body' | 'trailer' | 'trailing';

/**
 * A push-based, synchronous gzip decoder with Go's multi-member `gzip.Reader` semantics: header
 * validation and error texts (`gzip: invalid header`, `unexpected EOF`, `EOF` for empty input),
 * CRC-32/size verification per member (`gzip: invalid checksum`), further members read until
 * input ends. Decompressed bytes go to `emit` synchronously as views into a reused buffer.
 */
export class GoGunzip {
  private phase: Phase = 'fixed';
  private stopped = false;
  private member = 0;
  private total = 0;
  private readonly small = Buffer.alloc(MAX_HEADER_STRING);
  private smallLen = 0;
  private need = 10;
  private flags = 0;
  private headerCrc = 0;
  private inflater: Inflater | undefined;
  private readonly out = Buffer.allocUnsafe(OUT_CHUNK);
  private crc = 0;
  private size = 0;
  private bodyIn = 0;
  private readonly onData: (b: Buffer) => void;

  constructor(emit: (chunk: Buffer) => void) {
    this.onData = b => {
      this.crc = zlib.crc32(b, this.crc);
      this.size = (this.size + b.length) >>> 0;
      emit(b);
    };
  }

  /** Compressed input; throws GzipError. */
  push(buf: Buffer): void {
    let i = 0;
    this.total += buf.length;
    while (i < buf.length && !this.stopped) {
      switch (this.phase) {
        case 'fixed':
        case 'extraLen':
        case 'hcrc':
        case 'trailer':
          i = this.fill(buf, i);
          break;
        case 'extra': {
          const n = Math.min(this.need, buf.length - i);
          this.headerCrc = zlib.crc32(buf.subarray(i, i + n), this.headerCrc);
          this.need -= n;
          i += n;
          if (this.need === 0) this.afterExtra();
          break;
        }
        case 'name':
        case 'comment':
          i = this.headerString(buf, i);
          break;
        case 'body': {
          const used = this.inflate(buf, i);
          i += used;
          if (this.phase === 'body' && i < buf.length) this.bodyEnded();
          break;
        }
        case 'trailing':
          return;
      }
    }
  }

  /** Input ended: throws unless the data ended at a member boundary. */
  finish(): void {
    if (this.phase === 'fixed' && this.smallLen === 0) {
      if (this.member === 0) throw new GzipError('EOF', true);
      return;
    }
    const first = this.inFirstHeader();
    this.close();
    throw new GzipError(UNEXPECTED_EOF, first);
  }

  /**
   * The consumer has read all it wants: ignore the rest (Go's tar reader never reads past the
   * end-of-archive blocks, so a bad trailer or trailing garbage after them goes unnoticed).
   */
  stop(): void {
    this.stopped = true;
  }

  /** Release the native inflater early (after an error or when the consumer stops reading). */
  close(): void {
    this.inflater?.close();
    this.inflater = undefined;
  }

  private fill(buf: Buffer, i: number): number {
    const n = Math.min(this.need - this.smallLen, buf.length - i);
    buf.copy(this.small, this.smallLen, i, i + n);
    this.smallLen += n;
    if (this.smallLen === this.need) {
      const block = this.small.subarray(0, this.need);
      this.smallLen = 0;
      this.complete(block);
    }
    return i + n;
  }

  private complete(block: Buffer): void {
    switch (this.phase) {
      case 'fixed':
        if (block[0] !== 0x1f || block[1] !== 0x8b || block[2] !== 8) this.fail(ERR_HEADER);
        this.flags = block[3]!;
        this.headerCrc = zlib.crc32(block);
        if (this.flags & FLAG_EXTRA) {
          this.phase = 'extraLen';
          this.need = 2;
        } else this.afterExtra();
        return;
      case 'extraLen':
        this.headerCrc = zlib.crc32(block, this.headerCrc);
        this.need = block.readUInt16LE(0);
        this.phase = 'extra';
        if (this.need === 0) this.afterExtra();
        return;
      case 'hcrc':
        if (block.readUInt16LE(0) !== (this.headerCrc & 0xffff)) this.fail(ERR_HEADER);
        this.startBody();
        return;
      case 'trailer':
        if (block.readUInt32LE(0) !== this.crc >>> 0 || block.readUInt32LE(4) !== this.size) {
          this.fail(ERR_CHECKSUM);
        }
        this.member++;
        this.phase = 'fixed';
        this.need = 10;
        return;
      default:
        return;
    }
  }

  private afterExtra(): void {
    if (this.flags & FLAG_NAME) this.phase = 'name';
    else if (this.flags & FLAG_COMMENT) this.phase = 'comment';
    else this.afterStrings();
  }

  private afterStrings(): void {
    if (this.flags & FLAG_HCRC) {
      this.phase = 'hcrc';
      this.need = 2;
    } else this.startBody();
  }

  private headerString(buf: Buffer, i: number): number {
    const nul = buf.indexOf(0, i);
    const end = nul < 0 ? buf.length : nul + 1;
    this.headerCrc = zlib.crc32(buf.subarray(i, end), this.headerCrc);
    this.smallLen += end - i;
    if (this.smallLen > MAX_HEADER_STRING || (nul < 0 && this.smallLen >= MAX_HEADER_STRING)) this.fail(ERR_HEADER);
    if (nul >= 0) {
      this.smallLen = 0;
      if (this.phase === 'name' && this.flags & FLAG_COMMENT) this.phase = 'comment';
      else this.afterStrings();
    }
    return end;
  }

  private startBody(): void {
    this.phase = 'body';
    this.inflater = newInflater();
    this.crc = 0;
    this.size = 0;
    this.bodyIn = 0;
  }

  private inflate(buf: Buffer, i: number): number {
    try {
      const used = this.inflater!.run(buf, i, buf.length - i, this.out, this.onData);
      this.bodyIn += used;
      return used;
    } catch (err) {
      this.close();
      if (!(err instanceof InflateFailure)) throw err;
      // Go's flate reports the offset where it stopped; zlib does not say, so this is the
      // offset of the chunk that failed (an approximation).
      throw new GzipError(`flate: corrupt input before offset ${this.bodyIn}`, false);
    }
  }

  private bodyEnded(): void {
    this.close();
    this.phase = 'trailer';
    this.need = 8;
    this.smallLen = 0;
  }

  private inFirstHeader(): boolean {
    return this.member === 0 && this.phase !== 'body' && this.phase !== 'trailer';
  }

  private fail(text: string): never {
    const first = this.inFirstHeader();
    this.close();
    this.phase = 'trailing';
    throw new GzipError(text, first);
  }
}
