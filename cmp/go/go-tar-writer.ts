import { goJoin } from './go-path.js';

const BLOCK = 512;
const NAME_SIZE = 100;
const PREFIX_SIZE = 155;

/** The fields of a header as Argo's `tar.FileInfoHeader` fills them (format left to the writer). */
export interface WriteHeader {
  name: string;
  typeflag: '0' | '2' | '5';
  linkname: string;
  mode: number;
  uid: number;
  gid: number;
  uname: string;
  gname: string;
  size: number;
  /** Seconds (already rounded). */
  mtime: number;
}

function isAscii(s: string): boolean {
  return /^[\x00-\x7f]*$/.test(s);
}

/** Go's toASCII: drops non-ASCII characters and NULs. */
function toAscii(s: string): string {
  return s.replace(/[^\x01-\x7f]/gu, '');
}

function fitsInOctal(width: number, x: number): boolean {
  return x >= 0 && (width >= 22 || x < 2 ** ((width - 1) * 3));
}

/** Go's splitUSTARPath. */
function splitUstarPath(name: string): [string, string] | undefined {
  let length = Buffer.byteLength(name);
  if (length <= NAME_SIZE || !isAscii(name)) return undefined;
  if (length > PREFIX_SIZE + 1) length = PREFIX_SIZE + 1;
  else if (name[length - 1] === '/') length--;
  const i = name.slice(0, length).lastIndexOf('/');
  const nlen = name.length - i - 1;
  if (i <= 0 || nlen > NAME_SIZE || nlen === 0 || i > PREFIX_SIZE) return undefined;
  return [name.slice(0, i), name.slice(i + 1)];
}

/** Go's formatPAXRecord. */
function paxRecord(k: string, v: string): string {
  const size0 = Buffer.byteLength(k) + Buffer.byteLength(v) + 3;
  let size = size0 + String(size0).length;
  let rec = `${size} ${k}=${v}\n`;
  if (Buffer.byteLength(rec) !== size) {
    size = Buffer.byteLength(rec);
    rec = `${size} ${k}=${v}\n`;
  }
  return rec;
}

function putString(b: Buffer, off: number, len: number, s: string): void {
  const bytes = Buffer.from(s, 'utf8');
  bytes.copy(b, off, 0, Math.min(bytes.length, len));
}

/** Go's formatter.formatOctal: zero-padded, NUL-terminated, 0 when it does not fit. */
function putOctal(b: Buffer, off: number, len: number, x: number): void {
  const v = fitsInOctal(len, x) ? x : 0;
  putString(b, off, len, v.toString(8).padStart(len - 1, '0'));
}

function block(h: WriteHeader, name: string, str: (s: string) => string): Buffer {
  const b = Buffer.alloc(BLOCK);
  putString(b, 0, 100, str(name));
  putOctal(b, 100, 8, h.mode);
  putOctal(b, 108, 8, h.uid);
  putOctal(b, 116, 8, h.gid);
  putOctal(b, 124, 12, h.size);
  putOctal(b, 136, 12, h.mtime);
  b[156] = h.typeflag.charCodeAt(0);
  putString(b, 157, 100, str(h.linkname));
  putString(b, 265, 32, str(h.uname));
  putString(b, 297, 32, str(h.gname));
  putOctal(b, 329, 8, 0);
  putOctal(b, 337, 8, 0);
  return b;
}

function finish(b: Buffer): Buffer {
  b.write('ustar\0', 257, 'latin1');
  b.write('00', 263, 'latin1');
  b.fill(0x20, 148, 156);
  let sum = 0;
  for (const c of b) sum += c;
  putOctal(b, 148, 7, sum);
  b[155] = 0x20;
  return b;
}

/** Zero padding after `size` bytes of content. */
export function padding(size: number): Buffer {
  return Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK);
}

/** The two zero blocks Go's tar.Writer.Close writes. */
export const END_OF_ARCHIVE = Buffer.alloc(2 * BLOCK);

/**
 * The header bytes Go's `tar.Writer.WriteHeader` writes for a header with an unspecified
 * format: USTAR when every field fits (long ASCII names split into prefix/name), otherwise a PAX
 * `x` header (records sorted by key) followed by a main header with ASCII-only, truncated fields.
 */
export function encodeHeader(h: WriteHeader): Buffer {
  const pax = new Map<string, string>();
  let ustar = true;
  const str = (s: string, size: number, key: string, splittable: boolean) => {
    const tooLong = Buffer.byteLength(s) > size;
    if (!isAscii(s) || tooLong) {
      if (!splittable || !splitUstarPath(s)) ustar = false;
      pax.set(key, s);
    }
  };
  const num = (n: number, size: number, key: string) => {
    if (!fitsInOctal(size, n)) {
      ustar = false;
      pax.set(key, String(n));
    }
  };
  str(h.name, 100, 'path', true);
  str(h.linkname, 100, 'linkpath', false);
  str(h.uname, 32, 'uname', false);
  str(h.gname, 32, 'gname', false);
  num(h.uid, 8, 'uid');
  num(h.gid, 8, 'gid');
  num(h.size, 12, 'size');
  num(h.mtime, 12, 'mtime');
  if (ustar) {
    const split = splitUstarPath(h.name);
    const b = block(h, split ? split[1] : h.name, s => s);
    if (split) putString(b, 345, 155, split[0]);
    return finish(b);
  }
  const data = Buffer.from(
    [...pax.keys()]
      .sort()
      .map(k => paxRecord(k, pax.get(k)!))
      .join(''),
    'utf8',
  );
  const slash = h.name.lastIndexOf('/');
  const dir = h.name.slice(0, slash + 1);
  const file = h.name.slice(slash + 1);
  const paxName = toAscii(goJoin(dir, 'PaxHeaders.0', file))
    .slice(0, NAME_SIZE)
    .replace(/\/+$/, '');
  const x = Buffer.alloc(BLOCK);
  putString(x, 0, 100, paxName);
  putOctal(x, 100, 8, 0);
  putOctal(x, 108, 8, 0);
  putOctal(x, 116, 8, 0);
  putOctal(x, 124, 12, data.length);
  putOctal(x, 136, 12, 0);
  x[156] = 'x'.charCodeAt(0);
  const main = block(h, h.name, s => toAscii(s));
  return Buffer.concat([finish(x), data, padding(data.length), finish(main)]);
}
