import type { CmpError } from '../errors.js';
import { ourError } from '../errors.js';
import { goQuote } from '../go/go-quote.js';

/**
 * Linux's PATH_MAX: no syscall takes a longer path, so Argo's Untgz of a longer name fails with
 * ENAMETOOLONG whatever its destination. The repo-server builds names from a real filesystem
 * walk, so it never sends one.
 */
export const MAX_PATH_BYTES = 4096;
/** Linux's NAME_MAX: the longest path component any Linux filesystem stores. */
export const MAX_NAME_BYTES = 255;
/** How much of a rejected path the error quotes: the name itself may be 1 MiB. */
const QUOTED_BYTES = 100;

/**
 * The limit on entry names, checked on every entry before anyone acts on it (index and extraction
 * share the tar reader): the name as clean(join(D, name)) places it, relative to D, must have at
 * most MAX_PATH_BYTES bytes and no component over MAX_NAME_BYTES. This also bounds the depth
 * (≤ 2048 components), hence everything done per component of a path. Linear in the name.
 */
export function checkPathLength(name: string): void {
  // Quick accept: a UTF-16 unit is at most three UTF-8 bytes.
  if (name.length * 3 <= MAX_NAME_BYTES) return;
  const parts: string[] = [];
  for (const c of name.split('/')) {
    if (c === '' || c === '.') continue;
    // `..` above D: clamped here; extraction rejects such a name as an illegal filepath.
    if (c === '..') parts.pop();
    else parts.push(c);
  }
  let bytes = parts.length > 0 ? parts.length - 1 : 0;
  let longest = 0;
  for (const c of parts) {
    const n = Buffer.byteLength(c);
    bytes += n;
    if (n > longest) longest = n;
  }
  if (bytes > MAX_PATH_BYTES || longest > MAX_NAME_BYTES) throw pathTooLong(parts.join('/'), bytes, longest);
}

function pathTooLong(rel: string, bytes: number, longest: number): CmpError {
  const head = Buffer.from(rel.slice(0, QUOTED_BYTES)).subarray(0, QUOTED_BYTES);
  return ourError('pathTooLong', goQuote(head) + (bytes > QUOTED_BYTES ? '…' : ''), bytes, longest);
}
