// The generic values go-yaml v2 produces when decoding into interface{}, as we model them in JS.
//
//   nil → null, bool → boolean, string → string,
//   int/int64 → number when it is a safe integer, otherwise bigint (exact 64-bit),
//   uint64 (only values above MaxInt64) → bigint > MAX_INT64,
//   float64 → GoFloat (so that 1.0 stays a float: it matters for float keys and `-0`),
//   []interface{} → GoValue[], map[interface{}]interface{} → GoMap.
//
// GoMap keys are already the strings sigs.k8s.io/yaml will turn them into; the two key kinds it rejects
// are kept as-is so the conversion error can be reported later: `null` (nil) and bigint (uint64).

/** A Go float64. */
export class GoFloat {
  constructor(readonly value: number) {}
}

export type GoKey = string | null | bigint;
export type GoMap = Map<GoKey, GoValue>;
export type GoValue = null | boolean | number | bigint | string | GoFloat | GoValue[] | GoMap;

export const MAX_INT64 = 0x7fffffffffffffffn;

/** Go `strconv.Quote`-style double-quoted string, as `%#v` prints strings. */
export function goQuote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '"' || ch === '\\') out += '\\' + ch;
    else if (c === 7) out += '\\a';
    else if (c === 8) out += '\\b';
    else if (c === 12) out += '\\f';
    else if (c === 10) out += '\\n';
    else if (c === 13) out += '\\r';
    else if (c === 9) out += '\\t';
    else if (c === 11) out += '\\v';
    else if (c < 0x20 || c === 0x7f) out += '\\x' + c.toString(16).padStart(2, '0');
    else if ((c >= 0x80 && c <= 0xa0) || c === 0xad || c === 0x2028 || c === 0x2029 || c === 0xfeff) {
      out += '\\u' + c.toString(16).padStart(4, '0');
    } else out += ch;
  }
  return out + '"';
}

/** Go `strconv.FormatFloat(f, 'g', -1, 64)` (what `%v` prints for a float64). */
export function formatGoFloatG(f: number): string {
  if (Number.isNaN(f)) return 'NaN';
  if (f === Infinity) return '+Inf';
  if (f === -Infinity) return '-Inf';
  return formatShortestG(f, f.toExponential());
}

/**
 * Go `%g` with the shortest digits (`FormatFloat(f, 'g', -1, n)`): `exp` is JS `toExponential(...)`
 * output carrying exactly those digits. Shortest %g uses exponent form when exp < -4 || exp >= 6, with
 * at least two exponent digits (`1e+06`, `1e-07`).
 */
export function formatShortestG(f: number, exp: string): string {
  const neg = f < 0 || Object.is(f, -0);
  const m = /^-?(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(exp)!;
  const digits = m[1]! + (m[2] ?? '');
  const e = Number(m[3]);
  let body: string;
  if (e < -4 || e >= 6) {
    const mant = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const ae = Math.abs(e);
    body = `${mant}e${e < 0 ? '-' : '+'}${ae < 10 ? '0' : ''}${ae}`;
  } else if (e >= 0) {
    body = digits.length > e + 1 ? `${digits.slice(0, e + 1)}.${digits.slice(e + 1)}` : digits + '0'.repeat(e + 1 - digits.length);
  } else {
    body = `0.${'0'.repeat(-e - 1)}${digits}`;
  }
  return (neg ? '-' : '') + body;
}

/** Go `fmt` `%#v` of a decoded YAML value, for the error texts that embed one. */
export function goSharpV(v: GoValue): string {
  if (v === null) return '<nil>';
  if (typeof v === 'string') return goQuote(v);
  if (typeof v === 'boolean' || typeof v === 'number') return String(v);
  if (typeof v === 'bigint') return v > MAX_INT64 ? `0x${v.toString(16)}` : v.toString();
  if (v instanceof GoFloat) return formatGoFloatG(v.value);
  if (Array.isArray(v)) return `[]interface {}{${v.map(goSharpV).join(', ')}}`;
  const entries = [...v.entries()]
    .map(([k, val]) => [k === null ? '<nil>' : typeof k === 'bigint' ? `0x${k.toString(16)}` : goQuote(k), goSharpV(val)] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return `map[interface {}]interface {}{${entries.map(([k, val]) => `${k}:${val}`).join(', ')}}`;
}

/**
 * sigs.k8s.io/yaml's float map key: `strconv.FormatFloat(f, 'g', -1, 32)`, i.e. the value rounded to
 * float32 and printed with the fewest digits that round-trip as a float32.
 */
export function formatFloat32Key(f: number): string {
  const f32 = Math.fround(f);
  if (Number.isNaN(f32)) return 'NaN';
  if (f32 === Infinity) return '+Inf';
  if (f32 === -Infinity) return '-Inf';
  if (f32 === 0) return Object.is(f32, -0) ? '-0' : '0';
  for (let p = 1; p <= 9; p++) {
    const exp = f32.toExponential(p - 1);
    if (Math.fround(Number(exp)) === f32) return formatShortestG(f32, exp.replace(/\.?0+e/, 'e'));
  }
  return formatShortestG(f32, f32.toExponential(8));
}
