import { Metadata, type ServiceError } from '@grpc/grpc-js';
import type { ConfigManagementPluginServiceClient } from '../../../proto/generated/cmpserver/plugin/plugin.js';

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

/** A GenerateManifest call with raw message bytes; resolves with `{ok}` or the status, never throws. */
export function rawGenerate(client: ConfigManagementPluginServiceClient, messages: Buffer[], timeoutMs: number): Promise<{ ok: true } | { code: number; details: string }> {
  return new Promise(resolve => {
    const call = client.makeClientStreamRequest<Buffer, Buffer>(
      '/plugin.ConfigManagementPluginService/GenerateManifest',
      b => b,
      b => b,
      new Metadata(),
      { deadline: Date.now() + timeoutMs },
      (err: ServiceError | null) => resolve(err ? { code: err.code, details: err.details } : { ok: true }),
    );
    call.on('error', () => {});
    for (const m of messages) call.write(m);
    call.end();
  });
}
