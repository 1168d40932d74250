/** A header as Go's `tar.Reader.Next` returns it (meta headers merged, `\0` type converted). */
export interface TarHeader {
  /** One character: `0` file, `5` dir, `2` symlink, `1` hardlink, `g` PAX global header… */
  typeflag: string;
  name: string;
  linkname: string;
  /** Raw header mode (permission bits plus setuid/setgid/sticky). */
  mode: number;
  uid: number;
  gid: number;
  /** Logical content size (0 for header-only types). */
  size: number;
  mtime: number;
}

/** Receives entries in archive order. */
export interface TarVisitor {
  /** Return true to receive the entry's content through `data` and `end`. */
  entry(h: TarHeader): boolean;
  data(chunk: Buffer): void;
  end(): void;
}

/**
 * The caller's bounds (ours, not Go's): each hook throws the caller's own error to stop reading.
 * `entry` sees every entry's name before anyone acts on it, with the count so far (this one
 * included); `bytes` sees the running total of bytes the archive's entries occupy.
 */
export interface TarGuard {
  entry(name: string, count: number): void;
  bytes(total: number): void;
}

/** A tar format error with Go's `archive/tar` text. */
export class TarError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TarError';
  }
}

export const ERR_TAR_HEADER = 'archive/tar: invalid tar header';
const ERR_FIELD_TOO_LONG = 'archive/tar: header field too long';
const ERR_SPARSE = 'archive/tar: PAX sparse files are not supported by cmp-offload';
const UNEXPECTED_EOF = 'unexpected EOF';
const BLOCK = 512;
// Go's maxSpecialFileSize: PAX and GNU long-name payloads above 1 MiB are rejected.
const MAX_SPECIAL = 1 << 20;
// Types Go treats as having no data section whatever their size field says.
const HEADER_ONLY = new Set(['1', '2', '3', '4', '5', '6']);

type State = 'header' | 'zero2' | 'data' | 'pad' | 'sparseExt' | 'done';
type DataMode = 'consume' | 'skip' | 'meta';

interface RawHeader extends TarHeader {
  format: 'v7' | 'ustar' | 'gnu' | 'star';
  block: Buffer;
}

/**
 * A push-based, synchronous reader with Go's `archive/tar` semantics, including its error texts
 * and its quirks: header-only types never have data, a stream that ends at an entry boundary
 * (or inside padding) is a normal end, PAX `x`/GNU `L`/`K` meta headers are merged into the next
 * entry, `g` headers are returned as entries. Memory is bounded by the 1 MiB meta payload cap.
 */
export class GoTarReader {
  private state: State = 'header';
  private readonly blk = Buffer.alloc(BLOCK);
  private blkLen = 0;
  private mode: DataMode = 'skip';
  private remaining = 0;
  private metaChunks: Buffer[] = [];
  private metaLen = 0;
  private metaHeader: RawHeader | undefined;
  private sparseHeader: TarHeader | undefined;
  private pax: Map<string, string> | undefined;
  private gnuLongName = '';
  private gnuLongLink = '';
  private entries = 0;
  private bytes = 0;

  constructor(
    private readonly visitor: TarVisitor,
    private readonly guard: TarGuard,
  ) {}

  /** True once the end-of-archive blocks were read; later input is ignored, as Go never reads it. */
  get done(): boolean {
    return this.state === 'done';
  }

  /** True while inside the content of an entry the visitor consumes (Argo's io.Copy). */
  get inContent(): boolean {
    return this.state === 'data' && this.mode === 'consume';
  }

  push(buf: Buffer): void {
    let i = 0;
    while (i < buf.length && this.state !== 'done') {
      if (this.state === 'data') {
        const n = Math.min(this.remaining, buf.length - i);
        const part = buf.subarray(i, i + n);
        i += n;
        this.remaining -= n;
        if (this.mode === 'consume') this.visitor.data(part);
        else if (this.mode === 'meta') this.collectMeta(part);
        if (this.remaining === 0) this.dataDone();
      } else if (this.state === 'pad') {
        const n = Math.min(this.remaining, buf.length - i);
        i += n;
        this.remaining -= n;
        if (this.remaining === 0) this.state = 'header';
      } else {
        const n = Math.min(BLOCK - this.blkLen, buf.length - i);
        buf.copy(this.blk, this.blkLen, i, i + n);
        this.blkLen += n;
        i += n;
        if (this.blkLen === BLOCK) {
          this.blkLen = 0;
          this.onBlock();
        }
      }
    }
  }

  /** Input ended. Throws `unexpected EOF` unless Go's reader would have returned io.EOF. */
  finish(): void {
    switch (this.state) {
      case 'done':
      case 'pad':
        return;
      case 'header':
      case 'zero2':
        if (this.blkLen === 0) return;
        throw new TarError(UNEXPECTED_EOF);
      default:
        throw new TarError(UNEXPECTED_EOF);
    }
  }

  private onBlock(): void {
    if (this.state === 'sparseExt') return this.onSparseExt();
    const zero = isZero(this.blk);
    if (this.state === 'zero2') {
      if (!zero) throw new TarError(ERR_TAR_HEADER);
      this.state = 'done';
      return;
    }
    if (zero) {
      this.state = 'zero2';
      return;
    }
    const h = readHeader(this.blk);
    if (!HEADER_ONLY.has(h.typeflag) && h.size < 0) throw new TarError(ERR_TAR_HEADER);
    switch (h.typeflag) {
      case 'x':
      case 'g':
      case 'L':
      case 'K':
        return this.startMeta(h);
      default:
        return this.onEntry(h);
    }
  }

  private startMeta(h: RawHeader): void {
    const wanted = Math.min(h.size, MAX_SPECIAL + 1);
    this.countBytes(BLOCK + wanted);
    this.metaHeader = h;
    this.metaChunks = [];
    this.metaLen = 0;
    this.startData(wanted, 'meta');
  }

  private collectMeta(part: Buffer): void {
    this.metaChunks.push(Buffer.from(part));
    this.metaLen += part.length;
  }

  private onMetaDone(): void {
    const h = this.metaHeader!;
    const data = Buffer.concat(this.metaChunks, this.metaLen);
    this.metaChunks = [];
    if (h.size > MAX_SPECIAL) throw new TarError(ERR_FIELD_TOO_LONG);
    if (h.typeflag === 'L') this.gnuLongName = cString(data);
    else if (h.typeflag === 'K') this.gnuLongLink = cString(data);
    else {
      const records = parsePax(data);
      if (h.typeflag === 'x') this.pax = records;
      else {
        // A global header is returned as an entry of its own (Go never applies it to others).
        const path = records.get('path');
        this.emit({ ...h, name: path ? path : h.name, typeflag: 'g', size: 0 }, 0);
      }
    }
  }

  private onEntry(raw: RawHeader): void {
    const h: TarHeader = {
      typeflag: raw.typeflag,
      name: raw.name,
      linkname: raw.linkname,
      mode: raw.mode,
      uid: raw.uid,
      gid: raw.gid,
      size: raw.size,
      mtime: raw.mtime,
    };
    if (this.pax) mergePax(h, this.pax);
    if (this.gnuLongName !== '') h.name = this.gnuLongName;
    if (this.gnuLongLink !== '') h.linkname = this.gnuLongLink;
    if (h.typeflag === '\0') h.typeflag = h.name.endsWith('/') ? '5' : '0';
    const physical = HEADER_ONLY.has(h.typeflag) ? 0 : h.size;
    if (physical < 0) throw new TarError(ERR_TAR_HEADER);
    if (this.pax && isPaxSparse(this.pax)) throw new TarError(ERR_SPARSE);
    if (h.typeflag === 'S') {
      this.startOldGnuSparse(raw, h, physical);
      return;
    }
    this.startData(physical, this.emit(h, physical) ? 'consume' : 'skip');
  }

  /** Count and hand over an entry; returns whether the visitor consumes its content. */
  private emit(h: TarHeader, physical: number): boolean {
    this.pax = undefined;
    this.gnuLongName = '';
    this.gnuLongLink = '';
    this.guard.entry(h.name, ++this.entries);
    this.countBytes(physical);
    return this.visitor.entry({ ...h, size: HEADER_ONLY.has(h.typeflag) ? 0 : h.size });
  }

  private startData(n: number, mode: DataMode): void {
    this.mode = mode;
    this.remaining = n;
    this.padAfter = (BLOCK - (n % BLOCK)) % BLOCK;
    this.state = 'data';
    if (n === 0) this.dataDone();
  }

  private padAfter = 0;

  private dataDone(): void {
    const mode = this.mode;
    this.mode = 'skip';
    this.remaining = this.padAfter;
    this.state = this.remaining > 0 ? 'pad' : 'header';
    if (mode === 'consume') this.visitor.end();
    else if (mode === 'meta') this.onMetaDone();
  }

  private countBytes(n: number): void {
    this.bytes += n;
    this.guard.bytes(this.bytes);
  }

  // Old GNU sparse (`S`): Go reads the sparse map (and its extension blocks) and validates it;
  // the entry is then ignored by Untgz, so only its physical data has to be skipped.
  private sparseEntries: Array<[number, number]> = [];
  private sparsePhysical = 0;

  private startOldGnuSparse(raw: RawHeader, h: TarHeader, physical: number): void {
    if (raw.format !== 'gnu') throw new TarError(ERR_TAR_HEADER);
    const p = new NumParser();
    h.size = p.numeric(raw.block, 483, 12);
    if (p.err) throw new TarError(ERR_TAR_HEADER);
    this.sparseHeader = h;
    this.sparsePhysical = physical;
    this.sparseEntries = [];
    if (this.readSparseEntries(raw.block, 386, 4, 482)) {
      this.state = 'sparseExt';
      return;
    }
    this.finishOldGnuSparse();
  }

  private onSparseExt(): void {
    this.countBytes(BLOCK);
    if (!this.readSparseEntries(this.blk, 0, 21, 504)) this.finishOldGnuSparse();
  }

  /** Returns true when an extension block follows. */
  private readSparseEntries(b: Buffer, off: number, count: number, extendedAt: number): boolean {
    const p = new NumParser();
    for (let i = 0; i < count; i++) {
      const at = off + i * 24;
      if (b[at] === 0) break;
      const offset = p.numeric(b, at, 12);
      const length = p.numeric(b, at + 12, 12);
      if (p.err) throw new TarError(ERR_TAR_HEADER);
      this.sparseEntries.push([offset, length]);
    }
    return b[extendedAt]! > 0;
  }

  private finishOldGnuSparse(): void {
    const h = this.sparseHeader!;
    if (!validSparse(this.sparseEntries, h.size)) throw new TarError(ERR_TAR_HEADER);
    this.startData(this.sparsePhysical, this.emit(h, this.sparsePhysical) ? 'consume' : 'skip');
  }
}

function validSparse(entries: Array<[number, number]>, size: number): boolean {
  if (size < 0) return false;
  let preEnd = 0;
  for (const [offset, length] of entries) {
    if (offset < 0 || length < 0 || offset > Number.MAX_SAFE_INTEGER - length) return false;
    if (offset + length > size || preEnd > offset) return false;
    preEnd = offset + length;
  }
  return true;
}

function isZero(b: Buffer): boolean {
  for (let i = 0; i < b.length; i++) if (b[i] !== 0) return false;
  return true;
}

/** Go's parser.parseString: bytes up to the first NUL. */
function cString(b: Buffer, start = 0, end = b.length): string {
  const nul = b.indexOf(0, start);
  return b.toString('utf8', start, nul >= 0 && nul < end ? nul : end);
}

function isAscii(s: string): boolean {
  return /^[\x00-\x7f]*$/.test(s);
}

/** Go's numeric field parser (octal or base-256), remembering the first error. */
class NumParser {
  err = false;

  numeric(b: Buffer, off: number, len: number): number {
    if (b[off]! & 0x80) {
      const inv = b[off]! & 0x40 ? 0xff : 0;
      let x = 0n;
      for (let i = 0; i < len; i++) {
        let c = b[off + i]! ^ inv;
        if (i === 0) c &= 0x7f;
        if (x >> 56n > 0n) {
          this.err = true;
          return 0;
        }
        x = (x << 8n) | BigInt(c);
      }
      if (x >> 63n > 0n) {
        this.err = true;
        return 0;
      }
      return Number(inv ? -x - 1n : x);
    }
    return this.octal(b, off, len);
  }

  octal(b: Buffer, off: number, len: number): number {
    let s = off;
    let e = off + len;
    while (s < e && (b[s] === 0x20 || b[s] === 0)) s++;
    while (e > s && (b[e - 1] === 0x20 || b[e - 1] === 0)) e--;
    if (s === e) return 0;
    const digits = cString(b, s, e);
    if (!/^[0-7]+$/.test(digits)) {
      this.err = true;
      return 0;
    }
    return parseInt(digits, 8);
  }
}

function checksumOk(b: Buffer): boolean {
  const p = new NumParser();
  const value = p.octal(b, 148, 8);
  if (p.err) return false;
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const c = i >= 148 && i < 156 ? 0x20 : b[i]!;
    unsigned += c;
    signed += c > 127 ? c - 256 : c;
  }
  return value === unsigned || value === signed;
}

function formatOf(b: Buffer): RawHeader['format'] {
  const magic = b.toString('latin1', 257, 263);
  const version = b.toString('latin1', 263, 265);
  if (magic === 'ustar\0' && b.toString('latin1', 508, 512) === 'tar\0') return 'star';
  if (magic === 'ustar\0') return 'ustar';
  if (magic === 'ustar ' && version === ' \0') return 'gnu';
  return 'v7';
}

/** Go's readHeader for one non-zero block. */
function readHeader(b: Buffer): RawHeader {
  if (!checksumOk(b)) throw new TarError(ERR_TAR_HEADER);
  const format = formatOf(b);
  const p = new NumParser();
  const h: RawHeader = {
    format,
    block: b,
    typeflag: String.fromCharCode(b[156]!),
    name: cString(b, 0, 100),
    linkname: cString(b, 157, 257),
    size: p.numeric(b, 124, 12),
    mode: p.numeric(b, 100, 8),
    uid: p.numeric(b, 108, 8),
    gid: p.numeric(b, 116, 8),
    mtime: p.numeric(b, 136, 12),
  };
  if (format !== 'v7') {
    p.numeric(b, 329, 8);
    p.numeric(b, 337, 8);
    let prefix = '';
    if (format === 'ustar') prefix = cString(b, 345, 500);
    else if (format === 'star') prefix = cString(b, 345, 476);
    else {
      // Pre-Go1.8 writers put a USTAR prefix into the GNU atime/ctime fields.
      const p2 = new NumParser();
      if (b[345] !== 0) p2.numeric(b, 345, 12);
      if (b[357] !== 0) p2.numeric(b, 357, 12);
      if (p2.err) {
        const s = cString(b, 345, 500);
        if (isAscii(s)) prefix = s;
      }
    }
    if (prefix.length > 0) h.name = `${prefix}/${h.name}`;
  }
  if (p.err) throw new TarError(ERR_TAR_HEADER);
  return h;
}

const INT64 = /^[+-]?\d+$/;

function parseInt64(s: string): number | undefined {
  if (!INT64.test(s)) return undefined;
  // Over 19 significant digits is out of range: say so without BigInt, whose parse of a 1 MiB
  // PAX value is superlinear (Go's ParseInt stops at the overflow). Leading zeros are allowed.
  let i = s[0] === '+' || s[0] === '-' ? 1 : 0;
  while (i < s.length - 1 && s[i] === '0') i++;
  if (s.length - i > 19) return undefined;
  const v = BigInt((s[0] === '-' ? '-' : '') + s.slice(i));
  if (v > 0x7fffffffffffffffn || v < -0x8000000000000000n) return undefined;
  return Number(v);
}

/** Go's parsePAX over the raw payload (record lengths count bytes). */
function parsePax(buf: Buffer): Map<string, string> {
  const out = new Map<string, string>();
  const sparseMap: string[] = [];
  let off = 0;
  while (off < buf.length) {
    const sp = buf.indexOf(0x20, off);
    if (sp < 0) throw new TarError(ERR_TAR_HEADER);
    const nStr = buf.toString('latin1', off, sp);
    const n = parseInt64(nStr);
    const left = buf.length - off;
    if (n === undefined || n < 5 || n > left) throw new TarError(ERR_TAR_HEADER);
    const recEnd = off + n;
    if (recEnd - (sp + 1) <= 0 || buf[recEnd - 1] !== 0x0a) throw new TarError(ERR_TAR_HEADER);
    const rec = buf.subarray(sp + 1, recEnd - 1);
    const eq = rec.indexOf(0x3d);
    if (eq < 0) throw new TarError(ERR_TAR_HEADER);
    const kb = rec.subarray(0, eq);
    const vb = rec.subarray(eq + 1);
    const k = kb.toString('utf8');
    const v = vb.toString('utf8');
    const pathLike = k === 'path' || k === 'linkpath' || k === 'uname' || k === 'gname';
    if (k === '' || (pathLike ? vb.includes(0) : kb.includes(0))) throw new TarError(ERR_TAR_HEADER);
    if (k === 'GNU.sparse.offset' || k === 'GNU.sparse.numbytes') {
      const wantOffset = sparseMap.length % 2 === 0;
      if (wantOffset !== (k === 'GNU.sparse.offset') || v.includes(',')) throw new TarError(ERR_TAR_HEADER);
      sparseMap.push(v);
    } else out.set(k, v);
    off = recEnd;
  }
  if (sparseMap.length > 0) out.set('GNU.sparse.map', sparseMap.join(','));
  return out;
}

function validPaxTime(s: string): boolean {
  const dot = s.indexOf('.');
  const secs = dot < 0 ? s : s.slice(0, dot);
  const frac = dot < 0 ? '' : s.slice(dot + 1);
  return parseInt64(secs) !== undefined && /^\d*$/.test(frac);
}

/** Go's mergePAX: empty values keep the header's own. */
function mergePax(h: TarHeader, pax: Map<string, string>): void {
  for (const [k, v] of pax) {
    if (v === '') continue;
    let ok = true;
    switch (k) {
      case 'path':
        h.name = v;
        break;
      case 'linkpath':
        h.linkname = v;
        break;
      case 'uid':
      case 'gid':
      case 'size': {
        const n = parseInt64(v);
        ok = n !== undefined;
        if (n !== undefined) h[k] = n;
        break;
      }
      case 'mtime':
      case 'atime':
      case 'ctime':
        ok = validPaxTime(v);
        if (ok && k === 'mtime') h.mtime = Math.trunc(Number(v));
        break;
    }
    if (!ok) throw new TarError(ERR_TAR_HEADER);
  }
}

function isPaxSparse(pax: Map<string, string>): boolean {
  const major = pax.get('GNU.sparse.major');
  const minor = pax.get('GNU.sparse.minor');
  if ((major === '0' && (minor === '0' || minor === '1')) || (major === '1' && minor === '0')) return true;
  if ((major ?? '') !== '' || (minor ?? '') !== '') return false;
  return (pax.get('GNU.sparse.map') ?? '') !== '';
}
