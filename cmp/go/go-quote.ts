import { decodeRune } from './filepath-glob.js';

const RUNE_ERROR = 0xfffd;
const C_ESCAPES: Record<number, string> = {
  0x07: '\\a',
  0x08: '\\b',
  0x0c: '\\f',
  0x0a: '\\n',
  0x0d: '\\r',
  0x09: '\\t',
  0x0b: '\\v',
};

// Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space.
const PRINTABLE = /^[\p{L}\p{M}\p{N}\p{P}\p{S} ]$/u;

function hex(n: number, width: number): string {
  return n.toString(16).padStart(width, '0');
}

/**
 * Go's `strconv.Quote`: double-quoted, `\"` and `\\` escaped, C escapes, `\xNN` for bytes that
 * are not valid UTF-8 (pass the bytes to see them), `\uNNNN`/`\UNNNNNNNN` for non-printable
 * runes, printable non-ASCII kept as is.
 */
export function goQuote(s: string | Uint8Array): string {
  const b = typeof s === 'string' ? Buffer.from(s, 'utf8') : s;
  let out = '"';
  for (let i = 0; i < b.length; ) {
    const [r, width] = decodeRune(b, i);
    if (width === 1 && r === RUNE_ERROR) {
      out += `\\x${hex(b[i]!, 2)}`;
      i++;
      continue;
    }
    i += width;
    const ch = String.fromCodePoint(r);
    if (r === 0x22 || r === 0x5c) out += '\\' + ch;
    else if (PRINTABLE.test(ch)) out += ch;
    else if (C_ESCAPES[r] !== undefined) out += C_ESCAPES[r];
    else if (r < 0x20 || r === 0x7f) out += `\\x${hex(r, 2)}`;
    else if (r < 0x10000) out += `\\u${hex(r, 4)}`;
    else out += `\\U${hex(r, 8)}`;
  }
  return out + '"';
}

// Go's unicode.IsSpace (White_Space, not JS's \s, which adds U+FEFF and lacks U+0085).
const GO_SPACE = /[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/u;

/**
 * Argo's `GetCommandArgsToLog`, the `<ARGS>` of a CmdError: args joined by single spaces, an
 * empty arg as `""`, an arg containing Unicode whitespace quoted with Go's strconv.Quote.
 */
export function formatArgs(argv: readonly string[]): string {
  return argv.map(a => (a === '' ? '""' : GO_SPACE.test(a) ? goQuote(a) : a)).join(' ');
}
