import zlib from 'node:zlib';

/**
 * Builds tarballs byte by byte, including hostile ones: any name (absolute, `..`, empty), any
 * link target, hardlinks/fifos/devices, raw type flags, PAX and GNU long names, duplicate
 * entries, lying size fields, missing end-of-archive blocks; plus gzip helpers for
 * multi-member, truncated and bit-flipped streams.
 */

export type EntryType = 'file' | 'dir' | 'symlink' | 'hardlink' | 'char' | 'block' | 'fifo' | 'contiguous';

export interface TarEntry {
  name: string;
  /** Default `file`. */
  type?: EntryType;
  /** A raw one-character type flag instead of `type` (e.g. `\0`, `g`, `x`, `S`). */
  typeflag?: string;
  content?: string | Buffer;
  linkname?: string;
  /** Default 0o644 (files), 0o755 (dirs), 0o777 (symlinks). */
  mode?: number;
  uid?: number;
  gid?: number;
  uname?: string;
  gname?: string;
  /** Seconds since the epoch; default 1700000000. */
  mtime?: number;
  /** Declared size field, when it must disagree with the content actually written. */
  size?: number;
  /** PAX records written in an `x` header before this entry. */
  pax?: Record<string, string>;
  /** How a name or link target over 100 bytes is carried: PAX records (default) or GNU L/K. */
  longNames?: 'pax' | 'gnu';
}

const TYPEFLAG: Record<EntryType, string> = {
  file: '0',
  hardlink: '1',
  symlink: '2',
  char: '3',
  block: '4',
  dir: '5',
  fifo: '6',
  contiguous: '7',
};

const BLOCK = 512;

function octal(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, '0') + '\0';
}

function put(block: Buffer, off: number, len: number, value: string | Buffer): void {
  const b = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
  b.copy(block, off, 0, Math.min(b.length, len));
}

/** One raw 512-byte USTAR header block with a correct checksum. */
export function headerBlock(fields: {
  name: string | Buffer;
  typeflag: string;
  size: number;
  mode?: number;
  linkname?: string | Buffer;
  uid?: number;
  gid?: number;
  uname?: string;
  gname?: string;
  mtime?: number;
}): Buffer {
  const b = Buffer.alloc(BLOCK);
  put(b, 0, 100, fields.name);
  put(b, 100, 8, octal(fields.mode ?? 0o644, 8));
  put(b, 108, 8, octal(fields.uid ?? 0, 8));
  put(b, 116, 8, octal(fields.gid ?? 0, 8));
  put(b, 124, 12, octal(fields.size, 12));
  put(b, 136, 12, octal(fields.mtime ?? 1700000000, 12));
  b[156] = fields.typeflag.charCodeAt(0);
  put(b, 157, 100, fields.linkname ?? '');
  put(b, 257, 6, 'ustar\0');
  put(b, 263, 2, '00');
  put(b, 265, 32, fields.uname ?? '');
  put(b, 297, 32, fields.gname ?? '');
  return withChecksum(b);
}

/** Recompute the checksum of a header block (after editing it by hand). */
export function withChecksum(block: Buffer): Buffer {
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (const c of block) sum += c;
  put(block, 148, 8, sum.toString(8).padStart(6, '0') + '\0 ');
  return block;
}

function pad(data: Buffer): Buffer[] {
  const rest = (BLOCK - (data.length % BLOCK)) % BLOCK;
  return rest === 0 ? [data] : [data, Buffer.alloc(rest)];
}

/** A PAX record `"<len> <key>=<value>\n"`. */
export function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = Buffer.byteLength(body) + 1;
  while (String(len).length + Buffer.byteLength(body) !== len) len++;
  return `${len}${body}`;
}

/** A meta entry (`x`, `g`, `L`, `K`) with a raw payload. */
export function metaEntry(typeflag: string, payload: string | Buffer, name = '././@meta'): Buffer {
  const data = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  return Buffer.concat([headerBlock({ name, typeflag, size: data.length }), ...pad(data)]);
}

function entryBytes(e: TarEntry): Buffer[] {
  const typeflag = e.typeflag ?? TYPEFLAG[e.type ?? 'file'];
  const content = e.content === undefined ? Buffer.alloc(0) : Buffer.from(e.content);
  const out: Buffer[] = [];
  const pax: Record<string, string> = { ...e.pax };
  let name: string | Buffer = e.name;
  let linkname: string | Buffer = e.linkname ?? '';
  const long = e.longNames ?? 'pax';
  if (Buffer.byteLength(e.name) > 100) {
    if (long === 'gnu') out.push(metaEntry('L', e.name + '\0', '././@LongLink'));
    else pax.path = e.name;
    name = Buffer.from(e.name).subarray(0, 100);
  }
  if (Buffer.byteLength(e.linkname ?? '') > 100) {
    if (long === 'gnu') out.push(metaEntry('K', e.linkname + '\0', '././@LongLink'));
    else pax.linkpath = e.linkname!;
    linkname = Buffer.from(e.linkname!).subarray(0, 100);
  }
  const records = Object.entries(pax);
  if (records.length > 0) {
    out.push(metaEntry('x', records.map(([k, v]) => paxRecord(k, v)).join(''), 'PaxHeaders.0/entry'));
  }
  const defaultMode = typeflag === '5' ? 0o755 : typeflag === '2' ? 0o777 : 0o644;
  out.push(
    headerBlock({
      name,
      typeflag,
      size: e.size ?? content.length,
      mode: e.mode ?? defaultMode,
      linkname,
      uid: e.uid,
      gid: e.gid,
      uname: e.uname,
      gname: e.gname,
      mtime: e.mtime,
    }),
  );
  if (content.length > 0) out.push(...pad(content));
  return out;
}

/** Raw tar bytes for the entries; `end: false` omits the two end-of-archive blocks. */
export function buildTar(entries: TarEntry[], opts: { end?: boolean } = {}): Buffer {
  const parts = entries.flatMap(entryBytes);
  if (opts.end !== false) parts.push(Buffer.alloc(2 * BLOCK));
  return Buffer.concat(parts);
}

/** One gzip member. */
export function gzipBytes(data: Buffer, level = 6): Buffer {
  return zlib.gzipSync(data, { level });
}

/** A gzipped tar of the entries. */
export function buildTgz(entries: TarEntry[], opts: { end?: boolean } = {}): Buffer {
  return gzipBytes(buildTar(entries, opts));
}

/** Several gzip members concatenated (Go reads them as one stream). */
export function gzipMembers(...parts: Buffer[]): Buffer {
  return Buffer.concat(parts.map(p => gzipBytes(p)));
}

/** The first `n` bytes (a negative `n` drops that many from the end). */
export function truncated(data: Buffer, n: number): Buffer {
  return Buffer.from(data.subarray(0, n < 0 ? data.length + n : n));
}

/** A copy with one bit flipped. */
export function flipBit(data: Buffer, byteOffset: number, bit = 0): Buffer {
  const copy = Buffer.from(data);
  copy[byteOffset] = copy[byteOffset]! ^ (1 << bit);
  return copy;
}
