import { ZStream, Z_BUF_ERROR, Z_NO_FLUSH, Z_OK, Z_STREAM_END, zlibInflate, zlibInflateEnd, zlibInflateInit2 } from 'pako';

/**
 * Raw inflate on pako's low-level API: the same contract as go-gunzip's native RawInflater, for
 * a Node.js whose zlib lacks the handle that one drives (slower: docs/decisions/0001-gunzip-native-handle.md).
 * `run` inflates input[off, off+len) into `out`, hands each filled part to `emit`, and returns
 * the input bytes consumed: fewer than `len` means the deflate stream ended. Throws zlib's message.
 */
export class PortableInflater {
  private readonly strm = new ZStream();

  constructor() {
    // -15: a raw deflate stream with a 32 KiB window, as zlib.createInflateRaw.
    const status = zlibInflateInit2(this.strm, -15);
    if (status !== Z_OK) throw new Error(`pako inflateInit2: status ${status}`);
  }

  run(input: Buffer, off: number, len: number, out: Buffer, emit: (b: Buffer) => void): number {
    const strm = this.strm;
    strm.input = input;
    strm.next_in = off;
    strm.avail_in = len;
    for (;;) {
      strm.output = out as Uint8Array<ArrayBuffer>;
      strm.next_out = 0;
      strm.avail_out = out.length;
      const status = zlibInflate(strm, Z_NO_FLUSH);
      // Z_BUF_ERROR: no progress possible (input used up); not an error in a stream.
      if (status !== Z_OK && status !== Z_STREAM_END && status !== Z_BUF_ERROR) throw new InflateFailure(strm.msg || `status ${status}`);
      const filled = out.length - strm.avail_out;
      if (filled > 0) emit(out.subarray(0, filled));
      if (status === Z_STREAM_END || strm.avail_out !== 0) return strm.next_in - off;
    }
  }

  close(): void {
    zlibInflateEnd(this.strm);
  }
}

/** zlib's own message for corrupt input (both inflaters throw it). */
export class InflateFailure extends Error {}
