import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AppStreamRequest } from '../../../proto/generated/cmpserver/plugin/plugin.js';
import { decodeAppStreamRequest } from '../../../proxy/ingest/decode-request.js';
import { rng } from '../../helpers/rng.js';

/**
 * The hand decoder of file chunks must be the generated decoder on every input: same message,
 * or the same error (grpc-js answers INTERNAL "Error deserializing request" for any throw).
 * Inputs: canonical chunks of every varint length, metadata, mixes, repeated and unknown fields
 * of every wire type, non-minimal varints, and truncations and byte mutations of all of them.
 */

const rand = rng(12);
const int = (n: number) => Math.floor(rand() * n);
const bytes = (n: number) => Buffer.from(Array.from({ length: n }, () => int(256)));

function varint(v: number): Buffer {
  const out: number[] = [];
  do {
    out.push((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v = Math.floor(v / 128);
  } while (v > 0);
  return Buffer.from(out);
}

/** `v` as a varint padded to `width` bytes (the longer encodings protobuf decoders accept). */
function paddedVarint(v: number, width: number): Buffer {
  const b = [...varint(v)];
  while (b.length < width) {
    b[b.length - 1]! |= 0x80;
    b.push(0);
  }
  return Buffer.from(b);
}

const field = (tag: number, payload: Buffer, len = varint(payload.length)) => Buffer.concat([Buffer.from([tag]), len, payload]);
const chunkMsg = (chunk: Buffer) => (chunk.length ? field(0x12, field(0x0a, chunk)) : field(0x12, Buffer.alloc(0)));
const metaMsg = () =>
  Buffer.from(
    AppStreamRequest.encode({
      metadata: {
        appName: `app-${int(100)}`,
        appRelPath: 'apps/x',
        checksum: bytes(8).toString('hex'),
        size: int(1e9),
        env: Array.from({ length: int(3) }, (_, i) => ({ name: `N${i}`, value: `v${int(10)}` })),
      },
    }).finish(),
  );

/** An unknown field of each wire type, valid or not (6 and 7 are invalid, 3/4 are groups). */
function unknownField(): Buffer {
  const num = 3 + int(20);
  switch (int(8)) {
    case 0:
      return Buffer.concat([varint(num << 3), varint(int(1e6))]);
    case 1:
      return Buffer.concat([varint((num << 3) | 1), bytes(8)]);
    case 2:
      return Buffer.concat([varint((num << 3) | 2), varint(5), bytes(5)]);
    case 3:
      return Buffer.concat([varint((num << 3) | 3), varint((num << 3) | 4)]);
    case 4:
      return varint((num << 3) | 4);
    case 5:
      return Buffer.concat([varint((num << 3) | 5), bytes(4)]);
    default:
      return Buffer.concat([varint((num << 3) | (6 + int(2))), bytes(3)]);
  }
}

const CHUNK_SIZES = [0, 1, 2, 100, 125, 126, 127, 128, 1021, 1024, 16379, 16380, 16384, 70000, (1 << 21) + 3];

function* inputs(): Generator<Buffer> {
  for (const n of CHUNK_SIZES) yield chunkMsg(bytes(n));
  yield Buffer.alloc(0);
  yield Buffer.from([0x12]);
  yield Buffer.from([0x12, 0x02, 0x0a, 0x00]);
  for (let i = 0; i < 300; i++) {
    const chunk = bytes(int(3) === 0 ? int(130) : int(2000));
    const parts: Buffer[] = [];
    switch (int(9)) {
      case 0:
        parts.push(chunkMsg(chunk));
        break;
      case 1:
        parts.push(metaMsg());
        break;
      case 2:
        parts.push(metaMsg(), chunkMsg(chunk));
        break;
      case 3:
        parts.push(chunkMsg(chunk), metaMsg());
        break;
      case 4:
        parts.push(chunkMsg(bytes(int(50))), chunkMsg(chunk));
        break;
      case 5: {
        // Unknown fields around the chunk, inside the file message or outside it.
        const inner: Buffer[] = [field(0x0a, chunk)];
        inner.splice(int(2), 0, unknownField());
        if (int(2)) inner.push(field(0x0a, bytes(int(10))));
        const file = field(0x12, Buffer.concat(inner));
        parts.push(...(int(2) ? [unknownField(), file] : [file, unknownField()]));
        break;
      }
      case 6: {
        // Lengths in longer encodings than needed.
        const inner = Buffer.concat([Buffer.from([0x0a]), paddedVarint(chunk.length, 1 + int(5)), chunk]);
        parts.push(Buffer.concat([Buffer.from([0x12]), paddedVarint(inner.length, 1 + int(5)), inner]));
        break;
      }
      case 7:
        // Wrong wire type for the known field numbers.
        parts.push(Buffer.concat([Buffer.from([[0x10, 0x13, 0x14, 0x15, 0x08][int(5)]!]), chunkMsg(chunk).subarray(1)]));
        break;
      default:
        parts.push(Buffer.from([0x12]), bytes(int(12)));
    }
    const msg = Buffer.concat(parts);
    yield msg;
    // Truncated anywhere, and with a byte changed.
    if (msg.length) yield msg.subarray(0, int(msg.length));
    if (msg.length) {
      const mutated = Buffer.from(msg);
      mutated[int(Math.min(msg.length, 8))] = int(256);
      yield mutated;
    }
    // Lengths that say more or less than there is.
    if (msg.length > 2 && msg[0] === 0x12) {
      const lying = Buffer.from(msg);
      lying[1] = (lying[1]! + (int(2) ? 1 : -1)) & 0xff;
      yield lying;
    }
  }
}

type Outcome = { value: AppStreamRequest } | { error: string };

function outcome(decode: (b: Buffer) => AppStreamRequest, input: Buffer): Outcome {
  try {
    return { value: decode(input) };
  } catch (err) {
    return { error: `${(err as Error).constructor.name}: ${(err as Error).message}` };
  }
}

test('decodes every input as the generated decoder does: same message or same error', () => {
  let n = 0;
  let errors = 0;
  for (const input of inputs()) {
    // A buffer of its own, offset inside a larger one, as grpc-js hands them over.
    const framed = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), input]).subarray(5);
    const expected = outcome(b => AppStreamRequest.decode(b), framed);
    const actual = outcome(decodeAppStreamRequest, framed);
    assert.deepStrictEqual(actual, expected, `input ${framed.toString('hex').slice(0, 80)}`);
    n++;
    if ('error' in expected) errors++;
  }
  assert.ok(n > 900 && errors > 50, `${n} inputs, ${errors} malformed`);
});

test('a canonical file chunk is a view of the received buffer, not a copy', () => {
  for (const size of CHUNK_SIZES.filter(s => s > 0)) {
    const input = chunkMsg(bytes(size));
    const msg = decodeAppStreamRequest(input);
    assert.equal(msg.file!.chunk.buffer, input.buffer);
    assert.equal(msg.file!.chunk.byteOffset, input.byteOffset + input.length - size);
  }
});
