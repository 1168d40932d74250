// go-yaml v2's reader (readerc.go) rejects malformed UTF-8 and control characters anywhere in the
// input it reads, before any syntax is looked at. js-yaml would either accept them or word it differently.
import { isUtf8 } from 'node:buffer';

const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u0084\u0086-\u009f\ufffe\uffff]/;

function allowed(v: number): boolean {
  return (
    v === 0x09 || v === 0x0a || v === 0x0d || (v >= 0x20 && v <= 0x7e) || v === 0x85 ||
    (v >= 0xa0 && v <= 0xd7ff) || (v >= 0xe000 && v <= 0xfffd) || (v >= 0x10000 && v <= 0x10ffff)
  );
}

/** The reader error go-yaml reports for `buf` (without the `yaml: ` prefix), in input order. */
function slowCheck(buf: Uint8Array): string | undefined {
  let i = buf.length >= 3 && buf[0] === 0xef && buf[1] === 0xbb && buf[2] === 0xbf ? 3 : 0;
  while (i < buf.length) {
    const b = buf[i]!;
    let width: number;
    let v: number;
    if ((b & 0x80) === 0) [width, v] = [1, b];
    else if ((b & 0xe0) === 0xc0) [width, v] = [2, b & 0x1f];
    else if ((b & 0xf0) === 0xe0) [width, v] = [3, b & 0x0f];
    else if ((b & 0xf8) === 0xf0) [width, v] = [4, b & 0x07];
    else return 'invalid leading UTF-8 octet';
    if (i + width > buf.length) return 'incomplete UTF-8 octet sequence';
    for (let k = 1; k < width; k++) {
      const o = buf[i + k]!;
      if ((o & 0xc0) !== 0x80) return 'invalid trailing UTF-8 octet';
      v = (v << 6) + (o & 0x3f);
    }
    if (!(width === 1 || (width === 2 && v >= 0x80) || (width === 3 && v >= 0x800) || (width === 4 && v >= 0x10000))) {
      return 'invalid length of a UTF-8 sequence';
    }
    if ((v >= 0xd800 && v <= 0xdfff) || v > 0x10ffff) return 'invalid Unicode character';
    if (!allowed(v)) return 'control characters are not allowed';
    i += width;
  }
  return undefined;
}

/**
 * Decodes a YAML chunk as go-yaml's reader would: the text, or the reader's error message
 * (`invalid leading UTF-8 octet`, `control characters are not allowed`, ...).
 */
export function readYamlText(buf: Uint8Array): { text: string } | { error: string } {
  if (!isUtf8(buf)) return { error: slowCheck(buf) ?? 'invalid leading UTF-8 octet' };
  const text = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength).toString('utf8');
  if (CONTROL.test(text)) return { error: 'control characters are not allowed' };
  return { text };
}
