import { AppStreamRequest } from '../../proto/generated/cmpserver/plugin/plugin.js';

/** The wire tags of `AppStreamRequest.file` (field 2) and `File.chunk` (field 1), both length-delimited. */
const FILE_TAG = 0x12;
const CHUNK_TAG = 0x0a;

/**
 * Decode one AppStreamRequest as the generated decoder does, without its per-message cost for
 * the message that makes up the stream: a file chunk (1 KiB each by default). The generated
 * decoder builds a reader, two message objects and copies the chunk; here the chunk is a view of
 * the received buffer (grpc-js gives each message a buffer of its own and never reuses it).
 *
 * Only the exact encoding Go and protobuf-ts write for a file chunk takes the short path:
 * `12 <len> [0a <n> <n bytes>]`, ending at the end of the buffer, lengths as varints of at most
 * four bytes. Anything else (metadata, unknown fields, repeated fields, groups, malformed input)
 * goes to the generated decoder, so results and errors are the generated decoder's.
 */
export function decodeAppStreamRequest(buf: Buffer): AppStreamRequest {
  const chunk = buf[0] === FILE_TAG ? fileChunk(buf) : undefined;
  return chunk ? { metadata: undefined, file: { chunk } } : AppStreamRequest.decode(buf);
}

/** The chunk of a canonical one-field file message, or undefined when `buf` is anything else. */
function fileChunk(buf: Buffer): Buffer | undefined {
  const fileLen = varint(buf, 1);
  if (fileLen < 0 || 1 + varintBytes(fileLen) + fileLen !== buf.length) return undefined;
  // An empty chunk is not written: the file message is empty.
  if (fileLen === 0) return buf.subarray(buf.length);
  const at = 1 + varintBytes(fileLen);
  if (buf[at] !== CHUNK_TAG) return undefined;
  const chunkLen = varint(buf, at + 1);
  const from = at + 1 + varintBytes(chunkLen);
  if (chunkLen < 0 || from + chunkLen !== buf.length) return undefined;
  return buf.subarray(from);
}

/**
 * The minimally encoded varint of at most 4 bytes (< 2^28, more than grpc accepts in a message)
 * at `pos`, or -1. A number, not an object: this runs for every chunk.
 */
function varint(buf: Buffer, pos: number): number {
  let value = 0;
  for (let i = 0; i < 4; i++) {
    const b = buf[pos + i];
    if (b === undefined) return -1;
    value |= (b & 0x7f) << (7 * i);
    // A last byte of 0 after others is a longer encoding than needed: not the canonical form.
    if (b < 0x80) return b === 0 && i > 0 ? -1 : value;
  }
  return -1;
}

/** Bytes of the minimal varint encoding of `value` (< 2^28). */
function varintBytes(value: number): number {
  return value < 1 << 7 ? 1 : value < 1 << 14 ? 2 : value < 1 << 21 ? 3 : 4;
}
