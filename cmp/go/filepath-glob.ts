import { posix } from 'node:path';
import { compareGoStrings, realFs, type GlobFs } from './glob-fs.js';

/** Go's `filepath.ErrBadPattern` text. */
export const BAD_PATTERN_TEXT = 'syntax error in pattern';

// A port of Go's path/filepath match.go (Unix). It works on UTF-8 bytes, as Go does, so that
// `*` skipping one byte at a time and `?` decoding a rune behave identically on every name.
const SEP = 0x2f;
const STAR = 0x2a;
const BACKSLASH = 0x5c;
const LBRACKET = 0x5b;
const RBRACKET = 0x5d;
const QUESTION = 0x3f;
const CARET = 0x5e;
const DASH = 0x2d;
const RUNE_ERROR = 0xfffd;
const EMPTY = new Uint8Array(0);

function badPattern(): Error {
  return new Error(BAD_PATTERN_TEXT);
}

/** Go's utf8.DecodeRune: [rune, size]; invalid input yields [U+FFFD, 1], empty [U+FFFD, 0]. */
export function decodeRune(b: Uint8Array, i = 0): [number, number] {
  const n = b.length - i;
  if (n < 1) return [RUNE_ERROR, 0];
  const c0 = b[i]!;
  if (c0 < 0x80) return [c0, 1];
  let size: number;
  let lo = 0x80;
  let hi = 0xbf;
  if (c0 >= 0xc2 && c0 <= 0xdf) size = 2;
  else if (c0 >= 0xe0 && c0 <= 0xef) {
    size = 3;
    if (c0 === 0xe0) lo = 0xa0;
    if (c0 === 0xed) hi = 0x9f;
  } else if (c0 >= 0xf0 && c0 <= 0xf4) {
    size = 4;
    if (c0 === 0xf0) lo = 0x90;
    if (c0 === 0xf4) hi = 0x8f;
  } else return [RUNE_ERROR, 1];
  if (n < size) return [RUNE_ERROR, 1];
  const c1 = b[i + 1]!;
  if (c1 < lo || c1 > hi) return [RUNE_ERROR, 1];
  let r = c0 & (0xff >> (size + 1));
  r = (r << 6) | (c1 & 0x3f);
  for (let k = 2; k < size; k++) {
    const ck = b[i + k]!;
    if (ck < 0x80 || ck > 0xbf) return [RUNE_ERROR, 1];
    r = (r << 6) | (ck & 0x3f);
  }
  return [r, size];
}

interface Chunk {
  star: boolean;
  chunk: Uint8Array;
  rest: Uint8Array;
}

function scanChunk(pattern: Uint8Array): Chunk {
  let k = 0;
  while (k < pattern.length && pattern[k] === STAR) k++;
  const p = pattern.subarray(k);
  let inRange = false;
  let i = 0;
  scan: for (; i < p.length; i++) {
    switch (p[i]) {
      case BACKSLASH:
        if (i + 1 < p.length) i++;
        break;
      case LBRACKET:
        inRange = true;
        break;
      case RBRACKET:
        inRange = false;
        break;
      case STAR:
        if (!inRange) break scan;
        break;
    }
  }
  return { star: k > 0, chunk: p.subarray(0, i), rest: p.subarray(i) };
}

function getEsc(chunk: Uint8Array): [number, Uint8Array] {
  if (chunk.length === 0 || chunk[0] === DASH || chunk[0] === RBRACKET) throw badPattern();
  if (chunk[0] === BACKSLASH) {
    chunk = chunk.subarray(1);
    if (chunk.length === 0) throw badPattern();
  }
  const [r, n] = decodeRune(chunk);
  if (r === RUNE_ERROR && n === 1) throw badPattern();
  const next = chunk.subarray(n);
  if (next.length === 0) throw badPattern();
  return [r, next];
}

/**
 * Go's matchChunk: the rest of `s` after matching `chunk` at its start, or undefined. After a
 * failure it keeps parsing the chunk so a malformed pattern is still reported.
 */
function matchChunk(chunk: Uint8Array, s: Uint8Array): Uint8Array | undefined {
  let failed = false;
  while (chunk.length > 0) {
    if (!failed && s.length === 0) failed = true;
    const c = chunk[0];
    if (c === LBRACKET) {
      let r = 0;
      if (!failed) {
        const [rr, n] = decodeRune(s);
        r = rr;
        s = s.subarray(n);
      }
      chunk = chunk.subarray(1);
      let negated = false;
      if (chunk.length > 0 && chunk[0] === CARET) {
        negated = true;
        chunk = chunk.subarray(1);
      }
      let match = false;
      let nrange = 0;
      for (;;) {
        if (chunk.length > 0 && chunk[0] === RBRACKET && nrange > 0) {
          chunk = chunk.subarray(1);
          break;
        }
        let lo: number;
        [lo, chunk] = getEsc(chunk);
        let hi = lo;
        if (chunk[0] === DASH) [hi, chunk] = getEsc(chunk.subarray(1));
        if (lo <= r && r <= hi) match = true;
        nrange++;
      }
      if (match === negated) failed = true;
    } else if (c === QUESTION) {
      if (!failed) {
        if (s[0] === SEP) failed = true;
        s = s.subarray(decodeRune(s)[1]);
      }
      chunk = chunk.subarray(1);
    } else {
      if (c === BACKSLASH) {
        chunk = chunk.subarray(1);
        if (chunk.length === 0) throw badPattern();
      }
      if (!failed) {
        if (chunk[0] !== s[0]) failed = true;
        s = s.subarray(1);
      }
      chunk = chunk.subarray(1);
    }
  }
  return failed ? undefined : s;
}

function matchBytes(pattern: Uint8Array, name: Uint8Array): boolean {
  outer: while (pattern.length > 0) {
    const { star, chunk, rest } = scanChunk(pattern);
    pattern = rest;
    // A trailing * matches the rest of the name unless it has a /.
    if (star && chunk.length === 0) return !name.includes(SEP);
    const t = matchChunk(chunk, name);
    if (t !== undefined && (t.length === 0 || pattern.length > 0)) {
      name = t;
      continue;
    }
    if (star) {
      for (let i = 0; i < name.length && name[i] !== SEP; i++) {
        const t2 = matchChunk(chunk, name.subarray(i + 1));
        if (t2 !== undefined) {
          if (pattern.length === 0 && t2.length > 0) continue;
          name = t2;
          continue outer;
        }
      }
    }
    // Before answering "no", make sure the rest of the pattern is well-formed (Go does).
    while (pattern.length > 0) {
      const next = scanChunk(pattern);
      pattern = next.rest;
      matchChunk(next.chunk, EMPTY);
    }
    return false;
  }
  return name.length === 0;
}

/**
 * Go's `filepath.Match(pattern, name)` on Unix. Throws `Error('syntax error in pattern')`
 * (ErrBadPattern) exactly when Go returns it.
 */
export function goMatch(pattern: string, name: string): boolean {
  return matchBytes(Buffer.from(pattern, 'utf8'), Buffer.from(name, 'utf8'));
}

function hasMeta(p: string): boolean {
  return /[*?[\\]/.test(p);
}

// Go's cleanGlobPath for the dir half of Split(pattern).
function cleanGlobPath(dir: string): string {
  if (dir === '') return '.';
  if (dir === '/') return dir;
  return dir.slice(0, -1);
}

// Go's pathSeparatorsLimit: recursion guard against hostile patterns (issue 15879).
const MAX_DEPTH = 10000;

/**
 * Go's `filepath.Glob(pattern)` on Unix, against `fs`. A malformed pattern throws
 * `Error('syntax error in pattern')` even when nothing exists; a pattern without meta
 * characters matches via lstat (so broken symlinks match); I/O errors mean "no match".
 */
export async function goGlob(pattern: string, fs: GlobFs = realFs): Promise<string[]> {
  return globWithLimit(pattern, 0, fs);
}

async function globWithLimit(pattern: string, depth: number, fs: GlobFs): Promise<string[]> {
  if (depth === MAX_DEPTH) throw badPattern();
  goMatch(pattern, '');
  if (!hasMeta(pattern)) {
    const st = await fs.lstat(pattern).catch(() => undefined); // Go: any Lstat error means no match
    return st ? [pattern] : [];
  }
  const slash = pattern.lastIndexOf('/');
  const dir = cleanGlobPath(pattern.slice(0, slash + 1));
  const file = pattern.slice(slash + 1);
  if (!hasMeta(dir)) return globDir(dir, file, [], fs);
  if (dir === pattern) throw badPattern();
  let matches: string[] = [];
  for (const d of await globWithLimit(dir, depth + 1, fs)) {
    matches = await globDir(d, file, matches, fs);
  }
  return matches;
}

// Go's glob(dir, pattern, matches): every failure to read `dir` is ignored.
async function globDir(dir: string, pattern: string, matches: string[], fs: GlobFs): Promise<string[]> {
  const st = await fs.stat(dir).catch(() => undefined); // ignored, as said above
  if (!st?.isDir) return matches;
  const names = await fs.readdir(dir).catch(() => undefined); // ignored, as said above
  if (!names) return matches;
  const pat = Buffer.from(pattern, 'utf8');
  for (const n of [...names].sort(compareGoStrings)) {
    if (matchBytes(pat, Buffer.from(n, 'utf8'))) matches.push(posix.join(dir, n));
  }
  return matches;
}
