/** Protobuf wire encoding by hand, so that strings may hold invalid UTF-8 and messages may be malformed. */
function varint(n: number): Buffer {
  const out: number[] = [];
  let v = BigInt(n);
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) b |= 0x80;
    out.push(b);
  } while (v > 0n);
  return Buffer.from(out);
}

function lenField(field: number, data: Buffer): Buffer {
  return Buffer.concat([varint((field << 3) | 2), varint(data.length), data]);
}

export interface RawMetadata {
  appName?: Buffer;
  appRelPath?: Buffer;
  checksum?: Buffer;
  size?: number;
  env?: { name: Buffer; value: Buffer }[];
}

/** An AppStreamRequest carrying metadata whose strings are raw bytes. */
export function rawMetadataMessage(m: RawMetadata): Buffer {
  const parts: Buffer[] = [];
  if (m.appName) parts.push(lenField(1, m.appName));
  if (m.appRelPath) parts.push(lenField(2, m.appRelPath));
  if (m.checksum) parts.push(lenField(3, m.checksum));
  if (m.size !== undefined) parts.push(Buffer.concat([varint(4 << 3), varint(m.size)]));
  for (const e of m.env ?? []) parts.push(lenField(5, Buffer.concat([lenField(1, e.name), lenField(2, e.value)])));
  return lenField(1, Buffer.concat(parts));
}

/** An AppStreamRequest carrying one file chunk. */
export function rawChunkMessage(chunk: Buffer): Buffer {
  return lenField(2, lenField(1, chunk));
}
