// Go `json.Marshal` of the generic values sigs.k8s.io/yaml hands it: compact, map keys sorted by
// byte-wise (UTF-8) order, HTML-safe escaping, Go float64 formatting, NaN/Inf rejected.
import { GoFloat, type GoMap, type GoValue } from './go-values.js';

const NEEDS_ESCAPE = /["\\\u0000-\u001f<>&\u2028\u2029\ud800-\udfff]/;
const HEX = '0123456789abcdef';

/** Go json string encoding with `escapeHTML` on (what json.Marshal uses). */
export function goJsonQuote(s: string): string {
  if (!NEEDS_ESCAPE.test(s)) return '"' + s + '"';
  let out = '"';
  let from = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let esc: string | undefined;
    if (c < 0x20) {
      if (c === 0x0a) esc = '\\n';
      else if (c === 0x0d) esc = '\\r';
      else if (c === 0x09) esc = '\\t';
      // Go >= 1.22 uses the short forms for \b and \f too.
      else if (c === 0x08) esc = '\\b';
      else if (c === 0x0c) esc = '\\f';
      else esc = '\\u00' + HEX[c >> 4]! + HEX[c & 15]!;
    } else if (c === 0x22) esc = '\\"';
    else if (c === 0x5c) esc = '\\\\';
    else if (c === 0x3c) esc = '\\u003c';
    else if (c === 0x3e) esc = '\\u003e';
    else if (c === 0x26) esc = '\\u0026';
    else if (c === 0x2028) esc = '\\u2028';
    else if (c === 0x2029) esc = '\\u2029';
    else if (c >= 0xd800 && c <= 0xdfff) {
      // A valid surrogate pair is one astral character, written raw; a lone surrogate stands for
      // bytes that were not UTF-8, which Go writes as U+FFFD.
      const next = s.charCodeAt(i + 1);
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) i++;
      else esc = '\\ufffd';
    }
    if (esc !== undefined) {
      out += s.slice(from, i) + esc;
      from = i + 1;
    }
  }
  return out + s.slice(from) + '"';
}

/** Go's float64 JSON encoding: shortest round-trip digits, `e` form outside [1e-6, 1e21), `-0` kept. */
export function formatGoJsonFloat(f: number): string {
  if (!Number.isFinite(f)) {
    throw new Error(`json: unsupported value: ${Number.isNaN(f) ? 'NaN' : f > 0 ? '+Inf' : '-Inf'}`);
  }
  // ECMAScript Number#toString picks the same digits and the same thresholds as Go; only -0 differs.
  if (f === 0 && Object.is(f, -0)) return '-0';
  return String(f);
}

const SURROGATE = /[\ud800-\udfff]/;

/** strings.Compare order: UTF-16 order except that astral characters (surrogates) sort after U+E000..U+FFFF. */
function compareUtf8(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x !== y) {
      if (x >= 0xd800 && y >= 0xd800) {
        x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
        y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
      }
      return x - y;
    }
  }
  return a.length - b.length;
}

function sortedKeys(m: GoMap): string[] {
  const keys = [...m.keys()] as string[];
  keys.sort();
  for (const k of keys) {
    if (SURROGATE.test(k)) {
      keys.sort(compareUtf8);
      break;
    }
  }
  return keys;
}

/** Thrown by a bounded encode when the text grows past its limit. */
export class EncodeLimit extends Error {}

function encode(v: GoValue, limit: number): string {
  if (typeof v === 'string') {
    const q = goJsonQuote(v);
    if (q.length > limit) throw new EncodeLimit();
    return q;
  }
  if (typeof v === 'number' || typeof v === 'bigint') return v.toString();
  if (v === null) return 'null';
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (v instanceof GoFloat) return formatGoJsonFloat(v.value);
  if (Array.isArray(v)) {
    let out = '[';
    for (let i = 0; i < v.length; i++) {
      out += (i === 0 ? '' : ',') + encode(v[i]!, limit - out.length);
      if (out.length > limit) throw new EncodeLimit();
    }
    return out + ']';
  }
  let out = '{';
  let first = true;
  for (const k of sortedKeys(v)) {
    out += (first ? '' : ',') + goJsonQuote(k) + ':';
    out += encode(v.get(k)!, limit - out.length);
    if (out.length > limit) throw new EncodeLimit();
    first = false;
  }
  return out + '}';
}

/**
 * json.Marshal of a value whose map keys are all strings (sigs.k8s.io/yaml converted them before).
 * Throws `json: unsupported value: NaN|+Inf|-Inf` like Go. With `maxChars`, throws EncodeLimit as
 * soon as the text would be longer than that many UTF-16 code units: a document whose aliases
 * expand far past the text is refused before its text is built.
 */
export function goJsonMarshal(v: GoValue, maxChars = Infinity): string {
  return encode(v, maxChars);
}

/**
 * The UTF-8 byte length of goJsonMarshal(v), without building the text: each shared string, map
 * and list (aliases decode to shared values) is measured once, so the cost follows the value's
 * own size, not its expansion. Throws what goJsonMarshal throws, for the same value first.
 */
export function goJsonByteLength(v: GoValue, seen = new Map<object | string, number>()): number {
  if (typeof v === 'string') {
    if (v.length < 64) return Buffer.byteLength(goJsonQuote(v));
    let n = seen.get(v);
    if (n === undefined) seen.set(v, (n = Buffer.byteLength(goJsonQuote(v))));
    return n;
  }
  if (typeof v === 'number' || typeof v === 'bigint') return v.toString().length;
  if (v === null) return 4;
  if (typeof v === 'boolean') return v ? 4 : 5;
  if (v instanceof GoFloat) return formatGoJsonFloat(v.value).length;
  let n = seen.get(v);
  if (n !== undefined) return n;
  if (Array.isArray(v)) {
    n = 2 + Math.max(0, v.length - 1);
    for (const x of v) n += goJsonByteLength(x, seen);
  } else {
    n = 2 + Math.max(0, v.size - 1);
    for (const k of sortedKeys(v)) n += goJsonByteLength(k as string, seen) + 1 + goJsonByteLength(v.get(k)!, seen);
  }
  seen.set(v, n);
  return n;
}
