/**
 * The few pieces of Go's encoding/json (json.Marshal, HTML escaping on) the repo-server's
 * ARGOCD_APP_PARAMETERS needs: strings, string lists and string maps with byte-wise sorted keys.
 */

const HEX = '0123456789abcdef';

/** A JS string as Go's json.Marshal writes a string (Go ≥ 1.22 escapes: `\b`, `\f`, `\u00XX`, `<>&`, U+2028/9). */
export function goJsonString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    switch (ch) {
      case '"':
        out += '\\"';
        continue;
      case '\\':
        out += '\\\\';
        continue;
      case '\b':
        out += '\\b';
        continue;
      case '\f':
        out += '\\f';
        continue;
      case '\n':
        out += '\\n';
        continue;
      case '\r':
        out += '\\r';
        continue;
      case '\t':
        out += '\\t';
        continue;
    }
    if (c < 0x20 || ch === '<' || ch === '>' || ch === '&') out += `\\u00${HEX[c >> 4]}${HEX[c & 0xf]}`;
    else if (c === 0x2028 || c === 0x2029) out += `\\u202${HEX[c & 0xf]}`;
    // A lone surrogate is what invalid UTF-8 becomes on our side; Go writes such bytes as U+FFFD.
    else if (c >= 0xd800 && c <= 0xdfff) out += '\\ufffd';
    else out += ch;
  }
  return out + '"';
}

export function goJsonStringArray(items: readonly string[]): string {
  return `[${items.map(goJsonString).join(',')}]`;
}

/** A map[string]string: keys in Go's order (byte-wise on UTF-8, not JS's UTF-16 order). */
export function goJsonStringMap(map: Readonly<Record<string, string>>): string {
  const keys = Object.keys(map).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return `{${keys.map((k) => `${goJsonString(k)}:${goJsonString(map[k]!)}`).join(',')}}`;
}
