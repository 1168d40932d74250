/*
 * Go's time.ParseDuration and Duration.String(), computed on int64 nanoseconds (as BigInt) so
 * overflow and rounding behave as in Go; the public API speaks milliseconds.
 */

const NS = 1n;
const US = 1000n * NS;
const MS = 1000n * US;
const SEC = 1000n * MS;
const UNITS: Record<string, bigint> = {
  ns: NS,
  us: US,
  'µs': US, // U+00B5 micro sign
  'μs': US, // U+03BC Greek mu
  ms: MS,
  s: SEC,
  m: 60n * SEC,
  h: 3600n * SEC,
};
const LIMIT = 1n << 63n;

// The time package's own quote(): ASCII kept (with \" and \\), every other byte as \xNN.
function timeQuote(s: string): string {
  let out = '"';
  for (const byte of Buffer.from(s, 'utf8')) {
    if (byte >= 0x80 || byte < 0x20) out += `\\x${byte.toString(16).padStart(2, '0')}`;
    else {
      const c = String.fromCharCode(byte);
      out += c === '"' || c === '\\' ? '\\' + c : c;
    }
  }
  return out + '"';
}

const isDigit = (c: string | undefined) => c !== undefined && c >= '0' && c <= '9';

/** Go's `time.ParseDuration`, in nanoseconds. Throws Go's error texts. */
export function parseGoDurationNs(orig: string): bigint {
  const invalid = () => new Error(`time: invalid duration ${timeQuote(orig)}`);
  let s = orig;
  let neg = false;
  if (s[0] === '-' || s[0] === '+') {
    neg = s[0] === '-';
    s = s.slice(1);
  }
  if (s === '0') return 0n;
  if (s === '') throw invalid();
  let d = 0n;
  while (s !== '') {
    if (!(s[0] === '.' || isDigit(s[0]))) throw invalid();
    let i = 0;
    let v = 0n;
    for (; isDigit(s[i]); i++) {
      if (v > LIMIT / 10n) throw invalid();
      v = v * 10n + BigInt(s.charCodeAt(i) - 48);
      if (v > LIMIT) throw invalid();
    }
    const pre = i > 0;
    s = s.slice(i);
    let f = 0n;
    let scale = 1;
    let post = false;
    if (s[0] === '.') {
      // Go's leadingFraction: digits past int64 precision are consumed but ignored.
      let j = 1;
      let overflow = false;
      for (; isDigit(s[j]); j++) {
        if (overflow) continue;
        if (f > (LIMIT - 1n) / 10n) {
          overflow = true;
          continue;
        }
        const y = f * 10n + BigInt(s.charCodeAt(j) - 48);
        if (y > LIMIT) {
          overflow = true;
          continue;
        }
        f = y;
        scale *= 10;
      }
      post = j > 1;
      s = s.slice(j);
    }
    if (!pre && !post) throw invalid();
    let u = 0;
    while (u < s.length && !(s[u] === '.' || isDigit(s[u]))) u++;
    if (u === 0) throw new Error(`time: missing unit in duration ${timeQuote(orig)}`);
    const unitText = s.slice(0, u);
    s = s.slice(u);
    const unit = UNITS[unitText];
    if (unit === undefined) {
      throw new Error(`time: unknown unit ${timeQuote(unitText)} in duration ${timeQuote(orig)}`);
    }
    if (v > LIMIT / unit) throw invalid();
    v *= unit;
    if (f > 0n) {
      // float64 arithmetic, as Go: nanosecond-accurate for fractions of an hour.
      v += BigInt(Math.trunc(Number(f) * (Number(unit) / scale)));
      if (v > LIMIT) throw invalid();
    }
    d += v;
    if (d > LIMIT) throw invalid();
  }
  if (neg) return -d;
  if (d > LIMIT - 1n) throw invalid();
  return d;
}

/** Go's `time.ParseDuration` (`90s`, `1m30s`, `1h2m3.5s`, `500ms`, `0`), in milliseconds. */
export function parseGoDuration(s: string): number {
  return Number(parseGoDurationNs(s)) / 1e6;
}

// Go's fmtFrac: ".ddd" of v / 10^prec without trailing zeros (nothing when zero).
function fmtFrac(v: bigint, prec: number): [string, bigint] {
  let digits = '';
  let print = false;
  for (let i = 0; i < prec; i++) {
    const digit = v % 10n;
    print ||= digit !== 0n;
    if (print) digits = digit.toString() + digits;
    v /= 10n;
  }
  return [print ? '.' + digits : '', v];
}

/** Go's `Duration.String()` of a nanosecond count. */
export function formatGoDurationNs(d: bigint): string {
  const neg = d < 0n;
  let u = neg ? -d : d;
  let out: string;
  if (u < SEC) {
    if (u === 0n) return '0s';
    const [prec, unit] = u < US ? [0, 'ns'] : u < MS ? [3, 'µs'] : [6, 'ms'];
    const [frac, whole] = fmtFrac(u, prec);
    out = `${whole}${frac}${unit}`;
  } else {
    const [frac, secs] = fmtFrac(u, 9);
    u = secs;
    out = `${u % 60n}${frac}s`;
    u /= 60n;
    if (u > 0n) {
      out = `${u % 60n}m${out}`;
      u /= 60n;
      if (u > 0n) out = `${u}h${out}`;
    }
  }
  return neg ? '-' + out : out;
}

/** Go's `Duration.String()` of a millisecond count (`1s`, `1m30s`, `1h0m0s`, `1.5s`, `0s`). */
export function formatGoDuration(ms: number): string {
  return formatGoDurationNs(BigInt(Math.round(ms * 1e6)));
}
